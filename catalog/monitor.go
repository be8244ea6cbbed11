package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// PoolStats is a snapshot of the connection pool, for the daemon's
// Postgres pool metrics.
type PoolStats struct {
	Max, Total, Idle, Acquired, Constructing int32
	// Cumulative since the pool was opened.
	Acquires, EmptyAcquires, CanceledAcquires   int64
	AcquireWait                                 time.Duration
	NewConns, MaxLifetimeDestroys, IdleDestroys int64
}

// PoolStats reads the pool's counters (no database round trip).
func (db *DB) PoolStats() PoolStats {
	s := db.pool.Stat()
	return PoolStats{
		Max: s.MaxConns(), Total: s.TotalConns(), Idle: s.IdleConns(), Acquired: s.AcquiredConns(),
		Constructing: s.ConstructingConns(),
		Acquires:     s.AcquireCount(), EmptyAcquires: s.EmptyAcquireCount(), CanceledAcquires: s.CanceledAcquireCount(),
		AcquireWait: s.AcquireDuration(),
		NewConns:    s.NewConnsCount(), MaxLifetimeDestroys: s.MaxLifetimeDestroyCount(), IdleDestroys: s.MaxIdleDestroyCount(),
	}
}

// UnsettledRecords counts the records a star's span refs still hold in
// transit (not yet settled), by class; both classes are always present.
// Refs are deleted as they settle, so this reads the unsettled backlog
// only (through span_refs_first_slot_idx's star prefix). The metastore
// records no byte sizes of refs, so records are the unit.
func (db *DB) UnsettledRecords(ctx context.Context, star string) (map[string]int64, error) {
	rows, err := db.pool.Query(ctx, `
		SELECT c.class, coalesce(sum(r.record_count), 0)::bigint
		FROM unnest(ARRAY['standard', 'express']) AS c(class)
		LEFT JOIN nova.span_refs r ON r.class = c.class AND r.star = $1
		GROUP BY c.class`, star)
	if err != nil {
		return nil, fmt.Errorf("count unsettled records of star %q: %w", star, err)
	}
	out := map[string]int64{}
	var class string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&class, &n}, func() error {
		out[class] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count unsettled records of star %q: %w", star, err)
	}
	return out, nil
}
