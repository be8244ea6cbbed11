package trim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// StrayConfig is the strays step's policy (docs/architecture.md#strays).
type StrayConfig struct {
	// Guard is how old a stray must be, by the database clock, before the
	// sweep arms its reap (--stray-guard); it must exceed the reap grace.
	Guard time.Duration
	// Every is how long after the star's last sweep the next one is due
	// (--stray-sweep-every); 0: only when a cycle asks (SweepStrays).
	Every time.Duration
	// ListConcurrency is how many streams' settled prefixes are listed at
	// once (DefaultStrayListConcurrency: it has no configuration key).
	ListConcurrency int
	// MaxArmed bounds the strays past the guard one sweep holds and arms
	// (DefaultMaxArmedStrays): a sweep that finds more arms these and is
	// not recorded, so the next cycle sweeps again.
	MaxArmed int
}

// Defaults of the StrayConfig fields that have no configuration key.
const (
	DefaultStrayListConcurrency = 16
	DefaultMaxArmedStrays       = 100000
)

// Validate checks the policy against the reap's (c): the guard must exceed
// the reap grace.
func (s StrayConfig) Validate(c Config) error {
	var errs []error
	if s.Guard <= c.ReapGrace {
		errs = append(errs, fmt.Errorf("strays config: Guard: %s must exceed ReapGrace (%s)", s.Guard, c.ReapGrace))
	}
	if s.Every < 0 {
		errs = append(errs, fmt.Errorf("strays config: Every: %s is negative", s.Every))
	}
	if s.ListConcurrency < 1 || s.MaxArmed < 1 {
		errs = append(errs, fmt.Errorf("strays config: ListConcurrency %d and MaxArmed %d must be at least 1", s.ListConcurrency, s.MaxArmed))
	}
	return errors.Join(errs...)
}

// SweepCatalog is the strays step's part of the metastore: what finding
// strays reads, when the star was last swept, and the fenced arming of
// the strays' reaps.
type SweepCatalog interface {
	StrayCatalog
	StraySweepDue(ctx context.Context, star string, every time.Duration) (bool, error)
	ArmStrayReaps(ctx context.Context, f catalog.Fence, keys []catalog.ListedKey) ([]string, error)
	ArmSlotStrays(ctx context.Context, f catalog.Fence, ranges []catalog.SlotRange) ([]catalog.SlotRange, error)
	RecordStraySweep(ctx context.Context, f catalog.Fence) error
}

// Strays is the strays step of the cycle (after erase, before trim): when
// the star's last sweep is Every old (or the cycle asks), it finds the
// strays (FindStrays) and, for each one older than the guard, arms a reap
// the cycle's reap step carries out: a reap intent, due now, for a
// settled key (the reap buries and deletes it: no late delete), a
// slot_reaps row for a run of stray slots behind the cursor. It deletes
// nothing itself. A listing that fails arms nothing.
type Strays struct {
	d  Deps
	db SweepCatalog
	c  Config
	s  StrayConfig
	rd *bundle.Reader
}

var _ cycle.Step = (*Strays)(nil)

// NewStrays returns the strays step.
func NewStrays(d Deps, c Config, s StrayConfig) (*Strays, error) {
	d.defaults()
	if err := errors.Join(c.Validate(), s.Validate(c)); err != nil {
		return nil, err
	}
	switch {
	case d.DB == nil:
		return nil, errors.New("strays: no database")
	case d.Topology == nil:
		return nil, errors.New("strays: no storage topology")
	}
	return &Strays{d: d, db: d.DB, c: c, s: s, rd: bundle.NewReader(d.Topology)}, nil
}

// Name implements cycle.Step.
func (s *Strays) Name() string { return "strays" }

// ResetLeaderGauges resets the strays found (see Metrics.ResetLeaderGauges).
func (s *Strays) ResetLeaderGauges() { s.d.Metrics.ResetLeaderGauges() }

// Run implements cycle.Step. A listing that fails is a partial failure:
// the cycle's trim and reap still run, the sweep is not recorded and the
// retried cycle sweeps again.
func (s *Strays) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	var counts cycle.Counts
	if !opts.SweepStrays {
		due, err := s.db.StraySweepDue(ctx, f.Star, s.s.Every)
		if err != nil || !due {
			return counts, err
		}
	}
	var (
		keys    []catalog.ListedKey
		slots   []Pos
		young   int
		unswept int
		over    int
	)
	found, now, err := FindStrays(ctx, s.db, s.rd, f.Star, s.s.ListConcurrency, func(st Stray) error {
		switch {
		case st.Unswept != "":
			unswept++
			s.d.Log.Warn("stray never swept: look at it", "star", f.Star, "bucket", st.Bucket, "key", st.Key, "why", st.Unswept, "age", st.Age)
		case st.Age <= s.s.Guard:
			young++
		case len(keys)+len(slots) >= s.s.MaxArmed:
			over++
		case st.Kind == StraySettled:
			keys = append(keys, catalog.ListedKey{Key: st.Key, Coords: st.coords})
		default:
			slots = append(slots, st.slot)
		}
		return nil
	})
	counts.S3Requests += int64(found.Streams + found.Buckets)
	if err != nil {
		if !errors.Is(err, ErrListing) || ctx.Err() != nil {
			return counts, err
		}
		s.d.Log.Warn("stray sweep: a listing failed, nothing swept", "star", f.Star, "err", err)
		return counts, &cycle.PartialError{Err: fmt.Errorf("sweep the strays of star %q: %w", f.Star, err)}
	}
	s.d.Metrics.straysFound(found)
	if len(found.HeldOff) > 0 {
		// Their slots wait for the next sweep; the sweep of the rest is
		// recorded, so an outage does not make every cycle list the star.
		s.d.Log.Warn("stray sweep: the chain not listed in a zone held off", "star", f.Star, "buckets", found.HeldOff)
	}
	st, err := s.db.TrimState(ctx, f.Star)
	if err != nil {
		return counts, err
	}
	c, err := newChain(st.Star, st.Epochs)
	if err != nil {
		return counts, err
	}
	ranges, err := slotRanges(c, slots)
	if err != nil {
		return counts, cycle.Haltf("star %q: stray slots: %v", f.Star, err)
	}
	if opts.DryRun {
		plan(opts, "strays: star %s: %d settled and %d slot strays (%d unparseable) in %d streams and %d buckets; would arm %d settled keys and %d slot ranges (%d strays younger than %s, %d never swept)",
			f.Star, found.Settled, found.Slots, found.Unparsed, found.Streams, found.Buckets, len(keys), len(ranges), young, s.s.Guard, unswept)
		return counts, nil
	}
	armedKeys, armedSlots, err := s.arm(ctx, f, c, keys, ranges)
	if err != nil {
		return counts, err
	}
	if over == 0 {
		if err := s.db.RecordStraySweep(ctx, f); err != nil {
			return counts, err
		}
	}
	level := s.d.Log.Debug
	if found.Settled+found.Slots > 0 {
		level = s.d.Log.Info
	}
	level("strays swept", "star", f.Star, "streams", found.Streams, "settled", found.Settled, "slots", found.Slots,
		"unparsed", found.Unparsed, "armed_keys", armedKeys, "armed_slots", armedSlots, "younger_than_guard", young,
		"never_swept", unswept, "left_for_next_sweep", over, "db_now", now)
	return counts, nil
}

// arm arms the settled keys' reaps and the slot ranges, a batch per
// fenced transaction; it returns how many keys and slots it armed.
func (s *Strays) arm(ctx context.Context, f catalog.Fence, c chain, keys []catalog.ListedKey, ranges []catalog.SlotRange) (int, int64, error) {
	var nk int
	for i := 0; i < len(keys); i += s.c.BatchSize {
		got, err := s.db.ArmStrayReaps(ctx, f, keys[i:min(i+s.c.BatchSize, len(keys))])
		if err != nil {
			return nk, 0, err
		}
		nk += len(got)
		s.d.Metrics.straysArmed(StraySettled, len(got))
		s.d.crash(CrashStraysArmed)
	}
	var ns int64
	for i := 0; i < len(ranges); i += s.c.BatchSize {
		got, err := s.db.ArmSlotStrays(ctx, f, ranges[i:min(i+s.c.BatchSize, len(ranges))])
		if err != nil {
			return nk, ns, err
		}
		var n int64
		for _, r := range got {
			k, err := c.count(r.From, r.To)
			if err != nil {
				return nk, ns, err
			}
			n += k
		}
		ns += n
		s.d.Metrics.straysArmed(StraySlot, int(n))
		s.d.crash(CrashStraysArmed)
	}
	return nk, ns, nil
}
