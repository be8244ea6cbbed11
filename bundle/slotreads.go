package bundle

import (
	"bytes"
	"container/list"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cycle"
)

// SlotReads says which bytes of a cycle's slots a reader reads together
// (WithSlotReads): the chunks of Streams (the cycle's due streams) in each
// slot, a stream's run of adjacent chunks only when it is shorter than
// MaxRun (a longer run may be copied server side and is never downloaded),
// merged into ranges across gaps as DefaultSlotReadGap says, held within
// Budget bytes.
type SlotReads struct {
	Streams map[bundlefmt.StreamID]bool
	MaxRun  int64
	Gap     int64 // what one request is worth in bytes read for nothing (DefaultSlotReadGap)
	Budget  int64
}

// DefaultSlotReadGap is what one ranged GET is taken to be worth in bytes
// read for nothing. A slot's wanted runs are merged across the gaps
// between them, smallest gap first (spending the waste where it saves the
// most requests); a gap is bridged only when it is at most Gap and the
// range it makes wastes at most its wanted bytes or Gap, whichever is
// more. The waste bound is there because wasted bytes are read again on
// every cycle a neighbouring stream is due, wanted bytes once; the width
// suits the tail-growth rule's cohorts, which lie together in a slot.
// Figures and history: docs/measurements.md#figures-behind-the-code.
const DefaultSlotReadGap = 256 << 10

// WithSlotReads returns a reader over the same topology and footer cache
// that also serves piece reads of the cycle's slots (Piece) from ranges
// read together: on the first piece read from a slot, the wanted runs of
// that slot (by its cached footer) are merged into ranges, and each range
// is read with one ranged GET when a piece in it is first asked for. A
// range is held until every run in it was taken, or until the budget
// evicts it (least recently used out); one that does not fit the budget
// is not read at all (the caller reads its piece alone). Unlike the
// footer cache (which outlives the cycle) it is one cycle's.
func (r *Reader) WithSlotReads(sr SlotReads) *Reader {
	nr := &Reader{top: r.top, footers: r.footers, counts: r.counts}
	if sr.Budget > 0 && len(sr.Streams) > 0 {
		ids := make([]bundlefmt.StreamID, 0, len(sr.Streams))
		for id, due := range sr.Streams {
			if due {
				ids = append(ids, id)
			}
		}
		slices.SortFunc(ids, func(a, b bundlefmt.StreamID) int { return bytes.Compare(a[:], b[:]) })
		nr.slots = &slotCache{r: nr, sr: sr, ids: ids, slots: map[string]*slotRanges{}, lru: list.New()}
	}
	return nr
}

// SlotReadStats returns the ranged GETs the slot reads made and the bytes
// they read.
func (r *Reader) SlotReadStats() (gets, bytes int64) {
	if r.slots == nil {
		return 0, 0
	}
	r.slots.mu.Lock()
	defer r.slots.mu.Unlock()
	return r.slots.gets, r.slots.bytes
}

// Piece returns the bytes [off, off+n) of the slot src from the reader's
// slot reads, checked against crc (the CRC-32C of exactly those bytes: a
// chunk's DataCRC, or the combine of a run of whole chunks'), and true;
// or false when the slot reads hold no range over them (none configured,
// the slot's footer not cached, a range that did not fit the budget or
// whose read failed): the caller reads them some other way, which reports
// the failure, if any, itself. Bytes that disagree with crc are a
// quarantine naming the slot.
func (r *Reader) Piece(ctx context.Context, src Source, off, n int64, crc uint32) ([]byte, bool, error) {
	if r.slots == nil || n <= 0 {
		return nil, false, nil
	}
	data := r.slots.get(ctx, src, off, n)
	if data == nil {
		return nil, false, nil
	}
	if got := bundlefmt.CRC32C(data); got != crc {
		return nil, false, &cycle.QuarantineError{SlotKey: src.Key, Class: cycle.ClassChecksum,
			Err: fmt.Errorf("bytes [%d, +%d) of %s: CRC-32C %08x, its entries say %08x", off, n, src.Key, got, crc)}
	}
	return data, true, nil
}

// slotCache is the cycle's slot reads. Each slot's wanted runs are merged
// into ranges once; a range's bytes are held in the LRU while some run in
// it is not yet taken.
type slotCache struct {
	r   *Reader
	sr  SlotReads
	ids []bundlefmt.StreamID // sr.Streams', sorted as a footer's rows are

	mu    sync.Mutex
	slots map[string]*slotRanges // by class and key
	lru   *list.List             // of *slotRange with bytes held, most recent at the front
	held  int64                  // bytes held or being read
	gets  int64
	bytes int64
}

type slotRanges struct {
	ranges []*slotRange // by offset
}

type slotRange struct {
	src      Source
	off, end int64
	runs     [][2]int64 // wanted runs [off, end) not yet taken
	data     []byte     // nil: not read, evicted, or dropped
	el       *list.Element
	loading  chan struct{} // closed when a read in flight ends
	failed   bool          // read once and failed, or did not fit: never again this cycle
	admitted bool          // its bytes count in held
}

// get returns the bytes [off, off+n) of src, or nil.
func (c *slotCache) get(ctx context.Context, src Source, off, n int64) []byte {
	c.mu.Lock()
	sl, ok := c.slots[src.Class+"\x00"+src.Key]
	if !ok {
		sl = c.plan(src)
		if sl == nil {
			c.mu.Unlock()
			return nil // no footer cached: nothing known of the slot
		}
		c.slots[src.Class+"\x00"+src.Key] = sl
	}
	i := sort.Search(len(sl.ranges), func(i int) bool { return sl.ranges[i].end > off })
	if i == len(sl.ranges) || sl.ranges[i].off > off || sl.ranges[i].end < off+n {
		c.mu.Unlock()
		return nil
	}
	rg := sl.ranges[i]
	for {
		switch {
		case rg.data != nil:
			data := rg.data[off-rg.off : off-rg.off+n : off-rg.off+n]
			c.lru.MoveToFront(rg.el)
			c.take(rg, off, n)
			c.mu.Unlock()
			return data
		case rg.failed:
			c.mu.Unlock()
			return nil
		case rg.loading != nil:
			wait := rg.loading
			c.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
				return nil
			}
			c.mu.Lock()
			continue
		}
		// Not read yet: read it, within the budget.
		size := rg.end - rg.off
		if !c.admit(size) {
			rg.failed = true
			c.mu.Unlock()
			return nil
		}
		rg.admitted = true
		rg.loading = make(chan struct{})
		c.gets++
		c.mu.Unlock()
		data, _, err := c.r.top.GetRange(ctx, src.Class, src.Key, rg.off, size)
		c.mu.Lock()
		c.bytes += int64(len(data))
		close(rg.loading)
		rg.loading = nil
		if err != nil || int64(len(data)) != size {
			// The piece's own read reports what is wrong.
			rg.failed = true
			c.release(rg)
			c.mu.Unlock()
			return nil
		}
		rg.data = data
		rg.el = c.lru.PushFront(rg)
	}
}

// admit reserves size bytes of the budget, evicting the least recently
// used ranges held; false when size does not fit even then.
func (c *slotCache) admit(size int64) bool {
	if size > c.sr.Budget {
		return false
	}
	for c.held+size > c.sr.Budget && c.lru.Len() > 0 {
		old := c.lru.Back().Value.(*slotRange)
		old.failed = true // its later pieces are read alone: a budget is never a re-read
		c.release(old)
	}
	if c.held+size > c.sr.Budget {
		return false // the rest is being read
	}
	c.held += size
	return true
}

// release drops a range's bytes (a later piece of it is read alone).
func (c *slotCache) release(rg *slotRange) {
	if rg.el != nil {
		c.lru.Remove(rg.el)
		rg.el = nil
	}
	rg.data = nil
	if rg.admitted {
		rg.admitted = false
		c.held -= rg.end - rg.off
	}
}

// take marks the runs of rg that [off, off+n) touches taken, and drops
// the range once every run is.
func (c *slotCache) take(rg *slotRange, off, n int64) {
	kept := rg.runs[:0]
	for _, run := range rg.runs {
		if run[1] <= off || run[0] >= off+n {
			kept = append(kept, run)
		}
	}
	rg.runs = kept
	if len(rg.runs) == 0 {
		rg.failed = true // nothing more is wanted from it
		c.release(rg)
	}
}

// plan merges the wanted runs of a slot whose footer is cached into
// ranges; nil when its footer is not cached.
func (c *slotCache) plan(src Source) *slotRanges {
	f := c.r.footers.peek(src.Class, src.Key)
	if f == nil {
		return nil
	}
	runs := c.wantedRuns(f)
	sl := &slotRanges{}
	for _, g := range mergeRuns(runs, c.sr.Gap) {
		sl.ranges = append(sl.ranges, &slotRange{src: src, off: runs[g[0]][0], end: runs[g[1]-1][1], runs: runs[g[0]:g[1]:g[1]]})
	}
	return sl
}

// wantedRuns returns the wanted runs of the slot whose footer is f, by
// offset. Rows sort by stream: a stream's chunks are one stretch of rows,
// and a run is a stretch of them whose bytes are adjacent. The due streams
// are walked in the same order, each found from where the last one's rows
// ended (a slot holds thousands of streams, a cycle's turn a few of them:
// the rows between are skipped, not read).
func (c *slotCache) wantedRuns(f *bundlefmt.Footer) [][2]int64 {
	var runs [][2]int64
	n := f.NumChunks()
	for i, k := 0, 0; k < len(c.ids) && i < n; k++ {
		id := c.ids[k]
		for i = f.SearchStreamFrom(i, id); i < n && f.StreamAt(i) == id; {
			start := int64(f.DataOffset(i))
			end := start + int64(f.Row(i).ChunkBytes)
			for i++; i < n && f.StreamAt(i) == id && int64(f.DataOffset(i)) == end; i++ {
				end += int64(f.Row(i).ChunkBytes)
			}
			if end-start < c.sr.MaxRun {
				runs = append(runs, [2]int64{start, end})
			}
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i][0] < runs[j][0] })
	return runs
}

// mergeRuns groups runs (sorted by offset, not overlapping) into ranges
// as DefaultSlotReadGap says: it returns each range's runs as [first,
// last+1) of runs, by offset. The gaps are taken smallest first (by offset
// among equal ones); a gap is bridged when it is at most gap and the range
// it makes wastes at most max(its wanted bytes, gap).
func mergeRuns(runs [][2]int64, gap int64) [][2]int {
	n := len(runs)
	if n == 0 {
		return nil
	}
	// A range of runs [i, j] is known at its ends: last[i] = j, first[j] =
	// i, and wanted[i] its wanted bytes.
	first, last, wanted := make([]int, n), make([]int, n), make([]int64, n)
	for i, r := range runs {
		first[i], last[i], wanted[i] = i, i, r[1]-r[0]
	}
	gaps := make([]int, n-1) // gap i is between runs i and i+1
	for i := range gaps {
		gaps[i] = i
	}
	sort.SliceStable(gaps, func(a, b int) bool {
		return runs[gaps[a]+1][0]-runs[gaps[a]][1] < runs[gaps[b]+1][0]-runs[gaps[b]][1]
	})
	for i, g := range gaps {
		if runs[g+1][0]-runs[g][1] > gap {
			gaps = gaps[:i] // the rest are wider
			break
		}
	}
	// A gap refused may fit once the ranges beside it have grown (a range
	// wanting more may waste more): pass over the refused ones again until
	// a pass bridges none.
	for merged := true; merged; {
		merged = false
		refused := gaps[:0]
		for _, i := range gaps {
			lo, hi := first[i], last[i+1]
			want := wanted[lo] + wanted[i+1]
			if waste := runs[hi][1] - runs[lo][0] - want; waste > max(want, gap) {
				refused = append(refused, i)
				continue
			}
			last[lo], first[hi], wanted[lo] = hi, lo, want
			merged = true
		}
		gaps = refused
	}
	var out [][2]int
	for i := 0; i < n; i = last[i] + 1 {
		out = append(out, [2]int{i, last[i] + 1})
	}
	return out
}
