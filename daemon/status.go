package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// Status is what `auditor status --json` prints and /status serves: the
// star's state as the metastore has it, by the database clock. It is built
// from the database alone (BuildStatus), so every instance and the CLI
// agree, and it is plain data: the text and the JSON are rendered from the
// value alone (status_render.go), so a constructed Status tests them.
type Status struct {
	Star            string             `json:"star"`
	Now             time.Time          `json:"now"`
	Leader          LeaderStatus       `json:"leader"`
	Paused          bool               `json:"paused"`
	PausedAt        *time.Time         `json:"paused_at,omitempty"`
	Halted          bool               `json:"halted"`
	HaltedReason    string             `json:"halted_reason,omitempty"`
	HaltedAt        *time.Time         `json:"halted_at,omitempty"`
	SettleLag       float64            `json:"settle_lag_seconds"` // the worst class's
	Classes         []ClassStatus      `json:"classes"`
	DueTotal        int64              `json:"due_total"`
	DueStreams      []DueStatus        `json:"due_streams"` // the first ones, in settle order
	Trim            TrimStatus         `json:"trim"`
	Backlog         BacklogStatus      `json:"backlog"`
	Quarantine      []QuarantineStatus `json:"quarantine"`
	Erasures        ErasureStatus      `json:"erasures"`
	PendingRequests []RequestStatus    `json:"pending_requests"`
	LastSuccess     *RunStatus         `json:"last_success"`
	LastRuns        []RunStatus        `json:"last_runs"`
	// Policy is what the linger, age-cap and reap figures were computed
	// with: the leader's recorded policy when one has led.
	Policy PolicyStatus `json:"policy"`
	// Blocked is why the leader refuses to work apart from a pause or a
	// halt (a newer schema, an expiration rule), as it last recorded.
	Blocked string `json:"blocked_reason,omitempty"`
	// Buckets is the leader's last check of the bucket rules.
	Buckets []BucketStatus `json:"buckets"`
}

// PolicyStatus is the due policy status and the gauges use.
type PolicyStatus struct {
	// Source is "leader" (recorded by the daemon that led last) or
	// "flags" (no daemon has recorded one: this command's own
	// configuration).
	Source        string     `json:"source"`
	Holder        string     `json:"holder,omitempty"`
	Version       string     `json:"version,omitempty"`
	RecordedAt    *time.Time `json:"recorded_at,omitempty"`
	Linger        float64    `json:"linger_seconds"`
	AgeCap        float64    `json:"age_cap_seconds"`
	ExpressLinger float64    `json:"express_linger_seconds"`
	ExpressAgeCap float64    `json:"express_age_cap_seconds"`
	ReapGrace     float64    `json:"reap_grace_seconds"`
	// TailGrowth, CopyFloor and Cohorts are the tail-growth rule's
	// fraction, copy floor and cohorts (catalog.DuePolicy), as the rest of
	// the policy: the leader's when Source says so.
	TailGrowth float64 `json:"tail_growth"`
	CopyFloor  int64   `json:"copy_floor_bytes"`
	Cohorts    int     `json:"tail_cohorts"`
}

// BucketStatus is one bucket's rules as the leader last judged them.
type BucketStatus struct {
	objstore.RulesVerdict
	CheckedAt time.Time `json:"checked_at"`
}

// LeaderStatus is the star's lease.
type LeaderStatus struct {
	Live      bool       `json:"live"` // a holder's lease has not expired
	Holder    string     `json:"holder,omitempty"`
	Token     int64      `json:"token,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// ClassStatus is one class's unsettled data against its linger and cap.
type ClassStatus struct {
	Class          string     `json:"class"`
	Linger         float64    `json:"linger_seconds"`
	AgeCap         float64    `json:"age_cap_seconds"`
	Streams        int64      `json:"streams"` // with unsettled data
	Due            int64      `json:"due"`
	OverAgeCap     int64      `json:"over_age_cap"`
	OldestSince    *time.Time `json:"oldest_since,omitempty"`
	OldestAge      float64    `json:"oldest_age_seconds"`
	AgeCapHeadroom float64    `json:"age_cap_headroom_seconds"` // age cap - oldest age; negative when breached
	SettleLag      float64    `json:"settle_lag_seconds"`
	// Deferred are the streams past their linger that the tail-growth
	// rule holds back; they still hold their transit slots: DeferredBytes
	// estimates their unsettled bytes (records times their tails' bytes
	// per record), DeferredDeadline is the earliest age-cap deadline among
	// them (they become due a margin before it: DeferredDueAt).
	Deferred         int64      `json:"deferred"`
	DeferredBytes    int64      `json:"deferred_bytes"`
	DeferredDeadline *time.Time `json:"deferred_deadline,omitempty"`
	DeferredDueAt    *time.Time `json:"deferred_due_at,omitempty"`
}

// DueStatus is a due stream.
type DueStatus struct {
	Stream   string    `json:"stream"`
	Class    string    `json:"class"`
	Since    time.Time `json:"since"`
	Deadline time.Time `json:"deadline"`
}

// TrimStatus is the trim cursor, its bound and what holds it.
type TrimStatus struct {
	CursorEpoch int64 `json:"cursor_epoch"`
	CursorSeq   int64 `json:"cursor_seq"`
	BoundEpoch  int64 `json:"bound_epoch"`
	BoundSeq    int64 `json:"bound_seq"`
	HeadEpoch   int64 `json:"head_epoch"`
	HeadSeq     int64 `json:"head_seq"`
	Releasable  int64 `json:"releasable_slots"` // between cursor and bound
	// FenceWait is a fence in progress that trim waits at.
	FenceWait *FenceWaitStatus `json:"fence_wait,omitempty"`
	// QuarantineHold is the oldest slot a quarantined stream's refs hold.
	QuarantineHold *HoldStatus `json:"quarantine_hold,omitempty"`
	Error          string      `json:"error,omitempty"` // the trim state could not be decided
}

// FenceWaitStatus is a past epoch without end_seq.
type FenceWaitStatus struct {
	Epoch int64     `json:"epoch"`
	Since time.Time `json:"since"`
}

// HoldStatus is a slot held by a quarantined stream.
type HoldStatus struct {
	Epoch    int64  `json:"epoch"`
	Seq      int64  `json:"seq"`
	Stream   string `json:"stream"`
	Record   int64  `json:"record"`
	Streams  int64  `json:"streams"`
	Bounding bool   `json:"bounding"` // this slot is the trim bound: trim is held by quarantine
}

// BacklogStatus counts open intents and what is armed for reaping.
type BacklogStatus struct {
	PublishIntents int64      `json:"publish_intents"`
	OldestPublish  *time.Time `json:"oldest_publish,omitempty"`
	ReapIntents    int64      `json:"reap_intents"`
	ObjectsDue     int64      `json:"objects_due"`
	ObjectsWaiting int64      `json:"objects_waiting"`
	SlotsDue       int64      `json:"slots_due"`
	SlotsWaiting   int64      `json:"slots_waiting"`
}

// QuarantineStatus is a quarantined stream or slot.
type QuarantineStatus struct {
	Stream     string    `json:"stream,omitempty"`
	SlotKey    string    `json:"slot_key,omitempty"`
	ErrorClass string    `json:"error_class"`
	Reason     string    `json:"reason"`
	Since      time.Time `json:"since"`
}

// RequestStatus is an operator request not yet consumed.
type RequestStatus struct {
	ID          int64     `json:"id"`
	Kind        string    `json:"kind"`
	Stream      string    `json:"stream,omitempty"`
	RequestedBy string    `json:"requested_by"`
	RequestedAt time.Time `json:"requested_at"`
	Attempts    int       `json:"attempts,omitempty"`   // triggers: cycles that tried it and left it open
	LastError   string    `json:"last_error,omitempty"` // why the last one did
}

// RunStatus is a run of the ledger.
type RunStatus struct {
	ID        int64             `json:"id"`
	Holder    string            `json:"holder"`
	Token     int64             `json:"token"`
	Trigger   string            `json:"trigger"`
	DryRun    bool              `json:"dry_run,omitempty"`
	StartedAt time.Time         `json:"started_at"`
	EndedAt   *time.Time        `json:"ended_at,omitempty"`
	Duration  float64           `json:"duration_seconds"`
	Outcome   string            `json:"outcome"` // "" while running
	Counts    catalog.RunCounts `json:"counts"`
	Error     string            `json:"error,omitempty"`
}

// StatusOptions say whose status BuildStatus reads and how much it lists.
type StatusOptions struct {
	Star       string
	Policy     catalog.DuePolicy
	ReapGrace  time.Duration
	Runs       int // last runs (default 10)
	DueStreams int // due streams listed (default 20)
	Erasures   int // pending erasures listed (default 20)
	// ErasureAlertAfter is reported as the erasures' alert bound.
	ErasureAlertAfter time.Duration
	// Trim reads trim's view of the star (nil: no trim section).
	Trim TrimReader
	// CycleInterval is the time between two cycles of the schedule, for
	// the transit window of applied erasures (CycleInterval).
	CycleInterval time.Duration
}

// TrimReader reads trim's view of a star for status and the gauges, read
// only and without the lease. The decisions are trim's (trim.Viewer); the
// daemon only shows them, so it does not import trim: cmd/auditor wires
// the one to the other. An error wrapping catalog.ErrNotFound means the
// star has no trim state yet.
type TrimReader interface {
	View(ctx context.Context, star string, reapGrace time.Duration) (catalog.TrimView, error)
}

// BuildStatus reads a star's status from the metastore.
func BuildStatus(ctx context.Context, db StatusReader, o StatusOptions) (Status, error) {
	if o.Runs <= 0 {
		o.Runs = 10
	}
	if o.DueStreams <= 0 {
		o.DueStreams = 20
	}
	if o.Erasures <= 0 {
		o.Erasures = 20
	}
	star := o.Star
	s := Status{Star: star, Classes: []ClassStatus{}, DueStreams: []DueStatus{}, Quarantine: []QuarantineStatus{},
		PendingRequests: []RequestStatus{}, LastRuns: []RunStatus{}, Buckets: []BucketStatus{},
		Erasures: ErasureStatus{Oldest: []PendingErasureStatus{}, AlertAfter: o.ErasureAlertAfter.Seconds()}}
	if err := readPolicy(ctx, db, &o, &s); err != nil {
		return s, err
	}
	steps := []func(context.Context, StatusReader, StatusOptions, *Status) error{
		readClasses, readLeadership, readDue, readTrim, readQuarantine, readErasures, readRequestsAndRuns}
	for _, step := range steps {
		if err := step(ctx, db, o, &s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// readPolicy reads the policy the leader recorded (it replaces the
// options' own when there is one), the blocked reason and the bucket rules.
func readPolicy(ctx context.Context, db StatusReader, o *StatusOptions, s *Status) error {
	star := o.Star
	rt, err := db.Runtime(ctx, star)
	switch {
	case err == nil:
		o.Policy, o.ReapGrace = rt.Policy, rt.ReapGrace
		at := rt.UpdatedAt
		s.Policy = PolicyStatus{Source: "leader", Holder: rt.Holder, Version: rt.Version, RecordedAt: &at}
		s.Blocked = rt.BlockedReason
		if len(rt.BucketRules) > 0 {
			if err := json.Unmarshal(rt.BucketRules, &s.Buckets); err != nil {
				return fmt.Errorf("decode the recorded bucket rules: %w", err)
			}
		}
	case isNotFound(err):
		s.Policy.Source = "flags"
	default:
		return err
	}
	p := o.Policy
	s.Policy.Linger, s.Policy.AgeCap = p.Linger.Seconds(), p.AgeCap.Seconds()
	s.Policy.ExpressLinger, s.Policy.ExpressAgeCap = p.ExpressLinger.Seconds(), p.ExpressAgeCap.Seconds()
	s.Policy.ReapGrace = o.ReapGrace.Seconds()
	s.Policy.TailGrowth, s.Policy.CopyFloor, s.Policy.Cohorts = p.TailGrowth, p.CopyFloor, p.Cohorts
	return nil
}

// readClasses reads the database clock and each class's transit.
func readClasses(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star, p := o.Star, o.Policy
	now, classes, err := db.TransitByClass(ctx, star, p)
	if err != nil {
		return err
	}
	s.Now = now
	for _, c := range classes {
		cs := ClassStatus{Class: c.Class, Linger: p.LingerOf(c.Class).Seconds(), AgeCap: p.AgeCapOf(c.Class).Seconds(),
			Streams: c.Markers, Due: c.Due, OverAgeCap: c.OverAgeCap, OldestSince: c.OldestSince,
			OldestAge: c.OldestAge.Seconds(), SettleLag: c.Lag.Seconds()}
		cs.AgeCapHeadroom = cs.AgeCap - cs.OldestAge
		cs.Deferred, cs.DeferredBytes, cs.DeferredDeadline = c.Deferred, c.DeferredBytes, c.DeferredDeadline
		if c.DeferredDeadline != nil {
			due := c.DeferredDeadline.Add(p.HoldFor(c.Class) - p.AgeCapOf(c.Class)) // since + HoldFor
			cs.DeferredDueAt = &due
		}
		s.Classes = append(s.Classes, cs)
		s.DueTotal += c.Due
		s.SettleLag = max(s.SettleLag, cs.SettleLag)
	}
	return nil
}

// readLeadership reads the lease and the daemon's state (paused, halted).
func readLeadership(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star := o.Star
	lease, live, err := db.CurrentLease(ctx, star)
	switch {
	case err == nil:
		exp := lease.ExpiresAt
		s.Leader = LeaderStatus{Live: live, Holder: lease.Holder, Token: lease.Token, ExpiresAt: &exp}
	case !isNotFound(err):
		return err
	}
	st, err := db.DaemonState(ctx, star)
	if err != nil {
		return err
	}
	s.Paused, s.PausedAt = st.Paused, st.PausedAt
	s.Halted, s.HaltedReason, s.HaltedAt = st.Halted(), st.HaltedReason, st.HaltedAt
	return nil
}

// readDue reads the first due streams and the publish backlog.
func readDue(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star, p := o.Star, o.Policy
	due, err := db.DueStreams(ctx, star, p, nil, o.DueStreams)
	if err != nil {
		return err
	}
	for _, d := range due {
		s.DueStreams = append(s.DueStreams, DueStatus{Stream: d.Stream.String(), Class: d.Class, Since: d.Since, Deadline: d.Deadline})
	}
	b, err := db.Backlog(ctx, star)
	if err != nil {
		return err
	}
	s.Backlog = BacklogStatus{PublishIntents: b.PublishIntents, OldestPublish: b.OldestPublish, ReapIntents: b.ReapIntents}
	return nil
}

// readQuarantine reads the quarantined streams and slots.
func readQuarantine(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star := o.Star
	q, err := db.Quarantined(ctx, star)
	if err != nil {
		return err
	}
	for _, r := range q {
		qs := QuarantineStatus{SlotKey: r.SlotKey, ErrorClass: r.ErrorClass, Reason: r.Reason, Since: r.Since}
		if r.Stream != nil {
			qs.Stream = r.Stream.String()
		}
		s.Quarantine = append(s.Quarantine, qs)
	}
	return nil
}

// readRequestsAndRuns reads the pending admin requests, the last runs and
// the last success.
func readRequestsAndRuns(ctx context.Context, db StatusReader, o StatusOptions, s *Status) error {
	star, now := o.Star, s.Now
	reqs, err := db.AdminRequests(ctx, star, true, 100)
	if err != nil {
		return err
	}
	for i := len(reqs) - 1; i >= 0; i-- { // oldest first
		r := reqs[i]
		s.PendingRequests = append(s.PendingRequests, RequestStatus{ID: r.ID, Kind: r.Kind, Stream: streamAttr(r.Stream),
			RequestedBy: r.RequestedBy, RequestedAt: r.RequestedAt, Attempts: r.Attempts, LastError: r.LastError})
	}
	runs, err := db.LastRuns(ctx, star, o.Runs)
	if err != nil {
		return err
	}
	for _, r := range runs {
		s.LastRuns = append(s.LastRuns, runStatus(r, now))
	}
	last, ok, err := db.LastRunWithOutcome(ctx, star, catalog.RunOK)
	if err != nil {
		return err
	}
	if ok {
		rs := runStatus(last, now)
		s.LastSuccess = &rs
	}
	return nil
}

func runStatus(r catalog.Run, now time.Time) RunStatus {
	end := now
	if r.EndedAt != nil {
		end = *r.EndedAt
	}
	return RunStatus{ID: r.ID, Holder: r.Holder, Token: r.Token, Trigger: r.Trigger, DryRun: r.DryRun,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt, Duration: end.Sub(r.StartedAt).Seconds(), Outcome: r.Outcome,
		Counts: r.Counts, Error: r.Error}
}

// readTrim fills the status's trim section and reap backlog from trim's
// view (none without o.Trim, or before the star has trim state).
func readTrim(ctx context.Context, _ StatusReader, o StatusOptions, s *Status) error {
	if o.Trim == nil {
		return nil
	}
	tv, err := o.Trim.View(ctx, o.Star, o.ReapGrace)
	switch {
	case err == nil:
	case isNotFound(err):
		return nil
	case ctx.Err() != nil:
		return err
	default:
		// A chain trim cannot decide on is a halt of trim, not a reason to
		// hide everything else.
		s.Trim.Error = err.Error()
		return nil
	}
	s.Trim = TrimStatus{CursorEpoch: tv.Cursor.Epoch, CursorSeq: tv.Cursor.Seq, BoundEpoch: tv.Bound.Epoch,
		BoundSeq: tv.Bound.Seq, HeadEpoch: tv.Head.Epoch, HeadSeq: tv.Head.Seq, Releasable: tv.Releasable}
	if w := tv.FenceWait; w != nil {
		s.Trim.FenceWait = &FenceWaitStatus{Epoch: w.Epoch, Since: w.Since}
	}
	if q := tv.Hold; q != nil {
		s.Trim.QuarantineHold = &HoldStatus{Epoch: q.Slot.Epoch, Seq: q.Slot.Seq, Stream: q.Stream.String(),
			Record: q.Record, Streams: q.Streams, Bounding: q.Bounding}
	}
	s.Backlog.ObjectsDue, s.Backlog.ObjectsWaiting = tv.ObjectsDue, tv.ObjectsWaiting
	s.Backlog.SlotsDue, s.Backlog.SlotsWaiting = tv.SlotsDue, tv.SlotsWaiting
	return nil
}

func isNotFound(err error) bool { return errors.Is(err, catalog.ErrNotFound) }

// secs is a seconds field of the Status as a duration.
func secs(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
