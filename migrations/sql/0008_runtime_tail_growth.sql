-- The tail-growth due rule (docs/architecture.md, "the tail-growth rule
-- and its cost model") in the leader's runtime row, beside its lingers and
-- age caps: `auditor status` and every instance's gauges then hold back
-- the streams the leader holds back, whatever their own flags say.
-- Rows written before this migration read as the rule off (0), until their
-- leader next takes the lease.
ALTER TABLE nova.auditor_runtime
  ADD COLUMN tail_growth double precision NOT NULL DEFAULT 0 CHECK (tail_growth >= 0),
  ADD COLUMN copy_floor_bytes bigint NOT NULL DEFAULT 0 CHECK (copy_floor_bytes >= 0);
