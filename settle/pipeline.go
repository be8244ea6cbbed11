package settle

import (
	"context"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// The settle pipeline (docs/architecture.md#the-settle-pipeline). Every due
// stream settles in a batch, through the same phases in this order:
//
//  1. snapshots: each stream's row, first window of refs and last catalog
//     entry, for the whole batch in one read transaction (snapshots);
//  2. windows: each stream's standing tail, its window's chunks resolved
//     through the cycle's slot reads, the records of pending erasures
//     re-encoded as tombstones, and its plan (windows, stream.go);
//  3. intents: each stream's next output's publish intent, the batch's in
//     one transaction, before any of their bytes is written (intents);
//  4. publishes: the PUTs or assemblies, adopting what a key holds already
//     (publishes, publish.go), each stream's commit joining a group as its
//     object stands (groupCommit);
//  5. advance: each stream's tail moves on to what it committed, and what
//     is left of its window is planned again where an adopted object
//     covers other records than planned (advance, stream.go).
//
// Phases 3 to 5 repeat while a stream has outputs left in its window; 2 to
// 5 while it has windows left. Most batches are many small streams, each
// one object: one snapshot, one intent transaction and commits grouped by
// up to Config.BatchStreams. A stream whose backlog takes more than one
// window, and one with pending erasures, is a batch of one: it holds one
// of Config.HotStreams tokens between windows (it carries up to a cap's
// worth of records), and waiting for one must not hold a batch's other
// streams back.

// batchRefs bounds the refs a batch's snapshot reads per stream: a stream
// with more goes on as a batch of one, which reads its backlog in windows.
// At some 200 bytes a ref, a batch's snapshot holds at most
// BatchStreams x batchRefs refs (64 streams: about 3 MB).
const batchRefs = 256

// batchesInFlight is how many batches of more than one stream a cycle runs
// at once: while one batch waits on its snapshot, its intents or its last
// PUTs, the next one's streams take the free --settle-concurrency slots.
const batchesInFlight = 4

// pipeline is one cycle's settle: what its batches share.
type pipeline struct {
	s    *Settler
	f    catalog.Fence
	rd   *bundle.Reader // the cycle's reader: slot reads, the footer cache
	opts cycle.Options
	// work is --settle-concurrency: every stream's reads and PUTs hold
	// one slot while they run, whatever batch the stream is in.
	work *semaphore.Weighted
	// singles are the batches of one, settled by Concurrency workers as
	// soon as they are known (streamQueue).
	singles *streamQueue

	mu       sync.Mutex
	total    cycle.Counts
	firstErr error // the first transient failure of a stream
	budget   int64 // what is left of --settle-max-bytes
}

// settleAll settles the due streams: streams with pending erasures (and
// every stream when batches are off, or on a dry run) as batches of one,
// first; the others in batches of Config.BatchStreams.
func (p *pipeline) settleAll(ctx context.Context, due []catalog.DueStream, erasing map[catalog.StreamID]bool) error {
	size := p.s.c.BatchStreams
	if p.opts.DryRun || size < 1 {
		size = 1
	}
	// A failing batch stops the singles too (cancel), as a failing single
	// stops the batches (bctx is gctx's).
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(wctx)
	defer p.singles.dropOnDone(gctx)()
	for range p.s.c.Concurrency {
		g.Go(func() error {
			for b, ok := p.singles.pop(); ok; b, ok = p.singles.pop() {
				if err := p.batch(gctx, []*stream{b}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	batchable := make([]*stream, 0, len(due))
	for _, ds := range due {
		b := &stream{ds: ds, erasing: erasing[ds.Stream], hot: hot{tokens: p.s.hot}}
		if size == 1 || b.erasing {
			p.singles.push(b)
		} else {
			batchable = append(batchable, b)
		}
	}
	bg, bctx := errgroup.WithContext(gctx)
	bg.SetLimit(batchesInFlight)
	for batch := range slices.Chunk(batchable, size) {
		bg.Go(func() error { return p.batch(bctx, batch) })
	}
	if err := bg.Wait(); err != nil {
		// A single's error is the cause when one cancelled the batches;
		// else the batch's stops the singles, and the streams under way
		// end (fenced, cancelled) before the cycle does.
		bySingle := gctx.Err() != nil
		p.singles.drop()
		cancel()
		if gerr := g.Wait(); gerr != nil && bySingle {
			err = gerr
		}
		return err
	}
	p.singles.close()
	return g.Wait()
}

// batch settles one batch through the pipeline's phases. A returned error
// stops the cycle (a lost lease, a halt); every other failure is the
// failing stream's own (leave).
func (p *pipeline) batch(ctx context.Context, streams []*stream) error {
	if len(streams) == 1 {
		defer streams[0].hot.release()
	}
	streams, err := p.snapshots(ctx, streams)
	for err == nil && len(streams) > 0 {
		if streams, err = p.nextRefs(ctx, streams); err != nil {
			break
		}
		if streams, err = p.windows(ctx, streams); err != nil {
			break
		}
		for live := publishing(streams); len(live) > 0 && err == nil; live = publishing(streams) {
			err = p.round(ctx, live)
			streams = remaining(streams)
		}
		if err == nil {
			streams = p.windowDone(streams)
		}
	}
	return err
}

// round publishes and commits the next output of each stream in live:
// phases 3 to 5.
func (p *pipeline) round(ctx context.Context, live []*stream) error {
	live, err := p.intents(ctx, live)
	if err != nil {
		return err
	}
	if live, err = p.publishes(ctx, live); err != nil {
		return err
	}
	_, err = p.advance(ctx, live)
	return err
}

// snapshots is phase 1: the snapshot of every stream not yet read, in one
// transaction. A stream whose retention is behind gets it first
// (catalog.Settle.SkipBelowLow: it waits behind an absorb holding the row
// lock), then a snapshot again of what is left. In a batch of more than
// one, a stream whose backlog takes more than one window goes on as a
// batch of one.
func (p *pipeline) snapshots(ctx context.Context, streams []*stream) ([]*stream, error) {
	limit := p.s.c.WindowRefs
	if len(streams) > 1 {
		limit = min(limit, batchRefs)
	}
	var unread, behind []*stream
	for _, b := range streams {
		if !b.snapped {
			unread = append(unread, b)
		}
	}
	p.readSnapshots(ctx, unread, limit)
	for _, b := range unread {
		if !b.done && b.err == nil && b.st.SettledThrough < b.st.LowRecord && !p.opts.DryRun {
			if _, b.err = p.s.d.DB.SkipBelowLow(ctx, p.f, b.st.ID); b.err == nil {
				behind = append(behind, b)
			}
		}
	}
	p.readSnapshots(ctx, behind, limit)
	for _, b := range streams {
		if b.err == nil && b.st.SettledThrough >= b.st.NextRecord {
			b.done = true // nothing to settle (the marker is refreshed by the next commit)
		}
	}
	streams, err := p.leave(ctx, streams)
	if err != nil || len(streams) < 2 {
		return streams, err
	}
	kept := streams[:0]
	for _, b := range streams {
		if b.long(p.s.c.WindowRecords) {
			p.singles.push(b)
		} else {
			kept = append(kept, b)
		}
	}
	return kept, nil
}

// readSnapshots reads the snapshots of the streams bs, at most limit refs
// each. A stream that no longer exists is done (nothing to settle); when
// the read fails, every stream failed the same way, and one is enough to
// stop the cycle or note the retry.
func (p *pipeline) readSnapshots(ctx context.Context, bs []*stream, limit int) {
	if len(bs) == 0 {
		return
	}
	snaps, err := p.s.d.DB.StreamSnapshots(ctx, streamIDs(bs), limit)
	if err != nil {
		bs[0].err = err
		for _, b := range bs[1:] {
			b.done = true
		}
		return
	}
	for _, b := range bs {
		snap, ok := snaps[b.ds.Stream]
		b.snapped, b.done = true, !ok
		b.st, b.refs, b.last, b.more = snap.Stream, snap.Refs, snap.Last, len(snap.Refs) == limit
	}
}

// nextRefs reads the refs of the next window of a stream that has one
// (a batch of one: more than one window), once it holds a hot token; a
// batch of one whose first window is already long takes its token first.
func (p *pipeline) nextRefs(ctx context.Context, streams []*stream) ([]*stream, error) {
	if len(streams) != 1 {
		return streams, nil
	}
	b := streams[0]
	if !b.needRefs && !b.hotFirst(p.s.c.WindowRefs, p.s.c.WindowRecords) {
		return streams, nil
	}
	if err := b.hot.take(ctx); err != nil {
		return nil, err
	}
	if b.needRefs {
		b.refs, b.err = p.s.d.DB.RefsWindow(ctx, b.st.ID, b.r.at, b.st.NextRecord, p.s.c.WindowRefs)
		b.more, b.needRefs = len(b.refs) == p.s.c.WindowRefs, false
	}
	return p.leave(ctx, streams)
}

// windows is phase 2: each stream's next window, resolved and planned,
// all at once (each holding a work slot).
func (p *pipeline) windows(ctx context.Context, streams []*stream) ([]*stream, error) {
	if err := p.each(ctx, streams, p.window); err != nil {
		return nil, err
	}
	return p.leave(ctx, streams)
}

// intents is phase 3: the publish intents of each stream's next output, in
// one transaction, before any of their bytes is written. An intent may be
// above the planned revision: its base used that one before, and its key
// may be deleted, late, at any time (docs/architecture.md#no-late-delete);
// the bytes do not name their revision, only the key changes. An intent
// an earlier attempt opened (Reopened) is taken up: its upload resumed or
// aborted, what its key holds adopted (put).
func (p *pipeline) intents(ctx context.Context, live []*stream) ([]*stream, error) {
	reqs := make([]catalog.IntentRequest, len(live))
	for i, b := range live {
		target, err := Target(b.outs[0].Key)
		if err != nil {
			return nil, err // a key this package made: a bug, not the stream's
		}
		reqs[i] = catalog.IntentRequest{Target: target, Class: catalog.ClassStandard}
	}
	intents, errs, err := p.s.d.DB.OpenPublishIntents(ctx, p.f, reqs)
	if err != nil {
		// Nothing of the batch is open: one stream is enough to stop the
		// cycle or note the retry.
		live[0].err = err
		for _, b := range live[1:] {
			b.done = true
		}
		return p.leave(ctx, live)
	}
	p.s.crash(CrashAfterIntent)
	for i, b := range live {
		if b.err = errs[i]; b.err == nil {
			b.intent = intents[i]
			b.outs[0].Key, b.outs[0].Revision = intents[i].ObjectKey, uint32(intents[i].Revision)
		}
	}
	return p.leave(ctx, live)
}

// publishes is phase 4: each stream's object published under its intent
// (each holding a work slot), its commit grouped with others' as it stands.
func (p *pipeline) publishes(ctx context.Context, live []*stream) ([]*stream, error) {
	gc := p.newGroupCommit(ctx, len(live))
	err := p.each(ctx, live, func(ctx context.Context, b *stream) error { return p.publish(ctx, b, gc) })
	gc.close()
	if err != nil {
		return nil, err
	}
	for _, b := range live {
		if b.cerr != nil {
			b.err, b.cerr = b.cerr, nil
		}
	}
	return p.leave(ctx, live)
}

// advance is phase 5: each stream moves on past what it committed.
func (p *pipeline) advance(ctx context.Context, live []*stream) ([]*stream, error) {
	for _, b := range live {
		b.err = p.moveOn(ctx, b)
	}
	return p.leave(ctx, live)
}

// windowDone ends the window of each stream: one whose backlog is settled
// leaves the pipeline; one with more to read goes on with its next window,
// in this batch when it is a batch of one, else as one.
func (p *pipeline) windowDone(streams []*stream) []*stream {
	var next []*stream
	for _, b := range streams {
		switch {
		case b.final:
			p.finish(b)
		case len(streams) > 1:
			b.needRefs = true
			p.singles.push(b)
		default:
			b.needRefs = true
			next = append(next, b)
		}
	}
	return next
}

// each runs fn on every stream at once, each holding one of the cycle's
// work slots while it runs; fn's error is the stream's. The error is the
// context's, when a slot could not be had. A stream whose fn ends its
// goroutine instead of returning (a test's crash hook, runtime.Goexit,
// standing for a process death) is gone: nothing more of it is done.
func (p *pipeline) each(ctx context.Context, streams []*stream, fn func(context.Context, *stream) error) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, b := range streams {
		g.Go(func() error {
			if err := p.work.Acquire(gctx, 1); err != nil {
				return err
			}
			defer p.work.Release(1)
			returned := false
			defer func() {
				if !returned {
					b.gone = true
				}
			}()
			b.err = fn(gctx, b)
			returned = true
			return nil
		})
	}
	return g.Wait()
}

// leave takes the streams that are done or failed out of a phase's list:
// a failure is handled (streamFailed) and the stream's counts added. The
// error is the first failure that stops the cycle.
func (p *pipeline) leave(ctx context.Context, streams []*stream) ([]*stream, error) {
	kept := streams[:0:0]
	var stop error
	for _, b := range streams {
		switch {
		case b.gone:
			b.done = true // as a process death ends it: nothing more, nothing counted
		case b.err != nil:
			if err := p.s.streamFailed(ctx, p.f, b.ds.Stream, b.err, p.opts, &p.total, &p.mu, &p.firstErr); err != nil && stop == nil {
				stop = err
			}
			p.finish(b)
		case b.done:
			p.finish(b)
		default:
			kept = append(kept, b)
		}
	}
	return kept, stop
}

// finish adds a stream's counts to the cycle's once it leaves.
func (p *pipeline) finish(b *stream) {
	if b.err == nil && b.counts.ObjectsPublished+b.counts.ObjectsAdopted > 0 {
		b.counts.StreamsSettled++
	}
	p.mu.Lock()
	p.total.Add(b.counts)
	p.mu.Unlock()
	b.counts, b.done = cycle.Counts{}, true
}

// take spends n bytes of the cycle's --settle-max-bytes budget; false when
// it is spent.
func (p *pipeline) take(n int64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.budget <= 0 {
		return false
	}
	p.budget -= n
	return true
}

// publishing is the streams with an output to publish.
func publishing(streams []*stream) []*stream {
	var out []*stream
	for _, b := range streams {
		if len(b.outs) > 0 {
			out = append(out, b)
		}
	}
	return out
}

// remaining is the streams still in the pipeline.
func remaining(streams []*stream) []*stream {
	out := streams[:0:0]
	for _, b := range streams {
		if !b.done {
			out = append(out, b)
		}
	}
	return out
}

func streamIDs(streams []*stream) []catalog.StreamID {
	ids := make([]catalog.StreamID, len(streams))
	for i, b := range streams {
		ids[i] = b.ds.Stream
	}
	return ids
}

// groupCommitWait bounds how long a stream whose object is published waits
// for others to share its commit: a group is committed once it holds
// BatchStreams streams, or this long after its first stream was ready,
// so one slow PUT delays no one else's commit by more.
const groupCommitWait = 50 * time.Millisecond

// groupCommit gathers the commits of a round's streams as their objects
// stand and commits them in groups (catalog.Settle.CommitSettles, each
// stream in a savepoint of its own, so one failing its check is rolled
// back alone): a group is committed once it holds BatchStreams streams,
// or groupCommitWait after its first, or when the round has no more. Each
// stream's outcome is its own: committed (and counted), or its error.
type groupCommit struct {
	p    *pipeline
	in   chan *stream
	done chan struct{}
	stop error // a failure that stops the cycle: later groups are not committed
	// died: the committer's goroutine ended mid-commit (a test's crash
	// hook, standing for a process death): its streams are gone.
	died bool
}

// newGroupCommit starts the committer of a round of up to n objects.
func (p *pipeline) newGroupCommit(ctx context.Context, n int) *groupCommit {
	gc := &groupCommit{p: p, in: make(chan *stream, n), done: make(chan struct{})}
	go gc.run(ctx)
	return gc
}

// submit hands one stream's commit to the committer (never blocks: the
// channel holds the whole round).
func (gc *groupCommit) submit(b *stream) { gc.in <- b }

// close commits what was submitted.
func (gc *groupCommit) close() {
	close(gc.in)
	<-gc.done
	if gc.died {
		for b := range gc.in {
			b.gone = true
		}
	}
}

func (gc *groupCommit) run(ctx context.Context) {
	defer close(gc.done)
	var group []*stream
	returned := false
	defer func() {
		if !returned {
			gc.died = true
			for _, b := range group {
				b.gone = true
			}
		}
	}()
	limit := max(gc.p.s.c.BatchStreams, 1)
	for {
		first, ok := <-gc.in
		if !ok {
			returned = true
			return
		}
		group = []*stream{first}
		timer := time.NewTimer(groupCommitWait)
	gather:
		for len(group) < limit {
			select {
			case b, ok := <-gc.in:
				if !ok {
					break gather
				}
				group = append(group, b)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		gc.flush(ctx, group)
	}
}

// flush commits one group and records each stream's outcome.
func (gc *groupCommit) flush(ctx context.Context, group []*stream) {
	s := gc.p.s
	if gc.stop != nil {
		for _, b := range group {
			b.cerr = gc.stop // the cycle stops: the intents stay open, taken up next cycle
		}
		return
	}
	scs := make([]catalog.StreamCommit, len(group))
	for i, b := range group {
		scs[i] = catalog.StreamCommit{Stream: b.ds.Stream, Commits: []catalog.SettleCommit{b.commit}}
	}
	errs, err := s.d.DB.CommitSettles(ctx, gc.p.f, scs, func() { s.crash(CrashBatchMidCommit) })
	for i, b := range group {
		b.cerr = err
		if b.cerr == nil {
			b.cerr = errs[i]
		}
		switch {
		case b.cerr == nil:
			b.committed = true
			s.committed(b.outs[0], b.p, b.commit, &b.counts)
		case cycle.IsLeaseLost(b.cerr), cycle.IsHalt(b.cerr):
			gc.stop = b.cerr
		}
	}
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
