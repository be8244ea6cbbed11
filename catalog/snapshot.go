package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

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
