-- The store's marks (docs/architecture.md, "Rewind detection"): before a
-- leader changes anything a term (or a long cycle) depends on, it writes a
-- create-once marker object numbered one above the star's mark, commits the
-- mark here, and confirms the marker with a second object. A marker that
-- stands confirmed above the mark this row holds proves the metastore has
-- forgotten a commit (a restore from backup, or a failover to a replica
-- that lost its last commits), and the star halts (metastore_rewound)
-- until `auditor reconcile` has rebuilt the metastore from the store.
-- mark_at is when the mark was last committed (database clock), for
-- status. A star without a row, or with mark 0, has written no marker yet.
ALTER TABLE nova.auditor_state
  ADD COLUMN mark bigint NOT NULL DEFAULT 0 CHECK (mark >= 0),
  ADD COLUMN mark_at timestamptz;
