package bundlefmt

// Directory entries (docs/format.md#directory-entry): Entry, an entry
// decoded into its own tables, and EntryView, one read in place from a
// footer; and the footer an encoder writes from entries: the object laid
// out around them (planLayout), then the directory, index and trailer
// (appendFooter, BuildSettledFooter).

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

// layout is the planned shape of an object: where everything goes.
type layout struct {
	base      uint64
	dataLen   uint64 // Σ chunk bytes
	dirLen    uint64
	indexLen  uint64
	dirOffset uint64
}

func (l layout) footerLen() uint64  { return l.dirLen + l.indexLen }
func (l layout) objectSize() uint64 { return l.dirOffset + l.footerLen() + TrailerSize }

// planLayout checks the entries of one object (docs/format.md#object-layout order and
// contiguity rules, docs/format.md#directory-entry entry rules) and sizes it. For a transit
// bundle every stream appears once, in strictly ascending order; a settled
// object holds one stream with contiguous records.
func planLayout(entries []Entry, base uint64) (layout, error) {
	l := layout{base: base}
	if len(entries) == 0 {
		return l, invalidf("an object holds at least one chunk")
	}
	for i := range entries {
		e := &entries[i]
		if err := e.validate(); err != nil {
			return l, err
		}
		if i > 0 {
			p := &entries[i-1]
			if base == TransitBase {
				if p.Stream.Compare(e.Stream) >= 0 {
					return l, invalidf("chunk %d: stream %s does not sort strictly after %s (one chunk per stream, sorted)", i, e.Stream, p.Stream)
				}
			} else {
				if e.Stream != p.Stream {
					return l, invalidf("chunk %d: stream %s in a settled object of stream %s", i, e.Stream, p.Stream)
				}
				if e.FirstRecord != p.EndRecord() {
					return l, invalidf("chunk %d: first record %d, want %d (contiguous records)", i, e.FirstRecord, p.EndRecord())
				}
			}
		}
		l.dataLen += e.ChunkBytes() // ≤ 2^29 · 2^32 per chunk: no overflow in practice
		l.dirLen += uint64(EntryLen(e.Count()))
	}
	l.indexLen = uint64(len(entries)) * RowSize
	l.dirOffset = base + l.dataLen
	if base == TransitBase && l.objectSize() > MaxFlightSize {
		return l, invalidf("flight of %d bytes exceeds %d", l.objectSize(), uint64(MaxFlightSize))
	}
	if l.objectSize() > math.MaxInt {
		return l, invalidf("object of %d bytes", l.objectSize())
	}
	return l, nil
}

// appendFooter appends directory, index and trailer for entries laid out
// from l.base, setting each DataOffset (entries is the encoder's own copy).
func appendFooter(dst []byte, entries []Entry, l layout) []byte {
	dirStart := len(dst)
	off := l.base
	for i := range entries {
		entries[i].DataOffset = off
		off += entries[i].ChunkBytes()
		dst = appendEntry(dst, &entries[i])
	}
	dirCRC := CRC32C(dst[dirStart:])
	idxStart := len(dst)
	entOff := l.dirOffset
	p := dirStart
	for i := range entries {
		e := &entries[i]
		el := EntryLen(e.Count())
		dst = appendRow(dst, IndexRow{
			Stream:      e.Stream,
			FirstRecord: e.FirstRecord,
			Count:       uint32(e.Count()),
			ChunkBytes:  e.ChunkBytes(),
			EntryOffset: entOff,
			EntryLength: uint32(el),
			EntryCRC:    CRC32C(dst[p : p+el]),
		})
		entOff += uint64(el)
		p += el
	}
	idxCRC := CRC32C(dst[idxStart:])
	dst, b := extend(dst, TrailerSize)
	le := binary.LittleEndian
	copy(b[trMagicOff:], trailerMagic)
	le.PutUint32(b[trVersionOff:], Version)
	le.PutUint64(b[trDirOffsetOff:], l.dirOffset)
	le.PutUint64(b[trDirLengthOff:], l.dirLen)
	le.PutUint32(b[trDirCRCOff:], dirCRC)
	le.PutUint64(b[trIndexLengthOff:], l.indexLen)
	le.PutUint32(b[trIndexCRCOff:], idxCRC)
	return dst
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

// SettledFooter is the tail of a settled object whose chunk bytes are copied
// server side: Bytes (directory + index + trailer) go at FooterOffset.
type SettledFooter struct {
	Bytes        []byte // footer + trailer
	FooterOffset uint64 // = Σ chunk bytes (base 0)
	FooterLength uint64 // directory + index, trailer excluded
	ObjectSize   uint64
	ObjectCRC    uint32  // whole-object CRC-32C, by combine (docs/format.md#crc-32c-combine)
	Entries      []Entry // the entries with their new data offsets (tables shared with the input)
}

// BuildSettledFooter builds the footer and trailer of a settled object from
// entries alone: it never sees the chunk bytes, and trusts each DataCRC and
// per-record table it is given. DataOffset of each entry is reassigned as the
// prefix sum of chunk bytes from 0; the input is not modified.
func BuildSettledFooter(entries []Entry) (SettledFooter, error) {
	own := append([]Entry(nil), entries...)
	l, err := planLayout(own, SettledBase)
	if err != nil {
		return SettledFooter{}, err
	}
	b := appendFooter(make([]byte, 0, l.footerLen()+TrailerSize), own, l)
	var crc uint32
	for i := range own {
		crc = CombineCRC32C(crc, own[i].DataCRC, int64(own[i].ChunkBytes()))
	}
	crc = CombineCRC32C(crc, CRC32C(b), int64(len(b)))
	return SettledFooter{
		Bytes:        b,
		FooterOffset: l.dirOffset,
		FooterLength: l.footerLen(),
		ObjectSize:   l.objectSize(),
		ObjectCRC:    crc,
		Entries:      own,
	}, nil
}
