package writepath

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
)

// Statements only tests run: they read rows the auditor reads otherwise
// (a stream's refs whole), undo what the auditor or an operator would (a
// quarantine, an intent), or look at the server's counters.

// RefsOfStream reads a stream's span refs in record order.
func (db *DB) RefsOfStream(ctx context.Context, id catalog.StreamID) ([]catalog.SpanRef, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+catalog.SpanRefColumns+` FROM nova.span_refs WHERE stream_id = $1 ORDER BY first_record`, id)
	if err != nil {
		return nil, fmt.Errorf("read refs of stream %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (catalog.SpanRef, error) { return catalog.ScanSpanRef(r) })
	if err != nil {
		return nil, fmt.Errorf("read refs of stream %s: %w", id, err)
	}
	return out, nil
}

// ReleaseQuarantine lifts a stream's quarantine; it reports whether one existed.
func (db *DB) ReleaseQuarantine(ctx context.Context, star string, id catalog.StreamID) (bool, error) {
	tag, err := db.pool.Exec(ctx, `DELETE FROM nova.quarantine WHERE star = $1 AND stream_id = $2`, star, id)
	if err != nil {
		return false, fmt.Errorf("release stream %s: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

// DeleteIntent removes an intent, unfenced.
func (db *DB) DeleteIntent(ctx context.Context, id int64) error {
	if _, err := db.pool.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete intent %d: %w", id, err)
	}
	return nil
}

// CommittedTransactions is the server's count of committed transactions in
// this database (pg_stat_database; published about once a second), for
// benchmarks that report transactions per object.
func (db *DB) CommittedTransactions(ctx context.Context) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read transaction count: %w", err)
	}
	return n, nil
}

// WALPosition is the server's write-ahead log insert position in bytes, for
// benchmarks that report the WAL a cycle writes per object. It is the
// cluster's: every database's writes move it.
func (db *DB) WALPosition(ctx context.Context) (int64, error) {
	var n int64
	if err := db.pool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read the WAL position: %w", err)
	}
	return n, nil
}
