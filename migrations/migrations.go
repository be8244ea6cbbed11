package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed sql/*.sql
var files embed.FS

// lockKey is the advisory lock every migration transaction takes, so two
// runners never apply the same step twice ("nova-mig" in ASCII).
const lockKey int64 = 0x6e6f76612d6d6967

// ErrDatabaseNewer means the database's schema is newer than this binary:
// running an old binary against it could corrupt data, so everything refuses.
var ErrDatabaseNewer = errors.New("database schema is newer than this binary")

// ErrDatabaseBehind means the schema has not been migrated to this binary's
// version yet: run `auditor migrate`.
var ErrDatabaseBehind = errors.New("database schema is behind this binary (run `auditor migrate`)")

// Migration is one embedded SQL file: sql/NNNN_name.sql.
type Migration struct {
	Version int
	Name    string
	SQL     string
}

// All returns the embedded migrations in version order. The embedded set is
// checked at build time by the tests (dense versions from 1).
func All() ([]Migration, error) {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		return nil, fmt.Errorf("read embedded migrations: %w", err)
	}
	var out []Migration
	for _, e := range entries {
		name := e.Name()
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("embedded migration %q: name must be NNNN_name.sql", name)
		}
		b, err := files.ReadFile("sql/" + name)
		if err != nil {
			return nil, fmt.Errorf("read embedded migration %s: %w", name, err)
		}
		out = append(out, Migration{Version: v, Name: rest, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("embedded migrations are not dense: expected version %d, found %d", i+1, m.Version)
		}
	}
	return out, nil
}

// Latest is the schema version this binary was built with.
func Latest() int {
	all, err := All()
	if err != nil {
		return 0
	}
	return len(all)
}

// Beginner is what the runner needs: *pgx.Conn and *pgxpool.Pool both are.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Querier runs one query.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const bootstrap = `CREATE SCHEMA IF NOT EXISTS nova;
CREATE TABLE IF NOT EXISTS nova.schema_migrations (
  version    integer PRIMARY KEY,
  name       text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
)`

// Version returns the database's schema version (0 for an empty database).
func Version(ctx context.Context, q Querier) (int, error) {
	var v int
	// The simple protocol: one round trip and, outside a transaction, one
	// transaction (a prepared statement's Parse is one more, per connection).
	err := q.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM nova.schema_migrations`, pgx.QueryExecModeSimpleProtocol).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		return 0, nil // undefined table or schema: nothing applied yet
	}
	if err != nil {
		return 0, fmt.Errorf("read schema version: %w", err)
	}
	return v, nil
}

// Check verifies that the database is exactly at this binary's version.
func Check(ctx context.Context, q Querier) error {
	v, err := Version(ctx, q)
	if err != nil {
		return err
	}
	latest := Latest()
	switch {
	case v > latest:
		return fmt.Errorf("%w: database at version %d, binary knows %d", ErrDatabaseNewer, v, latest)
	case v < latest:
		return fmt.Errorf("%w: database at version %d, binary needs %d", ErrDatabaseBehind, v, latest)
	}
	return nil
}

// Up applies every migration the database lacks, each in its own transaction
// under an advisory transaction lock, and records each version. It is
// forward-only and refuses a database newer than the binary. It returns the
// versions it applied (none when the database is current).
func Up(ctx context.Context, db Beginner) ([]int, error) {
	return UpTo(ctx, db, Latest())
}

// UpTo is Up stopping after version target: a database left part way, as
// one an older binary migrated (for tests of what a newer binary finds).
func UpTo(ctx context.Context, db Beginner, target int) ([]int, error) {
	all, err := All()
	if err != nil {
		return nil, err
	}
	if target < 0 || target > len(all) {
		return nil, fmt.Errorf("migrate up to version %d: this binary knows 1 to %d", target, len(all))
	}
	var applied []int
	for _, m := range all[:target] {
		did, err := apply(ctx, db, m, len(all))
		if err != nil {
			return applied, err
		}
		if did {
			applied = append(applied, m.Version)
		}
	}
	return applied, nil
}

func apply(ctx context.Context, db Beginner, m Migration, latest int) (bool, error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("migration %d: begin: %w", m.Version, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
		return false, fmt.Errorf("migration %d: lock: %w", m.Version, err)
	}
	if _, err := tx.Exec(ctx, bootstrap); err != nil {
		return false, fmt.Errorf("migration %d: bootstrap version table: %w", m.Version, err)
	}
	cur, err := Version(ctx, tx)
	if err != nil {
		return false, err
	}
	if cur > latest {
		return false, fmt.Errorf("%w: database at version %d, binary knows %d", ErrDatabaseNewer, cur, latest)
	}
	if cur >= m.Version {
		return false, nil
	}
	if _, err := tx.Exec(ctx, m.SQL); err != nil {
		return false, fmt.Errorf("migration %d (%s): %w", m.Version, m.Name, err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO nova.schema_migrations (version, name) VALUES ($1, $2)`, m.Version, m.Name); err != nil {
		return false, fmt.Errorf("migration %d: record version: %w", m.Version, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("migration %d: commit: %w", m.Version, err)
	}
	return true, nil
}

// Applied is one row of the database's record of migrations.
type Applied struct {
	Version   int
	Name      string
	AppliedAt time.Time
}

// Rows runs one query returning rows: *pgx.Conn and *pgxpool.Pool both do.
type Rows interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Status is what the database has applied against what this binary knows.
type Status struct {
	Database int       // the database's version (0: nothing applied)
	Binary   int       // this binary's version (Latest)
	Applied  []Applied // every recorded migration, oldest first (versions above Binary included)
	Pending  []Migration
}

// Behind says migrations of this binary are not applied yet.
func (s Status) Behind() bool { return s.Database < s.Binary }

// Ahead says the database was migrated by a newer binary.
func (s Status) Ahead() bool { return s.Database > s.Binary }

// ReadStatus reads the database's migrations and compares them with this
// binary's. It only reads: an empty database (no schema nova, no version
// table) has nothing applied and everything pending.
func ReadStatus(ctx context.Context, q Rows) (Status, error) {
	all, err := All()
	if err != nil {
		return Status{}, err
	}
	s := Status{Binary: len(all)}
	rows, err := q.Query(ctx, `SELECT version, name, applied_at FROM nova.schema_migrations ORDER BY version`)
	if err == nil {
		s.Applied, err = pgx.CollectRows(rows, pgx.RowToStructByPos[Applied])
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000") {
		err = nil // undefined table or schema: nothing applied yet
	}
	if err != nil {
		return Status{}, fmt.Errorf("read applied migrations: %w", err)
	}
	for _, a := range s.Applied {
		s.Database = max(s.Database, a.Version)
	}
	// Up applies in version order, so what is pending is what lies above
	// the database's version (as Version and Check judge it).
	for _, m := range all {
		if m.Version > s.Database {
			s.Pending = append(s.Pending, m)
		}
	}
	return s, nil
}
