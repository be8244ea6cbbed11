package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// applyErasure marks e applied through the auditor's own transaction
// (catalog.Erasures.ApplyErasure), naming as clean the entries that hold its
// records now.
func applyErasure(t *testing.T, db *catalog.DB, star string, e catalog.Erasure) {
	t.Helper()
	ctx := context.Background()
	lease, err := db.Leases().AcquireLeaseInstance(ctx, star, "test-eraser", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Leases().ReleaseLease(ctx, lease.Fence); err != nil {
			t.Error(err)
		}
	}()
	s, err := db.Streams().Stream(ctx, e.Stream)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := db.Erasures().EntriesIntersecting(ctx, e.Stream, s.Epoch, e.FirstRecord, e.EndRecord())
	if err != nil {
		t.Fatal(err)
	}
	var clean []catalog.EntryRevision
	for _, en := range entries {
		clean = append(clean, catalog.EntryRevision{FirstRecord: en.FirstRecord, Revision: en.Revision})
	}
	id := e.Stream
	ok, err := db.Erasures().ApplyErasure(ctx, lease.Fence, e, clean, bundlefmt.SettledKey(s.Bucket, id, uint64(s.Epoch), 0, 0),
		bundlefmt.SettledKey(s.Bucket, id, uint64(s.Epoch), uint64(e.EndRecord()), 0))
	if err != nil || !ok {
		t.Fatalf("apply erasure %+v: %v %v", e, ok, err)
	}
}

// erasureWorld is a written star "er" and its stream with the most
// records, for the erasure tests of check.
func erasureWorld(t *testing.T) (*catalog.DB, *faultStore, Storage, catalog.Stream) {
	t.Helper()
	ctx := context.Background()
	db, ms := newTestDB(t), newFaultStore(t)
	st := Storage{Store: ms, Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "er", Streams: 3, Content: smallContent(9)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(ctx, db, st, WriteOptions{Star: "er", Flights: 40, FlightBytes: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "er")
	if err != nil {
		t.Fatal(err)
	}
	var top catalog.Stream
	for _, s := range streams {
		if s.NextRecord > top.NextRecord {
			top = s
		}
	}
	if top.NextRecord < 60 {
		t.Fatalf("the busiest stream has %d records", top.NextRecord)
	}
	return db, ms, st, top
}

func record(t *testing.T, db *catalog.DB, id catalog.StreamID, first, count int64) catalog.Erasure {
	t.Helper()
	e, err := db.Erasures().RecordErasure(context.Background(), id, first, count)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// TestCheckExpectsTombstonesWhereErasuresApply: a settled copy of an
// erased record is a tombstone, and only that, once its erasure is
// applied; while the erasure is pending it may be either; every other
// record holds its bytes. Each doctored case breaks one rule and check
// reports it (the clean one passes).
func TestCheckExpectsTombstonesWhereErasuresApply(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// dead adds records written as tombstones; apply adds erasures
		// marked applied (after settling); extra records more erasures.
		dead  func(r int64) bool
		extra [][2]int64
		apply [][2]int64
		want  string // "" for the clean case
	}{
		{name: "clean"},
		{name: "tombstone_without_erasure", dead: func(r int64) bool { return r == 15 }, want: "a tombstone where no erasure applies"},
		{name: "applied_erasure_holds_bytes", apply: [][2]int64{{10, 2}}, want: "an erased record (erasure applied) still holds its bytes"},
		// A pending erasure that starts first and covers an applied one:
		// applied wins.
		{name: "applied_under_a_pending_overlap", extra: [][2]int64{{9, 3}}, apply: [][2]int64{{10, 2}},
			want: "an erased record (erasure applied) still holds its bytes"},
		// A malformed row (never applied) erases nothing.
		{name: "tombstone_under_a_malformed_row", dead: func(r int64) bool { return r == 30 }, want: "a tombstone where no erasure applies"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, _, st, s := erasureWorld(t)
			// E1 [2, 4) applied and tombstoned; E2 [6, 8) pending and
			// tombstoned; E3 [10, 12) pending, bytes kept; E4 pending over
			// records still in transit, bytes in their slots.
			e1 := record(t, db, s.ID, 2, 2)
			record(t, db, s.ID, 6, 2)
			record(t, db, s.ID, 10, 2)
			for _, x := range tc.extra {
				record(t, db, s.ID, x[0], x[1])
			}
			if tc.name == "tombstone_under_a_malformed_row" {
				if err := writepath.New(db).InsertErasureRow(ctx, s.ID, -5, 36); err != nil {
					t.Fatal(err)
				}
			}
			dead := func(id catalog.StreamID, r int64) bool {
				return id == s.ID && (r >= 2 && r < 4 || r >= 6 && r < 8 || tc.dead != nil && tc.dead(r))
			}
			naiveSettleErasing(t, db, st, "er", 0.6, 5, dead)
			s, err := db.Streams().Stream(ctx, s.ID)
			if err != nil || s.SettledThrough < 20 || s.SettledThrough >= s.NextRecord-2 {
				t.Fatalf("stream after settling: %+v %v", s, err)
			}
			record(t, db, s.ID, s.SettledThrough, 2)
			applyErasure(t, db, "er", e1)
			for _, x := range tc.apply {
				applyErasure(t, db, "er", catalog.Erasure{Stream: s.ID, FirstRecord: x[0], RecordCount: x[1]})
			}
			for _, o := range []CheckOptions{{}, {SettledOnly: true}} {
				rep, err := Check(ctx, db, st, o)
				if err != nil {
					t.Fatal(err)
				}
				if tc.want == "" {
					if !rep.OK() || rep.Checked != rep.Records {
						t.Fatalf("clean erasures (settled-only %v): %+v %v", o.SettledOnly, summary(rep), rep.Findings)
					}
					continue
				}
				if rep.OK() || rep.Wrong == 0 || !strings.Contains(fmt.Sprint(rep.Findings), tc.want) {
					t.Fatalf("%s not found (settled-only %v): %+v %v", tc.name, o.SettledOnly, summary(rep), rep.Findings)
				}
			}
		})
	}
}

// TestWriteTimeErasures: Faults.Erase records erasures of just-absorbed
// records while writing; check passes with them pending (slot copies hold
// the bytes), and once settled with their tombstones and applied.
func TestWriteTimeErasures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, ms := newTestDB(t), newFaultStore(t)
	st := Storage{Store: ms, Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "we", Streams: 5, Content: smallContent(4)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(ctx, db, st, WriteOptions{Star: "we", Flights: 5, Faults: Faults{Erase: 1.5}}); !errors.Is(err, ErrUsage) ||
		!strings.Contains(err.Error(), "erase-rate") {
		t.Fatalf("an erase rate of 1.5: %v", err)
	}
	ws, err := Write(ctx, db, st, WriteOptions{Star: "we", Flights: 40, FlightBytes: 4 << 10, Faults: Faults{Erase: 0.5, Lost: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Erasures < 5 || ws.Erased < ws.Erasures || ws.Erased > 4*ws.Erasures {
		t.Fatalf("write stats: %d erasures of %d records over %d flights", ws.Erasures, ws.Erased, ws.Absorbed)
	}
	all, err := db.Streams().ErasuresOfStar(ctx, "we")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	streams, _ := db.Streams().StreamsOfStar(ctx, "we")
	for _, s := range streams {
		for _, e := range all[s.ID] {
			n++
			if e.Valid() != "" || e.EndRecord() > s.NextRecord || e.Applied {
				t.Errorf("erasure %+v of stream next_record %d", e, s.NextRecord)
			}
		}
	}
	if n != ws.Erasures {
		t.Fatalf("%d erasures in the metastore, the writer counts %d", n, ws.Erasures)
	}
	mustCheck(t, db, st, CheckOptions{})
	dead := func(id catalog.StreamID, r int64) bool {
		for _, e := range all[id] {
			if r >= e.FirstRecord && r < e.EndRecord() {
				return true
			}
		}
		return false
	}
	naiveSettleErasing(t, db, st, "we", 1, 6, dead)
	mustCheck(t, db, st, CheckOptions{})
	for _, es := range all {
		for _, e := range es {
			applyErasure(t, db, "we", e)
		}
	}
	rep := mustCheck(t, db, st, CheckOptions{SettledOnly: true})
	if rep.Checked != rep.Records || rep.Unsettled != 0 {
		t.Fatalf("after applying: %+v", summary(rep))
	}
}

// TestEraseRandom: novasim erase --random draws erasures over settled and
// unsettled records, each within the stream's live records; check passes
// with them pending. Bad input is a usage error.
func TestEraseRandom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, ms := newTestDB(t), newFaultStore(t)
	st := Storage{Store: ms, Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "rr", Streams: 4, Content: smallContent(6)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Erase(ctx, db, EraseOptions{Star: "rr", Random: 3}); !errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "no live records") {
		t.Fatalf("erase on a star with no records: %v", err)
	}
	if _, err := Erase(ctx, db, EraseOptions{Star: "rr"}); !errors.Is(err, ErrUsage) {
		t.Fatalf("erase of nothing: %v", err)
	}
	if _, err := Write(ctx, db, st, WriteOptions{Star: "rr", Flights: 30, FlightBytes: 4 << 10}); err != nil {
		t.Fatal(err)
	}
	naiveSettle(t, db, st, "rr", 0.5, 8)
	es, err := Erase(ctx, db, EraseOptions{Star: "rr", Random: 40, MaxRecords: 3, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	if es.Recorded+es.Skipped != 40 || es.Settled == 0 || es.Unsettled == 0 || es.Records < es.Recorded || es.Records > 3*es.Recorded {
		t.Fatalf("erase stats %+v", es)
	}
	streams, _ := db.Streams().StreamsOfStar(ctx, "rr")
	next := map[catalog.StreamID]catalog.Stream{}
	for _, s := range streams {
		next[s.ID] = s
	}
	for _, e := range es.Erasures {
		s := next[e.Stream]
		if e.FirstRecord < s.LowRecord || e.EndRecord() > s.NextRecord || e.RecordCount > 3 {
			t.Errorf("erasure %+v outside the live records [%d, %d)", e, s.LowRecord, s.NextRecord)
		}
	}
	mustCheck(t, db, st, CheckOptions{})
	// The same seed draws the same erasures again: recorded again (no-ops)
	// or skipped, nothing new.
	again, err := Erase(ctx, db, EraseOptions{Star: "rr", Random: 40, MaxRecords: 3, Seed: 11})
	if err != nil || again.Recorded != es.Recorded {
		t.Fatalf("the same draws again: %+v %v", again, err)
	}
}
