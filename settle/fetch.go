package settle

import (
	"context"
	"errors"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/crc32c"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// This file is how settle reads the bytes it uploads
// (docs/architecture.md#reads-at-the-floor). A small stream's object is
// one PUT whose every piece comes through the process; left to the store,
// each piece is a ranged GET of its source, so a slot shared by N due
// streams is read N times a cycle, and a standing tail below the copy
// floor is read twice (footer, then bytes) at every rewrite. Instead:
//
//   - the pieces the store would fetch whole (objstore.PlanParts with the
//     store's limits decides, as the store does) are read here and handed
//     to the store as local bytes, so the store uploads them: from the
//     cycle's slot reads (bundle.Reader.WithSlotReads: the due streams'
//     small runs of a slot, read together), from the settled-tail cache,
//     or by a ranged GET of the piece alone;
//   - an object below the copy floor this process PUT is kept in the
//     Settler's tail cache (settle-tail-cache-mib), and a standing tail
//     below the floor is read whole in one GET when it is not cached.
//
// Every piece's bytes are checked against its CRC (a chunk's DataCRC, or
// the combine of a run of whole chunks': the check the store makes of a
// piece it fetches) before they are uploaded.

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
// (the cycle's counts have them from the store's observer: counts.go).
func (s *Settler) countSlotReads(rd *bundle.Reader) {
	gets, read := rd.SlotReadStats()
	s.d.Metrics.slotReads(gets, read)
}

// copyFloor is the smallest object whose bytes a later rewrite may copy
// server side: below it, a standing tail is read through the process.
func (s *Settler) copyFloor() int64 { return s.planLimits().CopyFloor() }

// localize returns o with the pieces the store would fetch whole made
// local bytes, read as this file says. In a multipart upload only the
// pieces whose bytes are held already (a cached tail) are: reading the
// rest here would hold a whole output in memory, where the store holds
// one gathered part.
func (s *Settler) localize(ctx context.Context, o Output) (Output, error) {
	specs := make([]objstore.PieceSpec, 0, len(o.Pieces)+1)
	for _, p := range o.Pieces {
		specs = append(specs, objstore.PieceSpec{Len: int64(p.Len), Copy: p.Data == nil})
	}
	specs = append(specs, objstore.PieceSpec{Len: int64(len(o.Footer.Bytes))})
	plan, err := objstore.PlanParts(specs, s.planLimits())
	if err != nil {
		return o, nil // the store's own planning reports it
	}
	fetched := make([]int64, len(specs)) // bytes of each piece the plan fetches
	for _, part := range plan.Parts {
		for _, seg := range part.Segments {
			if seg.Fetch {
				fetched[seg.Piece] += seg.Len
			}
		}
	}
	// A single PUT of an object below the copy floor is read whole here
	// when the tail cache is on: its bytes are kept for the next rewrite.
	// Its bytes are laid out in one buffer, the object as it will be
	// stored: no piece pins the slot range it came from, the store PUTs
	// the buffer as it is (assemble hands it over as one piece), and the
	// tail cache keeps it (keepTail).
	own := !plan.Multipart && s.tails != nil && int64(o.Footer.ObjectSize) < s.copyFloor()
	var whole []byte
	var out []Piece // a copy, made at the first piece localized
	if own {
		whole = make([]byte, o.Footer.ObjectSize)
		out = append([]Piece(nil), o.Pieces...)
	}
	// The pieces are read at once, as the store would fetch them.
	got := make([][]byte, len(o.Pieces))
	var read []int // the pieces to read
	for i, p := range o.Pieces {
		if p.Data == nil && fetched[i] == int64(p.Len) {
			read = append(read, i)
		}
	}
	err = forEach(ctx, len(read), objstore.DefaultCopyConcurrency, func(gctx context.Context, k int) error {
		i := read[k]
		d, err := s.pieceBytes(gctx, o, o.Pieces[i], !plan.Multipart, own)
		got[i] = d
		return err
	})
	if err != nil {
		return o, err
	}
	at := uint64(0)
	for i, p := range o.Pieces {
		data := p.Data
		if d := got[i]; d != nil {
			if out == nil {
				out = append([]Piece(nil), o.Pieces...)
			}
			out[i].Data, data = d, d
		}
		if whole != nil && data != nil && at+uint64(len(data)) <= uint64(len(whole)) {
			out[i].Data = whole[at : at+uint64(copy(whole[at:], data))]
		} else {
			whole = nil // a piece the store reads, or a layout not as planned
		}
		at += p.Len
	}
	if out != nil {
		o.Pieces = out
	}
	if whole != nil && at+uint64(len(o.Footer.Bytes)) == uint64(len(whole)) {
		copy(whole[at:], o.Footer.Bytes)
		o.obj = whole
	}
	return o, nil
}

// pieceBytes returns the bytes of the piece p of o, checked against its
// CRC, or nil to leave it to the store: from the tail o rewrites or the
// tail cache; from the cycle's slot reads (slots: a single PUT); by a
// ranged GET of its own (own).
func (s *Settler) pieceBytes(ctx context.Context, o Output, p Piece, slots, own bool) ([]byte, error) {
	// A settled object's bytes held in memory: the tail o rewrites, or
	// the tail cache's (the standard class holds slots too: the key says
	// which it is).
	var obj []byte
	if t := o.Rewrite; t != nil && t.Key == p.Src.Key {
		obj = t.obj
	}
	if obj == nil && p.Src.Class == bundle.SettledClass {
		obj = s.tails.get(p.Src.Key)
	}
	if obj != nil {
		if end := p.Off + p.Len; end <= uint64(len(obj)) {
			if d := obj[p.Off:end:end]; crc32c.Checksum(d) == p.CRC32C {
				return d, nil
			}
		}
		// Held bytes that disagree are not the stored ones (they cannot
		// be: a key is written once); read the store's.
		s.tails.drop(p.Src.Key)
	} else if rd := s.slotReads.Load(); slots && rd != nil {
		d, ok, err := rd.Piece(ctx, p.Src, int64(p.Off), int64(p.Len), p.CRC32C)
		if err != nil || ok {
			return d, err
		}
	}
	if !own {
		return nil, nil
	}
	d, err := s.read.Range(ctx, p.Src, int64(p.Off), int64(p.Len))
	if err != nil {
		return nil, bundle.Classify(p.Src.Key, err)
	}
	if uint64(len(d)) != p.Len {
		return nil, &cycle.QuarantineError{SlotKey: p.Src.Key, Class: cycle.ClassCorrupt,
			Err: fmt.Errorf("bytes [%d, +%d) of %s: read %d", p.Off, p.Len, p.Src.Key, len(d))}
	}
	if got := crc32c.Checksum(d); got != p.CRC32C {
		return nil, &cycle.QuarantineError{SlotKey: p.Src.Key, Class: cycle.ClassChecksum,
			Err: fmt.Errorf("bytes [%d, +%d) of %s: CRC-32C %08x, its entries say %08x", p.Off, p.Len, p.Src.Key, got, p.CRC32C)}
	}
	return d, nil
}

// keepTail runs after o (as localize made it) was PUT by this process:
// an object below the copy floor and not full whose every byte went up
// from here is kept in the tail cache, for the next rewrite of the stream's tail; the
// tail o rewrote is forgotten (its reap is armed, and its bytes may hold
// records an erasure has since made tombstones).
func (s *Settler) keepTail(o Output) {
	if s.tails == nil {
		return
	}
	if o.Rewrite != nil {
		s.tails.drop(o.Rewrite.Key)
	}
	if o.obj == nil || IsFull(o.Meter, -1, s.c.CapBytes) {
		// Not all read here (at or over the copy floor, or the store
		// read some of it), or never rewritten. A plan's outputs but its
		// last are full too, at a chunk boundary: settleStream drops
		// them from the cache once it knows.
		return
	}
	s.tails.put(o.Key, o.obj)
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
