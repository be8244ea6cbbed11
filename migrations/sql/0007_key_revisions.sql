-- No late delete (docs/architecture.md#no-late-delete): a settled key once
-- handed to a publish intent or classified deletable is never published
-- again, so a DELETE of it that lands late (a paused leader, an SDK retry)
-- can only remove an object nothing references.
--
-- One row per key base (stream, stream epoch, first record): high_revision
-- is the highest revision of the base that any publish intent ever named
-- or the reap step classified deletable. A new publish intent of the base
-- is opened above it (catalog.OpenPublishIntent); only an intent still
-- open may be taken up again at its own revision.
CREATE TABLE nova.auditor_key_revisions (
  stream_id     uuid    NOT NULL,
  epoch         bigint  NOT NULL,
  first_record  bigint  NOT NULL,
  high_revision integer NOT NULL CHECK (high_revision >= 0),
  PRIMARY KEY (stream_id, epoch, first_record)
);

-- Every revision in use before this migration: the catalog's, and every
-- intent's (publish or reap) whose key parses as a settled key. Keys an
-- auditor from before it gave up and deleted have no intent left to tell;
-- a DELETE of one may still be in flight (an SDK retry). So the backfill
-- keeps one revision of headroom where such keys were: the revision after
-- each cataloged one (a tail or erasure rewrite), and revision 0 at each
-- stream's settled_through (a new run).
INSERT INTO nova.auditor_key_revisions (stream_id, epoch, first_record, high_revision)
SELECT stream_id, epoch, first_record, max(revision) FROM (
  SELECT stream_id, epoch, first_record, revision + 1 AS revision FROM nova.catalog WHERE revision < 2147483647
  UNION ALL
  SELECT stream_id, epoch, settled_through, 0 FROM nova.streams
  UNION ALL
  SELECT m[1]::uuid, m[2]::bigint, m[3]::bigint, m[4]::integer
  FROM nova.orphan_intents,
       regexp_match(object_key, '/streams/([0-9a-f]{32})/([0-9]{20})/([0-9]{20})~([0-9]{1,10})$') AS m
  WHERE m IS NOT NULL AND m[4]::bigint <= 2147483647
) used
GROUP BY stream_id, epoch, first_record;

-- A publish intent the reap step finds dead becomes a reap intent in the
-- transaction that buries its key; every upload of the key, recorded or
-- not, is then listed and aborted before the intent is finished, on every
-- retry until that succeeds.
ALTER TABLE nova.orphan_intents ADD COLUMN abort_unrecorded boolean NOT NULL DEFAULT false;
