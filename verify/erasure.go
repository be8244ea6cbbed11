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
// tombstones. Verify reads each object whole already (every DataCRC is
// checked), so the check reads nothing more: it looks at the records of the
// applied erasures in the chunks that hold them. A pending erasure's
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
// a validated object (obj, its whole bytes) hold as anything but
// tombstones: how many, and the first of them with its erasure. It returns
// "" when there are none.
func checkErased(obj []byte, chunks []bundlefmt.Entry, applied []catalog.Erasure) string {
	if len(applied) == 0 {
		return ""
	}
	var (
		live  int64
		first string
	)
	for _, c := range chunks {
		lo, hi := int64(c.FirstRecord), int64(c.EndRecord())
		for _, e := range applied {
			if e.EndRecord() <= lo || e.FirstRecord >= hi {
				continue
			}
			off := c.DataOffset
			for i, l := range c.Lengths {
				r := lo + int64(i)
				stored := obj[off : off+uint64(l)]
				off += uint64(l)
				if r < e.FirstRecord || r >= e.EndRecord() || bundlefmt.IsTombstone(stored) {
					continue
				}
				live++
				if first == "" {
					first = fmt.Sprintf("record %d (%d bytes stored) of the erasure [%d, %d) applied at %s",
						r, l, e.FirstRecord, e.EndRecord(), e.AppliedAt.UTC().Format("2006-01-02T15:04:05Z"))
				}
			}
		}
	}
	if live == 0 {
		return ""
	}
	return fmt.Sprintf("%d records of applied erasures hold their bytes, not tombstones; the first: %s", live, first)
}
