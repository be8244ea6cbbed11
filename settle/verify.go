package settle

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/crc32c"
	"github.com/nova/auditor/internal/cycle"
)

// verifyWindow is the most bytes one ranged GET of a verification holds;
// verifyConcurrency windows are in flight at once, so a verification holds
// at most verifyWindow*verifyConcurrency bytes whatever the object's size.
const (
	verifyWindow      = 8 << 20
	verifyConcurrency = 4
)

// verifyData reads the data region of the object at key and checks every
// chunk's bytes against its entry's DataCRC. Adoption calls it: a standing
// object that a crash kept from being committed may never have been checked
// (the read-back that checks an assembly the server could not verify runs
// after CompleteMultipartUpload, and a kill, a lost lease or a 503 storm
// can cut it short), and once trim reaps the sources a wrong byte adopted
// into the catalog is lost data. Adoption is rare (a crash between complete
// and commit), so the read is always made rather than trusting what the
// server may have checked. It returns the bytes and requests it used, and
// a *cycle.QuarantineError of class checksum naming the key on a mismatch.
func (s *Settler) verifyData(ctx context.Context, key string, entries []bundlefmt.Entry) (fetched int64, requests int, err error) {
	type window struct {
		chunk    int
		off, len uint64
		crc      uint32
	}
	var wins []window
	for i := range entries {
		e := &entries[i]
		for off := uint64(0); off < e.ChunkBytes(); off += verifyWindow {
			wins = append(wins, window{chunk: i, off: e.DataOffset + off, len: min(verifyWindow, e.ChunkBytes()-off)})
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(verifyConcurrency)
	for i := range wins {
		w := &wins[i]
		g.Go(func() error {
			data, _, err := s.d.Store.GetRange(gctx, s.d.Topology.Standard(), key, int64(w.off), int64(w.len))
			if err != nil {
				return fmt.Errorf("verify standing %s [%d,+%d): %w", key, w.off, w.len, err)
			}
			if uint64(len(data)) != w.len {
				return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassAdoption,
					Err: fmt.Errorf("standing object ends early: [%d,+%d) returned %d bytes", w.off, w.len, len(data))}
			}
			w.crc = crc32c.Checksum(data)
			return nil
		})
	}
	err = g.Wait()
	requests = len(wins)
	for _, w := range wins {
		fetched += int64(w.len)
	}
	if err != nil {
		return fetched, requests, err
	}
	at := 0
	for i := range entries {
		e := &entries[i]
		crc := uint32(0)
		for ; at < len(wins) && wins[at].chunk == i; at++ {
			crc = crc32c.Combine(crc, wins[at].crc, int64(wins[at].len))
		}
		if crc != e.DataCRC {
			return fetched, requests, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassChecksum, Condemn: key,
				Err: fmt.Errorf("standing object chunk %d [%d, %d) at offset %d: CRC-32C %08x, its DataCRC (the sources') is %08x",
					i, e.FirstRecord, e.EndRecord(), e.DataOffset, crc, e.DataCRC)}
		}
	}
	return fetched, requests, nil
}
