-- The stray sweep (docs/architecture.md#strays): when the star's leader
-- last listed its streams' settled prefixes and its chain for objects no
-- metadata names, by the database clock. NULL, or no row: never, so the
-- next cycle sweeps. Adding a nullable column without a default rewrites
-- nothing.
ALTER TABLE nova.auditor_state ADD COLUMN strays_swept_at timestamptz;
