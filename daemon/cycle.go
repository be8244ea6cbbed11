package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/nova/auditor/catalog"
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
	ended := false                      // a step ended the cycle: only cycle.Finally steps run
	for _, s := range r.deps.Steps {
		if _, always := s.(cycle.Finally); ended && !always {
			continue
		}
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
			ended = true
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
