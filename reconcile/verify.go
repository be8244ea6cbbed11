package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// verifyObject reads every chunk of o, each checked against its DataCRC
// (one chunk in memory at a time). A mismatch is a *cycle.QuarantineError.
func verifyObject(ctx context.Context, d Deps, o *object) (int64, error) {
	var n int64
	for _, e := range o.entries {
		data, err := d.Reader.Chunk(ctx, bundle.Settled(o.key), e)
		n += int64(len(data))
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// checkRefs reports the refs the chain leaves whose slots are gone: their
// records are held by nothing (the catalog stops before them); those below
// the stream's low_record are retired, not lost.
func checkRefs(ctx context.Context, d Deps, st catalog.Stream, refs []catalog.SpanRef, end uint64, sr *StreamReport) error {
	top := d.Reader.Topology()
	held := map[string]bool{} // a slot's key: the store holds it (each HEADed once)
	for _, r := range refs {
		if uint64(r.EndRecord()) <= end {
			continue
		}
		buckets, err := top.Buckets(r.Class)
		if err != nil {
			return err
		}
		var missing []string
		for _, s := range r.Slots {
			key := bundlefmt.SlotKey(r.Star, uint64(s.Epoch), uint64(s.Seq))
			found, ok := held[key]
			if !ok {
				if found, err = slotHeld(ctx, d, buckets, key); err != nil {
					return err
				}
				held[key] = found
			}
			if !found {
				missing = append(missing, key)
			}
		}
		// A ref's records are reported once, however many of its slots are
		// gone: the ref does not say which of them each slot holds.
		if len(missing) > 0 {
			sr.gone(st, max(r.FirstRecord, int64(end)), r.EndRecord(),
				"its span ref names slot "+strings.Join(missing, ", ")+", which the store no longer holds, and no settled object holds them")
		}
	}
	return nil
}

// slotHeld reports whether any of the buckets holds the slot key.
func slotHeld(ctx context.Context, d Deps, buckets []string, key string) (bool, error) {
	for _, b := range buckets {
		_, err := d.Store.Head(ctx, b, key)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return false, fmt.Errorf("%w: head %s in %s: %w", ErrIncomplete, key, b, err)
		}
	}
	return false, nil
}

// endsBatch reports whether record end-1 of o ends a batch: where a cut
// at end may fall.
func endsBatch(o *object, end uint64) bool {
	for i := range o.entries {
		e := &o.entries[i]
		if e.FirstRecord < end && end <= e.EndRecord() {
			return e.IsBatchEnd(int(end - 1 - e.FirstRecord))
		}
	}
	return false
}

// lastBatchEnd is the highest record b < end (0: none) of o such that
// record b-1 ends a batch.
func lastBatchEnd(o *object, end uint64) uint64 {
	for j := len(o.entries) - 1; j >= 0; j-- {
		e := &o.entries[j]
		if e.FirstRecord >= end {
			continue
		}
		// b = r + 1 for record r of e, highest first, b < end.
		for i := min(uint64(e.Count()), end-1-e.FirstRecord) - 1; ; i-- {
			if e.IsBatchEnd(int(i)) && e.FirstRecord+i+1 > o.first {
				return e.FirstRecord + i + 1
			}
			if i == 0 {
				break
			}
		}
	}
	return 0
}

// firstMismatch compares the chain's records with those of every slot
// chunk the stream's refs name that the store still holds, from
// settled_through on, and returns the first record of the first chunk that
// differs (and of a chunk that straddles the chain's end) or ch.end, and
// the bytes it read. A slot that is gone was reaped after the records
// settled, so before the restore: its records are the store's. A record
// an erasure names (erased) may be its tombstone in the chain: settle and
// the erase step write it so, while its slot keeps the original.
func firstMismatch(ctx context.Context, d Deps, st catalog.Stream, refs []catalog.SpanRef, ch chain, erased func(uint64) bool) (uint64, int64, error) {
	settled := uint64(st.SettledThrough)
	var read int64
	for _, r := range refs {
		if uint64(r.EndRecord()) <= settled || uint64(r.FirstRecord) >= ch.end {
			continue
		}
		for _, sl := range r.Slots {
			key := bundlefmt.SlotKey(r.Star, uint64(sl.Epoch), uint64(sl.Seq))
			src := bundle.Source{Key: key, Class: r.Class}
			foot, err := d.Reader.SlotFooter(ctx, r.Class, key, sl.FooterOffset, sl.FooterLength)
			if errors.Is(err, objstore.ErrNotFound) || cycle.IsQuarantine(err) && bundle.ClassOf(err) == cycle.ClassMissing {
				continue
			}
			if err != nil {
				return 0, read, fmt.Errorf("%w: %w", ErrIncomplete, err)
			}
			lo, hi := foot.FindStream(st.ID)
			if lo >= hi {
				return 0, read, fmt.Errorf("%w: slot %s holds no chunk of stream %s its ref names", ErrIncomplete, key, st.ID)
			}
			e, err := foot.Entry(lo)
			if err != nil {
				return 0, read, fmt.Errorf("%w: slot %s: %w", ErrIncomplete, key, err)
			}
			if e.EndRecord() <= settled || e.FirstRecord >= ch.end {
				continue
			}
			from := max(e.FirstRecord, settled)
			if e.EndRecord() > ch.end {
				return max(from, settled), read, nil // the chain cannot end inside a slot's chunk
			}
			data, err := d.Reader.Chunk(ctx, src, e)
			read += int64(len(data))
			if err != nil {
				return 0, read, fmt.Errorf("%w: %w", ErrIncomplete, err)
			}
			got, n, err := chainRecords(ctx, d, ch, from, e.EndRecord())
			read += n
			if err != nil {
				return 0, read, err
			}
			if !sameRecords(e, data, from, got, erased) {
				return from, read, nil
			}
		}
	}
	return ch.end, read, nil
}

// chainRecord is one record of the chain: its stored bytes, its timestamp
// and whether it ends a producer batch.
type chainRecord struct {
	data     []byte
	ts       int64
	batchEnd bool
}

// sameRecords reports whether got holds records [from, e.EndRecord()) of
// the slot chunk e whose bytes are data: each with the slot's timestamp
// and batch end, and its bytes byte for byte, or its tombstone where
// erased names it (a tombstone keeps the record's timestamp and batch
// end). A record given again with the same bytes but another timestamp
// is another record.
func sameRecords(e bundlefmt.Entry, data []byte, from uint64, got []chainRecord, erased func(uint64) bool) bool {
	if uint64(len(got)) != e.EndRecord()-from {
		return false
	}
	var off uint64
	for i, l := range e.Lengths {
		r := e.FirstRecord + uint64(i)
		rec := data[off : off+uint64(l)]
		off += uint64(l)
		if r < from {
			continue
		}
		g := got[r-from]
		if g.ts != e.Timestamps[i] || g.batchEnd != e.IsBatchEnd(i) {
			return false
		}
		if !bytes.Equal(g.data, rec) && !(erased(r) && bundlefmt.IsTombstone(g.data)) {
			return false
		}
	}
	return true
}

// erasedBy reports whether any of the erasures (in record order of their
// first records) names a record.
func erasedBy(es []catalog.Erasure) func(uint64) bool {
	// reach[i] is the furthest end of es[:i+1]: the erasures starting at
	// or below a record reach it when the furthest of them does.
	reach := make([]int64, len(es))
	var far int64
	for i, e := range es {
		far = max(far, e.EndRecord())
		reach[i] = far
	}
	return func(r uint64) bool {
		i := sort.Search(len(es), func(i int) bool { return uint64(max(es[i].FirstRecord, 0)) > r })
		return i > 0 && uint64(reach[i-1]) > r
	}
}

// chainRecords reads records [from, to) from the chain's objects (a kept
// entry's object is not the store's to compare: none).
func chainRecords(ctx context.Context, d Deps, ch chain, from, to uint64) ([]chainRecord, int64, error) {
	var out []chainRecord
	var read int64
	for _, l := range ch.links {
		if l.obj == nil {
			continue
		}
		for _, e := range l.obj.entries {
			a, b := max(e.FirstRecord, from), min(e.EndRecord(), to)
			if a >= b {
				continue
			}
			off := e.DataOffset
			var lens []uint32
			first := -1 // e's index of record a
			for i, ln := range e.Lengths {
				r := e.FirstRecord + uint64(i)
				if r < a {
					off += uint64(ln)
				} else if r < b {
					if first < 0 {
						first = i
					}
					lens = append(lens, ln)
				}
			}
			var n uint64
			for _, ln := range lens {
				n += uint64(ln)
			}
			data, err := d.Reader.Range(ctx, bundle.Settled(l.obj.key), int64(off), int64(n))
			read += int64(len(data))
			if err != nil {
				return nil, read, fmt.Errorf("%w: %w", ErrIncomplete, err)
			}
			if uint64(len(data)) != n {
				return nil, read, fmt.Errorf("%w: read %d bytes of %s at %d, want %d", ErrIncomplete, len(data), l.obj.key, off, n)
			}
			for j, ln := range lens {
				out = append(out, chainRecord{data: data[:ln:ln], ts: e.Timestamps[first+j], batchEnd: e.IsBatchEnd(first + j)})
				data = data[ln:]
			}
		}
	}
	return out, read, nil
}
