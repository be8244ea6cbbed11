package catalog

import (
	"context"
	"time"
)

// The metastore by concern (package doc): one type per concern over the
// DB's pool, and below, the reads each also declares of other concerns.

// Streams reads stars, streams, refs and catalog entries, one at a time
// or a star's all at once: for status, ls, verify and the operator's
// commands. streams.go, runtime.go.
type Streams struct{ db *DB }

// Settle is the settle step's metastore (recover, settle, erase:
// settle.Metastore): due streams, publish intents, the settle and rewrite
// commits, quarantine. settlereads.go, settle.go, intents.go,
// quarantine.go.
type Settle struct{ db *DB }

// Erasures are the erasure rows: recorded by auditor erase, applied by the
// erase step, counted for status. erase.go.
type Erasures struct{ db *DB }

// Trim is the retention, trim, reap and stray-sweep steps' metastore
// (trim.Metastore), and the idle check's read. trim.go, retention.go,
// reaps.go, strays.go, idle.go.
type Trim struct{ db *DB }

// Leases are the star's lease: taken, renewed, released, read. lease.go.
type Leases struct{ db *DB }

// Fleet is the fleet's own statements (fleet.Metastore, status --fleet):
// members, claims, renewals of many leases, hand-offs, the move log.
// fleet.go.
type Fleet struct{ db *DB }

// Requests are the operator's admin requests and the notifications that
// wake the leader. admin.go.
type Requests struct{ db *DB }

// Ledger is the run ledger, the daemon's state and runtime, and the
// status and gauge reads (daemon.Metastore). runs.go, runtime.go,
// monitor.go, idle.go.
type Ledger struct{ db *DB }

// Restore is the rewind check's marks and reconcile's rebuild of the
// metastore after a restore (rewind.Catalog, reconcile.Catalog).
// marks.go, reconcile.go.
type Restore struct{ db *DB }

// Streams is the star and stream reads over db's pool.
func (db *DB) Streams() *Streams { return &Streams{db} }

// Settle is the settle step's metastore over db's pool.
func (db *DB) Settle() *Settle { return &Settle{db} }

// Erasures is the erasure rows over db's pool.
func (db *DB) Erasures() *Erasures { return &Erasures{db} }

// Trim is the retention, trim and reap steps' metastore over db's pool.
func (db *DB) Trim() *Trim { return &Trim{db} }

// Leases is the lease statements over db's pool.
func (db *DB) Leases() *Leases { return &Leases{db} }

// Fleet is the fleet's statements over db's pool.
func (db *DB) Fleet() *Fleet { return &Fleet{db} }

// Requests is the admin requests over db's pool.
func (db *DB) Requests() *Requests { return &Requests{db} }

// Ledger is the run ledger and status reads over db's pool.
func (db *DB) Ledger() *Ledger { return &Ledger{db} }

// Restore is the marks and reconcile statements over db's pool.
func (db *DB) Restore() *Restore { return &Restore{db} }

// What the settle step also reads and writes of other concerns.

// Now is DB.Now.
func (s *Settle) Now(ctx context.Context) (time.Time, error) { return s.db.Now(ctx) }

// Stream is Streams.Stream.
func (s *Settle) Stream(ctx context.Context, id StreamID) (Stream, error) {
	return s.db.Streams().Stream(ctx, id)
}

// PendingErasureWindows is Erasures.PendingErasureWindows.
func (s *Settle) PendingErasureWindows(ctx context.Context, star string, limit int) ([]ErasureWindow, error) {
	return s.db.Erasures().PendingErasureWindows(ctx, star, limit)
}

// PendingErasuresIn is Erasures.PendingErasuresIn.
func (s *Settle) PendingErasuresIn(ctx context.Context, id StreamID, below, from, to int64) ([]Erasure, error) {
	return s.db.Erasures().PendingErasuresIn(ctx, id, below, from, to)
}

// ErasuresOf is Erasures.ErasuresOf.
func (s *Settle) ErasuresOf(ctx context.Context, id StreamID, from, to int64) ([]Erasure, error) {
	return s.db.Erasures().ErasuresOf(ctx, id, from, to)
}

// EntriesIntersecting is Erasures.EntriesIntersecting.
func (s *Settle) EntriesIntersecting(ctx context.Context, id StreamID, epoch, from, to int64) ([]Entry, error) {
	return s.db.Erasures().EntriesIntersecting(ctx, id, epoch, from, to)
}

// CommitRewrite is Erasures.CommitRewrite.
func (s *Settle) CommitRewrite(ctx context.Context, f Fence, c RewriteCommit) error {
	return s.db.Erasures().CommitRewrite(ctx, f, c)
}

// ApplyErasure is Erasures.ApplyErasure.
func (s *Settle) ApplyErasure(ctx context.Context, f Fence, e Erasure, clean []EntryRevision, keyLow, keyEnd string) (bool, error) {
	return s.db.Erasures().ApplyErasure(ctx, f, e, clean, keyLow, keyEnd)
}

// NamedSettledKeys is Trim.NamedSettledKeys.
func (s *Settle) NamedSettledKeys(ctx context.Context, keys []ListedKey) ([]bool, error) {
	return s.db.Trim().NamedSettledKeys(ctx, keys)
}

// ArmStrayReaps is Trim.ArmStrayReaps.
func (s *Settle) ArmStrayReaps(ctx context.Context, f Fence, keys []ListedKey) ([]string, error) {
	return s.db.Trim().ArmStrayReaps(ctx, f, keys)
}

// What the trim steps also read.

// Now is DB.Now.
func (t *Trim) Now(ctx context.Context) (time.Time, error) { return t.db.Now(ctx) }

// StreamsOfStar is Streams.StreamsOfStar.
func (t *Trim) StreamsOfStar(ctx context.Context, star string) ([]Stream, error) {
	return t.db.Streams().StreamsOfStar(ctx, star)
}

// ErasuresOf is Erasures.ErasuresOf (for verify).
func (ss *Streams) ErasuresOf(ctx context.Context, id StreamID, from, to int64) ([]Erasure, error) {
	return ss.db.Erasures().ErasuresOf(ctx, id, from, to)
}

// Quarantined is Settle.Quarantined (auditor erase refuses a quarantined
// stream).
func (es *Erasures) Quarantined(ctx context.Context, star string) ([]QuarantineRow, error) {
	return es.db.Settle().Quarantined(ctx, star)
}

// Notify is Requests.Notify: a released lease wakes the standbys.
func (ls *Leases) Notify(ctx context.Context, star string) error {
	return ls.db.Requests().Notify(ctx, star)
}

// Listen is Requests.Listen: a member wakes on a star's notification.
func (fl *Fleet) Listen(ctx context.Context) (*Listener, error) { return fl.db.Requests().Listen(ctx) }

// ReadOnly is DB.ReadOnly.
func (rq *Requests) ReadOnly(ctx context.Context, fn func(ctx context.Context) error) error {
	return rq.db.ReadOnly(ctx, fn)
}

// DaemonState is Ledger.DaemonState.
func (rq *Requests) DaemonState(ctx context.Context, star string) (DaemonState, error) {
	return rq.db.Ledger().DaemonState(ctx, star)
}

// Run is Ledger.Run: the run a trigger was taken by.
func (rq *Requests) Run(ctx context.Context, id int64) (Run, error) {
	return rq.db.Ledger().Run(ctx, id)
}

// What the daemon's readiness, gauges and status read of other concerns.

// Ping is DB.Ping.
func (lg *Ledger) Ping(ctx context.Context) error { return lg.db.Ping(ctx) }

// CheckSchema is DB.CheckSchema.
func (lg *Ledger) CheckSchema(ctx context.Context) error { return lg.db.CheckSchema(ctx) }

// Now is DB.Now.
func (lg *Ledger) Now(ctx context.Context) (time.Time, error) { return lg.db.Now(ctx) }

// PoolStats is DB.PoolStats.
func (lg *Ledger) PoolStats() PoolStats { return lg.db.PoolStats() }

// ReadOnly is DB.ReadOnly.
func (lg *Ledger) ReadOnly(ctx context.Context, fn func(ctx context.Context) error) error {
	return lg.db.ReadOnly(ctx, fn)
}

// Star is Streams.Star.
func (lg *Ledger) Star(ctx context.Context, star string) (Star, error) {
	return lg.db.Streams().Star(ctx, star)
}

// StarExists is Streams.StarExists.
func (lg *Ledger) StarExists(ctx context.Context, star string) (bool, error) {
	return lg.db.Streams().StarExists(ctx, star)
}

// CurrentLease is Leases.CurrentLease.
func (lg *Ledger) CurrentLease(ctx context.Context, star string) (Lease, bool, error) {
	return lg.db.Leases().CurrentLease(ctx, star)
}

// DueStreams is Settle.DueStreams.
func (lg *Ledger) DueStreams(ctx context.Context, star string, p DuePolicy, forced []StreamID, limit int) ([]DueStream, error) {
	return lg.db.Settle().DueStreams(ctx, star, p, forced, limit)
}

// Quarantined is Settle.Quarantined.
func (lg *Ledger) Quarantined(ctx context.Context, star string) ([]QuarantineRow, error) {
	return lg.db.Settle().Quarantined(ctx, star)
}

// AdminRequests is Requests.AdminRequests.
func (lg *Ledger) AdminRequests(ctx context.Context, star string, openOnly bool, limit int) ([]AdminRequest, error) {
	return lg.db.Requests().AdminRequests(ctx, star, openOnly, limit)
}

// PendingErasures is Erasures.PendingErasures.
func (lg *Ledger) PendingErasures(ctx context.Context, star string, limit int) ([]PendingErasure, error) {
	return lg.db.Erasures().PendingErasures(ctx, star, limit)
}

// ErasureBacklog is Erasures.ErasureBacklog.
func (lg *Ledger) ErasureBacklog(ctx context.Context, star string) (ErasureBacklog, error) {
	return lg.db.Erasures().ErasureBacklog(ctx, star)
}

// ErasuresAppliedWithin is Erasures.ErasuresAppliedWithin.
func (lg *Ledger) ErasuresAppliedWithin(ctx context.Context, star string, window time.Duration) (int64, error) {
	return lg.db.Erasures().ErasuresAppliedWithin(ctx, star, window)
}

// What reconcile also reads.

// StreamsOfStar is Streams.StreamsOfStar.
func (rs *Restore) StreamsOfStar(ctx context.Context, star string) ([]Stream, error) {
	return rs.db.Streams().StreamsOfStar(ctx, star)
}

// Stream is Streams.Stream.
func (rs *Restore) Stream(ctx context.Context, id StreamID) (Stream, error) {
	return rs.db.Streams().Stream(ctx, id)
}
