package s3store

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// An assembly: Assemble plans an object's parts and carries the plan out,
// as one PutObject of the gathered bytes or as a multipart upload
// (multipart.go); gather builds a part from local bytes and ranged GETs.

// Assemble implements objstore.Store (docs/architecture.md#publish): it
// plans parts with objstore.PlanParts and carries the plan out.
func (s *Store) Assemble(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	a := &assembly{s: s, req: req, uploadID: req.UploadID, mode: s.cfg.Checksum}
	ctx, a.tally = objstore.Count(ctx)
	err := a.run(ctx)
	if err != nil {
		err = fmt.Errorf("assemble %s/%s: %w", req.Bucket, req.Key, err)
	}
	return a.result(), err
}

type assembly struct {
	s        *Store
	req      objstore.AssembleRequest
	fullKey  string
	pieces   []objstore.Piece
	dataCRC  []uint32 // CRC of each data piece
	plan     objstore.Plan
	uploadID string
	mode     objstore.ChecksumMode

	hookMu    sync.Mutex
	tally     *objstore.Tally // the assembly's requests and bytes, as reported to the context's observer
	checked   bool            // the server checked the whole CRC, or it was checked locally
	fullKnown bool            // the whole object's CRC was known at the complete
}

func (a *assembly) result() objstore.AssembleResult {
	t := a.tally.Totals()
	return objstore.AssembleResult{
		UploadID: a.uploadID, Size: a.plan.Size, Parts: len(a.plan.Parts),
		BytesCopied: t.Copied, BytesFetched: t.Fetched + t.ReadBack, BytesUploaded: t.Uploaded,
		BytesReadBack: t.ReadBack, Verified: a.checked,
		Requests: int(t.Requests),
	}
}

// hook runs one of the caller's hooks, one at a time.
func (a *assembly) hook(f func() error) error {
	a.hookMu.Lock()
	defer a.hookMu.Unlock()
	return f()
}

// prepare validates the pieces, drops empty ones, and merges neighbours
// that are one contiguous range of the same source (so one copy or GET
// covers both).
func (a *assembly) prepare() error {
	fk, err := a.s.fullKey(a.req.Key)
	if err != nil {
		return err
	}
	a.fullKey = fk
	// Each local piece's bytes are read once here: their CRC is checked
	// against the piece's when it has one, and kept (dataCRC) for the
	// parts' and the object's CRCs, which combine it instead of reading
	// the bytes again.
	for i, p := range a.req.Pieces {
		if err := p.Validate(); err != nil {
			return fmt.Errorf("piece %d: %w", i, err)
		}
		var crc uint32
		if p.SrcKey != "" {
			if err := objstore.ValidKey(p.SrcKey); err != nil {
				return fmt.Errorf("piece %d: %w", i, err)
			}
		} else if crc = bundlefmt.CRC32C(p.Data); p.HasCRC32C && crc != p.CRC32C {
			return fmt.Errorf("piece %d: local bytes: %w", i, objstore.ErrChecksum)
		}
		if p.Size() == 0 {
			continue
		}
		if n := len(a.pieces); n > 0 && p.SrcKey != "" {
			q := &a.pieces[n-1]
			if q.SrcKey == p.SrcKey && q.SrcBucket == p.SrcBucket && q.SrcETag == p.SrcETag && q.Off+q.Len == p.Off {
				q.CRC32C = bundlefmt.CombineCRC32C(q.CRC32C, p.CRC32C, p.Len)
				q.HasCRC32C = q.HasCRC32C && p.HasCRC32C
				q.Len += p.Len
				continue
			}
		}
		a.pieces = append(a.pieces, p)
		a.dataCRC = append(a.dataCRC, crc)
	}
	specs := make([]objstore.PieceSpec, len(a.pieces))
	for i, p := range a.pieces {
		specs[i] = objstore.PieceSpec{Len: p.Size(), Copy: p.SrcKey != ""}
	}
	a.plan, err = objstore.PlanParts(specs, a.s.limits)
	return err
}

func (a *assembly) run(ctx context.Context) error {
	if err := a.prepare(); err != nil {
		return err
	}
	if a.plan.Size == 0 && a.uploadID != "" {
		// an upload cannot complete without parts
		if err := a.s.AbortAssembly(ctx, a.req.Bucket, a.req.Key, a.uploadID); err != nil {
			return err
		}
		a.uploadID = ""
	}
	if !a.plan.Multipart && a.uploadID == "" {
		return a.putSingle(ctx)
	}
	return a.multipart(ctx)
}

// putSingle builds a small object in memory and PUTs it create-once; its
// CRC is checked locally before anything is written. The CRC is the
// combine of its pieces' (each checked against its bytes when they were
// read or prepared), computed from the gathered bytes only where a
// piece's is not known; the same CRC is the PUT's upload checksum, which
// the server checks against the bytes it receives.
func (a *assembly) putSingle(ctx context.Context) error {
	var data []byte
	var crc uint32
	if len(a.plan.Parts) == 1 {
		part := a.plan.Parts[0]
		var err error
		if data, err = a.gather(ctx, part); err != nil {
			return err
		}
		known := false
		if crc, known = a.expectedCRC(part); !known {
			crc = bundlefmt.CRC32C(data)
		}
	}
	if a.req.HasExpectedCRC32C && crc != a.req.ExpectedCRC32C {
		return fmt.Errorf("object CRC %08x, expected %08x: %w", crc, a.req.ExpectedCRC32C, objstore.ErrChecksum)
	}
	if err := a.s.putIfAbsent(ctx, a.req.Bucket, a.req.Key, data, &crc); err != nil {
		return err
	}
	a.checked = a.req.HasExpectedCRC32C
	a.req.Hooks.CallPut(data)
	return a.hook(a.req.Hooks.CallCompleted)
}

// expectedCRC is a part's CRC when the pieces tell it without the bytes.
func (a *assembly) expectedCRC(part objstore.Part) (uint32, bool) {
	var crc uint32
	for _, seg := range part.Segments {
		p := a.pieces[seg.Piece]
		var c uint32
		switch {
		case p.SrcKey == "" && seg.Len == int64(len(p.Data)):
			c = a.dataCRC[seg.Piece]
		case p.SrcKey == "":
			c = bundlefmt.CRC32C(p.Data[seg.Off : seg.Off+seg.Len])
		case seg.Off == 0 && seg.Len == p.Len && p.HasCRC32C:
			c = p.CRC32C
		default:
			return 0, false
		}
		crc = bundlefmt.CombineCRC32C(crc, c, seg.Len)
	}
	return crc, true
}

// gatherInFlight bounds gathered parts held in memory at once per assembly.
const gatherInFlight = 2

// gather builds a gathered part: local bytes copied, source ranges fetched
// by ranged GET (pinned, and checked against the piece's CRC when the
// segment is the whole piece).
func (a *assembly) gather(ctx context.Context, part objstore.Part) ([]byte, error) {
	if len(part.Segments) == 1 {
		// One local piece, whole: its bytes are the part's (a small
		// object the caller laid out in one buffer), not copied again.
		seg := part.Segments[0]
		if p := a.pieces[seg.Piece]; p.SrcKey == "" && seg.Off == 0 && seg.Len == int64(len(p.Data)) {
			return p.Data, nil
		}
	}
	buf := make([]byte, part.Size)
	fetches := 0
	for _, seg := range part.Segments {
		if a.pieces[seg.Piece].SrcKey != "" {
			fetches++
		}
	}
	// One fetch (a small stream's part: its chunk of one slot) runs on the
	// caller's goroutine: a goroutine of its own would start with a small
	// stack and grow it through the SDK's deep middleware chain for every
	// object, a CPU cost beside the GET itself.
	var g *errgroup.Group
	gctx := ctx
	if fetches > 1 {
		g, gctx = errgroup.WithContext(ctx)
		g.SetLimit(a.s.cfg.CopyConcurrency)
	}
	var inline error
	var pos int64
	for _, seg := range part.Segments {
		dst := buf[pos : pos+seg.Len]
		pos += seg.Len
		p := a.pieces[seg.Piece]
		if p.SrcKey == "" {
			copy(dst, p.Data[seg.Off:seg.Off+seg.Len])
			continue
		}
		if g == nil {
			inline = a.fetch(gctx, p, seg, dst)
			continue
		}
		g.Go(func() error { return a.fetch(gctx, p, seg, dst) })
	}
	if g != nil {
		return buf, g.Wait()
	}
	return buf, inline
}

// fetch reads one segment of a piece from its source into dst and checks
// it: the whole piece's CRC-32C when the segment is the whole piece. A
// whole piece is asked of the request's Source first.
func (a *assembly) fetch(ctx context.Context, p objstore.Piece, seg objstore.Segment, dst []byte) error {
	off := p.Off + seg.Off
	if whole := seg.Off == 0 && seg.Len == p.Len; whole && a.req.Source != nil {
		held, err := a.req.Source(ctx, p)
		if err != nil {
			return fmt.Errorf("piece %s/%s [%d,+%d) from the caller: %w", p.SrcBucket, p.SrcKey, off, seg.Len, err)
		}
		if held != nil {
			if int64(len(held)) != seg.Len || (p.HasCRC32C && bundlefmt.CRC32C(held) != p.CRC32C) {
				return fmt.Errorf("piece %s/%s [%d,+%d) from the caller: %d bytes, not the piece's: %w",
					p.SrcBucket, p.SrcKey, off, seg.Len, len(held), objstore.ErrChecksum)
			}
			copy(dst, held)
			return nil
		}
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+seg.Len-1)
	got, _, err := a.s.getRange(ctx, p.SrcBucket, a.s.cfg.KeyPrefix+p.SrcKey, rng, p.SrcETag, off, seg.Len, false, dst)
	if err != nil {
		return &objstore.SourceError{Bucket: p.SrcBucket, Key: p.SrcKey,
			Err: fmt.Errorf("fetch %s/%s [%d,+%d): %w", p.SrcBucket, p.SrcKey, off, seg.Len, mapErr(err, objstore.ErrSourceChanged))}
	}
	if int64(len(got)) != seg.Len {
		return fmt.Errorf("fetch %s/%s [%d,+%d): source ends early: %w", p.SrcBucket, p.SrcKey, off, seg.Len, objstore.ErrInvalidRange)
	}
	if seg.Off == 0 && seg.Len == p.Len && p.HasCRC32C && bundlefmt.CRC32C(got) != p.CRC32C {
		return &objstore.SourceError{Bucket: p.SrcBucket, Key: p.SrcKey,
			Err: fmt.Errorf("fetch %s/%s [%d,+%d): CRC %08x, expected %08x: %w", p.SrcBucket, p.SrcKey, off, seg.Len, bundlefmt.CRC32C(got), p.CRC32C, objstore.ErrChecksum)}
	}
	return nil
}
