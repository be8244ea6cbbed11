-- Erasure (docs/architecture.md#erasure): the ledger counts what the
-- erasure step did, and the oldest pending erasure of a star is found
-- through the pending erasures only, however many were applied before.
ALTER TABLE nova.auditor_runs
  ADD COLUMN objects_rewritten  bigint NOT NULL DEFAULT 0,
  ADD COLUMN records_tombstoned bigint NOT NULL DEFAULT 0,
  ADD COLUMN erasures_applied   bigint NOT NULL DEFAULT 0;
CREATE INDEX erasures_pending_age_idx ON nova.erasures (requested_at) WHERE applied_at IS NULL;
