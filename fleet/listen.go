package fleet

import (
	"context"
	"time"
)

// listen keeps one LISTEN connection for the process and hands each
// notification to the daemon of the star it names (after a reconnection,
// to every daemon: what was sent meanwhile was missed).
func (mb *Member) listen(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		l, err := mb.db.Listen(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
			continue
		}
		wait = time.Second
		mb.wake("")
		for {
			payload, err := l.Wait(ctx)
			if err != nil {
				break
			}
			mb.wake(payload)
		}
		l.Close()
	}
}

// wake wakes the daemon of star ("" every one).
func (mb *Member) wake(star string) {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	for name, s := range mb.seats {
		if (star == "" || star == name) && s.built.Daemon != nil {
			s.built.Daemon.Wake()
		}
	}
}
