// Package cycle is the small contract between the daemon, which runs the
// auditor cycle of docs/architecture.md#the-cycle under a lease, and the packages that
// do its steps (settle, trim). It holds no logic.
package cycle

import (
	"context"
	"errors"
	"io"

	"github.com/nova/auditor/catalog"
)

// Options are what one cycle was asked to do.
type Options struct {
	Trigger string             // schedule, manual, once, stream
	DryRun  bool               // plan and print, change nothing
	Streams []catalog.StreamID // streams forced due regardless of linger
	Plan    io.Writer          // where a dry run prints its plan (nil: nowhere)
}

// Counts are a step's contribution to the run ledger (nova.auditor_runs):
// the ledger's own counters, so a step's result is recorded as it is.
type Counts = catalog.RunCounts

// Step is one step of the cycle, run in order by the leader. Each step
// commits its own progress (fenced by f), so a cycle stopped anywhere loses
// nothing. Errors: catalog.ErrStaleToken means the lease was lost (stop at
// once); ErrHalt (or catalog.ErrInvariant) means an invariant is broken
// (halt: no more cycles); anything else fails this cycle, to be retried.
type Step interface {
	Name() string
	Run(ctx context.Context, f catalog.Fence, opts Options) (Counts, error)
}

// ErrHalt marks an error that must halt the auditor.
var ErrHalt = errors.New("halt")

// IsHalt reports whether err must halt the auditor.
func IsHalt(err error) bool {
	return errors.Is(err, ErrHalt) || errors.Is(err, catalog.ErrInvariant)
}

// PartialError is a step's failure that left the rest of the cycle safe to
// run: the step did what it could (settle finished every other stream), and
// what failed is retried by a later cycle. The cycle runs its later steps
// (retention, trim and reap never depend on a failed stream's progress:
// its refs still hold the trim bound) and then ends failed. Without it, one
// stream failing every cycle would stop trim and reap for the whole star.
type PartialError struct{ Err error }

func (e *PartialError) Error() string { return e.Err.Error() }
func (e *PartialError) Unwrap() error { return e.Err }

// IsPartial reports whether err lets the cycle go on with its later steps.
func IsPartial(err error) bool {
	var p *PartialError
	return errors.As(err, &p) && !IsHalt(err) && !errors.Is(err, catalog.ErrStaleToken)
}

// Idler is implemented by a step with local work to do while its process
// is not the leader: keeping what it holds on local disk in step with the
// metastore (a standby that staged parts when it last led must drop them
// once the new leader has finished those intents). Idle must not change
// the metastore, and runs only while no cycle runs in this process.
type Idler interface {
	Idle(ctx context.Context, star string) error
}
