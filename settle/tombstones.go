package settle

import (
	"context"
	"fmt"
	"math"
	"sort"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// Tombstones: the records of a stream's pending erasures, read range by
// range (deadReader), and the re-encoding of the chunks that hold them
// (scrubWindow, scrubChunks, scrubTail), used by the settle of a stream
// with pending erasures and by the erasure step's rewrites
// (docs/architecture.md#erasure).

// span is a range of record numbers [from, to).
type span struct{ from, to uint64 }

// deadSet is the records of a stream's pending erasures, as sorted,
// disjoint, non-adjacent spans.
type deadSet []span

func newDeadSet(es []catalog.Erasure) deadSet {
	var d []span
	for _, e := range es {
		if e.Valid() == "" {
			d = append(d, span{uint64(e.FirstRecord), uint64(e.EndRecord())})
		}
	}
	return mergeSpans(d)
}

// mergeSpans sorts spans (in place) and merges those that overlap or touch.
func mergeSpans(d []span) deadSet {
	sort.Slice(d, func(i, j int) bool { return d[i].from < d[j].from })
	out := d[:0]
	for _, sp := range d {
		if n := len(out); n > 0 && sp.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, sp.to)
			continue
		}
		out = append(out, sp)
	}
	return deadSet(out)
}

// has reports whether record r is dead.
func (d deadSet) has(r uint64) bool {
	i := sort.Search(len(d), func(i int) bool { return d[i].to > r })
	return i < len(d) && d[i].from <= r
}

// intersects reports whether any record of [from, to) is dead.
func (d deadSet) intersects(from, to uint64) bool {
	i := sort.Search(len(d), func(i int) bool { return d[i].to > from })
	return i < len(d) && d[i].from < to
}

// deadReader reads, for settle, the records of one stream's pending
// erasures over the ranges it is about to write, in record order (the
// standing tail, then each window): for each range exactly the records
// that the stream's pending erasures name there, however many erasures
// the stream has (docs/architecture.md#erasure). What it reads is bounded
// by the range (catalog.Erasures.PendingErasuresIn); between ranges it keeps only
// the spans that reach past the last one. A nil reader reads nothing (a
// stream with no pending erasure).
type deadReader struct {
	db    pendingErasures
	id    catalog.StreamID
	below int64   // the next range's erasures start at or after it: the last range's end
	reach deadSet // the spans read so far that reach past below
}

// pendingErasures is what a deadReader reads (Metastore has it).
type pendingErasures interface {
	PendingErasuresIn(ctx context.Context, id catalog.StreamID, below, from, to int64) ([]catalog.Erasure, error)
}

func newDeadReader(db pendingErasures, id catalog.StreamID) *deadReader {
	return &deadReader{db: db, id: id, below: math.MinInt64}
}

// over reads the dead records of [from, to).
func (r *deadReader) over(ctx context.Context, from, to uint64) (deadSet, error) {
	if r == nil || from >= to {
		return nil, nil
	}
	if int64(from) < r.below { // below a range read before: read it afresh
		r.below, r.reach = math.MinInt64, nil
	}
	ers, err := r.db.PendingErasuresIn(ctx, r.id, r.below, int64(from), int64(to))
	if err != nil {
		return nil, err
	}
	d := newDeadSet(ers)
	for _, sp := range r.reach {
		if sp.to > from {
			d = append(d, sp)
		}
	}
	d = mergeSpans(d)
	r.below, r.reach = int64(to), nil
	for _, sp := range d {
		if sp.to > to {
			r.reach = append(r.reach, sp)
		}
	}
	return d, nil
}

// scrubWindow re-encodes with tombstones the records of pending erasures
// in a window's chunks (scrubChunks), read over the window's records.
func (s *Settler) scrubWindow(ctx context.Context, dead *deadReader, chunks []SourceChunk) ([]SourceChunk, error) {
	from, to := chunkRange(chunks)
	d, err := dead.over(ctx, from, to)
	if err != nil {
		return nil, err
	}
	return s.scrubChunks(ctx, chunks, d)
}

// scrubChunks re-encodes with tombstones the chunks that hold dead records:
// each is read from its source and checked against its DataCRC first
// (a mismatch quarantines, as a failed copy would). It returns the chunks
// to plan.
func (s *Settler) scrubChunks(ctx context.Context, chunks []SourceChunk, dead deadSet) ([]SourceChunk, error) {
	if len(dead) == 0 {
		return chunks, nil
	}
	var out []SourceChunk // a copy, made at the first chunk re-encoded
	for i, c := range chunks {
		if c.Data != nil || !dead.intersects(c.Entry.FirstRecord, c.Entry.EndRecord()) {
			continue
		}
		data, err := s.read.Chunk(ctx, c.Src, c.Entry) // checked against its DataCRC
		if err != nil {
			return nil, fmt.Errorf("erase records of %s: %w", c.Src.Key, err)
		}
		e, nd, n, err := bundlefmt.EraseRecords(c.Src.Key, c.Entry, data, dead.has)
		if err != nil {
			return nil, &cycle.QuarantineError{SlotKey: c.Src.Key, Class: bundle.ClassOf(err), Err: err}
		}
		if n == 0 {
			continue
		}
		if out == nil {
			out = append([]SourceChunk(nil), chunks...)
		}
		out[i] = SourceChunk{Src: c.Src, Entry: e, Data: nd, Tombstoned: n, orig: c.Entry, origData: data}
	}
	if out == nil {
		return chunks, nil
	}
	return out, nil
}

// scrubTail re-encodes with tombstones the chunks of a settled object (the
// standing tail, or an entry the erasure step rewrites) that hold dead
// records; the others stay to be copied. It returns t itself when nothing
// changes.
func (s *Settler) scrubTail(ctx context.Context, t *Tail, dead deadSet) (*Tail, error) {
	if t == nil || len(dead) == 0 || !dead.intersects(t.FirstRecord, t.end()) {
		return t, nil
	}
	src := make([]SourceChunk, len(t.Entries))
	for i, e := range t.Entries {
		src[i] = SourceChunk{Src: bundle.Settled(t.Key), Entry: e}
	}
	got, err := s.scrubChunks(ctx, src, dead)
	if err != nil {
		return t, err
	}
	nt := &Tail{Key: t.Key, FirstRecord: t.FirstRecord, Revision: t.Revision, Orig: t.Entries, obj: t.obj,
		Entries: make([]bundlefmt.Entry, len(got)), Local: make([][]byte, len(got)), OrigData: make([][]byte, len(got))}
	for i, c := range got {
		nt.Entries[i], nt.Local[i], nt.OrigData[i] = c.Entry, c.Data, c.origData
		nt.Tombstoned += c.Tombstoned
	}
	if nt.Tombstoned == 0 {
		return t, nil
	}
	return nt, nil
}

// overlapsAny reports whether [from, to) meets any of the spans.
func overlapsAny(spans []span, from, to uint64) bool {
	for _, sp := range spans {
		if sp.from < to && from < sp.to {
			return true
		}
	}
	return false
}

// chunkRange is the records the chunks span, [from, to) (empty: none).
func chunkRange(chunks []SourceChunk) (from, to uint64) {
	for i, c := range chunks {
		if i == 0 || c.Entry.FirstRecord < from {
			from = c.Entry.FirstRecord
		}
		to = max(to, c.Entry.EndRecord())
	}
	return from, to
}
