package settle_test

import (
	"bytes"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/sim"
)

// emptyContent makes many records empty (no headers, no body: the one
// byte 0x00, as long as a tombstone).
var emptyContent = sim.Content{Seed: 7, MinBytes: 0, MaxBytes: 2048, HeaderShare: 0.3, EmptyShare: 0.3}

// storedRecords reads a cataloged object's records as stored, by record
// number.
func (e *env) storedRecords(st catalog.Stream, en catalog.Entry) map[uint64][]byte {
	e.t.Helper()
	key := bundlefmt.SettledKey(st.Bucket, bundlefmt.StreamID(st.ID), uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
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
	entries, err := e.db.EntriesOfStream(e.ctx, id)
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
			streams, _ := e.db.StreamsOfStar(e.ctx, "s1")
			st := streams[0]
			// An empty record, and a record with content in the same chunk.
			empty, full, found := uint64(0), uint64(0), false
			entries, _ := e.db.EntriesOfStream(e.ctx, st.ID)
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
			if q, _ := e.db.Quarantined(e.ctx, "s1"); c.StreamsQuarantined != 0 || len(q) != 0 {
				t.Fatalf("the rewrite under the first erasure was quarantined: %+v %+v", c, q)
			}
			if c.ObjectsRewritten != 1 {
				t.Fatalf("erase after the crash: %+v (want the standing rewrite adopted and committed)", c)
			}
			if reaps, _ := e.db.Intents(e.ctx, "s1", "reap", 0); len(reaps) != 1 {
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
