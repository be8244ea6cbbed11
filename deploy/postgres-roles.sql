-- The Nova auditor's Postgres roles: least privilege on the schema `nova`
-- of the database this script runs in (docs/metastore.md#roles).
--
--   nova_migrator  owns the schema nova and every table the migrations
--                  create; runs `auditor migrate`, nothing else.
--   nova_auditor   everything else the auditor binary does (serve, run,
--                  status, verify, doctor, inspect, erase, trigger, pause,
--                  resume, release): exactly the tables, columns and verbs
--                  below, nothing more.
--   nova_reader    reads what `auditor status` (--json), `auditor ls` and `auditor
--                  verify` read: SELECT on exactly those tables, for
--                  operators, scripts and a dashboard's SQL panels; it
--                  can write nothing, and its sessions default to
--                  read-only transactions.
--
-- Run it as a superuser (on a managed service, its administrator role),
-- with psql, in the auditor's database; twice on a new database:
--
--   psql -v ON_ERROR_STOP=1 -d nova -f deploy/postgres-roles.sql  # roles, schema
--   auditor migrate --database-url postgres://nova_migrator@.../nova
--   psql -v ON_ERROR_STOP=1 -d nova -f deploy/postgres-roles.sql  # grants
--
-- and again after every `auditor migrate` of a new release, with that
-- release's copy of this file. It is idempotent: each run revokes whatever
-- nova_auditor held in the schema and grants the list below, in one
-- transaction. It is written for schema version 14; it grants nothing on a
-- database behind that (it says so) and refuses one ahead of it.
--
-- The roles are created with LOGIN and no password. Set one for each
-- (psql's \password nova_auditor, \password nova_migrator,
-- \password nova_reader), or use
-- your server's certificate or IAM authentication; this file holds no
-- secret. The write path's role is yours to create: docs/metastore.md
-- (#who-writes-what) lists what it writes.
--
-- internal/repocheck holds this file to the migrations; the test
-- TestLeastPrivilegeRoles (cmd/auditor) runs every auditor command as
-- nova_auditor and revokes each grant below in turn to see it needed;
-- TestReadOnlyRole (cmd/auditor) does the same for nova_reader
-- with status and verify, and sees it write nothing.

BEGIN;

DO $roles$
BEGIN
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'nova_migrator') THEN
    CREATE ROLE nova_migrator LOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'nova_auditor') THEN
    CREATE ROLE nova_auditor LOGIN;
  END IF;
  IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'nova_reader') THEN
    CREATE ROLE nova_reader LOGIN;
  END IF;
  -- A role made by hand before this script must not carry more power
  -- than the grants below.
  IF EXISTS (SELECT FROM pg_roles WHERE rolname IN ('nova_auditor', 'nova_migrator', 'nova_reader')
      AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls)) THEN
    RAISE EXCEPTION 'nova_auditor, nova_migrator or nova_reader has SUPERUSER, CREATEROLE, CREATEDB, REPLICATION or BYPASSRLS: take it away (ALTER ROLE) and run this script again';
  END IF;
  ALTER ROLE nova_migrator LOGIN;
  ALTER ROLE nova_auditor LOGIN;
  ALTER ROLE nova_reader LOGIN;
  -- A second guard beside the grants: its sessions start read-only.
  ALTER ROLE nova_reader SET default_transaction_read_only = on;
  -- CONNECT, for databases that revoke it from PUBLIC. CREATE: the
  -- migrations start with CREATE SCHEMA IF NOT EXISTS nova, which Postgres
  -- checks against the database even when the schema exists.
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO nova_migrator', current_database());
  EXECUTE format('GRANT CREATE ON DATABASE %I TO nova_migrator', current_database());
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO nova_auditor', current_database());
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO nova_reader', current_database());
END
$roles$;

CREATE SCHEMA IF NOT EXISTS nova AUTHORIZATION nova_migrator;

DO $grants$
DECLARE
  v integer;
  t text;
BEGIN
  IF (SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'nova') <> 'nova_migrator' THEN
    ALTER SCHEMA nova OWNER TO nova_migrator;
  END IF;
  -- nova_auditor may use the schema's objects, never create any.
  REVOKE ALL ON SCHEMA nova FROM nova_auditor;
  GRANT USAGE ON SCHEMA nova TO nova_auditor;
  REVOKE ALL ON SCHEMA nova FROM nova_reader;
  GRANT USAGE ON SCHEMA nova TO nova_reader;

  IF to_regclass('nova.schema_migrations') IS NULL THEN
    RAISE NOTICE 'schema nova is not migrated: run auditor migrate as nova_migrator, then this script again';
    RETURN;
  END IF;
  SELECT coalesce(max(m.version), 0) INTO v FROM nova.schema_migrations m;
  IF v > 14 THEN
    RAISE EXCEPTION 'schema nova is at version %, this script knows 14: run the copy of deploy/postgres-roles.sql of the release that migrated it', v;
  END IF;
  IF v < 14 THEN
    RAISE NOTICE 'schema nova is at version %, this script grants for 14: run auditor migrate as nova_migrator, then this script again', v;
    RETURN;
  END IF;

  -- The migration role owns every table the migrations create (and their
  -- sequences and indexes with them), so that later migrations may alter
  -- them: a database migrated as another role is handed over here. Only
  -- tables owned by another role are altered (ALTER TABLE locks the table).
  FOREACH t IN ARRAY ARRAY['schema_migrations',
      'stars', 'star_epochs', 'streams', 'span_refs', 'due_markers', 'erasures',
      'catalog', 'orphan_intents', 'auditor_key_revisions', 'trim_cursors', 'slot_reaps',
      'auditor_leases', 'auditor_runs', 'admin_requests', 'quarantine', 'auditor_state', 'auditor_runtime',
      'auditor_members', 'auditor_fleet_moves'] LOOP
    IF (SELECT relowner::regrole::text FROM pg_class WHERE oid = format('nova.%I', t)::regclass) <> 'nova_migrator' THEN
      EXECUTE format('ALTER TABLE nova.%I OWNER TO nova_migrator', t);
    END IF;
  END LOOP;

  -- Exactly the grants below, whatever an earlier run (or a hand) granted.
  REVOKE ALL ON ALL TABLES IN SCHEMA nova FROM nova_auditor;
  REVOKE ALL ON ALL SEQUENCES IN SCHEMA nova FROM nova_auditor;
  REVOKE ALL ON ALL ROUTINES IN SCHEMA nova FROM nova_auditor;

  -- The schema version (every command checks it).
  GRANT SELECT ON nova.schema_migrations TO nova_auditor;

  -- Tables the write path owns: read, and only the auditor-owned columns
  -- and rows written (docs/metastore.md#who-writes-what). SELECT ... FOR
  -- UPDATE of a streams row needs an UPDATE grant on one of its columns:
  -- the auditor's own two serve.
  GRANT SELECT ON nova.stars TO nova_auditor;
  GRANT SELECT ON nova.star_epochs TO nova_auditor;
  GRANT SELECT, UPDATE (settled_through, retained_through) ON nova.streams TO nova_auditor;
  GRANT SELECT, DELETE ON nova.span_refs TO nova_auditor;
  -- The settle commit's upsert of the marker (since = the oldest remaining
  -- ref), or its delete.
  GRANT SELECT, INSERT (stream_id, class, since), UPDATE (since), DELETE ON nova.due_markers TO nova_auditor;
  -- auditor erase records an erasure; the erase step marks it applied.
  GRANT SELECT, INSERT (stream_id, first_record, record_count), UPDATE (applied_at) ON nova.erasures TO nova_auditor;

  -- Tables the auditor owns.
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.catalog TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.orphan_intents TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.auditor_key_revisions TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE ON nova.trim_cursors TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.slot_reaps TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE ON nova.auditor_leases TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.auditor_runs TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.admin_requests TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.quarantine TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE ON nova.auditor_state TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE ON nova.auditor_runtime TO nova_auditor;
  GRANT SELECT, INSERT, UPDATE, DELETE ON nova.auditor_members TO nova_auditor;
  GRANT SELECT, INSERT, DELETE ON nova.auditor_fleet_moves TO nova_auditor;

  -- The bigserial ids of the rows the auditor inserts (nextval).
  GRANT USAGE ON SEQUENCE nova.orphan_intents_id_seq TO nova_auditor;
  GRANT USAGE ON SEQUENCE nova.slot_reaps_id_seq TO nova_auditor;
  GRANT USAGE ON SEQUENCE nova.auditor_runs_id_seq TO nova_auditor;
  GRANT USAGE ON SEQUENCE nova.admin_requests_id_seq TO nova_auditor;
  GRANT USAGE ON SEQUENCE nova.quarantine_id_seq TO nova_auditor;
  GRANT USAGE ON SEQUENCE nova.auditor_fleet_moves_id_seq TO nova_auditor;

  -- The read-only role: SELECT on what status (--json) and verify read,
  -- nothing else, whatever an earlier run granted. (status --fleet
  -- inserts the lease rows of new stars: it runs as nova_auditor.)
  REVOKE ALL ON ALL TABLES IN SCHEMA nova FROM nova_reader;
  REVOKE ALL ON ALL SEQUENCES IN SCHEMA nova FROM nova_reader;
  REVOKE ALL ON ALL ROUTINES IN SCHEMA nova FROM nova_reader;
  GRANT SELECT ON nova.schema_migrations TO nova_reader;
  GRANT SELECT ON nova.stars TO nova_reader;
  GRANT SELECT ON nova.star_epochs TO nova_reader;
  GRANT SELECT ON nova.streams TO nova_reader;
  GRANT SELECT ON nova.span_refs TO nova_reader;
  GRANT SELECT ON nova.due_markers TO nova_reader;
  GRANT SELECT ON nova.erasures TO nova_reader;
  GRANT SELECT ON nova.catalog TO nova_reader;
  GRANT SELECT ON nova.orphan_intents TO nova_reader;
  GRANT SELECT ON nova.trim_cursors TO nova_reader;
  GRANT SELECT ON nova.slot_reaps TO nova_reader;
  GRANT SELECT ON nova.auditor_leases TO nova_reader;
  GRANT SELECT ON nova.auditor_runs TO nova_reader;
  GRANT SELECT ON nova.admin_requests TO nova_reader;
  GRANT SELECT ON nova.quarantine TO nova_reader;
  GRANT SELECT ON nova.auditor_state TO nova_reader;
  GRANT SELECT ON nova.auditor_runtime TO nova_reader;
END
$grants$;

COMMIT;
