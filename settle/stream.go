package settle

import (
	"context"
	"sync"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// stream is one due stream as it goes through the pipeline's phases
// (pipeline.go): its snapshot, its window, its plan, and the output of
// the round under way.
type stream struct {
	ds      catalog.DueStream
	erasing bool // it has pending erasures: its records of them become tombstones

	// From its snapshot (phase 1), then its windows.
	snapped  bool
	st       catalog.Stream
	last     *catalog.Entry    // its last catalog entry at the snapshot (nil: none)
	refs     []catalog.SpanRef // the window's refs
	more     bool              // refs filled their limit: more follow
	needRefs bool              // the next window's refs are to be read
	r        *resolver
	dead     *deadReader // its pending erasures (nil: none)
	hot      hot

	// The window (phase 2): the standing tail new chunks may extend, the
	// window's chunks not yet published (those carried from the last
	// window first), and their plan.
	tail       *Tail
	chunks     []SourceChunk
	carry      []SourceChunk // kept back for the next window: a sub-cap output's
	outs       []Output      // planned, to publish in record order
	known      []knownChunk  // every chunk in play, to check a standing object against
	final      bool          // the window is the stream's last
	gapChecked bool

	// The round under way (phases 3 to 5).
	intent    catalog.Intent
	p         *published
	commit    catalog.SettleCommit
	committed bool  // the group commit committed it
	cerr      error // the group commit's failure of it (the committer's to write, until the round's commits are done)
	rewrote   bool  // p is the erasure step's rewrite of the tail, committed as that

	counts cycle.Counts
	err    error // the stream's failure in the last phase
	done   bool  // it left the pipeline
	gone   bool  // its goroutine ended mid-phase (a test's crash hook): as if its process died
}

// long reports whether the snapshot shows a backlog of more than one
// window: the refs filled their limit, or hold more than maxRecords.
func (b *stream) long(maxRecords int64) bool {
	return b.more || backlogRecords(b.refs, b.st.SettledThrough) > maxRecords
}

// hotFirst reports whether the stream's first window already needs a hot
// token: it holds the most refs or records a window may.
func (b *stream) hotFirst(maxRefs int, maxRecords int64) bool {
	return b.r == nil && (len(b.refs) >= maxRefs || backlogRecords(b.refs, b.st.SettledThrough) > maxRecords)
}

// window resolves, scrubs and plans the stream's next window (phase 2):
// at most WindowRefs refs and about WindowRecords records, so what it
// holds does not grow with how far the stream has fallen behind. Records
// of its pending erasures are written as tombstones: the chunks holding
// them, new or in the standing tail, are read, checked and re-encoded
// instead of copied. The erasures are read range by range (deadReader),
// all of those over the records written, so an object is never written
// without a tombstone a pending erasure asks for, and an attempt made
// again after a crash plans at least the tombstones the first did (what
// adoption accepts).
func (p *pipeline) window(ctx context.Context, b *stream) error {
	s := p.s
	if b.r == nil {
		if b.erasing {
			b.dead = newDeadReader(s.d.DB, b.st.ID)
		}
		tail, err := s.standingTail(ctx, b.st, b.last, b.dead)
		if err != nil {
			return err
		}
		b.tail, b.r = tail, newResolver(p.rd, p.f.Star, b.st)
	}
	res, err := b.r.window(ctx, b.refs, s.c.WindowRecords, b.more)
	if err != nil {
		return err
	}
	b.final = res.Complete
	if len(res.Chunks) > 0 && !p.take(res.Bytes) {
		p.opts.Deferred.Add(b.ds.Stream)
		b.done = true // the cycle's byte budget is spent: the next cycle goes on
		return nil
	}
	chunks := res.Chunks
	if b.dead != nil { // the stream has pending erasures
		if chunks, err = s.scrubWindow(ctx, b.dead, chunks); err != nil {
			return err
		}
	}
	b.chunks = append(b.carry, chunks...) //nolint:gocritic // appendAssign: the carried chunks lead the window's, and carry is emptied
	b.carry = nil
	if !b.gapChecked && len(b.chunks) > 0 {
		b.gapChecked = true
		if b.tail != nil && b.chunks[0].Entry.FirstRecord != b.tail.end() {
			// Retention made the first live chunk start above
			// settled_through (resolve allows that gap only up to
			// low_record): the standing tail is dead and the next object
			// starts a new run.
			b.tail = nil
		}
	}
	if len(b.chunks) == 0 {
		return nil
	}
	if p.opts.DryRun {
		outs, err := s.plan(b.st, b.tail, b.chunks)
		if err != nil {
			return err
		}
		s.printPlan(p.opts.Plan, b.st, outs, res.Complete)
		b.done = true // a dry run plans the first window only
		return nil
	}
	return p.plan(b)
}

// plan plans the stream's chunks behind its tail into outs. Unless the
// window is the stream's last, its last output is kept back when it is
// not full: its chunks are carried, to be planned with the next window's,
// so windows add no tail rewrites (only the stream's true end leaves a
// sub-cap tail).
func (p *pipeline) plan(b *stream) error {
	outs, err := p.s.plan(b.st, b.tail, b.chunks)
	if err != nil {
		return err
	}
	b.carry = nil
	if last := outs[len(outs)-1]; !b.final && !IsFull(last.Meter, -1, p.s.c.CapBytes) {
		from := last.FirstRecord
		if last.Rewrite != nil {
			from = last.Rewrite.end()
		}
		b.carry = chunksFrom(b.chunks, from)
		outs = outs[:len(outs)-1]
	}
	b.outs, b.known = outs, knownEntries(b.tail, b.chunks)
	return nil
}

// publish writes the stream's next output under its intent (phase 4) and
// hands its commit to the group. An adopted object that is the erasure
// step's rewrite of the tail (a crash kept it from its commit) covers
// nothing new: it is committed as that rewrite, and the chunks are
// planned again behind it (moveOn).
func (p *pipeline) publish(ctx context.Context, b *stream, gc *groupCommit) error {
	s, o := p.s, b.outs[0]
	b.committed, b.rewrote = false, false
	pub, err := s.put(ctx, p.f, o, b.intent, b.known, settlePoints)
	if err != nil {
		s.d.Metrics.object("failed")
		return err
	}
	b.p = pub
	if o.Rewrite != nil && pub.adopted && pub.end() == o.Rewrite.end() {
		rc := catalog.RewriteCommit{Entry: pub.catalogEntry(b.st.ID, b.st.Epoch), PrevRevision: int32(o.Rewrite.Revision),
			IntentID: b.intent.ID, ObjectKey: pub.key, OldKey: o.Rewrite.Key, ReapGrace: s.c.ReapGrace}
		if err := s.d.DB.CommitRewrite(ctx, p.f, rc); err != nil {
			return err
		}
		b.counts.ObjectsAdopted++
		s.d.Metrics.object("adopted")
		b.rewrote = true
		return nil
	}
	b.commit = s.settleCommit(b.st, o, pub, b.intent.ID)
	s.crash(CrashBeforeCommit)
	gc.submit(b)
	return nil
}

// moveOn moves the stream past the object of its round (phase 5): that
// object is its tail now, unless it is full (never rewritten: the next
// output starts a new one, and its entries need not be held). An adopted
// object is scrubbed against the pending erasures first, and one that
// covers other records than planned has the rest planned again behind it.
func (p *pipeline) moveOn(ctx context.Context, b *stream) error {
	o, pub := b.outs[0], b.p
	if b.rewrote {
		if err := p.adoptedTail(ctx, b); err != nil {
			return err
		}
		return p.plan(b)
	}
	if !b.committed {
		return nil // its commit failed: leave has its error
	}
	if b.tail != nil {
		p.s.tails.drop(b.tail.Key) // passed over or rewritten: never read again (fetch.go)
	}
	b.tail = pub.tail()
	if pub.end() == o.EndRecord() && (len(b.outs) > 1 || IsFull(o.Meter, -1, p.s.c.CapBytes)) {
		// Every output but a plan's last is full, and a window's last is
		// published only when full or the stream's last.
		b.tail = nil
		p.s.tails.drop(pub.key) // nor read again (fetch.go)
	} else if pub.adopted {
		if err := p.adoptedTail(ctx, b); err != nil {
			return err
		}
	}
	if pub.end() != o.EndRecord() {
		b.chunks = chunksFrom(b.chunks, pub.end())
		if len(b.chunks) == 0 {
			b.outs, b.carry = nil, nil
			return nil
		}
		return p.plan(b)
	}
	b.outs = b.outs[1:]
	return nil
}

// adoptedTail makes the adopted object of the round the stream's tail. An
// earlier attempt wrote it, under the erasures pending then: records of an
// erasure recorded since still hold their bytes, and a tail rewrite copies
// what it is not told to re-encode.
func (p *pipeline) adoptedTail(ctx context.Context, b *stream) error {
	pub := b.p
	if b.dead == nil { // no pending erasure: nothing to re-encode
		b.tail = pub.tail()
		return nil
	}
	d, err := b.dead.over(ctx, pub.first, pub.end())
	if err != nil {
		return err
	}
	t, err := p.s.scrubTail(ctx, pub.tail(), d)
	if err != nil {
		return err
	}
	b.tail = t
	return nil
}

// hot is a stream's hold on one of Config.HotStreams tokens: a stream
// whose backlog takes more than one window carries up to a cap's worth of
// records between windows, and only a few are settled at once. Only a
// batch of one takes one, holding nothing else while it waits.
type hot struct {
	tokens chan struct{}
	held   bool
}

// take waits for a token, once.
func (h *hot) take(ctx context.Context) error {
	if h.held {
		return nil
	}
	select {
	case h.tokens <- struct{}{}:
		h.held = true
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (h *hot) release() {
	if h.held {
		<-h.tokens
		h.held = false
	}
}

// streamQueue hands the batches of one to the cycle's workers as soon as
// they are known: the streams with pending erasures before any batch
// starts, the others as their batches find their backlogs long. So they
// start at once beside the batches, in about the order of the due list
// (forced streams first, then by deadline), rather than after every batch
// of a large star.
type streamQueue struct {
	mu     sync.Mutex
	cond   sync.Cond
	items  []*stream
	closed bool
}

func newStreamQueue() *streamQueue {
	q := &streamQueue{}
	q.cond.L = &q.mu
	return q
}

// push queues b, unless the queue is closed (the cycle is stopping).
func (q *streamQueue) push(b *stream) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.items = append(q.items, b)
	q.cond.Broadcast()
}

// close lets pop return false once the queue is empty: nothing more is
// pushed.
func (q *streamQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.cond.Broadcast()
}

// drop closes the queue and forgets what it holds (the cycle stops).
func (q *streamQueue) drop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed, q.items = true, nil
	q.cond.Broadcast()
}

// pop waits for the next stream; false when the queue is closed and empty.
func (q *streamQueue) pop() (*stream, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for len(q.items) == 0 && !q.closed {
		q.cond.Wait()
	}
	if len(q.items) == 0 {
		return nil, false
	}
	b := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return b, true
}

// dropOnDone drops q when ctx is done, and returns what stops that.
func (q *streamQueue) dropOnDone(ctx context.Context) func() bool {
	return context.AfterFunc(ctx, q.drop)
}
