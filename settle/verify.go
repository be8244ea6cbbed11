package settle

import (
	"context"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cycle"
)

// verifyWindow is the most bytes one ranged GET of a verification holds;
// verifyConcurrency windows are in flight at once, so a verification holds
// at most verifyWindow*verifyConcurrency bytes whatever the object's size
// (a window that holds a re-encoded chunk is that chunk, whose source and
// planned bytes the plan holds already).
const (
	verifyWindow      = 8 << 20
	verifyConcurrency = 4
)

// verifyData reads the data region of the standing object at key and checks
// every chunk's bytes against its entry's DataCRC and against the sources
// (expect, from matchSources). Adoption calls it: a standing object that a
// crash kept from being committed may never have been checked (the
// read-back that checks an assembly the server could not verify runs after
// CompleteMultipartUpload, and a kill, a lost lease or a 503 storm can cut
// it short), and once trim reaps the sources a wrong byte adopted into the
// catalog is lost data. Adoption is rare (a crash between complete and
// commit), so the read is always made rather than trusting what the server
// may have checked. It returns a *cycle.QuarantineError naming the key on
// a mismatch.
func (s *Settler) verifyData(ctx context.Context, key string, entries []bundlefmt.Entry, expect [][]expectPart) error {
	get := func(ctx context.Context, off, n int64) ([]byte, error) {
		return s.read.Range(ctx, bundle.Settled(key), off, n)
	}
	return checkStanding(ctx, key, entries, expect, get)
}

// checkStanding is verifyData over get, which reads bytes [off, off+n) of
// the standing object. The data region is read in windows, verifyConcurrency
// at a time: runs of chunks the plan copies as they are in windows of up
// to verifyWindow, each re-encoded known chunk in one window of its own,
// whose records are compared byte for byte with the source's and the
// planned ones (sameRecords). Then, for each chunk:
//
//   - its bytes must have its DataCRC (else class checksum: the object
//     disagrees with its own footer);
//   - its DataCRC must be the combine of the sources' (the copied chunks'
//     DataCRCs, and the CRCs of re-encoded chunks whose every record is the
//     source's or the planned one), else class adoption: a consistent
//     object that is not what the sources make.
//
// Either condemns the key.
func checkStanding(ctx context.Context, key string, entries []bundlefmt.Entry, expect [][]expectPart,
	get func(ctx context.Context, off, n int64) ([]byte, error)) error {
	wins := standingWindows(entries, expect)
	if err := readStanding(ctx, key, wins, get); err != nil {
		return err
	}
	at := 0
	for i := range entries {
		end := at
		for end < len(wins) && wins[end].chunk == i {
			end++
		}
		if err := checkStandingChunk(key, i, &entries[i], expect[i], wins[at:end]); err != nil {
			return err
		}
		at = end
	}
	return nil
}

// standingWindow is one ranged read of a verification: bytes
// [off, off+len) of the standing object, in chunk's data region, and what
// reading them found (crc, and mismatch for a re-encoded known chunk).
type standingWindow struct {
	chunk    int
	off, len uint64
	part     *expectPart // a re-encoded known chunk's records (nil: bytes copied as they are)
	crc      uint32
	mismatch error // from sameRecords
}

// standingWindows lays the data region of entries out in the windows
// checkStanding reads, in order: runs of copied bytes in windows of up to
// verifyWindow, so a verification's memory stays bounded, and each
// re-encoded known chunk (expect's parts with a kc) in one window of its
// own, so its records can be compared with the source's.
func standingWindows(entries []bundlefmt.Entry, expect [][]expectPart) []standingWindow {
	var wins []standingWindow
	runs := func(chunk int, from, to uint64) {
		for off := from; off < to; off += verifyWindow {
			wins = append(wins, standingWindow{chunk: chunk, off: off, len: min(verifyWindow, to-off)})
		}
	}
	for i := range entries {
		e := &entries[i]
		at := e.DataOffset
		for j := range expect[i] {
			p := &expect[i][j]
			if p.kc == nil {
				continue
			}
			runs(i, at, p.off)
			wins = append(wins, standingWindow{chunk: i, off: p.off, len: p.n, part: p})
			at = p.off + p.n
		}
		runs(i, at, e.DataOffset+e.ChunkBytes())
	}
	return wins
}

// readStanding reads every window of wins through get, verifyConcurrency at
// a time, and fills in its crc (and, for a re-encoded known chunk, its
// records' mismatch), so checkStandingChunk compares without holding the
// bytes. A short read is a quarantine of the key (class adoption).
func readStanding(ctx context.Context, key string, wins []standingWindow,
	get func(ctx context.Context, off, n int64) ([]byte, error)) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(verifyConcurrency)
	for i := range wins {
		w := &wins[i]
		g.Go(func() error {
			data, err := get(gctx, int64(w.off), int64(w.len))
			if err != nil {
				return fmt.Errorf("verify standing %s [%d,+%d): %w", key, w.off, w.len, err)
			}
			if uint64(len(data)) != w.len {
				return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassAdoption,
					Err: fmt.Errorf("standing object ends early: [%d,+%d) returned %d bytes", w.off, w.len, len(data))}
			}
			w.crc = bundlefmt.CRC32C(data)
			if w.part != nil {
				w.mismatch = sameRecords(w.part.kc, w.part.lengths, data)
			}
			return nil
		})
	}
	return g.Wait()
}

// checkStandingChunk makes checkStanding's two checks on chunk i (entry e,
// its sources expect, its windows wins, already read): its bytes have its
// DataCRC, and its DataCRC is the sources' combine. It returns the
// quarantine that condemns key when either fails.
func checkStandingChunk(key string, i int, e *bundlefmt.Entry, expect []expectPart, wins []standingWindow) error {
	crc := uint32(0)
	var mismatch error
	byPart := map[*expectPart]uint32{}
	for at := range wins {
		w := &wins[at]
		crc = bundlefmt.CombineCRC32C(crc, w.crc, int64(w.len))
		if w.part != nil {
			byPart[w.part] = w.crc
			if mismatch == nil {
				mismatch = w.mismatch
			}
		}
	}
	if crc != e.DataCRC {
		return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassChecksum, Condemn: key,
			Err: fmt.Errorf("standing object chunk %d [%d, %d) at offset %d: CRC-32C %08x, its DataCRC (the sources') is %08x",
				i, e.FirstRecord, e.EndRecord(), e.DataOffset, crc, e.DataCRC)}
	}
	if len(byPart) == 0 {
		return nil // matchSources checked the DataCRC against the sources'
	}
	if mismatch != nil {
		return notTheSources(key, fmt.Errorf("standing object chunk %d [%d, %d): %w",
			i, e.FirstRecord, e.EndRecord(), mismatch))
	}
	want := uint32(0)
	for j := range expect {
		p := &expect[j]
		c := p.crc
		if p.kc != nil {
			c = byPart[p]
		}
		want = bundlefmt.CombineCRC32C(want, c, int64(p.n))
	}
	if want != e.DataCRC {
		return notTheSources(key, fmt.Errorf("standing object chunk %d [%d, %d): DataCRC %08x, sources combine to %08x",
			i, e.FirstRecord, e.EndRecord(), e.DataCRC, want))
	}
	return nil
}
