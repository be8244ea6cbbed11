package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// session is one writer incarnation: one nonce, one epoch, seqs from the
// head up. It ends when a bound is reached, at a crash fault, or when it is
// fenced (by its own failover fault or by another writer).
type session struct {
	w        *writer
	nonce    uint64
	epoch    int64
	firstSeq int64
	traffic  *Traffic
	gen      *Gen

	// Owned by the builder goroutine.
	next         map[bundlefmt.StreamID]int64 // next record number to hand out
	seq          int64
	limitFlights int64 // flights this session may build (-1: no limit)
	limitBytes   int64 // flight bytes this session may build (-1: no limit)
	failoverSet  bool
	rateStart    time.Time // pacing under WriteOptions.Rate
	produced     int64     // content bytes produced since rateStart
}

// flight is one flight from build to absorb.
type flight struct {
	seq      int64
	data     []byte // dropped once written
	size     int64
	meta     writepath.AbsorbFlight
	records  int64
	content  int64
	lost     bool // fault: never absorb
	crash    bool // fault: crash before absorbing it
	failover bool // fault: a new writer fences this one now
	lossy    bool // fault: the PUT reply is lost
	buildErr error
	putErr   error
	done     bool
}

type outcome struct {
	crashed bool
	next    *fenceResult // a failover fault's new writer
	err     error
}

type fenceResult struct {
	nonce uint64
	epoch int64
	err   error
}

func (w *writer) newSession(ctx context.Context, nonce uint64, epoch int64, idx uint64) (*session, error) {
	star, err := w.db.Streams().Star(ctx, w.opts.Star)
	if err != nil {
		return nil, err
	}
	if star.Epoch != epoch {
		return nil, fmt.Errorf("star %q is at epoch %d, this writer's is %d: %w", w.opts.Star, star.Epoch, epoch, ErrFenced)
	}
	streams, err := w.db.Streams().StreamsOfStar(ctx, w.opts.Star)
	if err != nil {
		return nil, err
	}
	if len(streams) == 0 {
		return nil, fmt.Errorf("%w: star %q has no streams", ErrUsage, w.opts.Star)
	}
	s := &session{
		w: w, nonce: nonce, epoch: epoch, firstSeq: star.NextSeq, seq: star.NextSeq,
		gen:  NewGen(w.gen),
		next: make(map[bundlefmt.StreamID]int64, len(streams)),
	}
	ids := make([]bundlefmt.StreamID, len(streams))
	for i, st := range streams {
		id := st.ID
		ids[i] = id
		s.next[id] = st.NextRecord
		if _, ok := w.profiles[id]; !ok {
			w.profiles[id] = w.gen.Stream(id)
		}
	}
	s.traffic = NewTraffic(w.gen.Seed, w.opts.Session*1_000_003+idx, ids, w.opts.MaxBatch)
	s.limitFlights, s.limitBytes = -1, -1
	if w.opts.Flights > 0 {
		s.limitFlights = max(0, w.opts.Flights-w.c.flights.Load())
	}
	if w.opts.Bytes > 0 {
		s.limitBytes = max(0, w.opts.Bytes-w.c.flightBytes.Load())
	}
	w.log.Debug("writer session", "epoch", epoch, "head", star.NextSeq, "nonce", fmt.Sprintf("%016x", nonce))
	return s, nil
}

// run is the session's coordinator. It owns the pipeline's state: flights
// come from the builder in seq order; a flight's PUT starts only when every
// seq at or below seq-W has been written, so at most W = fence_window PUTs
// are in flight and none lies W or more past an unwritten seq (the fencer's
// poison run of W seqs then covers every slot this writer may still write);
// written flights go to the absorber in seq order, in absorb batches.
func (s *session) run(ctx context.Context) outcome {
	w := s.w
	bctx, stopBuild := context.WithCancel(ctx)
	defer stopBuild()
	buildCh := make(chan *flight)
	go s.builder(bctx, buildCh)
	p := &pipeline{
		s: s, window: int64(w.star.FenceWindow), perTx: w.opts.AbsorbFlights,
		putCh: make(chan *flight, w.star.FenceWindow), absIn: make(chan []*flight), absOut: make(chan absorbResult),
		pending: map[int64]*flight{}, written: map[int64]bool{},
		low: s.firstSeq, nextAbs: s.firstSeq, nextStart: s.firstSeq, building: true,
	}
	p.maxPending = int64(max(2*p.perTx, int(p.window)) + int(p.window))
	go s.absorber(ctx, p.absIn, p.absOut)
	tick := time.NewTicker(max(w.opts.FlightInterval/4, 5*time.Millisecond))
	defer tick.Stop()

	done := ctx.Done()
	for {
		p.handOn()
		p.dispatchBatch()
		if p.inflight == 0 && !p.absBusy && (p.halt != nil || !p.building && len(p.pending) == 0 && len(p.batch) == 0) {
			break
		}
		var recv chan *flight
		if p.building && p.halt == nil && p.nextStart < p.low+p.window && p.unabsorbed < p.maxPending {
			recv = buildCh
		}
		select {
		case f, ok := <-recv:
			if !ok {
				p.building = false
				continue
			}
			p.started(ctx, f)
		case f := <-p.putCh:
			p.put(f)
		case r := <-p.absOut:
			p.absBusy = false
			p.unabsorbed -= int64(r.n)
			if r.err != nil && p.halt == nil {
				p.halt = r.err
			}
		case <-tick.C:
		case <-done:
			done = nil // the PUTs and the absorber see it too and end soon
			if p.halt == nil {
				p.halt = ctx.Err()
			}
		}
		if p.halt != nil {
			stopBuild()
		}
	}
	// A halt found while handing flights on (a crash fault) ends the loop
	// before its bottom stops the builder: stop it here, or it would build
	// flights for nothing until a bound ends the run.
	stopBuild()
	close(p.absIn)
	for range buildCh { // let the builder go
	}
	return s.outcome(p.halt, p.fenceCh)
}

// pipeline is run's state: the flights between the builder, their PUTs and
// the absorber. Only run's goroutine touches it.
type pipeline struct {
	s            *session
	window       int64
	perTx        int
	maxPending   int64
	putCh        chan *flight
	absIn        chan []*flight
	absOut       chan absorbResult
	pending      map[int64]*flight // PUT started, not yet handed on
	written      map[int64]bool    // PUT done at or past low
	low, nextAbs int64
	nextStart    int64
	inflight     int64
	unabsorbed   int64
	batch        []*flight
	batchAt      time.Time
	absBusy      bool
	building     bool
	halt         error
	fenceCh      chan fenceResult
}

// handOn hands written flights on in seq order: into the absorb batch, or
// counted off when lost; a crash fault halts.
func (p *pipeline) handOn() {
	for p.halt == nil {
		f := p.pending[p.nextAbs]
		if f == nil || !f.done {
			return
		}
		delete(p.pending, p.nextAbs)
		p.nextAbs++
		switch {
		case f.crash:
			p.halt = errCrash
		case f.lost:
			p.unabsorbed--
		default:
			if len(p.batch) == 0 {
				p.batchAt = time.Now()
			}
			p.batch = append(p.batch, f)
		}
	}
}

// dispatchBatch sends the absorber a batch when it is idle and the batch
// is full, the builder is done, or the batch has waited a flight interval.
func (p *pipeline) dispatchBatch() {
	if p.halt != nil || p.absBusy || len(p.batch) == 0 {
		return
	}
	if len(p.batch) < p.perTx && p.building && time.Since(p.batchAt) < p.s.w.opts.FlightInterval {
		return
	}
	n := min(len(p.batch), p.perTx)
	p.absIn <- p.batch[:n:n]
	p.batch = p.batch[n:]
	p.batchAt = time.Now()
	p.absBusy = true
}

// started takes a built flight: its PUT starts, and a failover fault
// starts the fence of a new writer (once).
func (p *pipeline) started(ctx context.Context, f *flight) {
	if f.buildErr != nil {
		p.halt = f.buildErr
		return
	}
	w := p.s.w
	p.pending[f.seq] = f
	p.nextStart = f.seq + 1
	p.inflight++
	p.unabsorbed++
	go p.s.put(ctx, f, p.putCh)
	if f.failover && p.fenceCh == nil {
		w.c.failovers.Add(1)
		p.fenceCh = make(chan fenceResult, 1)
		go func(nonce uint64) {
			e, err := w.fence(ctx, nonce)
			p.fenceCh <- fenceResult{nonce: nonce, epoch: e, err: err}
		}(newNonce())
	}
}

// put takes a finished PUT: a failure halts; a success moves low past
// every written seq.
func (p *pipeline) put(f *flight) {
	p.inflight--
	f.done = true
	if f.putErr != nil {
		if p.halt == nil {
			p.halt = f.putErr
		}
		return
	}
	p.written[f.seq] = true
	for p.written[p.low] {
		delete(p.written, p.low)
		p.low++
	}
}

// outcome is how the session ended: a failover's new writer, a crash, a
// fence by another writer, or an error.
func (s *session) outcome(halt error, fenceCh chan fenceResult) outcome {
	w := s.w
	fenced := isTaken(halt) || errors.Is(halt, writepath.ErrFenced)
	if fenceCh != nil {
		r := <-fenceCh
		switch {
		case r.err != nil:
			return outcome{err: fmt.Errorf("failover fence: %w", r.err)}
		case halt != nil && !fenced && !errors.Is(halt, errCrash):
			return outcome{err: halt}
		}
		w.log.Info("failover: the new writer took over", "old_epoch", s.epoch, "epoch", r.epoch, "stopped_by", errString(halt))
		return outcome{next: &r}
	}
	switch {
	case halt == nil:
		return outcome{}
	case errors.Is(halt, errCrash):
		return outcome{crashed: true}
	case fenced:
		return outcome{err: fmt.Errorf("writer of star %q at epoch %d: %w: %v", w.opts.Star, s.epoch, ErrFenced, halt)}
	}
	return outcome{err: halt}
}

func errString(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}

// put writes one flight's slot and reports on putCh.
func (s *session) put(ctx context.Context, f *flight, putCh chan<- *flight) {
	w := s.w
	start := time.Now()
	landed, err := w.chain.putSlot(ctx, s.epoch, f.seq, s.nonce, f.data, f.lossy)
	w.c.putNanos.Add(int64(time.Since(start)))
	f.data = nil
	if err != nil && landed > 0 {
		w.recordSlot(s.epoch, f.seq, s.nonce, false, false) // some copies of a taken seq
	}
	if err == nil {
		w.c.flights.Add(1)
		w.c.flightBytes.Add(f.size)
		if f.lossy {
			w.c.lostReplies.Add(1)
		}
		if f.lost {
			w.c.lost.Add(1)
		}
		w.recordSlot(s.epoch, f.seq, s.nonce, false, false)
	}
	f.putErr = err
	putCh <- f
}

type absorbResult struct {
	n   int
	err error
}

// absorber runs absorb transactions one at a time, in seq order.
func (s *session) absorber(ctx context.Context, in <-chan []*flight, out chan<- absorbResult) {
	w := s.w
	for batch := range in {
		flights := make([]writepath.AbsorbFlight, len(batch))
		for i, f := range batch {
			flights[i] = f.meta
		}
		start := time.Now()
		err := s.absorb(ctx, flights)
		w.c.absorbNanos.Add(int64(time.Since(start)))
		if err == nil {
			var recs, content int64
			for _, f := range batch {
				recs += f.records
				content += f.content
				w.recordSlot(s.epoch, f.seq, s.nonce, false, true)
			}
			w.c.absorbed.Add(int64(len(batch)))
			w.c.records.Add(recs)
			w.c.content.Add(content)
			w.c.txs.Add(1)
			if eerr := w.eraser.afterAbsorb(ctx, flights); eerr != nil && ctx.Err() == nil {
				w.log.Warn("recording a write-time erasure failed; writing goes on", "err", eerr)
			}
		}
		out <- absorbResult{n: len(batch), err: err}
	}
}

// absorb runs one absorb transaction, retrying transient failures. A retry
// that finds the head already past the batch (the commit landed, its reply
// did not) counts as done.
func (s *session) absorb(ctx context.Context, flights []writepath.AbsorbFlight) error {
	w := s.w
	last := flights[len(flights)-1]
	var err error
	for attempt := 0; attempt < 6; attempt++ {
		if attempt > 0 {
			if serr := sleepCtx(ctx, backoff(attempt)); serr != nil {
				return serr
			}
		}
		err = w.wp.AbsorbHeld(ctx, w.opts.Star, flights, w.opts.BeforeAbsorbCommit)
		switch {
		case err == nil:
			return nil
		case attempt > 0 && errors.Is(err, writepath.ErrOutOfOrder):
			st, gerr := w.db.Streams().Star(ctx, w.opts.Star)
			if gerr == nil && st.Epoch == last.Epoch && st.NextSeq == last.Seq+1 {
				return nil
			}
			return err
		case !catalog.IsRetryable(err):
			return err
		}
	}
	return fmt.Errorf("absorb slots %d..%d of epoch %d: %w", flights[0].Seq, last.Seq, last.Epoch, err)
}

// builder renders flights in seq order until the session's budget, the
// run's deadline, Stop or ctx ends it; it closes out when done.
func (s *session) builder(ctx context.Context, out chan<- *flight) {
	defer close(out)
	var flights, bytes int64
	for {
		if s.limitFlights >= 0 && flights >= s.limitFlights || s.limitBytes >= 0 && bytes >= s.limitBytes {
			return
		}
		f := s.build(ctx)
		if f == nil {
			return
		}
		flights++
		bytes += f.size
		select {
		case out <- f:
		case <-ctx.Done():
			return
		}
		if f.buildErr != nil {
			return
		}
	}
}

// stopped reports whether production must stop now.
func (s *session) stopped(ctx context.Context) bool {
	w := s.w
	if ctx.Err() != nil || !w.deadline.IsZero() && !time.Now().Before(w.deadline) {
		return true
	}
	if w.opts.Stop != nil {
		select {
		case <-w.opts.Stop:
			return true
		default:
		}
	}
	return false
}

type streamAcc struct {
	cb      *bundlefmt.ChunkBuilder
	first   int64
	count   int64
	content int64
}

// build gathers producer batches until the flight holds FlightBytes or
// FlightInterval has passed (with at least one batch), then renders it. It
// returns nil when production stops (a partial flight is dropped: its
// records were never handed out, so nothing is lost).
func (s *session) build(ctx context.Context) *flight {
	w := s.w
	accs := map[bundlefmt.StreamID]*streamAcc{}
	var order []bundlefmt.StreamID
	start := time.Now()
	flush := start.Add(w.opts.FlightInterval)
	var size int64
	for size < w.opts.FlightBytes {
		if s.stopped(ctx) {
			return nil
		}
		now := time.Now()
		if len(order) > 0 && !now.Before(flush) {
			break
		}
		if w.opts.Rate > 0 {
			// Paced over the session, not the flight: time spent waiting for
			// the PUT window is not made up later by a burst.
			if s.rateStart.IsZero() {
				s.rateStart = start
			}
			due := s.rateStart.Add(time.Duration(float64(s.produced) / float64(w.opts.Rate) * float64(time.Second)))
			if due.After(now) {
				wait := min(due.Sub(now), max(flush.Sub(now), time.Millisecond))
				if sleepCtx(ctx, min(wait, 100*time.Millisecond)) != nil {
					return nil
				}
				continue
			}
		}
		id, n := s.traffic.Next()
		a := accs[id]
		if a == nil {
			a = &streamAcc{first: s.next[id]}
			a.cb = bundlefmt.NewChunkBuilder(id, uint64(a.first))
			accs[id] = a
			order = append(order, id)
		}
		p := w.profiles[id]
		for i := 0; i < n; i++ {
			rec, ts := s.gen.Record(p, a.first+a.count)
			before := a.cb.Size()
			if err := a.cb.Add(rec, ts, i == n-1); err != nil {
				return &flight{seq: s.seq, buildErr: fmt.Errorf("build record %d of stream %s: %w", a.first+a.count, id, err)}
			}
			a.count++
			cb := rec.ContentBytes()
			a.content += cb
			s.produced += cb
			size += int64(a.cb.Size() - before)
		}
	}
	sortIDs(order)
	f := &flight{seq: s.seq}
	chunks := make([]bundlefmt.Chunk, len(order))
	f.meta = writepath.AbsorbFlight{Epoch: s.epoch, Seq: s.seq, Batches: make([]writepath.AbsorbBatch, len(order))}
	for i, id := range order {
		a := accs[id]
		chunks[i] = a.cb.Chunk()
		f.meta.Batches[i] = writepath.AbsorbBatch{Stream: id, FirstRecord: a.first, Count: a.count}
		f.records += a.count
		f.content += a.content
	}
	data, err := bundlefmt.EncodeFlight(uint64(s.epoch), uint64(s.seq), s.nonce, chunks)
	if err != nil {
		f.buildErr = fmt.Errorf("render flight %d/%d: %w", s.epoch, s.seq, err)
		return f
	}
	env, err := bundlefmt.DecodeEnvelope("", data)
	if err != nil {
		f.buildErr = fmt.Errorf("render flight %d/%d: %w", s.epoch, s.seq, err)
		return f
	}
	f.data, f.size = data, int64(len(data))
	f.meta.FooterOffset, f.meta.FooterLength = int64(env.FooterOffset), int64(env.FooterLength)

	// Faults, drawn per flight; failover and crash end the session, so at
	// most one of them per flight and one failover per session.
	fl := w.opts.Faults
	switch u := s.traffic.Float(); {
	case !s.failoverSet && u < fl.Failover:
		f.failover, s.failoverSet = true, true
	case u >= fl.Failover && u < fl.Failover+fl.Crash:
		f.crash = true
	}
	f.lost = s.traffic.Float() < fl.Lost
	f.lossy = s.traffic.Float() < fl.LostReply
	if !f.lost {
		for _, id := range order {
			s.next[id] += accs[id].count
		}
	}
	s.seq++
	return f
}
