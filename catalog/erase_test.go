package catalog_test

import (
	"context"
	"errors"
	"math"
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
		if _, err := db.RecordErasure(ctx, sid(1), c.first, c.count); !errors.Is(err, catalog.ErrBadErasure) {
			t.Errorf("erasure [%d, +%d): %v, want ErrBadErasure", c.first, c.count, err)
		}
	}
	if _, err := db.RecordErasure(ctx, sid(9), 0, 1); !errors.Is(err, catalog.ErrNotFound) {
		t.Errorf("unknown stream: %v", err)
	}
	a, err := db.RecordErasure(ctx, sid(1), 10, 5)
	if err != nil {
		t.Fatal(err)
	}
	b, err := db.RecordErasure(ctx, sid(1), 10, 5)
	if err != nil || b.RequestedAt != a.RequestedAt {
		t.Fatalf("the same erasure again: %+v %v (first %+v)", b, err, a)
	}
	if _, err := db.RecordErasure(ctx, sid(1), 10, 6); !errors.Is(err, catalog.ErrBadErasure) {
		t.Errorf("another range at the same first record: %v", err)
	}
	ers, err := db.ErasuresOf(ctx, sid(1), 0, 100)
	if err != nil || len(ers) != 1 || ers[0].RecordCount != 5 || ers[0].Applied {
		t.Fatalf("erasures: %+v %v", ers, err)
	}
	back, err := db.GetErasureBacklog(ctx, "s1")
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
	l, err := db.AcquireLease(ctx, "s1", "t", time.Minute)
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
	pend, err := db.PendingErasures(ctx, "s1", 10)
	if err != nil || len(pend) != 2 {
		t.Fatalf("pending: %+v %v", pend, err)
	}
	for _, p := range pend {
		if p.Valid() == "" {
			t.Errorf("malformed row %+v passes Valid", p.Erasure)
		}
		ok, err := db.ApplyErasure(ctx, l.Fence, p.Erasure, nil, "a", "b")
		if !errors.Is(err, catalog.ErrBadErasure) || ok {
			t.Errorf("malformed row %+v applied: %v %v", p.Erasure, ok, err)
		}
	}
}

// TestApplyErasureWaitsForEverythingThatHoldsTheBytes: not settled yet, an
// intersecting entry not checked, or a reap intent left on the stream's
// keys below the end each keep the erasure pending.
func TestApplyErasureWaitsForEverythingThatHoldsTheBytes(t *testing.T) {
	t.Parallel()
	db, ctx := oneStream(t)
	if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: 0, FooterOffset: 10, FooterLength: 20,
		Batches: []writepath.AbsorbBatch{{Stream: sid(1), FirstRecord: 0, Count: 10}}}}); err != nil {
		t.Fatal(err)
	}
	l, err := db.AcquireLease(ctx, "s1", "t", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	er, err := db.RecordErasure(ctx, sid(1), 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(clean []catalog.EntryRevision) bool {
		t.Helper()
		ok, err := db.ApplyErasure(ctx, l.Fence, er, clean, "k/", "k/5")
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
	if err := db.CommitSettle(ctx, l.Fence, catalog.SettleCommit{Entry: e, PrevRevision: -1, ObjectKey: "k/0~0"}); err != nil {
		t.Fatal(err)
	}
	if apply(nil) {
		t.Fatal("applied with an intersecting entry nobody checked")
	}
	if apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("applied with the entry checked at another revision")
	}
	e.Revision = 1
	if err := db.CommitRewrite(ctx, l.Fence, catalog.RewriteCommit{Entry: e, PrevRevision: 0, ObjectKey: "k/0~1", OldKey: "k/0~0",
		ReapGrace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := db.CommitRewrite(ctx, l.Fence, catalog.RewriteCommit{Entry: e, PrevRevision: 0, ObjectKey: "k/0~1", OldKey: "k/0~0"}); !errors.Is(err, catalog.ErrRevisionMoved) {
		t.Fatalf("a second rewrite from the old revision: %v", err)
	}
	if apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("applied while the superseded revision waits for its reap")
	}
	reaps, err := db.Intents(ctx, "s1", "reap", 0)
	if err != nil || len(reaps) != 1 || reaps[0].ObjectKey != "k/0~0" {
		t.Fatalf("reaps: %+v %v", reaps, err)
	}
	if err := db.FinishReaps(ctx, l.Fence, []int64{reaps[0].ID}); err != nil {
		t.Fatal(err)
	}
	if !apply([]catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) {
		t.Fatal("not applied once nothing holds the bytes")
	}
	if ers, _ := db.ErasuresOf(ctx, sid(1), 0, 10); len(ers) != 1 || !ers[0].Applied {
		t.Fatalf("erasures: %+v", ers)
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
		n, err := db.ErasuresAppliedWithin(ctx, "s1", tc.window)
		if err != nil || n != tc.want {
			t.Errorf("window %s: %d %v, want %d", tc.window, n, err, tc.want)
		}
	}
	if n, err := db.ErasuresAppliedWithin(ctx, "s3", time.Hour); err != nil || n != 0 {
		t.Errorf("a star with no runs: %d %v", n, err)
	}
}
