package settle

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
)

// TestHotTokens: a stream takes a hot token once, waits while every token
// is held, and a waiter whose context ends gives up without one.
func TestHotTokens(t *testing.T) {
	tokens := make(chan struct{}, 1)
	first := hot{tokens: tokens}
	if err := first.take(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := first.take(context.Background()); err != nil || len(tokens) != 1 {
		t.Fatalf("took a second token: %v, %d held", err, len(tokens))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	waiter := hot{tokens: tokens}
	if err := waiter.take(ctx); !errors.Is(err, context.DeadlineExceeded) || waiter.held {
		t.Fatalf("took a token that is held: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- waiter.take(context.Background()) }()
	first.release()
	if err := <-done; err != nil || !waiter.held {
		t.Fatalf("after the release: %v, held %v", err, waiter.held)
	}
	waiter.release()
	waiter.release() // once only
	if len(tokens) != 0 {
		t.Fatalf("%d tokens held after both released", len(tokens))
	}
}

// TestStreamQueue: pop hands out what was pushed in order, waits while the
// queue is open and empty, and returns false once it is closed and
// drained; drop forgets what is queued; nothing is queued after close.
func TestStreamQueue(t *testing.T) {
	q := newStreamQueue()
	mk := func(b byte) *stream { return &stream{ds: catalog.DueStream{Stream: catalog.StreamID{b}}} }
	a, b, c := mk(1), mk(2), mk(3)
	q.push(a)
	q.push(b)
	got := make(chan *stream, 4)
	go func() {
		for {
			s, ok := q.pop()
			if !ok {
				close(got)
				return
			}
			got <- s
		}
	}()
	if x, y := <-got, <-got; x != a || y != b {
		t.Fatalf("popped %v, %v", x.ds, y.ds)
	}
	q.push(c)
	if x := <-got; x != c {
		t.Fatalf("popped %v after waiting", x.ds)
	}
	q.close()
	q.push(a)
	if _, ok := <-got; ok {
		t.Fatal("popped after close")
	}
	d := newStreamQueue()
	d.push(a)
	d.push(b)
	d.drop()
	if _, ok := d.pop(); ok {
		t.Fatal("popped after drop")
	}
}
