package settle_test

import (
	"bytes"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/sim"
)

// emptyContent makes many records empty (no headers, no body: the one
// byte 0x00, as long as a tombstone).
var emptyContent = sim.Content{Seed: 7, MinBytes: 0, MaxBytes: 2048, HeaderShare: 0.3, EmptyShare: 0.3}

// storedRecords reads a cataloged object's records as stored, by record
// number.
func (e *env) storedRecords(st catalog.Stream, en catalog.Entry) map[uint64][]byte {
	e.t.Helper()
	key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
	out := map[uint64][]byte{}
	for _, c := range e.chunksOf(st, en) {
		data, _, err := e.store.GetRange(e.ctx, e.std, key, int64(c.DataOffset), int64(c.ChunkBytes()))
		if err != nil {
			e.t.Fatal(err)
		}
		off := uint64(0)
		for i, l := range c.Lengths {
			out[c.FirstRecord+uint64(i)] = data[off : off+uint64(l)]
			off += uint64(l)
		}
	}
	return out
}

// entryHolding is the stream's catalog entry that holds record r.
func (e *env) entryHolding(id catalog.StreamID, r uint64) catalog.Entry {
	e.t.Helper()
	entries, err := e.db.Streams().EntriesOfStream(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, en := range entries {
		if uint64(en.FirstRecord) <= r && r < uint64(en.EndRecord()) {
			return en
		}
	}
	e.t.Fatalf("no entry holds record %d", r)
	return catalog.Entry{}
}

var (
	emptyRecord = []byte{0x00}
	tombstone   = []byte{bundlefmt.TombstoneByte}
)

// TestAdoptionTellsAnEmptyRecordFromATombstone: an erasure's rewrite of an
// object crashes after its completion; then a second erasure names an
// empty record of the same object (the one byte 0x00, as long as the
// tombstone 0x08). The next rewrite plans both records as tombstones and
// meets the standing rewrite, which holds the empty record as it was: its
// every stored length is the plan's, its bytes are not. Adoption compares
// the bytes with the source's and the planned records, accepts it (no
// quarantine, no condemned key), and the erasures end applied with
// tombstones exactly where they name.
func TestAdoptionTellsAnEmptyRecordFromATombstone(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnvContent(t, b, 1, 0, emptyContent)
			e.write("s1", 2, sim.Faults{}, 1)
			s := e.eraseSettler(nil)
			e.settleOK(s)
			st := e.firstStream("s1")
			// An empty record, and a record with content in the same chunk.
			empty, full, found := uint64(0), uint64(0), false
			entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		search:
			for _, en := range entries {
				recs := e.storedRecords(st, en)
				for _, c := range e.chunksOf(st, en) {
					hasEmpty, hasFull := false, false
					for r := c.FirstRecord; r < c.EndRecord(); r++ {
						switch {
						case !hasEmpty && bytes.Equal(recs[r], emptyRecord):
							empty, hasEmpty = r, true
						case !hasFull && len(recs[r]) > 1:
							full, hasFull = r, true
						}
						if hasEmpty && hasFull {
							found = true
							break search
						}
					}
				}
			}
			if !found {
				t.Fatal("no chunk holds an empty record and one with content")
			}
			e.record(st.ID, int64(full), 1)
			hits := 0
			e.erase("s1", e.eraseSettler(crashAt("erase.after-complete", &hits)))
			if hits != 1 {
				t.Fatalf("erase.after-complete hit %d times", hits)
			}
			e.record(st.ID, int64(empty), 1)
			c := e.erase("s1", s)
			if q, _ := e.db.Settle().Quarantined(e.ctx, "s1"); c.StreamsQuarantined != 0 || len(q) != 0 {
				t.Fatalf("the rewrite under the first erasure was quarantined: %+v %+v", c, q)
			}
			if c.ObjectsRewritten != 1 {
				t.Fatalf("erase after the crash: %+v (want the standing rewrite adopted and committed)", c)
			}
			if reaps, _ := e.db.Settle().Intents(e.ctx, "s1", "reap", 0); len(reaps) != 1 {
				t.Fatalf("reap intents: %+v (want only the superseded revision's)", reaps)
			}
			e.finishErasures(s, st.ID)
			recs := e.storedRecords(st, e.entryHolding(st.ID, empty))
			if !bytes.Equal(recs[full], tombstone) || !bytes.Equal(recs[empty], tombstone) {
				t.Fatalf("records %d and %d stored as %x and %x, want tombstones", full, empty, recs[full], recs[empty])
			}
		})
	}
}

// TestAdoptedEraseRewriteIsScrubbed: the erasure step's rewrite of a
// stream's sub-cap tail crashes after its completion; then a second
// erasure names another record of the tail, and more records arrive.
// Settle's tail rewrite meets the standing rewrite, adopts and commits it,
// and plans the new chunks behind it at the next revision: that revision
// must hold the second erasure's record as a tombstone too (the adopted
// rewrite, made before that erasure, still holds its bytes), not copy it.
func TestAdoptedEraseRewriteIsScrubbed(t *testing.T) {
	const capBytes = 1 << 20 // a flight's chunk fits beside the tail: the next settle rewrites it
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, s, id := erasedTail(t, b, capBytes) // records first+1 .. first+3 erased
			hits := 0
			e.erase("s1", e.eraseSettlerCap(crashAt("erase.after-complete", &hits), capBytes))
			if hits != 1 {
				t.Fatalf("erase.after-complete hit %d times", hits)
			}
			st, _ := e.db.Streams().Stream(e.ctx, id)
			tail := e.lastEntry(id)
			late := uint64(tail.FirstRecord) + 5
			if late >= uint64(tail.EndRecord()) || len(e.storedRecords(st, tail)[late]) < 2 {
				t.Fatalf("record %d is not a record with content in the tail [%d, %d)", late, tail.FirstRecord, tail.EndRecord())
			}
			e.record(id, int64(late), 1)
			e.write("s1", 1, sim.Faults{}, 2)
			c := e.settleOK(s)
			if c.ObjectsAdopted != 1 {
				t.Fatalf("settle after the crashed rewrite: %+v (want the rewrite adopted)", c)
			}
			en := e.lastEntry(id)
			if en.FirstRecord != tail.FirstRecord || en.Revision != tail.Revision+2 {
				t.Fatalf("last entry %+v, want the tail at revision %d (the adopted rewrite's next)", en, tail.Revision+2)
			}
			recs := e.storedRecords(st, en)
			for r := uint64(tail.FirstRecord) + 1; r < uint64(tail.FirstRecord)+4; r++ {
				if !bytes.Equal(recs[r], tombstone) {
					t.Fatalf("record %d of the first erasure stored as %x", r, recs[r])
				}
			}
			if !bytes.Equal(recs[late], tombstone) {
				t.Fatalf("record %d of the second erasure stored as %d bytes in %s revision %d: the adopted rewrite was copied unscrubbed",
					late, len(recs[late]), "the new tail", en.Revision)
			}
			e.finishErasures(s, id)
		})
	}
}

// TestAdoptedSettleObjectIsScrubbed: settle crashes after completing a
// stream's sub-cap object; then an erasure names one of its records, and
// more records arrive. The restart adopts the standing object (it covers
// fewer records than planned), commits it, and plans the rest behind it as
// a tail rewrite: that rewrite must hold the erased record as a tombstone,
// not copy the adopted object's bytes of it.
func TestAdoptedSettleObjectIsScrubbed(t *testing.T) {
	const capBytes = 1 << 20 // a flight's chunk fits beside the tail: the next settle rewrites it
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 1, sim.Faults{}, 1)
			hits := 0
			e.settleOK(e.eraseSettlerCap(crashAt("settle.after-complete", &hits), capBytes))
			if hits != 1 {
				t.Fatalf("settle.after-complete hit %d times", hits)
			}
			st := e.firstStream("s1")
			if st.NextRecord < 4 {
				t.Fatalf("stream of %d records", st.NextRecord)
			}
			e.record(st.ID, 2, 1)
			e.write("s1", 1, sim.Faults{}, 2)
			s := e.eraseSettlerCap(nil, capBytes)
			if c := e.settleOK(s); c.ObjectsAdopted != 1 {
				t.Fatalf("settle after the crash: %+v (want the standing object adopted)", c)
			}
			en := e.lastEntry(st.ID)
			if en.FirstRecord != 0 || en.Revision != 1 {
				t.Fatalf("last entry %+v, want the adopted object's tail rewrite at revision 1", en)
			}
			if recs := e.storedRecords(st, en); !bytes.Equal(recs[2], tombstone) {
				t.Fatalf("erased record 2 stored as %d bytes in the tail rewrite of the adopted object", len(recs[2]))
			}
			e.finishErasures(s, st.ID)
		})
	}
}
