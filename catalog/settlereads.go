package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The settle step's reads (Settle): which streams are due (DueStreams,
// under DuePolicy's rule and its cohorts, whose turn AdvanceCohortTurn
// passes), what a settle reads of them (StreamSnapshots, RefsWindow,
// WithPendingErasures), and the tiling check after its commits
// (FirstOverlap). The commits are in settle.go, the publish intents in
// intents.go, the quarantine in quarantine.go.

// DueStream is a stream selected for settling.
type DueStream struct {
	Stream   StreamID
	Class    string
	Since    time.Time
	Deadline time.Time // since + age cap of its class
	Forced   bool      // named by --stream or a trigger, regardless of linger
}

// DuePolicy is the linger and age cap of each class, and the tail-growth
// rule (docs/architecture.md#the-tail-growth-rule-and-its-cost-model).
type DuePolicy struct {
	Linger, AgeCap               time.Duration
	ExpressLinger, ExpressAgeCap time.Duration
	// TailGrowth is --denorm-tail-growth, the fraction f of the
	// tail-growth rule: a stream past its linger whose standing tail (its
	// last catalog entry, ending at settled_through) is smaller than
	// CopyFloor waits, unless its unsettled bytes reach f times the
	// tail's or pass CopyFloor, until its age-cap deadline less
	// DeferMargin. A forced stream, or one with a pending erasure, never
	// waits. 0 turns the rule off: every stream past its linger is due.
	TailGrowth float64
	// CopyFloor is the rule's floor (objstore.TailFloor): the smallest
	// standing tail a rewrite copies server side
	// (objstore.Limits.CopyFloor), or the output cap when that is smaller
	// (a tail at the cap is never rewritten), or the output cap on a
	// store that reads back what its assemblies copy (there a rewrite
	// moves the whole tail through the process at any size). Below it a
	// rewrite fetches and uploads, or reads back, the whole tail again:
	// what the rule saves.
	CopyFloor int64
	// Cohorts is --denorm-tail-cohorts, the rule's cohorts: the star's
	// streams in stream-ID order, in that many parts of (nearly) equal
	// count (standard streams only: express streams have no cohorts). A
	// stream the rule held and lets go (its unsettled bytes reached the
	// fraction or the floor) waits for its cohort's turn, at most until
	// its hold ends; one the rule still holds is let go at its
	// cohort's turn once its hold ends within CohortWindow. The star's
	// turn (AdvanceCohortTurn) passes to the next cohort at most once a
	// standard linger. A slot's chunks are in stream-ID order, so the
	// streams one turn lets go lie together in every slot, where they
	// are read in few ranges. 0 or 1: no cohorts (every stream the rule
	// lets go is due at once).
	Cohorts int
}

// MaxCohorts bounds DuePolicy.Cohorts: a cohort's turn comes once in that
// many lingers, and waiting for it is what the rule's cohorts add to a
// stream's time in transit.
const MaxCohorts = 64

// CohortWindow is how long before its hold ends a stream the tail-growth
// rule still holds is let go at its cohort's turn: a turn per standard
// linger for every cohort, or the class's defer margin when that is
// shorter (the hold never ends earlier than a margin before the rule
// would have let it go anyway, and never before its linger).
func (p DuePolicy) CohortWindow(class string) time.Duration {
	return min(time.Duration(p.Cohorts)*p.Linger, p.DeferMargin(class))
}

// HasCohorts reports whether the policy's rule has cohorts (the rule on,
// more than one cohort): only then has the star a turn to advance.
func (p DuePolicy) HasCohorts() bool { return p.TailGrowth > 0 && p.Cohorts > 1 }

// LingerOf is the linger of a chain class: the express class has its own,
// every other class the standard one (DueStreams says the same in SQL).
func (p DuePolicy) LingerOf(class string) time.Duration {
	if class == ClassExpress {
		return p.ExpressLinger
	}
	return p.Linger
}

// AgeCapOf is the age cap of a chain class, as LingerOf.
func (p DuePolicy) AgeCapOf(class string) time.Duration {
	if class == ClassExpress {
		return p.ExpressAgeCap
	}
	return p.AgeCap
}

// DeferMargin is how long before its age-cap deadline a stream the
// tail-growth rule holds back becomes due: the class's linger, or a
// quarter of its age cap when that is longer (dueMarkersSQL says the same).
// A quarter keeps waiting streams out of the last quarter of the cap, the
// headroom NovaAuditorAgeCapHeadroom guards, so that alert still means
// "settling does not keep up"; and a margin of at least one linger leaves
// as many cycles to settle a waiting stream before its deadline as a
// stream due at its linger has before its linger passes again.
func (p DuePolicy) DeferMargin(class string) time.Duration {
	return max(p.LingerOf(class), p.AgeCapOf(class)/4)
}

// HoldFor is how long after its since a stream the tail-growth rule holds
// back becomes due anyway: max(linger, age cap - DeferMargin), as
// dueMarkersSQL.
func (p DuePolicy) HoldFor(class string) time.Duration {
	return max(p.LingerOf(class), p.AgeCapOf(class)-p.DeferMargin(class))
}

// The linger and age cap of a due marker d's class, from the parameters
// $2-$5 every statement over dueMarkersSQL binds (duePolicyArgs).
const (
	markerLinger = `CASE WHEN d.class = 'express' THEN $2::interval ELSE $4::interval END`
	markerAgeCap = `CASE WHEN d.class = 'express' THEN $3::interval ELSE $5::interval END`
	// DeferMargin and HoldFor of the marker's class.
	markerMargin = `greatest(` + markerLinger + `, ` + markerAgeCap + ` / 4)`
	markerHold   = `greatest(` + markerLinger + `, ` + markerAgeCap + ` - ` + markerMargin + `)`
)

// dueMarkersSQL reads the due markers of star $1 under the policy
// duePolicyArgs binds ($2-$8): each marker's stream, class, since, linger,
// age cap, whether the stream is quarantined (held), and when it is due
// (due_at) with est, the unsettled bytes the tail-growth rule estimated
// for it (0 when the rule does not hold it back).
//
// The rule concerns a stream past its linger whose last catalog entry
// (one descent of the catalog's primary key, however long its history)
// ends at settled_through below the copy floor $7, and that has no pending
// erasure (erasures_pending_idx). It holds such a stream while its
// estimated unsettled bytes are below both $6 x the tail's bytes and the
// copy floor: span_refs carry record counts only (the write path's
// contract), so the estimate is the unsettled records times the tail's
// bytes per record. A held stream is due at since + hold, hold = max(linger,
// age cap - DeferMargin); every other stream at since + linger.
//
// With $8 > 1 cohorts (DuePolicy.Cohorts) and a turn recorded for the star
// (nova.auditor_state: cohort_turn, cohort_turn_at and cohort_bounds, which
// AdvanceCohortTurn writes), a standard stream's cohort is 1 + the number
// of bounds at or below its ID, and the turn's cohort is cohort_turn mod
// (bounds + 1) + 1. A stream the rule concerns and lets go is due at since
// + linger in its cohort's turn (from the turn's start on) and at since +
// hold otherwise; one it holds is due in its cohort's turn from since +
// hold - CohortWindow on (never before its linger). Neither waits past
// since + hold, so the age cap is kept as without cohorts. Express
// streams have no cohorts: the turn passes once a standard linger, far
// longer than theirs. The lateral probes run only for streams past their
// linger, with the rule on ($6 > 0): with TailGrowth 0 the statement is
// today's rule.
const dueMarkersSQL = `
	SELECT d.stream_id, d.class, d.since, ` + markerLinger + ` AS linger, ` + markerAgeCap + ` AS cap,
	       EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = d.stream_id) AS held,
	       CASE WHEN w.est IS NULL OR (NOT w.under AND (NOT k.cohorts OR k.turn)) THEN 0 ELSE w.est END::float8 AS est,
	       CASE
	         WHEN w.est IS NULL THEN d.since + ` + markerLinger + `
	         WHEN NOT k.cohorts THEN d.since + CASE WHEN w.under THEN ` + markerHold + ` ELSE ` + markerLinger + ` END
	         WHEN NOT k.turn THEN d.since + ` + markerHold + `
	         WHEN w.under THEN least(d.since + ` + markerHold + `, greatest(t.turn_at,
	              d.since + greatest(` + markerLinger + `, ` + markerHold + ` - least($8::int * $4::interval, ` + markerMargin + `))))
	         ELSE least(d.since + ` + markerHold + `, greatest(t.turn_at, d.since + ` + markerLinger + `)) END AS due_at
	FROM nova.due_markers d JOIN nova.streams s USING (stream_id)
	LEFT JOIN (SELECT a.cohort_turn AS turn, a.cohort_turn_at AS turn_at, coalesce(a.cohort_bounds, '{}') AS bounds
	           FROM nova.auditor_state a WHERE a.star = $1) t ON true
	LEFT JOIN LATERAL (
		SELECT coalesce($8::int > 1 AND t.turn IS NOT NULL AND t.turn_at IS NOT NULL AND d.class <> 'express', false) AS cohorts,
		       coalesce(1 + (SELECT count(*) FROM unnest(t.bounds) b WHERE b <= d.stream_id)
		                = t.turn % (cardinality(t.bounds) + 1) + 1, false) AS turn) k ON true
	LEFT JOIN LATERAL (
		SELECT x.est, x.est < $6::float8 * x.object_bytes AND x.est < $7::bigint AS under FROM (
			SELECT (s.next_record - s.settled_through)::float8 * c.object_bytes / c.record_count AS est,
			       c.first_record + c.record_count AS end_record, c.object_bytes
			FROM nova.catalog c
			WHERE c.stream_id = d.stream_id AND $6::float8 > 0 AND now() >= d.since + ` + markerLinger + `
			ORDER BY c.epoch DESC, c.first_record DESC LIMIT 1) x
		WHERE x.end_record = s.settled_through AND x.object_bytes < $7::bigint
		  AND NOT EXISTS (SELECT 1 FROM nova.erasures e WHERE e.stream_id = d.stream_id AND e.applied_at IS NULL)) w ON true
	WHERE s.star = $1`

// duePolicyArgs are the parameters $1-$8 of dueMarkersSQL.
func duePolicyArgs(star string, p DuePolicy) []any {
	cohorts := p.Cohorts
	if !p.HasCohorts() {
		cohorts = 0
	}
	return []any{star, p.ExpressLinger, p.ExpressAgeCap, p.Linger, p.AgeCap, p.TailGrowth, p.CopyFloor, cohorts}
}

// DueStreams selects the star's due streams by the database clock: due when
// now() >= since + linger(class), or past the tail-growth rule's margin
// for a stream it holds back, or in its cohort's turn for one the rule
// lets go (dueMarkersSQL), or forced; quarantined
// streams skipped; forced streams first, then the earliest deadline since
// + age_cap(class), at most limit.
func (s *Settle) DueStreams(ctx context.Context, star string, p DuePolicy, forced []StreamID, limit int) ([]DueStream, error) {
	if forced == nil {
		forced = []StreamID{}
	}
	rows, err := s.db.reader(ctx).Query(ctx, `
		SELECT m.stream_id, m.class, m.since, m.since + m.cap AS deadline, m.stream_id = ANY($9::uuid[]) AS forced
		FROM (`+dueMarkersSQL+`) m
		WHERE NOT m.held
		  AND (now() >= m.since + m.linger OR m.stream_id = ANY($9::uuid[]))
		  AND (now() >= m.due_at OR m.stream_id = ANY($9::uuid[]))
		ORDER BY forced DESC, deadline, m.stream_id
		LIMIT $10`, append(duePolicyArgs(star, p), forced, limit)...)
	if err != nil {
		return nil, fmt.Errorf("select due streams of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueStream, error) {
		var d DueStream
		return d, r.Scan(&d.Stream, &d.Class, &d.Since, &d.Deadline, &d.Forced)
	})
	if err != nil {
		return nil, fmt.Errorf("select due streams of star %q: %w", star, err)
	}
	return out, nil
}

// AdvanceCohortTurn passes the star's cohort turn
// (nova.auditor_state.cohort_turn, DuePolicy.Cohorts) on to the next
// cohort, fenced, when every has passed since the turn began (by the
// database clock), and returns the turn. A star's first turn is 0. A
// cycle calls it before it selects its due streams, with every the
// standard linger: however often cycles run, a turn lasts a linger (its
// start kept on a grid of lingers, so that cycles running late do not
// stretch a rotation; reset to now when the star was left for longer), and
// however seldom, every cohort has its turn in order. A turn that passes in
// a cycle that then fails is not given back: what its cohort let go is due
// at the latest when its hold ends (dueMarkersSQL).
//
// When the turn passes, the cohorts are cut again: cohort_bounds holds
// the first stream ID of each cohort but the first, cohorts of (nearly)
// equal count over the star's streams in ID order. They are cut over the
// streams, not the due markers, so that settling a cohort does not move
// the others' bounds: a stream stays in its cohort while the star's
// streams stay (one scan of the star's streams a linger).
func (s *Settle) AdvanceCohortTurn(ctx context.Context, f Fence, every time.Duration, cohorts int) (int64, error) {
	var turn int64
	err := s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO nova.auditor_state AS a (star, cohort_turn, cohort_turn_at) VALUES ($1, 0, now())
			ON CONFLICT (star) DO UPDATE SET cohort_turn = coalesce(a.cohort_turn + 1, 0),
			cohort_turn_at = CASE WHEN now() < a.cohort_turn_at + 2 * $2::interval THEN a.cohort_turn_at + $2::interval ELSE now() END
			WHERE a.cohort_turn IS NULL OR a.cohort_turn_at IS NULL OR now() >= a.cohort_turn_at + $2::interval
			RETURNING cohort_turn`, f.Star, every)
		if err != nil {
			return fmt.Errorf("advance the cohort turn of star %q: %w", f.Star, err)
		}
		advanced, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("advance the cohort turn of star %q: %w", f.Star, err)
		}
		if len(advanced) == 0 {
			err := tx.QueryRow(ctx, `SELECT cohort_turn FROM nova.auditor_state WHERE star = $1`, f.Star).Scan(&turn)
			if err != nil {
				return fmt.Errorf("read the cohort turn of star %q: %w", f.Star, err)
			}
			return nil
		}
		turn = advanced[0]
		if _, err := tx.Exec(ctx, `UPDATE nova.auditor_state SET cohort_bounds = ARRAY(
				SELECT b.stream_id FROM (
					SELECT DISTINCT ON (x.c) x.c, x.stream_id FROM (
						SELECT stream_id, ntile($2::int) OVER (ORDER BY stream_id) AS c FROM nova.streams WHERE star = $1) x
					WHERE x.c > 1 ORDER BY x.c, x.stream_id) b ORDER BY b.c)
			WHERE star = $1`, f.Star, max(cohorts, 1)); err != nil {
			return fmt.Errorf("cut the cohorts of star %q: %w", f.Star, err)
		}
		return nil
	})
	return turn, err
}

// Snapshot is one stream's settle snapshot: its row, its first window of
// span refs (those ending past settled_through and starting before
// next_record, in record order) and its last catalog entry (nil: none).
type Snapshot struct {
	Stream Stream
	Refs   []SpanRef
	Last   *Entry
}

// StreamSnapshots reads the snapshots of the streams ids (a batch of one
// included) in one read-only repeatable-read transaction, at most refLimit
// refs each, consistent across all of them: each stream's refs tile
// exactly [settled_through, next_record) (read at READ COMMITTED, an absorb
// committing between the statements would add a ref past the next_record
// read first: a false tiling break). A stream that no longer exists is
// left out of the map.
func (s *Settle) StreamSnapshots(ctx context.Context, ids []StreamID, refLimit int) (map[StreamID]Snapshot, error) {
	out := make(map[StreamID]Snapshot, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err := s.db.readTx(ctx, func(tx pgx.Tx) error {
		clear(out)
		rows, err := tx.Query(ctx, `SELECT `+streamCols+` FROM nova.streams WHERE stream_id = ANY($1::uuid[])`, ids)
		if err != nil {
			return fmt.Errorf("read %d streams: %w", len(ids), err)
		}
		streams, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stream, error) { return scanStream(r) })
		if err != nil {
			return fmt.Errorf("read %d streams: %w", len(ids), err)
		}
		for _, st := range streams {
			out[st.ID] = Snapshot{Stream: st}
		}
		// Each stream's refs are an index range of its own (as
		// RefsWindow's), however many refs the star holds.
		rows, err = tx.Query(ctx, `SELECT r.* FROM nova.streams s CROSS JOIN LATERAL (
				SELECT `+SpanRefColumns+` FROM nova.span_refs
				WHERE stream_id = s.stream_id AND first_record < s.next_record AND first_record + record_count > s.settled_through
				ORDER BY first_record LIMIT $2) r
			WHERE s.stream_id = ANY($1::uuid[])
			ORDER BY r.stream_id, r.first_record`, ids, refLimit)
		if err != nil {
			return fmt.Errorf("read refs of %d streams: %w", len(ids), err)
		}
		refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return ScanSpanRef(r) })
		if err != nil {
			return fmt.Errorf("read refs of %d streams: %w", len(ids), err)
		}
		for _, r := range refs {
			s := out[r.Stream]
			s.Refs = append(s.Refs, r)
			out[r.Stream] = s
		}
		rows, err = tx.Query(ctx, `SELECT e.* FROM unnest($1::uuid[]) AS u(id) CROSS JOIN LATERAL (
				SELECT `+entryCols+` FROM nova.catalog WHERE stream_id = u.id
				ORDER BY epoch DESC, first_record DESC LIMIT 1) e`, ids)
		if err != nil {
			return fmt.Errorf("read last catalog entries of %d streams: %w", len(ids), err)
		}
		lasts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
		if err != nil {
			return fmt.Errorf("read last catalog entries of %d streams: %w", len(ids), err)
		}
		for _, e := range lasts {
			if s, ok := out[e.Stream]; ok {
				s.Last = &e
				out[e.Stream] = s
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RefsWindow reads at most limit of a stream's span refs that end past from
// and start before before, in record order (an index range: the settle
// commits delete refs once they are wholly settled).
func (s *Settle) RefsWindow(ctx context.Context, id StreamID, from, before int64, limit int) ([]SpanRef, error) {
	return refsWindow(ctx, s.db.pool, id, from, before, limit)
}

func refsWindow(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, id StreamID, from, before int64, limit int) ([]SpanRef, error) {
	rows, err := q.Query(ctx, `SELECT `+SpanRefColumns+` FROM nova.span_refs
		WHERE stream_id = $1 AND first_record < $3 AND first_record + record_count > $2
		ORDER BY first_record LIMIT $4`, id, from, before, limit)
	if err != nil {
		return nil, fmt.Errorf("read refs of stream %s from %d: %w", id, from, err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return ScanSpanRef(r) })
	if err != nil {
		return nil, fmt.Errorf("read refs of stream %s from %d: %w", id, from, err)
	}
	return refs, nil
}

// WithPendingErasures reports which of the streams have a pending
// erasure (one probe of erasures_pending_idx each): settle reads the
// erasures of those only (PendingErasuresIn).
func (s *Settle) WithPendingErasures(ctx context.Context, ids []StreamID) (map[StreamID]bool, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	rows, err := s.db.reader(ctx).Query(ctx, `SELECT u.stream_id FROM unnest($1::uuid[]) AS u(stream_id)
		WHERE EXISTS (SELECT 1 FROM nova.erasures e WHERE e.stream_id = u.stream_id AND e.applied_at IS NULL)`, ids)
	if err != nil {
		return nil, fmt.Errorf("find pending erasures of %d streams: %w", len(ids), err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[StreamID])
	if err != nil {
		return nil, fmt.Errorf("find pending erasures of %d streams: %w", len(ids), err)
	}
	out := make(map[StreamID]bool, len(got))
	for _, id := range got {
		out[id] = true
	}
	return out, nil
}

// Overlap is two catalog entries of a stream that cover a record twice.
type Overlap struct {
	Stream              StreamID
	PrevFirst, PrevEnd  int64
	First, End, Settled int64
}

func (o *Overlap) String() string {
	return fmt.Sprintf("stream %s: catalog entries [%d, %d) and [%d, %d) overlap (settled_through %d)",
		o.Stream, o.PrevFirst, o.PrevEnd, o.First, o.End, o.Settled)
}

// tailEntries is how many of a stream's last catalog entries FirstOverlap
// checks: a cycle only appends at settled_through or rewrites the last
// entry, so what it can break is the last entry and its neighbour; one more
// catches an earlier cycle's damage next to them.
const tailEntries = 3

// FirstOverlap checks the catalog tiling where a cycle writes, for the
// given streams in one statement: each stream's last tailEntries entries
// (a descending range of the catalog's primary key, so the cost does not
// grow with the stream's history). It returns the first pair of them that
// cover a record twice, or one that ends past its stream's
// settled_through; nil when they tile. docs/architecture.md#singleton-lease-and-fencing: either is a
// broken invariant, and the cycle halts on it. The whole catalog is
// checked by `auditor verify`.
func (s *Settle) FirstOverlap(ctx context.Context, ids []StreamID) (*Overlap, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var o Overlap
	err := s.db.reader(ctx).QueryRow(ctx, `SELECT s.stream_id, coalesce(t.prev_first, -1), coalesce(t.prev_end, -1), t.first_record, t.first_record + t.record_count, s.settled_through
		FROM unnest($1::uuid[]) AS d(stream_id) JOIN nova.streams s USING (stream_id) CROSS JOIN LATERAL (
			SELECT first_record, record_count,
				lag(first_record) OVER w AS prev_first, lag(first_record + record_count) OVER w AS prev_end
			FROM (SELECT epoch, first_record, record_count FROM nova.catalog c WHERE c.stream_id = s.stream_id
				ORDER BY epoch DESC, first_record DESC LIMIT $2) last
			WINDOW w AS (PARTITION BY epoch ORDER BY first_record)) t
		WHERE (t.first_record < t.prev_end OR t.first_record + t.record_count > s.settled_through)
		ORDER BY s.stream_id, t.first_record LIMIT 1`, ids, tailEntries).
		Scan(&o.Stream, &o.PrevFirst, &o.PrevEnd, &o.First, &o.End, &o.Settled)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check the catalog tiling of %d streams: %w", len(ids), err)
	}
	return &o, nil
}
