package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// poke asks the gauge refresher to run now.
func (d *Daemon) poke() {
	select {
	case d.refresh <- struct{}{}:
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
