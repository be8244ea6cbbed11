-- Per-bucket progress of a slot reap: the buckets of the star's class that
-- have confirmed every slot of the range deleted. While one zone is down,
-- the healthy zones are done with the range and never receive its deletes
-- again; the reap is finished once every bucket is done.
ALTER TABLE nova.slot_reaps ADD COLUMN done_buckets text[] NOT NULL DEFAULT '{}';
