package s3store

import (
	"context"
	"fmt"
	"io"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// readBackWindow is the most bytes one ranged GET of a read-back reads;
// CopyConcurrency of them are in flight at once. A window's bytes are not
// held: they stream through the CRC (readBackBuffer at a time), so a
// window may be larger than a part, and an object of up to one window is
// read back in one GET.
const (
	readBackWindow = 64 << 20
	readBackBuffer = 256 << 10
)

// readBack reads the published object back in parallel ranged GETs
// (CopyConcurrency at a time, each window's CRC-32C computed as its bytes
// arrive, then combined in order: one pass, and memory of a small buffer
// per window in flight, whatever the object's size) and compares the
// whole object's CRC with the expected one. A mismatch fails with
// ErrPublishedBad and leaves the object where it is: deleting it here
// would bypass the fence and the catalog re-check of the reap step (the
// caller condemns the key, and the reap deletes it).
func (a *assembly) readBack(ctx context.Context) error {
	n := a.plan.Size
	type window struct {
		off, len int64
		crc      uint32
	}
	size := int64(readBackWindow)
	if a.s.readBackWin > 0 {
		size = a.s.readBackWin
	}
	wins := make([]window, 0, n/size+1)
	for off := int64(0); off < n; off += size {
		wins = append(wins, window{off: off, len: min(size, n-off)})
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(1, a.s.cfg.CopyConcurrency))
	for i := range wins {
		w := &wins[i]
		g.Go(func() error {
			buf := make([]byte, min(readBackBuffer, w.len))
			rng := fmt.Sprintf("bytes=%d-%d", w.off, w.off+w.len-1)
			total, err := a.s.readRange(gctx, a.req.Bucket, a.fullKey, rng, "", w.off, w.len, false, func(body io.Reader, want int64) error {
				h := bundlefmt.NewCRC32C()
				got, err := io.CopyBuffer(h, io.LimitReader(body, want), buf)
				objstore.ObserverFrom(gctx).Bytes(objstore.ReadBack, got)
				if err == nil && got != want {
					err = io.ErrUnexpectedEOF
				}
				if err != nil {
					return fmt.Errorf("read %s: %w", rng, err)
				}
				w.crc = h.Sum32()
				return nil
			})
			if err != nil {
				return fmt.Errorf("read back [%d,+%d): %w", w.off, w.len, mapErr(err, nil))
			}
			if total != n {
				return fmt.Errorf("read back [%d,+%d): object of %d bytes, expected %d: %w (%w)",
					w.off, w.len, total, n, objstore.ErrChecksum, objstore.ErrPublishedBad)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	var crc uint32
	for _, w := range wins {
		crc = bundlefmt.CombineCRC32C(crc, w.crc, w.len)
	}
	if crc == a.req.ExpectedCRC32C {
		a.checked = true
		return nil
	}
	return fmt.Errorf("read back %d bytes with CRC %08x, expected %08x: %w (%w)",
		n, crc, a.req.ExpectedCRC32C, objstore.ErrChecksum, objstore.ErrPublishedBad)
}
