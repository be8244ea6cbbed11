package settle

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/nova/auditor/bundle"
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
	// (batch.go): one snapshot, one transaction of publish intents, and
	// commits grouped by up to this many streams. 0 settles each stream
	// with its own transactions.
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
	var (
		t      tally
		budget = s.c.MaxBytes
	)
	take := func(n int64) bool { // the --settle-max-bytes budget
		t.mu.Lock()
		defer t.mu.Unlock()
		if budget <= 0 {
			return false
		}
		budget -= n
		return true
	}
	// The streams that settle alone run on Concurrency workers; with
	// batches on, each holds one of the batches' work slots while it
	// settles, and they start as soon as they are known (aloneQueue).
	batching := s.c.BatchStreams > 0 && !opts.DryRun
	work := semaphore.NewWeighted(int64(s.c.Concurrency))
	q := newAloneQueue()
	// A failing batch stops the workers too (cancelWorkers), as a failing
	// worker stops the batches (bctx is gctx's).
	wctx, cancelWorkers := context.WithCancel(ctx)
	defer cancelWorkers()
	g, gctx := errgroup.WithContext(wctx)
	defer q.dropOnDone(gctx)()
	for range s.c.Concurrency {
		g.Go(func() error {
			for {
				ds, ok := q.pop()
				if !ok {
					return nil
				}
				slot := &slotHold{}
				if batching {
					slot.sem = work
				}
				if err := slot.acquire(gctx); err != nil {
					return err
				}
				c, err := s.settleStream(gctx, f, rd, ds, erasing[ds.Stream], opts, take, slot)
				slot.release()
				t.add(c)
				if err := s.failed(gctx, f, ds.Stream, err, opts, &t); err != nil {
					return err
				}
			}
		})
	}
	if !batching {
		q.push(due...)
		q.close()
	} else {
		// Streams with pending erasures first: they never batch.
		batchable := make([]catalog.DueStream, 0, len(due))
		for _, ds := range due {
			if erasing[ds.Stream] {
				q.push(ds)
			} else {
				batchable = append(batchable, ds)
			}
		}
		bg, bctx := errgroup.WithContext(gctx)
		bg.SetLimit(batchesInFlight)
		for batch := range slices.Chunk(batchable, s.c.BatchStreams) {
			bg.Go(func() error {
				return s.settleBatch(bctx, f, rd, batch, erasing, opts, take, &t, work, func(ds catalog.DueStream) { q.push(ds) })
			})
		}
		if err := bg.Wait(); err != nil {
			// A worker's error is the cause when one cancelled the batches;
			// else the batch's stops the workers, and the streams under
			// way end (fenced, cancelled) before the cycle does.
			byWorker := gctx.Err() != nil
			q.drop()
			cancelWorkers()
			if gerr := g.Wait(); gerr != nil && byWorker {
				err = gerr
			}
			return t.total, err
		}
		q.close()
	}
	total := &t.total
	if err := g.Wait(); err != nil {
		return *total, err
	}
	gets, _ := rd.FooterReads()
	s.d.Metrics.footerGets(gets)
	s.countSlotReads(rd)
	if !opts.DryRun {
		if err := s.reconcile(ctx, f); err != nil {
			return *total, err
		}
	}
	if t.firstErr != nil {
		// Some streams failed transiently; the others are settled, and the
		// rest of the cycle may run.
		return *total, &cycle.PartialError{Err: t.firstErr}
	}
	return *total, nil
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

// settleStream resolves, plans, publishes and commits one stream's objects
// in record order, a bounded window of its backlog at a time (at most
// WindowRefs refs and about WindowRecords records), so what it holds does
// not grow with how far the stream has fallen behind; partial progress is
// kept. Every window's full objects are published; its last, sub-cap
// output waits for the next window's chunks, so windows add no tail
// rewrites: only the stream's true end leaves a sub-cap tail.
//
// Records of the stream's pending erasures (erasing: it has some) are
// written as tombstones: the chunks holding them, new or in the standing
// tail, are read, checked and re-encoded instead of copied. The erasures
// are read range by range (deadReader), all of those over the records
// written, so an object is never written without a tombstone a pending
// erasure asks for, and an attempt made again after a crash plans at least
// the tombstones the first did (what adoption accepts).
func (s *Settler) settleStream(ctx context.Context, f catalog.Fence, rd *bundle.Reader, ds catalog.DueStream, erasing bool, opts cycle.Options, take func(int64) bool, slot *slotHold) (cycle.Counts, error) {
	var counts cycle.Counts
	st, refs, last, err := s.snapshot(ctx, f, ds.Stream, opts)
	if err != nil || st.SettledThrough >= st.NextRecord {
		return counts, err
	}
	var dead *deadReader
	if erasing {
		dead = newDeadReader(s.d.DB, st.ID)
	}
	tail, err := s.standingTail(ctx, st, last, dead, &counts)
	if err != nil {
		return counts, err
	}
	hot := s.hotToken(slot)
	defer hot.release()
	if backlogRecords(refs, st.SettledThrough) > s.c.WindowRecords || len(refs) == s.c.WindowRefs {
		if err := hot.take(ctx); err != nil { // before its first window is resolved
			return counts, err
		}
	}
	r := newResolver(rd, f.Star, st)
	var carry []SourceChunk // resolved, planned into a sub-cap output not yet published
	gapChecked := false
	for {
		res, err := r.window(ctx, refs, s.c.WindowRecords, len(refs) == s.c.WindowRefs)
		if err != nil {
			return counts, err
		}
		if len(res.Chunks) > 0 && !take(res.Bytes) {
			opts.Deferred.Add(ds.Stream)
			return counts, nil // the cycle's byte budget is spent: the next cycle goes on
		}
		from, to := chunkRange(res.Chunks)
		windowDead, err := dead.over(ctx, from, to)
		if err != nil {
			return counts, err
		}
		scrubbed, err := s.scrubChunks(ctx, res.Chunks, windowDead)
		if err != nil {
			return counts, err
		}
		chunks := append(carry, scrubbed...) //nolint:gocritic // appendAssign: carry is replaced below, by what publishWindow leaves over
		if !gapChecked && len(chunks) > 0 {
			gapChecked = true
			if tail != nil && chunks[0].Entry.FirstRecord != tail.end() {
				// Retention made the first live chunk start above
				// settled_through (resolve allows that gap only up to
				// low_record): the standing tail is dead and the next
				// object starts a new run.
				tail = nil
			}
		}
		if len(chunks) > 0 {
			if opts.DryRun {
				outs, err := s.plan(st, tail, chunks)
				if err != nil {
					return counts, err
				}
				s.printPlan(opts.Plan, st, outs, res.Complete)
				return counts, nil
			}
			if carry, err = s.publishWindow(ctx, f, st, &tail, chunks, dead, res.Complete, &counts); err != nil {
				return counts, err
			}
		}
		if res.Complete {
			break
		}
		if err := hot.take(ctx); err != nil {
			return counts, err
		}
		if refs, err = s.d.DB.RefsWindow(ctx, st.ID, r.at, st.NextRecord, s.c.WindowRefs); err != nil {
			return counts, err
		}
	}
	if counts.ObjectsPublished+counts.ObjectsAdopted > 0 {
		counts.StreamsSettled++
	}
	return counts, nil
}

// snapshot reads the stream row, its first window of refs and its last
// catalog entry in one snapshot: the write path keeps absorbing while
// this runs, and refs read after next_record would reach past it (a false
// tiling break). Refs absorbed after the snapshot are the next cycle's;
// later windows read refs below the snapshot's next_record only, which
// nothing but this auditor's own commits changes. A stream whose
// retention is behind gets it first (it waits behind an absorb holding
// the row lock), then a fresh snapshot of what is left.
func (s *Settler) snapshot(ctx context.Context, f catalog.Fence, id catalog.StreamID, opts cycle.Options) (catalog.Stream, []catalog.SpanRef, *catalog.Entry, error) {
	st, refs, last, err := s.d.DB.StreamSnapshot(ctx, id, s.c.WindowRefs)
	if err != nil || st.SettledThrough >= st.LowRecord || opts.DryRun {
		return st, refs, last, err
	}
	if _, err := s.d.DB.SkipBelowLow(ctx, f, st.ID); err != nil {
		return st, nil, nil, err
	}
	return s.d.DB.StreamSnapshot(ctx, id, s.c.WindowRefs)
}

// standingTail is the stream's last object when new chunks may extend it
// (loadTail), with the records of pending erasures re-encoded as
// tombstones (scrubTail); nil when there is none.
func (s *Settler) standingTail(ctx context.Context, st catalog.Stream, last *catalog.Entry, dead *deadReader, counts *cycle.Counts) (*Tail, error) {
	tail, err := s.loadTail(ctx, st, last)
	if err != nil || tail == nil {
		return nil, err
	}
	tailDead, err := dead.over(ctx, tail.FirstRecord, tail.end())
	if err != nil {
		return nil, err
	}
	return s.scrubTail(ctx, tail, tailDead)
}

// hot is a stream's hold on one of Config.HotStreams tokens: a stream
// whose backlog takes more than one window carries up to a cap's worth of
// records between windows, and only a few are settled at once.
// While it waits for a token it gives back its work slot, if it holds
// one (slotHold), and takes one again before it goes on.
type hot struct {
	tokens chan struct{}
	held   bool
	slot   *slotHold
}

func (s *Settler) hotToken(slot *slotHold) *hot { return &hot{tokens: s.hot, slot: slot} }

// take waits for a token, once.
func (h *hot) take(ctx context.Context) error {
	if h.held {
		return nil
	}
	select {
	case h.tokens <- struct{}{}:
		h.held = true
		return nil
	default:
	}
	h.slot.release()
	select {
	case h.tokens <- struct{}{}:
		h.held = true
	case <-ctx.Done():
		return ctx.Err()
	}
	return h.slot.acquire(ctx)
}

func (h *hot) release() {
	if h.held {
		<-h.tokens
		h.held = false
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

// publishWindow plans one window's chunks behind the standing tail and
// publishes and commits the outputs in record order. When the window is
// not the stream's last (final false), its last output is kept back unless
// it is full: its chunks are returned, to be planned with the next window.
// An adopted object that becomes the tail is scrubbed against dead (the
// stream's pending erasures) first, as the standing tail is.
func (s *Settler) publishWindow(ctx context.Context, f catalog.Fence, st catalog.Stream, tail **Tail, chunks []SourceChunk,
	dead *deadReader, final bool, counts *cycle.Counts) ([]SourceChunk, error) {
	// adoptedTail makes the adopted object p the tail. It was written by
	// an earlier attempt, under the erasures pending then: records of an
	// erasure recorded since still hold their bytes, and a tail rewrite
	// copies what it is not told to re-encode.
	adoptedTail := func(p *published) error {
		d, err := dead.over(ctx, p.first, p.end())
		if err != nil {
			return err
		}
		t, err := s.scrubTail(ctx, &Tail{Key: p.key, FirstRecord: p.first, Revision: p.revision, Entries: p.entries}, d)
		if err != nil {
			return err
		}
		*tail = t
		return nil
	}
	for len(chunks) > 0 {
		outs, err := s.plan(st, *tail, chunks)
		if err != nil {
			return nil, err
		}
		var carry []SourceChunk
		if last := outs[len(outs)-1]; !final && !IsFull(last.Meter, -1, s.c.CapBytes) {
			from := last.FirstRecord
			if last.Rewrite != nil {
				from = last.Rewrite.end()
			}
			carry = chunksFrom(chunks, from)
			outs = outs[:len(outs)-1]
		}
		known := knownEntries(*tail, chunks)
		replan := false
		for oi, o := range outs {
			p, intentID, err := s.publish(ctx, f, o, known, settlePoints)
			if err != nil {
				s.d.Metrics.object("failed")
				return nil, err
			}
			if o.Rewrite != nil && p.adopted && p.end() == o.Rewrite.end() {
				// The standing object is the erasure step's rewrite of the
				// tail (a crash kept it from its commit): it covers nothing
				// new. Commit it as that rewrite, and plan the chunks again
				// behind it, at the next revision.
				rc := catalog.RewriteCommit{Entry: p.catalogEntry(st.ID, st.Epoch), PrevRevision: int32(o.Rewrite.Revision),
					IntentID: intentID, ObjectKey: p.key, OldKey: o.Rewrite.Key, ReapGrace: s.c.ReapGrace}
				if err := s.d.DB.CommitRewrite(ctx, f, rc); err != nil {
					return nil, err
				}
				counts.ObjectsAdopted++
				s.d.Metrics.object("adopted")
				if err := adoptedTail(p); err != nil {
					return nil, err
				}
				replan = true
				break
			}
			if err := s.commitPublished(ctx, f, st, o, p, intentID, counts); err != nil {
				return nil, err
			}
			if *tail != nil {
				s.tails.drop((*tail).Key) // passed over or rewritten: never read again (fetch.go)
			}
			*tail = &Tail{Key: p.key, FirstRecord: p.first, Revision: p.revision, Entries: p.entries}
			if p.end() == o.EndRecord() && (oi < len(outs)-1 || IsFull(o.Meter, -1, s.c.CapBytes)) {
				// A full object (every output but a plan's last is full, and
				// a window's last is published only when full) is never
				// rewritten: the next output starts a new one, so its
				// entries (up to a cap's worth of records) need not be held.
				*tail = nil
				s.tails.drop(p.key) // nor read again (fetch.go)
			} else if p.adopted {
				if err := adoptedTail(p); err != nil {
					return nil, err
				}
			}
			if p.end() != o.EndRecord() {
				// The adopted object covers other records than planned:
				// re-plan the rest with it as the stream's last entry.
				chunks, replan = chunksFrom(chunks, p.end()), true
				break
			}
		}
		if !replan {
			return carry, nil
		}
	}
	return nil, nil
}

// commitPublished commits the object p that publish wrote (or adopted) for
// the output o, under its open intent: a new catalog entry, or the
// standing tail's next revision, whose commit arms the old revision's
// reap. It counts the object and its bytes.
func (s *Settler) commitPublished(ctx context.Context, f catalog.Fence, st catalog.Stream, o Output, p *published, intentID int64, counts *cycle.Counts) error {
	commit := s.settleCommit(st, o, p, intentID)
	s.crash(CrashBeforeCommit)
	if err := s.d.DB.CommitSettle(ctx, f, commit); err != nil {
		return err
	}
	s.committed(o, p, commit, counts)
	return nil
}

// settleCommit is the commit of the object p that publish wrote (or
// adopted) for the output o under its open intent.
func (s *Settler) settleCommit(st catalog.Stream, o Output, p *published, intentID int64) catalog.SettleCommit {
	commit := catalog.SettleCommit{Entry: p.catalogEntry(st.ID, st.Epoch), PrevRevision: -1, IntentID: intentID,
		ObjectKey: p.key, ReapGrace: s.c.ReapGrace}
	if o.Rewrite != nil {
		commit.PrevRevision = int32(o.Rewrite.Revision)
		commit.OldKey = o.Rewrite.Key
	}
	return commit
}

// committed passes the crash points after a settle commit and counts its
// object and bytes.
func (s *Settler) committed(o Output, p *published, commit catalog.SettleCommit, counts *cycle.Counts) {
	s.crash(CrashAfterCommit)
	if commit.OldKey != "" {
		s.crash(CrashAfterReapArmed) // the rewrite's commit armed the old revision's reap
	}
	counts.RecordsTombstoned += int64(o.Tombstoned)
	if p.adopted {
		counts.ObjectsAdopted++
		s.d.Metrics.object("adopted")
	} else {
		counts.ObjectsPublished++
		s.d.Metrics.object("published")
	}
}

// chunkRange is the records the chunks span, [from, to) (empty: none).
func chunkRange(chunks []SourceChunk) (from, to uint64) {
	for i, c := range chunks {
		if i == 0 || c.Entry.FirstRecord < from {
			from = c.Entry.FirstRecord
		}
		to = max(to, c.Entry.EndRecord())
	}
	return from, to
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

// loadTail reads the footer of the stream's last catalog entry (from the
// stream's snapshot; nil: none) when that entry ends at settled_through (so
// new chunks may extend it).
func (s *Settler) loadTail(ctx context.Context, st catalog.Stream, last *catalog.Entry) (*Tail, error) {
	if last == nil {
		return nil, nil
	}
	if last.EndRecord() > st.SettledThrough {
		// The catalog covers records the stream says are unsettled: entries
		// overlap what settle would publish next. Never guess: halt.
		return nil, cycle.Haltf("stream %s: catalog entry [%d, %d) ends past settled_through %d",
			st.ID, last.FirstRecord, last.EndRecord(), st.SettledThrough)
	}
	if last.EndRecord() != st.SettledThrough {
		return nil, nil // retention left a gap: the next object starts a new run
	}
	return s.readEntry(ctx, st, *last)
}

// readEntry reads the footer of a cataloged object: its chunks, as a Tail
// a rewrite may copy from.
func (s *Settler) readEntry(ctx context.Context, st catalog.Stream, last catalog.Entry) (*Tail, error) {
	key := bundle.EntryKey(st.Bucket, last)
	if t, err := s.readSmallEntry(ctx, key, last); t != nil || err != nil {
		return t, err
	}
	f, err := s.read.EntryFooter(ctx, key, last.FooterOffset, last.FooterLength)
	if err != nil {
		return nil, err
	}
	entries, err := f.Entries()
	if err != nil {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: bundle.ClassOf(err), Err: err}
	}
	return &Tail{Key: key, FirstRecord: uint64(last.FirstRecord), Revision: uint32(last.Revision), Entries: entries}, nil
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
