package bundle

import (
	"container/list"
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/crc32c"
	"github.com/nova/auditor/internal/cycle"
)

// SlotReads says which bytes of a cycle's slots a reader reads together
// (WithSlotReads): the chunks of Streams (the cycle's due streams) in each
// slot, a stream's run of adjacent chunks only when it is shorter than
// MaxRun (a longer run may be copied server side and is never downloaded),
// merged across gaps of at most Gap bytes (a wasted byte is cheaper than a
// request), held within Budget bytes.
type SlotReads struct {
	Streams map[bundlefmt.StreamID]bool
	MaxRun  int64
	Gap     int64
	Budget  int64
}

// DefaultSlotReadGap is the widest gap between two wanted runs of a slot
// read in one ranged GET: at S3's prices and latencies, 256 KiB read for
// nothing costs less than a second request.
const DefaultSlotReadGap = 256 << 10

// WithSlotReads returns a reader over the same topology and footer cache
// that also serves piece reads of the cycle's slots (Piece) from ranges
// read together: on the first piece read from a slot, the wanted runs of
// that slot (by its cached footer) are merged into ranges, and each range
// is read with one ranged GET when a piece in it is first asked for. A
// range is held until every run in it was taken, or until the budget
// evicts it (least recently used out); one that does not fit the budget
// is not read at all (the caller reads its piece alone). Like the footer
// cache it is one cycle's.
func (r *Reader) WithSlotReads(sr SlotReads) *Reader {
	nr := &Reader{top: r.top, footers: r.footers}
	if sr.Budget > 0 && len(sr.Streams) > 0 {
		nr.slots = &slotCache{r: nr, sr: sr, slots: map[string]*slotRanges{}, lru: list.New()}
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
	if got := crc32c.Checksum(data); got != crc {
		return nil, false, &cycle.QuarantineError{SlotKey: src.Key, Class: cycle.ClassChecksum,
			Err: fmt.Errorf("bytes [%d, +%d) of %s: CRC-32C %08x, its entries say %08x", off, n, src.Key, got, crc)}
	}
	return data, true, nil
}

// slotCache is the cycle's slot reads. Each slot's wanted runs are merged
// into ranges once; a range's bytes are held in the LRU while some run in
// it is not yet taken.
type slotCache struct {
	r  *Reader
	sr SlotReads

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
	f := c.r.footers.peek(src.Key)
	if f == nil {
		return nil
	}
	// Rows sort by stream: a stream's chunks are one stretch of rows, and
	// a run is a stretch of them whose bytes are adjacent.
	var runs [][2]int64
	for i, n := 0, f.NumChunks(); i < n; {
		id := f.Row(i).Stream
		start := int64(f.DataOffset(i))
		end := start + int64(f.Row(i).ChunkBytes)
		for i++; i < n && f.Row(i).Stream == id && int64(f.DataOffset(i)) == end; i++ {
			end += int64(f.Row(i).ChunkBytes)
		}
		if c.sr.Streams[id] && end-start < c.sr.MaxRun {
			runs = append(runs, [2]int64{start, end})
		}
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i][0] < runs[j][0] })
	sl := &slotRanges{}
	for _, run := range runs {
		if n := len(sl.ranges); n > 0 && run[0]-sl.ranges[n-1].end <= c.sr.Gap {
			last := sl.ranges[n-1]
			last.end = max(last.end, run[1])
			last.runs = append(last.runs, run)
			continue
		}
		sl.ranges = append(sl.ranges, &slotRange{src: src, off: run[0], end: run[1], runs: [][2]int64{run}})
	}
	return sl
}
