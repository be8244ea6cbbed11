package reconcile_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/reconcile"
)

// viewCatalog is a metastore as one reconcile reads it: each stream's
// view, nothing written (a dry run writes nothing).
type viewCatalog struct {
	star  string
	views []catalog.ReconcileView
}

func (c *viewCatalog) StreamsOfStar(_ context.Context, star string) ([]catalog.Stream, error) {
	var out []catalog.Stream
	for _, v := range c.views {
		if v.Stream.Star == star {
			out = append(out, v.Stream)
		}
	}
	return out, nil
}

func (c *viewCatalog) Stream(_ context.Context, id catalog.StreamID) (catalog.Stream, error) {
	for _, v := range c.views {
		if v.Stream.ID == id {
			return v.Stream, nil
		}
	}
	return catalog.Stream{}, catalog.ErrNotFound
}

func (c *viewCatalog) ReconcileView(_ context.Context, id catalog.StreamID, _, _ string) (catalog.ReconcileView, error) {
	for _, v := range c.views {
		if v.Stream.ID == id {
			return v, nil
		}
	}
	return catalog.ReconcileView{}, catalog.ErrNotFound
}

var errWrite = errors.New("a dry run writes nothing")

func (c *viewCatalog) ClaimForReconcile(context.Context, catalog.Fence, catalog.StreamID, int64, []string, []int64, []int32) ([]int64, error) {
	return nil, errWrite
}

func (c *viewCatalog) CommitReconcile(context.Context, catalog.Fence, catalog.ReconcileCommit) error {
	return errWrite
}

func (c *viewCatalog) Mark(context.Context, string) (catalog.Mark, error) { return catalog.Mark{}, nil }

func (c *viewCatalog) RaiseMark(context.Context, catalog.Fence, int64) error { return errWrite }

func (c *viewCatalog) ClearRewoundHalt(context.Context, catalog.Fence, string) (bool, error) {
	return false, errWrite
}

func entryOf(st catalog.Stream, first, end int64) catalog.Entry {
	return catalog.Entry{Stream: st.ID, Epoch: st.Epoch, FirstRecord: first, RecordCount: end - first, Class: catalog.ClassStandard}
}

// putSettled stores the settled object of entry e: one chunk of its
// records.
func putSettled(t *testing.T, b teststore.Backend, st catalog.Stream, e catalog.Entry) {
	t.Helper()
	cb := bundlefmt.NewChunkBuilder(st.ID, uint64(e.FirstRecord))
	for i := int64(0); i < e.RecordCount; i++ {
		if err := cb.Add(bundlefmt.Record{Body: []byte{byte(i)}}, i, true); err != nil {
			t.Fatal(err)
		}
	}
	data, err := bundlefmt.EncodeSettled([]bundlefmt.Chunk{cb.Chunk()})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Store.PutIfAbsent(context.Background(), b.Std, bundle.EntryKey(st.Bucket, e), data); err != nil {
		t.Fatal(err)
	}
}

// slotRef is a span ref of st naming slot (1, seq), which no test stores.
func slotRef(st catalog.Stream, first, end, seq int64) catalog.SpanRef {
	return catalog.SpanRef{Stream: st.ID, FirstRecord: first, RecordCount: end - first, Star: st.Star,
		Class: catalog.ClassStandard, Slots: []catalog.SlotRef{{Epoch: 1, Seq: seq, FooterOffset: 60, FooterLength: 100}}}
}

// TestRetentionIsNotALoss: records below a stream's low_record whose
// objects retention's reap deleted, and whose slots trim deleted, after
// the metastore's state was taken (a restore from a backup taken between
// the low_record's raise and the retention, trim and reap that followed)
// are retired, not lost: the report counts no lost record, so `auditor
// reconcile` exits 0. Records at or above the low_record the metastore
// holds that nothing holds are still lost, a low_record older than the
// retention that ran included: only the metastore's own low_record
// excuses a record.
func TestRetentionIsNotALoss(t *testing.T) {
	ctx := context.Background()
	stream := func(n byte, low, settled, next int64) catalog.Stream {
		return catalog.Stream{ID: catalog.StreamID{n}, Star: "s1", Bucket: "b0", Epoch: 1, Class: catalog.ClassStandard,
			LowRecord: low, SettledThrough: settled, NextRecord: next}
	}
	type want struct{ lost, retired []reconcile.Range }
	for _, tc := range []struct {
		name string
		// build makes the stream's view and stores what the store holds.
		build func(b teststore.Backend) catalog.ReconcileView
		want  want
	}{
		{name: "leading entries retired, their objects reaped", want: want{retired: rng(0, 100)},
			build: func(b teststore.Backend) catalog.ReconcileView {
				st := stream(1, 120, 150, 150)
				es := []catalog.Entry{entryOf(st, 0, 50), entryOf(st, 50, 100), entryOf(st, 100, 150)}
				putSettled(t, b, st, es[2]) // it straddles low_record: retention keeps it whole
				return catalog.ReconcileView{Stream: st, Entries: es, High: map[int64]int32{0: 0, 50: 0, 100: 0}}
			}},
		{name: "every record retired: entries reaped, refs skipped and their slots trimmed", want: want{retired: rng(0, 100, 100, 120)},
			build: func(_ teststore.Backend) catalog.ReconcileView {
				st := stream(2, 120, 100, 120)
				return catalog.ReconcileView{Stream: st, Entries: []catalog.Entry{entryOf(st, 0, 100)},
					Refs: []catalog.SpanRef{slotRef(st, 100, 120, 7)}, High: map[int64]int32{0: 0}}
			}},
		{name: "a middle entry's object gone below low_record, the entry kept", want: want{retired: rng(100, 200)},
			build: func(b teststore.Backend) catalog.ReconcileView {
				st := stream(3, 200, 250, 250)
				es := []catalog.Entry{entryOf(st, 0, 100), entryOf(st, 100, 200), entryOf(st, 200, 250)}
				putSettled(t, b, st, es[0])
				putSettled(t, b, st, es[2])
				return catalog.ReconcileView{Stream: st, Entries: es, High: map[int64]int32{0: 0, 100: 0, 200: 0}}
			}},
		{name: "a live entry's object gone: lost above low_record", want: want{lost: rng(60, 100), retired: rng(0, 60)},
			build: func(b teststore.Backend) catalog.ReconcileView {
				st := stream(4, 60, 150, 150)
				es := []catalog.Entry{entryOf(st, 0, 50), entryOf(st, 50, 100), entryOf(st, 100, 150)}
				putSettled(t, b, st, es[2])
				return catalog.ReconcileView{Stream: st, Entries: es, High: map[int64]int32{0: 0, 50: 0, 100: 0}}
			}},
		{name: "a low_record older than the retention that ran: the slots above it are lost", want: want{lost: rng(110, 120, 120, 130), retired: rng(0, 100, 100, 110)},
			build: func(_ teststore.Backend) catalog.ReconcileView {
				st := stream(5, 110, 100, 130)
				return catalog.ReconcileView{Stream: st, Entries: []catalog.Entry{entryOf(st, 0, 100)},
					Refs: []catalog.SpanRef{slotRef(st, 100, 120, 8), slotRef(st, 120, 130, 9)}, High: map[int64]int32{0: 0}}
			}},
		{name: "a ref over two missing slots counts its records once; a later ref sharing one of them counts its own", want: want{lost: rng(100, 120, 120, 130)},
			build: func(_ teststore.Backend) catalog.ReconcileView {
				st := stream(6, 0, 100, 130)
				two := slotRef(st, 100, 120, 10)
				two.Slots = append(two.Slots, catalog.SlotRef{Epoch: 1, Seq: 11, FooterOffset: 60, FooterLength: 100})
				return catalog.ReconcileView{Stream: st, Refs: []catalog.SpanRef{two, slotRef(st, 120, 130, 11)}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := teststore.File(t, teststore.Options{})
			v := tc.build(b)
			top := teststore.Topology(t, b.Store, b.Std, nil, nil)
			d := reconcile.Deps{DB: &viewCatalog{star: "s1", views: []catalog.ReconcileView{v}}, Reader: bundle.NewReader(top), Store: b.Store}
			rep, err := reconcile.Run(ctx, d, reconcile.Config{Star: "s1"}, catalog.Fence{Star: "s1"})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Streams) != 1 {
				t.Fatalf("%d streams reported, want 1", len(rep.Streams))
			}
			s := rep.Streams[0]
			strip := func(rs []reconcile.Range) []reconcile.Range {
				var out []reconcile.Range
				for _, r := range rs {
					out = append(out, reconcile.Range{From: r.From, To: r.To})
				}
				return out
			}
			if got := strip(s.Lost); !reflect.DeepEqual(got, tc.want.lost) {
				t.Errorf("lost %v, want %v", got, tc.want.lost)
			}
			if got := strip(s.Retired); !reflect.DeepEqual(got, tc.want.retired) {
				t.Errorf("retired %v, want %v", got, tc.want.retired)
			}
			var lost, retired int64
			for _, r := range tc.want.lost {
				lost += r.To - r.From
			}
			for _, r := range tc.want.retired {
				retired += r.To - r.From
			}
			if rep.LostRecords != lost || rep.RetiredRecords != retired || rep.Unsound != 0 {
				t.Errorf("the report counts %d lost, %d retired, %d unsound; want %d, %d, 0", rep.LostRecords, rep.RetiredRecords, rep.Unsound, lost, retired)
			}
			var out strings.Builder
			rep.Print(&out)
			if lost == 0 && strings.Contains(out.String(), "LOST") || lost > 0 && !strings.Contains(out.String(), "LOST") ||
				rep.Findings() != (lost > 0) {
				t.Errorf("the report, with %d records lost, has findings: %v; printed:\n%s", lost, rep.Findings(), out.String())
			}
		})
	}
}

// rng is the record ranges [pairs[0], pairs[1]), [pairs[2], pairs[3]), ...
func rng(pairs ...int64) []reconcile.Range {
	var out []reconcile.Range
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, reconcile.Range{From: pairs[i], To: pairs[i+1]})
	}
	return out
}
