package trim_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/trim"
)

// strayGuard is the sweep's guard in these tests: above their reap grace
// (0), and well above the second an S3 LastModified is truncated to.
const strayGuard = 3 * time.Second

func (e *env) strayConfig() trim.StrayConfig {
	guard := e.guard
	if guard == 0 {
		guard = e.cfg.ReapGrace + strayGuard
	}
	return trim.StrayConfig{Guard: guard, Every: e.sweepEvery, ListConcurrency: 4, MaxArmed: 1000}
}

// sweep runs the strays step once, forced (run --once --sweep-strays)
// or as scheduled.
func (e *env) sweep(forced bool) error {
	e.t.Helper()
	s, err := trim.NewStrays(e.deps(), e.cfg, e.strayConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	_, err = s.Run(e.ctx, e.fence, cycle.Options{Trigger: "once", SweepStrays: forced})
	return err
}

func (e *env) mustSweep(forced bool) {
	e.t.Helper()
	if err := e.sweep(forced); err != nil {
		e.t.Fatal(err)
	}
}

// findStrays is what `auditor verify --strays` reports.
func (e *env) findStrays() ([]trim.Stray, trim.StrayCounts) {
	e.t.Helper()
	var out []trim.Stray
	c, _, err := trim.FindStrays(e.ctx, e.db.Trim(), newReader(e), e.star, 4, func(s trim.Stray) error { out = append(out, s); return nil })
	if err != nil {
		e.t.Fatal(err)
	}
	return out, c
}

func (e *env) exists(bucket, key string) bool {
	e.t.Helper()
	ok, err := exists(e.ctx, e.store, bucket, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return ok
}

func (e *env) slotReaps() []catalog.SlotReap {
	e.t.Helper()
	r, err := e.db.Trim().SlotReaps(e.ctx, e.star)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) reapIntents() map[string]bool {
	e.t.Helper()
	in, err := e.db.Settle().Intents(e.ctx, e.star, "reap", 0)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, i := range in {
		out[i.ObjectKey] = true
	}
	return out
}

// TestStraySlotsSwept: slots put back behind the trim cursor after their
// reap (late create-once PUTs) are found in every bucket of the express
// set that holds them and, once older than the guard, armed as one
// slot_reaps range the reap step deletes; slots at or past the cursor
// (the live chain, a PUT ahead of the head) never are, nor a key under
// the chain that is not a slot key.
func TestStraySlotsSwept(t *testing.T) {
	forEachBackend(t, func(t *testing.T, ns namedStore) {
		a := sid(1)
		e := newEnvOn(t, ns, catalog.ClassExpress, 2, a)
		for seq := range int64(3) {
			e.flight(1, seq, batch{a, 3})
		}
		e.settle(a)
		e.mustCycle()               // the cursor to the head 1/3, the slots behind it reaped
		e.flight(1, 3, batch{a, 2}) // its ref holds the cursor at 1/3
		e.mustCycle()
		if c, _ := e.cursor(); c != P(1, 3) {
			t.Fatalf("cursor %s, want 1/3", c)
		}
		late := func(bucket string, seq int64) {
			if err := e.store.PutIfAbsent(e.ctx, bucket, bundlefmt.SlotKey(e.star, 1, uint64(seq)), e.slotBytes(1, seq, nil)); err != nil {
				t.Fatal(err)
			}
		}
		for _, b := range e.express {
			late(b, 0)
			late(b, 1)
			late(b, 5) // ahead of the head: the write path's, never a stray
		}
		late(e.express[1], 2)
		junk := "stars/" + e.star + "/chain/junk"
		if err := e.store.PutIfAbsent(e.ctx, e.express[0], junk, []byte("junk")); err != nil {
			t.Fatal(err)
		}

		strays, counts := e.findStrays()
		if counts.Slots != 2*len(e.express)+2 || counts.Unparsed != 1 || counts.Settled != 0 || counts.Buckets != len(e.express) {
			t.Fatalf("found %+v: %+v", counts, strays)
		}
		for _, s := range strays {
			if s.Key == bundlefmt.SlotKey(e.star, 1, 3) || s.Key == bundlefmt.SlotKey(e.star, 1, 5) {
				t.Errorf("a slot at or past the cursor reported: %+v", s)
			}
			if s.Key == junk && (s.Parses || s.Unswept == "") {
				t.Errorf("the junk key: %+v", s)
			}
		}
		// Younger than the guard: nothing armed.
		e.mustSweep(true)
		if r := e.slotReaps(); len(r) != 0 {
			t.Fatalf("armed before the guard: %+v", r)
		}
		time.Sleep(strayGuard + 1500*time.Millisecond)
		e.mustSweep(true)
		r := e.slotReaps()
		if len(r) != 1 || r[0].From != P(1, 0) || r[0].To != P(1, 3) || !r[0].Due {
			t.Fatalf("slot reaps after the sweep: %+v, want [1/0, 1/3) due", r)
		}
		if n := testutil.ToFloat64(e.metrics.StraysArmed(trim.StraySlot)); n != 3 {
			t.Errorf("strays_armed_total{kind=slot} = %v, want 3", n)
		}
		if n := testutil.ToFloat64(e.metrics.StraysFound(trim.StraySlot)); n != float64(counts.Slots) {
			t.Errorf("strays_found{kind=slot} = %v, want %d", n, counts.Slots)
		}
		e.mustCycle()
		for _, b := range e.express {
			for seq := range int64(3) {
				if e.exists(b, bundlefmt.SlotKey(e.star, 1, uint64(seq))) {
					t.Errorf("stray slot 1/%d left in %s", seq, b)
				}
			}
			for _, seq := range []uint64{3, 5} {
				if !e.exists(b, bundlefmt.SlotKey(e.star, 1, seq)) {
					t.Errorf("slot 1/%d at or past the cursor gone from %s", seq, b)
				}
			}
		}
		if !e.exists(e.express[0], junk) {
			t.Error("the junk key was deleted")
		}
		if _, c := e.findStrays(); c.Slots != 1 || c.Unparsed != 1 {
			t.Errorf("after the reap: %+v, want only the junk key", c)
		}
	})
}

// TestStraySettledSwept: a settled key no metadata names (a create-once
// PUT that landed after its key was buried, or a key above its base's
// high-water, as a metastore restored from backup leaves) is armed only
// once older than the guard, by the database clock, and only when the
// sweep is due or forced; the reap deletes it and buries its key. A
// scheduled sweep is due again only --stray-sweep-every after the last.
func TestStraySettledSwept(t *testing.T) {
	forEachBackend(t, func(t *testing.T, ns namedStore) {
		a := sid(1)
		e := newEnvOn(t, ns, catalog.ClassStandard, 2, a)
		e.sweepEvery = time.Hour
		e.flight(1, 0, batch{a, 4})
		cataloged := e.settle(a)[0]
		st, err := e.db.Streams().Stream(e.ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		key := func(first uint64, rev uint32) string {
			return bundlefmt.SettledKey(st.Bucket, a, uint64(st.Epoch), first, rev)
		}
		late, restored := key(0, 1), key(4, 7)
		for _, k := range []string{late, restored} {
			if err := e.store.PutIfAbsent(e.ctx, e.std, k, []byte("stray")); err != nil {
				t.Fatal(err)
			}
		}
		strays, counts := e.findStrays()
		if counts.Settled != 2 || counts.Streams != 1 || len(strays) != 2 {
			t.Fatalf("found %+v: %+v", counts, strays)
		}
		for _, s := range strays {
			if s.Key == cataloged || !s.Parses || s.Kind != trim.StraySettled || s.Bucket != e.std || s.Size != 5 || s.Age > strayGuard {
				t.Errorf("stray %+v", s)
			}
		}
		e.mustSweep(false) // never swept: due
		if r := e.reapIntents(); len(r) != 0 {
			t.Fatalf("armed before the guard: %v", r)
		}
		time.Sleep(strayGuard + 1500*time.Millisecond)
		e.mustSweep(false) // swept a moment ago: not due for an hour
		if r := e.reapIntents(); len(r) != 0 {
			t.Fatalf("a sweep that was not due armed %v", r)
		}
		e.mustSweep(true)
		if r := e.reapIntents(); len(r) != 2 || !r[late] || !r[restored] {
			t.Fatalf("reaps armed: %v", r)
		}
		if n := testutil.ToFloat64(e.metrics.StraysArmed(trim.StraySettled)); n != 2 {
			t.Errorf("strays_armed_total{kind=settled} = %v, want 2", n)
		}
		c := e.mustCycle()
		if c.ObjectsReaped != 2 || e.exists(e.std, late) || e.exists(e.std, restored) || !e.exists(e.std, cataloged) {
			t.Fatalf("reap of the strays: %+v", c)
		}
		for _, b := range []struct {
			first int64
			rev   int32
		}{{0, 1}, {4, 7}} {
			var high int32
			if err := e.db.Pool().QueryRow(e.ctx, `SELECT high_revision FROM nova.auditor_key_revisions
				WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, a, st.Epoch, b.first).Scan(&high); err != nil || high < b.rev {
				t.Errorf("base %d: high-water %d, %v; want at least %d (never published again)", b.first, high, err, b.rev)
			}
		}
		if _, c := e.findStrays(); c.Settled != 0 {
			t.Errorf("strays after the reap: %+v", c)
		}
	})
}

// TestStraySweepListingFails: a listing that fails part way sweeps
// nothing, though strays past the guard were found before it failed; the
// step reports the failure as partial (trim and reap still run), the
// sweep is not recorded, and the next sweep arms them.
func TestStraySweepListingFails(t *testing.T) {
	forEachBackend(t, func(t *testing.T, ns namedStore) {
		a, b := sid(1), sid(2)
		e := newEnvOn(t, ns, catalog.ClassStandard, 2, a, b)
		e.flight(1, 0, batch{a, 2}, batch{b, 2})
		e.flight(1, 1, batch{a, 2})
		e.settle(a, b)
		e.mustCycle()
		if err := e.store.PutIfAbsent(e.ctx, e.std, bundlefmt.SlotKey(e.star, 1, 0), e.slotBytes(1, 0, nil)); err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, id := range []catalog.StreamID{a, b} {
			for rev := range uint32(2) {
				k := bundlefmt.SettledKey("b1", id, 1, 0, rev+3)
				if err := e.store.PutIfAbsent(e.ctx, e.std, k, []byte("stray")); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, k)
			}
		}
		time.Sleep(strayGuard + 1500*time.Millisecond)
		e.store.failLists("buckets/", 2) // each stream's listing fails at its third key (the cataloged one and a stray before it)
		err := e.sweep(true)
		if !cycle.IsPartial(err) || !errors.Is(err, trim.ErrListing) || !errors.Is(err, errListFailed) {
			t.Fatalf("sweep over a failing listing: %v; want a partial listing failure", err)
		}
		if r := e.reapIntents(); len(r) != 0 {
			t.Errorf("armed over a failing listing: %v", r)
		}
		if r := e.slotReaps(); len(r) != 0 {
			t.Errorf("slots armed over a failing listing: %+v", r)
		}
		if due, err := e.db.Trim().StraySweepDue(e.ctx, e.star, time.Hour); err != nil || !due {
			t.Errorf("a failed sweep was recorded: due %v, %v", due, err)
		}
		if n := testutil.ToFloat64(e.metrics.StraysArmed(trim.StraySettled)) + testutil.ToFloat64(e.metrics.StraysArmed(trim.StraySlot)); n != 0 {
			t.Errorf("strays_armed_total = %v over a failing listing", n)
		}
		var out []trim.Stray
		if _, _, err := trim.FindStrays(e.ctx, e.db.Trim(), newReader(e), e.star, 1, func(s trim.Stray) error { out = append(out, s); return nil }); !errors.Is(err, trim.ErrListing) || len(out) == 0 {
			t.Errorf("FindStrays over a failing listing: %v after %d strays; want ErrListing after some", err, len(out))
		}
		e.store.failLists("", 0)
		e.mustSweep(true)
		r := e.reapIntents()
		for _, k := range keys {
			if !r[k] {
				t.Errorf("%s not armed once the listing is whole", k)
			}
		}
		if len(e.slotReaps()) != 1 {
			t.Errorf("slot reaps: %+v", e.slotReaps())
		}
		e.mustCycle()
		for _, k := range keys {
			if e.exists(e.std, k) {
				t.Errorf("%s left after the reap", k)
			}
		}
		if e.exists(e.std, bundlefmt.SlotKey(e.star, 1, 0)) {
			t.Error("the stray slot left after the reap")
		}
	})
}

// TestStrayConfig: the guard must exceed the reap grace.
func TestStrayConfig(t *testing.T) {
	c := trim.Config{ReapGrace: time.Minute, BatchSize: 10, Concurrency: 1}
	ok := trim.StrayConfig{Guard: time.Hour, ListConcurrency: 1, MaxArmed: 1}
	if err := ok.Validate(c); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []trim.StrayConfig{{Guard: time.Minute, ListConcurrency: 1, MaxArmed: 1}, {Guard: time.Hour, Every: -1, ListConcurrency: 1, MaxArmed: 1},
		{Guard: time.Hour, MaxArmed: 1}, {Guard: time.Hour, ListConcurrency: 1}} {
		if err := bad.Validate(c); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func newReader(e *env) *bundle.Reader { return bundle.NewReader(e.deps().Topology) }
