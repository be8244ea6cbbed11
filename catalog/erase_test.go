package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

// oneStream is a database with star s1 and its stream sid(1).
func oneStream(t *testing.T) (*catalog.DB, context.Context) {
	t.Helper()
	db, ctx := newDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 2); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).CreateStream(ctx, sid(1), "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	return db, ctx
}

// TestRecordErasureValidates: bad input gets a clear error and records
// nothing; the same range again is a no-op; another range at the same
// first record is refused naming the standing one.
func TestRecordErasureValidates(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	for _, c := range []struct{ first, count int64 }{{0, 0}, {0, -3}, {-1, 2}, {math.MaxInt64 - 1, 5}} {
		if _, err := db.Erasures().RecordErasure(ctx, sid(1), c.first, c.count); !errors.Is(err, catalog.ErrBadErasure) {
			t.Errorf("erasure [%d, +%d): %v, want ErrBadErasure", c.first, c.count, err)
		}
	}
	if _, err := db.Erasures().RecordErasure(ctx, sid(9), 0, 1); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("unknown stream: %v", err)
	}
	a, err := db.Erasures().RecordErasure(ctx, sid(1), 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.Erasures().RecordErasure(ctx, sid(1), 10, 5)
	if err != nil || b.RequestedAt != a.RequestedAt {
		t.Fatalf("the same erasure again: %+v %v (first %+v)", b, err, a)
	}
	if _, err := db.Erasures().RecordErasure(ctx, sid(1), 10, 6); !errors.Is(err, catalog.ErrBadErasure) {
		t.Errorf("another range at the same first record: %v", err)
	}
	ers, err := db.Erasures().ErasuresOf(ctx, sid(1), 0, 100)
	if err != nil || len(ers) != 1 || ers[0].RecordCount != 5 || ers[0].Applied {
		t.Fatalf("erasures: %+v %v", ers, err)
	}
	back, err := db.Erasures().ErasureBacklog(ctx, "s1")
	if err != nil || back.Pending != 1 || back.OldestAt.IsZero() || back.OldestAge < 0 {
		t.Fatalf("backlog: %+v %v", back, err)
	}
}

// TestMalformedErasureRowsAreReportedNotApplied: a row another writer
// stored outside what the auditor can apply (the contract checks only
// record_count > 0) comes back from PendingErasures flagged by Valid, and
// ApplyErasure never applies a range it cannot cover.
func TestMalformedErasureRowsAreReportedNotApplied(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Fenced(ctx, l.Fence, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ($1, -5, 3), ($1, $2, 9)`,
			sid(1), int64(math.MaxInt64-3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pend, err := db.Erasures().PendingErasures(ctx, "s1", 10)
	if err != nil || len(pend) != 2 {
		t.Fatalf("pending: %+v %v", pend, err)
	}
	for _, p := range pend {
		if p.Valid() == "" {
			t.Errorf("malformed row %+v passes Valid", p.Erasure)
		}
		ok, err := db.Erasures().ApplyErasure(ctx, l.Fence, p.Erasure, nil, "a", "b")
		if !errors.Is(err, catalog.ErrBadErasure) || ok {
			t.Errorf("malformed row %+v applied: %v %v", p.Erasure, ok, err)
		}
	}
}

// TestApplyErasureWaitsForEverythingThatHoldsTheBytes: not settled yet, an
// intersecting entry not checked, or a reap or publish intent left on the
// stream's keys below the end each keep the erasure pending.
func TestApplyErasureWaitsForEverythingThatHoldsTheBytes(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: 0, FooterOffset: 10, FooterLength: 20,
		Batches: []writepath.AbsorbBatch{{Stream: sid(1), FirstRecord: 0, Count: 10}}}}); err != nil {
		t.Fatal(err)
	}
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	er, err := db.Erasures().RecordErasure(ctx, sid(1), 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(clean []catalog.EntryRevision) bool {
		t.Helper()
		ok, err := db.Erasures().ApplyErasure(ctx, l.Fence, er, clean, "k/", "k/5")
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if apply(nil) {
		t.Fatal("applied while its records are in transit")
	}
	e := catalog.Entry{Stream: sid(1), Epoch: 1, FirstRecord: 0, Revision: 0, RecordCount: 10, ObjectBytes: 100,
		FooterOffset: 50, FooterLength: 30, Class: catalog.ClassStandard}
	if err := writepath.CommitSettle(ctx, db, l.Fence, catalog.SettleCommit{Entry: e, PrevRevision: -1, IntentID: intent(t, db, "k/0~0"), ObjectKey: "k/0~0"}); err != nil {
		t.Fatal(err)
	}
	if apply(nil) {
		t.Fatal("applied with an intersecting entry nobody checked")
	}
	if apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("applied with the entry checked at another revision")
	}
	e.Revision = 1
	if err := db.Erasures().CommitRewrite(ctx, l.Fence, catalog.RewriteCommit{Entry: e, PrevRevision: 0, IntentID: intent(t, db, "k/0~1"), ObjectKey: "k/0~1", OldKey: "k/0~0",
		ReapGrace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := db.Erasures().CommitRewrite(ctx, l.Fence, catalog.RewriteCommit{Entry: e, PrevRevision: 0, ObjectKey: "k/0~1", OldKey: "k/0~0"}); !errors.Is(err, catalog.ErrRevisionMoved) {
		t.Fatalf("a second rewrite from the old revision: %v", err)
	}
	if apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("applied while the superseded revision waits for its reap")
	}
	reaps, err := db.Settle().Intents(ctx, "s1", "reap", 0)
	if err != nil || len(reaps) != 1 || reaps[0].ObjectKey != "k/0~0" {
		t.Fatalf("reaps: %+v %v", reaps, err)
	}
	if err := db.Trim().FinishReaps(ctx, l.Fence, []int64{reaps[0].ID}); err != nil {
		t.Fatal(err)
	}
	// A publish intent open on the stream's keys (a PUT that may have
	// landed and is in no catalog row) holds it as a reap intent does.
	pub := intent(t, db, "k/0~2")
	if apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("applied while a publish intent is open on the stream's keys")
	}
	if err := db.Settle().DeleteIntent(ctx, l.Fence, pub); err != nil {
		t.Fatal(err)
	}
	if !apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("not applied once nothing holds the bytes")
	}
	if ers, _ := db.Erasures().ErasuresOf(ctx, sid(1), 0, 10); len(ers) != 1 || !ers[0].Applied {
		t.Fatalf("erasures: %+v", ers)
	}
}

// erasures inserts pending erasures of sid(id) as (first, count) pairs
// and sets applied_at of those at the given first records.
func erasures(t *testing.T, db *catalog.DB, ctx context.Context, id byte, pending [][2]int64, applied ...int64) {
	t.Helper()
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Leases().ReleaseLease(ctx, l.Fence) }()
	if err := db.Fenced(ctx, l.Fence, func(tx pgx.Tx) error {
		for _, p := range pending {
			if _, err := tx.Exec(ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ($1, $2, $3)`,
				sid(id), p[0], p[1]); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `UPDATE nova.erasures SET applied_at = now() WHERE stream_id = $1 AND first_record = ANY($2)`,
			sid(id), applied)
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestPendingErasuresIn: over a range, every pending erasure that starts
// inside it and, of those starting below it, only the one reaching
// farthest into it; applied ones never; below bounds where they start.
func TestPendingErasuresIn(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	for _, id := range []byte{2, 3} {
		if err := writepath.New(db).CreateStream(ctx, sid(id), "s1", "b1"); err != nil {
			t.Fatal(err)
		}
	}
	erasures(t, db, ctx, 1, [][2]int64{{0, 100}, {10, 10}, {30, 30}, {45, 10}, {50, 5}, {52, 1}, {70, 10}}, 45, 50)
	erasures(t, db, ctx, 2, [][2]int64{{5, 1}}, 5)
	firsts := func(below, from, to int64) []int64 {
		t.Helper()
		ers, err := db.Erasures().PendingErasuresIn(ctx, sid(1), below, from, to)
		if err != nil {
			t.Fatal(err)
		}
		var out []int64
		for _, e := range ers {
			if e.Applied || e.Stream != sid(1) {
				t.Errorf("read %+v", e)
			}
			out = append(out, e.FirstRecord)
		}
		slices.Sort(out)
		return out
	}
	for _, c := range []struct {
		below, from, to int64
		want            []int64
	}{
		{math.MinInt64, 50, 70, []int64{0, 52}}, // [0, 100) reaches farthest; [30, 60) is among it, [45, 55) and [50, 55) applied
		{20, 50, 70, []int64{30, 52}},           // starting at 20 or later: [30, 60) reaches farthest
		{60, 60, 70, nil},
		{60, 60, 80, []int64{70}},
		{math.MinInt64, 100, 200, nil},
		{0, 0, 11, []int64{0, 10}},
	} {
		if got := firsts(c.below, c.from, c.to); !slices.Equal(got, c.want) {
			t.Errorf("PendingErasuresIn(%d, %d, %d) = %v, want %v", c.below, c.from, c.to, got, c.want)
		}
	}
	if _, err := db.Erasures().PendingErasuresIn(ctx, sid(1), 10, 5, 20); !errors.Is(err, catalog.ErrInvariant) {
		t.Errorf("below past from: %v", err)
	}
	with, err := db.Settle().WithPendingErasures(ctx, []catalog.StreamID{sid(1), sid(2), sid(3)})
	if err != nil || len(with) != 1 || !with[sid(1)] {
		t.Fatalf("streams with pending erasures: %v %v, want only the first (the second's is applied)", with, err)
	}
}

// TestPendingErasureWindowsDealRoundRobin: the bound is dealt one erasure
// a stream at a time, lowest record first, the streams by their oldest
// pending request; applied erasures, quarantined streams and other stars
// are left out; a window knows whether it holds all of its stream's.
func TestPendingErasureWindowsDealRoundRobin(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	w := writepath.New(db)
	if err := w.CreateStar(ctx, "s2", catalog.ClassStandard, 2); err != nil {
		t.Fatal(err)
	}
	for id, star := range map[byte]string{2: "s1", 3: "s1", 4: "s1", 5: "s2"} {
		if err := w.CreateStream(ctx, sid(id), star, "b1"); err != nil {
			t.Fatal(err)
		}
	}
	// In request order: 1 (the oldest), 2, 3, then the quarantined 4 and
	// star s2's 5.
	erasures(t, db, ctx, 1, [][2]int64{{50, 1}, {10, 1}, {40, 1}, {30, 1}, {20, 1}, {5, 1}}, 5)
	erasures(t, db, ctx, 2, [][2]int64{{7, 2}})
	erasures(t, db, ctx, 3, [][2]int64{{300, 1}, {100, 1}, {200, 1}})
	erasures(t, db, ctx, 4, [][2]int64{{1, 1}})
	erasures(t, db, ctx, 5, [][2]int64{{1, 1}})
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, l.Fence, sid(4), "", "corrupt", "set aside by the test"); err != nil {
		t.Fatal(err)
	}
	_ = db.Leases().ReleaseLease(ctx, l.Fence)
	type window struct {
		id       byte
		firsts   []int64
		complete bool
		exact    int64
	}
	for _, c := range []struct {
		limit int
		want  []window
	}{
		{6, []window{{1, []int64{10, 20, 30}, false, 31}, {2, []int64{7}, true, math.MaxInt64}, {3, []int64{100, 200}, false, 201}}},
		{2, []window{{1, []int64{10}, false, 11}, {2, []int64{7}, true, math.MaxInt64}}},
		{100, []window{{1, []int64{10, 20, 30, 40, 50}, true, math.MaxInt64}, {2, []int64{7}, true, math.MaxInt64},
			{3, []int64{100, 200, 300}, true, math.MaxInt64}}},
	} {
		wins, err := db.Erasures().PendingErasureWindows(ctx, "s1", c.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []window
		for _, w := range wins {
			g := window{id: w.Stream[15], complete: w.Complete(), exact: w.ExactBelow()}
			for _, e := range w.Erasures {
				if e.Stream != w.Stream || e.Applied {
					t.Errorf("window of %s holds %+v", w.Stream, e)
				}
				g.firsts = append(g.firsts, e.FirstRecord)
			}
			got = append(got, g)
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("limit %d: windows %v, want %v", c.limit, got, c.want)
		}
	}
}

// TestErasuresAppliedWithin: the erasures the star's runs applied in the
// window, by the ledger: a run started inside it counts, so does the last
// run started before it (it may have applied some inside), earlier ones
// and other stars' do not.
func TestErasuresAppliedWithin(t *testing.T) {
	t.Parallel()
	db, url := testenv.MigratedDB(t)
	ctx := context.Background()
	c := testenv.Conn(t, url)
	for _, r := range []struct {
		star    string
		ago     string // started this long ago
		applied int64
	}{
		{"s1", "50 hours", 100}, // before the straddling run: out
		{"s1", "27 hours", 20},  // the last run started before a 26 h window: in
		{"s1", "25 hours", 3},
		{"s1", "1 hour", 4},
		{"s1", "1 minute", 0},
		{"s2", "1 hour", 1000}, // another star
	} {
		if _, err := c.Exec(ctx, `INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome, erasures_applied)
			VALUES ($1, 'h', 1, 'schedule', now() - $2::interval, now() - $2::interval + interval '1 second', 'ok', $3)`,
			r.star, r.ago, r.applied); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		window time.Duration
		want   int64
	}{{26 * time.Hour, 27}, {2 * time.Hour, 7}, {100 * time.Hour, 127}, {30 * time.Second, 0}} {
		n, err := db.Erasures().ErasuresAppliedWithin(ctx, "s1", tc.window)
		if err != nil || n != tc.want {
			t.Errorf("window %s: %d %v, want %d", tc.window, n, err, tc.want)
		}
	}
	if n, err := db.Erasures().ErasuresAppliedWithin(ctx, "s3", time.Hour); err != nil || n != 0 {
		t.Errorf("a star with no runs: %d %v", n, err)
	}
}

// TestReconcileViewReadsTheErasures: reconcile's view of a stream holds
// its erasures, pending and applied, that reach past settled_through, in
// record order; malformed rows are left out (and their ends, which
// overflow, break nothing).
func TestReconcileViewReadsTheErasures(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Fenced(ctx, l.Fence, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE nova.streams SET next_record = 100, settled_through = 12 WHERE stream_id = $1`, sid(1)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count, applied_at) VALUES
			($1, -5, 3, NULL), ($1, $2, 9, NULL), ($1, 2, 5, now()), ($1, 11, 1, NULL),
			($1, 12, 1, NULL), ($1, 10, 5, NULL), ($1, 20, 3, now())`, sid(1), int64(math.MaxInt64-3))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	v, err := db.Restore().ReconcileView(ctx, sid(1), "", "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range v.Erasures {
		got = append(got, fmt.Sprintf("%d+%d applied=%v", e.FirstRecord, e.RecordCount, e.Applied))
	}
	want := []string{"10+5 applied=false", "12+1 applied=false", "20+3 applied=true"}
	if !slices.Equal(got, want) {
		t.Fatalf("erasures %v, want %v", got, want)
	}
}
