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
	"github.com/nova/auditor/trim"
)

// Daemon is `auditor serve` for one star: a standby until it holds the
// star's lease, then the leader that runs the cycle on the schedule and on
// operator triggers, until the lease is lost (back to standby) or the
// process is told to stop (DESIGN.md sections 2, 5 and 8).
type Daemon struct {
	cfg  Config
	r    *runner
	db   *catalog.DB
	m    *Metrics
	log  *slog.Logger
	wake chan struct{} // a notification for our star (or a reconnected listener)

	refresh chan struct{} // ask for a gauge refresh now
	running atomic.Bool   // a cycle is running (scheduled ticks are skipped)
	role    atomic.Value  // string: standby, leader
	ranNow  bool          // --run-now has been honoured
	addr    atomic.Value  // string: the HTTP listener's address
}

// New checks the configuration and builds a daemon.
func New(cfg Config, deps Deps) (*Daemon, error) {
	cfg.defaults()
	if err := cfg.validate(true); err != nil {
		return nil, err
	}
	if err := deps.defaults(cfg.Version); err != nil {
		return nil, err
	}
	d := &Daemon{cfg: cfg, r: &runner{cfg: cfg, deps: deps}, db: deps.DB, m: deps.Metrics, log: deps.Log,
		wake: make(chan struct{}, 1), refresh: make(chan struct{}, 1)}
	d.role.Store("standby")
	d.addr.Store("")
	for _, st := range deps.Steps {
		d.m.StepDuration.WithLabelValues(st.Name())
	}
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
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("http server stopped", "err", err)
			}
		}()
	}
	var wg sync.WaitGroup
	wg.Go(func() { d.listen(base) })
	wg.Go(func() { d.refreshLoop(base) })

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
func (d *Daemon) standby(ctx context.Context) (catalog.Lease, bool) {
	d.role.Store("standby")
	lastHolder := ""
	for {
		lease, err := d.db.AcquireLease(ctx, d.cfg.Star, d.cfg.Holder, d.cfg.LeaseTTL)
		if ctx.Err() != nil {
			return lease, false
		}
		d.m.tx(err)
		var held *catalog.LeaseHeldError
		switch {
		case err == nil:
			d.m.LeaseAcquisitions.Inc()
			d.log.Info("leader", "star", d.cfg.Star, "token", lease.Token, "expires_at", lease.ExpiresAt)
			return lease, true
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
			return lease, false
		case <-time.After(d.cfg.LeaseRenew):
		case <-d.wake:
		}
	}
}

// lead runs cycles while the lease is held and ctx lasts, then releases
// the lease (unless it was lost).
func (d *Daemon) lead(ctx context.Context, lease catalog.Lease) {
	t := d.r.hold(ctx, lease)
	defer d.r.release(t)
	d.role.Store("leader")
	defer d.role.Store("standby")
	d.r.closeAbandoned(t)

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
	defer sched.Stop()
	poll := time.NewTicker(d.cfg.AdminPoll)
	defer poll.Stop()

	var (
		want     string // trigger of the next cycle; "" when none is wanted
		retry    <-chan time.Time
		failures int
	)
	if d.cfg.RunNow && !d.ranNow {
		want, d.ranNow = TriggerManual, true
	}
	var st adminState
	d.admin(t, &st)
	for {
		if t.ctx.Err() != nil {
			d.log.Warn("stepping down: the lease was lost", "token", lease.Token, "cause", context.Cause(t.ctx))
			return
		}
		if st.runnable() && (want != "" || st.openTriggers) {
			opts, ok := d.consumeTriggers(t, want)
			want, st.openTriggers = "", false
			if ok {
				res, stopped := d.runCycle(ctx, t, opts)
				d.poke()
				if stopped {
					return
				}
				switch res.outcome {
				case catalog.RunOK:
					failures, retry = 0, nil
				case catalog.RunFailed:
					failures++
					wait := backoff(failures, d.cfg.RetryMax)
					retry = time.After(wait)
					d.log.Info("retrying the failed cycle", "in", wait.Round(time.Millisecond), "failures", failures)
				case catalog.RunHalted:
					retry = nil
				case catalog.RunLostLease:
					t.lose(res.err) // a fenced transaction of the cycle found the lease taken
				}
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
	loaded       bool
	state        catalog.DaemonState
	openTriggers bool // trigger requests wait to be consumed
}

func (s adminState) runnable() bool { return s.loaded && !s.state.Paused && !s.state.Halted() }

// admin consumes the open pause, resume and release requests (their
// effect is already persisted; consuming records that the leader saw
// them), reloads the pause and halt, and notes waiting triggers, which are
// consumed only when a cycle starts.
func (d *Daemon) admin(t *term, st *adminState) {
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	open, err := d.db.AdminRequests(ctx, d.cfg.Star, true, 1000)
	if err != nil {
		d.log.Warn("reading admin requests failed", "err", err)
		return
	}
	st.openTriggers = false
	others := false
	for _, r := range open {
		if r.Kind == catalog.AdminTrigger {
			st.openTriggers = true
		} else {
			others = true
		}
	}
	if others {
		reqs, err := d.db.ConsumeAdminRequests(ctx, t.lease.Fence, []string{catalog.AdminPause, catalog.AdminResume, catalog.AdminRelease})
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
		}
	}
	state, err := d.db.GetDaemonState(ctx, d.cfg.Star)
	if err != nil {
		d.log.Warn("reading the pause and halt state failed", "err", err)
		return
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
	st.loaded, st.state = true, state
	d.m.Paused.Set(b2f(state.Paused))
	d.m.Halted.Set(b2f(state.Halted()))
}

// consumeTriggers takes the open trigger requests (fenced) into the
// options of the cycle about to start. It returns false when there is
// nothing to run after all.
func (d *Daemon) consumeTriggers(t *term, want string) (cycle.Options, bool) {
	opts := cycle.Options{Trigger: want}
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	reqs, err := d.db.ConsumeAdminRequests(ctx, t.lease.Fence, []string{catalog.AdminTrigger})
	d.m.tx(err)
	if errors.Is(err, catalog.ErrStaleToken) {
		t.lose(err)
		return opts, false
	}
	if err != nil {
		d.log.Warn("consuming trigger requests failed", "err", err)
	}
	for _, r := range reqs {
		d.m.AdminRequests.WithLabelValues(r.Kind).Inc()
		d.log.Info("admin request", "id", r.ID, "kind", r.Kind, "stream", streamAttr(r.Stream), "by", r.RequestedBy)
		if r.Stream != nil && !containsStream(opts.Streams, *r.Stream) {
			opts.Streams = append(opts.Streams, *r.Stream)
		}
		opts.Trigger = TriggerManual
	}
	if len(opts.Streams) > 0 {
		opts.Trigger = TriggerStream
	}
	return opts, opts.Trigger != ""
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
		l, err := d.db.Listen(ctx)
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
	star, err := d.db.GetStar(ctx, d.cfg.Star)
	if err != nil {
		return fmt.Errorf("read star %q: %w", d.cfg.Star, err)
	}
	d.m.setClass(star.ChainClass, d.cfg.Policy)
	_, classes, err := d.db.TransitByClass(ctx, d.cfg.Star, d.cfg.Policy)
	if err != nil {
		return err
	}
	unsettled, err := d.db.UnsettledRecords(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.UnsettledRecords.WithLabelValues(star.ChainClass).Set(float64(unsettled[star.ChainClass]))
	for _, c := range classes {
		if c.Class != star.ChainClass {
			continue
		}
		d.m.DueStreams.WithLabelValues(c.Class).Set(float64(c.Due))
		d.m.SettleLag.WithLabelValues(c.Class).Set(c.Lag.Seconds())
		d.m.OldestTransitAge.WithLabelValues(c.Class).Set(c.OldestAge.Seconds())
		d.m.AgeCapBreached.WithLabelValues(c.Class).Set(float64(c.OverAgeCap))
	}
	b, err := d.db.GetBacklog(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.Quarantined.Set(float64(b.Quarantined))
	d.m.OpenIntents.WithLabelValues("publish").Set(float64(b.PublishIntents))
	d.m.OpenIntents.WithLabelValues("reap").Set(float64(b.ReapIntents))
	ts, err := trim.ReadStatus(ctx, d.db, d.cfg.Star, d.cfg.ReapGrace)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
	case err != nil:
		return fmt.Errorf("trim status: %w", err)
	default:
		d.m.TrimCursorEpoch.Set(float64(ts.Cursor.Epoch))
		d.m.TrimCursorSeq.Set(float64(ts.Cursor.Seq))
		d.m.TrimReleasable.Set(float64(ts.Slots))
		d.m.TrimLag.Set(float64(ts.Lag))
		d.m.HeadEpoch.Set(float64(ts.Head.Epoch))
		d.m.HeadSeq.Set(float64(ts.Head.Seq))
		d.m.ReapObjects.WithLabelValues("due").Set(float64(ts.Backlog.ObjectsDue))
		d.m.ReapObjects.WithLabelValues("waiting").Set(float64(ts.Backlog.ObjectsWaiting))
	}
	st, err := d.db.GetDaemonState(ctx, d.cfg.Star)
	if err != nil {
		return err
	}
	d.m.Paused.Set(b2f(st.Paused))
	d.m.Halted.Set(b2f(st.Halted()))
	last, ok, err := d.db.LastRunWithOutcome(ctx, d.cfg.Star, catalog.RunOK)
	if err != nil {
		return err
	}
	if ok && last.EndedAt != nil {
		d.m.LastSuccess.Set(float64(last.EndedAt.UnixNano()) / 1e9)
	}
	return nil
}

func ageCap(p catalog.DuePolicy, class string) time.Duration {
	if class == catalog.ClassExpress {
		return p.ExpressAgeCap
	}
	return p.AgeCap
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
	return FormatStream(*id)
}
