package settle

import (
	"context"
	"sync"

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
