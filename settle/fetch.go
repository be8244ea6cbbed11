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

// This file is how settle serves the bytes the store fetches
// (docs/architecture.md#reads-at-the-floor). A small stream's object is
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
// (the cycle's counts have them from the store's observer: counts.go).
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
