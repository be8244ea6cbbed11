-- 0001: the metastore contract of docs/metastore.md, exactly
-- those names and columns, plus the indexes the auditor's queries need and
-- the auditor's own tables whose columns the contract leaves to us.
CREATE SCHEMA IF NOT EXISTS nova;

-- Tables the write path owns.
CREATE TABLE nova.stars (
  star         text   PRIMARY KEY CHECK (star ~ '^[a-z0-9][a-z0-9-]{0,62}$'),
  chain_class  text   NOT NULL CHECK (chain_class IN ('standard','express')),
  epoch        bigint NOT NULL DEFAULT 1 CHECK (epoch >= 1),
  next_seq     bigint NOT NULL DEFAULT 0 CHECK (next_seq >= 0),
  fence_window integer NOT NULL DEFAULT 1 CHECK (fence_window >= 1)
);

CREATE TABLE nova.star_epochs (
  star        text   NOT NULL REFERENCES nova.stars,
  epoch       bigint NOT NULL CHECK (epoch >= 1),
  started_at  timestamptz NOT NULL DEFAULT now(),
  end_seq     bigint,
  PRIMARY KEY (star, epoch)
);

CREATE TABLE nova.streams (
  stream_id        uuid   PRIMARY KEY,
  star             text   NOT NULL REFERENCES nova.stars,
  bucket           text   NOT NULL CHECK (bucket ~ '^[a-z0-9][a-z0-9._-]{0,62}$'),
  epoch            bigint NOT NULL DEFAULT 1 CHECK (epoch >= 1),
  class            text   NOT NULL CHECK (class IN ('standard','express')),
  next_record      bigint NOT NULL DEFAULT 0,
  low_record       bigint NOT NULL DEFAULT 0,
  settled_through  bigint NOT NULL DEFAULT 0
);
CREATE INDEX streams_star_idx ON nova.streams (star);

CREATE TABLE nova.span_refs (
  stream_id       uuid     NOT NULL REFERENCES nova.streams,
  first_record    bigint   NOT NULL,
  record_count    bigint   NOT NULL CHECK (record_count > 0),
  star            text     NOT NULL,
  class           text     NOT NULL CHECK (class IN ('standard','express')),
  slot_epochs     bigint[] NOT NULL,
  slot_seqs       bigint[] NOT NULL,
  footer_offsets  bigint[] NOT NULL,
  footer_lengths  bigint[] NOT NULL,
  absorbed_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_id, first_record)
);
-- Trim bound: the earliest first slot of any remaining ref of a star (entries
-- are in ascending slot order, so element 1 is the ref's earliest slot).
CREATE INDEX span_refs_first_slot_idx ON nova.span_refs (star, (slot_epochs[1]), (slot_seqs[1]));

CREATE TABLE nova.due_markers (
  stream_id  uuid PRIMARY KEY REFERENCES nova.streams,
  class      text NOT NULL CHECK (class IN ('standard','express')),
  since      timestamptz NOT NULL
);
CREATE INDEX due_markers_since_idx ON nova.due_markers (class, since);

CREATE TABLE nova.erasures (
  stream_id     uuid   NOT NULL REFERENCES nova.streams,
  first_record  bigint NOT NULL,
  record_count  bigint NOT NULL CHECK (record_count > 0),
  requested_at  timestamptz NOT NULL DEFAULT now(),
  applied_at    timestamptz,
  PRIMARY KEY (stream_id, first_record)
);
CREATE INDEX erasures_pending_idx ON nova.erasures (stream_id) WHERE applied_at IS NULL;

-- Tables the auditor owns.
CREATE TABLE nova.catalog (
  stream_id      uuid    NOT NULL REFERENCES nova.streams,
  epoch          bigint  NOT NULL,
  first_record   bigint  NOT NULL,
  revision       integer NOT NULL CHECK (revision >= 0),
  record_count   bigint  NOT NULL CHECK (record_count > 0),
  object_bytes   bigint  NOT NULL,
  footer_offset  bigint  NOT NULL,
  footer_length  bigint  NOT NULL,
  min_timestamp  bigint  NOT NULL,
  max_timestamp  bigint  NOT NULL,
  class          text    NOT NULL DEFAULT 'standard',
  settled_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (stream_id, epoch, first_record)
);

CREATE TABLE nova.orphan_intents (
  id            bigserial PRIMARY KEY,
  star          text    NOT NULL,
  kind          text    NOT NULL CHECK (kind IN ('publish','reap')),
  object_key    text    NOT NULL,
  class         text    NOT NULL,
  upload_id     text,
  staged_parts  integer[] NOT NULL DEFAULT '{}',
  created_at    timestamptz NOT NULL DEFAULT now(),
  reap_after    timestamptz
);
CREATE UNIQUE INDEX orphan_intents_publish_key_idx ON nova.orphan_intents (object_key) WHERE kind = 'publish';
CREATE INDEX orphan_intents_kind_idx ON nova.orphan_intents (star, kind, reap_after);
CREATE INDEX orphan_intents_key_idx ON nova.orphan_intents (object_key);

CREATE TABLE nova.trim_cursors (
  star        text   PRIMARY KEY REFERENCES nova.stars,
  epoch       bigint NOT NULL,
  seq         bigint NOT NULL,
  updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE nova.slot_reaps (
  id          bigserial PRIMARY KEY,
  star        text   NOT NULL,
  from_epoch  bigint NOT NULL, from_seq bigint NOT NULL,
  to_epoch    bigint NOT NULL, to_seq   bigint NOT NULL,
  reap_after  timestamptz NOT NULL
);
CREATE INDEX slot_reaps_due_idx ON nova.slot_reaps (star, reap_after);

CREATE TABLE nova.auditor_leases (
  star        text   PRIMARY KEY,
  holder      text   NOT NULL,
  token       bigint NOT NULL,
  expires_at  timestamptz NOT NULL
);

-- The run ledger: one row per cycle.
CREATE TABLE nova.auditor_runs (
  id                 bigserial PRIMARY KEY,
  star               text   NOT NULL,
  holder             text   NOT NULL,
  token              bigint NOT NULL,
  trigger            text   NOT NULL,          -- schedule | manual | once | stream
  dry_run            boolean NOT NULL DEFAULT false,
  started_at         timestamptz NOT NULL DEFAULT now(),
  ended_at           timestamptz,
  outcome            text,                      -- ok | failed | halted | canceled | lost_lease
  streams_settled    bigint NOT NULL DEFAULT 0,
  streams_quarantined bigint NOT NULL DEFAULT 0,
  objects_published  bigint NOT NULL DEFAULT 0,
  objects_adopted    bigint NOT NULL DEFAULT 0,
  bytes_copied       bigint NOT NULL DEFAULT 0,  -- server side
  bytes_fetched      bigint NOT NULL DEFAULT 0,  -- through the auditor
  bytes_uploaded     bigint NOT NULL DEFAULT 0,
  s3_requests        bigint NOT NULL DEFAULT 0,
  slots_reaped       bigint NOT NULL DEFAULT 0,
  objects_reaped     bigint NOT NULL DEFAULT 0,
  error              text
);
CREATE INDEX auditor_runs_star_idx ON nova.auditor_runs (star, started_at DESC);

-- What an operator asked of the daemon (trigger, pause, resume, release),
-- and when the leader consumed it.
CREATE TABLE nova.admin_requests (
  id            bigserial PRIMARY KEY,
  star          text NOT NULL,
  kind          text NOT NULL CHECK (kind IN ('trigger','pause','resume','release')),
  stream_id     uuid,
  requested_by  text NOT NULL DEFAULT '',
  requested_at  timestamptz NOT NULL DEFAULT now(),
  consumed_at   timestamptz,
  consumed_by   text
);
CREATE INDEX admin_requests_open_idx ON nova.admin_requests (star, id) WHERE consumed_at IS NULL;

-- Streams or slots set aside with the reason; released by an operator.
CREATE TABLE nova.quarantine (
  id           bigserial PRIMARY KEY,
  star         text NOT NULL,
  stream_id    uuid,
  slot_key     text,
  error_class  text NOT NULL,                 -- corrupt | checksum | unsupported_version | missing | invariant
  reason       text NOT NULL,
  since        timestamptz NOT NULL DEFAULT now(),
  CHECK (stream_id IS NOT NULL OR slot_key IS NOT NULL)
);
CREATE UNIQUE INDEX quarantine_stream_idx ON nova.quarantine (stream_id) WHERE stream_id IS NOT NULL;

-- Persistent per-star daemon state (pause, halt).
CREATE TABLE nova.auditor_state (
  star          text PRIMARY KEY,
  paused        boolean NOT NULL DEFAULT false,
  paused_at     timestamptz,
  halted_reason text,
  halted_at     timestamptz
);
