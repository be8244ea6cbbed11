package verify

import (
	"context"
	"fmt"
	"math"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
)

// Verify's erasure check (docs/architecture.md#erasure): once an erasure is
// applied, every cataloged object that holds its records must hold them as
// tombstones. Verify has checked every DataCRC by then; the check reads
// again only the records of the applied erasures, in the chunks that hold
// them. A pending erasure's
// records may be either (its rewrite may not have run, or be in progress),
// so they are not checked.

// FindingErasure is a record of an applied erasure that a cataloged object
// holds as anything but a tombstone: erased bytes are still readable.
const FindingErasure = "erasure"

// appliedErasures reads a stream's applied erasures (malformed rows are
// never applied, so never checked).
func appliedErasures(ctx context.Context, db CatalogReader, id catalog.StreamID) ([]catalog.Erasure, error) {
	all, err := db.ErasuresOf(ctx, id, 0, math.MaxInt64)
	if err != nil {
		return nil, err
	}
	var out []catalog.Erasure
	for _, e := range all {
		if e.Applied && e.Valid() == "" {
			out = append(out, e)
		}
	}
	return out, nil
}

// checkErased reports the records of applied erasures that the chunks of
// a validated object hold as anything but tombstones: how many, and the
// first of them with its erasure. It returns "" when there are none. It
// reads only the records the erasures name (read: the object's bytes
// [off, off+n)), in runs of at most window bytes (a longer record alone).
func checkErased(chunks []bundlefmt.Entry, applied []catalog.Erasure, window uint64, read func(off, n uint64) ([]byte, error)) (string, error) {
	if len(applied) == 0 {
		return "", nil
	}
	var (
		live  int64
		first string
	)
	for _, c := range chunks {
		lo, hi := int64(c.FirstRecord), int64(c.EndRecord())
		for _, e := range applied {
			from, to := max(lo, e.FirstRecord), min(hi, e.EndRecord())
			if from >= to {
				continue
			}
			// The erased records of this chunk: [from, to), at off.
			off := c.DataOffset
			for i := lo; i < from; i++ {
				off += uint64(c.Lengths[i-lo])
			}
			for r := from; r < to; {
				n, end := uint64(0), r
				for end < to && (end == r || n+uint64(c.Lengths[end-lo]) <= window) {
					n += uint64(c.Lengths[end-lo])
					end++
				}
				data, err := read(off, n)
				if err != nil {
					return "", err
				}
				p := uint64(0)
				for ; r < end; r++ {
					l := uint64(c.Lengths[r-lo])
					if !bundlefmt.IsTombstone(data[p : p+l]) {
						live++
						if first == "" {
							first = fmt.Sprintf("record %d (%d bytes stored) of the erasure [%d, %d) applied at %s",
								r, l, e.FirstRecord, e.EndRecord(), e.AppliedAt.UTC().Format("2006-01-02T15:04:05Z"))
						}
					}
					p += l
				}
				off += n
			}
		}
	}
	if live == 0 {
		return "", nil
	}
	return fmt.Sprintf("%d records of applied erasures hold their bytes, not tombstones; the first: %s", live, first), nil
}
