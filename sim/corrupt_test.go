package sim

import (
	"context"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// TestCheckNamedCorruptions damages a clean written state in one named way
// per case and expects check to report it (and the clean state to pass).
func TestCheckNamedCorruptions(t *testing.T) {
	t.Parallel()
	type env struct {
		db *catalog.DB
		ms *faultStore
		st Storage
	}
	slot := func(star string, e, s int64) string { return bundlefmt.SlotKey(star, uint64(e), uint64(s)) }
	cases := []struct {
		name    string
		damage  func(t *testing.T, e env)
		wrong   bool // expect Wrong > 0
		missing bool // expect Missing > 0
	}{
		{"slot_chunk_bit_flip", func(t *testing.T, e env) { e.ms.corrupt("std", slot("c", 2, 1), 70) }, true, false},
		{"slot_footer_damaged", func(t *testing.T, e env) {
			b, size, _ := e.ms.GetRange(context.Background(), "std", slot("c", 2, 1), 0, 1<<30)
			e.ms.corrupt("std", slot("c", 2, 1), int(size)-50)
			_ = b
		}, false, true},
		{"named_slot_deleted", func(t *testing.T, e env) { e.ms.remove("std", slot("c", 2, 2)) }, false, true},
		{"stray_slot_past_end_seq", func(t *testing.T, e env) {
			eps, _ := e.db.Streams().StarEpochs(context.Background(), "c")
			end := *eps[0].EndSeq
			e.ms.put("std", slot("c", 1, end), bundlefmt.EncodePoison(1, uint64(end), 1))
		}, false, false},
		{"fence_run_slot_deleted", func(t *testing.T, e env) {
			eps, _ := e.db.Streams().StarEpochs(context.Background(), "c")
			e.ms.remove("std", slot("c", 1, *eps[0].EndSeq-1))
		}, false, false},
		{"slot_below_head_deleted_unnamed", func(t *testing.T, e env) {
			// A lost flight below the head: nothing names it, but the head
			// says every slot below it is absorbed, poison or lost.
			st, _ := e.db.Streams().Star(context.Background(), "c")
			for s := int64(0); s < st.NextSeq; s++ {
				if named := slotNamed(t, e.db, "c", st.Epoch, s); !named {
					e.ms.remove("std", slot("c", st.Epoch, s))
					return
				}
			}
			t.Skip("no lost flight below the head")
		}, false, false},
		{"wrong_content_absorbed", func(t *testing.T, e env) { absorbForeign(t, e.db, e.st, "c") }, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := env{db: newTestDB(t), ms: newFaultStore(t)}
			e.st = Storage{Store: e.ms, Standard: "std"}
			if _, err := Setup(ctx, e.db, SetupOptions{Star: "c", Streams: 6, FenceWindow: 2, Content: smallContent(21)}); err != nil {
				t.Fatal(err)
			}
			// Epoch 1: a few flights, then a takeover: epoch 2 with lost flights.
			if _, err := Write(ctx, e.db, e.st, WriteOptions{Star: "c", Flights: 5, FlightBytes: 4 << 10}); err != nil {
				t.Fatal(err)
			}
			if _, err := Write(ctx, e.db, e.st, WriteOptions{Star: "c", Flights: 30, FlightBytes: 4 << 10, Takeover: TakeoverAlways,
				Faults: Faults{Lost: 0.2}, Session: 3}); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, e.db, e.st, CheckOptions{})
			tc.damage(t, e)
			rep, err := Check(ctx, e.db, e.st, CheckOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range rep.Findings {
				t.Log(f)
			}
			if rep.OK() || tc.wrong && rep.Wrong == 0 || tc.missing && rep.Missing == 0 {
				t.Fatalf("not reported as expected: %+v", summary(rep))
			}
		})
	}
}

// slotNamed reports whether any ref names the slot.
func slotNamed(t *testing.T, db *catalog.DB, star string, e, s int64) bool {
	streams, err := db.Streams().StreamsOfStar(context.Background(), star)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range streams {
		refs, _ := writepath.New(db).RefsOfStream(context.Background(), st.ID)
		for _, r := range refs {
			for _, sl := range r.Slots {
				if sl.Epoch == e && sl.Seq == s {
					return true
				}
			}
		}
	}
	return false
}

// absorbForeign writes and absorbs a flight whose records come from another
// seed: a writer that wrote the wrong bytes.
func absorbForeign(t *testing.T, db *catalog.DB, st Storage, star string) {
	ctx := context.Background()
	s, err := db.Streams().Star(ctx, star)
	if err != nil {
		t.Fatal(err)
	}
	streams, _ := db.Streams().StreamsOfStar(ctx, star)
	str := streams[0]
	foreign := smallContent(999)
	g := NewGen(foreign)
	id := str.ID
	b := bundlefmt.NewChunkBuilder(id, uint64(str.NextRecord))
	for r := str.NextRecord; r < str.NextRecord+5; r++ {
		rec, ts := g.Record(foreign.Stream(id), r)
		if err := b.Add(rec, ts, false); err != nil {
			t.Fatal(err)
		}
	}
	data, err := bundlefmt.EncodeFlight(uint64(s.Epoch), uint64(s.NextSeq+20), 77, []bundlefmt.Chunk{b.Chunk()})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Store.PutIfAbsent(ctx, st.Standard, bundlefmt.SlotKey(star, uint64(s.Epoch), uint64(s.NextSeq+20)), data); err != nil {
		t.Fatal(err)
	}
	env, _ := bundlefmt.DecodeEnvelope("", data)
	if err := writepath.New(db).Absorb(ctx, star, []writepath.AbsorbFlight{{Epoch: s.Epoch, Seq: s.NextSeq + 20,
		FooterOffset: int64(env.FooterOffset), FooterLength: int64(env.FooterLength),
		Batches: []writepath.AbsorbBatch{{Stream: str.ID, FirstRecord: str.NextRecord, Count: 5}}}}); err != nil {
		t.Fatal(err)
	}
}
