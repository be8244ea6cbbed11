-- The tail-growth rule's cohorts (docs/architecture.md, "the tail-growth
-- rule and its cost model"): a stream the rule has held and let go waits
-- for its cohort's turn, so that the held streams sharing a transit slot
-- settle in the same cycle and their chunks there are read together. The
-- star's turn is a counter its leader advances (fenced) at most once a
-- standard linger, kept across restarts and failovers beside the pause
-- and halt; the leader's number of cohorts is in its runtime row, so that
-- `auditor status` and every instance's gauges wait as the leader does.
-- A star without a turn yet (no row, or a NULL turn) has no cohorts:
-- every stream the rule lets go is due at once, as before this migration.
-- The cohorts are cut over the star's streams in stream-ID order, again
-- whenever the turn passes: cohort_bounds is the first stream ID of each
-- cohort but the first.
ALTER TABLE nova.auditor_state
  ADD COLUMN cohort_turn bigint CHECK (cohort_turn >= 0),
  ADD COLUMN cohort_turn_at timestamptz,
  ADD COLUMN cohort_bounds uuid[];
ALTER TABLE nova.auditor_runtime
  ADD COLUMN tail_cohorts integer NOT NULL DEFAULT 0 CHECK (tail_cohorts >= 0);
