-- The key index of orphan_intents holds reap intents only. A publish
-- intent (one per settled object, opened before its PUT and deleted by
-- its commit) is found by key through orphan_intents_publish_key_idx, so
-- its entry in an index of every intent's key was written and never
-- needed: one btree insert of a text key per settled object, about a
-- tenth of the WAL a settled object writes (docs/measurements.md,
-- "The WAL of a settled object"). The table is locked first, in the mode DROP INDEX
-- needs: an auditor of the release before, still running while this
-- migrates, waits for it, instead of holding a lock the drop would wait
-- on while it waits for the build's (a deadlock, one side aborted).
LOCK TABLE nova.orphan_intents IN ACCESS EXCLUSIVE MODE;
CREATE INDEX orphan_intents_reap_key_idx ON nova.orphan_intents (object_key) WHERE kind = 'reap';
DROP INDEX nova.orphan_intents_key_idx;
