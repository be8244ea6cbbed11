package settle

import (
	"container/list"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// tailEntryOverhead is what the tail cache charges its memory budget for
// an entry besides its bytes and key: the map slot, the list element and
// the entry itself (about 150 bytes on 64-bit), rounded up. A spilled
// entry is charged it too (its bytes are on disk, its bookkeeping is
// not), so that many small spilled tails cannot grow the heap past the
// budget either.
const tailEntryOverhead = 256

// tailSpillBlock is what a spilled entry is charged on disk at least, and
// what its size is rounded up to: a file takes whole blocks.
const tailSpillBlock = 4096

// tailSpillSuffix names the cache's files in its directory: only those are
// ever removed from it.
const tailSpillSuffix = ".tail"

// tailCache holds the bytes of the settled objects below the copy floor
// that this process published (docs/architecture.md#settled-tail-cache):
// the next settle of the stream rewrites its standing tail, and reads it
// from here instead of the store. It is the Settler's, across cycles, and
// bounded in bytes (least recently used out). Settled keys are create-once
// and revisioned, so the bytes a successful PUT of this process wrote are
// the stored object's for as long as the key exists; the reader checks
// them against the catalog entry anyway, and every chunk's CRC before its
// bytes are uploaded again.
//
// With a spill directory, an entry the memory budget evicts is written to
// a file of its own there instead of being forgotten, within a disk
// budget (least recently used out again): a star of many trickle streams
// keeps far more standing tails than memory holds, and each is read again
// only when its stream next settles, long after. A file is only ever read
// back as a candidate: the same checks apply, and bytes that disagree are
// dropped and read from the store.
type tailCache struct {
	limit int64 // memory: bytes held in memory, plus every entry's key and overhead

	// spill: the directory of this cache's files ("" none), its budget,
	// and the files' sequence numbers.
	dir       string
	diskLimit int64
	seq       uint64

	mu       sync.Mutex
	size     int64      // charged to limit
	diskSize int64      // charged to diskLimit
	lru      *list.List // of *tailEntry in memory, most recent at the front
	disk     *list.List // of *tailEntry spilled, most recent at the front
	byKey    map[string]*list.Element
}

type tailEntry struct {
	key string
	obj []byte // in memory; nil once spilled
	// Spilled: its file, its length, and whether the file is written (a
	// get before then is a miss).
	file  string
	n     int64
	ready bool
}

func (e *tailEntry) cost() int64 {
	c := int64(len(e.key)) + tailEntryOverhead
	if e.file == "" {
		c += int64(len(e.obj))
	}
	return c
}

func (e *tailEntry) diskCost() int64 {
	return (e.n + tailSpillBlock - 1) / tailSpillBlock * tailSpillBlock
}

// newTailCache returns a cache of limit bytes of memory; nil (which caches
// nothing) when limit is 0. With dir set and diskLimit above 0, what the
// memory evicts spills to files in dir, up to diskLimit bytes; the cache's
// files a previous process left there are removed first (they are not
// indexed: a restart starts cold).
func newTailCache(limit int64, dir string, diskLimit int64) (*tailCache, error) {
	if limit <= 0 {
		return nil, nil
	}
	c := &tailCache{limit: limit, lru: list.New(), disk: list.New(), byKey: map[string]*list.Element{}}
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
	return c, nil
}

// get returns the cached bytes of the object at key, or nil: from memory,
// or read back from its spilled file.
func (c *tailCache) get(key string) []byte {
	obj, _ := c.lookup(key)
	return obj
}

// lookup is get, and whether the bytes came from a spilled file.
func (c *tailCache) lookup(key string) (obj []byte, spilled bool) {
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
	if e.file == "" {
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
	file, n := e.file, e.n
	c.mu.Unlock()
	obj, err := os.ReadFile(file)
	if err != nil || int64(len(obj)) != n {
		// Dropped and removed meanwhile, or the file is not what was
		// written: a miss, and the entry goes.
		c.dropEntry(key, e)
		return nil, false
	}
	return obj, true
}

// put keeps obj, the bytes this process stored at key, when it fits.
// Entries the memory budget evicts are spilled (written here, outside the
// lock: until then their bytes are held beyond the budget) or forgotten.
func (c *tailCache) put(key string, obj []byte) {
	if c == nil {
		return
	}
	e := &tailEntry{key: key, obj: obj, n: int64(len(obj))}
	if e.cost() > c.limit && (c.dir == "" || e.diskCost() > c.diskLimit || int64(len(key))+tailEntryOverhead > c.limit) {
		return // fits neither budget (one larger than the memory goes straight to disk, below)
	}
	c.mu.Lock()
	remove := c.dropLocked(key, nil)
	c.byKey[key] = c.lru.PushFront(e)
	c.size += e.cost()
	var spill []*tailEntry
	for c.size > c.limit {
		if back := c.lru.Back(); back != nil {
			v := back.Value.(*tailEntry)
			if c.dir == "" || v.diskCost() > c.diskLimit {
				remove = append(remove, c.dropLocked(v.key, nil)...)
				continue
			}
			// To disk: off the memory list, onto the disk list.
			c.lru.Remove(back)
			c.size -= v.cost()
			c.seq++
			v.file = filepath.Join(c.dir, fmt.Sprintf("%016x%s", c.seq, tailSpillSuffix))
			c.byKey[v.key] = c.disk.PushFront(v)
			c.size += v.cost()
			c.diskSize += v.diskCost()
			spill = append(spill, v)
			for c.diskSize > c.diskLimit {
				remove = append(remove, c.dropLocked(c.disk.Back().Value.(*tailEntry).key, nil)...)
			}
			continue
		}
		// Only spilled entries' bookkeeping is left over the budget.
		remove = append(remove, c.dropLocked(c.disk.Back().Value.(*tailEntry).key, nil)...)
	}
	// The bytes of the entries to spill, taken while they are still
	// theirs (a drop before the write below forgets them).
	data := make([][]byte, len(spill))
	for i, v := range spill {
		data[i], v.obj = v.obj, nil
	}
	c.mu.Unlock()
	for _, f := range remove {
		_ = os.Remove(f) // a cache file: one left behind is removed at the next start
	}
	for i, v := range spill {
		err := os.WriteFile(v.file, data[i], 0o640)
		c.mu.Lock()
		el, ok := c.byKey[v.key]
		live := ok && el.Value.(*tailEntry) == v
		if live && err == nil {
			v.ready = true
		}
		c.mu.Unlock()
		if !live || err != nil {
			c.dropEntry(v.key, v)
			_ = os.Remove(v.file)
		}
	}
}

// drop forgets key (a revision about to be reaped, or bytes found wrong).
func (c *tailCache) drop(key string) {
	if c == nil {
		return
	}
	c.dropEntry(key, nil)
}

// dropEntry forgets key when it is e (any entry when e is nil), and
// removes its file.
func (c *tailCache) dropEntry(key string, e *tailEntry) {
	c.mu.Lock()
	remove := c.dropLocked(key, e)
	c.mu.Unlock()
	for _, f := range remove {
		_ = os.Remove(f)
	}
}

// dropLocked forgets key (when it is e, or any entry when e is nil) and
// returns the file to remove, if it was spilled.
func (c *tailCache) dropLocked(key string, e *tailEntry) []string {
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
	if v.file == "" {
		c.lru.Remove(el)
		return nil
	}
	c.disk.Remove(el)
	c.diskSize -= v.diskCost()
	return []string{v.file}
}

// stats returns the entries and bytes held in memory and spilled.
func (c *tailCache) stats() (memEntries, diskEntries int, memBytes, diskBytes int64) {
	if c == nil {
		return 0, 0, 0, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len(), c.disk.Len(), c.size, c.diskSize
}
