package trim

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
)

// Metastore is what the retention, trim and reap steps read and write in
// Postgres (docs/metastore.md): *catalog.Trim has it. Each step keeps only
// its own part; the writes take the lease's fence and fail with
// catalog.ErrStaleToken once it is lost.
type Metastore interface {
	RetentionCatalog
	CursorCatalog
	ReapCatalog
	SweepCatalog
}

// RetentionCatalog is the retention step's part (retention.go): the
// entries below their stream's low_record, removed and armed for reaping.
type RetentionCatalog interface {
	RetentionCandidates(ctx context.Context, star string, limit int) ([]catalog.RetiredEntry, error)
	ApplyRetention(ctx context.Context, f catalog.Fence, grace time.Duration, limit int, key func(catalog.RetiredEntry) string) (out []catalog.RetiredEntry, more bool, err error)
}

// CursorCatalog is the trim step's part (trim.go): the chain and the
// cursor it moves, arming the passed slots.
type CursorCatalog interface {
	TrimState(ctx context.Context, star string) (catalog.TrimState, error)
	AdvanceTrim(ctx context.Context, f catalog.Fence, prev *catalog.SlotPos, from, to catalog.SlotPos, grace time.Duration) (catalog.SlotReap, error)
}

// StatusCatalog is what ReadStatus and Viewer read: the chain, and what
// is armed and not yet reaped.
type StatusCatalog interface {
	TrimState(ctx context.Context, star string) (catalog.TrimState, error)
	SlotReaps(ctx context.Context, star string) ([]catalog.SlotReap, error)
	ObjectReapBacklog(ctx context.Context, star string, grace time.Duration) (catalog.ReapBacklog, error)
}

// ReapCatalog is the reap step's part (reap.go): the armed slot ranges
// and settled objects, each object's verdict, and the rows of what was
// deleted; and its backlog gauges (StatusCatalog).
type ReapCatalog interface {
	StatusCatalog
	FinishSlotReap(ctx context.Context, f catalog.Fence, id int64) error
	SlotReapBucketsDone(ctx context.Context, f catalog.Fence, id int64, buckets []string) error
	ShrinkSlotReap(ctx context.Context, f catalog.Fence, id int64, from, next catalog.SlotPos) error
	DueObjectReaps(ctx context.Context, star string, grace time.Duration, after int64, limit int) ([]catalog.Intent, error)
	PreviewReaps(ctx context.Context, star string, grace time.Duration, cands []catalog.ReapCandidate) (map[int64]catalog.KeyVerdict, error)
	ClassifyReaps(ctx context.Context, f catalog.Fence, grace time.Duration, cands []catalog.ReapCandidate) (map[int64]catalog.KeyVerdict, error)
	FinishReaps(ctx context.Context, f catalog.Fence, ids []int64) error
}
