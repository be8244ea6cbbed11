package settle

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestForEach: every index runs once, on at most workers goroutines at a
// time; after a failure no index is taken, the others' context is
// cancelled, and the first error is returned.
func TestForEach(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ n, workers int }{{0, 4}, {1, 4}, {5, 1}, {100, 4}, {3, 16}} {
		var mu sync.Mutex
		seen := map[int]int{}
		var inFlight, most atomic.Int64
		err := forEach(ctx, tc.n, tc.workers, func(ctx context.Context, i int) error {
			if v := inFlight.Add(1); v > most.Load() {
				most.Store(v)
			}
			time.Sleep(time.Millisecond)
			inFlight.Add(-1)
			mu.Lock()
			seen[i]++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatalf("n %d: %v", tc.n, err)
		}
		if len(seen) != tc.n {
			t.Fatalf("n %d: %d indices ran", tc.n, len(seen))
		}
		for i, c := range seen {
			if c != 1 || i < 0 || i >= tc.n {
				t.Fatalf("n %d: index %d ran %d times", tc.n, i, c)
			}
		}
		if most.Load() > int64(max(1, tc.workers)) {
			t.Fatalf("n %d, %d workers: %d at once", tc.n, tc.workers, most.Load())
		}
	}

	// Index 0 is under way (it waits for its context) when index 1 fails.
	boom := errors.New("boom")
	var ran atomic.Int64
	var cancelled atomic.Bool
	started := make(chan struct{})
	err := forEach(ctx, 1000, 4, func(ctx context.Context, i int) error {
		ran.Add(1)
		switch i {
		case 0:
			close(started)
		case 1:
			<-started
			return boom
		}
		// Every other call waits for its context: none ends before the
		// failure, so no worker takes another index before it.
		select {
		case <-ctx.Done():
			if i == 0 {
				cancelled.Store(true)
			}
		case <-time.After(5 * time.Second):
		}
		return nil
	})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want the failing call's", err)
	}
	if n := ran.Load(); n > 4 {
		t.Fatalf("%d indices ran on 4 workers whose calls all ended at a failure", n)
	}
	if !cancelled.Load() {
		t.Fatal("the call under way was not cancelled")
	}

	// Sequential (one worker): stops at the failure.
	ran.Store(0)
	if err := forEach(ctx, 10, 1, func(ctx context.Context, i int) error {
		ran.Add(1)
		if i == 2 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) || ran.Load() != 3 {
		t.Fatalf("one worker: %v after %d calls", err, ran.Load())
	}
}
