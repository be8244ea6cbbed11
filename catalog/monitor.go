package catalog

import (
	"context"
	"fmt"
	"math"
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
func (lg *Ledger) UnsettledRecords(ctx context.Context, star string) (map[string]int64, error) {
	rows, err := lg.db.reader(ctx).Query(ctx, `
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
// is still in transit) but not in Due, Lag or Deferred (settling skips them).
type ClassTransit struct {
	Class       string
	Markers     int64         // streams with unsettled refs
	Due         int64         // of them, due (DueStreams' rule) and not quarantined
	OverAgeCap  int64         // of them, older than the age cap
	OldestSince *time.Time    // the oldest unsettled ref's absorb time
	OldestAge   time.Duration // now() - OldestSince
	// Lag is the most overdue due stream's time past the moment it became
	// due (0: none due): its linger, or for a stream the tail-growth rule
	// held back to its margin, that margin. A held-back stream whose
	// growth then passed the rule's thresholds counts from its linger (the
	// metastore does not say when it grew), or with cohorts from the later
	// of its linger and its cohort's turn's start.
	Lag time.Duration
	// Deferred are the streams past their linger that the tail-growth rule
	// holds back, or lets go but that wait for their cohort's turn (not
	// quarantined); DeferredBytes the rule's estimate of
	// the unsettled bytes they keep in transit slots (records times their
	// tails' bytes per record); DeferredDeadline the earliest age-cap
	// deadline (since + age cap) among them, nil when none waits.
	Deferred         int64
	DeferredBytes    int64
	DeferredDeadline *time.Time
}

// TransitByClass summarises both classes (always both, in the order
// standard, express) under the due policy, tail-growth rule included,
// and returns the database clock it used. Its cost is one row per due
// marker of the star, each with at most one catalog and one erasure index
// probe (dueMarkersSQL), flat in the catalog's history.
func (lg *Ledger) TransitByClass(ctx context.Context, star string, p DuePolicy) (time.Time, []ClassTransit, error) {
	rows, err := lg.db.reader(ctx).Query(ctx, `
		WITH m AS (`+dueMarkersSQL+`),
		f AS (SELECT m.*, NOT m.held AND now() >= m.due_at AS due,
		             NOT m.held AND now() >= m.since + m.linger AND now() < m.due_at AS deferred FROM m)
		SELECT c.class, count(f.since),
		       count(*) FILTER (WHERE f.due),
		       count(*) FILTER (WHERE now() > f.since + f.cap),
		       min(f.since),
		       coalesce(extract(epoch FROM now() - min(f.since)), 0)::float8,
		       coalesce(extract(epoch FROM max(now() - f.due_at) FILTER (WHERE f.due)), 0)::float8,
		       count(*) FILTER (WHERE f.deferred),
		       coalesce(sum(f.est) FILTER (WHERE f.deferred), 0)::float8,
		       min(f.since + f.cap) FILTER (WHERE f.deferred),
		       now()
		FROM unnest(ARRAY['standard', 'express']) WITH ORDINALITY AS c(class, ord)
		LEFT JOIN f ON f.class = c.class
		GROUP BY c.class, c.ord ORDER BY c.ord`, duePolicyArgs(star, p)...)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("summarise transit of star %q: %w", star, err)
	}
	var now time.Time
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClassTransit, error) {
		var c ClassTransit
		var age, lag, held float64
		err := r.Scan(&c.Class, &c.Markers, &c.Due, &c.OverAgeCap, &c.OldestSince, &age, &lag,
			&c.Deferred, &held, &c.DeferredDeadline, &now)
		c.OldestAge = time.Duration(age * float64(time.Second))
		c.Lag = time.Duration(lag * float64(time.Second))
		c.DeferredBytes = int64(math.Round(held))
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

// Backlog counts the star's open intents and quarantine.
func (lg *Ledger) Backlog(ctx context.Context, star string) (Backlog, error) {
	var b Backlog
	err := lg.db.reader(ctx).QueryRow(ctx, `SELECT
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
