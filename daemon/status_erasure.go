package daemon

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// The erasures section of the status (docs/architecture.md#erasure):
// the pending erasures and what each waits for, the buckets that hold
// them all back, and the applied erasures whose records may still be in
// transit slots: its data and how it is read (its text is in
// status_render.go).

// ErasureStatus is the star's pending erasures (docs/architecture.md#erasure).
type ErasureStatus struct {
	Pending int64 `json:"pending"`
	// Quarantined counts the pending erasures of quarantined streams: they
	// wait for auditor release.
	Quarantined       int64      `json:"quarantined"`
	OldestRequestedAt *time.Time `json:"oldest_requested_at,omitempty"`
	OldestAge         float64    `json:"oldest_age_seconds"` // database clock; 0 when none
	// AlertAfter is the bound NovaAuditorErasurePending compares the
	// oldest age against (this command's or daemon's --erasure-alert-after).
	AlertAfter float64 `json:"alert_after_seconds"`
	// Oldest lists the oldest pending erasures (at most StatusOptions.Erasures).
	Oldest []PendingErasureStatus `json:"oldest"`
	// TransitWindow: an erasure applied less than this long ago may still
	// have copies of its records in transit slots, until trim reaps them;
	// TransitBound is the window while nothing holds trim back (age cap +
	// reap grace + two cycle intervals); AppliedInTransitWindow counts the
	// erasures applied within the window, by the run ledger
	// (docs/architecture.md#erasure).
	TransitWindow          float64 `json:"transit_window_seconds"`
	TransitBound           float64 `json:"transit_bound_seconds"`
	AppliedInTransitWindow int64   `json:"applied_in_transit_window"`
	// HeldBy is why no erasure is marked applied, from the leader's last
	// check of the bucket rules: the buckets that keep what a DELETE
	// removes (versioning, Object Lock); "" when none does.
	HeldBy string `json:"held_by,omitempty"`
}

// PendingErasureStatus is one pending erasure and what it waits for.
type PendingErasureStatus struct {
	Stream      string    `json:"stream"`
	FirstRecord int64     `json:"first_record"`
	RecordCount int64     `json:"record_count"`
	RequestedAt time.Time `json:"requested_at"`
	Age         float64   `json:"age_seconds"`
	Quarantined bool      `json:"quarantined"`
	// WaitingFor is why it is not applied yet: malformed (a row another
	// writer stored that can never be applied), release (the stream is
	// quarantined), write (records past next_record), settle (records not
	// settled yet: settle writes them as tombstones), rewrite (the erasure
	// step rewrites the settled objects holding them, or waits for the reap
	// grace of the superseded revisions), bucket (settled and rewritten as
	// far as the catalog knows, but a bucket keeps what a DELETE removes:
	// ErasureStatus.HeldBy).
	WaitingFor string `json:"waiting_for"`
}

// Reasons of PendingErasureStatus.WaitingFor.
const (
	ErasureWaitsMalformed = "malformed"
	ErasureWaitsRelease   = "release"
	ErasureWaitsWrite     = "write"
	ErasureWaitsSettle    = "settle"
	ErasureWaitsRewrite   = "rewrite"
	ErasureWaitsBucket    = "bucket"
)

// erasureWait says what a pending erasure waits for; held says a bucket
// keeps what a DELETE removes.
func erasureWait(p catalog.PendingErasure, held bool) string {
	switch {
	case p.Valid() != "":
		return ErasureWaitsMalformed
	case p.Quarantined:
		return ErasureWaitsRelease
	case p.EndRecord() > p.Stream.NextRecord:
		return ErasureWaitsWrite
	case p.EndRecord() > p.Stream.SettledThrough:
		return ErasureWaitsSettle
	case held:
		return ErasureWaitsBucket
	}
	return ErasureWaitsRewrite
}

// keepsDeletedBy names the buckets whose verdict says a DELETE leaves the
// bytes, and why ("" when none does).
func keepsDeletedBy(buckets []BucketStatus) string {
	var why []string
	for _, b := range buckets {
		if b.KeepsDeleted() == objstore.VerdictYes {
			why = append(why, fmt.Sprintf("bucket %s (%s)", b.Bucket, b.KeepsDeletedWhy()))
		}
	}
	return strings.Join(why, ", ")
}

// readErasures fills s.Erasures: the backlog's counts and the oldest
// pending erasures with what each waits for.
func readErasures(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star, limit := o.Star, o.Erasures
	b, err := db.ErasureBacklog(ctx, star)
	if err != nil {
		return err
	}
	e := &s.Erasures
	e.Pending, e.Quarantined, e.OldestAge = b.Pending, b.Quarantined, b.OldestAge.Seconds()
	e.HeldBy = keepsDeletedBy(s.Buckets)
	if err := readTransit(ctx, db, o, s); err != nil {
		return err
	}
	if b.Pending == 0 {
		return nil
	}
	at := b.OldestAt
	e.OldestRequestedAt = &at
	pend, err := db.PendingErasures(ctx, star, limit)
	if err != nil {
		return err
	}
	for _, p := range pend {
		e.Oldest = append(e.Oldest, PendingErasureStatus{Stream: p.Erasure.Stream.String(), FirstRecord: p.FirstRecord,
			RecordCount: p.RecordCount, RequestedAt: p.RequestedAt, Age: max(0, s.Now.Sub(p.RequestedAt).Seconds()),
			Quarantined: p.Quarantined, WaitingFor: erasureWait(p, e.HeldBy != "")})
	}
	return nil
}

// readTransit fills the transit window of applied erasures from the
// star's class, the policy, the oldest transit data (readClasses) and the
// run ledger.
func readTransit(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star, err := db.Star(ctx, o.Star)
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	var oldest time.Duration
	for _, c := range s.Classes {
		if c.Class == star.ChainClass {
			oldest = secs(c.OldestAge)
		}
	}
	capOf := o.Policy.AgeCapOf(star.ChainClass)
	window := transitWindow(capOf, o.ReapGrace, o.CycleInterval, oldest)
	n, err := db.ErasuresAppliedWithin(ctx, o.Star, window)
	if err != nil {
		return err
	}
	e := &s.Erasures
	e.TransitWindow, e.TransitBound = window.Seconds(), transitWindow(capOf, o.ReapGrace, o.CycleInterval, 0).Seconds()
	e.AppliedInTransitWindow = n
	return nil
}

// transitWindow is how long after its application an erasure's records
// may still have copies in transit slots (docs/architecture.md#erasure).
// A record's slot is absorbed before the record settles, so before the
// erasure applies; trim passes the slot once no ref names it or an
// earlier slot, which every stream's age cap bounds (ageCap after the
// absorb), at the next cycle, and the reap deletes it at the first cycle
// after the grace: ageCap + reapGrace + two cycles. While transit data
// older than that is still referenced (a quarantined stream's refs, a
// breached age cap), trim cannot pass its slot, and the slots after it
// stay: the window then reaches back to that data's absorb.
func transitWindow(ageCap, reapGrace, cycle, oldestTransit time.Duration) time.Duration {
	return max(ageCap+reapGrace+2*cycle, oldestTransit)
}

// CycleInterval is the time between the schedule's two next firings after
// now (0 without a schedule).
func CycleInterval(s cron.Schedule, now time.Time) time.Duration {
	if s == nil {
		return 0
	}
	next := s.Next(now)
	return s.Next(next).Sub(next)
}
