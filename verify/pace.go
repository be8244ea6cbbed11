package verify

import (
	"context"
	"sync"
	"time"
)

// pacer paces reads to at most rate bytes per second overall, across
// every object read at once: a read of n bytes waits until the bytes
// read before it are due at that rate. A nil pacer never waits.
type pacer struct {
	rate  float64 // bytes per second
	mu    sync.Mutex
	start time.Time
	bytes float64 // reserved since start
}

func newPacer(rate int64) *pacer {
	if rate <= 0 {
		return nil
	}
	return &pacer{rate: float64(rate)}
}

// wait reserves n bytes and sleeps until the earlier reservations are due
// (or ctx ends).
func (p *pacer) wait(ctx context.Context, n int64) error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	now := time.Now()
	if p.start.IsZero() {
		p.start = now
	}
	due := p.start.Add(time.Duration(p.bytes / p.rate * float64(time.Second)))
	p.bytes += float64(n)
	p.mu.Unlock()
	if d := due.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}
