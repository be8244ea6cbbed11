package settle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Erasure (docs/architecture.md#erasure). Two copiers honour the pending
// erasures of a stream, both through the planner and the publish path of
// settling:
//
//   - settle re-encodes, with tombstones, every chunk it is about to write
//     that holds a pending erasure's records (new chunks from transit, and
//     the standing tail a tail rewrite copies), so no object it publishes
//     carries their bytes: it reads the erasures of each stream over the
//     records it writes (deadReader), all of them;
//   - the erasure step (Eraser) rewrites every cataloged object that still
//     holds them at a higher revision, copying the clean chunks server side and
//     uploading the re-encoded ones, repoints the catalog entry with the
//     revision check, arms the old revision's reap, and sets applied_at
//     once nothing settled can hold the bytes (catalog.Erasures.ApplyErasure) and
//     no bucket keeps what a DELETE removes (cycle.Options.ErasureHold). It
//     reads a bounded window of each stream's erasures a cycle
//     (Config.MaxPendingErasures, dealt round-robin over the streams), and
//     rewrites an object only under all the erasures that name its records.
//
// Both copiers write an object under every erasure pending when they read
// them, so a second attempt at the same key plans at least the tombstones
// the first did: adoption accepts a standing object made under fewer
// erasures, not one made under more. Erasures recorded after a cycle's
// settle step read them are honoured by that cycle's (or a later one's)
// erasure step: the object settled meanwhile is rewritten.

// Eraser is the erasure step of the cycle (docs/architecture.md#the-cycle,
// step 4): it runs after retention and before strays and trim, and shares the
// settler's store, planner and publish path.
type Eraser struct{ s *Settler }

var _ cycle.Step = (*Eraser)(nil)

// Eraser returns the erasure step that rewrites what this settler published.
func (s *Settler) Eraser() *Eraser { return &Eraser{s: s} }

// Name implements cycle.Step.
func (e *Eraser) Name() string { return "erase" }

// Run rewrites, for the pending erasures of the star it reads this cycle,
// each cataloged object that holds their records, then applies those
// nothing holds any more. It reads at most MaxPendingErasures, dealt
// round-robin over the streams (catalog.Erasures.PendingErasureWindows), so a
// stream with a flood of erasures never hides the others'; a stream whose
// erasures did not all fit goes on next cycle. A stream in quarantine is
// left alone (its erasures wait for the release); a malformed erasure row
// is reported and skipped.
func (e *Eraser) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	return counted(ctx, func(ctx context.Context) (cycle.Counts, error) { return e.run(ctx, f, opts) })
}

func (e *Eraser) run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	s := e.s
	var total cycle.Counts
	wins, err := s.d.DB.PendingErasureWindows(ctx, f.Star, s.c.MaxPendingErasures)
	if err != nil || len(wins) == 0 {
		return total, err
	}
	intents, err := s.d.DB.Intents(ctx, f.Star, "publish", s.c.ReapGrace)
	if err != nil {
		return total, err
	}
	open := make(map[catalog.KeyBase][]catalog.Intent, len(intents)) // the open publish intents by key base
	for _, in := range intents {
		if k, err := bundlefmt.ParseSettledKey(in.ObjectKey); err == nil {
			b := catalog.KeyBase{Stream: k.Stream, Epoch: int64(k.StreamEpoch), FirstRecord: int64(k.FirstRecord)}
			open[b] = append(open[b], in)
		}
	}
	var (
		mu       sync.Mutex
		firstErr error
	)
	hold := newHoldGate(opts.ErasureHold)
	clock := &dbClock{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.c.Concurrency)
	for _, w := range wins {
		g.Go(func() error {
			c, err := e.eraseStream(gctx, f, w, open, hold, clock, opts)
			mu.Lock()
			total.Add(c)
			mu.Unlock()
			return s.streamFailed(gctx, f, w.Stream, err, opts, &total, &mu, &firstErr)
		})
	}
	if err := g.Wait(); err != nil {
		return total, err
	}
	if why := hold.held(); why != "" {
		s.d.Log.Warn("erasures not marked applied: a DELETE may leave the bytes", "why", why)
	}
	if firstErr != nil {
		return total, &cycle.PartialError{Err: firstErr}
	}
	return total, nil
}

// holdGate asks cycle.Options.ErasureHold once per run, when the first
// erasure is about to be marked applied, and keeps the answer for the
// run's other streams.
type holdGate struct {
	ask  func(context.Context) string
	once sync.Once
	why  string
}

func newHoldGate(ask func(context.Context) string) *holdGate { return &holdGate{ask: ask} }

// check is why no erasure may be marked applied ("" when they may).
func (h *holdGate) check(ctx context.Context) string {
	h.once.Do(func() {
		if h.ask != nil {
			h.why = h.ask(ctx)
		}
	})
	return h.why
}

// held is the answer once the run's streams are done: "" when it was
// never asked or nothing holds.
func (h *holdGate) held() string { return h.why }

// eraseStream rewrites the stream's cataloged objects that hold records of
// the pending erasures of its window and applies those nothing holds any
// more.
//
// An object is rewritten only under every pending erasure that names its
// records, never a part cut off by the window: so it is rewritten once for
// them all, and an attempt made again after a crash plans at least the
// tombstones the first did (what adoption accepts). The window holds every
// pending erasure that starts below its ExactBelow; when that falls inside
// a settled object, the rest of that object's erasures are read too
// (bounded by the object's records), and the records from there on wait
// for a later window: nothing there is rewritten or applied this cycle.
func (e *Eraser) eraseStream(ctx context.Context, f catalog.Fence, w catalog.ErasureWindow,
	open map[catalog.KeyBase][]catalog.Intent, hold *holdGate, clock *dbClock, opts cycle.Options) (cycle.Counts, error) {
	s := e.s
	var counts cycle.Counts
	ers := s.validErasures(w.Erasures, nil)
	st, err := s.d.DB.Stream(ctx, w.Stream)
	if err != nil {
		return counts, err
	}
	ers, exact, err := e.wholeLastObject(ctx, st, ers, w.ExactBelow())
	if err != nil {
		return counts, err
	}
	if len(ers) == 0 {
		return counts, nil
	}
	// Below limit, dead is every record a pending erasure names (as read).
	limit := uint64(max(min(st.SettledThrough, exact), 0))
	dead := newDeadSet(ers)
	clean, dirty, err := e.rewriteDead(ctx, f, st, dead, limit, open, opts, &counts)
	if err != nil {
		return counts, err
	}
	if opts.DryRun {
		return counts, nil
	}
	err = e.applyErasures(ctx, f, st, ers, limit, clean, dirty, hold, clock, &counts)
	return counts, err
}

// validErasures appends to into the erasures of es that are well formed,
// and reports each malformed row (never applied) so an operator corrects
// or deletes it rather than it stalling the stream's erasures.
func (s *Settler) validErasures(es []catalog.Erasure, into []catalog.Erasure) []catalog.Erasure {
	for _, er := range es {
		if why := er.Valid(); why != "" {
			s.d.Log.Error("malformed erasure row: never applied; correct or delete it",
				"stream", er.Stream, "first_record", er.FirstRecord, "record_count", er.RecordCount, "why", why)
			continue
		}
		into = append(into, er)
	}
	return into
}

// wholeLastObject widens the window's erasures ers, which are all the
// pending erasures that start below exact, to the end of the settled
// object that holds record exact-1 when the window ends inside it: it adds
// that object's other pending erasures and returns the object's end as the
// new exact, so eraseStream never rewrites an object under part of its
// erasures.
func (e *Eraser) wholeLastObject(ctx context.Context, st catalog.Stream, ers []catalog.Erasure,
	exact int64) ([]catalog.Erasure, int64, error) {
	s := e.s
	if exact > 0 && exact < st.SettledThrough {
		// The window ends inside the stream's settled records: the object
		// holding its last first record is rewritten with all of its
		// erasures, or not at all.
		ens, err := s.d.DB.EntriesIntersecting(ctx, st.ID, st.Epoch, exact-1, exact)
		if err != nil {
			return ers, exact, err
		}
		if len(ens) == 1 && ens[0].EndRecord() > exact {
			more, err := s.d.DB.PendingErasuresIn(ctx, st.ID, exact, exact, ens[0].EndRecord())
			if err != nil {
				return ers, exact, err
			}
			ers, exact = s.validErasures(more, ers), ens[0].EndRecord()
		}
	}
	return ers, exact, nil
}

// rewriteDead rewrites (rewriteEntry) each cataloged entry below limit that
// holds a dead record, once each, and sorts the entries it read into those
// now known clean (at the revision given) and the dirty spans that still
// may hold dead bytes, which applyErasures must not apply erasures over.
func (e *Eraser) rewriteDead(ctx context.Context, f catalog.Fence, st catalog.Stream, dead deadSet, limit uint64,
	open map[catalog.KeyBase][]catalog.Intent, opts cycle.Options, counts *cycle.Counts) ([]catalog.EntryRevision, []span, error) {
	s := e.s
	var clean []catalog.EntryRevision
	seen := map[int64]bool{}
	var dirty []span // entries read this pass and not (yet) clean
	for _, sp := range dead {
		to := min(sp.to, limit)
		if sp.from >= to {
			continue // not settled yet (settle tombstones these records when it writes them), or a later window's
		}
		entries, err := s.d.DB.EntriesIntersecting(ctx, st.ID, st.Epoch, int64(sp.from), int64(to))
		if err != nil {
			return clean, dirty, err
		}
		for _, en := range entries {
			if seen[en.FirstRecord] {
				continue
			}
			seen[en.FirstRecord] = true
			if uint64(en.EndRecord()) > limit {
				// Holds records past what the window knows all erasures of
				// (the cut is at an entry's end, so only if the catalog
				// moved meanwhile): not rewritten under part of them; a
				// later cycle's.
				dirty = append(dirty, span{uint64(en.FirstRecord), uint64(en.EndRecord())})
				continue
			}
			rev, ok, err := e.rewriteEntry(ctx, f, st, en, dead, open, opts, counts)
			if err != nil {
				return clean, dirty, err
			}
			if ok {
				clean = append(clean, catalog.EntryRevision{FirstRecord: en.FirstRecord, Revision: rev})
			} else {
				dirty = append(dirty, span{uint64(en.FirstRecord), uint64(en.EndRecord())})
			}
		}
	}
	return clean, dirty, nil
}

// applyErasures marks applied each erasure wholly below limit whose
// records no dirty entry holds (ApplyErasure checks all again, with the
// entries made clean this pass), unless a bucket keeps what a DELETE
// removes (hold) or a stray holds its records (erase_strays.go: the
// stream's settled prefix is listed once, when the first erasure gets
// that far; the strays past the guard get their reaps armed).
func (e *Eraser) applyErasures(ctx context.Context, f catalog.Fence, st catalog.Stream, ers []catalog.Erasure, limit uint64,
	clean []catalog.EntryRevision, dirty []span, hold *holdGate, clock *dbClock, counts *cycle.Counts) error {
	s := e.s
	keyLow := bundle.SettledPrefix(st) // every settled key of the stream sorts at or after it
	var (
		strays []settledStray
		listed bool
		arm    = map[string]catalog.ListedKey{}
	)
	for _, er := range ers {
		if uint64(er.EndRecord()) > limit || overlapsAny(dirty, uint64(er.FirstRecord), uint64(er.EndRecord())) {
			continue // cannot apply yet: no transaction to find that out (ApplyErasure checks all again)
		}
		if hold.check(ctx) != "" {
			continue // the deletes may have left the bytes: never applied while a bucket keeps them
		}
		if !listed {
			var err error
			if strays, err = e.streamStrays(ctx, st, clock); err != nil {
				return err
			}
			listed = true
		}
		if e.strayHolds(st, er, strays, arm) {
			continue
		}
		keyEnd := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), uint64(er.EndRecord()), 0)
		applied, err := s.d.DB.ApplyErasure(ctx, f, er, clean, keyLow, keyEnd)
		if err != nil {
			return err
		}
		if applied {
			counts.ErasuresApplied++
			s.d.Log.Info("erasure applied", "stream", st.ID, "first_record", er.FirstRecord, "record_count", er.RecordCount)
			s.crash(CrashEraseAfterApplied)
		}
	}
	return e.armStrays(ctx, f, st, arm)
}

// armStrays arms the reaps of the strays that hold a pending erasure's
// records and are older than the guard, in one fenced transaction that
// checks again that nothing names them (catalog.Trim.ArmStrayReaps).
func (e *Eraser) armStrays(ctx context.Context, f catalog.Fence, st catalog.Stream, arm map[string]catalog.ListedKey) error {
	if len(arm) == 0 {
		return nil
	}
	s := e.s
	keys := make([]catalog.ListedKey, 0, len(arm))
	for _, k := range slices.Sorted(maps.Keys(arm)) {
		keys = append(keys, arm[k])
	}
	armed, err := s.d.DB.ArmStrayReaps(ctx, f, keys)
	if err != nil {
		return err
	}
	for _, k := range armed {
		s.d.Metrics.erasureStray("armed")
		s.d.Log.Info("stray armed for reaping: its records wait on an erasure", "stream", st.ID, "key", k, "guard", s.c.StrayGuard)
	}
	return nil
}

// rewriteEntry makes one cataloged object hold tombstones for the dead
// records: it reads the entry's footer and the chunks that hold dead
// records and, when any of those still holds bytes, publishes the rewrite
// above the entry's revision (clean chunks copied from the object itself) and repoints
// the entry. It reports the revision the entry is at and whether that
// revision is known to hold no dead record's bytes.
func (e *Eraser) rewriteEntry(ctx context.Context, f catalog.Fence, st catalog.Stream, en catalog.Entry, dead deadSet,
	open map[catalog.KeyBase][]catalog.Intent, opts cycle.Options, counts *cycle.Counts) (int32, bool, error) {
	s := e.s
	sid := st.ID
	base := catalog.KeyBase{Stream: st.ID, Epoch: en.Epoch, FirstRecord: en.FirstRecord}
	if len(open[base]) > 0 && en.EndRecord() == st.SettledThrough && st.SettledThrough < st.NextRecord {
		// Settle's tail rewrite of this entry is in flight (it honours the
		// erasure): it adopts or abandons that key; this waits for it.
		return en.Revision, false, nil
	}
	t, err := s.readEntry(ctx, st, en)
	if err != nil {
		return en.Revision, false, err
	}
	nt, err := s.scrubTail(ctx, t, dead)
	if err != nil {
		return en.Revision, false, err
	}
	if nt.Tombstoned == 0 {
		// Clean already (settle tombstoned the records when it rewrote the
		// entry), so this step publishes nothing here. An intent open above
		// the entry's revision is then no work of anyone's: settle's tail
		// rewrite given up when a later settle started a new object behind
		// the entry (it is not the last any more), or this step's own
		// rewrite of an entry that no longer needs one. recoverIntents keeps
		// it live while the erasure is pending, and the erasure is not
		// applied while it is open: buried here, or each would wait for
		// the other for good.
		if err := e.buryAbove(ctx, f, en, open[base], opts); err != nil {
			return en.Revision, false, err
		}
		return en.Revision, true, nil
	}
	in := PlanInput{Stream: sid, Bucket: st.Bucket, StreamEpoch: uint64(en.Epoch), CapBytes: s.c.CapBytes, TargetBytes: s.c.TargetBytes}
	o, err := buildOutput(in, t.FirstRecord, t.Revision+1, nt, nil, MeterAll(nt.Entries))
	if err != nil {
		return en.Revision, false, fmt.Errorf("plan the erasure rewrite of %s: %w", t.Key, err)
	}
	if opts.DryRun {
		s.printPlan(opts.Plan, st, []Output{o}, true)
		return en.Revision, false, nil
	}
	p, intentID, err := e.publishRewrite(ctx, f, o, knownEntries(nt, nil))
	if err != nil {
		return en.Revision, false, err
	}
	return e.commitRewrite(ctx, f, st, en, t, o, p, intentID, counts)
}

// publishRewrite publishes o, the erasure rewrite of an entry made of the
// chunks known, through the publish path; when the key's standing object
// is another plan's (errBeyondKnown) it buries that key and publishes
// again, once, so a given-up tail rewrite never blocks the erasure.
func (e *Eraser) publishRewrite(ctx context.Context, f catalog.Fence, o Output, known []knownChunk) (*published, int64, error) {
	s := e.s
	p, intentID, err := s.publish(ctx, f, o, known, erasePoints)
	if errors.Is(err, errBeyondKnown) && !s.d.Mutations.EraseTakesUpTailRewrite {
		// The key's standing object runs past the entry's records, so no
		// attempt of this rewrite made it (each covers exactly the entry):
		// it is settle's tail rewrite of the entry, given up when a later
		// settle (under a lower cap) started a new object behind the entry,
		// its intent kept open by the pending erasure. Its key is buried
		// (the intent becomes a reap; the catalog never references it) and
		// the rewrite opens at the next revision. Only once: a key above
		// the base's high-water holds no object.
		key := o.Key
		if q, ok := cycle.AsQuarantine(err); ok && q.Condemn != "" {
			key = q.Condemn // the intent's key, above the planned one when the base used that
		}
		s.d.Log.Info("burying another plan's standing object at an erasure rewrite's key", "key", key, "intent", intentID, "err", err)
		if err := s.d.DB.AbandonPublish(ctx, f, intentID, s.c.ReapGrace); err != nil {
			return p, intentID, err
		}
		p, intentID, err = s.publish(ctx, f, o, known, erasePoints)
	}
	return p, intentID, err
}

// commitRewrite repoints the entry en (its object t) at p, the published
// rewrite o, once p is checked to cover exactly the rewrite's records, and
// counts it. It reports the revision the entry is at and whether that
// revision is known to hold no dead record's bytes (rewriteEntry's result).
func (e *Eraser) commitRewrite(ctx context.Context, f catalog.Fence, st catalog.Stream, en catalog.Entry, t *Tail, o Output,
	p *published, intentID int64, counts *cycle.Counts) (int32, bool, error) {
	s := e.s
	if p.end() != o.EndRecord() {
		return en.Revision, false, &cycle.QuarantineError{SlotKey: p.key, Class: cycle.ClassAdoption, Condemn: p.key,
			Err: fmt.Errorf("standing %s covers records [%d, %d), the rewrite of %s [%d, %d)",
				p.key, p.first, p.end(), t.Key, o.FirstRecord, o.EndRecord())}
	}
	commit := catalog.RewriteCommit{Entry: p.catalogEntry(st.ID, st.Epoch), PrevRevision: en.Revision, IntentID: intentID,
		ObjectKey: p.key, OldKey: t.Key, ReapGrace: s.c.ReapGrace}
	s.crash(erasePoints.beforeCommit)
	if err := s.d.DB.CommitRewrite(ctx, f, commit); err != nil {
		return en.Revision, false, err
	}
	s.crash(erasePoints.afterCommit)
	counts.ObjectsRewritten++
	counts.RecordsTombstoned += int64(o.Tombstoned)
	s.d.Log.Info("erasure rewrite committed", "old", t.Key, "new", p.key, "tombstoned", o.Tombstoned, "adopted", p.adopted)
	// An adopted object may be a rewrite made under fewer erasures: the
	// next cycle reads it again before the erasure is applied.
	return int32(p.revision), !p.adopted, nil
}

// buryAbove abandons the open publish intents at the entry's key base
// above its revision (their objects are reaped after the grace; the
// catalog never references them).
func (e *Eraser) buryAbove(ctx context.Context, f catalog.Fence, en catalog.Entry, open []catalog.Intent, opts cycle.Options) error {
	s := e.s
	for _, in := range open {
		k, err := bundlefmt.ParseSettledKey(in.ObjectKey)
		if err != nil || int64(k.Revision) <= int64(en.Revision) || opts.DryRun {
			continue
		}
		s.d.Log.Info("burying a rewrite of an entry that is clean already", "key", in.ObjectKey, "intent", in.ID, "entry_revision", en.Revision)
		if err := s.d.DB.AbandonPublish(ctx, f, in.ID, s.c.ReapGrace); err != nil {
			return err
		}
	}
	return nil
}
