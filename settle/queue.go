package settle

import (
	"context"
	"sync"
)

// streamQueue hands the batches of one to the cycle's workers as soon as
// they are known: the streams with pending erasures before any batch
// starts, the others as their batches find their backlogs long. So they
// start at once beside the batches, in about the order of the due list
// (forced streams first, then by deadline), rather than after every batch
// of a large star.
type streamQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []*stream
	closed bool
}

func newStreamQueue() *streamQueue {
	q := &streamQueue{}
	q.cond.L = &q.mu
	return q
}

// push queues b, unless the queue is closed (the cycle is stopping).
func (q *streamQueue) push(b *stream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.items = append(q.items, b)
	q.cond.Broadcast()
}

// close lets pop return false once the queue is empty: nothing more is
// pushed.
func (q *streamQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// drop closes the queue and forgets what it holds (the cycle stops).
func (q *streamQueue) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed, q.items = true, nil
	q.cond.Broadcast()
}

// pop waits for the next stream; false when the queue is closed and empty.
func (q *streamQueue) pop() (*stream, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return nil, false
	}
	b := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return b, true
}

// dropOnDone drops q when ctx is done, and returns what stops that.
func (q *streamQueue) dropOnDone(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, q.drop)
}
