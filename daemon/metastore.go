package daemon

import (
	"context"
	"encoding/json"
	"time"

	"github.com/nova/auditor/catalog"
)

// Metastore is the daemon's ledger and status in Postgres
// (docs/metastore.md): *catalog.Ledger has it. The lease (Leases,
// *catalog.Leases) and the admin requests (Requests, *catalog.Requests)
// come apart; the steps bring their own (cycle.Step). A method two uses
// share is listed in both; BuildStatus takes its part alone (auditor
// status has no daemon).
type Metastore interface {
	Ledger
	Readiness
	Gauges
	StatusReader
}

// Leases is the lease term (lease.go): take the star's lease, renew it,
// release it and wake the standbys.
type Leases interface {
	AcquireLeaseInstance(ctx context.Context, star, holder, instance string, ttl time.Duration) (catalog.Lease, error)
	RenewLease(ctx context.Context, f catalog.Fence, ttl time.Duration) (time.Time, error)
	ReleaseLease(ctx context.Context, f catalog.Fence) error
	Notify(ctx context.Context, star string) error
}

// Ledger is the run ledger (cycle.go, once.go): a row per cycle, the
// persisted halt, the pruning of old history, and the pause and halt
// RunOnce honours.
type Ledger interface {
	StartRun(ctx context.Context, f catalog.Fence, trigger string, dryRun bool) (catalog.Run, error)
	FinishRun(ctx context.Context, id int64, outcome string, c catalog.RunCounts, errText string) (catalog.Run, error)
	CloseAbandonedRuns(ctx context.Context, f catalog.Fence) (int64, error)
	SetHalted(ctx context.Context, f catalog.Fence, reason string) error
	PruneHistory(ctx context.Context, f catalog.Fence, keep time.Duration, limit int) (catalog.HistoryPruned, error)
	DaemonState(ctx context.Context, star string) (catalog.DaemonState, error)
	RecordIdleRun(ctx context.Context, f catalog.Fence, since time.Time, keep time.Duration, limit int) (catalog.Run, error)
}

// Requests are the operator's admin requests (admin.go, triggers.go):
// read, consumed, the triggers a cycle takes and finishes, the progress
// of a forced stream, and the notifications that wake the leader.
type Requests interface {
	ReadOnly(ctx context.Context, fn func(ctx context.Context) error) error
	AdminRequests(ctx context.Context, star string, openOnly bool, limit int) ([]catalog.AdminRequest, error)
	ConsumeAdminRequests(ctx context.Context, f catalog.Fence, kinds []string) ([]catalog.AdminRequest, error)
	DaemonState(ctx context.Context, star string) (catalog.DaemonState, error)
	TakeTriggers(ctx context.Context, f catalog.Fence, ids []int64) error
	NoteTriggerAttempt(ctx context.Context, f catalog.Fence, runID int64, ids []int64, why string) error
	FinishTriggers(ctx context.Context, f catalog.Fence, runID int64, results []catalog.TriggerResult) ([]catalog.AdminRequest, error)
	ForcedProgress(ctx context.Context, star string, ids []catalog.StreamID) (map[catalog.StreamID]catalog.StreamProgress, error)
	Listen(ctx context.Context) (*catalog.Listener, error)
}

// Readiness is what /readyz and the guard check of the metastore (http.go,
// guard.go), and what the leader records of its own running for status.
type Readiness interface {
	Ping(ctx context.Context) error
	CheckSchema(ctx context.Context) error
	RecordRuntime(ctx context.Context, f catalog.Fence, version string, p catalog.DuePolicy, reapGrace time.Duration) error
	RecordBucketRules(ctx context.Context, f catalog.Fence, rules json.RawMessage, blocked string) error
}

// Gauges are the metastore gauges' reads (gauges.go refreshGauges).
type Gauges interface {
	// ReadOnly runs fn with a context whose reads share one read-only
	// snapshot (one commit).
	ReadOnly(ctx context.Context, fn func(ctx context.Context) error) error
	Runtime(ctx context.Context, star string) (catalog.Runtime, error)
	Star(ctx context.Context, star string) (catalog.Star, error)
	TransitByClass(ctx context.Context, star string, p catalog.DuePolicy) (time.Time, []catalog.ClassTransit, error)
	UnsettledRecords(ctx context.Context, star string) (map[string]int64, error)
	ErasuresAppliedWithin(ctx context.Context, star string, window time.Duration) (int64, error)
	Backlog(ctx context.Context, star string) (catalog.Backlog, error)
	ErasureBacklog(ctx context.Context, star string) (catalog.ErasureBacklog, error)
	DaemonState(ctx context.Context, star string) (catalog.DaemonState, error)
	LastRunWithOutcome(ctx context.Context, star, outcome string) (catalog.Run, bool, error)
}

// StatusReader is what BuildStatus reads (status.go, status_erasure.go):
// read only, no lease.
type StatusReader interface {
	Runtime(ctx context.Context, star string) (catalog.Runtime, error)
	TransitByClass(ctx context.Context, star string, p catalog.DuePolicy) (time.Time, []catalog.ClassTransit, error)
	CurrentLease(ctx context.Context, star string) (catalog.Lease, bool, error)
	DaemonState(ctx context.Context, star string) (catalog.DaemonState, error)
	DueStreams(ctx context.Context, star string, p catalog.DuePolicy, forced []catalog.StreamID, limit int) ([]catalog.DueStream, error)
	Backlog(ctx context.Context, star string) (catalog.Backlog, error)
	Quarantined(ctx context.Context, star string) ([]catalog.QuarantineRow, error)
	AdminRequests(ctx context.Context, star string, openOnly bool, limit int) ([]catalog.AdminRequest, error)
	LastRuns(ctx context.Context, star string, limit int) ([]catalog.Run, error)
	LastRunWithOutcome(ctx context.Context, star, outcome string) (catalog.Run, bool, error)
	ErasureBacklog(ctx context.Context, star string) (catalog.ErasureBacklog, error)
	PendingErasures(ctx context.Context, star string, limit int) ([]catalog.PendingErasure, error)
	Star(ctx context.Context, star string) (catalog.Star, error)
	ErasuresAppliedWithin(ctx context.Context, star string, window time.Duration) (int64, error)
}
