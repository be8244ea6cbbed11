package s3store

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

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
	// object, which the profile of the small-stream settle showed as a
	// share of its CPU beside the GET itself.
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
