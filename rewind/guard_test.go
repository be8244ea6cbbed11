package rewind_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/rewind"
)

const star = "rw1"

func guard(t *testing.T, db *catalog.DB, b teststore.Backend, maxAge time.Duration) *rewind.Guard {
	t.Helper()
	g, err := rewind.New(rewind.Deps{DB: db.Restore(), Store: b.Store, Bucket: b.Std}, rewind.Config{Star: star, Holder: "h", MaxAge: maxAge})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func lease(t *testing.T, db *catalog.DB) catalog.Fence {
	t.Helper()
	ctx := context.Background()
	// A new term: whoever held the lease lets it go first.
	if l, held, err := db.Leases().CurrentLease(ctx, star); err == nil && held {
		if err := db.Leases().ReleaseLease(ctx, l.Fence); err != nil {
			t.Fatal(err)
		}
	}
	l, err := db.Leases().AcquireLeaseInstance(ctx, star, "h", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return l.Fence
}

func run(t *testing.T, g *rewind.Guard, f catalog.Fence) (cycle.Counts, error) {
	t.Helper()
	return g.Run(context.Background(), f, cycle.Options{})
}

func mark(t *testing.T, db *catalog.DB) int64 {
	t.Helper()
	m, err := db.Restore().Mark(context.Background(), star)
	if err != nil {
		t.Fatal(err)
	}
	return m.N
}

func exists(t *testing.T, b teststore.Backend, key string) bool {
	t.Helper()
	_, err := b.Store.Head(context.Background(), b.Std, key)
	return err == nil
}

// TestGuardFindsARestoredMetastore: a term begins by writing marker n,
// committing mark n and confirming it; a metastore restored from before
// that (a clone taken earlier) halts the next term with a RewoundError
// and commits nothing, while the live metastore goes on.
func TestGuardFindsARestoredMetastore(t *testing.T) {
	for _, b := range []teststore.Backend{teststore.File(t, teststore.Options{}), teststore.S3(t, teststore.Options{Prefix: "rewind"})} {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			db, url := testenv.MigratedDB(t)
			g := guard(t, db, b, time.Hour)
			f := lease(t, db)
			c, err := run(t, g, f)
			if err != nil {
				t.Fatal(err)
			}
			if mark(t, db) != 1 || !exists(t, b, bundlefmt.MarkKey(star, 1)) || !exists(t, b, bundlefmt.MarkConfirmKey(star, 1)) {
				t.Fatalf("the first begin left mark %d, marker %v, confirmation %v", mark(t, db),
					exists(t, b, bundlefmt.MarkKey(star, 1)), exists(t, b, bundlefmt.MarkConfirmKey(star, 1)))
			}
			if c.S3Requests != 2 {
				t.Errorf("a begin made %d requests, want 2 (the marker and its confirmation)", c.S3Requests)
			}
			// The same term, within MaxAge: nothing more.
			if c, err := run(t, g, f); err != nil || c.S3Requests != 0 || mark(t, db) != 1 {
				t.Fatalf("a second cycle of the term: %d requests, mark %d, %v", c.S3Requests, mark(t, db), err)
			}
			if err := g.Fresh(ctx, f); err != nil || mark(t, db) != 1 {
				t.Fatalf("Fresh within MaxAge: mark %d, %v", mark(t, db), err)
			}

			// The backup: a copy of the metastore at mark 1.
			f1 := f
			if err := db.Leases().ReleaseLease(ctx, f1); err != nil {
				t.Fatal(err)
			}
			db.Close()
			backup := testenv.CloneDatabase(t, url)
			db, err = catalog.Open(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(db.Close)

			// The live metastore's next term begins at 2.
			g = guard(t, db, b, time.Hour)
			if _, err := run(t, g, lease(t, db)); err != nil {
				t.Fatal(err)
			}
			if mark(t, db) != 2 {
				t.Fatalf("the next term's mark is %d, want 2", mark(t, db))
			}

			// Restored from the backup: its next term finds confirmed marker 2.
			rdb, err := catalog.Open(ctx, backup)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(rdb.Close)
			rg := guard(t, rdb, b, time.Hour)
			rf := lease(t, rdb)
			_, err = run(t, rg, rf)
			var rw *cycle.RewoundError
			if !errors.As(err, &rw) || !cycle.IsHalt(err) || !cycle.IsRewoundReason(cycle.HaltReason(err)) {
				t.Fatalf("the restored metastore's term: %v, want a metastore_rewound halt", err)
			}
			if mark(t, rdb) != 1 {
				t.Errorf("the restored metastore's mark moved to %d", mark(t, rdb))
			}
			if err := rg.Fresh(ctx, rf); !errors.As(err, &rw) {
				t.Errorf("Fresh on the restored metastore: %v, want the halt again", err)
			}
			t.Logf("found: %v", rw)
		})
	}
}

// TestGuardPassesUnconfirmedMarkers: a leader that died between its
// marker and its commit left a marker no mark names; the next begin passes
// over it (no halt) and a term later the marker chain goes on.
func TestGuardPassesUnconfirmedMarkers(t *testing.T) {
	ctx := context.Background()
	b := teststore.File(t, teststore.Options{})
	db, _ := testenv.MigratedDB(t)
	for n := uint64(1); n <= 2; n++ { // two dead attempts in a row
		if err := b.Store.PutIfAbsent(ctx, b.Std, bundlefmt.MarkKey(star, n), []byte(`{"nonce":"dead"}`)); err != nil {
			t.Fatal(err)
		}
	}
	g := guard(t, db, b, time.Hour)
	if _, err := run(t, g, lease(t, db)); err != nil {
		t.Fatal(err)
	}
	if mark(t, db) != 3 || !exists(t, b, bundlefmt.MarkConfirmKey(star, 3)) {
		t.Fatalf("mark %d, want 3 past two unconfirmed markers", mark(t, db))
	}
	// A lapsed begin (MaxAge passed) begins again within the term.
	g = guard(t, db, b, time.Nanosecond)
	f := lease(t, db)
	for want := int64(4); want <= 5; want++ {
		if err := g.Fresh(ctx, f); err != nil {
			t.Fatal(err)
		}
		if mark(t, db) != want {
			t.Fatalf("mark %d, want %d", mark(t, db), want)
		}
	}
	// A mark moved under the guard (a reconcile raised it) is not written
	// over: the commit refuses, nothing is confirmed at the number.
	if err := db.Restore().RaiseMark(ctx, f, 9); err != nil {
		t.Fatal(err)
	}
	if err := db.Restore().CommitMark(ctx, f, 5, 6); !errors.Is(err, catalog.ErrMarkMoved) {
		t.Fatalf("CommitMark over a moved mark: %v, want ErrMarkMoved", err)
	}
	if err := g.Fresh(ctx, f); err != nil || mark(t, db) != 10 {
		t.Fatalf("after a raise to 9: mark %d, %v; want 10", mark(t, db), err)
	}
}

// failingCommits is the metastore with its first n mark commits failing
// (a database that refuses writes for a while).
type failingCommits struct {
	*catalog.Restore
	n int
}

func (f *failingCommits) CommitMark(ctx context.Context, fence catalog.Fence, prev, next int64) error {
	if f.n > 0 {
		f.n--
		return errors.New("injected: the database refuses writes")
	}
	return f.Restore.CommitMark(ctx, fence, prev, next)
}

// TestGuardRetriesItsOwnMarker: begins whose commit fails, again and
// again (a database outage), take up their own marker each time instead
// of passing over it: once the database answers, the mark is 1.
func TestGuardRetriesItsOwnMarker(t *testing.T) {
	b := teststore.File(t, teststore.Options{})
	db, _ := testenv.MigratedDB(t)
	fc := &failingCommits{Restore: db.Restore(), n: 100}
	g, err := rewind.New(rewind.Deps{DB: fc, Store: b.Store, Bucket: b.Std}, rewind.Config{Star: star, Holder: "h", MaxAge: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f := lease(t, db)
	for i := 0; i < 100; i++ {
		if _, err := run(t, g, f); err == nil {
			t.Fatalf("begin %d succeeded while the commit fails", i)
		}
	}
	if _, err := run(t, g, f); err != nil {
		t.Fatalf("the begin once the database answers: %v", err)
	}
	if m := mark(t, db); m != 1 || exists(t, b, bundlefmt.MarkKey(star, 2)) {
		t.Fatalf("mark %d (want 1), marker 2 written: %v", m, exists(t, b, bundlefmt.MarkKey(star, 2)))
	}
}
