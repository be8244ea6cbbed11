package bundle

import (
	"container/list"
	"context"
	"fmt"
	"sync"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cycle"
)

// footerCache holds slot footers for one cycle, shared by every stream: one
// envelope GET and one footer GET per slot per cycle (many streams share a
// slot). It is bounded in bytes (least recently used out: a budget, not a
// growth) and fetches each slot once even when several streams ask at the
// same time.
type footerCache struct {
	r     *Reader
	limit int64

	mu       sync.Mutex
	size     int64
	lru      *list.List // of *cached, most recent at the front
	byKey    map[string]*list.Element
	inflight map[string]*fetch
	gets     int64
	bytes    int64 // envelope and footer bytes read
}

type cached struct {
	key    string
	window [2]int64
	f      *bundlefmt.Footer
	bytes  int64
}

type fetch struct {
	done chan struct{}
	c    *cached
	err  error
}

func newFooterCache(r *Reader, limit int64) *footerCache {
	return &footerCache{r: r, limit: limit, lru: list.New(), byKey: map[string]*list.Element{}, inflight: map[string]*fetch{}}
}

func (c *footerCache) stats() (gets, bytes int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets, c.bytes
}

// get returns the slot's footer, opened from the ref's window.
func (c *footerCache) get(ctx context.Context, class, key string, off, length int64) (*bundlefmt.Footer, error) {
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		ce := el.Value.(*cached)
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return ce.check(key, off, length)
	}
	if fl, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err != nil {
			return nil, fl.err
		}
		return fl.c.check(key, off, length)
	}
	fl := &fetch{done: make(chan struct{})}
	c.inflight[key] = fl
	c.gets++
	c.mu.Unlock()

	var read int64
	fl.c, fl.err = c.r.loadSlot(ctx, class, key, off, length, &read)
	c.mu.Lock()
	c.bytes += read
	delete(c.inflight, key)
	if fl.err == nil {
		c.byKey[key] = c.lru.PushFront(fl.c)
		c.size += fl.c.bytes
		for c.size > c.limit && c.lru.Len() > 1 {
			old := c.lru.Back()
			ce := old.Value.(*cached)
			c.lru.Remove(old)
			delete(c.byKey, ce.key)
			c.size -= ce.bytes
		}
	}
	c.mu.Unlock()
	close(fl.done)
	if fl.err != nil {
		return nil, fl.err
	}
	return fl.c.check(key, off, length)
}

// check returns the cached footer when the ref names the window it was
// opened from: two refs that disagree on a slot's window are corruption.
func (ce *cached) check(key string, off, length int64) (*bundlefmt.Footer, error) {
	if ce.window != [2]int64{off, length} {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt,
			Err: fmt.Errorf("refs disagree on the footer window: (%d, %d) and (%d, %d)", ce.window[0], ce.window[1], off, length)}
	}
	return ce.f, nil
}

// peek returns the cached footer of the slot at key, reading nothing; nil
// when it is not cached (or c is nil).
func (c *footerCache) peek(key string) *bundlefmt.Footer {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[key]; ok {
		return el.Value.(*cached).f
	}
	return nil
}
