package settle

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

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
//     carries their bytes;
//   - the erasure step (Eraser) rewrites every cataloged object that still
//     holds them at revision + 1, copying the clean chunks server side and
//     uploading the re-encoded ones, repoints the catalog entry with the
//     revision check, arms the old revision's reap, and sets applied_at
//     once nothing settled can hold the bytes (catalog.ApplyErasure) and
//     no bucket keeps what a DELETE removes (cycle.Options.ErasureHold).
//
// Erasures recorded after a cycle's settle step read them are honoured by
// that cycle's (or the next one's) erasure step: the object settled
// meanwhile is rewritten.

// MaxPendingErasures bounds the pending erasures of a star one cycle reads
// (oldest first). Beyond it the rest wait for later cycles: settle then may
// write records those would erase, and a later rewrite tombstones them.
const MaxPendingErasures = 100000

// span is a range of record numbers [from, to).
type span struct{ from, to uint64 }

// deadSet is the records of a stream's pending erasures, as sorted,
// disjoint, non-adjacent spans.
type deadSet []span

func newDeadSet(es []catalog.Erasure) deadSet {
	var d deadSet
	for _, e := range es {
		if e.Valid() == "" {
			d = append(d, span{uint64(e.FirstRecord), uint64(e.EndRecord())})
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i].from < d[j].from })
	out := d[:0]
	for _, sp := range d {
		if n := len(out); n > 0 && sp.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, sp.to)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// has reports whether record r is dead.
func (d deadSet) has(r uint64) bool {
	i := sort.Search(len(d), func(i int) bool { return d[i].to > r })
	return i < len(d) && d[i].from <= r
}

// intersects reports whether any record of [from, to) is dead.
func (d deadSet) intersects(from, to uint64) bool {
	i := sort.Search(len(d), func(i int) bool { return d[i].to > from })
	return i < len(d) && d[i].from < to
}

// pendingErasures reads the star's pending erasures by stream (nil: none).
func (s *Settler) pendingErasures(ctx context.Context, star string) (map[catalog.StreamID]deadSet, error) {
	pend, err := s.d.DB.PendingErasures(ctx, star, MaxPendingErasures)
	if err != nil || len(pend) == 0 {
		return nil, err
	}
	by := map[catalog.StreamID][]catalog.Erasure{}
	for _, p := range pend {
		by[p.Stream.ID] = append(by[p.Stream.ID], p.Erasure)
	}
	out := make(map[catalog.StreamID]deadSet, len(by))
	for id, es := range by {
		if d := newDeadSet(es); len(d) > 0 {
			out[id] = d
		}
	}
	return out, nil
}

// scrubChunks re-encodes with tombstones the chunks that hold dead records:
// each is read from its source and checked against its DataCRC first
// (a mismatch quarantines, as a failed copy would). It returns the chunks
// to plan and the bytes it read.
func (s *Settler) scrubChunks(ctx context.Context, chunks []SourceChunk, dead deadSet) ([]SourceChunk, int64, int, error) {
	if len(dead) == 0 {
		return chunks, 0, 0, nil
	}
	var fetched int64
	reads := 0
	var out []SourceChunk // a copy, made at the first chunk re-encoded
	for i, c := range chunks {
		if c.Data != nil || !dead.intersects(c.Entry.FirstRecord, c.Entry.EndRecord()) {
			continue
		}
		data, _, err := s.d.Topology.GetRange(ctx, c.Src.Class, c.Src.Key, int64(c.Entry.DataOffset), int64(c.Entry.ChunkBytes()))
		if err != nil {
			return nil, fetched, reads, classify(c.Src.Key, fmt.Errorf("read chunk [%d, %d) of %s to erase records: %w",
				c.Entry.FirstRecord, c.Entry.EndRecord(), c.Src.Key, err))
		}
		fetched += int64(len(data))
		reads++
		e, nd, n, err := bundlefmt.EraseRecords(c.Src.Key, c.Entry, data, dead.has)
		if err != nil {
			return nil, fetched, reads, &cycle.QuarantineError{SlotKey: c.Src.Key, Class: classOf(err), Err: err}
		}
		if n == 0 {
			continue
		}
		if out == nil {
			out = append([]SourceChunk(nil), chunks...)
		}
		out[i] = SourceChunk{Src: c.Src, Entry: e, Data: nd, Tombstoned: n, orig: c.Entry, origData: data}
	}
	if out == nil {
		return chunks, fetched, reads, nil
	}
	return out, fetched, reads, nil
}

// scrubTail re-encodes with tombstones the chunks of a settled object (the
// standing tail, or an entry the erasure step rewrites) that hold dead
// records; the others stay to be copied. It returns t itself when nothing
// changes.
func (s *Settler) scrubTail(ctx context.Context, t *Tail, dead deadSet) (*Tail, int64, int, error) {
	if t == nil || len(dead) == 0 || !dead.intersects(t.FirstRecord, t.end()) {
		return t, 0, 0, nil
	}
	src := make([]SourceChunk, len(t.Entries))
	for i, e := range t.Entries {
		src[i] = SourceChunk{Src: Source{Key: t.Key, Class: catalog.ClassStandard}, Entry: e}
	}
	got, fetched, reads, err := s.scrubChunks(ctx, src, dead)
	if err != nil {
		return t, fetched, reads, err
	}
	nt := &Tail{Key: t.Key, FirstRecord: t.FirstRecord, Revision: t.Revision, Orig: t.Entries,
		Entries: make([]bundlefmt.Entry, len(got)), Local: make([][]byte, len(got)), OrigData: make([][]byte, len(got))}
	for i, c := range got {
		nt.Entries[i], nt.Local[i], nt.OrigData[i] = c.Entry, c.Data, c.origData
		nt.Tombstoned += c.Tombstoned
	}
	if nt.Tombstoned == 0 {
		return t, fetched, reads, nil
	}
	return nt, fetched, reads, nil
}

// Eraser is the erasure step of the cycle (docs/architecture.md#the-cycle,
// step 4): it runs after retention and before trim, and shares the
// settler's store, planner and publish path.
type Eraser struct{ s *Settler }

var _ cycle.Step = (*Eraser)(nil)

// Eraser returns the erasure step that rewrites what this settler published.
func (s *Settler) Eraser() *Eraser { return &Eraser{s: s} }

// Name implements cycle.Step.
func (e *Eraser) Name() string { return "erase" }

// Run rewrites, for every pending erasure of the star, each cataloged
// object that holds its records, then applies the erasures nothing holds
// any more. A stream in quarantine is left alone (its erasures wait for
// the release); a malformed erasure row is reported and skipped.
func (e *Eraser) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	s := e.s
	var total cycle.Counts
	pend, err := s.d.DB.PendingErasures(ctx, f.Star, MaxPendingErasures)
	if err != nil || len(pend) == 0 {
		return total, err
	}
	intents, err := s.d.DB.Intents(ctx, f.Star, "publish", s.c.ReapGrace)
	if err != nil {
		return total, err
	}
	open := make(map[string]bool, len(intents))
	for _, in := range intents {
		open[in.ObjectKey] = true
	}
	var order []catalog.StreamID
	by := map[catalog.StreamID][]catalog.PendingErasure{}
	for _, p := range pend {
		if why := p.Valid(); why != "" {
			s.d.Log.Error("malformed erasure row: never applied; correct or delete it",
				"stream", fmt.Sprintf("%x", p.Stream.ID), "first_record", p.FirstRecord, "record_count", p.RecordCount, "why", why)
			continue
		}
		if p.Quarantined {
			continue // status and the pending-age alert show it; applies after a release
		}
		if _, ok := by[p.Stream.ID]; !ok {
			order = append(order, p.Stream.ID)
		}
		by[p.Stream.ID] = append(by[p.Stream.ID], p)
	}
	var (
		mu       sync.Mutex
		firstErr error
	)
	hold := newHoldGate(opts.ErasureHold)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(s.c.Concurrency)
	for _, id := range order {
		g.Go(func() error {
			c, err := e.eraseStream(gctx, f, id, by[id], open, hold, opts)
			mu.Lock()
			total.Add(c)
			mu.Unlock()
			return s.streamFailed(gctx, f, id, err, opts, &total, &mu, &firstErr)
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
// its pending erasures and applies those nothing holds any more.
func (e *Eraser) eraseStream(ctx context.Context, f catalog.Fence, id catalog.StreamID, pend []catalog.PendingErasure,
	open map[string]bool, hold *holdGate, opts cycle.Options) (cycle.Counts, error) {
	s := e.s
	var counts cycle.Counts
	st, err := s.d.DB.GetStream(ctx, id)
	if err != nil {
		return counts, err
	}
	ers := make([]catalog.Erasure, len(pend))
	for i, p := range pend {
		ers[i] = p.Erasure
	}
	dead := newDeadSet(ers)
	var clean []catalog.EntryRevision
	seen := map[int64]bool{}
	var dirty []span // entries read this pass and not (yet) clean
	for _, sp := range dead {
		to := min(sp.to, uint64(max(st.SettledThrough, 0)))
		if sp.from >= to {
			continue // not settled yet: settle tombstones these records when it writes them
		}
		entries, err := s.d.DB.EntriesIntersecting(ctx, st.ID, st.Epoch, int64(sp.from), int64(to))
		if err != nil {
			return counts, err
		}
		for _, en := range entries {
			if seen[en.FirstRecord] {
				continue
			}
			seen[en.FirstRecord] = true
			rev, ok, err := e.rewriteEntry(ctx, f, st, en, dead, open, opts, &counts)
			if err != nil {
				return counts, err
			}
			if ok {
				clean = append(clean, catalog.EntryRevision{FirstRecord: en.FirstRecord, Revision: rev})
			} else {
				dirty = append(dirty, span{uint64(en.FirstRecord), uint64(en.EndRecord())})
			}
		}
	}
	if opts.DryRun {
		return counts, nil
	}
	zero := bundlefmt.SettledKey(st.Bucket, bundlefmt.StreamID(st.ID), uint64(st.Epoch), 0, 0)
	keyLow := zero[:strings.LastIndexByte(zero, '/')+1] // every settled key of the stream sorts at or after it
	for _, er := range ers {
		if er.EndRecord() > st.SettledThrough || overlapsAny(dirty, uint64(er.FirstRecord), uint64(er.EndRecord())) {
			continue // cannot apply yet: no transaction to find that out (ApplyErasure checks all again)
		}
		if hold.check(ctx) != "" {
			continue // the deletes may have left the bytes: never applied while a bucket keeps them
		}
		keyEnd := bundlefmt.SettledKey(st.Bucket, bundlefmt.StreamID(st.ID), uint64(st.Epoch), uint64(er.EndRecord()), 0)
		applied, err := s.d.DB.ApplyErasure(ctx, f, er, clean, keyLow, keyEnd)
		if err != nil {
			return counts, err
		}
		if applied {
			counts.ErasuresApplied++
			s.d.Log.Info("erasure applied", "stream", fmt.Sprintf("%x", st.ID), "first_record", er.FirstRecord, "record_count", er.RecordCount)
			s.crash(CrashEraseAfterApplied)
		}
	}
	return counts, nil
}

// rewriteEntry makes one cataloged object hold tombstones for the dead
// records: it reads the entry's footer and the chunks that hold dead
// records and, when any of those still holds bytes, publishes the rewrite
// at revision + 1 (clean chunks copied from the object itself) and repoints
// the entry. It reports the revision the entry is at and whether that
// revision is known to hold no dead record's bytes.
func (e *Eraser) rewriteEntry(ctx context.Context, f catalog.Fence, st catalog.Stream, en catalog.Entry, dead deadSet,
	open map[string]bool, opts cycle.Options, counts *cycle.Counts) (int32, bool, error) {
	s := e.s
	sid := bundlefmt.StreamID(st.ID)
	next := bundlefmt.SettledKey(st.Bucket, sid, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision)+1)
	if open[next] && en.EndRecord() == st.SettledThrough && st.SettledThrough < st.NextRecord {
		// Settle's tail rewrite of this entry is in flight (it honours the
		// erasure): it adopts or abandons that key; this waits for it.
		return en.Revision, false, nil
	}
	t, err := s.readEntry(ctx, st, en)
	if err != nil {
		return en.Revision, false, err
	}
	nt, fetched, reads, err := s.scrubTail(ctx, t, dead)
	counts.BytesFetched += fetched
	counts.S3Requests += int64(reads) + 1 // and the footer read
	if err != nil {
		return en.Revision, false, err
	}
	if nt.Tombstoned == 0 {
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
	p, intentID, err := s.publish(ctx, f, o, knownEntries(nt, nil), erasePoints)
	if err != nil {
		return en.Revision, false, err
	}
	if p.end() != o.EndRecord() {
		return en.Revision, false, &cycle.QuarantineError{SlotKey: o.Key, Class: cycle.ClassAdoption, Condemn: o.Key,
			Err: fmt.Errorf("standing %s covers records [%d, %d), the rewrite of %s [%d, %d)",
				o.Key, p.first, p.end(), t.Key, o.FirstRecord, o.EndRecord())}
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
	counts.BytesCopied += p.result.BytesCopied
	counts.BytesFetched += p.result.BytesFetched
	counts.BytesUploaded += p.result.BytesUploaded
	counts.S3Requests += int64(p.result.Requests)
	s.d.Log.Info("erasure rewrite committed", "old", t.Key, "new", p.key, "tombstoned", o.Tombstoned, "adopted", p.adopted)
	// An adopted object may be a rewrite made under fewer erasures: the
	// next cycle reads it again before the erasure is applied.
	return int32(p.revision), !p.adopted, nil
}

// overlapsAny reports whether [from, to) meets any of the spans.
func overlapsAny(spans []span, from, to uint64) bool {
	for _, sp := range spans {
		if sp.from < to && from < sp.to {
			return true
		}
	}
	return false
}
