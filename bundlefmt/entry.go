package bundlefmt

import (
	"encoding/binary"
	"math"
)

// Entry is one directory entry: one chunk's metadata (docs/format.md#directory-entry).
type Entry struct {
	Stream      StreamID
	FirstRecord uint64
	DataOffset  uint64 // object-absolute start of the chunk
	DataCRC     uint32 // CRC-32C of the chunk's bytes
	Lengths     []uint32
	Timestamps  []int64 // Unix milliseconds, any values, no order required
	BatchEnd    []byte  // batchEndLen(n) = ⌈n/8⌉ bytes: bit i%8 of byte i/8 set when record i ends a producer batch
}

// Count is the record count n.
func (e *Entry) Count() int { return len(e.Lengths) }

// ChunkBytes is the chunk's length, Σ stored-record lengths.
func (e *Entry) ChunkBytes() uint64 {
	var n uint64
	for _, l := range e.Lengths {
		n += uint64(l)
	}
	return n
}

// EndRecord is the record number after the chunk's last record.
func (e *Entry) EndRecord() uint64 { return e.FirstRecord + uint64(len(e.Lengths)) }

// IsBatchEnd reports whether record i (0-based within the chunk) ends a batch.
func (e *Entry) IsBatchEnd(i int) bool { return e.BatchEnd[i>>3]&(1<<(i&7)) != 0 }

// RecordOffset is the offset of record i from the start of the chunk.
func (e *Entry) RecordOffset(i int) uint64 {
	var n uint64
	for _, l := range e.Lengths[:i] {
		n += uint64(l)
	}
	return n
}

// EntryLen is the encoded length of an entry of n records: 40 + 12n + ⌈n/8⌉.
func EntryLen(n int) int { return entBatchEndOff(n) + batchEndLen(n) }

// validate checks an entry handed to an encoder: every docs/format.md#directory-entry rule that
// does not need the chunk's bytes.
func (e *Entry) validate() error {
	n := len(e.Lengths)
	switch {
	case n == 0:
		return invalidf("chunk of stream %s has no records", e.Stream)
	case n > MaxRecordCount:
		return invalidf("chunk of %d records exceeds %d", n, MaxRecordCount)
	case len(e.Timestamps) != n:
		return invalidf("chunk has %d lengths but %d timestamps", n, len(e.Timestamps))
	case len(e.BatchEnd) != batchEndLen(n):
		return invalidf("chunk of %d records has %d batch-end bytes", n, len(e.BatchEnd))
	case e.FirstRecord > MaxNumber || uint64(n-1) > MaxNumber-e.FirstRecord:
		return invalidf("records [%d, +%d) exceed 2^63-1", e.FirstRecord, n)
	case !e.IsBatchEnd(n - 1):
		return invalidf("last record %d of the chunk does not end a batch", e.FirstRecord+uint64(n-1))
	}
	if n%8 != 0 && e.BatchEnd[len(e.BatchEnd)-1]>>(n%8) != 0 {
		return invalidf("batch-end bits set past record %d", n)
	}
	for i, l := range e.Lengths {
		if l == 0 {
			return invalidf("record %d has stored length 0", e.FirstRecord+uint64(i))
		}
	}
	return nil
}

// appendEntry appends e's encoded form.
func appendEntry(dst []byte, e *Entry) []byte {
	n := len(e.Lengths)
	dst, b := extend(dst, EntryLen(n))
	le := binary.LittleEndian
	copy(b[entStreamOff:], e.Stream[:])
	le.PutUint64(b[entFirstRecordOff:], e.FirstRecord)
	le.PutUint32(b[entCountOff:], uint32(n))
	le.PutUint64(b[entDataOffsetOff:], e.DataOffset)
	le.PutUint32(b[entDataCRCOff:], e.DataCRC)
	for i, l := range e.Lengths {
		le.PutUint32(b[entLengthOff(i):], l)
	}
	for i, t := range e.Timestamps {
		le.PutUint64(b[entTimestampOff(n, i):], uint64(t))
	}
	copy(b[entBatchEndOff(n):], e.BatchEnd)
	return dst
}

// IndexRow is one RowSize-byte chunk index row (docs/format.md#chunk-index-row).
type IndexRow struct {
	Stream      StreamID
	FirstRecord uint64
	Count       uint32
	ChunkBytes  uint64
	EntryOffset uint64 // object-absolute
	EntryLength uint32
	EntryCRC    uint32
}

// EndRecord is the record number after the row's last record.
func (r IndexRow) EndRecord() uint64 { return r.FirstRecord + uint64(r.Count) }

func decodeRow(b []byte) IndexRow {
	_ = b[RowSize-1]
	le := binary.LittleEndian
	var r IndexRow
	copy(r.Stream[:], b[rowStreamOff:rowFirstRecordOff])
	r.FirstRecord = le.Uint64(b[rowFirstRecordOff:])
	r.Count = le.Uint32(b[rowCountOff:])
	r.ChunkBytes = le.Uint64(b[rowChunkBytesOff:])
	r.EntryOffset = le.Uint64(b[rowEntryOffsetOff:])
	r.EntryLength = le.Uint32(b[rowEntryLengthOff:])
	r.EntryCRC = le.Uint32(b[rowEntryCRCOff:])
	return r
}

func appendRow(dst []byte, r IndexRow) []byte {
	dst, b := extend(dst, RowSize)
	le := binary.LittleEndian
	copy(b[rowStreamOff:], r.Stream[:])
	le.PutUint64(b[rowFirstRecordOff:], r.FirstRecord)
	le.PutUint32(b[rowCountOff:], r.Count)
	le.PutUint64(b[rowChunkBytesOff:], r.ChunkBytes)
	le.PutUint64(b[rowEntryOffsetOff:], r.EntryOffset)
	le.PutUint32(b[rowEntryLengthOff:], r.EntryLength)
	le.PutUint32(b[rowEntryCRCOff:], r.EntryCRC)
	return dst
}

// EntryView is one verified directory entry read in place, without
// allocation. It aliases the footer buffer.
type EntryView struct {
	b []byte
	n int
}

// Stream is the entry's stream.
func (v EntryView) Stream() (s StreamID) {
	copy(s[:], v.b[entStreamOff:entFirstRecordOff])
	return s
}

// FirstRecord is the number of the entry's first record.
func (v EntryView) FirstRecord() uint64 { return binary.LittleEndian.Uint64(v.b[entFirstRecordOff:]) }

// Count is the number of records in the entry.
func (v EntryView) Count() int { return v.n }

// EndRecord is the number just past the entry's last record.
func (v EntryView) EndRecord() uint64 { return v.FirstRecord() + uint64(v.n) }

// DataOffset is the object-absolute start of the entry's chunk.
func (v EntryView) DataOffset() uint64 { return binary.LittleEndian.Uint64(v.b[entDataOffsetOff:]) }

// DataCRC is the CRC-32C of the chunk's bytes.
func (v EntryView) DataCRC() uint32 { return binary.LittleEndian.Uint32(v.b[entDataCRCOff:]) }

// Length is the stored length of record i.
func (v EntryView) Length(i int) uint32 { return binary.LittleEndian.Uint32(v.b[entLengthOff(i):]) }

// Timestamp is record i's timestamp (Unix milliseconds).
func (v EntryView) Timestamp(i int) int64 {
	return int64(binary.LittleEndian.Uint64(v.b[entTimestampOff(v.n, i):]))
}

// IsBatchEnd says whether record i ends a producer batch.
func (v EntryView) IsBatchEnd(i int) bool { return v.b[entBatchEndOff(v.n)+(i>>3)]&(1<<(i&7)) != 0 }

// Bytes returns the entry's encoded bytes (aliasing the footer).
func (v EntryView) Bytes() []byte { return v.b }

// RecordRange returns the offset from the chunk start and the stored length
// of record i (0-based within the chunk); O(i).
func (v EntryView) RecordRange(i int) (off uint64, length uint32) {
	for j := 0; j < i; j++ {
		off += uint64(v.Length(j))
	}
	return off, v.Length(i)
}

// ChunkBytes is Σ stored-record lengths; O(n).
func (v EntryView) ChunkBytes() uint64 {
	var s uint64
	for i := 0; i < v.n; i++ {
		s += uint64(v.Length(i))
	}
	return s
}

// Entry copies the view into an Entry (three allocations).
func (v EntryView) Entry() Entry {
	e := Entry{
		Stream:      v.Stream(),
		FirstRecord: v.FirstRecord(),
		DataOffset:  v.DataOffset(),
		DataCRC:     v.DataCRC(),
		Lengths:     make([]uint32, v.n),
		Timestamps:  make([]int64, v.n),
	}
	for i := range e.Lengths {
		e.Lengths[i] = v.Length(i)
	}
	for i := range e.Timestamps {
		e.Timestamps[i] = v.Timestamp(i)
	}
	be := v.b[entBatchEndOff(v.n):]
	e.BatchEnd = append([]byte(nil), be...)
	return e
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

// Chunk is an entry plus its bytes, for encoders that own the bytes.
type Chunk struct {
	Entry Entry
	Data  []byte
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

// TimestampRange is the least and the greatest record timestamp of the
// chunks (0, 0 when they hold no record): a settled object's catalog row
// carries both.
func TimestampRange(es []Entry) (lo, hi int64) {
	first := true
	for i := range es {
		for _, ts := range es[i].Timestamps {
			if first || ts < lo {
				lo = ts
			}
			if first || ts > hi {
				hi = ts
			}
			first = false
		}
	}
	return lo, hi
}
