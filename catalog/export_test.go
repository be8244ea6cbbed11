package catalog

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Fenced exposes fenced to the tests: fn runs after the token check, in
// its transaction.
func (db *DB) Fenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	return db.fenced(ctx, f, fn)
}

// LockWaiters counts the backends of this database waiting for a lock.
func (db *DB) LockWaiters(ctx context.Context) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	return n, err
}
