package trim_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/trim"
)

// TestEndToEndNovasimSettleTrimReap: novasim traffic with failover, crashes,
// lost flights and lost replies on a standard and an express star; a settle
// cycle, then a cycle past the grace: every slot behind the cursor is gone
// from every bucket of its class, every slot at or past it is still there,
// and novasim check verifies every record.
func TestEndToEndNovasimSettleTrimReap(t *testing.T) {
	t.Parallel()
	forEachBackend(t, endToEnd)
}

func endToEnd(t *testing.T, ns namedStore) {
	db, ctx := openDB(t)
	mem := ns.store
	std, express := ns.buckets[0], ns.buckets[1:4]
	storage := sim.Storage{Store: mem, Standard: std, Express: express}
	fx, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "e2e", Streams: 24, ExpressShare: 0.34, FenceWindow: 3,
		Content: sim.Content{Seed: 11, MaxBytes: 1024, HeaderShare: 0.3, EmptyShare: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	written := map[string][]sim.SlotOutcome{}
	write := func(session uint64) {
		t.Helper()
		for _, st := range fx.Stars {
			ws, err := sim.Write(ctx, db, storage, sim.WriteOptions{Star: st.Star, Flights: 100, FlightBytes: 8 << 10, AbsorbFlights: 3,
				Session: session, RecordSlots: true, Faults: sim.Faults{Failover: 0.03, Lost: 0.06, Crash: 0.02, LostReply: 0.03}})
			if err != nil {
				t.Fatalf("write %s: %v", st.Star, err)
			}
			if ws.Fences == 0 || ws.Poisons == 0 || ws.Unabsorbed == 0 {
				t.Fatalf("%s: traffic without failover, poison or lost flights: %+v", st.Star, ws)
			}
			written[st.Star] = append(written[st.Star], ws.Slots...)
			t.Logf("%s session %d: %d flights, %d absorbed, %d lost, %d poisons, %d fences", st.Star, session, ws.Flights, ws.Absorbed,
				ws.Unabsorbed, ws.Poisons, ws.Fences)
		}
	}
	write(1)
	const grace = time.Second
	reg := prometheus.NewRegistry()
	metrics, err := trim.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	top := teststore.Topology(t, mem, std, express, nil)
	deps := trim.Deps{DB: db.Trim(), Topology: top, Metrics: metrics}
	cfg := trim.Config{ReapGrace: grace, BatchSize: 1000, Concurrency: trim.DefaultConcurrency}
	runCycle := func(star string, f catalog.Fence, linger time.Duration) cycle.Counts {
		t.Helper()
		pol := catalog.DuePolicy{Linger: linger, AgeCap: 2 * linger, ExpressLinger: linger, ExpressAgeCap: 2 * linger}
		s, err := settle.New(settle.Deps{DB: db.Settle(), Topology: top},
			settle.Config{Policy: pol, CapBytes: 64 << 10, TargetBytes: 16 << 10, MaxStreams: 1000, MaxBytes: 1 << 40, Concurrency: 4,
				ReapGrace: grace, FooterCacheBytes: 256 << 20, WindowRefs: settle.DefaultWindowRefs,
				WindowRecords: settle.DefaultWindowRecords, HotStreams: settle.DefaultHotStreams,
				MaxPendingErasures: settle.DefaultMaxPendingErasures})
		if err != nil {
			t.Fatal(err)
		}
		ret, _ := trim.NewRetention(deps, cfg)
		tr, _ := trim.NewTrim(deps, cfg)
		rp, _ := trim.NewReap(deps, cfg)
		var total cycle.Counts
		for _, step := range []cycle.Step{s, ret, tr, rp} {
			c, err := step.Run(ctx, f, cycle.Options{Trigger: "once"})
			if err != nil {
				t.Fatalf("%s %s: %v", star, step.Name(), err)
			}
			total.Add(c)
		}
		return total
	}
	cursor := func(star string) trim.Pos {
		t.Helper()
		tst, err := db.Trim().TrimState(ctx, star)
		if err != nil || !tst.HasCursor {
			t.Fatalf("%s: no trim cursor (%v)", star, err)
		}
		return tst.Cursor
	}
	// checkChain: every slot before gone is in no bucket of the class;
	// every absorbed or poison slot at or past it is in every bucket (a
	// never-absorbed flight may lack express copies).
	checkChain := func(st sim.FixtureStar, gone trim.Pos) int {
		t.Helper()
		buckets := []string{std}
		if st.Class == catalog.ClassExpress {
			buckets = express
		}
		have := map[trim.Pos]int{}
		for _, b := range buckets {
			keys, err := keysUnder(ctx, mem, b, "stars/"+st.Star+"/chain/")
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				_, ep, seq, err := bundlefmt.ParseSlotKey(k)
				if err != nil {
					t.Fatal(err)
				}
				p := P(int64(ep), int64(seq))
				have[p]++
				if p.Less(gone) {
					t.Errorf("%s: slot %s behind the reaped cursor %s is still in %s", st.Star, k, gone, b)
				}
			}
		}
		for _, so := range written[st.Star] {
			p := P(so.Epoch, so.Seq)
			if !p.Less(gone) && (so.Absorbed || so.Poison) && have[p] != len(buckets) {
				t.Errorf("%s: slot %s at or past the cursor %s is in %d of %d buckets", st.Star, p, gone, have[p], len(buckets))
			}
		}
		return len(have)
	}
	// Cycle 1 settles everything and trims; then more traffic (a restarted
	// writer: a new epoch). Cycle 2, past the grace, reaps what cycle 1
	// released and, its settle leaving the new traffic alone (a long
	// linger), trims up to the new traffic's earliest ref. Cycle 3, past the
	// grace again, reaps that.
	fences := map[string]catalog.Fence{}
	for _, st := range fx.Stars {
		lease, err := db.Leases().AcquireLeaseInstance(ctx, st.Star, "e2e", "", time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		fences[st.Star] = lease.Fence
		c1 := runCycle(st.Star, lease.Fence, 0)
		if c1.SlotsReaped != 0 || c1.StreamsSettled == 0 {
			t.Fatalf("%s first cycle: %+v (nothing may be reaped before the grace)", st.Star, c1)
		}
	}
	write(2)
	waitDBClock(t, db, grace)
	for _, st := range fx.Stars {
		c1 := cursor(st.Star)
		c2 := runCycle(st.Star, fences[st.Star], time.Hour)
		if c2.SlotsReaped == 0 {
			t.Fatalf("%s second cycle reaped nothing: %+v", st.Star, c2)
		}
		checkChain(st, c1)
	}
	waitDBClock(t, db, grace)
	for _, st := range fx.Stars {
		c3 := runCycle(st.Star, fences[st.Star], time.Hour)
		cur := cursor(st.Star)
		kept := checkChain(st, cur)
		if kept == 0 {
			t.Errorf("%s: nothing kept at or past the cursor: the second session's refs should hold it", st.Star)
		}
		t.Logf("%s: cursor %s, %d slots kept, %d reaped in the third cycle", st.Star, cur, kept, c3.SlotsReaped)
	}
	rep, err := sim.Check(ctx, db, storage, sim.CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		for _, f := range rep.Findings {
			t.Log(f)
		}
		t.Fatalf("novasim check: %d missing, %d wrong, %d duplicated, %d violations", rep.Missing, rep.Wrong, rep.Duplicated, rep.Violations)
	}
	if rep.FromSlots == 0 || rep.FromSettled == 0 {
		t.Errorf("check read %d records from slots and %d from settled objects; want both", rep.FromSlots, rep.FromSettled)
	}
	t.Logf("novasim check: %d records verified (%d from settled objects, %d from slots); %d slots in the chains", rep.Checked,
		rep.FromSettled, rep.FromSlots, rep.Chain.Slots)
	if metric(t, reg, "nova_auditor_slots_reaped_total") == 0 {
		t.Fatal("no slots reaped")
	}
}

// waitDBClock sleeps until d has passed on the database clock.
func waitDBClock(t testing.TB, db *catalog.DB, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	start, err := db.Now(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for {
		now, err := db.Now(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if now.Sub(start) > d {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}
