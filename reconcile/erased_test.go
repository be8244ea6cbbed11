package reconcile_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/reconcile"
)

// chunkOf is a chunk of stream st holding records [first, end), each its
// own batch, with bodies that tell the records apart.
func chunkOf(t *testing.T, st catalog.Stream, first, end uint64) bundlefmt.Chunk {
	t.Helper()
	cb := bundlefmt.NewChunkBuilder(st.ID, first)
	for r := first; r < end; r++ {
		if err := cb.Add(bundlefmt.Record{Body: []byte{'r', byte(r), byte(r >> 8)}}, int64(r), true); err != nil {
			t.Fatal(err)
		}
	}
	return cb.Chunk()
}

// putSlot stores a flight at slot (1, seq) holding c (unless gone: reaped),
// and returns its ref's slot (the footer window from its trailer).
func putSlot(t *testing.T, b teststore.Backend, st catalog.Stream, seq uint64, c bundlefmt.Chunk, gone bool) catalog.SlotRef {
	t.Helper()
	data, err := bundlefmt.EncodeFlight(1, seq, 1, []bundlefmt.Chunk{c})
	if err != nil {
		t.Fatal(err)
	}
	key := bundlefmt.SlotKey(st.Star, 1, seq)
	tr, err := bundlefmt.DecodeTrailer(key, data[len(data)-bundlefmt.TrailerSize:], uint64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	if !gone {
		if err := b.Store.PutIfAbsent(context.Background(), b.Std, key, data); err != nil {
			t.Fatal(err)
		}
	}
	return catalog.SlotRef{Epoch: 1, Seq: int64(seq), FooterOffset: int64(tr.FooterOffset()), FooterLength: int64(tr.FooterLength())}
}

// putObject stores the settled object of chunk c at revision 0.
func putObject(t *testing.T, b teststore.Backend, st catalog.Stream, c bundlefmt.Chunk) {
	t.Helper()
	data, err := bundlefmt.EncodeSettled([]bundlefmt.Chunk{c})
	if err != nil {
		t.Fatal(err)
	}
	key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), c.Entry.FirstRecord, 0)
	if err := b.Store.PutIfAbsent(context.Background(), b.Std, key, data); err != nil {
		t.Fatal(err)
	}
}

// TestErasedRecordsAreTheSlotsRecords: an object settled under an erasure
// holds tombstones where the slot its records came from keeps the
// originals. A metastore restored from before the settle still names that
// slot; reconcile must take the tombstones of the records an erasure it
// knows names (pending or applied) for the slot's records, not for records
// the write path gave again: else the chain ends at the erased chunk, and
// when another slot of the same ref was reaped, its records are reported
// lost while the object holds them. A tombstone no erasure names is
// another record: there the chain still ends.
func TestErasedRecordsAreTheSlotsRecords(t *testing.T) {
	ctx := context.Background()
	st := catalog.Stream{ID: catalog.StreamID{9}, Star: "s1", Bucket: "b0", Epoch: 1, Class: catalog.ClassStandard,
		SettledThrough: 0, NextRecord: 20}
	for _, tc := range []struct {
		name     string
		erasures []catalog.Erasure
		settled  int64
		differ   []reconcile.Range
		lost     []reconcile.Range
	}{
		{name: "a pending erasure", settled: 20,
			erasures: []catalog.Erasure{{Stream: st.ID, FirstRecord: 13, RecordCount: 3}}},
		{name: "an applied erasure", settled: 20,
			erasures: []catalog.Erasure{{Stream: st.ID, FirstRecord: 12, RecordCount: 1}, {Stream: st.ID, FirstRecord: 13, RecordCount: 3, Applied: true}}},
		{name: "an erasure of fewer records than the tombstones", settled: 10, differ: rng(10, 20), lost: rng(10, 20),
			erasures: []catalog.Erasure{{Stream: st.ID, FirstRecord: 13, RecordCount: 2}}},
		{name: "no erasure", settled: 10, differ: rng(10, 20), lost: rng(10, 20)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := teststore.File(t, teststore.Options{})
			// One ref over two slots: the first reaped once its records
			// settled, the second still standing.
			a, c := chunkOf(t, st, 0, 10), chunkOf(t, st, 10, 20)
			gone, stands := putSlot(t, b, st, 1, a, true), putSlot(t, b, st, 2, c, false)
			ref := catalog.SpanRef{Stream: st.ID, FirstRecord: 0, RecordCount: 20, Star: st.Star, Class: catalog.ClassStandard,
				Slots: []catalog.SlotRef{gone, stands}}
			// The objects settled from them, records 13 to 15 erased.
			e, data, n, err := bundlefmt.EraseRecords("chunk", c.Entry, c.Data, func(r uint64) bool { return r >= 13 && r < 16 })
			if err != nil || n != 3 {
				t.Fatalf("erase: %d records, %v", n, err)
			}
			putObject(t, b, st, a)
			putObject(t, b, st, bundlefmt.Chunk{Entry: e, Data: data})

			v := catalog.ReconcileView{Stream: st, Refs: []catalog.SpanRef{ref}, Erasures: tc.erasures}
			top := teststore.Topology(t, b.Store, b.Std, nil, nil)
			d := reconcile.Deps{DB: &viewCatalog{star: "s1", views: []catalog.ReconcileView{v}}, Reader: bundle.NewReader(top), Store: b.Store}
			rep, err := reconcile.Run(ctx, d, reconcile.Config{Star: "s1"}, catalog.Fence{Star: "s1"})
			if err != nil {
				t.Fatal(err)
			}
			s := rep.Streams[0]
			strip := func(rs []reconcile.Range) []reconcile.Range {
				var out []reconcile.Range
				for _, r := range rs {
					out = append(out, reconcile.Range{From: r.From, To: r.To})
				}
				return out
			}
			if s.SettledAfter != tc.settled {
				t.Errorf("settled_through %d after, want %d", s.SettledAfter, tc.settled)
			}
			if got := strip(s.Differ); !reflect.DeepEqual(got, tc.differ) {
				t.Errorf("differ %v, want %v", got, tc.differ)
			}
			if got := strip(s.Lost); !reflect.DeepEqual(got, tc.lost) {
				t.Errorf("lost %v, want %v", got, tc.lost)
			}
			if len(s.Unsound) != 0 {
				t.Errorf("unsound %v", s.Unsound)
			}
		})
	}
}
