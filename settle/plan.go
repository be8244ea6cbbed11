package settle

import (
	"errors"
	"fmt"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
)

// The planner is pure (docs/architecture.md#plan): given the stream's
// resolved source chunks and its standing tail, it decides the settled
// objects, their keys, the byte ranges they are assembled from and their
// footers. It reads nothing and writes nothing.

// Source is where a run of bytes lives: an object in a bucket set of a class.
type Source = bundle.Source

// SourceChunk is one chunk of the stream inside a source object: its
// directory entry has the object-absolute DataOffset within that object.
// A chunk that held records of a pending erasure is re-encoded with
// tombstones (docs/architecture.md#erasure): Data holds its new bytes,
// Entry describes them (DataCRC of the new bytes), and it is uploaded
// instead of copied.
type SourceChunk struct {
	Src        Source
	Entry      bundlefmt.Entry
	Data       []byte // re-encoded bytes (nil: copy the range from Src)
	Tombstoned int    // records of this chunk the re-encoding made tombstones
	orig       bundlefmt.Entry
	origData   []byte // the source's bytes of a re-encoded chunk
}

// Tail is the stream's last settled object, which a plan may rewrite at
// revision + 1 when it is not full (publish may open the intent higher:
// docs/architecture.md#no-late-delete).
type Tail struct {
	Key         string
	FirstRecord uint64
	Revision    uint32
	Entries     []bundlefmt.Entry // its chunks, DataOffset from 0
	// Local holds, for a chunk re-encoded with tombstones, its new bytes
	// (Entries[i] then describes them); nil or a nil element: the chunk is
	// copied from the standing object at its DataOffset. Orig keeps the
	// standing object's own entries when any chunk was re-encoded (what an
	// adoption may also find: a rewrite under fewer erasures).
	Local      [][]byte
	Orig       []bundlefmt.Entry
	OrigData   [][]byte // the standing object's bytes of each re-encoded chunk
	Tombstoned int      // records the re-encoding made tombstones
	obj        []byte   // the whole stored object, when read whole (fetch.go)
}

// local is the re-encoded bytes of the tail's chunk i (nil: copy it).
func (t *Tail) local(i int) []byte {
	if i < len(t.Local) {
		return t.Local[i]
	}
	return nil
}

// end is the record after the tail's last.
func (t *Tail) end() uint64 {
	if len(t.Entries) == 0 {
		return t.FirstRecord
	}
	return t.Entries[len(t.Entries)-1].EndRecord()
}

// PlanInput is everything the planner needs for one stream.
type PlanInput struct {
	Stream      bundlefmt.StreamID
	Bucket      string // the stream's bucket (key coordinate)
	StreamEpoch uint64
	Tail        *Tail         // nil when the stream has no catalog entry
	Chunks      []SourceChunk // tile [settled_through, next_record), record order
	CapBytes    int64         // --denorm-output-cap-mib, metered in content bytes
	TargetBytes int64         // --denorm-chunk-target-kib, same meter
}

// Piece is one byte range an output is assembled from, in order: a range
// of a source object, or (Data set) bytes the auditor built, a chunk
// re-encoded with tombstones.
type Piece struct {
	Src    Source
	Off    uint64
	Len    uint64
	CRC32C uint32 // of exactly these bytes (by combine when several chunks)
	Data   []byte // local bytes (nil: the range of Src)
}

// Output is one settled object to publish.
type Output struct {
	Key          string
	FirstRecord  uint64
	Revision     uint32
	Rewrite      *Tail // set when this output rewrites the standing tail
	Pieces       []Piece
	Footer       bundlefmt.SettledFooter
	RecordCount  uint64
	MinTimestamp int64
	MaxTimestamp int64
	DataBytes    uint64 // bytes of the data region (pieces)
	Meter        int64  // content-byte meter
	Tombstoned   int    // records re-encoded as tombstones in this output
}

// EndRecord is one past the output's last record.
func (o *Output) EndRecord() uint64 { return o.FirstRecord + o.RecordCount }

// Meter is the planner's content-byte meter of a chunk: stored bytes minus
// the one flag byte per record. It over-counts content (header tables are
// framing), which keeps every object within the cap.
func Meter(e *bundlefmt.Entry) int64 { return int64(e.ChunkBytes()) - int64(e.Count()) }

// MeterAll meters a list of entries.
func MeterAll(es []bundlefmt.Entry) int64 {
	var m int64
	for i := range es {
		m += Meter(&es[i])
	}
	return m
}

// IsFull reports whether an object metering m is full given the next chunk
// metering next (next < 0: no next chunk known).
func IsFull(m, next, capBytes int64) bool {
	return m >= capBytes || (next >= 0 && m+next > capBytes)
}

// ErrPlan is a planner input that breaks its preconditions (a bug upstream).
var ErrPlan = errors.New("invalid plan input")

// Plan decides the outputs for one stream. Rules (docs/architecture.md#settling):
// the first output rewrites the standing tail at revision + 1 when it is not
// full and the first new chunk fits beside it; the remaining chunks fill
// objects up to the cap, closing at chunk boundaries; a chunk over the cap
// is an object of its own; adjacent chunks merge up to the target. Every
// output but the last is full.
func Plan(in PlanInput) ([]Output, error) {
	if in.CapBytes <= 0 || in.TargetBytes <= 0 {
		return nil, fmt.Errorf("%w: cap %d, target %d", ErrPlan, in.CapBytes, in.TargetBytes)
	}
	for i := range in.Chunks {
		c := &in.Chunks[i]
		if c.Entry.Stream != in.Stream {
			return nil, fmt.Errorf("%w: chunk %d of stream %s in a plan for %s", ErrPlan, i, c.Entry.Stream, in.Stream)
		}
		if i > 0 && c.Entry.FirstRecord != in.Chunks[i-1].Entry.EndRecord() {
			return nil, fmt.Errorf("%w: chunk %d starts at %d, previous ends at %d", ErrPlan, i, c.Entry.FirstRecord, in.Chunks[i-1].Entry.EndRecord())
		}
	}
	if len(in.Chunks) == 0 {
		return nil, nil
	}
	type building struct {
		first   uint64
		rev     uint32
		rewrite *Tail
		chunks  []SourceChunk // new chunks
		meter   int64
	}
	var (
		cur  *building
		outs []building
	)
	if t := in.Tail; t != nil {
		if len(t.Entries) == 0 || t.end() != in.Chunks[0].Entry.FirstRecord {
			return nil, fmt.Errorf("%w: tail %s does not end where the new chunks start (%d)", ErrPlan, t.Key, in.Chunks[0].Entry.FirstRecord)
		}
		m := MeterAll(t.Entries)
		if !IsFull(m, Meter(&in.Chunks[0].Entry), in.CapBytes) {
			cur = &building{first: t.FirstRecord, rev: t.Revision + 1, rewrite: t, meter: m}
		}
	}
	for _, c := range in.Chunks {
		m := Meter(&c.Entry)
		if cur != nil && cur.meter+m <= in.CapBytes {
			cur.chunks = append(cur.chunks, c)
			cur.meter += m
			continue
		}
		if cur != nil {
			outs = append(outs, *cur)
		}
		cur = &building{first: c.Entry.FirstRecord, chunks: []SourceChunk{c}, meter: m}
	}
	outs = append(outs, *cur)

	result := make([]Output, 0, len(outs))
	for _, b := range outs {
		o, err := buildOutput(in, b.first, b.rev, b.rewrite, b.chunks, b.meter)
		if err != nil {
			return nil, err
		}
		result = append(result, o)
	}
	return result, nil
}

// buildOutput lays out one output: pieces, merged entries, footer.
func buildOutput(in PlanInput, first uint64, rev uint32, rewrite *Tail, chunks []SourceChunk, meter int64) (Output, error) {
	o := Output{
		Key:         bundlefmt.SettledKey(in.Bucket, in.Stream, in.StreamEpoch, first, rev),
		FirstRecord: first,
		Revision:    rev,
		Rewrite:     rewrite,
		Meter:       meter,
	}
	var entries []bundlefmt.Entry
	add := func(p Piece) { o.Pieces = appendPiece(o.Pieces, p) }
	if rewrite != nil {
		// The standing object's data region, copied; a chunk re-encoded
		// with tombstones is uploaded in its place.
		src := bundle.Settled(rewrite.Key)
		for i := range rewrite.Entries {
			e := rewrite.Entries[i]
			if d := rewrite.local(i); d != nil {
				add(Piece{Len: uint64(len(d)), CRC32C: e.DataCRC, Data: d})
			} else {
				add(Piece{Src: src, Off: e.DataOffset, Len: e.ChunkBytes(), CRC32C: e.DataCRC})
			}
			entries = append(entries, e)
		}
		o.Tombstoned += rewrite.Tombstoned
	}
	for _, c := range chunks {
		e := c.Entry
		if c.Data != nil {
			add(Piece{Len: uint64(len(c.Data)), CRC32C: e.DataCRC, Data: c.Data})
		} else {
			add(Piece{Src: c.Src, Off: e.DataOffset, Len: e.ChunkBytes(), CRC32C: e.DataCRC})
		}
		o.Tombstoned += c.Tombstoned
		entries = append(entries, e)
	}
	merged, err := mergeAdjacent(entries, in.TargetBytes)
	if err != nil {
		return o, err
	}
	for i := range merged {
		o.RecordCount += uint64(merged[i].Count())
		o.DataBytes += merged[i].ChunkBytes()
	}
	o.MinTimestamp, o.MaxTimestamp = bundlefmt.TimestampRange(merged)
	o.Footer, err = bundlefmt.BuildSettledFooter(merged)
	if err != nil {
		return o, fmt.Errorf("build footer of %s: %w", o.Key, err)
	}
	return o, nil
}

// appendPiece appends p to an output's pieces, or extends the last piece
// with it when both are copies of contiguous bytes of the same source, so
// an output makes as few requests as its sources allow.
func appendPiece(pieces []Piece, p Piece) []Piece {
	// Coalesce with the previous piece when the bytes are contiguous in
	// the same source (fewer requests, same bytes).
	if n := len(pieces); n > 0 && p.Data == nil && pieces[n-1].Data == nil &&
		pieces[n-1].Src == p.Src && pieces[n-1].Off+pieces[n-1].Len == p.Off {
		last := &pieces[n-1]
		last.CRC32C = bundlefmt.CombineCRC32C(last.CRC32C, p.CRC32C, int64(p.Len))
		last.Len += p.Len
		return pieces
	}
	return append(pieces, p)
}

// mergeAdjacent merges consecutive entries while the merged meter stays
// within target. Entries keep their order; DataCRC comes by combine.
func mergeAdjacent(es []bundlefmt.Entry, target int64) ([]bundlefmt.Entry, error) {
	var out []bundlefmt.Entry
	for _, e := range es {
		if n := len(out); n > 0 && Meter(&out[n-1])+Meter(&e) <= target {
			m, err := bundlefmt.MergeEntries(out[n-1], e)
			if err != nil {
				return nil, fmt.Errorf("merge chunks at record %d: %w", e.FirstRecord, err)
			}
			out[n-1] = m
			continue
		}
		out = append(out, e)
	}
	return out, nil
}
