package settle

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
)

// Metastore is what the recover, settle and erase steps read and write in
// Postgres (docs/metastore.md): *catalog.Settle has it. The writes take the
// lease's fence and fail with catalog.ErrStaleToken once it is lost; the
// reads take none. Each operation takes a batch where the pipeline batches
// it: a batch of one is one stream's.
type Metastore interface {
	Settling
	Recovering
	Erasing
}

// Settling is what the settle pipeline reads and writes (pipeline.go and
// the phases it runs).
type Settling interface {
	// The due streams and their catalogs' ends (settle.go).
	DueStreams(ctx context.Context, star string, p catalog.DuePolicy, forced []catalog.StreamID, limit int) ([]catalog.DueStream, error)
	AdvanceCohortTurn(ctx context.Context, f catalog.Fence, every time.Duration, cohorts int) (int64, error)
	FirstOverlap(ctx context.Context, ids []catalog.StreamID) (*catalog.Overlap, error)
	WithPendingErasures(ctx context.Context, ids []catalog.StreamID) (map[catalog.StreamID]bool, error)
	// Phase 1, the snapshots, and the later windows' refs.
	StreamSnapshots(ctx context.Context, ids []catalog.StreamID, refLimit int) (map[catalog.StreamID]catalog.Snapshot, error)
	SkipBelowLow(ctx context.Context, f catalog.Fence, id catalog.StreamID) (int64, error)
	RefsWindow(ctx context.Context, id catalog.StreamID, from, before int64, limit int) ([]catalog.SpanRef, error)
	// Phase 2: the records of pending erasures, to write as tombstones.
	PendingErasuresIn(ctx context.Context, id catalog.StreamID, below, from, to int64) ([]catalog.Erasure, error)
	// Phases 3 and 4: the publish intents, and what their assemblies
	// record as they go (publish.go).
	OpenPublishIntents(ctx context.Context, f catalog.Fence, reqs []catalog.IntentRequest) ([]catalog.Intent, []error, error)
	SetIntentUpload(ctx context.Context, f catalog.Fence, id int64, uploadID string) error
	AddStagedPart(ctx context.Context, f catalog.Fence, id int64, part int) error
	// Phase 4's commits, grouped; an adopted erasure rewrite's commit; the
	// quarantine of a stream that cannot go on.
	CommitSettles(ctx context.Context, f catalog.Fence, group []catalog.StreamCommit, between func()) ([]error, error)
	CommitRewrite(ctx context.Context, f catalog.Fence, c catalog.RewriteCommit) error
	Quarantine(ctx context.Context, f catalog.Fence, id catalog.StreamID, slotKey, errClass, reason string) error
	QuarantineCondemning(ctx context.Context, f catalog.Fence, id catalog.StreamID, slotKey, errClass, reason, condemnKey string, grace time.Duration) error
}

// Recovering is what recover reads and writes of the publish intents
// earlier attempts left open (recoverIntents).
type Recovering interface {
	Intents(ctx context.Context, star, kind string, grace time.Duration) ([]catalog.Intent, error)
	AbandonPublish(ctx context.Context, f catalog.Fence, id int64, grace time.Duration) error
	Stream(ctx context.Context, id catalog.StreamID) (catalog.Stream, error)
	EntriesIntersecting(ctx context.Context, id catalog.StreamID, epoch, from, to int64) ([]catalog.Entry, error)
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
}

// Erasing is what the erasure step reads and writes beyond a publish
// (erase.go, erase_strays.go): the pending erasures by window, their
// application, and the strays that hold one back (the database clock they
// are aged by, which listed keys metadata names, the fenced arming of the
// reaps of those past the guard).
type Erasing interface {
	PendingErasureWindows(ctx context.Context, star string, limit int) ([]catalog.ErasureWindow, error)
	ApplyErasure(ctx context.Context, f catalog.Fence, e catalog.Erasure, clean []catalog.EntryRevision, keyLow, keyEnd string) (bool, error)
	Now(ctx context.Context) (time.Time, error)
	NamedSettledKeys(ctx context.Context, keys []catalog.ListedKey) ([]bool, error)
	ArmStrayReaps(ctx context.Context, f catalog.Fence, keys []catalog.ListedKey) ([]string, error)
}
