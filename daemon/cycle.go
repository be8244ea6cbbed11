package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
)

// Triggers recorded in the run ledger and the cycles_total metric.
const (
	TriggerSchedule = "schedule" // the --schedule
	TriggerManual   = "manual"   // auditor trigger, or serve --run-now
	TriggerStream   = "stream"   // auditor trigger --stream
	TriggerOnce     = "once"     // auditor run --once
	TriggerRetry    = "retry"    // a failed cycle retried early with backoff
)

// CycleIdle is the outcome, in the cycles_total metric, of a scheduled
// cycle that found nothing to do and ran no step (Deps.Idle).
const CycleIdle = "idle"

// CrashAfterLeaseRenew is the daemon's crash point
// (docs/architecture.md#crash-points-and-the-crash-matrix): after a lease renewal.
const CrashAfterLeaseRenew crashpoint.Point = "lease.after-renew"

// CrashPoints lists the daemon's crash points.
func CrashPoints() []crashpoint.Point { return []crashpoint.Point{CrashAfterLeaseRenew} }

// ErrPaused is returned by RunOnce while an operator has paused the star.
var ErrPaused = errors.New("the star is paused (auditor resume lifts it)")

// ErrHalted is returned by RunOnce while the star is halted.
var ErrHalted = errors.New("the star is halted")

// Config is what the daemon is told (the serve and run flags).
type Config struct {
	Star            string
	Holder          string
	Schedule        cron.Schedule // parsed --schedule (config.ParseSchedule)
	LeaseTTL        time.Duration
	LeaseRenew      time.Duration
	ShutdownTimeout time.Duration
	HTTPAddr        string // "" serves no HTTP
	WebConfigFile   string // TLS and basic auth of HTTPAddr (ServeHTTP); "" plain HTTP
	Pprof           bool   // serve /debug/pprof/ on HTTPAddr
	RunNow          bool   // run one cycle as soon as the lease is first held
	Policy          catalog.DuePolicy
	ReapGrace       time.Duration // for the reap backlog of status and gauges
	// ErasureAlertAfter is the bound of a pending erasure's age that the
	// alert compares against (exported as erasure_pending_bound_seconds).
	ErasureAlertAfter time.Duration
	Version           string
	// HistoryKeep is the window of the run ledger and the admin requests:
	// each cycle prunes what is older (at most PruneBatch rows of each).
	// Zero keeps everything.
	HistoryKeep time.Duration
	// IdleRecord: the ledger records idle cycles as one row per this
	// (and at the first of a quiet spell); 0, one row per idle cycle.
	IdleRecord time.Duration

	// Buckets are the buckets whose lifecycle rules, encryption,
	// versioning and Object Lock the daemon checks (RunOnce: versioning
	// and Object Lock, for the erasure hold); KeyPrefixes, the full key
	// prefixes it writes under in them (an expiration rule reaching one
	// stops all work).
	Buckets     []string
	KeyPrefixes []string

	// Required (validated, not defaulted): the Default* constants.
	AdminPoll        time.Duration // fallback poll of admin requests when a NOTIFY is missed (5s)
	GaugeInterval    time.Duration // refresh of the metastore gauges and the schema check (15s)
	RetryMax         time.Duration // longest backoff before retrying a failed cycle (5m)
	RulesInterval    time.Duration // check of the bucket rules (24h; every minute while they block)
	DBRetryMax       time.Duration // longest wait between tries of an unreachable database at start (30s)
	PruneBatch       int           // most rows of each history table pruned per cycle (1000)
	LeaseCallTimeout time.Duration // bound of one lease acquisition or renewal attempt (LeaseTTL/3)
}

// Deps are what the daemon works with.
type Deps struct {
	DB       Metastore    // the ledger and status reads in Postgres (metastore.go, *catalog.Ledger)
	Leases   Leases       // the star's lease (*catalog.Leases)
	Requests Requests     // the operator's admin requests (*catalog.Requests)
	Steps    []cycle.Step // run in order (docs/architecture.md#the-cycle)
	Log      *slog.Logger
	Metrics  *Metrics               // nil: metrics kept on a private registry
	Gatherer prometheus.Gatherer    // what /metrics serves (nil: the daemon's own metrics only)
	Crash    func(crashpoint.Point) // CrashAfterLeaseRenew (nil: none)
	Rules    BucketRulesReader      // the bucket rules (nil: unknown)
	Trim     TrimReader             // trim's view for the gauges and /status (nil: none shown)
	Slots    Slots                  // the process's cycle slots, shared by a fleet member's stars (nil: no bound)
	Idle     Idle                   // tells a scheduled cycle with nothing to do (nil: every cycle runs its steps)
}

// Idle tells, before a scheduled cycle, whether any step has work
// (docs/architecture.md#idle-cycles): in one read of the metastore.
type Idle interface {
	// Work names the work a cycle of star would find ("" when none) and
	// returns the database clock of the reading.
	Work(ctx context.Context, star string) (string, time.Time, error)
}

// Defaults of the daemon's intervals and bounds, which have no
// configuration key (cmd/auditor maps them; tests set their own).
const (
	DefaultAdminPoll     = 5 * time.Second
	DefaultGaugeInterval = 15 * time.Second
	DefaultRetryMax      = 5 * time.Minute
	DefaultRulesInterval = 24 * time.Hour
	DefaultDBRetryMax    = 30 * time.Second
	DefaultPruneBatch    = 1000

	// A fleet member's stars refresh their gauges, and poll their admin
	// requests, less often: a member leads many, its LISTEN connection
	// wakes each on a request, and an idle star should cost the
	// metastore almost nothing (docs/architecture.md#idle-cycles).
	DefaultFleetGaugeInterval = time.Minute
	DefaultFleetAdminPoll     = 30 * time.Second
)

// DefaultLeaseCallTimeout bounds one lease acquisition or renewal attempt:
// a third of the ttl, so a renewal stuck on a dead connection gives up in
// time for the next ones (on fresh connections) to save the lease, and a
// standby retries its takeover as often.
func DefaultLeaseCallTimeout(ttl time.Duration) time.Duration { return ttl / 3 }

func (c Config) validate(needSchedule bool) error {
	var errs []error
	if c.Star == "" {
		errs = append(errs, errors.New("daemon: no star"))
	}
	if c.Holder == "" {
		errs = append(errs, errors.New("daemon: no holder"))
	}
	if c.LeaseTTL <= 0 || c.LeaseRenew <= 0 || c.LeaseRenew >= c.LeaseTTL {
		errs = append(errs, fmt.Errorf("daemon: lease renew %s must be positive and below the ttl %s", c.LeaseRenew, c.LeaseTTL))
	}
	if needSchedule && c.Schedule == nil {
		errs = append(errs, errors.New("daemon: no schedule"))
	}
	for name, d := range map[string]time.Duration{"AdminPoll": c.AdminPoll, "GaugeInterval": c.GaugeInterval,
		"RetryMax": c.RetryMax, "RulesInterval": c.RulesInterval, "DBRetryMax": c.DBRetryMax, "LeaseCallTimeout": c.LeaseCallTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("daemon: %s: %s must be positive", name, d))
		}
	}
	if c.PruneBatch < 1 {
		errs = append(errs, fmt.Errorf("daemon: PruneBatch: %d must be at least 1", c.PruneBatch))
	}
	return errors.Join(errs...)
}

func (d *Deps) defaults(version string) error {
	if d.DB == nil || d.Leases == nil || d.Requests == nil {
		return errors.New("daemon: no database")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Metrics == nil {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg, version)
		if err != nil {
			return err
		}
		d.Metrics = m
		if d.Gatherer == nil {
			d.Gatherer = reg
		}
	}
	if d.Gatherer == nil {
		d.Gatherer = prometheus.NewRegistry()
	}
	return nil
}

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

// runner runs cycles under a lease and records them.
type runner struct {
	cfg  Config
	deps Deps
	// instance tells this process apart from another given the same
	// holder name: a live lease is taken over only by its own process.
	instance string
	// feed, set: a fleet member renews the lease and reports each renewal
	// here (LeadTerm); the runner then neither renews nor releases it.
	feed <-chan Renewal
	// stepped stamps the daemon's progress (a step's start and end).
	stepped func()
}

func newRunner(cfg Config, deps Deps) *runner {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return &runner{cfg: cfg, deps: deps, instance: hex.EncodeToString(b)}
}

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

// closeAbandoned closes the run rows earlier holders left open.
func (r *runner) closeAbandoned(t *term) {
	n, err := r.deps.DB.CloseAbandonedRuns(t.ctx, t.lease.Fence)
	r.deps.Metrics.tx(err)
	switch {
	case errors.Is(err, catalog.ErrStaleToken):
		t.lose(err)
	case err != nil:
		r.deps.Log.Warn("closing abandoned runs failed", "err", err)
	case n > 0:
		r.deps.Log.Info("closed runs abandoned by earlier holders", "runs", n)
	}
}

// result is a finished cycle.
type result struct {
	run     catalog.Run
	outcome string
	counts  cycle.Counts
	err     error
}

// errShutdown cancels a cycle that outlived --shutdown-timeout.
var errShutdown = errors.New("shutdown timeout: cycle canceled")

// cycle runs the steps once under f as one ledger run: the run row is
// opened (fenced) before the first step and closed with the outcome after
// the last. A panicking step fails the cycle. A halt is persisted.
func (r *runner) cycle(ctx context.Context, f catalog.Fence, opts cycle.Options) result {
	db, m, log := r.deps.DB, r.deps.Metrics, r.deps.Log
	start := time.Now()
	var res result
	run, err := db.StartRun(ctx, f, opts.Trigger, opts.DryRun)
	m.tx(err)
	if err != nil {
		res.err = fmt.Errorf("start run: %w", err)
		res.outcome = classify(ctx, res.err)
		m.Cycles.WithLabelValues(opts.Trigger, res.outcome).Inc()
		log.Warn("cycle not started", "trigger", opts.Trigger, "outcome", res.outcome, "err", res.err)
		return res
	}
	res.run = run
	stepSeconds := map[string]float64{} // for the cycle's log line
	for _, s := range r.deps.Steps {
		if err := ctx.Err(); err != nil {
			res.err = fmt.Errorf("before step %s: %w", s.Name(), context.Cause(ctx))
			break
		}
		began := time.Now()
		r.step()
		c, err := runStep(ctx, s, f, opts)
		r.step()
		if !opts.DryRun {
			m.countStep(s.Name(), c)
		}
		took := time.Since(began).Seconds()
		m.StepDuration.WithLabelValues(s.Name()).Observe(took)
		stepSeconds[s.Name()] += took
		res.counts.Add(c)
		if err != nil && cycle.IsPartial(err) {
			// the later steps still run; the cycle ends failed
			log.Warn("step failed in part; the cycle goes on", "step", s.Name(), "err", err)
			if res.err == nil {
				res.err = fmt.Errorf("step %s: %w", s.Name(), err)
			}
			continue
		}
		if err != nil {
			res.err = errors.Join(res.err, fmt.Errorf("step %s: %w", s.Name(), err))
			break
		}
	}
	res.outcome = classify(ctx, res.err)
	errText := ""
	if res.err != nil {
		errText = res.err.Error()
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	res.run, err = db.FinishRun(fctx, run.ID, res.outcome, res.counts, errText)
	m.tx(err)
	if err != nil {
		log.Warn("recording the run failed", "run", run.ID, "err", err)
		res.run = run
	}
	r.prune(fctx, f, opts, res.outcome)
	if res.outcome == catalog.RunHalted {
		herr := db.SetHalted(fctx, f, cycle.HaltReason(res.err))
		m.tx(herr)
		if herr != nil {
			log.Error("persisting the halt failed", "err", herr)
		}
		m.Halted.Set(1)
		m.Rewound.Set(b2f(cycle.IsRewoundReason(cycle.HaltReason(res.err))))
	}
	elapsed := time.Since(start)
	m.Cycles.WithLabelValues(opts.Trigger, res.outcome).Inc()
	m.CycleDuration.Observe(elapsed.Seconds())
	if res.outcome == catalog.RunOK && !opts.DryRun {
		end := time.Now()
		if res.run.EndedAt != nil {
			end = *res.run.EndedAt
		}
		m.LastSuccess.Set(float64(end.UnixNano()) / 1e9)
	}
	attrs := []any{"run", run.ID, "trigger", opts.Trigger, "outcome", res.outcome, "token", f.Token,
		"duration", elapsed.Round(time.Millisecond), "streams", len(opts.Streams), "dry_run", opts.DryRun,
		"counts", res.counts, "step_seconds", stepSeconds}
	switch res.outcome {
	case catalog.RunOK:
		log.Info("cycle", attrs...)
	case catalog.RunHalted:
		msg := "cycle halted: an invariant is broken; no more cycles until auditor resume"
		if cycle.IsRewoundReason(cycle.HaltReason(res.err)) {
			msg = "cycle halted: the metastore is behind the object store; no more cycles until auditor reconcile --apply"
		}
		log.Error(msg, append(attrs, "err", res.err)...)
	default:
		log.Warn("cycle", append(attrs, "err", res.err)...)
	}
	return res
}

// prune deletes a bounded batch of the ledger and admin requests older than
// HistoryKeep, so neither grows with the star's age. A dry run or a cycle
// that lost its lease prunes nothing; a failure is only logged (the next
// cycle prunes what this one did not).
func (r *runner) prune(ctx context.Context, f catalog.Fence, opts cycle.Options, outcome string) {
	if r.cfg.HistoryKeep <= 0 || opts.DryRun || outcome == catalog.RunLostLease {
		return
	}
	p, err := r.deps.DB.PruneHistory(ctx, f, r.cfg.HistoryKeep, r.cfg.PruneBatch)
	r.deps.Metrics.tx(err)
	if err != nil {
		r.deps.Log.Warn("pruning the run ledger and admin requests failed", "err", err)
		return
	}
	if p.Runs > 0 || p.Requests > 0 {
		r.deps.Log.Info("pruned history", "runs", p.Runs, "admin_requests", p.Requests, "older_than", r.cfg.HistoryKeep)
	}
}

// step stamps the daemon's progress, when it listens.
func (r *runner) step() {
	if r.stepped != nil {
		r.stepped()
	}
}

// runStep runs one step, turning a panic into an error.
func runStep(ctx context.Context, s cycle.Step, f catalog.Fence, opts cycle.Options) (c cycle.Counts, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return s.Run(ctx, f, opts)
}

// classify maps a cycle's error to its ledger outcome, by the kinds of
// internal/cycle/errors.go (a canceled cycle is none of them: ctx ended).
func classify(ctx context.Context, err error) string {
	switch {
	case err == nil:
		return catalog.RunOK
	case cycle.IsLeaseLost(err), cycle.IsLeaseLost(context.Cause(ctx)):
		return catalog.RunLostLease
	case cycle.IsHalt(err):
		return catalog.RunHalted
	case ctx.Err() != nil:
		return catalog.RunCanceled
	}
	return catalog.RunFailed
}
