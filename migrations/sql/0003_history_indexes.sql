-- 0003: per-cycle statements whose cost does not grow with history.

-- Retention: the write path raises low_record; the auditor records in
-- retained_through the low_record below which it has removed every catalog
-- entry. A stream is in streams_retention_due_idx only while the two
-- differ, so a cycle finds the streams with something to retire without
-- reading every retention-enabled stream.
ALTER TABLE nova.streams ADD COLUMN retained_through bigint NOT NULL DEFAULT 0;
CREATE INDEX streams_retention_due_idx ON nova.streams (star, stream_id) WHERE low_record > retained_through;

-- The last run with an outcome (the last-success gauge, every 15 s on the
-- leader and on every standby).
CREATE INDEX auditor_runs_outcome_idx ON nova.auditor_runs (star, outcome, ended_at DESC, id DESC) WHERE NOT dry_run;
-- The runs left open by earlier holders (closed on every lease acquisition).
CREATE INDEX auditor_runs_open_idx ON nova.auditor_runs (star, token) WHERE ended_at IS NULL;

-- Pruning the consumed admin requests older than the history window.
CREATE INDEX admin_requests_consumed_idx ON nova.admin_requests (star, consumed_at) WHERE consumed_at IS NOT NULL;
