package settle

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Batches (docs/architecture.md#batches). A star's common case is many
// small streams, each settling one small object a cycle. Settled one by
// one, each costs three metastore transactions (snapshot, intent, commit),
// and every one of them taxes the write path that shares the metastore.
// Settled in batches, up to Config.BatchStreams streams share one snapshot
// transaction, one transaction of publish intents (committed before any of
// their PUTs), and commits grouped by up to that many streams or
// groupCommitWait, whichever comes first.
//
// Only the simple case is batched: a stream with no pending erasure, its
// whole backlog in one window of batchRefs refs, planned into exactly one
// object, whose intent is new and whose PUT succeeds. Any other stream (a
// hot one, an erasure, retention behind, an intent an earlier attempt left
// open, a PUT that failed or found the key taken) goes the per-stream way
// of settleStream, which handles every case, adoption included; the batch
// has only changed where that stream's intent is opened.
//
// A batch keeps every stream's own checks: each stream's intent and commit
// run in a savepoint of their own (catalog.Settle.OpenPublishIntents,
// catalog.Settle.CommitSettles), so one stream failing a check is rolled back
// alone and handled as it would be alone (a halt, a retry), while the
// others commit.

// batchRefs bounds the refs a batched snapshot reads per stream: a stream
// with more takes the per-stream path, which reads its backlog in windows.
// At some 200 bytes a ref, a batch's snapshot holds at most
// BatchStreams x batchRefs refs (64 streams: about 3 MB).
const batchRefs = 256

// batchesInFlight is how many batches a cycle runs at once: while one
// batch waits on its snapshot, its intents or its last PUTs, the next
// one's streams take the free --settle-concurrency slots.
const batchesInFlight = 4

// groupCommitWait bounds how long a stream whose object is published waits
// for others to share its commit: a group is committed once it holds
// BatchStreams streams, or this long after its first stream was ready,
// so one slow PUT delays no one else's commit by more.
const groupCommitWait = 50 * time.Millisecond

// tally is what Run adds up from every stream of the cycle: counts, and
// the first transient failure.
type tally struct {
	mu       sync.Mutex
	total    cycle.Counts
	firstErr error
}

func (t *tally) add(c cycle.Counts) {
	t.mu.Lock()
	t.total.Add(c)
	t.mu.Unlock()
}

// batched is one stream of a batch, as it goes through the batch's phases.
type batched struct {
	ds     catalog.DueStream
	st     catalog.Stream
	out    Output
	intent catalog.Intent
	p      *published
	counts cycle.Counts
}

// settleBatch settles the streams of one batch that take the batched path
// and hands each of the others to alone as soon as it knows, to be settled
// one by one (alone is called from several goroutines). A returned error
// stops the cycle (a lost lease, a halt); every other failure is the
// failing streams' own (Run's streamFailed). Each stream's reads and PUTs
// hold one of work's slots (--settle-concurrency, shared by the batches in
// flight and the streams settling alone).
func (s *Settler) settleBatch(ctx context.Context, f catalog.Fence, rd *bundle.Reader, batch []catalog.DueStream,
	erasing map[catalog.StreamID]bool, opts cycle.Options, take func(int64) bool, t *tally, work *semaphore.Weighted,
	alone func(catalog.DueStream)) error {
	var mu sync.Mutex // ready
	ids := make([]catalog.StreamID, 0, len(batch))
	for _, ds := range batch {
		if erasing[ds.Stream] {
			alone(ds)
		} else {
			ids = append(ids, ds.Stream)
		}
	}
	snaps, err := s.d.DB.StreamSnapshots(ctx, ids, batchRefs)
	if err != nil {
		// Every stream of the batch failed the same way: one is enough to
		// stop the cycle or note the retry.
		return s.failed(ctx, f, batch[0].Stream, err, opts, t)
	}
	// Phase 1: each stream's tail, chunks and plan (S3 reads only).
	var ready []*batched
	g, gctx := errgroup.WithContext(ctx)
	for _, ds := range batch {
		snap, ok := snaps[ds.Stream]
		if erasing[ds.Stream] || !ok {
			continue // alone already, or no such stream (nothing to settle)
		}
		st := snap.Stream
		switch {
		case st.SettledThrough >= st.NextRecord:
			continue // nothing to settle (the marker is refreshed by the next commit)
		case st.SettledThrough < st.LowRecord, len(snap.Refs) >= batchRefs,
			backlogRecords(snap.Refs, st.SettledThrough) > s.c.WindowRecords:
			alone(ds)
			continue
		}
		g.Go(func() error {
			if err := work.Acquire(gctx, 1); err != nil {
				return err
			}
			defer work.Release(1)
			b := &batched{ds: ds, st: st}
			how, err := s.planOne(gctx, f, rd, b, snap, take, opts)
			t.add(b.counts)
			b.counts = cycle.Counts{}
			if err != nil {
				return s.failed(gctx, f, ds.Stream, err, opts, t)
			}
			switch how {
			case planned:
				mu.Lock()
				ready = append(ready, b)
				mu.Unlock()
			case settleAlone:
				alone(ds)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if len(ready) == 0 {
		return nil
	}
	// Phase 2: the batch's intents, in one transaction, before any PUT.
	reqs := make([]catalog.IntentRequest, len(ready))
	for i, b := range ready {
		target, err := Target(b.out.Key)
		if err != nil {
			return err // a key this package made: a bug, not the stream's
		}
		reqs[i] = catalog.IntentRequest{Target: target, Class: catalog.ClassStandard}
	}
	intents, errs, err := s.d.DB.OpenPublishIntents(ctx, f, reqs)
	if err != nil {
		return s.failed(ctx, f, ready[0].ds.Stream, err, opts, t)
	}
	s.crash(CrashBatchAfterIntents)
	publishing := ready[:0]
	for i, b := range ready {
		switch {
		case errs[i] != nil:
			if err := s.failed(ctx, f, b.ds.Stream, errs[i], opts, t); err != nil {
				return err
			}
		case intents[i].Reopened:
			// An earlier attempt's intent: it may have an upload to abort,
			// or a standing object to adopt.
			alone(b.ds)
		default:
			b.intent = intents[i]
			// The intent may be above the planned revision (publish says why).
			b.out.Key, b.out.Revision = intents[i].ObjectKey, uint32(intents[i].Revision)
			publishing = append(publishing, b)
		}
	}
	// Phase 3: the PUTs; as each object is published, its commit joins a
	// group (the committer's goroutine commits it with others and counts
	// it), and its PUT's slot goes to the next stream.
	gc := s.newGroupCommit(ctx, f, opts, t, len(publishing))
	g, gctx = errgroup.WithContext(ctx)
	for _, b := range publishing {
		g.Go(func() error {
			if err := work.Acquire(gctx, 1); err != nil {
				return err
			}
			defer work.Release(1)
			o := b.out
			res, err := s.assemble(gctx, o, s.assembleRequest(gctx, f, o, b.intent, settlePoints))
			if err != nil {
				if ferr := s.assembleFailed(gctx, o, err); ferr != nil {
					return s.failed(gctx, f, b.ds.Stream, ferr, opts, t)
				}
				// The key holds an object: the per-stream path takes the
				// intent up again and adopts what stands.
				alone(b.ds)
				return nil
			}
			b.p = &published{key: o.Key, first: o.FirstRecord, revision: o.Revision, entries: o.Footer.Entries,
				size: o.Footer.ObjectSize, footOff: o.Footer.FooterOffset, footLen: o.Footer.FooterLength, result: res}
			s.crash(CrashBeforeCommit)
			gc.submit(b, s.settleCommit(b.st, o, b.p, b.intent.ID))
			return nil
		})
	}
	err = g.Wait()
	if cerr := gc.close(); err == nil {
		err = cerr
	}
	return err
}

// planned, settleAlone and deferred are what planOne makes of a stream.
const (
	planned     = iota // one object, to publish in the batch
	settleAlone        // the per-stream path's (more than one object, or only dead chunks)
	deferred           // the byte budget is spent: noted in opts.Deferred, next cycle's
)

// planOne reads a batched stream's standing tail and chunks and plans
// them into b.out.
func (s *Settler) planOne(ctx context.Context, f catalog.Fence, rd *bundle.Reader, b *batched, snap catalog.Snapshot,
	take func(int64) bool, opts cycle.Options) (int, error) {
	tail, err := s.standingTail(ctx, b.st, snap.Last, nil, &b.counts)
	if err != nil {
		return 0, err
	}
	res, err := newResolver(rd, f.Star, b.st).window(ctx, snap.Refs, s.c.WindowRecords, false)
	if err != nil {
		return 0, err
	}
	if len(res.Chunks) == 0 {
		// Every unsettled chunk is dead (retention): the per-stream path
		// moves settled_through past them.
		return settleAlone, nil
	}
	if !take(res.Bytes) {
		opts.Deferred.Add(b.ds.Stream)
		return deferred, nil
	}
	if tail != nil && res.Chunks[0].Entry.FirstRecord != tail.end() {
		tail = nil // retention left a gap (settleStream says why)
	}
	outs, err := s.plan(b.st, tail, res.Chunks)
	switch {
	case err != nil:
		return 0, err
	case len(outs) != 1:
		return settleAlone, nil
	}
	b.out = outs[0]
	return planned, nil
}

// failed handles one stream's failure in a batch as Run handles a
// stream's (streamFailed).
func (s *Settler) failed(ctx context.Context, f catalog.Fence, id catalog.StreamID, err error, opts cycle.Options, t *tally) error {
	return s.streamFailed(ctx, f, id, err, opts, &t.total, &t.mu, &t.firstErr)
}

// groupCommit gathers the commits of a batch's streams as their objects
// are published and commits them in groups (catalog.Settle.CommitSettles): a
// group is committed once it holds BatchStreams streams, or
// groupCommitWait after its first, or when the batch has no more. It
// handles each stream's outcome: counted once committed, failed as Run
// fails a stream otherwise.
type groupCommit struct {
	s     *Settler
	f     catalog.Fence
	opts  cycle.Options
	t     *tally
	in    chan readyCommit
	done  chan struct{}
	fatal error // the first failure that stops the cycle; read after done
}

type readyCommit struct {
	b *batched
	c catalog.SettleCommit
}

// newGroupCommit starts the committer of a batch of up to n objects.
func (s *Settler) newGroupCommit(ctx context.Context, f catalog.Fence, opts cycle.Options, t *tally, n int) *groupCommit {
	gc := &groupCommit{s: s, f: f, opts: opts, t: t, in: make(chan readyCommit, n), done: make(chan struct{})}
	go gc.run(ctx)
	return gc
}

// submit hands one published object's commit to the committer (never
// blocks: the channel holds the whole batch).
func (gc *groupCommit) submit(b *batched, c catalog.SettleCommit) { gc.in <- readyCommit{b: b, c: c} }

// close commits what was submitted and returns the first failure that
// stops the cycle (a lost lease, a halt), if any.
func (gc *groupCommit) close() error {
	close(gc.in)
	<-gc.done
	return gc.fatal
}

func (gc *groupCommit) run(ctx context.Context) {
	defer close(gc.done)
	limit := max(gc.s.c.BatchStreams, 1)
	for {
		first, ok := <-gc.in
		if !ok {
			return
		}
		group := []readyCommit{first}
		timer := time.NewTimer(groupCommitWait)
	gather:
		for len(group) < limit {
			select {
			case r, ok := <-gc.in:
				if !ok {
					break gather
				}
				group = append(group, r)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		gc.flush(ctx, group)
	}
}

// flush commits one group and handles each stream's outcome.
func (gc *groupCommit) flush(ctx context.Context, group []readyCommit) {
	s := gc.s
	scs := make([]catalog.StreamCommit, len(group))
	for i, r := range group {
		scs[i] = catalog.StreamCommit{Stream: r.b.ds.Stream, Commits: []catalog.SettleCommit{r.c}}
	}
	if gc.fatal != nil {
		return // the cycle stops: the intents stay open, taken up next cycle
	}
	errs, err := s.d.DB.CommitSettles(ctx, gc.f, scs, func() { s.crash(CrashBatchMidCommit) })
	for i, r := range group {
		serr := err
		if serr == nil {
			serr = errs[i]
		}
		if serr == nil {
			s.committed(r.b.out, r.b.p, r.c, &r.b.counts)
			r.b.counts.StreamsSettled++
			gc.t.add(r.b.counts)
			continue
		}
		if gc.fatal == nil {
			gc.fatal = s.failed(ctx, gc.f, r.b.ds.Stream, serr, gc.opts, gc.t)
		}
	}
}
