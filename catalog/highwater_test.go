package catalog_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// TestHighRevisionNeverGoesDown: a base's high-water revision
// (docs/architecture.md#no-late-delete) is raised or left as it is by
// every statement that writes it, each given a lower revision: the
// opening's raise (as if its lock had taken the existing row for a new
// one), an opening planned below it, one at once (the set path), the reap
// step's burial and reconcile's claim. A new base opens at its planned
// revision, one whose row exists above the revision it holds.
func TestHighRevisionNeverGoesDown(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	// A base above the stream's settled_through: a new run a plan reaches,
	// so the burial keeps its row.
	b := catalog.KeyBase{Stream: sid(1), Epoch: 1, FirstRecord: 40}
	tg := func(rev int32) catalog.PublishTarget {
		return catalog.PublishTarget{Base: b, Revision: rev, Key: func(r int32) string { return fmt.Sprintf("h40~%d", r) }}
	}
	high := func(want int32, after string) {
		t.Helper()
		h, err := db.HighRevision(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if h != want {
			t.Fatalf("high-water after %s: %d, want %d", after, h, want)
		}
	}
	// open opens an intent planned at rev, checks where it opened, and
	// gives it up (a reap), so the next opening finds none to take up.
	open := func(rev int32, want string) catalog.Intent {
		t.Helper()
		in, err := writepath.OpenIntent(ctx, db, f, tg(rev), "standard")
		if err != nil {
			t.Fatal(err)
		}
		if in.ObjectKey != want || in.Reopened {
			t.Fatalf("intent planned at %d: %s (reopened %v), want %s", rev, in.ObjectKey, in.Reopened, want)
		}
		if err := db.Settle().AbandonPublish(ctx, f, in.ID, 0); err != nil {
			t.Fatal(err)
		}
		return in
	}
	high(-1, "nothing")
	open(0, "h40~0") // a new base: the planned revision
	high(0, "the first intent")
	open(0, "h40~1") // its row holds 0: above it
	high(1, "the second intent")
	open(5, "h40~5")
	high(5, "an intent planned above")

	if err := db.SetHighRevision(ctx, f, b, 2); err != nil {
		t.Fatal(err)
	}
	high(5, "the raise given 2")

	open(1, "h40~6")
	high(6, "an intent planned at 1")

	in, ok, err := db.OpenIntentsAtOnce(ctx, f, []catalog.IntentRequest{{Target: tg(3), Class: "standard"}})
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Fatalf("the set path opened %+v below the high-water", in)
	}
	high(6, "the set path given 3")

	reap := open(7, "h40~7")
	v, err := db.Trim().ClassifyReaps(ctx, f, 0, []catalog.ReapCandidate{{ID: reap.ID, Key: reap.ObjectKey,
		Coords: catalog.KeyCoords{Bucket: "b1", Stream: b.Stream, Epoch: b.Epoch, FirstRecord: b.FirstRecord, Revision: 4}}})
	if err != nil || v[reap.ID] != catalog.KeyDead {
		t.Fatalf("classify: %v %v", v, err)
	}
	high(7, "a burial at revision 4")

	if _, err := db.Restore().ClaimForReconcile(ctx, f, b.Stream, b.Epoch, nil, []int64{b.FirstRecord}, []int32{2}); err != nil {
		t.Fatal(err)
	}
	high(7, "reconcile's claim of revision 2")
	if _, err := db.Restore().ClaimForReconcile(ctx, f, b.Stream, b.Epoch, nil, []int64{b.FirstRecord}, []int32{9}); err != nil {
		t.Fatal(err)
	}
	high(9, "reconcile's claim of revision 9")
	open(0, "h40~10")
	high(10, "the last intent")
}

// TestLockHighRevisionBesideACreation: a base's row created by another
// transaction while the lock looks for it is an existing row once that
// transaction commits (the lock waits for it and reads the revision it
// committed), never a new one.
func TestLockHighRevisionBesideACreation(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	b := catalog.KeyBase{Stream: sid(2), Epoch: 1, FirstRecord: 50}
	got := make(chan int32, 1)
	errs := make(chan error, 1)
	err := db.Fenced(ctx, f, func(tx pgx.Tx) error {
		h, err := catalog.LockHighRevision(ctx, tx, b)
		if err != nil || h != -1 {
			return fmt.Errorf("first lock of a new base: %d %v, want -1", h, err)
		}
		go func() {
			errs <- db.Fenced(ctx, f, func(tx pgx.Tx) error {
				h, err := catalog.LockHighRevision(ctx, tx, b)
				got <- h
				return err
			})
		}()
		deadline := time.Now().Add(30 * time.Second)
		for n := 0; n == 0; {
			if n, err = db.LockWaiters(ctx); err != nil {
				return err
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the second lock never waited")
			}
			time.Sleep(10 * time.Millisecond)
		}
		_, err = tx.Exec(context.Background(), `UPDATE nova.auditor_key_revisions SET high_revision = 3
			WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, b.Stream, b.Epoch, b.FirstRecord)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	if h := <-got; h != 3 {
		t.Fatalf("the second lock read %d, want the committed 3", h)
	}
}
