package settle_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/verify"
)

// eraseSettler is the test settler with no reap grace, so a reap right
// after a rewrite deletes the superseded revision (what applied_at waits
// for).
// Chunks are not merged (a target of one byte), so objects keep the
// source chunks' boundaries.
func (e *env) eraseSettler(crash func(crashpoint.Point)) *settle.Settler {
	return e.eraseSettlerCap(crash, testCap)
}

func (e *env) eraseSettlerCap(crash func(crashpoint.Point), capBytes int64) *settle.Settler {
	return e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending, Crash: crash},
		settle.Config{CapBytes: capBytes, TargetBytes: 1, MaxStreams: 10000, MaxBytes: 1 << 40, Concurrency: 3})
}

// erase runs the erasure step of s once for star under a fresh lease, in a
// goroutine of its own (a crash point ends it with runtime.Goexit).
func (e *env) erase(star string, s *settle.Settler) cycle.Counts {
	e.t.Helper()
	return e.eraseWith(star, s, cycle.Options{Trigger: "once"})
}

// eraseWith is erase with the cycle's options.
func (e *env) eraseWith(star string, s *settle.Settler, opts cycle.Options) cycle.Counts {
	e.t.Helper()
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, star, "test", "", time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	var c cycle.Counts
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err = s.Eraser().Run(e.ctx, l.Fence, opts)
	}()
	<-done
	if err != nil {
		e.t.Fatalf("erase: %v", err)
	}
	return c
}

// chunksOf reads a cataloged object's chunks.
func (e *env) chunksOf(st catalog.Stream, en catalog.Entry) []bundlefmt.Entry {
	e.t.Helper()
	key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
	buf, size, err := e.store.GetRange(e.ctx, e.std, key, en.FooterOffset, en.FooterLength+bundlefmt.TrailerSize)
	if err != nil {
		e.t.Fatal(err)
	}
	f, err := bundlefmt.OpenFooter(key, uint64(en.FooterOffset), buf, uint64(size), bundlefmt.SettledBase)
	if err != nil {
		e.t.Fatal(err)
	}
	es, err := f.Entries()
	if err != nil {
		e.t.Fatal(err)
	}
	return es
}

func (e *env) record(id catalog.StreamID, first, count int64) {
	e.t.Helper()
	if _, err := e.db.Erasures().RecordErasure(e.ctx, id, first, count); err != nil {
		e.t.Fatal(err)
	}
}

// checkErased runs novasim check (tombstones exactly where erasures are
// applied, the original bytes everywhere else, either under a pending
// erasure) and returns the stream's erasures.
func (e *env) checkErased(id catalog.StreamID) []catalog.Erasure {
	e.t.Helper()
	rep, err := sim.Check(e.ctx, e.db, e.storage(), sim.CheckOptions{Stars: []string{"s1"}, SettledOnly: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() || rep.Checked == 0 {
		e.t.Fatalf("novasim check: %+v", rep)
	}
	ers, err := e.db.Erasures().ErasuresOf(e.ctx, id, 0, 1<<62)
	if err != nil {
		e.t.Fatal(err)
	}
	return ers
}

func applied(ers []catalog.Erasure) int {
	n := 0
	for _, e := range ers {
		if e.Applied {
			n++
		}
	}
	return n
}

// TestEraseRewritesSettledObjects erases, from settled objects, records
// inside one chunk, across a chunk boundary, across two objects and over
// one object's whole range: each object is rewritten once at revision + 1
// with exactly those records tombstoned, and the erasures are applied only
// once the superseded revisions are reaped.
func TestEraseRewritesSettledObjects(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 2, 0) // two streams a flight: chunks of 32 KiB, three to an object
			e.write("s1", 24, sim.Faults{}, 1)
			s := e.eraseSettler(nil)
			if _, err := e.cycle("s1", s); err != nil {
				t.Fatal(err)
			}
			streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			st := streams[0]
			if streams[1].Class == catalog.ClassStandard && streams[1].NextRecord > st.NextRecord {
				st = streams[1]
			}
			entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
			if len(entries) < 4 {
				t.Fatalf("want at least 4 settled objects, have %d", len(entries))
			}
			// Four shapes over distinct objects: inside one chunk (entry
			// in), across a chunk boundary (entry mc, of two chunks or
			// more), across objects (entries x and x+1), one whole object
			// (entry w).
			in, mc, x, w := -1, -1, -1, -1
			for i := range entries {
				n := len(e.chunksOf(st, entries[i]))
				switch {
				case mc < 0 && n >= 2:
					mc = i
				case in < 0 && n == 1:
					in = i
				}
			}
			used := func(i int) bool { return i == in || i == mc }
			for i := 0; i+1 < len(entries); i++ {
				switch {
				case x < 0 && !used(i) && !used(i+1):
					x = i
				case x >= 0 && w < 0 && i > x+1 && !used(i):
					w = i
				}
			}
			if in < 0 || mc < 0 || x < 0 || w < 0 {
				t.Fatalf("no four distinct objects of the shapes needed among %d", len(entries))
			}
			cm := e.chunksOf(st, entries[mc])
			e.record(st.ID, entries[in].FirstRecord+1, 2)                   // inside one chunk
			e.record(st.ID, int64(cm[0].EndRecord())-1, 2)                  // across a chunk boundary
			e.record(st.ID, entries[x].EndRecord()-1, 2)                    // across two objects
			e.record(st.ID, entries[w].FirstRecord, entries[w].RecordCount) // one object's whole range
			rewritten := map[int]bool{in: true, mc: true, x: true, x + 1: true, w: true}
			want := int64(2+2+2) + entries[w].RecordCount
			c := e.erase("s1", s)
			if c.ObjectsRewritten != 5 || c.RecordsTombstoned != want || c.ErasuresApplied != 0 {
				t.Fatalf("first erase: %+v (want 5 rewritten, %d tombstoned, none applied before the reap)", c, want)
			}
			after, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
			for i := range after {
				wantRev := entries[i].Revision
				if rewritten[i] {
					wantRev++
				}
				if after[i].FirstRecord != entries[i].FirstRecord || after[i].RecordCount != entries[i].RecordCount || after[i].Revision != wantRev {
					t.Fatalf("entry %d: %+v, was %+v", i, after[i], entries[i])
				}
			}
			if ers := e.checkErased(st.ID); applied(ers) != 0 {
				t.Fatalf("applied before the old revisions were reaped: %+v", ers)
			}
			// Once nothing but the rewrites holds the records, they apply;
			// a second pass rewrites nothing.
			if r := e.reap("s1"); r.ObjectsReaped != 5 {
				t.Fatalf("reaped %d superseded revisions, want 5", r.ObjectsReaped)
			}
			c = e.erase("s1", s)
			if c.ObjectsRewritten != 0 || c.ErasuresApplied != 4 {
				t.Fatalf("second erase: %+v", c)
			}
			if ers := e.checkErased(st.ID); applied(ers) != 4 {
				t.Fatalf("erasures: %+v", ers)
			}
			if c := e.erase("s1", s); c != (cycle.Counts{}) {
				t.Fatalf("nothing pending, yet: %+v", c)
			}
			e.checkSettled("s1")
		})
	}
}

// TestEraseRecordsStillInTransit erases records before they settle: settle
// writes them as tombstones (no rewrite follows), and an erasure reaching
// past next_record stays pending until those records exist and settle.
func TestEraseRecordsStillInTransit(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 6, sim.Faults{}, 1)
			st := e.firstStream("s1")
			e.record(st.ID, 10, 10)
			e.record(st.ID, st.NextRecord-2, 5) // 3 records not yet written
			s := e.eraseSettler(nil)
			c, err := e.cycle("s1", s)
			if err != nil {
				t.Fatal(err)
			}
			if c.RecordsTombstoned != 12 {
				t.Fatalf("settle tombstoned %d records, want 12: %+v", c.RecordsTombstoned, c)
			}
			c = e.erase("s1", s)
			if c.ObjectsRewritten != 0 || c.ErasuresApplied != 1 {
				t.Fatalf("erase after settle: %+v (want nothing rewritten, the in-transit erasure applied)", c)
			}
			if ers := e.checkErased(st.ID); applied(ers) != 1 {
				t.Fatalf("erasures: %+v", ers)
			}
			// The rest of the second erasure arrives and settles as
			// tombstones, through the tail rewrite.
			e.write("s1", 3, sim.Faults{}, 2)
			if _, err := e.cycle("s1", s); err != nil {
				t.Fatal(err)
			}
			e.reap("s1")
			if c := e.erase("s1", s); c.ErasuresApplied != 1 || c.ObjectsRewritten != 0 {
				t.Fatalf("erase after the rest settled: %+v", c)
			}
			if ers := e.checkErased(st.ID); applied(ers) != 2 {
				t.Fatalf("erasures: %+v", ers)
			}
			e.checkSettled("s1")
		})
	}
}

// lastEntry is the stream's last catalog entry.
func (e *env) lastEntry(id catalog.StreamID) catalog.Entry {
	e.t.Helper()
	entries, err := e.db.Streams().EntriesOfStream(e.ctx, id)
	if err != nil || len(entries) == 0 {
		e.t.Fatalf("entries of %s: %d, %v", id, len(entries), err)
	}
	return entries[len(entries)-1]
}

// settleOK runs a settle cycle that must quarantine nothing.
func (e *env) settleOK(s *settle.Settler) cycle.Counts {
	e.t.Helper()
	c, err := e.cycle("s1", s)
	if err != nil {
		e.t.Fatal(err)
	}
	if c.StreamsQuarantined != 0 {
		q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
		e.t.Fatalf("quarantined: %+v", q)
	}
	return c
}

// finishErasures reaps the superseded revisions and runs the erasure step
// until every erasure of the stream is applied.
func (e *env) finishErasures(s *settle.Settler, id catalog.StreamID) {
	e.t.Helper()
	for range 3 {
		e.erase("s1", s)
		e.reap("s1")
	}
	e.erase("s1", s)
	ers := e.checkErased(id)
	if applied(ers) != len(ers) {
		e.t.Fatalf("erasures not all applied: %+v", ers)
	}
	if open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(open) != 0 {
		e.t.Fatalf("publish intents left: %+v", open)
	}
	e.checkSettled("s1")
}

// erasedTail settles one flight of one stream (its only object, a sub-cap
// tail) and records an erasure of three of its records.
func erasedTail(t *testing.T, b backend, capBytes int64) (*env, *settle.Settler, catalog.StreamID) {
	t.Helper()
	e, _ := newEnv(t, b, 1, 0)
	e.write("s1", 1, sim.Faults{}, 1)
	s := e.eraseSettlerCap(nil, capBytes)
	e.settleOK(s)
	id := e.firstStream("s1").ID
	e.record(id, e.lastEntry(id).FirstRecord+1, 3)
	return e, s, id
}

// TestEraseRacesATailRewrite: the erasure step and settle both write
// revision + 1 of a stream's sub-cap tail. Whichever crashed after its
// object stood, the other meets it at that key and neither condemns it:
// settle adopts an erasure rewrite (it covers fewer records than the tail
// rewrite planned, and is re-planned behind), and the erasure step leaves
// settle's in-flight tail rewrite to settle, which tombstones the records
// too. When settle gives its tail rewrite up instead (restarted with a
// lower cap, it starts a new object behind the tail), the erasure step
// meets settle's object, which runs past the entry's records: it buries
// that key and rewrites the entry a revision higher, with nothing
// quarantined.
func TestEraseRacesATailRewrite(t *testing.T) {
	const capBytes = 1 << 20 // a flight's chunk fits beside the tail: the next settle rewrites it
	for _, b := range backends() {
		t.Run(b.name+"/erasure-first", func(t *testing.T) {
			t.Parallel()
			e, s, id := erasedTail(t, b, capBytes)
			hits := 0
			e.erase("s1", e.eraseSettlerCap(crashAt("erase.after-complete", &hits), capBytes))
			if hits != 1 {
				t.Fatalf("erase.after-complete hit %d times", hits)
			}
			e.write("s1", 1, sim.Faults{}, 2)
			if c := e.settleOK(s); c.ObjectsAdopted != 1 {
				t.Fatalf("settle after the crashed rewrite: %+v (want the rewrite adopted)", c)
			}
			e.finishErasures(s, id)
		})
		t.Run(b.name+"/settle-first", func(t *testing.T) {
			t.Parallel()
			e, s, id := erasedTail(t, b, capBytes)
			e.write("s1", 1, sim.Faults{}, 2)
			hits := 0
			e.settleOK(e.eraseSettlerCap(crashAt("settle.after-complete", &hits), capBytes))
			if hits != 1 {
				t.Fatalf("settle.after-complete hit %d times", hits)
			}
			if c := e.erase("s1", s); c.ObjectsRewritten != 0 || c.StreamsQuarantined != 0 {
				t.Fatalf("erase beside an in-flight tail rewrite: %+v (want it left to settle)", c)
			}
			if c := e.settleOK(s); c.ObjectsAdopted != 1 || c.RecordsTombstoned != 3 {
				t.Fatalf("settle: %+v (want its tail rewrite adopted, 3 records tombstoned)", c)
			}
			e.finishErasures(s, id)
		})
		t.Run(b.name+"/settle-gave-up", func(t *testing.T) {
			t.Parallel()
			e, _, id := erasedTail(t, b, capBytes)
			tail := e.lastEntry(id)
			e.write("s1", 1, sim.Faults{}, 2)
			hits := 0
			e.settleOK(e.eraseSettlerCap(crashAt("settle.after-complete", &hits), capBytes))
			if hits != 1 {
				t.Fatalf("settle.after-complete hit %d times", hits)
			}
			open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0)
			if len(open) != 1 {
				t.Fatalf("publish intents after the crash: %+v", open)
			}
			given := open[0].ObjectKey // settle's tail rewrite, standing past the tail's records
			// A restart with a lower cap: the tail is full now, so settle
			// starts a new object behind it and never comes back to the
			// rewrite, whose intent the pending erasure keeps open.
			lower := e.eraseSettlerCap(nil, testCap)
			e.settleOK(lower)
			if got := e.entryAt(id, tail.FirstRecord); got.Revision != tail.Revision || got.EndRecord() != tail.EndRecord() {
				t.Fatalf("tail after the restart: %+v, want it as it was (%+v)", got, tail)
			}
			if e.lastEntry(id).FirstRecord != tail.EndRecord() {
				t.Fatalf("no new object at the old tail's end %d: last entry %+v", tail.EndRecord(), e.lastEntry(id))
			}
			if c := e.erase("s1", lower); c.StreamsQuarantined != 0 || c.ObjectsRewritten != 1 {
				q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
				t.Fatalf("erase beside settle's abandoned tail rewrite: %+v, quarantine %+v (want the entry rewritten)", c, q)
			}
			k, err := bundlefmt.ParseSettledKey(given)
			if err != nil {
				t.Fatal(err)
			}
			if got := e.entryAt(id, tail.FirstRecord); uint32(got.Revision) <= k.Revision || got.EndRecord() != tail.EndRecord() {
				t.Fatalf("rewritten entry %+v, want its records at a revision above the abandoned %s", got, given)
			}
			e.finishErasures(lower, id)
			if q, _ := e.db.Settle().Quarantined(e.ctx, "s1"); len(q) != 0 {
				t.Fatalf("quarantined: %+v", q)
			}
			if _, err := e.store.Head(e.ctx, e.std, given); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("settle's abandoned rewrite %s after the reaps: %v (want it deleted)", given, err)
			}
			rep, err := verify.Verify(e.ctx, e.db.Streams(), bundle.NewReader(e.topology()), verify.Options{Star: "s1"})
			if err != nil || len(rep.Findings) != 0 || rep.Objects < 2 {
				t.Fatalf("verify: %+v %v", rep, err)
			}
		})
		t.Run(b.name+"/settle-gave-up-clean", func(t *testing.T) {
			// As settle-gave-up, but settle had already rewritten the
			// tail with the erased records as tombstones, so the erase
			// step finds the entry clean and publishes nothing. The abandoned rewrite above it is kept
			// live by the pending erasure, and the erasure waits for it:
			// the erase step buries it.
			t.Parallel()
			e, s, id := erasedTail(t, b, capBytes)
			e.write("s1", 1, sim.Faults{}, 2)
			if c := e.settleOK(s); c.RecordsTombstoned != 3 {
				t.Fatalf("settle's tail rewrite: %+v (want the 3 erased records tombstoned)", c)
			}
			tail := e.lastEntry(id)
			e.write("s1", 1, sim.Faults{}, 3)
			hits := 0
			e.settleOK(e.eraseSettlerCap(crashAt("settle.after-complete", &hits), capBytes))
			if hits != 1 {
				t.Fatalf("settle.after-complete hit %d times", hits)
			}
			lower := e.eraseSettlerCap(nil, testCap)
			e.settleOK(lower)
			if e.lastEntry(id).FirstRecord != tail.EndRecord() {
				t.Fatalf("no new object at the old tail's end %d: last entry %+v", tail.EndRecord(), e.lastEntry(id))
			}
			e.finishErasures(lower, id)
			if q, _ := e.db.Settle().Quarantined(e.ctx, "s1"); len(q) != 0 {
				t.Fatalf("quarantined: %+v", q)
			}
		})
	}
}

// entryAt is the stream's catalog entry that starts at record first.
func (e *env) entryAt(id catalog.StreamID, first int64) catalog.Entry {
	e.t.Helper()
	entries, err := e.db.Streams().EntriesOfStream(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range entries {
		if en.FirstRecord == first {
			return en
		}
	}
	e.t.Fatalf("stream %s: no entry at record %d in %+v", id, first, entries)
	return catalog.Entry{}
}

// TestEraseCrashPoints kills the erasure step at each of its points
// (runtime.Goexit at the first hit) and checks that the next runs finish
// the rewrites and apply the erasures exactly, on both backends. The
// points of multipart assembly are in the crash matrix (cmd/auditor),
// with objects big enough for parts.
func TestEraseCrashPoints(t *testing.T) {
	points := []struct{ point, prelude crashpoint.Point }{
		{"erase.after-intent", ""},
		{"erase.after-complete", ""},
		{"erase.after-adoption-read", "erase.after-complete"},
		{"erase.before-commit", ""},
		{"erase.after-commit", ""},
		{"erase.after-applied", ""},
	}
	for _, b := range backends() {
		for _, p := range points {
			t.Run(b.name+"/"+string(p.point), func(t *testing.T) {
				t.Parallel()
				e, _ := newEnv(t, b, 1, 0)
				e.write("s1", 6, sim.Faults{}, 1)
				s := e.eraseSettler(nil)
				e.settleOK(s)
				id := e.firstStream("s1").ID
				entries, _ := e.db.Streams().EntriesOfStream(e.ctx, id)
				if len(entries) < 2 {
					t.Fatalf("want two objects, have %d", len(entries))
				}
				e.record(id, entries[0].EndRecord()-2, 4) // across two objects
				for _, pt := range []crashpoint.Point{p.prelude, p.point} {
					if pt == "" {
						continue
					}
					if pt == "erase.after-applied" {
						e.erase("s1", s)
						e.reap("s1")
					}
					hits := 0
					e.erase("s1", e.eraseSettler(crashAt(pt, &hits)))
					if hits != 1 {
						t.Fatalf("%s hit %d times", pt, hits)
					}
				}
				e.finishErasures(s, id)
			})
		}
	}
}

// TestEraseWaitsForAQuarantinedStream: an erasure of a quarantined stream
// is not rewritten (nothing runs on a stream set aside) and stays pending;
// after the release it applies. A dry run plans the rewrite and changes
// nothing.
func TestEraseWaitsForAQuarantinedStream(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 4, sim.Faults{}, 1)
			s := e.eraseSettler(nil)
			e.settleOK(s)
			id := e.firstStream("s1").ID
			e.record(id, 3, 2)
			l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "test", "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.db.Settle().Quarantine(e.ctx, l.Fence, id, "", "corrupt", "set aside by the test"); err != nil {
				t.Fatal(err)
			}
			_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
			if c := e.erase("s1", s); c != (cycle.Counts{}) {
				t.Fatalf("erase of a quarantined stream did something: %+v", c)
			}
			if ok, err := writepath.New(e.db).ReleaseQuarantine(e.ctx, "s1", id); err != nil || !ok {
				t.Fatalf("release: %v %v", ok, err)
			}
			// A dry run plans the rewrite, prints it, and changes nothing.
			l, err = e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "test", "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var plan strings.Builder
			c, err := s.Eraser().Run(e.ctx, l.Fence, cycle.Options{Trigger: "once", DryRun: true, Plan: &plan})
			_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
			if err != nil || c.ObjectsRewritten != 0 || !strings.Contains(plan.String(), "~1") || !strings.Contains(plan.String(), "rewrite of") {
				t.Fatalf("dry run: %+v %v, plan %q", c, err, plan.String())
			}
			if open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(open) != 0 {
				t.Fatalf("the dry run opened intents: %+v", open)
			}
			if c := e.erase("s1", s); c.ObjectsRewritten != 1 || c.RecordsTombstoned != 2 {
				t.Fatalf("erase after the release: %+v", c)
			}
			e.finishErasures(s, id)
		})
	}
}

// boundedEraseSettler is eraseSettler reading at most bound pending
// erasures a cycle.
func (e *env) boundedEraseSettler(crash func(crashpoint.Point), bound int) *settle.Settler {
	return e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending, Crash: crash},
		settle.Config{CapBytes: testCap, TargetBytes: 1, MaxStreams: 10000, MaxBytes: 1 << 40, Concurrency: 3,
			MaxPendingErasures: bound})
}

// TestEraseFloodDoesNotStarveOtherStreams: one stream has far more pending
// erasures than a cycle reads (MaxPendingErasures), all recorded before
// another stream's single erasure of records still in transit. The other
// stream's turn comes in the first cycle: settle writes its records as
// tombstones and the erasure step applies it. The flood goes on a window
// at a time, lowest records first, each object rewritten once (with all
// of its erasures, though a window ends inside it), until every erasure
// is applied, exactly.
func TestEraseFloodDoesNotStarveOtherStreams(t *testing.T) {
	const bound, floodSize = 6, 40
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 2, 0)
			e.write("s1", 10, sim.Faults{}, 1)
			s := e.boundedEraseSettler(nil, bound)
			e.settleOK(s)
			streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			if len(streams) != 2 {
				t.Fatalf("want two streams, have %d", len(streams))
			}
			flood, other := streams[0], streams[1]
			// The flood: records spread over the stream's objects but its
			// last (whose rewrite behind new records would be settle's).
			entries, _ := e.db.Streams().EntriesOfStream(e.ctx, flood.ID)
			if len(entries) < 4 || entries[len(entries)-1].FirstRecord < 2*floodSize {
				t.Fatalf("flood stream: %d records settled in %d objects, too few", flood.SettledThrough, len(entries))
			}
			step := entries[len(entries)-1].FirstRecord / floodSize
			for i := range int64(floodSize) {
				e.record(flood.ID, i*step, 1)
			}
			e.write("s1", 1, sim.Faults{}, 2)
			st, err := e.db.Streams().Stream(e.ctx, other.ID)
			if err != nil || st.NextRecord < st.SettledThrough+3 {
				t.Fatalf("other stream: %+v %v (want records in transit)", st, err)
			}
			e.record(other.ID, st.SettledThrough+1, 2)

			// The first cycle (settle, erase, reap): the other stream's
			// records are written as tombstones, and the erasure step reads
			// its erasure beside the flood's first window. The second
			// cycle's erasure step applies it (it waited only for the reap
			// of the tail revision settle superseded, if any), long before
			// the flood is done.
			if c := e.settleOK(s); c.RecordsTombstoned != 2 {
				t.Fatalf("settle: %+v (want the other stream's 2 records tombstoned)", c)
			}
			c := e.erase("s1", s)
			if c.ObjectsRewritten == 0 || c.StreamsQuarantined != 0 {
				t.Fatalf("first erase: %+v (want flood objects rewritten)", c)
			}
			rewritten := c.ObjectsRewritten
			e.reap("s1")
			c = e.erase("s1", s)
			rewritten += c.ObjectsRewritten
			if ers := e.checkErased(other.ID); len(ers) != 1 || !ers[0].Applied {
				t.Fatalf("the other stream's erasure after two cycles: %+v (starved by the flood)", ers)
			}
			if n := applied(e.checkErased(flood.ID)); n >= floodSize-bound {
				t.Fatalf("%d of the flood's %d erasures applied in two cycles of at most %d", n, floodSize, bound)
			}

			// The flood: a window at a time, each object rewritten once.
			for round := 0; ; round++ {
				if round > 4*floodSize/(bound-1)+4 {
					t.Fatalf("the flood is not done after %d rounds: %d of %d applied", round, applied(e.checkErased(flood.ID)), floodSize)
				}
				e.reap("s1")
				c := e.erase("s1", s)
				rewritten += c.ObjectsRewritten
				if c.StreamsQuarantined != 0 {
					t.Fatalf("erase quarantined: %+v", c)
				}
				if applied(e.checkErased(flood.ID)) == floodSize {
					t.Logf("the flood's %d erasures applied after %d more rounds, %d objects rewritten", floodSize, round+1, rewritten)
					break
				}
			}
			after, _ := e.db.Streams().EntriesOfStream(e.ctx, flood.ID)
			for i, en := range after[:len(entries)] {
				if en.Revision > entries[i].Revision+1 {
					t.Errorf("entry %d rewritten %d times", en.FirstRecord, en.Revision-entries[i].Revision)
				}
			}
			if c := e.erase("s1", s); c != (cycle.Counts{}) {
				t.Fatalf("nothing pending, yet: %+v", c)
			}
			e.checkSettled("s1")
		})
	}
}

// TestEraseWindowEndsInsideAnObject: a stream's window of erasures ends
// inside an object; the object is rewritten with all of its erasures, not
// only the window's, and the rewrite dies before its commit. Another
// stream's erasure then shrinks the window (the bound is shared): the
// retry still plans every tombstone the standing rewrite holds, adopts it
// instead of condemning it, and every erasure applies.
func TestEraseWindowEndsInsideAnObject(t *testing.T) {
	const bound = 2
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 2, 0)
			e.write("s1", 6, sim.Faults{}, 1)
			s := e.boundedEraseSettler(nil, bound)
			e.settleOK(s)
			streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			a, other := streams[0].ID, streams[1].ID
			entries, _ := e.db.Streams().EntriesOfStream(e.ctx, a)
			if len(entries) < 2 || entries[0].RecordCount < 8 {
				t.Fatalf("want two objects of 8 records or more: %+v", entries)
			}
			for _, r := range []int64{1, 3, 5, 7} {
				e.record(a, entries[0].FirstRecord+r, 1)
			}
			hits := 0
			e.erase("s1", e.boundedEraseSettler(crashAt("erase.after-complete", &hits), bound))
			if hits != 1 {
				t.Fatalf("erase.after-complete hit %d times", hits)
			}
			oe, _ := e.db.Streams().EntriesOfStream(e.ctx, other)
			e.record(other, oe[0].FirstRecord+1, 1)
			c := e.erase("s1", s)
			if c.StreamsQuarantined != 0 || c.ObjectsRewritten != 2 || c.RecordsTombstoned != 4+1 {
				q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
				t.Fatalf("erase after the crash: %+v, quarantined %+v (want the standing rewrite adopted with its 4 tombstones, the other stream's rewritten)", c, q)
			}
			for round := 0; applied(e.checkErased(a))+applied(e.checkErased(other)) < 5; round++ {
				if round > 6 {
					t.Fatalf("erasures not all applied: %+v %+v", e.checkErased(a), e.checkErased(other))
				}
				e.reap("s1")
				if c := e.erase("s1", s); c.StreamsQuarantined != 0 || c.ObjectsRewritten != 0 {
					t.Fatalf("erase: %+v (want nothing more rewritten)", c)
				}
			}
			if open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(open) != 0 {
				t.Fatalf("publish intents left: %+v", open)
			}
			e.checkSettled("s1")
		})
	}
}

// TestErasureNotAppliedWhileABucketKeepsDeletedBytes: while the cycle's
// ErasureHold says a bucket keeps what a DELETE removes (versioning or
// Object Lock), an erasure whose rewrite is done and whose old revision is
// reaped stays pending (applied_at null); the hold is asked at most once
// per run; when it lifts, the erasures apply.
func TestErasureNotAppliedWhileABucketKeepsDeletedBytes(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 4, sim.Faults{}, 1)
			s := e.eraseSettler(nil)
			e.settleOK(s)
			id := e.firstStream("s1").ID
			e.record(id, 3, 2)
			e.record(id, 7, 1)
			var asked atomic.Int64
			held := cycle.Options{Trigger: "once", ErasureHold: func(context.Context) string {
				asked.Add(1)
				return "bucket b: versioning enabled"
			}}
			if c := e.eraseWith("s1", s, held); c.ObjectsRewritten == 0 || c.ErasuresApplied != 0 {
				t.Fatalf("first erase: %+v (want the rewrite, nothing applied before the reap)", c)
			}
			if n := asked.Load(); n > 1 {
				t.Fatalf("the hold was asked %d times in one run", n)
			}
			e.reap("s1")
			asked.Store(0)
			if c := e.eraseWith("s1", s, held); c.ErasuresApplied != 0 {
				t.Fatalf("erasures applied while a bucket keeps deleted bytes: %+v", c)
			}
			if n := asked.Load(); n != 1 {
				t.Fatalf("the hold was asked %d times for two ready erasures in one run, want once", n)
			}
			if ers := e.checkErased(id); applied(ers) != 0 {
				t.Fatalf("applied_at set while a bucket keeps deleted bytes: %+v", ers)
			}
			lifted := cycle.Options{Trigger: "once", ErasureHold: func(context.Context) string { return "" }}
			if c := e.eraseWith("s1", s, lifted); c.ErasuresApplied != 2 || c.ObjectsRewritten != 0 {
				t.Fatalf("erase once the hold lifted: %+v", c)
			}
			if ers := e.checkErased(id); applied(ers) != 2 {
				t.Fatalf("erasures: %+v", ers)
			}
		})
	}
}
