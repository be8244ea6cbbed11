package bundlefmt

// Chunks (docs/format.md#object-layout): a Chunk is a directory entry with
// the chunk's bytes, what the encoders take. ChunkBuilder builds one record
// by record; MergeEntries and MergeChunks join two adjacent chunks of a
// stream.

import (
	"math"
)

// Chunk is an entry plus its bytes, for encoders that own the bytes.
type Chunk struct {
	Entry Entry
	Data  []byte
}

// ChunkBuilder appends records of one stream to a chunk, computing the
// DataCRC as it goes.
type ChunkBuilder struct {
	e     Entry
	data  []byte
	bytes int64 // content bytes
}

// NewChunkBuilder starts a chunk of stream whose first record is firstRecord.
func NewChunkBuilder(stream StreamID, firstRecord uint64) *ChunkBuilder {
	return &ChunkBuilder{e: Entry{Stream: stream, FirstRecord: firstRecord}}
}

// Add appends one record with its timestamp and batch-end flag.
func (b *ChunkBuilder) Add(rec Record, ts int64, batchEnd bool) error {
	start := len(b.data)
	data, err := AppendRecord(b.data, rec)
	if err != nil {
		return err
	}
	if err := b.add(data, start, ts, batchEnd); err != nil {
		b.data = data[:start]
		return err
	}
	b.bytes += rec.ContentBytes()
	return nil
}

// AddStored appends one record given in its stored form (as copied from
// another chunk); it is checked against docs/format.md#stored-record first.
func (b *ChunkBuilder) AddStored(stored []byte, ts int64, batchEnd bool) error {
	info, err := ParseRecord(stored)
	if err != nil {
		return err
	}
	start := len(b.data)
	if err := b.add(append(b.data, stored...), start, ts, batchEnd); err != nil {
		b.data = b.data[:start]
		return err
	}
	b.bytes += info.ContentBytes
	return nil
}

func (b *ChunkBuilder) add(data []byte, start int, ts int64, batchEnd bool) error {
	n := len(b.e.Lengths)
	if n >= MaxRecordCount {
		return invalidf("chunk is full (%d records)", n)
	}
	if b.e.FirstRecord > MaxNumber-uint64(n) {
		return invalidf("record number %d+%d exceeds 2^63-1", b.e.FirstRecord, n)
	}
	if l := len(data) - start; l > math.MaxUint32 {
		return invalidf("stored record of %d bytes does not fit u32", l)
	}
	b.data = data
	b.e.Lengths = append(b.e.Lengths, uint32(len(data)-start))
	b.e.Timestamps = append(b.e.Timestamps, ts)
	if n&7 == 0 {
		b.e.BatchEnd = append(b.e.BatchEnd, 0)
	}
	if batchEnd {
		b.e.BatchEnd[n>>3] |= 1 << (n & 7)
	}
	b.e.DataCRC = UpdateCRC32C(b.e.DataCRC, data[start:])
	return nil
}

// Grow reserves room for records more records of bytes more stored bytes,
// sparing the appends a few copies when the caller knows the sizes.
func (b *ChunkBuilder) Grow(records, bytes int) {
	if bytes > cap(b.data)-len(b.data) {
		b.data = append(make([]byte, 0, len(b.data)+bytes), b.data...)
	}
	if records > cap(b.e.Lengths)-len(b.e.Lengths) {
		n := len(b.e.Lengths) + records
		b.e.Lengths = append(make([]uint32, 0, n), b.e.Lengths...)
		b.e.Timestamps = append(make([]int64, 0, n), b.e.Timestamps...)
		b.e.BatchEnd = append(make([]byte, 0, batchEndLen(n)), b.e.BatchEnd...)
	}
}

// Len is the number of records added so far.
func (b *ChunkBuilder) Len() int { return len(b.e.Lengths) }

// Size is the chunk's byte length so far.
func (b *ChunkBuilder) Size() int { return len(b.data) }

// ContentBytes is the content bytes added so far.
func (b *ChunkBuilder) ContentBytes() int64 { return b.bytes }

// Chunk returns the chunk built so far. The last record of a chunk always
// ends a batch (docs/format.md#directory-entry: batches never straddle chunks), so
// Chunk sets that bit itself: cut chunks only at batch boundaries. The
// encoders, by contrast, require the bit. The builder must not be used after
// Chunk; an empty builder yields a chunk that the encoders reject.
func (b *ChunkBuilder) Chunk() Chunk {
	if n := len(b.e.Lengths); n > 0 {
		b.e.BatchEnd[(n-1)>>3] |= 1 << ((n - 1) & 7)
	}
	return Chunk{Entry: b.e, Data: b.data}
}

// MergeEntries merges two adjacent chunks of one stream into one entry:
// concatenated per-record tables, DataCRC by CRC-32C combine (the bytes are
// never read), DataOffset of a. b must start where a ends.
func MergeEntries(a, b Entry) (Entry, error) {
	if a.Stream != b.Stream {
		return Entry{}, invalidf("merge: streams %s and %s differ", a.Stream, b.Stream)
	}
	if b.FirstRecord != a.EndRecord() {
		return Entry{}, invalidf("merge: chunk at record %d does not follow [%d, %d)", b.FirstRecord, a.FirstRecord, a.EndRecord())
	}
	if err := a.validate(); err != nil {
		return Entry{}, err
	}
	if err := b.validate(); err != nil {
		return Entry{}, err
	}
	na, nb := a.Count(), b.Count()
	if na+nb > MaxRecordCount {
		return Entry{}, invalidf("merge: %d records exceed %d", na+nb, MaxRecordCount)
	}
	bBytes := b.ChunkBytes()
	if bBytes > math.MaxInt64 {
		return Entry{}, invalidf("merge: chunk of %d bytes", bBytes)
	}
	m := Entry{
		Stream:      a.Stream,
		FirstRecord: a.FirstRecord,
		DataOffset:  a.DataOffset,
		DataCRC:     CombineCRC32C(a.DataCRC, b.DataCRC, int64(bBytes)),
		Lengths:     make([]uint32, 0, na+nb),
		Timestamps:  make([]int64, 0, na+nb),
		BatchEnd:    make([]byte, batchEndLen(na+nb)),
	}
	m.Lengths = append(append(m.Lengths, a.Lengths...), b.Lengths...)
	m.Timestamps = append(append(m.Timestamps, a.Timestamps...), b.Timestamps...)
	copy(m.BatchEnd, a.BatchEnd)
	for i := 0; i < nb; i++ {
		if b.IsBatchEnd(i) {
			j := na + i
			m.BatchEnd[j>>3] |= 1 << (j & 7)
		}
	}
	return m, nil
}

// MergeChunks merges two adjacent chunks of one stream, bytes included.
func MergeChunks(a, b Chunk) (Chunk, error) {
	e, err := MergeEntries(a.Entry, b.Entry)
	if err != nil {
		return Chunk{}, err
	}
	data := make([]byte, 0, len(a.Data)+len(b.Data))
	return Chunk{Entry: e, Data: append(append(data, a.Data...), b.Data...)}, nil
}
