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

// StreamID is a stream's identity (a Postgres uuid column): the format's
// bundlefmt.StreamID, whose String is the one printed form (the uuid form
// psql shows). pgx encodes and scans it as the [16]byte it is.
type StreamID = bundlefmt.StreamID

// DB is the metastore.
type DB struct {
	pool *pgxpool.Pool
	mut  Mutations // zero in production (mutations.go)
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

// tx runs fn in a transaction, committing when fn returns nil.
func (db *DB) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.pool, fn)
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
