package catalog

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/migrations"
)

// The metastore's handle (DB): its pool (opened here, with the defaults
// the URL leaves unset and the classes of its failures) and the
// transactions every statement of the package runs in: plain (tx), in a
// savepoint, fenced by the star's lease (fenced, commitFenced), and the
// read snapshots (ReadOnly, reader, readTx).

// StreamID is a stream's identity (a Postgres uuid column): the format's
// bundlefmt.StreamID, whose String is the one printed form (the uuid form
// psql shows). pgx encodes and scans it as the [16]byte it is.
type StreamID = bundlefmt.StreamID

// DB is the metastore.
type DB struct {
	pool *pgxpool.Pool
	mut  Mutations // zero in production; only the fault explorer sets it
}

// DefaultMaxConns is the pool's size unless the URL sets pool_max_conns:
// enough for the default settle concurrency (16 streams, each one
// transaction at a time), the batches in flight (up to 4, each with a
// snapshot or intent transaction and a group committer) and the
// connections the daemon holds for itself (ReservedConns).
const DefaultMaxConns = 32

// ReservedConns are the pool connections the daemon uses beside settle's
// workers: the admin listener (held for as long as it listens), the lease
// renewal, the gauge refresh and one admin request or status read. A pool
// smaller than the settle concurrency plus these makes workers and the
// lease renewal queue for connections (auditor doctor warns).
const ReservedConns = 4

// setPoolDefaults applies the pool settings the URL leaves unset (the
// URL's pool_max_conns and connect_timeout win).
func setPoolDefaults(cfg *pgxpool.Config, url string) {
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = DefaultMaxConns
	}
	if !strings.Contains(url, "connect_timeout") {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > pingAfterIdle }
}

// pingAfterIdle: a pooled connection is pinged before use only when it sat
// idle this long (pgx pings after 1 s). A busy daemon's connections are
// rarely idle that long, and every ping is a round trip and a transaction
// on the server; a connection that died meanwhile fails its statement,
// which the caller retries as any lost connection.
const pingAfterIdle = 30 * time.Second

// ErrUnreachable wraps a failure to reach the database at start-up: no
// answer (a connection refused at the network level, a timeout, no route).
// Waiting may help; the URL may well be right.
var ErrUnreachable = errors.New("the database could not be reached")

// Open connects to the metastore and pings it. A server that answers and
// refuses the URL's credentials or database is ErrRefused; one that does
// not answer, ErrUnreachable. Errors never contain the URL's password.
func Open(ctx context.Context, url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %s", scrub(err.Error(), url))
	}
	setPoolDefaults(cfg, url)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnreachable, scrub(err.Error(), url))
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		class := ErrUnreachable
		if IsRefused(err) || isRejectedCertificate(err) {
			class = ErrRefused
		}
		return nil, fmt.Errorf("%w: %s@%s:%d/%s: %s", class, cfg.ConnConfig.User, cfg.ConnConfig.Host,
			cfg.ConnConfig.Port, cfg.ConnConfig.Database, scrub(err.Error(), url))
	}
	return &DB{pool: pool}, nil
}

// OpenLazy builds the metastore's pool without connecting, for a daemon
// that must come up (and report not ready) while the database is down:
// only a URL that does not parse is an error here.
func OpenLazy(url string) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %s", scrub(err.Error(), url))
	}
	setPoolDefaults(cfg, url)
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %s", scrub(err.Error(), url))
	}
	return &DB{pool: pool}, nil
}

// ErrRefused marks a database that answered and refused the URL (bad
// credentials, no such database, a TLS mode its pg_hba.conf rejects), or
// whose certificate the URL's TLS settings reject (another CA, another host
// name). Waiting does not help: a configuration problem.
var ErrRefused = errors.New("database refused the connection")

// isRejectedCertificate reports whether err is the server's certificate
// failing the URL's verification (sslmode=verify-ca, verify-full).
func isRejectedCertificate(err error) bool {
	var verify *tls.CertificateVerificationError
	var authority x509.UnknownAuthorityError
	var host x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &authority) || errors.As(err, &host)
}

// IsRefused reports whether err is the server refusing the URL's
// credentials or database name (SQLSTATE class 28, or 3D000).
func IsRefused(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "28") || pgErr.Code == "3D000")
}

// scrub removes a password that an error message might echo.
func scrub(msg, url string) string {
	if c, err := pgconn.ParseConfig(url); err == nil && c.Password != "" {
		msg = strings.ReplaceAll(msg, c.Password, "xxxxx")
	}
	return msg
}

// Pool is the connection pool, for catalog/writepath: the write path's side
// of the contract runs its statements over the same connections. Every
// other package reaches the database through catalog's accessors.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Close releases every connection.
func (db *DB) Close() { db.pool.Close() }

// Ping checks the database answers (for /readyz).
func (db *DB) Ping(ctx context.Context) error { return db.pool.Ping(ctx) }

// Migrate applies the embedded migrations.
func (db *DB) Migrate(ctx context.Context) ([]int, error) { return migrations.Up(ctx, db.pool) }

// MigrationStatus reads which migrations the database has applied and
// which of this binary's are pending; it changes nothing.
func (db *DB) MigrationStatus(ctx context.Context) (migrations.Status, error) {
	return migrations.ReadStatus(ctx, db.pool)
}

// SchemaVersion returns the database's schema version.
func (db *DB) SchemaVersion(ctx context.Context) (int, error) {
	return migrations.Version(ctx, db.pool)
}

// CheckSchema verifies the database is at this binary's schema version.
func (db *DB) CheckSchema(ctx context.Context) error { return migrations.Check(ctx, db.reader(ctx)) }

// Now is the database clock: every decision about time uses it.
func (db *DB) Now(ctx context.Context) (time.Time, error) {
	var t time.Time
	if err := db.pool.QueryRow(ctx, `SELECT now()`).Scan(&t); err != nil {
		return t, fmt.Errorf("read database clock: %w", err)
	}
	return t, nil
}

// IsRetryable reports whether a database error is transient (serialization
// failure, deadlock, lost connection, a connection refused for the
// server's limit): retry with backoff, change nothing.
func IsRetryable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "57P01", "57P02", "57P03", "08000", "08003", "08006", "53300":
			return true
		}
		return false
	}
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || errors.Is(err, ErrUnreachable)
}

// Transactions: plain, in a savepoint, and fenced by the star's lease
// (which lease.go takes and renews).

// tx runs fn in a transaction, committing when fn returns nil.
func (db *DB) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.pool, fn)
}

// savepoint runs fn in a savepoint of tx: released when fn succeeds,
// rolled back (fn's changes undone, tx usable again) when it fails.
func savepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(sp); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
		}
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// trySavepoint runs fn in a savepoint of tx: released when fn reports ok,
// rolled back when it declines or fails. Declined (false, nil): fn's
// changes are undone and tx is usable again, for the caller's fallback;
// an error only when tx is lost with it (the savepoint could not be made,
// released or rolled back, or ctx is done).
func trySavepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) (bool, error)) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("savepoint: %w", err)
	}
	ok, err := fn(sp)
	if err == nil && ok {
		if err := sp.Commit(ctx); err != nil {
			return false, fmt.Errorf("release savepoint: %w", err)
		}
		return true, nil
	}
	if rerr := sp.Rollback(ctx); rerr != nil {
		return false, errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
	}
	return false, ctx.Err()
}

// Fence identifies the lease a transaction runs under (docs/architecture.md#singleton-lease-and-fencing).
type Fence struct {
	Star   string
	Holder string
	Token  int64
}

// ErrStaleToken means the fencing token is no longer the star's current,
// unexpired lease: the caller lost leadership and must stop at once.
var ErrStaleToken = errors.New("stale fencing token: the lease was lost")

// fenced runs fn in a transaction that first checks the fencing token and
// aborts with ErrStaleToken when it is stale.
//
// The metastore contract gives the check as "SELECT 1 ... AND expires_at >
// now() FOR SHARE" (docs/metastore.md#the-auditors-fence). It is that statement with FOR KEY SHARE instead, and the
// guarantee is kept by the other side: a takeover locks the row FOR UPDATE
// (AcquireLeaseInstance), which conflicts with FOR KEY SHARE exactly as with
// FOR SHARE, so no new holder commits while a transaction that passed the
// check is open, and a check made after a takeover committed sees the new
// token and fails. What changes is the renewal: an UPDATE of expires_at
// takes FOR NO KEY UPDATE, which conflicts with FOR SHARE but not with FOR
// KEY SHARE. Under FOR SHARE a renewal waits for every open fenced
// transaction, and new share lockers join the lock without queueing behind
// it, so a busy leader starved its own renewal until the lease expired.
func (db *DB) fenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	return db.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM nova.auditor_leases WHERE star = $1 AND holder = $2 AND token = $3
			AND expires_at > now() FOR KEY SHARE`, f.Star, f.Holder, f.Token).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("star %q token %d: %w", f.Star, f.Token, ErrStaleToken)
		}
		if err != nil {
			return fmt.Errorf("check fencing token: %w", err)
		}
		return fn(tx)
	})
}

// boundStatements sets the transaction's statement_timeout to what is left
// of ctx's deadline (nothing when ctx has none).
func boundStatements(ctx context.Context, tx pgx.Tx) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	ms := max(time.Until(deadline).Milliseconds(), 1)
	if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true)`, fmt.Sprintf("%dms", ms)); err != nil {
		return fmt.Errorf("set statement timeout: %w", err)
	}
	return nil
}

// Mutations switch off rules of the metastore on purpose, for the fault
// explorer only (docs/architecture.md#the-fault-explorer): it runs with
// each one set to show that its episodes find the break. The zero value,
// the only one production ever has, changes nothing; nothing outside
// tests calls Mutated.
type Mutations struct {
	// ReusePlannedRevision opens a publish intent at the planned revision
	// even when the base's high-water is at or above it: the no-late-delete
	// rule off (docs/architecture.md#no-late-delete).
	ReusePlannedRevision bool
	// UnfencedCommits runs the settle and rewrite commits without the
	// lease fence: a stale leader's commit lands.
	UnfencedCommits bool
}

// Mutated is a handle on the same pool with the mutations m set. Closing
// either closes the pool of both.
func (db *DB) Mutated(m Mutations) *DB {
	c := *db
	c.mut = m
	return &c
}

// commitFenced is fenced for the commits of settled objects, unless the
// UnfencedCommits mutation is set.
func (db *DB) commitFenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	if db.mut.UnfencedCommits {
		return db.tx(ctx, fn)
	}
	return db.fenced(ctx, f, fn)
}

// A read snapshot groups a caller's reads into one read-only, repeatable
// read transaction: one commit and one consistent view instead of one
// implicit transaction per statement, for the daemon's gauge refresh and
// admin poll, which read a dozen rows of each star every tick. The
// snapshot travels in the context, so the reads keep their signatures.
// Only the reads that say so join it (db.reader, db.readTx); writes open
// their own transactions on the pool as always. A snapshot's transaction
// serves one goroutine: fn must not read from several at once.

// snapshotKey is the context key of a snapshot; its value is a *snapshot.
type snapshotKey struct{}

type snapshot struct {
	db *DB
	tx pgx.Tx
}

// querier is what a read needs: the pool or a snapshot's transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadOnly runs fn with a context whose reads of db share one read-only,
// repeatable read transaction, committed when fn returns nil. Nested calls
// join the outer snapshot.
func (db *DB) ReadOnly(ctx context.Context, fn func(ctx context.Context) error) error {
	if db.inSnapshot(ctx) != nil {
		return fn(ctx)
	}
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		return fn(context.WithValue(ctx, snapshotKey{}, &snapshot{db: db, tx: tx}))
	})
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	return nil
}

// inSnapshot is ctx's snapshot transaction of db, nil when it has none.
func (db *DB) inSnapshot(ctx context.Context) pgx.Tx {
	if s, ok := ctx.Value(snapshotKey{}).(*snapshot); ok && s.db == db {
		return s.tx
	}
	return nil
}

// reader is where a read runs: ctx's snapshot, or the pool.
func (db *DB) reader(ctx context.Context) querier {
	if tx := db.inSnapshot(ctx); tx != nil {
		return tx
	}
	return db.pool
}

// readTx runs fn in ctx's snapshot, or else in a read-only, repeatable read
// transaction of its own: for a read that needs several statements to see
// one state.
func (db *DB) readTx(ctx context.Context, fn func(pgx.Tx) error) error {
	if tx := db.inSnapshot(ctx); tx != nil {
		return fn(tx)
	}
	return pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}
