package bundle_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// slotOf writes a slot holding one chunk of each of n streams and returns
// its key, its footer window and each stream's chunk entry.
func slotOf(t *testing.T, fx *fixture, n int) (string, [2]int64, []bundlefmt.StreamID, []bundlefmt.Entry) {
	t.Helper()
	return slotWith(t, fx, 3, n, func(i int) []string {
		return []string{fmt.Sprintf("stream %d record 0", i), fmt.Sprintf("stream %d record 1", i), fmt.Sprintf("stream %d record 2", i)}
	})
}

// slotWith writes the slot of sequence seq holding one chunk of each of n
// streams, stream i's chunk of the records bodies(i), and returns what
// slotOf does.
func slotWith(t *testing.T, fx *fixture, seq uint64, n int, bodies func(i int) []string) (string, [2]int64, []bundlefmt.StreamID, []bundlefmt.Entry) {
	t.Helper()
	var chunks []bundlefmt.Chunk
	var ids []bundlefmt.StreamID
	for i := range n {
		id := bundlefmt.StreamID{0: 0x51, 14: byte(i >> 8), 15: byte(i)}
		b := bundlefmt.NewChunkBuilder(id, 0)
		recs := bodies(i)
		for j, body := range recs {
			if err := b.Add(bundlefmt.Record{Body: []byte(body)}, 1, j == len(recs)-1); err != nil {
				t.Fatal(err)
			}
		}
		chunks = append(chunks, b.Chunk())
		ids = append(ids, id)
	}
	obj, err := bundlefmt.EncodeFlight(1, seq, 7, chunks)
	if err != nil {
		t.Fatal(err)
	}
	key := bundlefmt.SlotKey("s1", 1, seq)
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
		if err != nil || !ok || bundlefmt.CRC32C(got) != e.DataCRC {
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

// TestSlotReadsWasteBound: the due streams' chunks of a slot alternate
// with chunks of streams not due, of various sizes. Where those are small
// the slot is read in one range; where some are wider than the gap rule
// bridges, the slot is read in one range per stretch between them. With a
// gap of 64 KiB every range here wants more than the gap, so the bytes
// read are at most twice the bytes wanted, where the gap rule alone (what
// slot reads did first) read all but the widest gaps. With the default
// (256 KiB) a range may waste up to the gap when it wants less: fewer
// GETs, and each range reads at most its wanted bytes and max(them, gap).
func TestSlotReadsWasteBound(t *testing.T) {
	const kib = 1 << 10
	if bundle.DefaultSlotReadGap != 256*kib {
		t.Fatalf("DefaultSlotReadGap is %d: the default-gap cases' counts are for 256 KiB", bundle.DefaultSlotReadGap)
	}
	body := func(n int) []string { return []string{strings.Repeat("x", n)} }
	for _, tc := range []struct {
		name    string
		notDue  []int // body bytes of the not-due chunks, by turn
		gap     int64
		wantGet int
	}{
		// 40 due chunks of 8 KiB (320 KiB) between not-due ones of up to
		// their size: one range.
		{"small gaps", []int{1 * kib, 8 * kib, 3 * kib, 200, 6 * kib, 5 * kib}, 64 * kib, 1},
		{"small gaps, default gap", []int{1 * kib, 8 * kib, 3 * kib, 200, 6 * kib, 5 * kib}, bundle.DefaultSlotReadGap, 1},
		// Not-due chunks mostly larger than the due ones (59 KiB of them
		// to 41 KiB due in every five): no range may waste more than it
		// wants beyond the gap (64 KiB), so each wastes up to that: 9
		// ranges as the smallest gaps fall first (7 at the fewest, a
		// dynamic program over the layout says; the gap rule alone: one
		// GET of 2.4 times the bytes wanted; none: 40).
		{"gaps larger than the chunks", []int{12 * kib, 2 * kib, 20 * kib, 9 * kib, 16 * kib}, 64 * kib, 9},
		// At the default gap (256 KiB) a range wanting less than 256 KiB
		// may waste up to it: 2 ranges.
		{"gaps larger than the chunks, default gap", []int{12 * kib, 2 * kib, 20 * kib, 9 * kib, 16 * kib}, bundle.DefaultSlotReadGap, 2},
		// Every tenth not-due chunk (100 KiB) is wider than a request is
		// worth: a range per stretch of ten due chunks between them.
		{"a wide gap every ten", []int{1 * kib, 4 * kib, 9 * kib, 2 * kib, 7 * kib, 3 * kib, 5 * kib, 6 * kib, 8 * kib, 100 * kib}, 64 * kib, 4},
		// The default gap bridges them.
		{"a wide gap every ten, default gap", []int{1 * kib, 4 * kib, 9 * kib, 2 * kib, 7 * kib, 3 * kib, 5 * kib, 6 * kib, 8 * kib, 100 * kib}, bundle.DefaultSlotReadGap, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pairs = 40
			fx := newFixture(t)
			key, win, ids, es := slotWith(t, fx, 3, 2*pairs, func(i int) []string {
				if i%2 == 0 {
					return body(8 * kib)
				}
				return body(tc.notDue[(i/2)%len(tc.notDue)])
			})
			due := map[bundlefmt.StreamID]bool{}
			var wanted, span int64
			for i, id := range ids {
				if i%2 == 0 {
					due[id] = true
					wanted += int64(es[i].ChunkBytes())
				}
			}
			span = int64(es[len(es)-2].DataOffset+es[len(es)-2].ChunkBytes()) - int64(es[0].DataOffset)
			rd := fx.rd.WithFooterCache(1 << 20).WithSlotReads(bundle.SlotReads{Streams: due, MaxRun: 5 << 20, Gap: tc.gap, Budget: 16 << 20})
			src := bundle.Source{Key: key, Class: catalog.ClassStandard}
			if _, err := rd.SlotFooter(fx.ctx, src.Class, key, win[0], win[1]); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < len(es); i += 2 {
				e := es[i]
				if got, ok, err := rd.Piece(fx.ctx, src, int64(e.DataOffset), int64(e.ChunkBytes()), e.DataCRC); err != nil || !ok || bundlefmt.CRC32C(got) != e.DataCRC {
					t.Fatalf("stream %d: ok %v err %v", i, ok, err)
				}
			}
			gets, fetched := rd.SlotReadStats()
			t.Logf("%d pieces, %d bytes wanted over a span of %d: %d GETs, %d bytes read (%.2f per byte wanted)",
				pairs, wanted, span, gets, fetched, float64(fetched)/float64(wanted))
			if gets != int64(tc.wantGet) {
				t.Errorf("%d GETs, want %d", gets, tc.wantGet)
			}
			// Each range reads its wanted bytes and at most max(them, gap):
			// in all, at most twice the wanted bytes and a gap per GET.
			if bound := 2*wanted + gets*tc.gap; fetched > bound {
				t.Errorf("%d bytes read for %d wanted in %d GETs: more than twice and a gap each (%d)", fetched, wanted, gets, bound)
			}
			if tc.gap == 64*kib && fetched > 2*wanted {
				t.Errorf("%d bytes read for %d wanted: more than twice", fetched, wanted)
			}
		})
	}
}
