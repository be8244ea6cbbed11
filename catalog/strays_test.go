package catalog_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// TestNamedSettledKeysAndArmStrays: a listed key is named by a catalog row
// with its coordinates and its stream's bucket, or by an intent of either
// kind on it; every other key is a stray, and arming reaps them arms each
// once (a key armed is named by its reap intent), fenced, due now; the
// reap step's classification then buries it.
func TestNamedSettledKeysAndArmStrays(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	a := sid(1)
	settleEntry(t, ctx, db, f, a, 0, 5, 0, -1, "a0~0", "")
	co := func(bucket string, first int64, rev int32) catalog.KeyCoords {
		return catalog.KeyCoords{Bucket: bucket, Stream: a, Epoch: 1, FirstRecord: first, Revision: rev}
	}
	in, err := writepath.OpenIntent(ctx, db, f, catalog.ExactTarget("p5~0", 0), "standard")
	if err != nil {
		t.Fatal(err)
	}
	armReap(t, ctx, db, f, "r7~0")
	keys := []catalog.ListedKey{
		{Key: "a0~0", Coords: co("b1", 0, 0)},    // the catalog's
		{Key: "x0~0", Coords: co("other", 0, 0)}, // the catalog's coordinates in another bucket
		{Key: "a0~1", Coords: co("b1", 0, 1)},    // another revision of a cataloged base
		{Key: in.ObjectKey, Coords: co("b1", 5, 0)},
		{Key: "r7~0", Coords: co("b1", 7, 0)},
		{Key: "s50~0", Coords: co("b1", 50, 0)}, // nothing at all
	}
	want := []bool{true, false, false, true, true, false}
	got, err := db.Trim().NamedSettledKeys(ctx, keys)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("named = %v, %v; want %v", got, err, want)
	}
	if _, err := db.Trim().ArmStrayReaps(ctx, catalog.Fence{Star: "s1", Holder: "me", Token: f.Token + 1}, keys); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("arm under a stale token: %v", err)
	}
	armed, err := db.Trim().ArmStrayReaps(ctx, f, keys)
	slices.Sort(armed)
	if err != nil || !slices.Equal(armed, []string{"a0~1", "s50~0", "x0~0"}) {
		t.Fatalf("armed %v, %v; want the three strays", armed, err)
	}
	if again, err := db.Trim().ArmStrayReaps(ctx, f, keys); err != nil || len(again) != 0 {
		t.Fatalf("armed again %v, %v: a key with a reap intent is named", again, err)
	}
	if got, _ := db.Trim().NamedSettledKeys(ctx, keys); slices.Contains(got, false) {
		t.Fatalf("named after arming: %v", got)
	}
	due, err := db.Trim().DueObjectReaps(ctx, "s1", time.Hour, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var cands []catalog.ReapCandidate
	for _, d := range due {
		for _, k := range keys[1:3] {
			if d.ObjectKey == k.Key {
				if d.Kind != "reap" || d.Class != catalog.ClassStandard {
					t.Errorf("stray %s armed as %+v", k.Key, d)
				}
				cands = append(cands, catalog.ReapCandidate{ID: d.ID, Key: d.ObjectKey, Coords: k.Coords})
			}
		}
	}
	if len(cands) != 2 {
		t.Fatalf("the strays' reaps are not due at once: %+v", due)
	}
	// The reap step's classification finds them dead and buries the one
	// of a reachable base: its next publish goes above the stray's key.
	v, err := db.Trim().ClassifyReaps(ctx, f, time.Hour, cands)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cands {
		if v[c.ID] != catalog.KeyDead {
			t.Errorf("stray %s classified %v, want dead", c.Key, v[c.ID])
		}
	}
	if h, err := db.HighRevision(ctx, catalog.KeyBase{Stream: a, Epoch: 1, FirstRecord: 0}); err != nil || h != 1 {
		t.Errorf("high revision of the stray's base: %d, %v; want 1", h, err)
	}
}

// TestArmSlotStrays: a range of slots is armed only behind the trim
// cursor and where no slot reap is recorded, due now.
func TestArmSlotStrays(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	p := func(seq int64) catalog.SlotPos { return catalog.SlotPos{Epoch: 1, Seq: seq} }
	if _, err := db.Pool().Exec(ctx, `DELETE FROM nova.span_refs WHERE star = 's1'`); err != nil { // as if settled
		t.Fatal(err)
	}
	r, err := db.Trim().AdvanceTrim(ctx, f, nil, p(0), p(2), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// Before the recorded range is finished, a stray range inside it is
	// refused; after, the same range is armed.
	if got, err := db.Trim().ArmSlotStrays(ctx, f, []catalog.SlotRange{{From: p(0), To: p(1)}}); err != nil || len(got) != 0 {
		t.Fatalf("armed %v, %v inside a recorded slot reap", got, err)
	}
	if err := db.Trim().FinishSlotReap(ctx, f, r.ID); err != nil {
		t.Fatal(err)
	}
	ranges := []catalog.SlotRange{{From: p(0), To: p(1)}, {From: p(1), To: p(3)} /* past the cursor */}
	got, err := db.Trim().ArmSlotStrays(ctx, f, ranges)
	if err != nil || !slices.Equal(got, ranges[:1]) {
		t.Fatalf("armed %v, %v; want only the range behind the cursor", got, err)
	}
	if got, err := db.Trim().ArmSlotStrays(ctx, f, ranges[:1]); err != nil || len(got) != 0 {
		t.Fatalf("armed %v, %v again", got, err)
	}
	reaps, err := db.Trim().SlotReaps(ctx, "s1")
	if err != nil || len(reaps) != 1 || reaps[0].From != p(0) || reaps[0].To != p(1) || !reaps[0].Due {
		t.Fatalf("slot reaps after arming: %+v %v", reaps, err)
	}
	if _, err := db.Trim().ArmSlotStrays(ctx, f, []catalog.SlotRange{{From: p(1), To: p(1)}}); err == nil {
		t.Error("an empty range armed")
	}
	if _, err := db.Trim().ArmSlotStrays(ctx, catalog.Fence{Star: "s1", Holder: "me", Token: f.Token + 1}, ranges); !errors.Is(err, catalog.ErrStaleToken) {
		t.Errorf("arm under a stale token: %v", err)
	}
}

// TestStraySweepDue: a star never swept is due; a sweep recorded now is
// not due again until every has passed (database clock); every 0 is
// never due.
func TestStraySweepDue(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	due := func(every time.Duration) bool {
		t.Helper()
		d, err := db.Trim().StraySweepDue(ctx, "s1", every)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The idle check (IdleState) agrees: a due sweep is work.
	idleWork := func(every time.Duration) string {
		t.Helper()
		st, err := db.Trim().IdleState(ctx, "s1", catalog.DuePolicy{}, every)
		if err != nil {
			t.Fatal(err)
		}
		return st.Work
	}
	if !due(time.Hour) || due(0) || idleWork(time.Hour) == "" {
		t.Fatalf("a star never swept: due every hour (idle check: %q), never with the sweep off", idleWork(time.Hour))
	}
	if err := db.Trim().RecordStraySweep(ctx, f); err != nil {
		t.Fatal(err)
	}
	if due(time.Hour) || idleWork(time.Hour) == "strays" {
		t.Errorf("due an hour after a sweep recorded now (idle check: %q)", idleWork(time.Hour))
	}
	time.Sleep(20 * time.Millisecond)
	if !due(10 * time.Millisecond) {
		t.Error("not due 10 ms after a sweep 20 ms ago")
	}
	if err := db.Trim().RecordStraySweep(ctx, catalog.Fence{Star: "s1", Holder: "me", Token: f.Token + 1}); !errors.Is(err, catalog.ErrStaleToken) {
		t.Errorf("record under a stale token: %v", err)
	}
	// The sweep's row keeps the star's other state.
	if err := db.Trim().RecordStraySweep(ctx, f); err != nil {
		t.Fatal(err)
	}
	if st, err := db.Ledger().DaemonState(ctx, "s1"); err != nil || st.Paused || st.Halted() {
		t.Errorf("daemon state after a sweep: %+v %v", st, err)
	}
}
