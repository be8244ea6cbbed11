package catalog

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A process that budgets its connections (a fleet member: its cycles'
// pool, its leases' pool and its LISTEN connection under one bound,
// docs/operations.md#connections) opens its pools with OpenBudgeted and
// watches the server refuse it connections through Refusals.

// PoolOptions size one pool of a budgeted process.
type PoolOptions struct {
	// MaxConns is the pool's size. The URL's pool_max_conns does not
	// apply: every pool of the process would take it, past the budget.
	MaxConns int32
	// Hold keeps MaxConns connections open for the pool's life (the
	// leases' pool: a renewal never waits for a connection the server
	// may refuse).
	Hold bool
	// IdleTx, when positive, is the sessions'
	// idle_in_transaction_session_timeout: a process paused (SIGSTOP, a
	// VM freeze) inside a fenced transaction holds a lock on its star's
	// lease row, which claims skip; the server ends such a transaction
	// (it rolls back: always safe) after IdleTx, so the star can move.
	IdleTx time.Duration
	// AppName is the sessions' application_name unless the URL sets one:
	// ServerConns tells the budgeted processes' connections from the
	// others' by it.
	AppName string
	// Refusals, when set, counts the connections the server refused.
	Refusals *Refusals
	// Tracer, when set, sees every statement of the pool (a test's count
	// of transactions).
	Tracer pgx.QueryTracer
}

// FleetAppName is the application_name of a fleet member's sessions.
const FleetAppName = "nova-auditor-fleet"

// OpenBudgeted builds a pool of a budgeted process without connecting
// (as OpenLazy: only a URL that does not parse is an error).
func OpenBudgeted(url string, o PoolOptions) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %s", scrub(err.Error(), url))
	}
	setPoolDefaults(cfg, url)
	cfg.MaxConns = max(o.MaxConns, 1)
	if o.Hold {
		cfg.MinConns = cfg.MaxConns
	}
	if o.IdleTx > 0 {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = strconv.FormatInt(o.IdleTx.Milliseconds(), 10)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["application_name"]; !set && o.AppName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = o.AppName
	}
	switch {
	case o.Refusals != nil && o.Tracer != nil:
		cfg.ConnConfig.Tracer = refusalsAnd{o.Refusals, o.Tracer}
	case o.Refusals != nil:
		cfg.ConnConfig.Tracer = o.Refusals
	case o.Tracer != nil:
		cfg.ConnConfig.Tracer = o.Tracer
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		return nil, fmt.Errorf("database pool: %s", scrub(err.Error(), url))
	}
	return &DB{pool: pool}, nil
}

// IsTooManyConnections reports whether err is the server refusing a
// connection for its limit or the role's (SQLSTATE 53300
// too_many_connections): retryable, and a sign the process's budget does
// not fit the server's.
func IsTooManyConnections(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}

// Refusals counts the connections the server refused a process with
// too_many_connections, and when it last did: a pgx tracer of connection
// attempts (the pools' statements pass through it untouched).
type Refusals struct {
	n    atomic.Int64
	last atomic.Int64 // UnixNano, 0: never
}

// Count is the number of refused connections.
func (r *Refusals) Count() int64 { return r.n.Load() }

// Last is when the server last refused a connection (zero: never).
func (r *Refusals) Last() time.Time {
	if ns := r.last.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// TraceConnectStart implements pgx.ConnectTracer.
func (r *Refusals) TraceConnectStart(ctx context.Context, _ pgx.TraceConnectStartData) context.Context {
	return ctx
}

// TraceConnectEnd implements pgx.ConnectTracer: it counts a refusal.
func (r *Refusals) TraceConnectEnd(_ context.Context, data pgx.TraceConnectEndData) {
	if IsTooManyConnections(data.Err) {
		r.n.Add(1)
		r.last.Store(time.Now().UnixNano())
	}
}

// TraceQueryStart implements pgx.QueryTracer (a connection tracer must be
// one): nothing.
func (r *Refusals) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer: nothing.
func (r *Refusals) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// refusalsAnd is a pool's Refusals and its statements' tracer.
type refusalsAnd struct {
	*Refusals
	q pgx.QueryTracer
}

func (r refusalsAnd) TraceQueryStart(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return r.q.TraceQueryStart(ctx, c, d)
}

func (r refusalsAnd) TraceQueryEnd(ctx context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	r.q.TraceQueryEnd(ctx, c, d)
}

// ServerConns is the server's connection limit and what uses it now.
type ServerConns struct {
	Max      int // max_connections
	Reserved int // superuser_reserved_connections, plus reserved_connections (Postgres 16 and later)
	InUse    int // client sessions connected now, this one included
	Budgeted int // of which sessions named appName (a fleet's members')
}

// Usable is what the server lets ordinary roles connect.
func (s ServerConns) Usable() int { return s.Max - s.Reserved }

// ServerConns reads the server's connection limit and the client sessions
// connected now, counting apart those whose application_name is appName.
// A role without pg_read_all_stats sees other roles' sessions without
// their application_name: they count as not appName's.
func (db *DB) ServerConns(ctx context.Context, appName string) (ServerConns, error) {
	var s ServerConns
	err := db.reader(ctx).QueryRow(ctx, `
SELECT current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int
         + coalesce(nullif(current_setting('reserved_connections', true), '')::int, 0),
       count(*) FILTER (WHERE backend_type = 'client backend'),
       count(*) FILTER (WHERE backend_type = 'client backend' AND application_name = $1)
FROM pg_stat_activity`, appName).Scan(&s.Max, &s.Reserved, &s.InUse, &s.Budgeted)
	if err != nil {
		return s, fmt.Errorf("read the server's connections: %w", err)
	}
	return s, nil
}

// URLSetsPoolSize reports whether a URL sets pool_max_conns (which a
// budgeted pool does not follow).
func URLSetsPoolSize(url string) bool { return strings.Contains(url, "pool_max_conns") }
