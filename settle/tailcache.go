package settle

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// tailEntryOverhead is what the tail cache charges its memory budget for
// an entry besides its bytes and key: the map slot, the list elements (of
// the LRU and of its spill segment) and the entry itself (about 200 bytes
// on 64-bit), rounded up. A spilled
// entry is charged it too (its bytes are on disk, its bookkeeping is
// not), so that many small spilled tails cannot grow the heap past the
// budget either.
const tailEntryOverhead = 256

// tailSpillSuffix names the cache's files in its directory: only those are
// ever removed from it.
const tailSpillSuffix = ".tail"

// tailSegments is how many segments the spill's disk budget is cut into
// (a segment is budget/tailSegments bytes, at least tailSegmentMin and at
// most the budget): the oldest segment, evicted whole, is a small part of
// the disk, and a star holds about tailSegments spill files open (at most
// twice that: two neighbouring segments hold more than one segment's
// bytes), whatever the budget.
const tailSegments = 32

// tailSegmentMin is the least size of a spill segment.
const tailSegmentMin = 64 << 10

// TailCache holds the bytes of the settled objects below the copy floor
// that this process published, so the next settle of the stream rewrites
// its standing tail from here instead of the store. It is the Settler's,
// across cycles, bounded in bytes (least recently used out), and with a
// spill directory keeps what memory evicts in a log of segment files on
// disk (docs/architecture.md#settled-tail-cache, "Spill"). Settled keys
// are create-once, so cached bytes stay the object's; the reader checks
// them anyway, as it does spilled bytes, and drops any that disagree.
type TailCache struct {
	limit int64 // memory: bytes held in memory, plus every entry's key and overhead

	// spill: the directory of this cache's files ("" none), its budget
	// and a segment's size, set once; and the segments' sequence numbers.
	dir       string
	diskLimit int64
	segBytes  int64
	seq       uint64

	mu       sync.Mutex
	closed   bool       // close was called: nothing is spilled any more
	size     int64      // charged to limit
	diskSize int64      // charged to diskLimit: the segments' bytes, dropped entries' included
	lru      *list.List // of *tailEntry in memory, most recent at the front
	disk     *list.List // of *tailEntry spilled, most recent at the front
	byKey    map[string]*list.Element
	segs     *list.List   // of *tailSegment, oldest at the front
	cur      *tailSegment // the segment written at its end (nil: none yet)
}

type tailEntry struct {
	key string
	obj []byte // in memory; nil once spilled
	// Spilled: its segment and place there, and whether its bytes are
	// written (a get before then is a miss).
	seg     *tailSegment
	segElem *list.Element // in seg.live
	off, n  int64
	ready   bool
}

// tailSegment is one file of the spill log.
type tailSegment struct {
	path string
	f    *os.File
	size int64      // bytes placed in it
	live *list.List // of *tailEntry placed in it and not dropped
	elem *list.Element
}

func (e *tailEntry) cost() int64 {
	c := int64(len(e.key)) + tailEntryOverhead
	if e.seg == nil {
		c += int64(len(e.obj))
	}
	return c
}

// newTailCache returns a cache of limit bytes of memory; nil (which caches
// nothing) when limit is 0. With dir set and diskLimit above 0, what the
// memory evicts spills to files in dir, up to diskLimit bytes; the cache's
// files a previous process left there are removed first (they are not
// indexed: a restart starts cold).
func newTailCache(limit int64, dir string, diskLimit int64) (*TailCache, error) {
	return NewTailCache(limit, dir, diskLimit)
}

// NewTailCache is the tail cache of limit bytes of memory, spilling to dir
// up to diskLimit bytes (newTailCache), for Deps.Tails: one cache, one
// budget, shared by every Settler of a process (a fleet member's stars).
// Its keys are settled object keys, which name their stream; an entry is
// only ever a candidate, checked against the catalog before use. Close it
// after every Settler using it is done.
func NewTailCache(limit int64, dir string, diskLimit int64) (*TailCache, error) {
	if limit <= 0 {
		return nil, nil
	}
	c := &TailCache{limit: limit, lru: list.New(), disk: list.New(), segs: list.New(), byKey: map[string]*list.Element{}}
	if dir == "" || diskLimit <= 0 {
		return c, nil
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("tail cache: %w", err)
	}
	stale, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("tail cache: %w", err)
	}
	for _, de := range stale {
		if de.Type().IsRegular() && strings.HasSuffix(de.Name(), tailSpillSuffix) {
			if err := os.Remove(filepath.Join(dir, de.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("tail cache: %w", err)
			}
		}
	}
	c.dir, c.diskLimit = dir, diskLimit
	c.segBytes = min(max(diskLimit/tailSegments, tailSegmentMin), diskLimit)
	return c, nil
}

// get returns the cached bytes of the object at key, or nil: from memory,
// or read back from its segment.
func (c *TailCache) get(key string) []byte {
	obj, _ := c.lookup(key)
	return obj
}

// lookup is get, and whether the bytes came from a spill segment.
func (c *TailCache) lookup(key string) (obj []byte, spilled bool) {
	if c == nil {
		return nil, false
	}
	c.mu.Lock()
	el, ok := c.byKey[key]
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	e := el.Value.(*tailEntry)
	if e.seg == nil {
		c.lru.MoveToFront(el)
		obj := e.obj
		c.mu.Unlock()
		return obj, false
	}
	if !e.ready {
		c.mu.Unlock()
		return nil, false
	}
	c.disk.MoveToFront(el)
	f, off, n := e.seg.f, e.off, e.n
	c.mu.Unlock()
	obj = make([]byte, n)
	if _, err := f.ReadAt(obj, off); err != nil {
		// The segment was removed meanwhile (its file closed), or it is
		// not what was written (short): a miss, and the entry goes.
		c.dropEntry(key, e)
		return nil, false
	}
	return obj, true
}

// put keeps obj, the bytes this process stored at key, when it fits.
// Entries the memory budget evicts are spilled (placed at the log's end
// here, written outside the lock: until then their bytes are held beyond
// the budget) or forgotten.
func (c *TailCache) put(key string, obj []byte) {
	if c == nil {
		return
	}
	e := &tailEntry{key: key, obj: obj, n: int64(len(obj))}
	if e.cost() > c.limit && (c.dir == "" || e.n > c.diskLimit || int64(len(key))+tailEntryOverhead > c.limit) {
		return // fits neither budget (one larger than the memory goes straight to disk, below)
	}
	c.mu.Lock()
	retire := c.dropLocked(key, nil)
	c.byKey[key] = c.lru.PushFront(e)
	c.size += e.cost()
	var spill []*tailEntry
	var data [][]byte
	for c.size > c.limit {
		if back := c.lru.Back(); back != nil {
			v := back.Value.(*tailEntry)
			if c.dir == "" || c.closed || v.n > c.diskLimit {
				retire = append(retire, c.dropLocked(v.key, nil)...)
				continue
			}
			// To disk: off the memory list, onto the disk list, placed
			// at the log's end (its bytes taken while they are still
			// its: a drop before the write below forgets them).
			c.lru.Remove(back)
			c.size -= v.cost()
			r, ok := c.placeLocked(v)
			retire = append(retire, r...)
			if !ok {
				delete(c.byKey, v.key)
				continue
			}
			c.byKey[v.key] = c.disk.PushFront(v)
			c.size += v.cost()
			spill, data = append(spill, v), append(data, v.obj)
			v.obj = nil
			continue
		}
		// Only spilled entries' bookkeeping is left over the budget.
		retire = append(retire, c.dropLocked(c.disk.Back().Value.(*tailEntry).key, nil)...)
	}
	c.mu.Unlock()
	closeSegments(retire)
	for i, v := range spill {
		_, err := v.seg.f.WriteAt(data[i], v.off)
		c.mu.Lock()
		el, ok := c.byKey[v.key]
		live := ok && el.Value.(*tailEntry) == v
		if live && err == nil {
			v.ready = true
		}
		c.mu.Unlock()
		if live && err != nil {
			c.dropEntry(v.key, v)
		}
	}
}

// placeLocked gives v (n bytes, off the memory list) its place at the
// end of the log: the oldest segments go whole while the disk budget has
// no room, and a new segment is begun when the current one is full. It
// returns the segments to close and remove, and false when no segment
// could be opened (v is forgotten).
func (c *TailCache) placeLocked(v *tailEntry) (retire []*tailSegment, ok bool) {
	for c.diskSize+v.n > c.diskLimit && c.segs.Len() > 0 {
		retire = append(retire, c.evictLocked(c.segs.Front().Value.(*tailSegment))...)
	}
	if c.cur == nil || c.cur.size+v.n > c.segBytes {
		c.seq++
		path := filepath.Join(c.dir, fmt.Sprintf("%016x%s", c.seq, tailSpillSuffix))
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o640)
		if err != nil {
			return retire, false
		}
		// The current segment, full, stays in the log (an emptied one
		// was retired by its last drop, dropLocked).
		c.cur = &tailSegment{path: path, f: f, live: list.New()}
		c.cur.elem = c.segs.PushBack(c.cur)
	}
	v.seg, v.off = c.cur, c.cur.size
	v.segElem = c.cur.live.PushBack(v)
	c.cur.size += v.n
	c.diskSize += v.n
	return retire, true
}

// evictLocked forgets every entry still in seg and retires it.
func (c *TailCache) evictLocked(seg *tailSegment) []*tailSegment {
	for el := seg.live.Front(); el != nil; {
		next := el.Next()
		v := el.Value.(*tailEntry)
		c.size -= v.cost()
		c.disk.Remove(c.byKey[v.key])
		delete(c.byKey, v.key)
		el = next
	}
	seg.live.Init()
	return []*tailSegment{c.retireLocked(seg)}
}

// retireLocked takes seg out of the log (its file is closed and removed
// by the caller, outside the lock).
func (c *TailCache) retireLocked(seg *tailSegment) *tailSegment {
	c.segs.Remove(seg.elem)
	c.diskSize -= seg.size
	if c.cur == seg {
		c.cur = nil
	}
	return seg
}

// closeSegments closes and removes retired segments' files: a file left
// behind (a failed remove) is removed at the next start.
func closeSegments(segs []*tailSegment) {
	for _, s := range segs {
		_ = s.f.Close()
		_ = os.Remove(s.path)
	}
}

// drop forgets key (a revision about to be reaped, or bytes found wrong).
func (c *TailCache) drop(key string) {
	if c == nil {
		return
	}
	c.dropEntry(key, nil)
}

// dropEntry forgets key when it is e (any entry when e is nil), and
// removes its segment when it was the segment's last.
func (c *TailCache) dropEntry(key string, e *tailEntry) {
	c.mu.Lock()
	retire := c.dropLocked(key, e)
	c.mu.Unlock()
	closeSegments(retire)
}

// dropLocked forgets key (when it is e, or any entry when e is nil) and
// returns its segment to retire when it was the segment's last entry.
func (c *TailCache) dropLocked(key string, e *tailEntry) []*tailSegment {
	el, ok := c.byKey[key]
	if !ok {
		return nil
	}
	v := el.Value.(*tailEntry)
	if e != nil && v != e {
		return nil
	}
	c.size -= v.cost()
	delete(c.byKey, key)
	if v.seg == nil {
		c.lru.Remove(el)
		return nil
	}
	c.disk.Remove(el)
	seg := v.seg
	seg.live.Remove(v.segElem)
	if seg.live.Len() == 0 {
		// Its last entry (the current segment's too: the next spill
		// begins another).
		return []*tailSegment{c.retireLocked(seg)}
	}
	return nil
}

// Close forgets every entry and closes and removes the spill segments
// (the Settler is done: a star released or the process stopping). A cycle
// still running (one given up on) may use the cache after it: a put holds
// bytes in memory only, and a spill write or read that was under way
// fails and is forgotten.
// Close closes the cache's spill (NewTailCache's owner calls it).
func (c *TailCache) Close() { c.close() }

func (c *TailCache) close() {
	if c == nil {
		return
	}
	c.mu.Lock()
	var retire []*tailSegment
	for el := c.segs.Front(); el != nil; el = el.Next() {
		retire = append(retire, el.Value.(*tailSegment))
	}
	c.closed, c.cur = true, nil
	c.size, c.diskSize = 0, 0
	c.lru.Init()
	c.disk.Init()
	c.segs.Init()
	clear(c.byKey)
	c.mu.Unlock()
	closeSegments(retire)
}

// stats returns the entries and bytes held in memory and spilled.
func (c *TailCache) stats() (memEntries, diskEntries int, memBytes, diskBytes int64) {
	if c == nil {
		return 0, 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.disk.Len(), c.size, c.diskSize
}

// standingTail is the stream's last object when new chunks may extend it
// (loadTail), with the records of pending erasures re-encoded as
// tombstones (scrubTail); nil when there is none.
func (s *Settler) standingTail(ctx context.Context, st catalog.Stream, last *catalog.Entry, dead *deadReader) (*Tail, error) {
	tail, err := s.loadTail(ctx, st, last)
	if err != nil || tail == nil || dead == nil { // dead: the stream's pending erasures
		return tail, err
	}
	tailDead, err := dead.over(ctx, tail.FirstRecord, tail.end())
	if err != nil {
		return nil, err
	}
	return s.scrubTail(ctx, tail, tailDead)
}

// loadTail reads the footer of the stream's last catalog entry (from the
// stream's snapshot; nil: none) when that entry ends at settled_through (so
// new chunks may extend it).
func (s *Settler) loadTail(ctx context.Context, st catalog.Stream, last *catalog.Entry) (*Tail, error) {
	if last == nil {
		return nil, nil
	}
	if last.EndRecord() > st.SettledThrough {
		// The catalog covers records the stream says are unsettled: entries
		// overlap what settle would publish next. Never guess: halt.
		return nil, cycle.Haltf("stream %s: catalog entry [%d, %d) ends past settled_through %d",
			st.ID, last.FirstRecord, last.EndRecord(), st.SettledThrough)
	}
	if last.EndRecord() != st.SettledThrough {
		return nil, nil // retention left a gap: the next object starts a new run
	}
	return s.readEntry(ctx, st, *last)
}

// readEntry reads the footer of a cataloged object: its chunks, as a Tail
// a rewrite may copy from.
func (s *Settler) readEntry(ctx context.Context, st catalog.Stream, last catalog.Entry) (*Tail, error) {
	key := bundle.EntryKey(st.Bucket, last)
	if t, err := s.readSmallEntry(ctx, key, last); t != nil || err != nil {
		return t, err
	}
	f, err := s.read.EntryFooter(ctx, key, last.FooterOffset, last.FooterLength)
	if err != nil {
		return nil, err
	}
	entries, err := f.Entries()
	if err != nil {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: bundle.ClassOf(err), Err: err}
	}
	return &Tail{Key: key, FirstRecord: uint64(last.FirstRecord), Revision: uint32(last.Revision), Entries: entries}, nil
}
