package settle

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/nova/auditor/catalog"
)

// TestHotWaitGivesBackTheSlot: a stream that waits for a hot token gives
// its work slot back while it waits (the batches' streams take it), and
// holds one again once it has the token.
func TestHotWaitGivesBackTheSlot(t *testing.T) {
	s := &Settler{hot: make(chan struct{}, 1)}
	work := semaphore.NewWeighted(1)
	first := s.hotToken(nil)
	if err := first.take(context.Background()); err != nil { // the only token
		t.Fatal(err)
	}
	slot := &slotHold{sem: work}
	if err := slot.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	waiter := s.hotToken(slot)
	done := make(chan error, 1)
	go func() { done <- waiter.take(context.Background()) }()
	// The waiter's slot is free for another while it waits.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := work.Acquire(ctx, 1); err != nil {
		t.Fatalf("the waiting stream kept its slot: %v", err)
	}
	select {
	case err := <-done:
		t.Fatalf("took a token that is held: %v", err)
	default:
	}
	first.release()
	work.Release(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !waiter.held || !slot.held || work.TryAcquire(1) {
		t.Fatalf("after the wait: token %v, slot %v, the semaphore not full", waiter.held, slot.held)
	}
	waiter.release()
	slot.release()
	if !work.TryAcquire(1) {
		t.Fatal("the slot was not given back")
	}
}

// TestAloneQueue: pop hands out what was pushed in order, waits while the
// queue is open and empty, and returns false once it is closed and
// drained; drop forgets what is queued; nothing is queued after close.
func TestAloneQueue(t *testing.T) {
	q := newAloneQueue()
	a, b, c := catalog.DueStream{Stream: catalog.StreamID{1}}, catalog.DueStream{Stream: catalog.StreamID{2}}, catalog.DueStream{Stream: catalog.StreamID{3}}
	q.push(a, b)
	got := make(chan catalog.DueStream, 4)
	go func() {
		for {
			ds, ok := q.pop()
			if !ok {
				close(got)
				return
			}
			got <- ds
		}
	}()
	if x, y := <-got, <-got; x != a || y != b {
		t.Fatalf("popped %v, %v", x, y)
	}
	q.push(c)
	if x := <-got; x != c {
		t.Fatalf("popped %v after waiting", x)
	}
	q.close()
	q.push(a)
	if _, ok := <-got; ok {
		t.Fatal("popped after close")
	}
	d := newAloneQueue()
	d.push(a, b)
	d.drop()
	if _, ok := d.pop(); ok {
		t.Fatal("popped after drop")
	}
}
