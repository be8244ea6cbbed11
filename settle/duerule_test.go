package settle_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
)

// trickleRun is what one run of trickleUnderCycles saw.
type trickleRun struct {
	flights, cycles, settles, published, entries int
	uploaded, newBytes                           int64
	maxDeferred                                  int64
	oldest                                       time.Duration // the oldest unsettled age seen before any cycle
}

// trickleUnderCycles writes trickle streams (one small chunk per stream per
// flight, a flight every flightEvery, for writeFor) while running settle
// cycles back to back under policy p, then keeps cycling until all is
// settled. Before and after every cycle it reads the star's transit by the
// database clock (catalog.Ledger.TransitByClass): no record may be unsettled past
// its age cap. The ages only grow between cycles, so the reads before each
// cycle see the largest.
func trickleUnderCycles(t *testing.T, p catalog.DuePolicy, streams int, writeFor, flightEvery time.Duration) trickleRun {
	t.Helper()
	e, _ := newEnv(t, backends()[0], 0, 0)
	const recs, recBytes = 2, 100
	ids, next := writeFairSlots(t, e, fairShape{cold: streams, flights: 1, coldRecs: recs, coldBytes: recBytes})
	s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending},
		settle.Config{Policy: p, CapBytes: testCap, TargetBytes: testTarget, MaxStreams: 10000, MaxBytes: 1 << 40,
			Concurrency: 3, ReapGrace: time.Hour})
	run := trickleRun{flights: 1, newBytes: int64(streams * recs * recBytes)}
	check := func(when string) {
		t.Helper()
		_, classes, err := e.db.Ledger().TransitByClass(e.ctx, "s1", p)
		if err != nil {
			t.Fatal(err)
		}
		c := classes[0]
		if c.OverAgeCap > 0 || c.OldestAge > p.AgeCap {
			t.Fatalf("%s cycle %d: %d streams over the age cap %s, the oldest unsettled record %s old", when, run.cycles, c.OverAgeCap, p.AgeCap, c.OldestAge)
		}
		run.oldest = max(run.oldest, c.OldestAge)
		run.maxDeferred = max(run.maxDeferred, c.Deferred)
	}
	start := time.Now()
	lastWrite := start
	for {
		writing := time.Since(start) < writeFor
		if writing && time.Since(lastWrite) >= flightEvery {
			writeFairFlight(t, e, run.flights, ids, next, func(int) (int, int) { return recs, recBytes })
			run.flights++
			run.newBytes += int64(streams * recs * recBytes)
			lastWrite = time.Now()
		}
		check("before")
		c, err := e.cycle("s1", s)
		if err != nil || c.StreamsQuarantined != 0 {
			t.Fatalf("cycle %d: %+v %v", run.cycles, c, err)
		}
		run.cycles++
		run.settles += int(c.StreamsSettled)
		run.published += int(c.ObjectsPublished)
		run.uploaded += c.BytesUploaded
		check("after")
		if writing {
			time.Sleep(10 * time.Millisecond) // the writer's turn, and less CPU for nothing
			continue
		}
		marks, err := e.db.Streams().DueMarkers(e.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		if len(marks) == 0 {
			break
		}
		if time.Since(start) > writeFor+4*p.AgeCap {
			t.Fatalf("%d streams still unsettled %s after the last write", len(marks), time.Since(start)-writeFor)
		}
		time.Sleep(50 * time.Millisecond)
	}
	sts, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if st.SettledThrough != st.NextRecord {
			t.Errorf("stream %s: settled_through %d, next_record %d", st.ID, st.SettledThrough, st.NextRecord)
		}
		en, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		run.entries += len(en)
	}
	return run
}

// TestTailGrowthKeepsTheAgeCap: trickle streams written continuously, with
// a linger of 200ms and an age cap of 6s, settled by cycles run back to
// back. With the tail-growth rule at 1 no record is ever unsettled past its
// age cap (the product's promise: the rule holds a stream back until its
// cap less the margin, never past it), and the streams settle, rewriting
// their tails, fewer times and upload fewer bytes than with the rule off
// (0: every stream due at its linger, today's rule). The same holds with
// the rule's cohorts (4 of them, a turn a linger): what a stream waits for
// its cohort's turn never takes it past its cap either.
func TestTailGrowthKeepsTheAgeCap(t *testing.T) {
	if testing.Short() {
		t.Skip("writes and settles for some 20 seconds")
	}
	const streams = 8
	writeFor, flightEvery := 12*time.Second, 100*time.Millisecond
	p := catalog.DuePolicy{Linger: 200 * time.Millisecond, AgeCap: 6 * time.Second,
		ExpressLinger: 200 * time.Millisecond, ExpressAgeCap: 6 * time.Second,
		CopyFloor: min(objstore.DefaultLimits.CopyFloor(), testCap)}
	fractions := []float64{0, 1, 1}
	cohorts := []int{0, 0, 4}
	runs := make([]*trickleRun, len(fractions)) // each subtest writes its own
	t.Run("group", func(t *testing.T) {
		for i, f := range fractions {
			t.Run(fmt.Sprintf("f=%g,cohorts=%d", f, cohorts[i]), func(t *testing.T) {
				t.Parallel()
				q := p
				q.TailGrowth, q.Cohorts = f, cohorts[i]
				r := trickleUnderCycles(t, q, streams, writeFor, flightEvery)
				runs[i] = &r
			})
		}
	})
	off, on, co := runs[0], runs[1], runs[2]
	if off == nil || on == nil || co == nil {
		t.Fatal("a run failed")
	}
	for i, f := range fractions {
		r := runs[i]
		t.Logf("f=%g, %d cohorts: %d flights, %d cycles; %d stream settles, %d objects published over %d entries (%d tail rewrites); "+
			"%d bytes uploaded for %d new (%.1f per new byte); at most %d streams deferred; oldest unsettled %s (age cap %s)",
			f, cohorts[i], r.flights, r.cycles, r.settles, r.published, r.entries, r.published-r.entries, r.uploaded, r.newBytes,
			float64(r.uploaded)/float64(r.newBytes), r.maxDeferred, r.oldest.Round(time.Millisecond), p.AgeCap)
	}
	if off.maxDeferred != 0 {
		t.Errorf("the rule off deferred %d streams", off.maxDeferred)
	}
	if on.maxDeferred == 0 {
		t.Error("the rule at 1 never deferred a stream")
	}
	for _, r := range []*trickleRun{on, co} {
		if r.settles >= off.settles || r.uploaded >= off.uploaded {
			t.Errorf("the rule at 1 settled %d times and uploaded %d bytes; off, %d times and %d bytes: want fewer of both",
				r.settles, r.uploaded, off.settles, off.uploaded)
		}
	}
	if co.maxDeferred == 0 {
		t.Error("the rule at 1 with cohorts never deferred a stream")
	}
}
