package sim

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
)

// TestAcceptance is the write path's acceptance test, on the file backend
// and on versitygw: a few thousand flights with every fault switched on, over a
// standard and an express star, then novasim check must find the metastore
// and the chains exactly as the contract says (refs tile every stream from 0
// to next_record, every ref entry's window is its slot's, past epochs end in
// a fence run of poisons or lost flights with nothing at or past end_seq,
// due markers exactly for streams with refs), and the flights no ref names
// must be exactly the writers' unabsorbed ones.
func TestAcceptance(t *testing.T) {
	t.Parallel()
	for _, be := range backends() {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := newTestDB(t)
			st := be.storage(t)
			if _, err := Setup(ctx, db, SetupOptions{Star: "acc", Streams: 60, ExpressShare: 0.25, FenceWindow: 4,
				Content: Content{Seed: 77, MinBytes: 0, MaxBytes: 4096, HeaderShare: 0.3, EmptyShare: 0.05}}); err != nil {
				t.Fatal(err)
			}
			faults := Faults{Failover: 0.01, Lost: 0.03, Crash: 0.01, LostReply: 0.03}
			var total int64
			writers := map[string]WriteStats{}
			for star, flights := range map[string]int64{"acc": 2000, "acc-x": 1000} {
				ws, err := Write(ctx, db, st, WriteOptions{Star: star, Flights: flights, FlightBytes: 8 << 10,
					AbsorbFlights: 3, Faults: faults, RecordSlots: true, Session: 6})
				if err != nil {
					t.Fatalf("write %s: %v", star, err)
				}
				t.Logf("%s: %+v", star, summaryW(ws))
				if ws.Flights != flights || ws.Failovers == 0 || ws.Crashes == 0 || ws.LostFaults == 0 || ws.LostReplies == 0 {
					t.Errorf("%s: not every fault played: %+v", star, summaryW(ws))
				}
				total += ws.Flights
				writers[star] = ws
			}
			start := time.Now()
			rep := mustCheck(t, db, st, CheckOptions{})
			t.Logf("check (%s): %+v", time.Since(start).Round(time.Millisecond), summary(rep))
			if rep.Checked != rep.Records || rep.FromSlots != rep.Records {
				t.Errorf("checked %d of %d records", rep.Checked, rep.Records)
			}

			// The chain holds exactly what the writers wrote: their flights
			// (absorbed or lost) and their poisons.
			var flights, poisons int64
			lost := map[SlotID]bool{}
			for star, ws := range writers {
				for _, s := range ws.Slots {
					if s.Poison {
						poisons++
						continue
					}
					flights++
					if !s.Absorbed {
						lost[SlotID{Star: star, Epoch: s.Epoch, Seq: s.Seq}] = true
					}
				}
			}
			if rep.Chain.Flights != flights || rep.Chain.Poisons != poisons {
				t.Errorf("chain: %d flights, %d poisons; the writers wrote %d, %d", rep.Chain.Flights, rep.Chain.Poisons, flights, poisons)
			}
			if len(rep.Chain.Unreferenced) != len(lost) {
				t.Errorf("%d flights named by no ref, the writers left %d unabsorbed", len(rep.Chain.Unreferenced), len(lost))
			}
			for _, s := range rep.Chain.Unreferenced {
				if !lost[s] {
					t.Errorf("flight %v is named by no ref but its writer absorbed it", s)
				}
			}
			for star := range writers {
				eps, err := db.Streams().StarEpochs(ctx, star)
				if err != nil {
					t.Fatal(err)
				}
				if int64(len(eps)) != writers[star].Epoch {
					t.Errorf("%s: %d epochs, writer at %d", star, len(eps), writers[star].Epoch)
				}
			}
		})
	}
}

// TestSameResultsAcrossBackends writes the same deterministic traffic (no
// faults, one flight per absorb, flights cut by size only, a fixed traffic
// salt) to the file backend and to versitygw: the metastores must come out
// identical (refs, slots and footer windows), and so must the checks.
func TestSameResultsAcrossBackends(t *testing.T) {
	t.Parallel()
	type outcome struct {
		refs map[catalog.StreamID][]catalog.SpanRef
		rep  CheckReport
	}
	var outs []outcome
	for _, be := range backends() {
		ctx := context.Background()
		db := newTestDB(t)
		st := be.storage(t)
		if _, err := Setup(ctx, db, SetupOptions{Star: "same", Streams: 30, ExpressShare: 0.3, Content: smallContent(31)}); err != nil {
			t.Fatal(err)
		}
		for _, star := range []string{"same", "same-x"} {
			if _, err := Write(ctx, db, st, WriteOptions{Star: star, Flights: 150, FlightBytes: 16 << 10, AbsorbFlights: 1,
				FlightInterval: time.Hour, Session: 9}); err != nil {
				t.Fatal(err)
			}
		}
		rep := mustCheck(t, db, st, CheckOptions{})
		refs := map[catalog.StreamID][]catalog.SpanRef{}
		for _, star := range []string{"same", "same-x"} {
			rs, err := db.Streams().RefsOfStar(ctx, star)
			if err != nil {
				t.Fatal(err)
			}
			for id, r := range rs {
				for i := range r {
					r[i].AbsorbedAt = time.Time{}
				}
				refs[id] = r
			}
		}
		rep.Findings, rep.Chain.Unreferenced = nil, nil
		outs = append(outs, outcome{refs, rep})
		t.Logf("%s: %+v", be.name, rep)
	}
	if !reflect.DeepEqual(outs[0].refs, outs[1].refs) {
		t.Error("the file backend and versitygw got different refs")
	}
	outs[0].rep.Objects, outs[1].rep.Objects = 0, 0
	if !reflect.DeepEqual(outs[0].rep, outs[1].rep) {
		t.Errorf("checks differ:\nfile: %+v\ns3:   %+v", outs[0].rep, outs[1].rep)
	}
}
