// Package cycle is the small contract between the daemon, which runs the
// auditor cycle of docs/architecture.md#the-cycle under a lease, and the packages that
// do its steps (settle, trim), and the error vocabulary all of them share
// (errors.go: what halts, what quarantines, what retries). It holds no logic.
package cycle

import (
	"context"
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

// Counts are a step's contribution to the run ledger (nova.auditor_runs).
type Counts struct {
	StreamsSettled     int64
	StreamsQuarantined int64
	ObjectsPublished   int64
	ObjectsAdopted     int64
	BytesCopied        int64 // server side
	BytesFetched       int64 // through the auditor
	BytesUploaded      int64
	S3Requests         int64
	SlotsReaped        int64
	ObjectsReaped      int64
	ObjectsRewritten   int64 // erasure rewrites committed
	RecordsTombstoned  int64 // records replaced by tombstones (by settle or a rewrite)
	ErasuresApplied    int64
}

// Add accumulates o into c.
func (c *Counts) Add(o Counts) {
	c.StreamsSettled += o.StreamsSettled
	c.StreamsQuarantined += o.StreamsQuarantined
	c.ObjectsPublished += o.ObjectsPublished
	c.ObjectsAdopted += o.ObjectsAdopted
	c.BytesCopied += o.BytesCopied
	c.BytesFetched += o.BytesFetched
	c.BytesUploaded += o.BytesUploaded
	c.S3Requests += o.S3Requests
	c.SlotsReaped += o.SlotsReaped
	c.ObjectsReaped += o.ObjectsReaped
	c.ObjectsRewritten += o.ObjectsRewritten
	c.RecordsTombstoned += o.RecordsTombstoned
	c.ErasuresApplied += o.ErasuresApplied
}

// Step is one step of the cycle, run in order by the leader. Each step
// commits its own progress (fenced by f), so a cycle stopped anywhere loses
// nothing. Errors: catalog.ErrStaleToken means the lease was lost (stop at
// once); ErrHalt (or catalog.ErrInvariant) means an invariant is broken
// (halt: no more cycles); anything else fails this cycle, to be retried.
type Step interface {
	Name() string
	Run(ctx context.Context, f catalog.Fence, opts Options) (Counts, error)
}

// Idler is implemented by a step with local work to do while its process
// is not the leader: keeping what it holds on local disk in step with the
// metastore (a standby that staged parts when it last led must drop them
// once the new leader has finished those intents). Idle must not change
// the metastore, and runs only while no cycle runs in this process.
type Idler interface {
	Idle(ctx context.Context, star string) error
}
