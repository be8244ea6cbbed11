// Package cycle is the small contract between the daemon, which runs the
// auditor cycle of docs/architecture.md#the-cycle under a lease, and the packages that
// do its steps (settle, trim), and the error vocabulary all of them share
// (errors.go: what halts, what quarantines, what retries). It holds no logic.
package cycle

import (
	"context"
	"io"
	"sync"

	"github.com/nova/auditor/catalog"
)

// Options are what one cycle was asked to do.
type Options struct {
	Trigger string             // schedule, manual, once, stream
	DryRun  bool               // plan and print, change nothing
	Streams []catalog.StreamID // streams forced due regardless of linger
	Plan    io.Writer          // where a dry run prints its plan (nil: nowhere)
	// Deferred, when set, is where the steps note the streams they left
	// for the next cycle because the cycle's budget ran out (nil: nowhere).
	Deferred *Deferred
	// ErasureHold is asked by the erase step once per run, just before it
	// would first mark an erasure applied (after the deletes of every
	// revision that held the erased bytes, all made by earlier cycles): a
	// non-empty answer says why no erasure may be marked applied (a bucket
	// keeps what a DELETE removes: versioning or Object Lock;
	// docs/architecture.md#erasure), and the erasures stay pending. nil
	// holds nothing.
	ErasureHold func(ctx context.Context) string
	// SweepStrays runs the strays step's sweep in this cycle whatever its
	// schedule (`run --once --sweep-strays`; docs/architecture.md#strays).
	SweepStrays bool
}

// Deferred is the set of streams a cycle left, in whole or in part, for
// the next cycle because its budget ran out (--settle-max-bytes,
// --settle-max-streams): the settle step adds them, and the daemon keeps
// a trigger --stream request of one open for the next cycle rather than
// failing it. Safe for concurrent use; a nil *Deferred notes nothing.
type Deferred struct {
	mu  sync.Mutex
	ids map[catalog.StreamID]bool
}

// Add notes that the cycle left stream id for the next one.
func (d *Deferred) Add(id catalog.StreamID) {
	if d == nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ids == nil {
		d.ids = map[catalog.StreamID]bool{}
	}
	d.ids[id] = true
}

// Has reports whether the cycle left stream id for the next one.
func (d *Deferred) Has(id catalog.StreamID) bool {
	if d == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ids[id]
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

// Finally is implemented by a step that runs even when an earlier step
// ended the cycle with an error (not once the cycle's context is done):
// local tidying that must not wait for a cycle that succeeds.
type Finally interface {
	Step
	Finally()
}

// Idler is implemented by a step with local work to do while its process
// is not the leader: keeping what it holds on local disk in step with the
// metastore (a standby that staged parts when it last led must drop them
// once the new leader has finished those intents). Idle must not change
// the metastore, and runs only while no cycle runs in this process.
type Idler interface {
	Idle(ctx context.Context, star string) error
}
