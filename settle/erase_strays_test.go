package settle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// strayGuard is the erase step's guard in these tests: short, and well
// above the second an S3 LastModified is truncated to.
const strayGuard = 3 * time.Second

// TestErasureWaitsForStrays: an erasure whose records an object no
// metadata names holds (a stray) is not applied while the stray stands.
// Younger than the guard, the stray keeps it pending and nothing is armed;
// older, its reap is armed, the reap deletes it (burying its key), and the
// erasure applies at the next pass. A stray whose footer cannot be read
// holds every record from its key's first record on; one whose first
// record lies past the erasure holds none of it and is left alone.
func TestErasureWaitsForStrays(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 3, sim.Faults{}, 1)
			reg := prometheus.NewRegistry()
			m, err := settle.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending, Metrics: m},
				settle.Config{CapBytes: testCap, TargetBytes: 1, MaxStreams: 10000, MaxBytes: 1 << 40, Concurrency: 3, StrayGuard: strayGuard})
			e.settleOK(s)
			st := e.firstStream("s1")
			en := e.lastEntry(st.ID)
			key := func(first int64, rev int32) string {
				return bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), uint64(first), uint32(rev))
			}
			obj, _, err := e.store.GetRange(e.ctx, e.std, key(en.FirstRecord, en.Revision), 0, en.ObjectBytes)
			if err != nil {
				t.Fatal(err)
			}
			copied := key(en.FirstRecord, en.Revision+5) // a whole copy of the entry's object: its footer says its records
			unreadable := key(en.FirstRecord+1, 0)       // no footer: every record from en.FirstRecord+1 on
			beyond := key(st.SettledThrough+1000, 0)     // no footer, past the erasure: holds none of it
			for k, data := range map[string][]byte{copied: obj, unreadable: []byte("not a bundle"), beyond: []byte("not a bundle")} {
				if err := e.store.PutIfAbsent(e.ctx, e.std, k, data); err != nil {
					t.Fatal(err)
				}
			}
			e.record(st.ID, en.FirstRecord+2, 2)
			exists := func(k string) bool {
				_, err := e.store.Head(e.ctx, e.std, k)
				if err != nil && !errors.Is(err, objstore.ErrNotFound) {
					t.Fatal(err)
				}
				return err == nil
			}
			reaps := func() map[string]bool {
				in, err := e.db.Settle().Intents(e.ctx, "s1", "reap", 0)
				if err != nil {
					t.Fatal(err)
				}
				out := map[string]bool{}
				for _, i := range in {
					out[i.ObjectKey] = true
				}
				return out
			}

			// The rewrite, then the superseded revision's reap: the strays,
			// younger than the guard, keep the erasure pending, unarmed.
			if c := e.erase("s1", s); c.ObjectsRewritten != 1 || c.ErasuresApplied != 0 {
				t.Fatalf("first pass: %+v", c)
			}
			e.reap("s1")
			if c := e.erase("s1", s); c.ErasuresApplied != 0 {
				t.Fatalf("applied while strays younger than the guard hold its records: %+v", c)
			}
			if r := reaps(); len(r) != 0 {
				t.Fatalf("reaps armed before the guard: %v", r)
			}
			if w := testutil.ToFloat64(m.ErasureStrays("waiting")); w < 2 {
				t.Errorf("erasure_strays_total{outcome=waiting} = %v, want the two strays that hold it", w)
			}
			// Past the guard: the two that hold its records are armed, due
			// now; the erasure waits for their reap.
			time.Sleep(strayGuard + 1500*time.Millisecond)
			if c := e.erase("s1", s); c.ErasuresApplied != 0 {
				t.Fatalf("applied while its strays stand: %+v", c)
			}
			if r := reaps(); len(r) != 2 || !r[copied] || !r[unreadable] {
				t.Fatalf("reaps armed: %v, want %s and %s", r, copied, unreadable)
			}
			if a := testutil.ToFloat64(m.ErasureStrays("armed")); a != 2 {
				t.Errorf("erasure_strays_total{outcome=armed} = %v, want 2", a)
			}
			if c := e.reap("s1"); c.ObjectsReaped != 2 || exists(copied) || exists(unreadable) {
				t.Fatalf("reap of the armed strays: %+v (%s left: %v)", c, copied, exists(copied))
			}
			// Buried: the copy's revision is below its base's high-water.
			var high int32
			if err := e.db.Pool().QueryRow(e.ctx, `SELECT high_revision FROM nova.auditor_key_revisions
				WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, st.ID, st.Epoch, en.FirstRecord).Scan(&high); err != nil || high < en.Revision+5 {
				t.Errorf("high-water of the copy's base: %d, %v; want at least %d", high, err, en.Revision+5)
			}
			if c := e.erase("s1", s); c.ErasuresApplied != 1 {
				t.Fatalf("not applied once its strays were reaped: %+v", c)
			}
			if ers := e.checkErased(st.ID); applied(ers) != 1 {
				t.Fatalf("erasures: %+v", ers)
			}
			if !exists(beyond) || reaps()[beyond] {
				t.Errorf("the stray past the erasure was touched: exists %v, armed %v", exists(beyond), reaps()[beyond])
			}
		})
	}
}

// failingLists is a store whose listings fail after one key.
type failingLists struct{ objstore.Store }

var errListFailed = errors.New("injected: listing failed")

func (f failingLists) List(ctx context.Context, b, prefix string, fn func(objstore.ObjectInfo) error) error {
	n := 0
	return f.Store.List(ctx, b, prefix, func(o objstore.ObjectInfo) error {
		if n++; n > 1 {
			return errListFailed
		}
		return fn(o)
	})
}

// TestErasureListingFails: when the stream's listing fails, the erase
// step applies nothing of the stream and reports the failure (a partial
// failure: the cycle's later steps still run).
func TestErasureListingFails(t *testing.T) {
	e, _ := newEnv(t, backends()[0], 1, 0)
	e.write("s1", 2, sim.Faults{}, 1)
	s := e.eraseSettler(nil)
	e.settleOK(s)
	st := e.firstStream("s1")
	en := e.lastEntry(st.ID)
	// Two objects under the prefix: the listing fails at the second.
	if err := e.store.PutIfAbsent(e.ctx, e.std, bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), uint64(st.SettledThrough+10), 0), []byte("x")); err != nil {
		t.Fatal(err)
	}
	e.record(st.ID, en.FirstRecord, 1)
	e.erase("s1", s)
	e.reap("s1")
	failing := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topologyOver(failingLists{e.store}), Pending: e.pending},
		settle.Config{CapBytes: testCap, TargetBytes: 1, MaxStreams: 10000, MaxBytes: 1 << 40, Concurrency: 3, StrayGuard: strayGuard})
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "test", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c, err := failing.Eraser().Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"})
	_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
	if !cycle.IsPartial(err) || !errors.Is(err, errListFailed) || c.ErasuresApplied != 0 {
		t.Fatalf("erase over a failing listing: %+v, %v; want nothing applied and the listing's error, partial", c, err)
	}
	if ers, _ := e.db.Erasures().ErasuresOf(e.ctx, st.ID, 0, 1<<62); applied(ers) != 0 {
		t.Fatalf("applied: %+v", ers)
	}
	// With the listing whole, it applies.
	if c := e.erase("s1", s); c.ErasuresApplied != 1 {
		t.Fatalf("erase with the listing whole: %+v", c)
	}
}
