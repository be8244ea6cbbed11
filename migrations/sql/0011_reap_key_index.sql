-- The key index of orphan_intents holds reap intents only. A publish
-- intent (one per settled object, opened before its PUT and deleted by
-- its commit) is found by key through orphan_intents_publish_key_idx, so
-- a second entry for it in an index of every intent's key was written and
-- never read: one btree insert of a text key per settled object, about a
-- quarter of the WAL an intent costs (docs/architecture.md,
-- "Measurements"). The reap index is built before the old one goes, so
-- a reap intent's key is never without one.
CREATE INDEX orphan_intents_reap_key_idx ON nova.orphan_intents (object_key) WHERE kind = 'reap';
DROP INDEX nova.orphan_intents_key_idx;
