-- A lease is held by one process: holder is the operator's name for it,
-- instance a nonce the process draws at start. A live lease is taken over
-- only by the same holder and instance, so two processes given the same
-- --holder never fence each other.
ALTER TABLE nova.auditor_leases ADD COLUMN instance text NOT NULL DEFAULT '';

-- A trigger request is taken when a cycle starts to run it (taken_at,
-- consumed_by, run_id) and consumed when that cycle ran (consumed_at), with
-- what came of it; until then the cycles that tried it count in attempts and
-- the last one's failure is kept.
ALTER TABLE nova.admin_requests
  ADD COLUMN outcome    text CHECK (outcome IN ('done', 'failed')),
  ADD COLUMN reason     text,
  ADD COLUMN run_id     bigint,
  ADD COLUMN attempts   integer NOT NULL DEFAULT 0,
  ADD COLUMN last_error text,
  ADD COLUMN taken_at   timestamptz;

-- trigger --stream: the stream's next_record when the trigger was asked;
-- the request is done once the stream is settled through it.
ALTER TABLE nova.admin_requests ADD COLUMN target_record bigint;
