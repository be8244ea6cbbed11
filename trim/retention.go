package trim

import (
	"context"
	"errors"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Retention is step 3 of the cycle: catalog entries wholly below their
// stream's low_record are removed and their objects armed for reaping after
// the grace; an entry straddling low_record stays whole. (Unsettled refs
// below low_record are settle's business: catalog.SkipBelowLow.)
type Retention struct {
	d  Deps
	db RetentionCatalog
	c  Config
}

var _ cycle.Step = (*Retention)(nil)

// NewRetention returns the retention step.
func NewRetention(d Deps, c Config) (*Retention, error) {
	d.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if d.DB == nil {
		return nil, errors.New("retention: no database")
	}
	return &Retention{d: d, db: d.DB, c: c}, nil
}

// Name implements cycle.Step.
func (r *Retention) Name() string { return "retention" }

// maxPlanEntries bounds what a dry run lists.
const maxPlanEntries = 1000

// Run implements cycle.Step. Each batch of at most BatchSize entries (of at
// most BatchSize streams whose low_record moved) is one fenced transaction
// (remove the rows, arm their reaps, record the streams done), so an
// interrupted run loses nothing: the next one finds the rest still below
// low_record.
func (r *Retention) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	var counts cycle.Counts
	if opts.DryRun {
		cands, err := r.db.RetentionCandidates(ctx, f.Star, maxPlanEntries+1)
		if err != nil {
			return counts, err
		}
		for i, e := range cands {
			if i == maxPlanEntries {
				plan(opts, "retention: ... and more")
				break
			}
			plan(opts, "retention: would remove catalog entry %s@%d (%d records) and arm the reap of %s",
				e.Stream, e.FirstRecord, e.RecordCount, settledKey(e))
		}
		return counts, nil
	}
	total := 0
	for {
		removed, more, err := r.db.ApplyRetention(ctx, f, r.c.ReapGrace, r.c.BatchSize, settledKey)
		if err != nil {
			return counts, err
		}
		if len(removed) > 0 {
			r.d.crash(CrashRetentionCommitted)
		}
		total += len(removed)
		r.d.Metrics.retired(len(removed))
		if !more {
			break
		}
	}
	if total > 0 {
		r.d.Log.Info("retention removed catalog entries below low_record", "star", f.Star, "entries", total, "reap_grace", r.c.ReapGrace)
	}
	return counts, nil
}
