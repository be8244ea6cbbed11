package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// ErrPaused is returned by RunOnce while an operator has paused the star.
var ErrPaused = errors.New("the star is paused (auditor resume lifts it)")

// ErrHalted is returned by RunOnce while the star is halted.
var ErrHalted = errors.New("the star is halted")

// RunOnce is `auditor run --once`: it takes the star's lease (a
// *catalog.LeaseHeldError when another auditor holds it), runs the steps
// once as one ledger run while renewing the lease, and releases it. Its
// erase step marks no erasure applied while a bucket of cfg.Buckets keeps
// what a DELETE removes (read through deps.Rules, as the daemon does). A
// paused or halted star is refused (ErrPaused, ErrHalted). A halt found by
// the run is persisted like the daemon's. A dry run (opts.DryRun) changes
// nothing, so it takes no lease and records no run: it works beside a
// running daemon, paused or halted.
// The error is the cycle's: test it with cycle.IsHalt and
// catalog.ErrStaleToken.
func RunOnce(ctx context.Context, cfg Config, deps Deps, opts cycle.Options) (cycle.Counts, error) {
	if err := cfg.validate(false); err != nil {
		return cycle.Counts{}, err
	}
	if err := deps.defaults(cfg.Version); err != nil {
		return cycle.Counts{}, err
	}
	if opts.Trigger == "" {
		opts.Trigger = TriggerOnce
	}
	if opts.DryRun {
		return dryRun(ctx, cfg, deps, opts)
	}
	if opts.ErasureHold == nil {
		// As the daemon's: a fresh read of the buckets' rules when the
		// erase step is about to mark an erasure applied.
		opts.ErasureHold = func(ctx context.Context) string {
			verdicts, failed := readRules(ctx, deps.Rules, cfg.Buckets, cfg.KeyPrefixes)
			return erasureHoldReason(cfg.Buckets, verdicts, failed)
		}
	}
	r := newRunner(cfg, deps)
	lease, sent, err := r.acquire(ctx)
	deps.Metrics.tx(err)
	if err != nil {
		return cycle.Counts{}, err
	}
	deps.Metrics.LeaseAcquisitions.Inc()
	t := r.hold(ctx, heldLease{Lease: lease, sent: sent})
	defer r.release(t)
	state, err := deps.DB.DaemonState(ctx, cfg.Star)
	if err != nil {
		return cycle.Counts{}, err
	}
	if !opts.DryRun {
		if cycle.IsRewoundReason(state.HaltedReason) {
			return cycle.Counts{}, fmt.Errorf("%w: %w", ErrHalted, &cycle.RewoundError{
				Detail: strings.TrimPrefix(state.HaltedReason, cycle.ReasonRewound+": ")})
		}
		if state.Halted() {
			return cycle.Counts{}, fmt.Errorf("%w: %s (auditor resume clears it)", ErrHalted, state.HaltedReason)
		}
		if state.Paused {
			return cycle.Counts{}, ErrPaused
		}
	}
	r.closeAbandoned(t)
	cctx, stop := afterShutdown(ctx, t.ctx, cfg.ShutdownTimeout)
	defer stop()
	res := r.cycle(cctx, t.lease.Fence, opts)
	if res.outcome == catalog.RunLostLease {
		t.lose(res.err)
	}
	return res.counts, res.err
}

// OnceIdle is run --once's idle check, before it takes the lease: true when
// a cycle of the star would find nothing to do (deps.Idle), the star is
// neither paused nor halted (RunOnce reports those), and the ledger's last
// success is younger than cfg.IdleRecord. It reads in one snapshot: one
// transaction. A false (or an error) runs the whole cycle, which also
// records it: the ledger's last success stays within IdleRecord, and the
// local pending sidecars and an earlier term's leftovers are recovered at
// least that often.
func OnceIdle(ctx context.Context, cfg Config, deps Deps) (bool, error) {
	if deps.Idle == nil || deps.DB == nil {
		return false, nil
	}
	idle := false
	err := deps.DB.ReadOnly(ctx, func(ctx context.Context) error {
		state, err := deps.DB.DaemonState(ctx, cfg.Star)
		if err != nil || state.Paused || state.Halted() {
			return err
		}
		work, now, err := deps.Idle.Work(ctx, cfg.Star)
		if err != nil || work != "" {
			return err
		}
		last, ok, err := deps.DB.LastRunWithOutcome(ctx, cfg.Star, catalog.RunOK)
		if err != nil {
			return err
		}
		idle = ok && last.EndedAt != nil && now.Sub(*last.EndedAt) < cfg.IdleRecord
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("idle check of star %q: %w", cfg.Star, err)
	}
	return idle, nil
}

// WithLease runs fn under the star's lease, as RunOnce runs a cycle: it
// takes the lease (a *catalog.LeaseHeldError when another auditor holds
// it), renews it while fn runs (fn's context ends when it is lost) and
// releases it after. For the commands that change a star outside a cycle
// (auditor reconcile): fn's writes are fenced by the fence it is given.
func WithLease(ctx context.Context, cfg Config, deps Deps, fn func(ctx context.Context, f catalog.Fence) error) error {
	if err := cfg.validate(false); err != nil {
		return err
	}
	if err := deps.defaults(cfg.Version); err != nil {
		return err
	}
	r := newRunner(cfg, deps)
	lease, sent, err := r.acquire(ctx)
	deps.Metrics.tx(err)
	if err != nil {
		return err
	}
	t := r.hold(ctx, heldLease{Lease: lease, sent: sent})
	defer r.release(t)
	fctx, stop := afterShutdown(ctx, t.ctx, cfg.ShutdownTimeout)
	defer stop()
	err = fn(fctx, t.lease.Fence)
	if errors.Is(err, catalog.ErrStaleToken) {
		t.lose(err)
	}
	return err
}

// dryRun runs the steps once in plan mode, outside the lease and the
// ledger. Its fence has token 0, which no lease ever has, so a write a step
// attempted by mistake would fail as stale rather than land.
func dryRun(ctx context.Context, cfg Config, deps Deps, opts cycle.Options) (cycle.Counts, error) {
	f := catalog.Fence{Star: cfg.Star, Holder: cfg.Holder}
	var total cycle.Counts
	for _, s := range deps.Steps {
		c, err := runStep(ctx, s, f, opts)
		total.Add(c)
		if err != nil {
			return total, fmt.Errorf("step %s (dry run): %w", s.Name(), err)
		}
	}
	deps.Log.Info("dry run", "trigger", opts.Trigger, "streams", len(opts.Streams), "counts", total)
	return total, nil
}

// afterShutdown returns a child of base that is canceled (cause
// errShutdown) timeout after signal is done: a running cycle gets that long
// to finish after SIGTERM. stop releases its resources.
func afterShutdown(signal, base context.Context, timeout time.Duration) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(base)
	// A timer left running after stop only cancels a context already done.
	unwatch := context.AfterFunc(signal, func() {
		time.AfterFunc(timeout, func() { cancel(errShutdown) })
	})
	return ctx, func() {
		unwatch()
		cancel(nil)
	}
}
