package reconcile

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
)

var testStream = catalog.Stream{ID: catalog.StreamID{7}, Bucket: "b0", Epoch: 1}

// obj is a store object [first, end) at revision rev; flags: e eligible,
// b bad, r reaping.
func obj(first, end uint64, rev uint32, flags string) *object {
	o := &object{first: first, end: end, revision: rev,
		key: bundlefmt.SettledKey(testStream.Bucket, testStream.ID, 1, first, rev)}
	for _, f := range flags {
		switch f {
		case 'e':
			o.eligible = true
		case 'b':
			o.bad = true
		case 'r':
			o.reaping = true
		}
	}
	return o
}

func entry(first, end int64, rev int32) catalog.Entry {
	return catalog.Entry{Stream: testStream.ID, Epoch: 1, FirstRecord: first, RecordCount: end - first, Revision: rev}
}

// render is a chain as text: each link "first-end~rev", "cut(first~rev)"
// or "kept(first-end~rev)", then the end and what was lost.
func render(c chain) string {
	s := ""
	for _, l := range c.links {
		switch {
		case l.kept != nil:
			s += fmt.Sprintf("kept(%d-%d~%d) ", l.kept.FirstRecord, l.kept.EndRecord(), l.kept.Revision)
		case l.cut:
			s += fmt.Sprintf("cut(%d~%d) ", l.obj.first, l.obj.revision)
		default:
			s += fmt.Sprintf("%d-%d~%d ", l.obj.first, l.obj.end, l.obj.revision)
		}
	}
	s += fmt.Sprintf("end %d", c.end)
	if c.lostLead != nil {
		s += fmt.Sprintf(" lostLead %d-%d", c.lostLead.from, c.lostLead.to)
	}
	for _, k := range c.lostKept {
		s += fmt.Sprintf(" lostKept %d-%d", k.from, k.to)
	}
	return s
}

func TestPlanChoosesTheChain(t *testing.T) {
	for _, tc := range []struct {
		name           string
		settled, next  int64
		low            int64
		entries        []catalog.Entry
		objs           []*object
		presentEntries bool // the entries' own keys are present in the store
		want           string
	}{
		{name: "tail rewritten past next_record: cut", settled: 100, next: 250,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 300, 3, "e")},
			want: "cut(0~3) end 250"},
		{name: "a healthy star: a buried newer revision is not taken", settled: 100, next: 120, presentEntries: true,
			entries: []catalog.Entry{entry(0, 100, 1)}, objs: []*object{obj(0, 100, 1, "e"), obj(0, 150, 2, "")},
			want: "0-100~1 end 100"},
		{name: "leading entries gone, the next base goes on", settled: 150, next: 280,
			entries: []catalog.Entry{entry(0, 100, 0), entry(100, 150, 0)}, objs: []*object{obj(100, 300, 2, "e")},
			want: "cut(100~2) end 280 lostLead 0-100"},
		{name: "a middle entry gone: kept and reported", settled: 250, next: 300,
			entries: []catalog.Entry{entry(0, 100, 0), entry(100, 200, 0), entry(200, 250, 0)},
			objs:    []*object{obj(0, 100, 0, "e"), obj(200, 250, 0, "e")},
			want:    "0-100~0 kept(100-200~0) 200-250~0 end 250 lostKept 100-200"},
		{name: "the store settled past settled_through: the chain goes on, refs hold the rest", settled: 100, next: 250,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 100, 1, "e"), obj(100, 200, 0, "e")},
			want: "0-100~1 100-200~0 end 200"},
		{name: "an unsound object is never taken", settled: 100, next: 250,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 300, 3, "eb")},
			want: "end 100 lostLead 0-100"},
		{name: "a key a reap intent names is never taken", settled: 100, next: 250, presentEntries: true,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 100, 0, "e"), obj(0, 300, 3, "er")},
			want: "0-100~0 end 100"},
		{name: "the furthest reach wins over the newest revision", settled: 100, next: 400,
			entries: []catalog.Entry{entry(0, 100, 0)},
			objs:    []*object{obj(0, 150, 4, "e"), obj(0, 200, 3, "e"), obj(200, 390, 0, "e")},
			want:    "0-200~3 200-390~0 end 390"},
		{name: "equal reach: the highest revision", settled: 100, next: 150,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 150, 2, "e"), obj(0, 150, 5, "e")},
			want: "0-150~5 end 150"},
		{name: "a run begun in the retention gap, up to low_record", settled: 100, next: 250, low: 150, presentEntries: true,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 100, 0, "e"), obj(120, 200, 0, "e")},
			want: "0-100~0 120-200~0 end 200"},
		{name: "no run begins past low_record", settled: 100, next: 250, low: 110, presentEntries: true,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 100, 0, "e"), obj(120, 200, 0, "e")},
			want: "0-100~0 end 100"},
		{name: "a cut short of next_record (a limit)", settled: 100, next: 180,
			entries: []catalog.Entry{entry(0, 100, 0)}, objs: []*object{obj(0, 300, 3, "e")},
			want: "cut(0~3) end 180"},
		{name: "no entry and nothing stored: nothing", settled: 40, next: 90,
			want: "end 40"},
		{name: "no entry, a new run in the store", settled: 40, next: 90,
			objs: []*object{obj(40, 90, 0, "e")},
			want: "40-90~0 end 90"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := testStream
			st.SettledThrough, st.NextRecord, st.LowRecord = tc.settled, tc.next, tc.low
			byBase := map[uint64][]*object{}
			present := map[string]bool{}
			for _, o := range tc.objs {
				byBase[o.first] = append(byBase[o.first], o)
				present[o.key] = true
			}
			if tc.presentEntries {
				for _, e := range tc.entries {
					present[entryKeyOf(st, e)] = true
				}
			}
			sortObjects(byBase)
			if got := render(plan(st, tc.entries, byBase, present, uint64(tc.next))); got != tc.want {
				t.Errorf("plan: %s\n            want %s", got, tc.want)
			}
		})
	}
}

// TestDiffOfAHealthyStreamIsNothing: a chain equal to the catalog asks for
// no change; a superseded tail is removed, its successor added, the old
// key and every unused key reaped, the bases raised, the refs below the
// new end released.
func TestDiffOfAHealthyStreamIsNothing(t *testing.T) {
	st := testStream
	st.SettledThrough, st.NextRecord = 100, 100
	o1 := obj(0, 100, 1, "e")
	v := catalog.ReconcileView{Stream: st, Entries: []catalog.Entry{entry(0, 100, 1)}, High: map[int64]int32{0: 1}}
	byBase := map[uint64][]*object{0: {o1}}
	ch := plan(st, v.Entries, byBase, map[string]bool{o1.key: true}, 100)
	if o := diff(st, v, ch, byBase); len(o.remove)+len(o.add)+len(o.reap)+len(o.raiseFirst)+len(o.close)+o.refs != 0 || o.cut != nil {
		t.Fatalf("a healthy stream's diff: %+v", o)
	}

	st.NextRecord = 200
	o3, stale := obj(0, 180, 3, "e"), obj(0, 120, 2, "e")
	byBase = map[uint64][]*object{0: {o3, stale, o1}}
	v = catalog.ReconcileView{Stream: st, Entries: []catalog.Entry{entry(0, 100, 1)}, High: map[int64]int32{0: 1},
		Refs:    []catalog.SpanRef{{FirstRecord: 100, RecordCount: 80}, {FirstRecord: 180, RecordCount: 20}},
		Intents: []catalog.Intent{{ID: 9, Kind: "publish", ObjectKey: o3.key}, {ID: 10, Kind: "publish", ObjectKey: stale.key}}}
	ch = plan(st, v.Entries, byBase, map[string]bool{o1.key: true, o3.key: true, stale.key: true}, 200)
	o := diff(st, v, ch, byBase)
	wantAdd := []catalog.EntryRevision{{FirstRecord: 0, Revision: 3}}
	var gotAdd []catalog.EntryRevision
	for _, e := range o.add {
		gotAdd = append(gotAdd, catalog.EntryRevision{FirstRecord: e.FirstRecord, Revision: e.Revision})
	}
	if !reflect.DeepEqual(gotAdd, wantAdd) || !reflect.DeepEqual(o.remove, []catalog.EntryRevision{{FirstRecord: 0, Revision: 1}}) ||
		!reflect.DeepEqual(o.reap, []string{stale.key, o1.key}) || !reflect.DeepEqual(o.close, []int64{9}) ||
		!reflect.DeepEqual(o.raiseFirst, []int64{0}) || !reflect.DeepEqual(o.raiseRev, []int32{3}) || o.refs != 1 || ch.end != 180 {
		t.Fatalf("diff: add %v remove %v reap %v close %v raise %v/%v refs %d end %d", gotAdd, o.remove, o.reap, o.close,
			o.raiseFirst, o.raiseRev, o.refs, ch.end)
	}
}

// TestDiffNeverReapsWhatTheChainDoesNotReach: an object the chain stops
// short of (an unsound one before it) and the unsound one itself are left,
// never armed for the reap; their bases are raised all the same.
func TestDiffNeverReapsWhatTheChainDoesNotReach(t *testing.T) {
	st := testStream
	st.SettledThrough, st.NextRecord = 100, 300
	bad, after := obj(100, 200, 0, "eb"), obj(200, 300, 0, "e")
	o1 := obj(0, 100, 0, "e")
	byBase := map[uint64][]*object{0: {o1}, 100: {bad}, 200: {after}}
	v := catalog.ReconcileView{Stream: st, Entries: []catalog.Entry{entry(0, 100, 0)}, High: map[int64]int32{0: 0}}
	ch := plan(st, v.Entries, byBase, map[string]bool{o1.key: true, bad.key: true, after.key: true}, 300)
	if render(ch) != "0-100~0 end 100" {
		t.Fatalf("plan: %s", render(ch))
	}
	o := diff(st, v, ch, byBase)
	if len(o.reap) != 0 || !reflect.DeepEqual(o.left, []string{bad.key, after.key}) ||
		!reflect.DeepEqual(o.raiseFirst, []int64{100, 200}) {
		t.Fatalf("reap %v, left %v, raised %v", o.reap, o.left, o.raiseFirst)
	}
}

// TestSameRecordsAndBatchEnds: a slot chunk's records against the chain's,
// an erased record's tombstone included, and where a cut may fall.
func TestSameRecordsAndBatchEnds(t *testing.T) {
	b := bundlefmt.NewChunkBuilder(testStream.ID, 10)
	for i := 0; i < 5; i++ {
		if err := b.Add(bundlefmt.Record{Body: []byte{'a' + byte(i)}}, int64(i), i == 1 || i == 4); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Chunk()
	records := func(from uint64) []chainRecord {
		var out []chainRecord
		var off uint32
		for i, l := range c.Entry.Lengths {
			if c.Entry.FirstRecord+uint64(i) >= from {
				out = append(out, chainRecord{data: c.Data[off : off+l], ts: c.Entry.Timestamps[i], batchEnd: c.Entry.IsBatchEnd(i)})
			}
			off += l
		}
		return out
	}
	tomb := []byte{bundlefmt.TombstoneByte}
	erased := erasedBy([]catalog.Erasure{{FirstRecord: 8, RecordCount: 5}, {FirstRecord: 9, RecordCount: 1}, {FirstRecord: 14, RecordCount: 1}})
	for r, want := range map[uint64]bool{7: false, 8: true, 12: true, 13: false, 14: true, 15: false} {
		if erased(r) != want {
			t.Errorf("erased(%d): %v, want %v", r, !want, want)
		}
	}
	none := erasedBy(nil)
	withTomb := func(from uint64, at ...uint64) []chainRecord {
		out := records(from)
		for _, r := range at {
			out[r-from].data = tomb
		}
		return out
	}
	with := func(from, at uint64, change func(*chainRecord)) []chainRecord {
		out := records(from)
		change(&out[at-from])
		return out
	}
	for _, tc := range []struct {
		name   string
		from   uint64
		got    []chainRecord
		erased func(uint64) bool
		want   bool
	}{
		{"every record", 10, records(10), none, true},
		{"from record 12", 12, records(12), none, true},
		{"one record short", 12, records(13), none, false},
		{"erased records as tombstones", 10, withTomb(10, 10, 11, 14), erased, true},
		{"a tombstone no erasure names", 10, withTomb(10, 13), erased, false},
		{"tombstones without erasures", 10, withTomb(10, 11), none, false},
		{"another record", 12, with(12, 13, func(r *chainRecord) { r.data = []byte{0, 'z'} }), none, false},
		{"the same bytes at another time", 12, with(12, 13, func(r *chainRecord) { r.ts++ }), none, false},
		{"the same bytes ending no batch", 12, with(12, 13, func(r *chainRecord) { r.batchEnd = !r.batchEnd }), none, false},
		{"an erased record's tombstone at another time", 10, with(10, 11, func(r *chainRecord) { r.data, r.ts = tomb, r.ts+1 }), erased, false},
	} {
		if got := sameRecords(c.Entry, c.Data, tc.from, tc.got, tc.erased); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	o := &object{first: 10, end: 15, entries: []bundlefmt.Entry{c.Entry}}
	for end, want := range map[uint64]bool{12: true, 15: true, 11: false, 13: false, 14: false, 16: false} {
		if endsBatch(o, end) != want {
			t.Errorf("endsBatch at %d: %v, want %v", end, !want, want)
		}
	}
}

func TestLastBatchEnd(t *testing.T) {
	b := bundlefmt.NewChunkBuilder(testStream.ID, 10)
	for i := 0; i < 5; i++ {
		if err := b.Add(bundlefmt.Record{Body: []byte{'x'}}, int64(i), i == 1 || i == 4); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Chunk()
	o := &object{first: 10, end: 15, entries: []bundlefmt.Entry{c.Entry}}
	for end, want := range map[uint64]uint64{15: 12, 14: 12, 13: 12, 12: 0, 16: 15} {
		if got := lastBatchEnd(o, end); got != want {
			t.Errorf("lastBatchEnd below %d: %d, want %d", end, got, want)
		}
	}
}
