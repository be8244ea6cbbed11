package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// The sources of a settle: the resolver walks a stream's span refs into
// windows of chunks, read from the slots' footers, and settle serves the
// bytes the store fetches (docs/architecture.md#reads-at-the-floor). A small stream's object is
// one PUT whose every piece comes through the process; left to the store,
// each piece is a ranged GET of its source, so a slot shared by N due
// streams is read N times a cycle, and a standing tail below the copy
// floor is read twice (footer, then bytes) at every rewrite. Instead:
//
//   - the store plans the parts once, and asks settle (AssembleRequest.
//     Source: pieceSource) for each source piece it is about to fetch
//     whole, in a single PUT or a gathered part alike: settle serves it
//     from the tail being rewritten or the settled-tail cache, or from the
//     cycle's slot reads (bundle.Reader.WithSlotReads: the due streams'
//     small runs of a slot, read together), else the store fetches it
//     itself. A piece the store copies is never asked for, so nothing is
//     read for it (the file store copies every piece);
//   - an object the store PUT whole from the process below the copy floor
//     (objstore.Hooks.Put hands its bytes back) is kept in the Settler's
//     tail cache (settle-tail-cache-mib), and a standing tail below the
//     floor is read whole in one GET when it is not cached.
//
// The store checks every piece's bytes it is handed against the piece's
// CRC (a chunk's DataCRC, or the combine of a run of whole chunks'), as
// it checks a piece it fetches; slot reads and held bytes are checked
// here too, so a bad source range is blamed on its slot.

// beginSlotReads returns the cycle's reader rd with slot reads over the
// due streams, and makes it the one assemblies take slot pieces from
// until endSlotReads.
func (s *Settler) beginSlotReads(rd *bundle.Reader, due []catalog.DueStream) *bundle.Reader {
	if s.c.SlotReadBytes <= 0 || len(due) == 0 {
		return rd
	}
	streams := make(map[bundlefmt.StreamID]bool, len(due))
	for _, ds := range due {
		streams[ds.Stream] = true
	}
	gap := s.c.SlotReadGap
	if gap == 0 {
		gap = bundle.DefaultSlotReadGap
	}
	rd = rd.WithSlotReads(bundle.SlotReads{Streams: streams, MaxRun: s.planLimits().CopyMin,
		Gap: gap, Budget: s.c.SlotReadBytes})
	s.slotReads.Store(rd)
	return rd
}

// endSlotReads ends the cycle's slot reads: assemblies read their pieces
// alone again.
func (s *Settler) endSlotReads(rd *bundle.Reader) { s.slotReads.CompareAndSwap(rd, nil) }

// countSlotReads adds the slot reads' GETs and bytes to their metrics
// (the cycle's counts have them from the store's observer: counted).
func (s *Settler) countSlotReads(rd *bundle.Reader) {
	gets, read := rd.SlotReadStats()
	s.d.Metrics.slotReads(gets, read)
}

// copyFloor is the smallest object whose bytes a later rewrite may copy
// server side: below it, a standing tail is read through the process.
func (s *Settler) copyFloor() int64 { return s.planLimits().CopyFloor() }

// pieceSource is the AssembleRequest.Source of the output o: the bytes of
// a source piece the store is about to fetch, when settle holds them or
// the cycle's slot reads do (pieceBytes); nil, nil leaves the fetch to
// the store.
func (s *Settler) pieceSource(o Output) func(ctx context.Context, p objstore.Piece) ([]byte, error) {
	srcs := make(map[string]bundle.Source, len(o.Pieces))
	for _, p := range o.Pieces {
		if p.Data == nil {
			srcs[p.Src.Key] = p.Src
		}
	}
	return func(ctx context.Context, p objstore.Piece) ([]byte, error) {
		src, ok := srcs[p.SrcKey]
		if !ok || !p.HasCRC32C || p.Off < 0 || p.Len <= 0 {
			return nil, nil
		}
		return s.pieceBytes(ctx, o, src, uint64(p.Off), uint64(p.Len), p.CRC32C)
	}
}

// pieceBytes returns the bytes [off, off+n) of src, which must have the
// CRC crc, or nil when settle does not hold them: from the tail o
// rewrites or the tail cache, or from the cycle's slot reads.
func (s *Settler) pieceBytes(ctx context.Context, o Output, src bundle.Source, off, n uint64, crc uint32) ([]byte, error) {
	// A settled object's bytes held in memory: the tail o rewrites, or
	// the tail cache's (the standard class holds slots too: the key says
	// which it is).
	var obj []byte
	if t := o.Rewrite; t != nil && t.Key == src.Key {
		obj = t.obj
	}
	if obj == nil && src.Class == bundle.SettledClass {
		obj = s.tails.get(src.Key)
	}
	if obj != nil {
		if end := off + n; end <= uint64(len(obj)) {
			if d := obj[off:end:end]; bundlefmt.CRC32C(d) == crc {
				return d, nil
			}
		}
		// Held bytes that disagree are not the stored ones (they cannot
		// be: a key is written once); the store reads its own.
		s.tails.drop(src.Key)
		return nil, nil
	}
	if rd := s.slotReads.Load(); rd != nil {
		d, ok, err := rd.Piece(ctx, src, int64(off), int64(n), crc)
		if err != nil || ok {
			return d, err
		}
	}
	return nil, nil
}

// keepTail runs after o was published: put is the object's bytes when the
// store PUT it whole from the process (objstore.Hooks.Put). An object
// below the copy floor and not full whose every byte went up from here is
// kept in the tail cache, for the next rewrite of the stream's tail; the
// tail o rewrote is forgotten (its reap is armed, and its bytes may hold
// records an erasure has since made tombstones).
func (s *Settler) keepTail(o Output, put []byte) {
	if s.tails == nil {
		return
	}
	if o.Rewrite != nil {
		s.tails.drop(o.Rewrite.Key)
	}
	if put == nil || uint64(len(put)) != o.Footer.ObjectSize || int64(len(put)) >= s.copyFloor() || IsFull(o.Meter, -1, s.c.CapBytes) {
		// Not all sent from here (at or over the copy floor, or the
		// store copied some of it), or never rewritten. A plan's outputs
		// but its last are full too, at a chunk boundary: the pipeline
		// drops them from the cache once it knows (moveOn).
		return
	}
	s.tails.put(o.Key, put)
}

// readSmallEntry reads a cataloged object below the copy floor as a Tail
// holding its bytes: from the tail cache, else whole in one GET (its
// footer from its end). nil, nil: the object is not below the floor, or
// its catalog entry does not say its size or disagrees with it; the
// caller reads its footer alone.
func (s *Settler) readSmallEntry(ctx context.Context, key string, last catalog.Entry) (*Tail, error) {
	size := last.ObjectBytes
	if size <= 0 || size >= s.copyFloor() {
		return nil, nil
	}
	if obj, spilled := s.tails.lookup(key); obj != nil {
		if t, err := tailOf(key, last, obj); err == nil {
			outcome := "hit"
			if spilled {
				outcome = "spill"
			}
			s.d.Metrics.tailRead(outcome)
			return t, nil
		}
		s.tails.drop(key) // not what the catalog describes: read the store's
	}
	obj, got, err := s.read.Object(ctx, key, size)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return nil, cycle.Haltf("cataloged object %s is missing", key)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", key, err)
	case got != size || int64(len(obj)) != size:
		return nil, nil
	}
	s.d.Metrics.tailRead("miss")
	return tailOf(key, last, obj)
}

// tailOf opens the footer of obj, the object at key, from the window its
// catalog entry names; bytes that do not decode are a quarantine naming
// the key.
func tailOf(key string, last catalog.Entry, obj []byte) (*Tail, error) {
	if int64(len(obj)) != last.ObjectBytes {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt,
			Err: fmt.Errorf("%d bytes held, the catalog says %d", len(obj), last.ObjectBytes)}
	}
	f, err := bundle.HeldFooter(key, obj, last.FooterOffset, last.FooterLength)
	if err != nil {
		return nil, err
	}
	entries, err := f.Entries()
	if err != nil {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: bundle.ClassOf(err), Err: err}
	}
	return &Tail{Key: key, FirstRecord: uint64(last.FirstRecord), Revision: uint32(last.Revision), Entries: entries, obj: obj}, nil
}

// Resolved is one window of a stream's unsettled data: its chunks in
// record order.
type Resolved struct {
	Chunks []SourceChunk
	Bytes  int64 // Σ chunk bytes
	// Complete: the chunks reach the stream's next_record (this is the
	// last window of the stream's backlog).
	Complete bool
}

// resolver walks a stream's refs window by window: each window's chunks
// must start where the previous window's ended, and the last must end at
// the next_record of the stream snapshot, so a backlog of any length is
// checked and planned in pieces of bounded size.
type resolver struct {
	rd      *bundle.Reader // the cycle's, over the footer cache
	star    string
	st      catalog.Stream
	at      int64 // the next record the chunks must start at
	started bool  // a live chunk was found already
}

func newResolver(rd *bundle.Reader, star string, st catalog.Stream) *resolver {
	return &resolver{rd: rd, star: star, st: st, at: st.SettledThrough}
}

// window reads the refs' slots and returns the chunks that continue the
// stream from r.at, skipping chunks wholly below settled_through (already
// settled) or below low_record (dead). It stops before a ref once the
// window holds maxRecords records (a window holds at least one ref), and
// more says the refs given may not be all that remain below next_record.
// Any break is a *cycle.QuarantineError naming the slot and the error class.
func (r *resolver) window(ctx context.Context, refs []catalog.SpanRef, maxRecords int64, more bool) (Resolved, error) {
	var out Resolved
	stream := r.st.ID
	var records int64
	for n, ref := range refs {
		if ref.EndRecord() <= r.at {
			continue // wholly settled; deleted by the next commit
		}
		if records >= maxRecords && len(out.Chunks) > 0 {
			more = more || n < len(refs)
			break
		}
		if err := r.addRef(ctx, ref, &out, &records); err != nil {
			return out, err
		}
	}
	switch {
	case r.at == r.st.NextRecord:
		out.Complete = true
	case r.at > r.st.NextRecord || !more:
		return out, &cycle.QuarantineError{Class: cycle.ClassTiling,
			Err: fmt.Errorf("stream %s: chunks end at %d, next_record is %d", stream, r.at, r.st.NextRecord)}
	}
	return out, nil
}

// addRef adds to out the live chunks of one ref's slots, in record order, and
// counts their records into records; it moves r.at past the ref. Its
// chunks must tile the ref exactly and the live ones continue the stream
// from r.at, else a *cycle.QuarantineError (class tiling).
func (r *resolver) addRef(ctx context.Context, ref catalog.SpanRef, out *Resolved, records *int64) error {
	stream := r.st.ID
	rec := uint64(ref.FirstRecord)
	for _, s := range ref.Slots {
		key, e, err := r.chunkAt(ctx, ref, s, rec)
		if err != nil {
			return err
		}
		rec = e.EndRecord()
		end := int64(e.EndRecord())
		if end <= r.at || end <= r.st.LowRecord {
			continue // settled already, or dead
		}
		// A live chunk starts where the last one ended, or, for the first
		// live chunk after dead ones, above settled_through but not above
		// low_record (the catalog then starts above a gap: retention).
		first := int64(e.FirstRecord)
		if first != r.at && !(first > r.at && !r.started && first <= r.st.LowRecord) {
			return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
				Err: fmt.Errorf("chunk [%d, %d) does not start at record %d", e.FirstRecord, e.EndRecord(), r.at)}
		}
		out.Chunks = append(out.Chunks, SourceChunk{Src: Source{Key: key, Class: ref.Class}, Entry: e})
		out.Bytes += int64(e.ChunkBytes())
		*records += int64(e.Count())
		r.at, r.started = end, true
	}
	if rec != uint64(ref.EndRecord()) {
		return &cycle.QuarantineError{Class: cycle.ClassTiling,
			Err: fmt.Errorf("ref [%d, %d) of stream %s: its chunks end at %d", ref.FirstRecord, ref.EndRecord(), stream, rec)}
	}
	if ref.EndRecord() > r.at {
		r.at = ref.EndRecord() // its chunks were dead: the stream continues past them
	}
	return nil
}

// chunkAt reads the footer of the ref's slot s and returns the slot's key
// and the stream's chunk there, which must start at record rec (the ref's
// chunks follow one another slot by slot); a slot that disagrees is a
// *cycle.QuarantineError naming it.
func (r *resolver) chunkAt(ctx context.Context, ref catalog.SpanRef, s catalog.SlotRef, rec uint64) (string, bundlefmt.Entry, error) {
	stream := r.st.ID
	key := bundlefmt.SlotKey(r.star, uint64(s.Epoch), uint64(s.Seq))
	f, err := r.rd.SlotFooter(ctx, ref.Class, key, s.FooterOffset, s.FooterLength)
	if err != nil {
		return key, bundlefmt.Entry{}, err
	}
	i, ok := f.Find(stream, rec)
	if !ok {
		return key, bundlefmt.Entry{}, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
			Err: fmt.Errorf("stream %s has no chunk at record %d", stream, rec)}
	}
	e, err := f.Entry(i)
	if err != nil {
		return key, e, bundle.Classify(key, err)
	}
	if e.Stream != stream || e.FirstRecord != rec {
		return key, e, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
			Err: fmt.Errorf("chunk [%d, %d) where the ref expects record %d", e.FirstRecord, e.EndRecord(), rec)}
	}
	return key, e, nil
}
