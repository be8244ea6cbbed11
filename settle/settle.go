package settle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/pendingobj"
)

// Store is what settling writes to the object store (objstore.Store has
// it): assemblies and their uploads. Every read of a stored bundle goes
// through a bundle.Reader instead.
type Store interface {
	Head(ctx context.Context, bucket, key string) (objstore.Attrs, error)
	Assemble(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error)
	AbortAssembly(ctx context.Context, bucket, key, uploadID string) error
	ListAssemblies(ctx context.Context, bucket, key string) ([]string, error)
}

// Deps are the settle step's collaborators.
type Deps struct {
	DB Metastore
	// Topology is where everything lives: the standard bucket (settled
	// objects), the slot buckets of each class, and the zone health that
	// slot reads and copy sources share with trim's deletes. Every read of
	// a stored bundle goes through a bundle.Reader over it; writes (the
	// assemblies) go to its store.
	Topology *objstore.Topology
	Pending  *pendingobj.Store // staged parts; nil keeps gathered parts in memory
	Log      *slog.Logger
	Metrics  *Metrics               // nil: none
	Crash    func(crashpoint.Point) // the crash points of crash.go (nil: none)
	// Footers is the slot footer cache the cycles read through, across
	// cycles: one per process, shared by a fleet member's stars (nil: the
	// settler makes its own of Config.FooterCacheBytes).
	Footers *bundle.FooterCache
	// Tails is the tail cache, likewise one per process when set (nil: the
	// settler makes its own of Config.TailCacheBytes, TailSpillDir and
	// TailSpillBytes, and closes it in Close).
	Tails *TailCache
	// Mutations switch off rules on purpose, for the fault explorer only
	// (docs/architecture.md#the-fault-explorer); zero in production.
	Mutations Mutations
}

// Mutations are the settle rules the fault explorer can switch off to show
// its episodes find the break. The zero value changes nothing.
type Mutations struct {
	// SkipAdoptionBytes adopts a standing object on its footer's match
	// with the sources alone, without reading its data bytes.
	SkipAdoptionBytes bool
	// EraseTakesUpTailRewrite makes the erasure rewrite take up settle's
	// abandoned tail rewrite at its key instead of burying it and
	// rewriting a revision higher (Eraser.rewriteEntry): a false
	// quarantine follows.
	EraseTakesUpTailRewrite bool
}

// Config is the settle policy.
type Config struct {
	Policy           catalog.DuePolicy
	CapBytes         int64 // --denorm-output-cap-mib in bytes
	TargetBytes      int64 // --denorm-chunk-target-kib in bytes
	MaxStreams       int
	MaxBytes         int64
	Concurrency      int
	ReapGrace        time.Duration
	FooterCacheBytes int64 // --settle-footer-cache-mib in bytes (when Deps.Footers is nil)
	SlotReadBytes    int64 // --settle-slot-read-mib in bytes (0: no slot reads: fetch.go)
	SlotReadGap      int64 // the slot reads' gap (0: bundle.DefaultSlotReadGap)
	TailCacheBytes   int64 // --settle-tail-cache-mib in bytes (0: no tail cache: fetch.go)
	// TailSpillDir and TailSpillBytes: where the tail cache writes what its
	// memory evicts (--data-dir's tails/<star>), and how much
	// (--settle-tail-spill-mib in bytes); "" or 0: nothing spills.
	TailSpillDir   string
	TailSpillBytes int64
	// WindowRefs and WindowRecords bound one window of a stream's backlog:
	// the refs read at once, and the records resolved and planned at once
	// (a window holds at least one ref, and the chunks carried into it are
	// less than one output cap).
	WindowRefs    int
	WindowRecords int64
	// HotStreams bounds the streams settled at once whose backlog takes
	// more than one window.
	HotStreams int
	// MaxPendingErasures bounds the pending erasures of a star the erasure
	// step reads in one cycle (docs/architecture.md#erasure), dealt
	// round-robin over the streams that have some: each stream's window is
	// its lowest pending erasures in record order, every stream's first
	// before any stream's second, the streams with the oldest requests
	// first. A stream whose erasures did not all fit goes on next cycle.
	// Settle is not bounded by it: it reads a stream's erasures over the
	// records it writes, all of them.
	MaxPendingErasures int
	// BatchStreams is how many small streams share metastore transactions
	// (pipeline.go): one snapshot, one transaction of publish intents a
	// round, and commits grouped by up to this many streams. 0 settles
	// each stream as a batch of one, with its own transactions.
	BatchStreams int
	// StrayGuard (--stray-guard): a stray that holds records of an erasure
	// about to be applied gets its reap armed by the erase step once older
	// than this (database clock), and keeps the erasure pending until
	// then (erase_strays.go). 0 arms none: every such stray keeps its
	// erasure pending until something else removes it.
	StrayGuard time.Duration
}

// Default window bounds: about 37 bytes of heap per resolved record, so a
// window of 2^18 records holds some 10 MB however long the backlog is. A
// stream whose backlog takes more than one window also carries, between
// windows, the chunks of its next output (less than one output cap: at
// 100-byte records and the default 256 MiB cap, some 100 MB); at most
// DefaultHotStreams such streams are settled at once, so the settle step's
// peak memory is about concurrency x one window plus hot streams x (a
// window and a cap's worth of records), whatever the backlogs.
const (
	DefaultWindowRefs    = 4096
	DefaultWindowRecords = 1 << 18
	DefaultHotStreams    = 2
)

// DefaultMaxPendingErasures is MaxPendingErasures in the daemon (it has no
// configuration key; a test may set less): at some 100 bytes of heap an
// erasure, about 10 MB a cycle.
const DefaultMaxPendingErasures = 100000

// Settler is the recover-and-settle step of the cycle (docs/architecture.md#the-cycle,
// steps 1 and 2).
type Settler struct {
	d     Deps
	c     Config
	store Store          // the topology's store: assemblies and their uploads
	read  *bundle.Reader // every read of a stored bundle (no footer cache: Run makes each cycle's reader over footers)
	// footers is the slot footer cache of every cycle (Deps.Footers).
	footers *bundle.FooterCache
	hot     chan struct{} // one token per stream settled past its first window
	// slotReads is the running cycle's reader with slot reads (nil: none);
	// tails the settled-tail cache, across cycles (fetch.go).
	slotReads atomic.Pointer[bundle.Reader]
	tails     *TailCache
	ownTails  bool // tails is this settler's own (Close closes it)
}

var _ cycle.Step = (*Settler)(nil)

// New returns the settle step for a complete configuration (Validate).
func New(d Deps, c Config) (*Settler, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Topology == nil {
		return nil, errors.New("settle: no storage topology")
	}
	tails, ownTails := d.Tails, false
	if tails == nil {
		var err error
		if tails, err = newTailCache(c.TailCacheBytes, c.TailSpillDir, c.TailSpillBytes); err != nil {
			return nil, fmt.Errorf("settle: %w", err)
		}
		ownTails = true
	}
	footers := d.Footers
	if footers == nil {
		footers = bundle.NewFooterCache(c.FooterCacheBytes)
	}
	return &Settler{d: d, c: c, store: d.Topology.Store(), read: bundle.NewReader(d.Topology), hot: make(chan struct{}, c.HotStreams),
		footers: footers, tails: tails, ownTails: ownTails}, nil
}

// Name implements cycle.Step.
func (s *Settler) Name() string { return "settle" }

// Close releases what the Settler holds across cycles beyond memory: its
// own tail cache's spill segments (a shared one, Deps.Tails, is its
// owner's to close) (closed, and their files removed). Call it
// when its cycles are done; a cycle still running, or one after it,
// settles without the tail cache's spill (a tail not held is read from
// the store).
func (s *Settler) Close() {
	if s.ownTails {
		s.tails.close()
	}
}

func (s *Settler) crash(name crashpoint.Point) {
	if s.d.Crash != nil {
		s.d.Crash(name)
	}
}

// checkTiling halts the cycle before anything is written when the catalog
// of a stream about to be settled covers a record twice where settle
// writes, at its last entries (docs/architecture.md#singleton-lease-and-fencing): settle never guesses
// which entry is right. `auditor verify` checks the whole catalog.
func (s *Settler) checkTiling(ctx context.Context, due []catalog.DueStream) error {
	o, err := s.d.DB.FirstOverlap(ctx, dueIDs(due))
	if err != nil {
		return err
	}
	if o != nil {
		return cycle.Haltf("%s", o)
	}
	return nil
}

func dueIDs(due []catalog.DueStream) []catalog.StreamID {
	ids := make([]catalog.StreamID, len(due))
	for i, ds := range due {
		ids[i] = ds.Stream
	}
	return ids
}

// Run recovers open publish intents, then settles the due streams.
func (s *Settler) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	return counted(ctx, func(ctx context.Context) (cycle.Counts, error) { return s.run(ctx, f, opts) })
}

func (s *Settler) run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	if !opts.DryRun {
		if err := s.recoverIntents(ctx, f); err != nil {
			return cycle.Counts{}, err
		}
	}
	// The tail-growth rule's cohort turn passes on at most once a linger
	// (catalog.DuePolicy.Cohorts). A dry run changes nothing: it lists the
	// streams of the turn as it is, where the next cycle may pass it on.
	if s.c.Policy.HasCohorts() && !opts.DryRun {
		if _, err := s.d.DB.AdvanceCohortTurn(ctx, f, s.c.Policy.Linger, s.c.Policy.Cohorts); err != nil {
			return cycle.Counts{}, err
		}
	}
	due, err := s.d.DB.DueStreams(ctx, f.Star, s.c.Policy, opts.Streams, s.c.MaxStreams)
	if err != nil {
		return cycle.Counts{}, err
	}
	deferCapped(opts, due, s.c.MaxStreams)
	if err := s.checkTiling(ctx, due); err != nil {
		return cycle.Counts{}, err
	}
	erasing, err := s.d.DB.WithPendingErasures(ctx, dueIDs(due))
	if err != nil {
		return cycle.Counts{}, err
	}
	rd := s.read.WithFooters(s.footers)
	rd = s.beginSlotReads(rd, due)
	defer s.endSlotReads(rd)
	p := &pipeline{s: s, f: f, rd: rd, opts: opts, work: semaphore.NewWeighted(int64(s.c.Concurrency)),
		singles: newStreamQueue(), budget: s.c.MaxBytes}
	if err := p.settleAll(ctx, due, erasing); err != nil {
		return p.total, err
	}
	gets, _ := rd.FooterReads()
	s.d.Metrics.footerGets(gets)
	s.countSlotReads(rd)
	if p.firstErr != nil {
		// Some streams failed transiently; the others are settled, and the
		// rest of the cycle may run.
		return p.total, &cycle.PartialError{Err: p.firstErr}
	}
	return p.total, nil
}

// deferCapped notes in opts.Deferred the forced streams that
// --settle-max-streams (limit) left out of due. Forced streams are taken
// first, so they are left out only when due is full of them; one absent
// for another reason (quarantined, nothing to settle) is noted too, which
// only matters to a caller that has not settled it.
func deferCapped(opts cycle.Options, due []catalog.DueStream, limit int) {
	if len(due) < limit {
		return
	}
	taken := make(map[catalog.StreamID]bool, len(due))
	for _, ds := range due {
		taken[ds.Stream] = true
	}
	for _, id := range opts.Streams {
		if !taken[id] {
			opts.Deferred.Add(id)
		}
	}
}

// streamFailed handles the error of one stream's settle or rewrite: a
// quarantine is recorded (and the cycle goes on), a lost lease or a halt
// stops everything (returned), anything else is transient: nothing of the
// stream changed beyond committed progress, the next cycle retries, and
// the first such error is kept in *firstErr.
func (s *Settler) streamFailed(ctx context.Context, f catalog.Fence, id catalog.StreamID, err error, opts cycle.Options,
	total *cycle.Counts, mu *sync.Mutex, firstErr *error) error {
	var q *cycle.QuarantineError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &q):
		s.d.Log.Warn("stream quarantined", "stream", id, "class", q.Class, "slot", q.SlotKey, "err", q.Err)
		if opts.DryRun {
			return nil
		}
		qerr := error(nil)
		if q.Condemn != "" {
			s.d.Log.Warn("standing object condemned: reaped while the stream is quarantined", "key", q.Condemn)
			qerr = s.d.DB.QuarantineCondemning(ctx, f, id, q.SlotKey, q.Class, q.Error(), q.Condemn, s.c.ReapGrace)
		} else {
			qerr = s.d.DB.Quarantine(ctx, f, id, q.SlotKey, q.Class, q.Error())
		}
		if qerr != nil {
			return qerr
		}
		mu.Lock()
		total.StreamsQuarantined++
		mu.Unlock()
		s.d.Metrics.quarantined(q.Class)
		return nil
	case cycle.IsLeaseLost(err), cycle.IsHalt(err):
		return err // stop everything
	default: // cycle.IsRetry
		s.d.Log.Error("stream failed", "stream", id, "err", err)
		mu.Lock()
		if *firstErr == nil {
			*firstErr = err
		}
		mu.Unlock()
		return nil
	}
}

func (s *Settler) plan(st catalog.Stream, tail *Tail, chunks []SourceChunk) ([]Output, error) {
	outs, err := Plan(PlanInput{Stream: st.ID, Bucket: st.Bucket, StreamEpoch: uint64(st.Epoch),
		Tail: tail, Chunks: chunks, CapBytes: s.c.CapBytes, TargetBytes: s.c.TargetBytes})
	if err != nil {
		return nil, fmt.Errorf("plan stream %s: %w", st.ID, err)
	}
	return outs, nil
}

// backlogRecords is the records the refs hold past settled.
func backlogRecords(refs []catalog.SpanRef, settled int64) int64 {
	var n int64
	for _, r := range refs {
		if r.EndRecord() > settled {
			n += r.EndRecord() - max(r.FirstRecord, settled)
		}
	}
	return n
}

// chunksFrom is the chunks at or after record from.
func chunksFrom(chunks []SourceChunk, from uint64) []SourceChunk {
	var rest []SourceChunk
	for _, c := range chunks {
		if c.Entry.FirstRecord >= from {
			rest = append(rest, c)
		}
	}
	return rest
}

// knownEntries is every chunk the stream has in play: the standing tail's,
// then the new source chunks, as planned, with the source's entry and bytes
// of each chunk re-encoded for an erasure.
func knownEntries(tail *Tail, chunks []SourceChunk) []knownChunk {
	var out []knownChunk
	if tail != nil {
		for i, e := range tail.Entries {
			k := knownChunk{e: e}
			if d := tail.local(i); d != nil {
				k.orig, k.origData, k.data = &tail.Orig[i], tail.OrigData[i], d
			}
			out = append(out, k)
		}
	}
	for i := range chunks {
		c := &chunks[i]
		k := knownChunk{e: c.Entry}
		if c.Data != nil {
			k.orig, k.origData, k.data = &c.orig, c.origData, c.Data
		}
		out = append(out, k)
	}
	return out
}

// planLimits are the part-planning limits the store publishes with (an S3
// store's configured ones); DefaultLimits for a store that plans no parts.
func (s *Settler) planLimits() objstore.Limits {
	if l, ok := s.store.(interface{ Limits() objstore.Limits }); ok {
		return l.Limits()
	}
	return objstore.DefaultLimits
}

// printPlan writes a dry run's plan: objects, keys, bytes copied and fetched.
// A dry run plans the stream's first window only.
func (s *Settler) printPlan(w io.Writer, st catalog.Stream, outs []Output, complete bool) {
	if w == nil {
		return
	}
	if !complete {
		defer fmt.Fprintf(w, "stream %s: more of its backlog is planned in later windows\n", st.ID)
	}
	for _, o := range outs {
		var specs []objstore.PieceSpec
		for _, p := range o.Pieces {
			specs = append(specs, objstore.PieceSpec{Len: int64(p.Len), Copy: p.Data == nil})
		}
		specs = append(specs, objstore.PieceSpec{Len: int64(len(o.Footer.Bytes))})
		copied, fetched := int64(0), int64(0)
		if plan, err := objstore.PlanParts(specs, s.planLimits()); err == nil {
			copied, fetched = plan.Copied(), plan.Fetched()
		}
		what := "new"
		if o.Rewrite != nil {
			what = "rewrite of " + o.Rewrite.Key
		}
		fmt.Fprintf(w, "publish %s records [%d, %d) %d bytes (%s): copy %d, fetch %d\n",
			o.Key, o.FirstRecord, o.EndRecord(), o.Footer.ObjectSize, what, copied, fetched)
	}
}

// recoverIntents is step 1 of the cycle for publish intents left open by a
// crash. A live intent (its key is still the next object its stream would
// publish: a new object at settled_through, or the rewrite of the stream's
// last entry) is kept: the stream's next settle resumes its upload from the
// staged parts, or adopts the standing object on 412, onto the same key. A
// stale intent can never be published again (settled_through and revisions
// only grow), so its upload is aborted and it becomes a reap intent: the
// reap step deletes its object after the grace unless the catalog references
// the key. The pending sidecars of what it abandons go at the end of the
// cycle, in its sidecar step (Sidecars).
func (s *Settler) recoverIntents(ctx context.Context, f catalog.Fence) error {
	intents, err := s.d.DB.Intents(ctx, f.Star, "publish", s.c.ReapGrace)
	if err != nil {
		return err
	}
	for _, in := range intents {
		live, err := s.intentLive(ctx, in)
		if err != nil {
			return err
		}
		if live {
			continue
		}
		if in.UploadID != "" {
			if err := s.store.AbortAssembly(ctx, s.d.Topology.Standard(), in.ObjectKey, in.UploadID); err != nil && !errors.Is(err, objstore.ErrNotFound) {
				return fmt.Errorf("abort stale upload of %s: %w", in.ObjectKey, err)
			}
		}
		// and any upload whose ID a crash kept from being recorded
		if err := s.abortUploads(ctx, in.ObjectKey, ""); err != nil {
			return err
		}
		if err := s.d.DB.AbandonPublish(ctx, f, in.ID, s.c.ReapGrace); err != nil {
			return err
		}
		s.d.Log.Info("stale publish intent abandoned", "key", in.ObjectKey, "intent", in.ID)
	}
	return nil
}

func (s *Settler) intentLive(ctx context.Context, in catalog.Intent) (bool, error) {
	k, err := bundlefmt.ParseSettledKey(in.ObjectKey)
	if err != nil {
		return false, nil // not a key we would write
	}
	st, err := s.d.DB.Stream(ctx, k.Stream)
	if errors.Is(err, catalog.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Bucket != k.Bucket || uint64(st.Epoch) != k.StreamEpoch {
		return false, nil
	}
	waiting := st.SettledThrough < st.NextRecord
	// The entry at the key's first record, if any, decides what the key
	// would be: a rewrite of that entry, or a new run. Revisions above the
	// planned one are normal: an intent opens above every revision its base
	// used before (docs/architecture.md#no-late-delete).
	ens, err := s.d.DB.EntriesIntersecting(ctx, st.ID, st.Epoch, int64(k.FirstRecord), int64(k.FirstRecord)+1)
	if err != nil {
		return false, err
	}
	if len(ens) == 0 {
		// a new run at settled_through, or above it up to low_record where
		// retention left a gap (what resolve and CommitSettle allow)
		return waiting && (uint64(st.SettledThrough) == k.FirstRecord ||
			(k.FirstRecord > uint64(st.SettledThrough) && k.FirstRecord <= uint64(st.LowRecord))), nil
	}
	// A rewrite above the entry's revision: settle's tail rewrite of the
	// stream's last entry (it ends at settled_through) while records wait
	// to settle, or the erasure step's rewrite of an entry a pending
	// erasure intersects. The two cannot be told apart here: a tail
	// rewrite settle gave up (the entry is no longer the last) stays live
	// while such an erasure is pending, and the erasure step buries it
	// when it meets its object (Eraser.rewriteEntry).
	if len(ens) != 1 || uint64(ens[0].FirstRecord) != k.FirstRecord || uint32(ens[0].Revision) >= k.Revision {
		return false, nil
	}
	en := ens[0]
	if waiting && en.EndRecord() == st.SettledThrough {
		return true, nil
	}
	ers, err := s.d.DB.ErasuresOf(ctx, st.ID, en.FirstRecord, en.EndRecord())
	if err != nil {
		return false, err
	}
	for _, e := range ers {
		if !e.Applied {
			return true, nil
		}
	}
	return false, nil
}
