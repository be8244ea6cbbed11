package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
)

// CrashAfterLeaseRenew is the daemon's crash point
// (docs/architecture.md#crash-points-and-the-crash-matrix): after a lease renewal.
const CrashAfterLeaseRenew crashpoint.Point = "lease.after-renew"

// CrashPoints lists the daemon's crash points.
func CrashPoints() []crashpoint.Point { return []crashpoint.Point{CrashAfterLeaseRenew} }

// heldLease is a lease just acquired and when its acquisition was sent.
type heldLease struct {
	catalog.Lease
	sent time.Time
}

// acquire makes one attempt at the star's lease, within LeaseCallTimeout.
// sent is taken before the statement goes out: the database stamped the
// expiry after it, so a local deadline counted from sent is never later.
func (r *runner) acquire(ctx context.Context) (catalog.Lease, time.Time, error) {
	sent := time.Now()
	actx, cancel := context.WithTimeout(ctx, r.cfg.LeaseCallTimeout)
	defer cancel()
	l, err := r.deps.Leases.AcquireLeaseInstance(actx, r.cfg.Star, r.cfg.Holder, r.instance, r.cfg.LeaseTTL)
	return l, sent, err
}

// term is one holding of the lease: ctx ends (with a cause wrapping
// catalog.ErrStaleToken) when the lease is lost, or when stop is called.
type term struct {
	lease    catalog.Lease
	ctx      context.Context
	cancel   context.CancelCauseFunc
	renewed  chan struct{} // closed when the renewer exits
	deadline time.Time     // the first local deadline (sent + ttl - renew/2)
	losses   prometheus.Counter
	log      *slog.Logger
	counted  atomic.Bool // the loss has been counted
}

// lose ends the term because the lease is lost (err wraps
// catalog.ErrStaleToken), counting and logging the loss once whichever
// path found it: a renewal, a fenced transaction of the leader, or a cycle.
func (t *term) lose(err error) {
	if !errors.Is(err, catalog.ErrStaleToken) {
		err = fmt.Errorf("%w: %w", catalog.ErrStaleToken, err)
	}
	if t.ctx.Err() == nil && t.counted.CompareAndSwap(false, true) {
		t.losses.Inc()
		t.log.Error("lease lost", "star", t.lease.Star, "token", t.lease.Token, "err", err)
	}
	t.cancel(err)
}

// errTermEnded ends a term that is given up on purpose (shutdown, release).
var errTermEnded = errors.New("lease term ended")

// hold starts renewing lease every LeaseRenew with the database clock. The
// lease counts as lost when a renewal says the token is stale, or when no
// renewal has succeeded within the ttl measured from the start of the
// acquisition or of the last successful renewal on this host's monotonic
// clock (never later than the database's own expiry, since the database
// stamped it after that start). Each renewal attempt gets LeaseCallTimeout
// at most, so one stuck on a dead connection leaves time for the next.
func (r *runner) hold(parent context.Context, lease heldLease) *term {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	deadline := lease.sent.Add(r.cfg.LeaseTTL - r.cfg.LeaseRenew/2)
	m, log := r.deps.Metrics, r.deps.Log
	t := &term{lease: lease.Lease, ctx: ctx, cancel: cancel, renewed: make(chan struct{}), deadline: deadline,
		losses: m.LeaseLosses, log: log}
	m.Leader.Set(1)
	m.LeaseToken.Set(float64(lease.Token))
	if r.feed != nil {
		go r.holdFed(t, deadline, r.feed)
		return t
	}
	go func() {
		defer close(t.renewed)
		expiry := time.NewTimer(time.Until(deadline))
		defer expiry.Stop()
		tick := time.NewTicker(r.cfg.LeaseRenew)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-expiry.C:
				t.lose(fmt.Errorf("lease of star %q token %d not renewed in time: %w", lease.Star, lease.Token, catalog.ErrStaleToken))
				return
			case <-tick.C:
			}
			sent := time.Now()
			rctx, rcancel := context.WithDeadline(ctx, minTime(deadline, sent.Add(r.cfg.LeaseCallTimeout)))
			_, err := r.deps.Leases.RenewLease(rctx, lease.Fence, r.cfg.LeaseTTL)
			rcancel()
			if ctx.Err() != nil {
				return
			}
			m.tx(err)
			switch {
			case err == nil:
				deadline = sent.Add(r.cfg.LeaseTTL - r.cfg.LeaseRenew/2)
				expiry.Reset(time.Until(deadline))
				if r.deps.Crash != nil {
					r.deps.Crash(CrashAfterLeaseRenew)
				}
			case errors.Is(err, catalog.ErrStaleToken):
				t.lose(err)
				return
			default:
				log.Warn("lease renewal failed; retrying", "star", lease.Star, "token", lease.Token, "err", err,
					"gives_up_in", time.Until(deadline).Round(time.Millisecond))
			}
		}
	}()
	return t
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// lost reports whether the term ended because the lease was lost.
func (t *term) lost() bool { return errors.Is(context.Cause(t.ctx), catalog.ErrStaleToken) }

// release stops renewing and, unless the lease was lost, expires it now
// and wakes the standbys.
func (r *runner) release(t *term) {
	lost := t.lost()
	t.cancel(errTermEnded)
	<-t.renewed
	m := r.deps.Metrics
	m.Leader.Set(0)
	m.LeaseToken.Set(0)
	for _, s := range r.deps.Steps {
		if g, ok := s.(leaderGauges); ok {
			g.ResetLeaderGauges()
		}
	}
	if lost || r.feed != nil {
		return // lost, or the fleet member hands it off
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := r.deps.Leases.ReleaseLease(ctx, t.lease.Fence)
	m.tx(err)
	if err != nil {
		r.deps.Log.Warn("lease release failed; it expires on its own", "star", t.lease.Star, "token", t.lease.Token, "err", err)
		return
	}
	if err := r.deps.Leases.Notify(ctx, t.lease.Star); err != nil {
		r.deps.Log.Debug("notify after release failed", "err", err)
	}
	r.deps.Log.Info("lease released", "star", t.lease.Star, "token", t.lease.Token)
}

// leaderGauges is a step with gauges that only the leader computes: they
// are reset when the lease term ends, so a standby never reports what it
// saw while it led.
type leaderGauges interface{ ResetLeaderGauges() }
