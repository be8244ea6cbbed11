package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The reads behind the daemon's gauges and `auditor status`: the pool's
// counters, the unsettled records, the transit of each class, and the open
// intents and quarantine. They only read.

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

// ClassTransit summarises a class's unsettled data by the database clock.
// Quarantined streams count in Markers, OldestAge and OverAgeCap (their data
// is still in transit) but not in Due or Lag (settling skips them).
type ClassTransit struct {
	Class       string
	Markers     int64         // streams with unsettled refs
	Due         int64         // of them, past linger and not quarantined
	OverAgeCap  int64         // of them, older than the age cap
	OldestSince *time.Time    // the oldest unsettled ref's absorb time
	OldestAge   time.Duration // now() - OldestSince
	Lag         time.Duration // the most overdue stream's time past linger (0: none due)
}

// TransitByClass summarises both classes (always both, in the order
// standard, express) and returns the database clock it used.
func (db *DB) TransitByClass(ctx context.Context, star string, p DuePolicy) (time.Time, []ClassTransit, error) {
	rows, err := db.pool.Query(ctx, `
		WITH m AS (
			SELECT d.class, d.since,
			       CASE WHEN d.class = 'express' THEN $2::interval ELSE $4::interval END AS linger,
			       CASE WHEN d.class = 'express' THEN $3::interval ELSE $5::interval END AS cap,
			       EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = d.stream_id) AS held
			FROM nova.due_markers d JOIN nova.streams s USING (stream_id) WHERE s.star = $1)
		SELECT c.class, count(m.since),
		       count(*) FILTER (WHERE NOT m.held AND now() >= m.since + m.linger),
		       count(*) FILTER (WHERE now() > m.since + m.cap),
		       min(m.since),
		       coalesce(extract(epoch FROM now() - min(m.since)), 0)::float8,
		       coalesce(extract(epoch FROM max(now() - m.since - m.linger) FILTER (WHERE NOT m.held AND now() >= m.since + m.linger)), 0)::float8,
		       now()
		FROM unnest(ARRAY['standard', 'express']) WITH ORDINALITY AS c(class, ord)
		LEFT JOIN m ON m.class = c.class
		GROUP BY c.class, c.ord ORDER BY c.ord`, star, p.ExpressLinger, p.ExpressAgeCap, p.Linger, p.AgeCap)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("summarise transit of star %q: %w", star, err)
	}
	var now time.Time
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClassTransit, error) {
		var c ClassTransit
		var age, lag float64
		err := r.Scan(&c.Class, &c.Markers, &c.Due, &c.OverAgeCap, &c.OldestSince, &age, &lag, &now)
		c.OldestAge = time.Duration(age * float64(time.Second))
		c.Lag = time.Duration(lag * float64(time.Second))
		return c, err
	})
	if err != nil {
		return now, nil, fmt.Errorf("summarise transit of star %q: %w", star, err)
	}
	return now, out, nil
}

// Backlog counts the open intents and the quarantine (package trim counts
// the reap backlog in slots and objects).
type Backlog struct {
	PublishIntents int64      // open publishes (resumed by the next recover)
	OldestPublish  *time.Time // created_at of the oldest
	ReapIntents    int64      // armed object reaps
	Quarantined    int64      // quarantine rows (streams and slots)
}

// GetBacklog counts the star's open intents and quarantine.
func (db *DB) GetBacklog(ctx context.Context, star string) (Backlog, error) {
	var b Backlog
	err := db.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM nova.orphan_intents WHERE star = $1 AND kind = 'publish'),
		(SELECT min(created_at) FROM nova.orphan_intents WHERE star = $1 AND kind = 'publish'),
		(SELECT count(*) FROM nova.orphan_intents WHERE star = $1 AND kind = 'reap'),
		(SELECT count(*) FROM nova.quarantine WHERE star = $1)`, star).
		Scan(&b.PublishIntents, &b.OldestPublish, &b.ReapIntents, &b.Quarantined)
	if err != nil {
		return b, fmt.Errorf("count backlog of star %q: %w", star, err)
	}
	return b, nil
}
