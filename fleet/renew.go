package fleet

import (
	"context"
	"fmt"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
)

// renewLoop renews the leases every tick, apart from the round, whose
// calls (hand-offs, heartbeat, read, claims) may each take CallTimeout:
// behind them, a renewal could come later than the leases' local deadline.
// It runs through the drain and stops with the member.
func (mb *Member) renewLoop(ctx context.Context) {
	tick := time.NewTicker(mb.cfg.Tick)
	defer tick.Stop()
	for {
		mb.renew(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// renew renews, in one statement, the leases of the stars whose cycle loop
// makes progress; a star without progress is handed off as stuck at once,
// to its favourite among the other live members, and left alone for the
// cooldown.
func (mb *Member) renew(ctx context.Context) {
	bound := mb.cfg.Interval() + mb.cfg.ProgressBound
	// a star stepping down is renewed while its cycle may still finish
	// (ShutdownTimeout, then the daemon's 10 s before it abandons the
	// cycle), not longer
	leaveBound := mb.cfg.ShutdownTimeout + 15*time.Second
	mb.mu.Lock()
	var fences []catalog.Fence
	var live []*seat
	var stuck []*seat
	for _, s := range mb.seats {
		select {
		case <-s.done:
			continue
		default:
		}
		switch {
		case s.leaving == "stuck", s.leaving != "" && time.Since(s.leavingAt) > leaveBound:
			continue
		case s.leaving == "" && s.progressAge() > bound:
			stuck = append(stuck, s)
			continue
		}
		fences = append(fences, s.lease.Fence)
		live = append(live, s)
	}
	mb.mu.Unlock()
	for _, s := range stuck {
		mb.mu.Lock()
		age := s.progressAge()
		mb.mu.Unlock()
		mb.log.Error("a star's cycle loop made no progress; giving it up", "star", s.star,
			"progress_age", age.Round(time.Second), "bound", bound)
		mb.mu.Lock()
		to := successor(s.star, mb.cfg.Member, eligible(s.star, mb.live))
		mb.cooling[s.star] = time.Now().Add(mb.cfg.Rules.Cooldown)
		mb.mu.Unlock()
		hctx, cancel := mb.call(ctx)
		if err := mb.db.HandOff(hctx, s.lease.Fence, to, "stuck"); err != nil {
			mb.log.Warn("hand-off failed; the lease expires on its own", "star", s.star, "err", err)
		}
		cancel()
		// The term is lost first (its cycle is canceled, not let finish),
		// then the daemon is stepped down.
		offer(s.renew, daemon.Renewal{Err: fmt.Errorf("star %q given up as stuck: %w", s.star, catalog.ErrStaleToken)})
		mb.giveUp(s.star, "stuck", "stuck", to)
	}
	if len(fences) == 0 {
		return
	}
	sent := time.Now()
	rctx, cancel := mb.call(ctx)
	got, err := mb.db.RenewLeases(rctx, mb.cfg.Member, fences, mb.cfg.LeaseTTL)
	cancel()
	for _, s := range live {
		switch _, ok := got[s.star]; {
		case err != nil:
			offer(s.renew, daemon.Renewal{Err: err})
		case ok:
			offer(s.renew, daemon.Renewal{Sent: sent})
		default:
			offer(s.renew, daemon.Renewal{Err: fmt.Errorf("renew star %q token %d: %w", s.star, s.lease.Token, catalog.ErrStaleToken)})
		}
	}
}

// offer hands a renewal to a daemon, replacing one it has not read yet.
func offer(ch chan daemon.Renewal, r daemon.Renewal) {
	for {
		select {
		case ch <- r:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}
