package settle

import (
	"container/list"
	"sync"
)

// tailEntryOverhead is what the tail cache charges for an entry besides
// its bytes and key: the map slot, the list element and the entry itself
// (about 150 bytes on 64-bit), rounded up.
const tailEntryOverhead = 256

// tailCache holds the bytes of the settled objects below the copy floor
// that this process published (docs/architecture.md#settled-tail-cache):
// the next settle of the stream rewrites its standing tail, and reads it
// from here instead of the store. It is the Settler's, across cycles, and
// bounded in bytes (least recently used out). Settled keys are create-once
// and revisioned, so the bytes a successful PUT of this process wrote are
// the stored object's for as long as the key exists; the reader checks
// them against the catalog entry anyway, and every chunk's CRC before its
// bytes are uploaded again.
type tailCache struct {
	limit int64

	mu    sync.Mutex
	size  int64
	lru   *list.List // of *tailEntry, most recent at the front
	byKey map[string]*list.Element
}

type tailEntry struct {
	key string
	obj []byte
}

func (e *tailEntry) cost() int64 { return int64(len(e.obj)+len(e.key)) + tailEntryOverhead }

// newTailCache returns a cache of limit bytes; nil (which caches nothing)
// when limit is 0.
func newTailCache(limit int64) *tailCache {
	if limit <= 0 {
		return nil
	}
	return &tailCache{limit: limit, lru: list.New(), byKey: map[string]*list.Element{}}
}

// get returns the cached bytes of the object at key, or nil.
func (c *tailCache) get(key string) []byte {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byKey[key]
	if !ok {
		return nil
	}
	c.lru.MoveToFront(el)
	return el.Value.(*tailEntry).obj
}

// put keeps obj, the bytes this process stored at key, when it fits.
func (c *tailCache) put(key string, obj []byte) {
	if c == nil {
		return
	}
	e := &tailEntry{key: key, obj: obj}
	if e.cost() > c.limit {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(key)
	c.byKey[key] = c.lru.PushFront(e)
	c.size += e.cost()
	for c.size > c.limit {
		c.dropLocked(c.lru.Back().Value.(*tailEntry).key)
	}
}

// drop forgets key (a revision about to be reaped, or bytes found wrong).
func (c *tailCache) drop(key string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(key)
}

func (c *tailCache) dropLocked(key string) {
	if el, ok := c.byKey[key]; ok {
		c.size -= el.Value.(*tailEntry).cost()
		c.lru.Remove(el)
		delete(c.byKey, key)
	}
}
