package trim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// Crash points of the retention, strays, trim and reap steps
// (docs/architecture.md#crash-points-and-the-crash-matrix); Deps.Crash is called with each.
const (
	CrashRetentionCommitted crashpoint.Point = "retention.after-commit"    // after a retention batch commits
	CrashTrimCommitted      crashpoint.Point = "trim.after-cursor-commit"  // after the trim cursor commit
	CrashSlotsBeforeDelete  crashpoint.Point = "reap.before-slot-delete"   // before each slot range's deletes
	CrashSlotsAfterDelete   crashpoint.Point = "reap.after-slot-delete"    // after them, before the row is finished
	CrashObjectBeforeDelete crashpoint.Point = "reap.before-object-delete" // before each batch of object deletes
	CrashObjectAfterDelete  crashpoint.Point = "reap.after-object-delete"  // after them, before the intents are finished
	CrashStraysArmed        crashpoint.Point = "strays.after-arm"          // after a batch of strays' reaps is armed
)

// CrashPoints lists the crash points of retention, strays, trim and reap
// in cycle order.
func CrashPoints() []crashpoint.Point {
	return []crashpoint.Point{CrashRetentionCommitted, CrashStraysArmed, CrashTrimCommitted, CrashSlotsBeforeDelete, CrashSlotsAfterDelete,
		CrashObjectBeforeDelete, CrashObjectAfterDelete}
}

// Deps are the collaborators of the retention, trim and reap steps.
type Deps struct {
	DB Metastore // each step keeps its part (metastore.go)
	// Topology is where everything lives (reap only): the standard bucket
	// (settled objects), the slot buckets of each class, and the zone
	// health shared with slot reads and copy sources. Deletes fan out to
	// every bucket of a class through its set, which skips a bucket the
	// health holds off (what it holds stays due) and records failures.
	Topology *objstore.Topology
	Log      *slog.Logger
	Metrics  *Metrics               // nil: none
	Crash    func(crashpoint.Point) // the crash points above (nil: none)
	// Marks is the rewind check the reap asks before it deletes (nil:
	// none): a metastore restored behind the store halts the star instead
	// (docs/architecture.md#rewind-detection).
	Marks Freshener
}

// Freshener makes sure the metastore is not behind the store before the
// reap deletes: rewind.Guard.
type Freshener interface {
	Fresh(ctx context.Context, f catalog.Fence) error
}

// Config is the trim and reap policy.
type Config struct {
	ReapGrace time.Duration // --reap-grace: from arming to deleting
	// BatchSize is the most keys per DeleteObjects request and the most
	// rows per retention or reap transaction (at most 1000, the S3 limit).
	BatchSize int
	// Concurrency is how many slot batches are deleted at once
	// (DefaultConcurrency: it has no configuration key).
	Concurrency int
}

// DefaultConcurrency is the slot batches deleted at once in production.
const DefaultConcurrency = 4

const maxBatch = 1000

// Validate checks that the configuration is complete: the constructors
// refuse a zero or out-of-range field rather than defaulting it (the
// defaults live in internal/config and DefaultConcurrency).
func (c Config) Validate() error {
	var errs []error
	if c.ReapGrace < 0 {
		errs = append(errs, fmt.Errorf("trim config: ReapGrace: %s is negative", c.ReapGrace))
	}
	if c.BatchSize < 1 || c.BatchSize > maxBatch {
		errs = append(errs, fmt.Errorf("trim config: BatchSize: %d must be between 1 and %d (the DeleteObjects limit)", c.BatchSize, maxBatch))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("trim config: Concurrency: %d must be at least 1", c.Concurrency))
	}
	return errors.Join(errs...)
}

func (d *Deps) defaults() {
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

func (d Deps) crash(name crashpoint.Point) {
	if d.Crash != nil {
		d.Crash(name)
	}
}

func plan(opts cycle.Options, format string, args ...any) {
	if opts.Plan != nil {
		fmt.Fprintf(opts.Plan, format+"\n", args...)
	}
}

// settledKey is the key of a retired catalog entry's object.
func settledKey(e catalog.RetiredEntry) string { return bundle.EntryKey(e.Bucket, e.Entry) }

// Decision is the trim bound of a star and what trim does with it.
type Decision struct {
	Cursor Pos  // the cursor, normalised (no row: the lowest epoch, 0)
	Head   Pos  // the absorbed head
	Bound  Pos  // min(earliest ref slot, head, first fence in progress)
	Move   bool // Bound is past Cursor: release [Cursor, Bound)
	Slots  int64
	// FenceWait is set when a past epoch has no end_seq: trim waits at it.
	FenceWait *FenceWait
	// Quarantine is set when a quarantined stream's refs hold slots.
	Quarantine *QuarantineHold

	prev *Pos // the stored row, for the compare-and-set
}

// FenceWait is a fence in progress that trim waits at.
type FenceWait struct {
	Epoch int64
	Since time.Time // when the next epoch started (the fence's step 1)
}

// QuarantineHold is the oldest slot held by a quarantined stream's refs.
type QuarantineHold struct {
	Slot    Pos
	Stream  catalog.StreamID
	Record  int64 // the holding ref's first record
	Streams int64 // quarantined streams with refs
	// Bounding: this slot is the trim bound (trim is held by quarantine).
	Bounding bool
}

// Decide computes a star's trim bound (docs/architecture.md#trim): the earliest
// slot named by any remaining span ref of the star, capped by the absorbed
// head and by the first past epoch whose fence is in progress. A ref naming
// a slot behind the cursor is a halt (a released slot was needed).
func Decide(st catalog.TrimState) (Decision, error) {
	var d Decision
	c, err := newChain(st.Star, st.Epochs)
	if err != nil {
		return d, err
	}
	if d.Head, err = c.norm(c.head); err != nil {
		return d, cycle.Haltf("absorbed head: %v", err)
	}
	d.Cursor = Pos{Epoch: c.lowest}
	if st.HasCursor {
		prev := st.Cursor
		d.prev = &prev
		if d.Cursor, err = c.norm(st.Cursor); err != nil {
			return d, cycle.Haltf("trim cursor: %v", err)
		}
		if d.Head.Less(d.Cursor) {
			return d, cycle.Haltf("star %q: trim cursor %s is past the absorbed head %s", st.Star.Star, d.Cursor, d.Head)
		}
	}
	d.Bound = d.Head
	if e, since, ok := c.fenceWait(); ok {
		d.FenceWait = &FenceWait{Epoch: e.Epoch, Since: since}
		d.Bound = minPos(d.Bound, Pos{Epoch: e.Epoch})
	}
	if st.RefMin != nil {
		r, err := c.slot(st.RefMin.Slot)
		if err != nil {
			return d, cycle.Haltf("ref %s@%d: %v", st.RefMin.Stream, st.RefMin.FirstRecord, err)
		}
		if r.Less(d.Cursor) {
			return d, cycle.Haltf("star %q: ref %s@%d names slot %s, behind the trim cursor %s: a released slot is still needed",
				st.Star.Star, st.RefMin.Stream, st.RefMin.FirstRecord, r, d.Cursor)
		}
		d.Bound = minPos(d.Bound, r)
	}
	if q := st.QuarantineMin; q != nil {
		slot, err := c.slot(q.Slot)
		if err != nil {
			return d, cycle.Haltf("ref %s@%d: %v", q.Stream, q.FirstRecord, err)
		}
		d.Quarantine = &QuarantineHold{Slot: slot, Stream: q.Stream, Record: q.FirstRecord, Streams: st.QuarantinedStreams,
			Bounding: slot == d.Bound}
	}
	if d.Cursor.Less(d.Bound) {
		d.Move = true
		if d.Slots, err = c.count(d.Cursor, d.Bound); err != nil {
			return d, err
		}
	}
	return d, nil
}

// Trim is step 6 of the cycle: it moves the star's trim cursor to its bound
// and arms the passed slots for reaping after the grace.
type Trim struct {
	d  Deps
	db CursorCatalog
	c  Config

	// mu guards what was last logged, so a hold or a fence wait that
	// lasts many cycles is logged at warn once when it starts, then at
	// debug, and at info once when it ends.
	mu        sync.Mutex
	held      string // the bounding quarantine hold last logged ("" none)
	fenceWait int64  // the epoch of the fence wait last logged (0 none)
}

// ResetLeaderGauges resets the trim gauges when the daemon stops leading
// (see Metrics.ResetLeaderGauges).
func (t *Trim) ResetLeaderGauges() { t.d.Metrics.ResetLeaderGauges() }

var _ cycle.Step = (*Trim)(nil)

// NewTrim returns the trim step.
func NewTrim(d Deps, c Config) (*Trim, error) {
	d.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if d.DB == nil {
		return nil, errors.New("trim: no database")
	}
	return &Trim{d: d, db: d.DB, c: c}, nil
}

// Name implements cycle.Step.
func (t *Trim) Name() string { return "trim" }

// logHolds logs a fence wait and a quarantine hold once per change (the
// metrics show them every cycle).
func (t *Trim) logHolds(star string, dec Decision) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var epoch int64
	if w := dec.FenceWait; w != nil {
		epoch = w.Epoch
		level := slog.LevelDebug
		if epoch != t.fenceWait {
			level = slog.LevelWarn
		}
		t.d.Log.Log(context.Background(), level, "trim waits at a fence in progress", "star", star, "epoch", w.Epoch, "since", w.Since)
	} else if t.fenceWait != 0 {
		t.d.Log.Info("trim no longer waits at a fence", "star", star, "epoch", t.fenceWait)
	}
	t.fenceWait = epoch
	held := ""
	if q := dec.Quarantine; q != nil && q.Bounding {
		held = q.Slot.String() + " " + q.Stream.String()
		level := slog.LevelDebug
		if held != t.held {
			level = slog.LevelWarn
		}
		t.d.Log.Log(context.Background(), level, "trim held by quarantine", "star", star, "slot", q.Slot.String(), "stream", q.Stream)
	} else if t.held != "" {
		t.d.Log.Info("trim no longer held by quarantine", "star", star, "was", t.held)
	}
	t.held = held
}

// Run implements cycle.Step.
func (t *Trim) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	var counts cycle.Counts
	st, err := t.db.TrimState(ctx, f.Star)
	if err != nil {
		return counts, err
	}
	dec, err := Decide(st)
	if err != nil {
		return counts, fmt.Errorf("trim star %q: %w", f.Star, err)
	}
	t.d.Metrics.observeDecision(dec, st.Now)
	t.logHolds(f.Star, dec)
	if w := dec.FenceWait; w != nil {
		plan(opts, "trim: star %s waits at epoch %d: its fence is in progress since %s (no end_seq)", f.Star, w.Epoch, w.Since.UTC().Format(time.RFC3339))
	}
	if q := dec.Quarantine; q != nil && q.Bounding {
		plan(opts, "trim: star %s held by quarantined stream %s at slot %s", f.Star, q.Stream, q.Slot)
	}
	if !dec.Move {
		plan(opts, "trim: star %s cursor stays at %s (bound %s)", f.Star, dec.Cursor, dec.Bound)
		return counts, nil
	}
	if opts.DryRun {
		plan(opts, "trim: star %s would move its cursor %s -> %s, releasing %d slots (%s .. %s), reaped after %s",
			f.Star, dec.Cursor, dec.Bound, dec.Slots, slotKey(f.Star, dec.Cursor), lastKey(f.Star, dec.Bound, st.Epochs), t.c.ReapGrace)
		return counts, nil
	}
	r, err := t.db.AdvanceTrim(ctx, f, dec.prev, dec.Cursor, dec.Bound, t.c.ReapGrace)
	if err != nil {
		if errors.Is(err, catalog.ErrInvariant) {
			return counts, cycle.Haltf("%w", err)
		}
		return counts, err
	}
	t.d.crash(CrashTrimCommitted)
	t.d.Metrics.slotsReleased(dec.Slots)
	t.d.Log.Info("trim cursor moved", "star", f.Star, "from", dec.Cursor.String(), "to", dec.Bound.String(),
		"slots", dec.Slots, "reap_after", r.ReapAfter)
	return counts, nil
}

func slotKey(star string, p Pos) string {
	return bundlefmt.SlotKey(star, uint64(p.Epoch), uint64(p.Seq))
}

// lastKey names the slot just before the normalised position p.
func lastKey(star string, p Pos, epochs []catalog.StarEpoch) string {
	if p.Seq > 0 {
		return slotKey(star, Pos{Epoch: p.Epoch, Seq: p.Seq - 1})
	}
	for _, e := range epochs {
		if e.Epoch == p.Epoch-1 && e.EndSeq != nil && *e.EndSeq > 0 {
			return slotKey(star, Pos{Epoch: e.Epoch, Seq: *e.EndSeq - 1})
		}
	}
	return "(none)"
}

// Status is what `auditor status` shows of trim and reap.
type Status struct {
	Decision
	Backlog Backlog
	// Lag is the number of slots between the trim cursor and the absorbed
	// head: what transit holds that trim has not released. An epoch whose
	// fence is in progress (no end_seq yet) counts nothing.
	Lag int64
}

// Backlog is what is armed and not yet reaped.
type Backlog struct {
	SlotsDue, SlotsWaiting     int64
	ObjectsDue, ObjectsWaiting int64
}

// ReadStatus reads a star's trim and reap state (read only, no lease).
func ReadStatus(ctx context.Context, db StatusCatalog, star string, grace time.Duration) (Status, error) {
	var s Status
	st, err := db.TrimState(ctx, star)
	if err != nil {
		return s, err
	}
	if s.Decision, err = Decide(st); err != nil {
		return s, err
	}
	c, err := newChain(st.Star, st.Epochs)
	if err != nil {
		return s, err
	}
	s.Lag = c.lag(s.Cursor, s.Head)
	if s.Backlog, err = readBacklog(ctx, db, star, grace); err != nil {
		return s, err
	}
	return s, nil
}

// lag counts the slots of [from, to) like count, skipping the epochs
// whose end is not known yet (a fence in progress) instead of failing.
func (c chain) lag(from, to Pos) int64 {
	var n int64
	for e := from.Epoch; e <= to.Epoch; e++ {
		first, end := int64(0), to.Seq
		if e == from.Epoch {
			first = from.Seq
		}
		if e < to.Epoch {
			var ok bool
			if end, ok = c.endSeq(e); !ok {
				continue
			}
		}
		n += max(0, end-first)
	}
	return n
}

// Viewer is trim's view of a star for status and the daemon's gauges
// (catalog.TrimView): ReadStatus, shown as it decides.
type Viewer struct{ DB StatusCatalog }

// View reads the star's trim view (read only, no lease). An error wrapping
// catalog.ErrNotFound means the star has no trim state yet.
func (v Viewer) View(ctx context.Context, star string, reapGrace time.Duration) (catalog.TrimView, error) {
	ts, err := ReadStatus(ctx, v.DB, star, reapGrace)
	if err != nil {
		return catalog.TrimView{}, err
	}
	out := catalog.TrimView{Cursor: ts.Cursor, Bound: ts.Bound, Head: ts.Head, Releasable: ts.Slots, Lag: ts.Lag,
		SlotsDue: ts.Backlog.SlotsDue, SlotsWaiting: ts.Backlog.SlotsWaiting,
		ObjectsDue: ts.Backlog.ObjectsDue, ObjectsWaiting: ts.Backlog.ObjectsWaiting}
	if w := ts.FenceWait; w != nil {
		out.FenceWait = &catalog.TrimFenceWait{Epoch: w.Epoch, Since: w.Since}
	}
	if q := ts.Quarantine; q != nil {
		out.Hold = &catalog.TrimHold{Slot: q.Slot, Stream: q.Stream, Record: q.Record, Streams: q.Streams, Bounding: q.Bounding}
	}
	return out, nil
}

func readBacklog(ctx context.Context, db StatusCatalog, star string, grace time.Duration) (Backlog, error) {
	var b Backlog
	c, err := loadChain(ctx, db, star)
	if err != nil {
		return b, err
	}
	reaps, err := db.SlotReaps(ctx, star)
	if err != nil {
		return b, err
	}
	for _, r := range reaps {
		n, err := c.count(r.From, r.To)
		if err != nil {
			return b, err
		}
		if r.Due {
			b.SlotsDue += n
		} else {
			b.SlotsWaiting += n
		}
	}
	ob, err := db.ObjectReapBacklog(ctx, star, grace)
	if err != nil {
		return b, err
	}
	b.ObjectsDue, b.ObjectsWaiting = ob.ObjectsDue, ob.ObjectsWaiting
	return b, nil
}

// loadChain reads a star's chain in one snapshot (a fence changes the star
// and its epochs in one transaction).
func loadChain(ctx context.Context, db StatusCatalog, star string) (chain, error) {
	st, err := db.TrimState(ctx, star)
	if err != nil {
		return chain{}, err
	}
	return newChain(st.Star, st.Epochs)
}
