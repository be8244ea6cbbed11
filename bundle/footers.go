package bundle

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cycle"
)

// FooterCache holds the footers of transit slots across cycles, shared by
// every stream of a cycle and, in a fleet member, by every star it leads:
// a slot's envelope and footer are read once while the slot is wanted and
// the cache holds it, not once per cycle. It is bounded in bytes (least
// recently used out: a budget, not a growth) and fetches each slot once
// even when several callers ask at the same time.
//
// Keeping a footer past its cycle is safe because a slot's bytes never
// change: a slot is written create-once under a key of its star, epoch and
// seq, and a seq is never reused under a fence (docs/format.md#keys), so
// the footer read once is the footer of that key for as long as the key
// exists. Every use still checks the ref's window against the one the
// footer was opened from, and every chunk's bytes against its DataCRC; a
// slot reaped since is found missing when its bytes are read (nothing
// reads a slot that no ref names). A read that failed is not kept.
type FooterCache struct {
	limit int64

	mu       sync.Mutex
	size     int64
	lru      *list.List // of *cached, most recent at the front
	byKey    map[footerKey]*list.Element
	inflight map[footerKey]*fetch
}

// footerKey names a slot: its class and key (an express slot lives under
// the same key in every bucket of its class).
type footerKey struct{ class, key string }

type cached struct {
	id     footerKey
	window [2]int64
	f      *bundlefmt.Footer
	bytes  int64
}

type fetch struct {
	done   chan struct{}
	window [2]int64 // the (off, length) the fetch was asked for
	c      *cached
	err    error
}

// NewFooterCache returns an empty footer cache of at most limit bytes of
// footers (the last one read is kept even when it alone is larger).
func NewFooterCache(limit int64) *FooterCache {
	return &FooterCache{limit: limit, lru: list.New(), byKey: map[footerKey]*list.Element{}, inflight: map[footerKey]*fetch{}}
}

// footerReads counts the footers one reader's callers had fetched (a
// cycle's: FooterReads), whoever else shares the cache.
type footerReads struct {
	gets  atomic.Int64
	bytes atomic.Int64 // envelope and footer bytes read
}

// get returns the slot's footer, opened from the ref's window, reading it
// with r (and counting the read in r's counts) when it is not cached.
func (c *FooterCache) get(ctx context.Context, r *Reader, class, key string, off, length int64) (*bundlefmt.Footer, error) {
	id := footerKey{class, key}
	c.mu.Lock()
	if el, ok := c.byKey[id]; ok {
		ce := el.Value.(*cached)
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return ce.check(key, off, length)
	}
	if fl, ok := c.inflight[id]; ok {
		c.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err != nil && ctx.Err() == nil && isContextErr(fl.err) {
			// The fetch was its caller's, cancelled or out of time (a
			// cycle that ended: the cache outlives it); this caller's
			// context is live, so it fetches for itself.
			return c.get(ctx, r, class, key, off, length)
		}
		if fl.err != nil && fl.window != [2]int64{off, length} {
			// The fetch failed for another ref's window (one broken ref
			// that disagrees with the envelope), which may say nothing of
			// this one's: a stream must not be quarantined for another
			// stream's bad ref, so this caller fetches for itself.
			return c.get(ctx, r, class, key, off, length)
		}
		if fl.err != nil {
			return nil, fl.err
		}
		return fl.c.check(key, off, length)
	}
	fl := &fetch{done: make(chan struct{}), window: [2]int64{off, length}}
	c.inflight[id] = fl
	c.mu.Unlock()

	var read int64
	fl.c, fl.err = r.loadSlot(ctx, class, key, off, length, &read)
	if r.counts != nil {
		r.counts.gets.Add(1)
		r.counts.bytes.Add(read)
	}
	c.mu.Lock()
	delete(c.inflight, id)
	if fl.err == nil {
		fl.c.id = id
		c.byKey[id] = c.lru.PushFront(fl.c)
		c.size += fl.c.bytes
		for c.size > c.limit && c.lru.Len() > 1 {
			old := c.lru.Back()
			ce := old.Value.(*cached)
			c.lru.Remove(old)
			delete(c.byKey, ce.id)
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

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Bytes returns the footer bytes the cache holds.
func (c *FooterCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
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

// peek returns the cached footer of the slot of class at key, reading
// nothing; nil when it is not cached (or c is nil).
func (c *FooterCache) peek(class, key string) *bundlefmt.Footer {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[footerKey{class, key}]; ok {
		return el.Value.(*cached).f
	}
	return nil
}
