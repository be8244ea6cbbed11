package daemon

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nova/auditor/catalog"
)

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
