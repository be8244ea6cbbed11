package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nova/auditor/catalog"
)

// A fleet member (package fleet, docs/architecture.md#the-fleet) runs one
// Daemon per star it leads, for as long as it leads it: the member takes
// the lease (a claim), renews the leases of all its stars in one
// statement, and gives each up with a reason (a hand-off). The daemon then
// takes, renews and releases nothing itself: it leads the one term it is
// given (LeadTerm). Everything else (the cycle loop, the schedule, admin
// requests, the halt, the gauges and the guard) is the daemon's own, as in
// single-star serve.

// Grant is a lease a fleet member took for the daemon's star, and when its
// claim was sent (the local deadline counts from it: the database stamped
// the expiry after).
type Grant struct {
	Lease catalog.Lease
	Sent  time.Time
}

// Renewal is the outcome of one renewal of a term's lease by its member:
// Sent is when the successful renewal was sent; Err, when set, says the
// lease is lost (it wraps catalog.ErrStaleToken) or that this renewal
// failed and the next may still save it.
type Renewal struct {
	Sent time.Time
	Err  error
}

// Slots bound the cycles a process runs at once over all its stars: a
// cycle waits for one before it starts (Deps.Slots; nil: no bound).
type Slots interface {
	Acquire(ctx context.Context) error
	Release()
}

// LeadTerm leads the daemon's star under g until the lease is lost, the
// member stops renewing it (renewals closed), or ctx ends: the member's
// step-down, after which the running cycle gets ShutdownTimeout to finish,
// as on SIGTERM. The gauges and the guard run for the term. It does not
// release the lease: the member hands it off. One term at a time.
func (d *Daemon) LeadTerm(ctx context.Context, g Grant, renewals <-chan Renewal) {
	d.progress.Store(time.Now().UnixNano())
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	defer func() {
		stop()
		wg.Wait()
	}()
	wg.Go(func() { d.refreshLoop(base) })
	d.startGuard(base, &wg)
	d.r.feed = renewals
	d.lead(ctx, heldLease{Lease: g.Lease, sent: g.Sent})
}

// Wake is a notification for the daemon's star (the member's one LISTEN
// connection hands them out).
func (d *Daemon) Wake() { d.signal() }

// ProgressAge is how long ago the daemon's cycle loop last made progress:
// a turn of its loop, a cycle's start, a step's start or end.
func (d *Daemon) ProgressAge() time.Duration {
	return time.Since(time.Unix(0, d.progress.Load()))
}

// Leading reports whether the daemon leads its star now.
func (d *Daemon) Leading() bool { return d.fence.Load() != nil }

// stepped reports a progress stamp.
func (d *Daemon) stepped() { d.progress.Store(time.Now().UnixNano()) }

// holdFed is hold for a term whose lease the fleet member renews: the
// deadline moves with each successful renewal it reports, and the term
// ends lost when the member says the lease is lost, stops reporting, or
// the deadline passes first.
func (r *runner) holdFed(t *term, deadline time.Time, feed <-chan Renewal) {
	defer close(t.renewed)
	expiry := time.NewTimer(time.Until(deadline))
	defer expiry.Stop()
	lease := t.lease
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-expiry.C:
			t.lose(fmt.Errorf("lease of star %q token %d not renewed in time: %w", lease.Star, lease.Token, catalog.ErrStaleToken))
			return
		case rn, ok := <-feed:
			switch {
			case !ok:
				t.lose(fmt.Errorf("lease of star %q token %d: the fleet member stopped renewing it: %w", lease.Star, lease.Token, catalog.ErrStaleToken))
				return
			case rn.Err != nil && errors.Is(rn.Err, catalog.ErrStaleToken):
				t.lose(rn.Err)
				return
			case rn.Err != nil:
				r.deps.Log.Warn("lease renewal failed; retrying", "star", lease.Star, "token", lease.Token, "err", rn.Err,
					"gives_up_in", time.Until(deadline).Round(time.Millisecond))
			default:
				deadline = rn.Sent.Add(r.cfg.LeaseTTL - r.cfg.LeaseRenew/2)
				expiry.Reset(time.Until(deadline))
			}
		}
	}
}
