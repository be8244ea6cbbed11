package settle

import (
	"context"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/nova/auditor/catalog"
)

// aloneQueue hands the streams that settle one by one (settleStream) to
// the cycle's workers as soon as they are known: the streams with pending
// erasures before any batch starts, the others as the batches find them
// (too long a backlog, an intent an earlier attempt left open, a key
// already taken). So they start at once beside the batches, in about the
// order of the due list (forced streams first, then by deadline), rather
// than after every batch of a large star.
type aloneQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []catalog.DueStream
	closed bool
}

func newAloneQueue() *aloneQueue {
	q := &aloneQueue{}
	q.cond.L = &q.mu
	return q
}

// push queues ds, unless the queue is closed (the cycle is stopping).
func (q *aloneQueue) push(ds ...catalog.DueStream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.items = append(q.items, ds...)
	q.cond.Broadcast()
}

// close lets pop return false once the queue is empty: nothing more is
// pushed.
func (q *aloneQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// drop closes the queue and forgets what it holds (the cycle stops).
func (q *aloneQueue) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed, q.items = true, nil
	q.cond.Broadcast()
}

// pop waits for the next stream; false when the queue is closed and empty.
func (q *aloneQueue) pop() (catalog.DueStream, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return catalog.DueStream{}, false
	}
	ds := q.items[0]
	q.items[0] = catalog.DueStream{}
	q.items = q.items[1:]
	return ds, true
}

// dropOnDone drops q when ctx is done, and returns what stops that.
func (q *aloneQueue) dropOnDone(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, q.drop)
}

// slotHold is a worker's hold on one of the batches' work slots while it
// settles a stream alone (nil sem: no slots, batches off). A stream that
// waits for a hot token gives its slot back while it waits (hot.take), so
// the streams queued behind more hot streams than Config.HotStreams do
// not idle the batches' slots.
type slotHold struct {
	sem  *semaphore.Weighted
	held bool
}

func (h *slotHold) acquire(ctx context.Context) error {
	if h == nil || h.sem == nil || h.held {
		return nil
	}
	if err := h.sem.Acquire(ctx, 1); err != nil {
		return err
	}
	h.held = true
	return nil
}

func (h *slotHold) release() {
	if h != nil && h.sem != nil && h.held {
		h.sem.Release(1)
		h.held = false
	}
}
