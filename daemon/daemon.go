package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/robfig/cron/v3"

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

// idleRun is the idle cycles since the ledger last recorded some: how
// many, and the database clock of the first; recorded, that a row was
// written since the last cycle that ran its steps.
type idleRun struct {
	n        int
	since    time.Time
	recorded bool
}

// The ledger records idle cycles as one run row (catalog.Ledger.RecordIdleRun):
// at the first idle cycle after a cycle that ran its steps (so that the
// ledger shows the star went quiet, as a cycle's row did), then once
// idleRunEvery of them, or Config.IdleRecord since the first, have gone
// unrecorded, whichever comes first: at a 10 s schedule and the default
// 5 minutes, a row per 30 idle cycles.
const idleRunEvery = 1000

// idleCycle is a scheduled cycle that first asks whether any step has
// work (Deps.Idle: one read). With none, it runs no step and reports
// true: it counts as a successful cycle (outcome idle), and the ledger
// records the idle cycles in one fenced row now and then (idleRunEvery). An error of the check, or work, reports false: the
// cycle runs its steps.
func (d *Daemon) idleCycle(t *term, ir *idleRun) bool {
	if d.idleCheck == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	work, now, err := d.idleCheck.Work(ctx, d.cfg.Star)
	switch {
	case err != nil:
		d.log.Warn("the idle check failed; the cycle runs its steps", "err", err)
		return false
	case work != "":
		d.log.Debug("the cycle has work", "work", work)
		return false
	}
	d.stepped()
	d.m.Cycles.WithLabelValues(TriggerSchedule, CycleIdle).Inc()
	d.idleAt.Store(now.UnixNano())
	d.m.LastSuccess.Set(float64(now.UnixNano()) / 1e9)
	if ir.n == 0 {
		ir.since = now
	}
	ir.n++
	if !ir.recorded || ir.n >= idleRunEvery || now.Sub(ir.since) >= d.cfg.IdleRecord {
		_, err := d.db.RecordIdleRun(ctx, t.lease.Fence, ir.since, d.cfg.HistoryKeep, d.cfg.PruneBatch)
		d.m.tx(err)
		switch {
		case errors.Is(err, catalog.ErrStaleToken):
			t.lose(err)
		case err != nil:
			d.log.Warn("recording idle cycles in the ledger failed; the next idle cycle tries again", "err", err)
		default:
			d.log.Debug("idle cycles recorded", "cycles", ir.n, "since", ir.since)
			*ir = idleRun{recorded: true}
		}
	}
	return true
}

// startSchedule starts the cron schedule: each firing asks for a cycle on
// the returned channel (one waits at most), or counts a skip while a cycle
// runs. The returned function stops it.
func (d *Daemon) startSchedule() (<-chan struct{}, func()) {
	tick := make(chan struct{}, 1)
	sched := cron.New()
	sched.Schedule(d.cfg.Schedule, cron.FuncJob(func() {
		if d.running.Load() {
			d.m.CyclesSkipped.Inc()
			d.log.Debug("scheduled cycle skipped: one is still running")
			return
		}
		select {
		case tick <- struct{}{}:
		default:
		}
	}))
	sched.Start()
	return tick, func() { sched.Stop() }
}

// next is what a cycle's outcome asks of the lead loop: the trigger of the
// next cycle ("" for none) and the retry timer (nil for none). A success
// resets failures and, when streams are still due, wants another cycle at
// once; a failure retries after a backoff; a halt waits for an operator.
// Any other outcome (canceled, lost lease: the loop ends) keeps retry.
func (d *Daemon) next(outcome string, again bool, retry <-chan time.Time, failures *int) (want string, _ <-chan time.Time) {
	switch outcome {
	case catalog.RunOK:
		*failures, retry = 0, nil
		if again {
			want = TriggerStream
		}
	case catalog.RunFailed:
		*failures++
		wait := backoff(*failures, d.cfg.RetryMax)
		retry = time.After(wait)
		d.log.Info("retrying the failed cycle", "in", wait.Round(time.Millisecond), "failures", *failures)
	case catalog.RunHalted:
		retry = nil
	}
	return want, retry
}

// backoff is the wait before retrying after n failures in a row: 1s
// doubling to max, with ±20% jitter.
func backoff(n int, max time.Duration) time.Duration {
	d := time.Second
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	d = min(d, max)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// adminState is what the leader knows of the persisted state.
type adminState struct {
	loaded bool
	state  catalog.DaemonState
	// rerun: the open trigger requests a cycle already tried run at once
	// too (the term just began, the star is runnable again, or the last
	// cycle did not record what came of its triggers).
	rerun       bool
	newTriggers bool // open trigger requests wait for a cycle now
}

func (s adminState) runnable() bool { return s.loaded && !s.state.Paused && !s.state.Halted() }

// admin consumes the open pause, resume and release requests (their
// effect is already persisted; consuming records that the leader saw
// them), reloads the pause and halt, and notes trigger requests no cycle
// has run yet (they are consumed by the cycle that runs them). Which those
// are is read from the requests themselves each time (open, and no
// attempt recorded), not from the ids seen so far: ids are drawn at insert
// and commit in any order, and a request that commits after a higher id
// was run is as new as any. Triggers a cycle already tried (it failed, or
// the star halted or was paused) wait for the retry, or run at once when
// the star becomes runnable again.
func (d *Daemon) admin(t *term, st *adminState) {
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	// The open requests and the pause and halt state in one read snapshot
	// (one commit per poll); a consumed pause or resume reads the state again.
	var (
		open  []catalog.AdminRequest
		state catalog.DaemonState
	)
	err := d.reqs.ReadOnly(ctx, func(ctx context.Context) error {
		var err error
		if open, err = d.reqs.AdminRequests(ctx, d.cfg.Star, true, 1000); err != nil {
			return err
		}
		state, err = d.reqs.DaemonState(ctx, d.cfg.Star)
		return err
	})
	if err != nil {
		d.log.Warn("reading admin requests and the pause and halt state failed", "err", err)
		return
	}
	others, untried, triggers := false, false, false
	for _, r := range open {
		if r.Kind == catalog.AdminTrigger {
			triggers = true
			untried = untried || r.Attempts == 0
		} else {
			others = true
		}
	}
	if others {
		reqs, err := d.reqs.ConsumeAdminRequests(ctx, t.lease.Fence, []string{catalog.AdminPause, catalog.AdminResume, catalog.AdminRelease})
		d.m.tx(err)
		if errors.Is(err, catalog.ErrStaleToken) {
			t.lose(err)
			return
		}
		if err != nil {
			d.log.Warn("consuming admin requests failed", "err", err)
		}
		for _, r := range reqs {
			d.m.AdminRequests.WithLabelValues(r.Kind).Inc()
			d.log.Info("admin request", "id", r.ID, "kind", r.Kind, "stream", streamAttr(r.Stream), "by", r.RequestedBy)
		}
		if len(reqs) > 0 {
			d.poke()
			if state, err = d.db.DaemonState(ctx, d.cfg.Star); err != nil {
				d.log.Warn("reading the pause and halt state failed", "err", err)
				return
			}
		}
	}
	if st.loaded && state.Paused != st.state.Paused {
		d.log.Info("pause changed", "paused", state.Paused)
	}
	if state.Halted() && (!st.loaded || !st.state.Halted()) {
		d.log.Error("halted: no cycle runs until auditor resume", "reason", state.HaltedReason, "since", state.HaltedAt)
	}
	if !state.Halted() && st.loaded && st.state.Halted() {
		d.log.Info("halt cleared by resume")
	}
	if st.loaded && !st.runnable() && !state.Paused && !state.Halted() {
		st.rerun = true // runnable again: the triggers a cycle left open run now
	}
	st.loaded, st.state = true, state
	st.newTriggers = untried || (st.rerun && triggers)
	d.m.Paused.Set(b2f(state.Paused))
	d.m.Halted.Set(b2f(state.Halted()))
	d.m.Rewound.Set(b2f(cycle.IsRewoundReason(state.HaltedReason)))
}

func containsStream(ids []catalog.StreamID, id catalog.StreamID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
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

// poke asks the gauge refresher to run now.
func (d *Daemon) poke() {
	select {
	case d.refresh <- struct{}{}:
	default:
	}
}

// listen keeps a LISTEN connection open and turns notifications for our
// star into wake-ups. After every (re)connection it wakes once, since
// notifications sent meanwhile were missed; the admin poll covers the rest.
func (d *Daemon) listen(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		l, err := d.reqs.Listen(ctx)
		if err != nil {
			d.log.Debug("listen failed; retrying", "in", wait, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
			continue
		}
		wait = time.Second
		d.signal()
		for {
			payload, err := l.Wait(ctx)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Debug("listen connection lost; reconnecting", "err", err)
				}
				break
			}
			if payload == d.cfg.Star {
				d.signal()
			}
		}
		l.Close()
	}
}

func (d *Daemon) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// refreshLoop recomputes the metastore gauges every GaugeInterval and when
// poked.
func (d *Daemon) refreshLoop(ctx context.Context) {
	tick := time.NewTicker(d.cfg.GaugeInterval)
	defer tick.Stop()
	for {
		if err := d.refreshGauges(ctx); err != nil && ctx.Err() == nil {
			d.log.Warn("refreshing metastore gauges failed; they keep their last values", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-d.refresh:
		}
	}
}

// refreshGauges computes the gauges of the metastore's state.
func (d *Daemon) refreshGauges(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	defer func() {
		outcome := "ok"
		if err != nil {
			outcome = "error"
		} else {
			d.m.StatusRefreshed.Set(float64(time.Now().UnixNano()) / 1e9)
		}
		d.m.StatusRefreshes.WithLabelValues(outcome).Inc()
	}()
	// One read snapshot: one commit per refresh, and gauges of one state.
	return d.db.ReadOnly(ctx, d.readGauges)
}

// readGauges sets the metastore gauges from ctx's reads (refreshGauges).
func (d *Daemon) readGauges(ctx context.Context) error {
	d.checkSchema(ctx)
	// The leader's recorded policy, so every instance's gauges, /status and
	// auditor status agree (this instance's own until one is recorded).
	policy, reapGrace := d.cfg.Policy, d.cfg.ReapGrace
	if rt, err := d.db.Runtime(ctx, d.cfg.Star); err == nil {
		policy, reapGrace = rt.Policy, rt.ReapGrace
	} else if !errors.Is(err, catalog.ErrNotFound) {
		return err
	}
	star, err := d.db.Star(ctx, d.cfg.Star)
	if err != nil {
		return fmt.Errorf("read star %q: %w", d.cfg.Star, err)
	}
	d.m.setClass(star.ChainClass, policy)
	_, classes, err := d.db.TransitByClass(ctx, d.cfg.Star, policy)
	if err != nil {
		return err
	}
	unsettled, err := d.db.UnsettledRecords(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.UnsettledRecords.WithLabelValues(star.ChainClass).Set(float64(unsettled[star.ChainClass]))
	var oldestTransit time.Duration
	for _, c := range classes {
		if c.Class != star.ChainClass {
			continue
		}
		d.m.DueStreams.WithLabelValues(c.Class).Set(float64(c.Due))
		d.m.SettleLag.WithLabelValues(c.Class).Set(c.Lag.Seconds())
		d.m.OldestTransitAge.WithLabelValues(c.Class).Set(c.OldestAge.Seconds())
		d.m.AgeCapBreached.WithLabelValues(c.Class).Set(float64(c.OverAgeCap))
		d.m.DeferredStreams.WithLabelValues(c.Class).Set(float64(c.Deferred))
		d.m.DeferredTransitBytes.WithLabelValues(c.Class).Set(float64(c.DeferredBytes))
		deadline := 0.0
		if c.DeferredDeadline != nil {
			deadline = float64(c.DeferredDeadline.UnixNano()) / 1e9
		}
		d.m.DeferredDeadline.WithLabelValues(c.Class).Set(deadline)
		oldestTransit = c.OldestAge
	}
	window := transitWindow(policy.AgeCapOf(star.ChainClass), reapGrace, CycleInterval(d.cfg.Schedule, time.Now()), oldestTransit)
	inTransit, err := d.db.ErasuresAppliedWithin(ctx, d.cfg.Star, window)
	if err != nil {
		return err
	}
	d.m.ErasureTransitWindow.Set(window.Seconds())
	d.m.ErasuresInTransit.Set(float64(inTransit))
	b, err := d.db.Backlog(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.Quarantined.Set(float64(b.Quarantined))
	d.m.OpenIntents.WithLabelValues("publish").Set(float64(b.PublishIntents))
	d.m.OpenIntents.WithLabelValues("reap").Set(float64(b.ReapIntents))
	eb, err := d.db.ErasureBacklog(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.ErasuresPending.Set(float64(eb.Pending))
	d.m.ErasuresQuarantined.Set(float64(eb.Quarantined))
	d.m.ErasureOldestAge.Set(eb.OldestAge.Seconds())
	if err := d.refreshTrimGauges(ctx, reapGrace); err != nil {
		return err
	}
	st, err := d.db.DaemonState(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.Paused.Set(b2f(st.Paused))
	d.m.Halted.Set(b2f(st.Halted()))
	d.m.Rewound.Set(b2f(cycle.IsRewoundReason(st.HaltedReason)))
	last, ok, err := d.db.LastRunWithOutcome(ctx, d.cfg.Star, catalog.RunOK)
	if err != nil {
		return err
	}
	if ok && last.EndedAt != nil {
		// an idle cycle since the ledger's last row is a later success
		d.m.LastSuccess.Set(float64(max(last.EndedAt.UnixNano(), d.idleAt.Load())) / 1e9)
	}
	return nil
}

// refreshTrimGauges sets the trim and reap gauges from trim's view (none
// without Deps.Trim, or before the star has trim state).
func (d *Daemon) refreshTrimGauges(ctx context.Context, reapGrace time.Duration) error {
	if d.trim == nil {
		return nil
	}
	tv, err := d.trim.View(ctx, d.cfg.Star, reapGrace)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("trim status: %w", err)
	}
	d.m.TrimCursorEpoch.Set(float64(tv.Cursor.Epoch))
	d.m.TrimCursorSeq.Set(float64(tv.Cursor.Seq))
	d.m.TrimReleasable.Set(float64(tv.Releasable))
	d.m.TrimLag.Set(float64(tv.Lag))
	d.m.HeadEpoch.Set(float64(tv.Head.Epoch))
	d.m.HeadSeq.Set(float64(tv.Head.Seq))
	d.m.ReapObjects.WithLabelValues("due").Set(float64(tv.ObjectsDue))
	d.m.ReapObjects.WithLabelValues("waiting").Set(float64(tv.ObjectsWaiting))
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// streamAttr formats an optional stream for logs.
func streamAttr(id *catalog.StreamID) string {
	if id == nil {
		return ""
	}
	return id.String()
}
