package bundle_test

import (
	"fmt"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/crc32c"
	"github.com/nova/auditor/internal/cycle"
)

// slotOf writes a slot holding one chunk of each of n streams and returns
// its key, its footer window and each stream's chunk entry.
func slotOf(t *testing.T, fx *fixture, n int) (string, [2]int64, []bundlefmt.StreamID, []bundlefmt.Entry) {
	t.Helper()
	var chunks []bundlefmt.Chunk
	var ids []bundlefmt.StreamID
	for i := range n {
		id := bundlefmt.StreamID{0: 0x51, 15: byte(i)}
		b := bundlefmt.NewChunkBuilder(id, 0)
		for j := range 3 {
			if err := b.Add(bundlefmt.Record{Body: []byte(fmt.Sprintf("stream %d record %d", i, j))}, 1, j == 2); err != nil {
				t.Fatal(err)
			}
		}
		chunks = append(chunks, b.Chunk())
		ids = append(ids, id)
	}
	obj, err := bundlefmt.EncodeFlight(1, 3, 7, chunks)
	if err != nil {
		t.Fatal(err)
	}
	key := bundlefmt.SlotKey("s1", 1, 3)
	if err := fx.fs.PutIfAbsent(fx.ctx, fx.std, key, obj); err != nil {
		t.Fatal(err)
	}
	f, err := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
	if err != nil {
		t.Fatal(err)
	}
	var entries []bundlefmt.Entry
	for _, id := range ids {
		i, _ := f.Find(id, 0)
		e, err := f.Entry(i)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	return key, [2]int64{int64(f.FooterOffset()), int64(f.FooterLength())}, ids, entries
}

// TestSlotReadsOneRangePerSlot: the wanted streams' chunks of a slot are
// read with one ranged GET however many pieces are asked for; a stream not
// due is not wanted (its piece is not served); bytes that disagree with
// the CRC asked for are a checksum quarantine naming the slot.
func TestSlotReadsOneRangePerSlot(t *testing.T) {
	fx := newFixture(t)
	key, win, ids, es := slotOf(t, fx, 6)
	due := map[bundlefmt.StreamID]bool{}
	for _, id := range ids[:5] {
		due[id] = true
	}
	rd := fx.rd.WithFooterCache(1 << 20).WithSlotReads(bundle.SlotReads{Streams: due, MaxRun: 5 << 20, Gap: bundle.DefaultSlotReadGap, Budget: 1 << 20})
	src := bundle.Source{Key: key, Class: catalog.ClassStandard}
	if _, err := rd.SlotFooter(fx.ctx, src.Class, key, win[0], win[1]); err != nil {
		t.Fatal(err)
	}
	before := fx.store.gets[key]
	for i, e := range es[:4] {
		got, ok, err := rd.Piece(fx.ctx, src, int64(e.DataOffset), int64(e.ChunkBytes()), e.DataCRC)
		if err != nil || !ok || crc32c.Checksum(got) != e.DataCRC {
			t.Fatalf("stream %d: ok %v err %v", i, ok, err)
		}
	}
	if n := fx.store.gets[key] - before; n != 1 {
		t.Fatalf("%d GETs for four pieces of one slot, want 1", n)
	}
	if _, ok, _ := rd.Piece(fx.ctx, src, int64(es[5].DataOffset), int64(es[5].ChunkBytes()), es[5].DataCRC); ok {
		t.Fatal("a stream not due was served from the slot's range")
	}
	e := es[4]
	_, ok, err := rd.Piece(fx.ctx, src, int64(e.DataOffset), int64(e.ChunkBytes()), e.DataCRC^1)
	if q, isQ := cycle.AsQuarantine(err); ok || !isQ || q.Class != cycle.ClassChecksum || q.SlotKey != key {
		t.Fatalf("a wrong CRC: ok %v err %v", ok, err)
	}
	if gets, _ := rd.SlotReadStats(); gets != 1 {
		t.Fatalf("stats say %d GETs", gets)
	}
}

// TestSlotReadsBudget: a range larger than the budget is never read (the
// caller reads its piece alone); a slot whose footer is not cached is not
// served.
func TestSlotReadsBudget(t *testing.T) {
	fx := newFixture(t)
	key, win, ids, es := slotOf(t, fx, 4)
	due := map[bundlefmt.StreamID]bool{}
	for _, id := range ids {
		due[id] = true
	}
	src := bundle.Source{Key: key, Class: catalog.ClassStandard}
	cached := fx.rd.WithFooterCache(1 << 20)
	tiny := cached.WithSlotReads(bundle.SlotReads{Streams: due, MaxRun: 5 << 20, Gap: bundle.DefaultSlotReadGap, Budget: 8})
	if _, ok, _ := tiny.Piece(fx.ctx, src, int64(es[0].DataOffset), int64(es[0].ChunkBytes()), es[0].DataCRC); ok {
		t.Fatal("served before the slot's footer was read")
	}
	if _, err := tiny.SlotFooter(fx.ctx, src.Class, key, win[0], win[1]); err != nil {
		t.Fatal(err)
	}
	before := fx.store.gets[key]
	for _, e := range es {
		if _, ok, err := tiny.Piece(fx.ctx, src, int64(e.DataOffset), int64(e.ChunkBytes()), e.DataCRC); ok || err != nil {
			t.Fatalf("over budget: ok %v err %v", ok, err)
		}
	}
	if n := fx.store.gets[key] - before; n != 0 {
		t.Fatalf("%d GETs over budget, want none", n)
	}
}
