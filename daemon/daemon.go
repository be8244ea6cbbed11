package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Daemon is `auditor serve` for one star: a standby until it holds the
// star's lease, then the leader that runs the cycle on the schedule and on
// operator triggers, until the lease is lost (back to standby) or the
// process is told to stop (docs/architecture.md#singleton-lease-and-fencing).
type Daemon struct {
	cfg  Config
	r    *runner
	db   Metastore
	reqs Requests
	m    *Metrics
	log  *slog.Logger
	wake chan struct{} // a notification for our star (or a reconnected listener)

	refresh chan struct{} // ask for a gauge refresh now
	running atomic.Bool   // a cycle is running (scheduled ticks are skipped)
	role    atomic.Value  // string: standby, leader
	ranNow  bool          // --run-now has been honoured
	addr    atomic.Value  // string: the HTTP listener's address

	guard   *guard                        // schema and bucket-rule blocks (guard.go)
	rulesMu sync.Mutex                    // one check of the bucket rules at a time
	trim    TrimReader                    // trim's view for the gauges and /status (nil: none)
	fence   atomic.Pointer[catalog.Fence] // the lease held now (nil on standby)
	// progress is when the cycle loop last made progress (UnixNano): a
	// turn of the lead loop, a cycle's start, a step's start or end
	// (ProgressAge; a fleet member renews only stars that progress).
	progress  atomic.Int64
	slots     Slots // the process's cycle slots (nil: no bound)
	idleCheck Idle  // the idle check (nil: none)
	// idleAt is the database clock of the last idle cycle (UnixNano): a
	// success the ledger records only once per idleRunEvery.
	idleAt atomic.Int64
}

// New checks the configuration and builds a daemon.
func New(cfg Config, deps Deps) (*Daemon, error) {
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	if err := deps.defaults(cfg.Version); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, r: newRunner(cfg, deps), db: deps.DB, reqs: deps.Requests, m: deps.Metrics, log: deps.Log,
		wake: make(chan struct{}, 1), refresh: make(chan struct{}, 1), guard: newGuard(), trim: deps.Trim}
	d.role.Store("standby")
	d.addr.Store("")
	d.slots = deps.Slots
	d.idleCheck = deps.Idle
	d.r.stepped = d.stepped
	d.stepped()
	for _, st := range deps.Steps {
		d.m.StepDuration.WithLabelValues(st.Name())
	}
	d.m.ErasureBound.Set(cfg.ErasureAlertAfter.Seconds())
	return d, nil
}

// Addr is the HTTP listener's address once Serve listens ("" before).
func (d *Daemon) Addr() string { return d.addr.Load().(string) }

// Serve runs until ctx ends (the first SIGTERM or SIGINT): then it stops
// scheduling, lets a running cycle finish within ShutdownTimeout (and
// cancels it after), releases the lease and returns nil. Only a listener
// that cannot bind is an error. HTTP stays up throughout, halted or not.
func (d *Daemon) Serve(ctx context.Context) error {
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var srv *http.Server
	if d.cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", d.cfg.HTTPAddr)
		if err != nil {
			return fmt.Errorf("http-addr: %w", err)
		}
		d.addr.Store(ln.Addr().String())
		d.log.Info("http listening", "addr", ln.Addr().String())
		srv = &http.Server{Handler: d.Handler(), ReadHeaderTimeout: 10 * time.Second,
			BaseContext: func(net.Listener) context.Context { return base }}
		go func() {
			if err := ServeHTTP(ln, srv, d.cfg.WebConfigFile, d.log); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("http server stopped", "err", err)
			}
		}()
	}
	if err := d.waitForDatabase(ctx); err != nil {
		if srv != nil {
			_ = srv.Close()
		}
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.listen(base) })
	wg.Go(func() { d.refreshLoop(base) })
	d.startGuard(base, &wg)

	d.log.Info("standby", "star", d.cfg.Star, "holder", d.cfg.Holder)
	for {
		lease, ok := d.standby(ctx)
		if !ok {
			break
		}
		d.lead(ctx, lease)
		if ctx.Err() != nil {
			break
		}
		d.log.Info("standby", "star", d.cfg.Star, "holder", d.cfg.Holder)
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	stop()
	wg.Wait()
	d.log.Info("stopped", "star", d.cfg.Star)
	return nil
}

// standby tries to take the lease every LeaseRenew (and at once when a
// notification says the leader let go) until it succeeds or ctx ends.
func (d *Daemon) standby(ctx context.Context) (heldLease, bool) {
	d.role.Store("standby")
	lastHolder := ""
	var idled time.Time // the steps' standby work: at once, then every idleEvery
	for {
		if d.guard.schemaBlocked() {
			// An old binary on a newer schema takes no lease, so a new one
			// can lead.
			select {
			case <-ctx.Done():
				return heldLease{}, false
			case <-time.After(d.cfg.LeaseRenew):
			case <-d.wake:
			}
			continue
		}
		if time.Since(idled) >= idleEvery {
			d.idle(ctx)
			idled = time.Now()
		}
		lease, sent, err := d.r.acquire(ctx)
		if ctx.Err() != nil {
			return heldLease{}, false
		}
		d.m.tx(err)
		var held *catalog.LeaseHeldError
		switch {
		case err == nil:
			d.m.LeaseAcquisitions.Inc()
			d.log.Info("leader", "star", d.cfg.Star, "token", lease.Token, "expires_at", lease.ExpiresAt)
			return heldLease{Lease: lease, sent: sent}, true
		case errors.As(err, &held) && held.SameHolder:
			if held.Holder != lastHolder {
				d.log.Error("another process uses this holder name; waiting as its standby", "err", held)
				lastHolder = held.Holder
			}
		case errors.As(err, &held):
			if held.Holder != lastHolder {
				d.log.Info("waiting as standby", "leader", held.Holder, "until", held.Until)
				lastHolder = held.Holder
			}
		default:
			d.log.Warn("lease acquisition failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return heldLease{}, false
		case <-time.After(d.cfg.LeaseRenew):
		case <-d.wake:
		}
	}
}

// idleEvery is how often a standby does its steps' local work.
const idleEvery = 5 * time.Second

// idle runs the standby work of the steps that have some (cycle.Idler);
// a failure is logged and tried again later.
func (d *Daemon) idle(ctx context.Context) {
	for _, s := range d.r.deps.Steps {
		if i, ok := s.(cycle.Idler); ok {
			ictx, cancel := context.WithTimeout(ctx, 30*time.Second)
			if err := i.Idle(ictx, d.cfg.Star); err != nil && ctx.Err() == nil {
				d.log.Warn("standby work failed", "step", s.Name(), "err", err)
			}
			cancel()
		}
	}
}

// lead runs cycles while the lease is held and ctx lasts, then releases
// the lease (unless it was lost).
func (d *Daemon) lead(ctx context.Context, lease heldLease) {
	t := d.r.hold(ctx, lease)
	defer d.r.release(t)
	d.role.Store("leader")
	defer d.role.Store("standby")
	d.r.closeAbandoned(t)
	d.recordRuntime(t)
	defer d.fence.Store(nil)

	tick, stopSchedule := d.startSchedule()
	defer stopSchedule()
	poll := time.NewTicker(d.cfg.AdminPoll)
	defer poll.Stop()

	var (
		want     string // trigger of the next cycle; "" when none is wanted
		retry    <-chan time.Time
		failures int
		ran      bool    // a cycle of this term ran its steps and succeeded
		idled    idleRun // idle cycles the ledger has not recorded yet
	)
	if d.cfg.RunNow && !d.ranNow {
		want, d.ranNow = TriggerManual, true
	}
	st := adminState{rerun: true} // a new term runs the triggers earlier terms left open
	d.admin(t, &st)
	for {
		d.stepped()
		if t.ctx.Err() != nil {
			d.log.Warn("stepping down: the lease was lost", "token", lease.Token, "cause", context.Cause(t.ctx))
			return
		}
		if d.guard.schemaBlocked() {
			d.log.Warn("stepping down: the database schema is not this binary's", "token", lease.Token)
			return
		}
		// A bucket rule that could expire the auditor's data blocks work
		// like a halt: the lease is kept, wanted cycles wait.
		if st.runnable() && d.guard.reason() == "" && (want != "" || st.newTriggers) {
			// A scheduled cycle with nothing to do runs no step: not the
			// term's first (the guard's begin, the recovery of what an
			// earlier term left), nor one asked for by an operator or a
			// retry.
			if want == TriggerSchedule && !st.newTriggers && ran && d.idleCycle(t, &idled) {
				want = ""
				continue
			}
			if d.checkSchema(t.ctx); d.guard.schemaBlocked() {
				continue // the schema changed since the last check: step down above
			}
			opts, p, ok := d.openTriggers(t, want)
			want, st.newTriggers = "", false
			opts.ErasureHold = d.erasureHold
			if ok {
				d.takeTriggers(t, p)
				res, stopped := d.runCycle(ctx, t, opts)
				ran = ran || res.outcome == catalog.RunOK
				idled = idleRun{} // a quiet spell starts anew
				if res.outcome == catalog.RunLostLease {
					t.lose(res.err) // a step found the token stale before the renewer did
				}
				recorded, again := d.finishTriggers(t, res, opts, p)
				// Unless the cycle ran every open trigger and recorded what
				// came of each, those it tried run again at once.
				st.rerun = !recorded || !p.read
				d.poke()
				if stopped || t.ctx.Err() != nil {
					return
				}
				want, retry = d.next(res.outcome, again, retry, &failures)
				d.admin(t, &st)
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.ctx.Done():
		case <-tick:
			if st.runnable() && want == "" {
				want = TriggerSchedule
			}
		case <-retry:
			retry = nil
			if st.runnable() && want == "" {
				d.m.CycleRetries.Inc()
				want = TriggerRetry
			}
		case <-d.wake:
			d.admin(t, &st)
		case <-poll.C:
			d.admin(t, &st)
		}
	}
}

// runCycle runs one cycle while watching for shutdown: after the first
// signal the cycle gets ShutdownTimeout to finish, then it is canceled,
// and one that still does not return is abandoned. stopped reports that
// the leader must stop (shutdown or lost lease).
func (d *Daemon) runCycle(ctx context.Context, t *term, opts cycle.Options) (res result, stopped bool) {
	cctx, cancel := context.WithCancelCause(t.ctx)
	defer cancel(nil)
	d.running.Store(true)
	defer d.running.Store(false)
	if d.slots != nil {
		// A fleet member's stars share its cycle slots. Waiting for one
		// counts as progress: the star is not stuck, its member is busy
		// (a cycle that holds a slot and stops progressing is the one
		// given up).
		actx, acancel := context.WithCancel(cctx)
		stopWait := context.AfterFunc(ctx, acancel)
		waited := make(chan struct{})
		go func() {
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				select {
				case <-waited:
					return
				case <-tick.C:
					d.stepped()
				}
			}
		}()
		err := d.slots.Acquire(actx)
		close(waited)
		stopWait()
		acancel()
		if err != nil {
			return result{outcome: catalog.RunCanceled, err: err}, true
		}
		defer d.slots.Release()
		if t.ctx.Err() != nil {
			return result{outcome: catalog.RunCanceled, err: context.Cause(t.ctx)}, true
		}
	}
	d.stepped()
	done := make(chan result, 1)
	go func() { done <- d.r.cycle(cctx, t.lease.Fence, opts) }()
	var (
		sig     = ctx.Done()
		lost    = t.ctx.Done()
		timeout <-chan time.Time
		abandon <-chan time.Time
	)
	const grace = 10 * time.Second
	for {
		select {
		case res := <-done:
			return res, ctx.Err() != nil || t.ctx.Err() != nil
		case <-sig:
			sig = nil
			d.log.Info("shutting down: letting the running cycle finish", "timeout", d.cfg.ShutdownTimeout)
			timeout = time.After(d.cfg.ShutdownTimeout)
		case <-timeout:
			timeout = nil
			d.log.Warn("shutdown timeout: canceling the running cycle")
			cancel(errShutdown)
			abandon = time.After(grace)
		case <-lost:
			lost = nil
			abandon = time.After(grace)
		case <-abandon:
			d.log.Error("the cycle ignored its cancellation; abandoning it", "after", grace)
			return result{outcome: catalog.RunCanceled}, true
		}
	}
}
