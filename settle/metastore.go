package settle

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
)

// Metastore is what the recover, settle and erase steps read and write in
// Postgres (docs/metastore.md): *catalog.Settle has it. The writes take the
// lease's fence and fail with catalog.ErrStaleToken once it is lost; the
// reads take none.
type Metastore interface {
	// The due streams and the catalog of each (settle.go).
	DueStreams(ctx context.Context, star string, p catalog.DuePolicy, forced []catalog.StreamID, limit int) ([]catalog.DueStream, error)
	AdvanceCohortTurn(ctx context.Context, f catalog.Fence, every time.Duration, cohorts int) (int64, error)
	FirstOverlap(ctx context.Context, ids []catalog.StreamID) (*catalog.Overlap, error)
	WithPendingErasures(ctx context.Context, ids []catalog.StreamID) (map[catalog.StreamID]bool, error)
	StreamSnapshot(ctx context.Context, id catalog.StreamID, limit int) (catalog.Stream, []catalog.SpanRef, *catalog.Entry, error)
	RefsWindow(ctx context.Context, id catalog.StreamID, from, before int64, limit int) ([]catalog.SpanRef, error)
	SkipBelowLow(ctx context.Context, f catalog.Fence, id catalog.StreamID) (int64, error)
	// The snapshot of a batch of small streams (batch.go).
	StreamSnapshots(ctx context.Context, ids []catalog.StreamID, refLimit int) (map[catalog.StreamID]catalog.Snapshot, error)

	// Publish intents: opened and staged before any object is written
	// (publish.go), read and abandoned by recover (recover.go).
	Intents(ctx context.Context, star, kind string, grace time.Duration) ([]catalog.Intent, error)
	OpenPublishIntent(ctx context.Context, f catalog.Fence, t catalog.PublishTarget, class string) (catalog.Intent, error)
	SetIntentUpload(ctx context.Context, f catalog.Fence, id int64, uploadID string) error
	AddStagedPart(ctx context.Context, f catalog.Fence, id int64, part int) error
	AbandonPublish(ctx context.Context, f catalog.Fence, id int64, grace time.Duration) error
	OpenPublishIntents(ctx context.Context, f catalog.Fence, reqs []catalog.IntentRequest) ([]catalog.Intent, []error, error)

	// Commits of settled objects and of their erasure rewrites, and the
	// quarantine of a stream that cannot go on (settle.go, erase.go).
	CommitSettle(ctx context.Context, f catalog.Fence, c catalog.SettleCommit) error
	CommitRewrite(ctx context.Context, f catalog.Fence, c catalog.RewriteCommit) error
	CommitSettles(ctx context.Context, f catalog.Fence, group []catalog.StreamCommit, between func()) ([]error, error)
	Quarantine(ctx context.Context, f catalog.Fence, id catalog.StreamID, slotKey, errClass, reason string) error
	QuarantineCondemning(ctx context.Context, f catalog.Fence, id catalog.StreamID, slotKey, errClass, reason, condemnKey string, grace time.Duration) error

	// A stream's cataloged objects and its erasures (recover.go, erase.go).
	Stream(ctx context.Context, id catalog.StreamID) (catalog.Stream, error)
	EntriesIntersecting(ctx context.Context, id catalog.StreamID, epoch, from, to int64) ([]catalog.Entry, error)
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
	PendingErasureWindows(ctx context.Context, star string, limit int) ([]catalog.ErasureWindow, error)
	PendingErasuresIn(ctx context.Context, id catalog.StreamID, below, from, to int64) ([]catalog.Erasure, error)
	ApplyErasure(ctx context.Context, f catalog.Fence, e catalog.Erasure, clean []catalog.EntryRevision, keyLow, keyEnd string) (bool, error)

	// The strays that hold an erasure back (erase_strays.go): the database
	// clock they are aged by, which listed keys metadata names, and the
	// fenced arming of the reaps of those past the guard.
	Now(ctx context.Context) (time.Time, error)
	NamedSettledKeys(ctx context.Context, keys []catalog.ListedKey) ([]bool, error)
	ArmStrayReaps(ctx context.Context, f catalog.Fence, keys []catalog.ListedKey) ([]string, error)
}
