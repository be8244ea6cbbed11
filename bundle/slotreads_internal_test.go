package bundle

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/nova/auditor/bundlefmt"
)

// TestMergeRunsBound checks mergeRuns over random slots: the ranges cover
// the runs in order, no bridged gap is wider than the gap, and no range
// wastes more than max(its wanted bytes, the gap); and a gap a range could
// still bridge within that bound was not left unbridged.
func TestMergeRunsBound(t *testing.T) {
	const gap = 64 << 10
	r := rand.New(rand.NewPCG(25, 1))
	for trial := range 2000 {
		n := 1 + r.IntN(60)
		runs := make([][2]int64, n)
		at := int64(r.IntN(1 << 10))
		for i := range runs {
			if i > 0 {
				at += gapSize(r)
			}
			w := 1 + int64(r.IntN(16<<10))
			runs[i] = [2]int64{at, at + w}
			at += w
		}
		groups := mergeRuns(runs, gap)
		next := 0
		for _, g := range groups {
			if g[0] != next || g[1] <= g[0] {
				t.Fatalf("trial %d: ranges %v of %d runs", trial, groups, n)
			}
			next = g[1]
			var want int64
			for i := g[0]; i < g[1]; i++ {
				want += runs[i][1] - runs[i][0]
				if i > g[0] && runs[i][0]-runs[i-1][1] > gap {
					t.Fatalf("trial %d: a gap of %d bridged", trial, runs[i][0]-runs[i-1][1])
				}
			}
			if waste := runs[g[1]-1][1] - runs[g[0]][0] - want; waste > max(want, gap) {
				t.Fatalf("trial %d: a range wanting %d wastes %d", trial, want, waste)
			}
		}
		if next != n {
			t.Fatalf("trial %d: ranges %v of %d runs", trial, groups, n)
		}
		// Two neighbours that the bound allows as one were not left apart
		// over a gap that fits it.
		for k := 1; k < len(groups); k++ {
			a, b := groups[k-1], groups[k]
			g := runs[b[0]][0] - runs[a[1]-1][1]
			var want int64
			for i := a[0]; i < b[1]; i++ {
				want += runs[i][1] - runs[i][0]
			}
			if waste := runs[b[1]-1][1] - runs[a[0]][0] - want; g <= gap && waste <= max(want, gap) {
				t.Fatalf("trial %d: ranges %v and %v left apart, together they waste %d of %d wanted", trial, a, b, waste, want)
			}
		}
	}
}

// gapSize is a gap between wanted runs: mostly small, now and then wider
// than a request is worth, sometimes none.
func gapSize(r *rand.Rand) int64 {
	switch r.IntN(10) {
	case 0:
		return 0
	case 1:
		return 64<<10 + int64(r.IntN(1<<20))
	default:
		return int64(r.IntN(24 << 10))
	}
}

// TestMergeRunsDense: runs alternating with gaps no wider than them are one
// range; runs of 1 KiB between gaps of 3 KiB, wider than the runs, are
// merged up to the gap's worth of waste, a few ranges and not one a run.
func TestMergeRunsDense(t *testing.T) {
	layout := func(n int, run, gap func(i int) int64) [][2]int64 {
		var runs [][2]int64
		at := int64(0)
		for i := range n {
			runs = append(runs, [2]int64{at, at + run(i)})
			at += run(i) + gap(i)
		}
		return runs
	}
	even := layout(200, func(int) int64 { return 4 << 10 }, func(i int) int64 { return int64(i%5+1) << 10 })
	for _, gap := range []int64{64 << 10, DefaultSlotReadGap} {
		if g := mergeRuns(even, gap); len(g) != 1 {
			t.Errorf("gap %d KiB, gaps no wider than the runs: %d ranges, want 1", gap>>10, len(g))
		}
	}
	wide := layout(200, func(int) int64 { return 1 << 10 }, func(int) int64 { return 3 << 10 })
	// A range wastes at most the gap's worth: at 64 KiB 21 gaps of 3 KiB
	// (63 KiB) and 22 runs; at the default (256 KiB) 85 gaps (255 KiB)
	// and 86 runs.
	if g := mergeRuns(wide, 64<<10); len(g) != 10 {
		t.Errorf("gap 64 KiB, gaps 3 times the runs: %d ranges, want 10 (22 runs each, the last 2)", len(g))
	}
	if DefaultSlotReadGap != 256<<10 {
		t.Fatalf("DefaultSlotReadGap is %d: this test's count is for 256 KiB", DefaultSlotReadGap)
	}
	if g := mergeRuns(wide, DefaultSlotReadGap); len(g) != 3 {
		t.Errorf("default gap, gaps 3 times the runs: %d ranges, want 3 (86, 86 and 28 runs)", len(g))
	}
}

// TestWantedRunsAgainstAScan: the wanted runs a slot's footer gives the
// due streams (found by galloping through the rows) are those a pass over
// every row finds, over random slots (a chunk a stream, streams sorted)
// and random due sets, from none to all of them, with runs at or above
// MaxRun left out.
func TestWantedRunsAgainstAScan(t *testing.T) {
	r := rand.New(rand.NewPCG(25, 2))
	for trial := range 200 {
		var chunks []bundlefmt.Chunk
		var ids []bundlefmt.StreamID
		for s := range 1 + r.IntN(300) {
			id := bundlefmt.StreamID{0: byte(r.IntN(4)), 13: byte(s >> 16), 14: byte(s >> 8), 15: byte(s)}
			ids = append(ids, id)
			b := bundlefmt.NewChunkBuilder(id, uint64(r.IntN(100)))
			n := 1 + r.IntN(4)
			for j := range n {
				if err := b.Add(bundlefmt.Record{Body: make([]byte, 1+r.IntN(2000))}, 1, j == n-1); err != nil {
					t.Fatal(err)
				}
			}
			chunks = append(chunks, b.Chunk())
		}
		slices.SortFunc(chunks, func(a, b bundlefmt.Chunk) int { return bytes.Compare(a.Entry.Stream[:], b.Entry.Stream[:]) })
		obj, err := bundlefmt.EncodeFlight(1, uint64(trial+1), 7, chunks)
		if err != nil {
			t.Fatal(err)
		}
		f, err := bundlefmt.OpenObjectFooter("slot", obj, bundlefmt.EnvelopeSize)
		if err != nil {
			t.Fatal(err)
		}
		due := map[bundlefmt.StreamID]bool{}
		p := r.Float64()
		for _, id := range ids {
			if r.Float64() < p {
				due[id] = true
			} else if r.IntN(4) == 0 {
				due[id] = false // listed, not due
			}
		}
		due[bundlefmt.StreamID{0: 9}] = true // due, in no row of the slot
		maxRun := int64(1 + r.IntN(8000))
		rd := (&Reader{}).WithSlotReads(SlotReads{Streams: due, MaxRun: maxRun, Gap: DefaultSlotReadGap, Budget: 1})
		got := rd.slots.wantedRuns(f)
		// the plain scan: every row, a run per stretch of one stream's
		// adjacent chunks
		var want [][2]int64
		for i, n := 0, f.NumChunks(); i < n; {
			id := f.Row(i).Stream
			start := int64(f.DataOffset(i))
			end := start + int64(f.Row(i).ChunkBytes)
			for i++; i < n && f.Row(i).Stream == id && int64(f.DataOffset(i)) == end; i++ {
				end += int64(f.Row(i).ChunkBytes)
			}
			if due[id] && end-start < maxRun {
				want = append(want, [2]int64{start, end})
			}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("trial %d (%d rows, %d due listed): runs %v, the scan finds %v", trial, f.NumChunks(), len(due), got, want)
		}
	}
}
