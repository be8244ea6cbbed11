package bundlefmt

// Decoding what a reader reads before any chunk (docs/format.md): the slot
// envelope and the trailer, which both locate the footer window, and the
// Footer opened from that window: its index rows checked, searched and
// read, and its directory entries verified and read one at a time.

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
)

// Envelope is a decoded slot envelope (docs/format.md#slot-envelope).
type Envelope struct {
	Kind         Kind // KindFlight or KindPoison
	Version      uint16
	Epoch        uint64 // slot epoch
	Seq          uint64
	Nonce        uint64
	ObjectSize   uint64
	FooterOffset uint64
	FooterLength uint64
}

// DecodeEnvelope decodes and checks the slot envelope in b[:EnvelopeSize] on
// its own (the envelope level of docs/format.md#validation-and-errors): magic, version, CRC,
// then its fields. b may be longer (the whole object); bytes past the
// envelope are ignored.
// Agreement with the key and with the object's real size are checked by
// ValidateEnvelope and ValidateObject.
func DecodeEnvelope(key string, b []byte) (Envelope, error) {
	var e Envelope
	if len(b) >= magicLen && string(b[envMagicOff:envMagicOff+magicLen]) != envelopeMagic {
		return e, corruptf(key, envMagicOff, "envelope.magic", "magic %q, want %q", b[envMagicOff:envMagicOff+magicLen], envelopeMagic)
	}
	le := binary.LittleEndian
	// The version is read before the length is held to v1's EnvelopeSize
	// bytes: another version may have another size.
	if len(b) >= envVersionOff+u16Len {
		if e.Version = le.Uint16(b[envVersionOff:]); e.Version != Version {
			var match *bool
			if len(b) >= EnvelopeSize {
				m := le.Uint32(b[envCRCOff:]) == CRC32C(b[:envCRCOff])
				match = &m
			}
			return e, versionErr(key, envVersionOff, "envelope.version", uint64(e.Version), match)
		}
	}
	if len(b) < EnvelopeSize {
		return e, corruptf(key, uint64(len(b)), "envelope", "truncated: %d of %d bytes", len(b), EnvelopeSize)
	}
	stored := le.Uint32(b[envCRCOff:])
	computed := CRC32C(b[:envCRCOff])
	if stored != computed {
		return e, checksumErr(key, 0, "envelope.crc", stored, computed)
	}
	e.Epoch = le.Uint64(b[envEpochOff:])
	e.Seq = le.Uint64(b[envSeqOff:])
	e.Nonce = le.Uint64(b[envNonceOff:])
	e.ObjectSize = le.Uint64(b[envObjectSizeOff:])
	e.FooterOffset = le.Uint64(b[envFooterOffsetOff:])
	e.FooterLength = le.Uint64(b[envFooterLengthOff:])
	switch b[envKindOff] {
	case kindByteFlight:
		e.Kind = KindFlight
	case kindBytePoison:
		e.Kind = KindPoison
	default:
		return e, corruptf(key, envKindOff, "envelope.kind", "unknown kind %d", b[envKindOff])
	}
	if b[envReservedOff] != 0 {
		return e, corruptf(key, envReservedOff, "envelope.reserved", "reserved byte 0x%02x", b[envReservedOff])
	}
	if e.Epoch == 0 || e.Epoch > MaxNumber {
		return e, corruptf(key, envEpochOff, "envelope.epoch", "slot epoch %d outside [1, 2^63-1]", e.Epoch)
	}
	if e.Seq > MaxNumber {
		return e, corruptf(key, envSeqOff, "envelope.seq", "seq %d exceeds 2^63-1", e.Seq)
	}
	if e.Kind == KindPoison {
		switch {
		case e.ObjectSize != EnvelopeSize:
			return e, corruptf(key, envObjectSizeOff, "envelope.object_size", "poison object size %d, want %d", e.ObjectSize, EnvelopeSize)
		case e.FooterOffset != 0:
			return e, corruptf(key, envFooterOffsetOff, "envelope.footer_offset", "poison footer offset %d, want 0", e.FooterOffset)
		case e.FooterLength != 0:
			return e, corruptf(key, envFooterLengthOff, "envelope.footer_length", "poison footer length %d, want 0", e.FooterLength)
		}
		return e, nil
	}
	// The smallest flight window: one record of one byte after the
	// envelope, then one entry of one record and its row.
	const minFooterOffset, minFooterLength = EnvelopeSize + recFlagsLen, minEntryLen + RowSize
	switch {
	case e.FooterOffset < minFooterOffset || e.FooterOffset > MaxFlightSize:
		return e, corruptf(key, envFooterOffsetOff, "envelope.footer_offset", "flight footer offset %d outside [%d, 5 GiB]", e.FooterOffset, minFooterOffset)
	case e.FooterLength < minFooterLength || e.FooterLength > MaxFlightSize:
		return e, corruptf(key, envFooterLengthOff, "envelope.footer_length", "flight footer length %d outside [%d, 5 GiB]", e.FooterLength, minFooterLength)
	case e.ObjectSize > MaxFlightSize:
		return e, corruptf(key, envObjectSizeOff, "envelope.object_size", "flight of %d bytes exceeds 5 GiB", e.ObjectSize)
	case e.FooterOffset+e.FooterLength+TrailerSize != e.ObjectSize:
		return e, corruptf(key, envObjectSizeOff, "envelope.object_size", "object size %d ≠ footer offset %d + footer length %d + %d",
			e.ObjectSize, e.FooterOffset, e.FooterLength, TrailerSize)
	}
	return e, nil
}

// ValidateEnvelope checks a slot envelope on its own (DecodeEnvelope), then
// its kind and, with CheckKey, its epoch and seq against the key.
func ValidateEnvelope(b []byte, exp Expect) (Envelope, error) {
	env, err := DecodeEnvelope(exp.Key, b)
	if err != nil {
		return env, err
	}
	if (exp.Kind == KindFlight || exp.Kind == KindPoison) && env.Kind != exp.Kind {
		return env, corruptf(exp.Key, envKindOff, "envelope.kind", "a %s where a %s was expected", env.Kind, exp.Kind)
	}
	if exp.CheckKey {
		if env.Epoch != exp.Epoch {
			return env, corruptf(exp.Key, envEpochOff, "envelope.epoch", "slot epoch %d ≠ key's %d", env.Epoch, exp.Epoch)
		}
		if env.Seq != exp.Seq {
			return env, corruptf(exp.Key, envSeqOff, "envelope.seq", "seq %d ≠ key's %d", env.Seq, exp.Seq)
		}
	}
	return env, nil
}

// Trailer is a decoded trailer (docs/format.md#trailer).
type Trailer struct {
	Version     uint32
	DirOffset   uint64
	DirLength   uint64
	DirCRC      uint32
	IndexLength uint64
	IndexCRC    uint32
}

// FooterOffset and FooterLength are the footer window the trailer implies.
func (t Trailer) FooterOffset() uint64 { return t.DirOffset }

// FooterLength is the footer window's length: directory and index.
func (t Trailer) FooterLength() uint64 { return t.DirLength + t.IndexLength }

// NumChunks is the number of index rows.
func (t Trailer) NumChunks() int { return int(t.IndexLength / RowSize) }

// DecodeTrailer decodes the trailer at the end of b (b is at least the last
// TrailerSize bytes of an object of objectSize bytes): object size ≥
// TrailerSize, magic, version, then the trailer's own consistency (lengths
// sum to the object size, index length a positive multiple of RowSize, room
// for every entry).
// Base-dependent bounds are checked by OpenFooter.
func DecodeTrailer(key string, b []byte, objectSize uint64) (Trailer, error) {
	var t Trailer
	if objectSize < TrailerSize {
		return t, corruptf(key, 0, "object_size", "object of %d bytes has no room for a trailer", objectSize)
	}
	off := objectSize - TrailerSize
	if len(b) < TrailerSize {
		return t, corruptf(key, off, "trailer", "truncated: %d of %d bytes", len(b), TrailerSize)
	}
	b = b[len(b)-TrailerSize:]
	if string(b[trMagicOff:trMagicOff+magicLen]) != trailerMagic {
		return t, corruptf(key, off+trMagicOff, "trailer.magic", "magic %q, want %q", b[trMagicOff:trMagicOff+magicLen], trailerMagic)
	}
	le := binary.LittleEndian
	t.Version = le.Uint32(b[trVersionOff:])
	if t.Version != Version {
		return t, versionErr(key, off+trVersionOff, "trailer.version", uint64(t.Version), nil)
	}
	t.DirOffset = le.Uint64(b[trDirOffsetOff:])
	t.DirLength = le.Uint64(b[trDirLengthOff:])
	t.DirCRC = le.Uint32(b[trDirCRCOff:])
	t.IndexLength = le.Uint64(b[trIndexLengthOff:])
	t.IndexCRC = le.Uint32(b[trIndexCRCOff:])
	switch {
	case t.IndexLength == 0 || t.IndexLength%RowSize != 0 || t.IndexLength > off:
		return t, corruptf(key, off+trIndexLengthOff, "trailer.index_length", "index length %d is not a positive multiple of %d within the object", t.IndexLength, RowSize)
	case t.DirLength > off-t.IndexLength || t.DirLength/minEntryLen < t.IndexLength/RowSize:
		return t, corruptf(key, off+trDirLengthOff, "trailer.dir_length", "directory length %d out of range for %d entries", t.DirLength, t.IndexLength/RowSize)
	case t.DirOffset != off-t.IndexLength-t.DirLength:
		return t, corruptf(key, off+trDirOffsetOff, "trailer.dir_offset", "directory offset %d + lengths %d + %d + %d ≠ object size %d",
			t.DirOffset, t.DirLength, t.IndexLength, TrailerSize, objectSize)
	}
	return t, nil
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

// Footer is an opened footer window: directory + index + trailer, checked
// up to the index CRC and every row rule, with entries decoded on demand.
type Footer struct {
	key     string
	base    uint64
	off     uint64 // footer offset = directory offset
	size    uint64 // object size
	dir     []byte
	idx     []byte
	trailer Trailer
	n       int
	dataOff []uint64 // chunk i starts at dataOff[i]; filled by checkRows
}

// OpenFooter opens a footer window: buf holds [footerOffset, objectSize),
// i.e. footer + trailer as one ranged GET returns it (a caller holding a
// window (offset, length) from a ref or an envelope passes exactly
// length + TrailerSize bytes, so the trailer is checked against that window), objectSize is the
// object's total size (the Content-Range total), base is TransitBase for a slot and
// SettledBase for a settled object. It checks the trailer, the window's agreement with
// it, the footer bounds, the index CRC and every row rule; it does not decode
// or verify entries (see Entry and VerifyDirectory). buf is aliased.
func OpenFooter(key string, footerOffset uint64, buf []byte, objectSize uint64, base uint64) (*Footer, error) {
	f, err := openFooter(key, footerOffset, buf, objectSize, base)
	if err != nil {
		return nil, err
	}
	if err := f.checkIndexCRC(); err != nil {
		return nil, err
	}
	if err := f.checkRows(); err != nil {
		return nil, err
	}
	return f, nil
}

// OpenObjectFooter opens the footer of a whole object held in memory,
// starting from its trailer (a reader that knows only the object's size).
func OpenObjectFooter(key string, obj []byte, base uint64) (*Footer, error) {
	t, err := DecodeTrailer(key, obj, uint64(len(obj)))
	if err != nil {
		return nil, err
	}
	return OpenFooter(key, t.DirOffset, obj[t.DirOffset:], uint64(len(obj)), base)
}

// openFooter runs levels (2) and (3) of docs/format.md#validation-and-errors: trailer, then bounds.
func openFooter(key string, footerOffset uint64, buf []byte, objectSize uint64, base uint64) (*Footer, error) {
	if base != TransitBase && base != SettledBase {
		return nil, fmt.Errorf("%w: base offset %d is neither 0 nor 60", ErrInvalid, base)
	}
	if uint64(len(buf)) < TrailerSize {
		return nil, corruptf(key, footerOffset, "footer", "window of %d bytes has no room for a trailer", len(buf))
	}
	t, err := DecodeTrailer(key, buf, objectSize)
	if err != nil {
		return nil, err
	}
	toff := objectSize - TrailerSize
	rows := t.IndexLength / RowSize
	switch {
	case footerOffset > math.MaxUint64-uint64(len(buf)) || footerOffset+uint64(len(buf)) != objectSize:
		return nil, corruptf(key, footerOffset, "footer", "window [%d, +%d) does not end at object size %d", footerOffset, len(buf), objectSize)
	case t.DirOffset != footerOffset:
		return nil, corruptf(key, toff+trDirOffsetOff, "trailer.dir_offset", "directory offset %d ≠ footer offset %d", t.DirOffset, footerOffset)
	case t.DirOffset < base || t.DirOffset-base < rows:
		return nil, corruptf(key, toff+trDirOffsetOff, "trailer.dir_offset", "directory offset %d leaves no room for %d chunks after base %d", t.DirOffset, rows, base)
	}
	f := &Footer{
		key:     key,
		base:    base,
		off:     footerOffset,
		size:    objectSize,
		dir:     buf[:t.DirLength:t.DirLength],
		idx:     buf[t.DirLength : t.DirLength+t.IndexLength : t.DirLength+t.IndexLength],
		trailer: t,
		n:       int(rows),
	}
	return f, nil
}

func (f *Footer) idxOffset() uint64 { return f.off + f.trailer.DirLength }

func (f *Footer) checkDirCRC() error {
	if c := CRC32C(f.dir); c != f.trailer.DirCRC {
		return checksumErr(f.key, f.off, "directory.crc", f.trailer.DirCRC, c)
	}
	return nil
}

func (f *Footer) checkIndexCRC() error {
	if c := CRC32C(f.idx); c != f.trailer.IndexCRC {
		return checksumErr(f.key, f.idxOffset(), "index.crc", f.trailer.IndexCRC, c)
	}
	return nil
}

func (f *Footer) rowErr(i int, field uint64, name, format string, args ...any) error {
	return corruptf(f.key, f.idxOffset()+uint64(i)*RowSize+field, fmt.Sprintf("row[%d].%s", i, name), format, args...)
}

// checkRows checks every rule of the index on its own (docs/format.md#object-layout and 5):
// counts, record-number range, chunk bytes, entry tiling of the directory,
// chunk tiling of the data region, sort order, and the per-kind stream rules.
// It fills dataOff.
func (f *Footer) checkRows() error {
	dataOff := make([]uint64, f.n)
	var prev IndexRow
	entOff := f.off
	dataPos := f.base
	for i := 0; i < f.n; i++ {
		r := f.Row(i)
		switch {
		case r.Count == 0 || r.Count > MaxRecordCount:
			return f.rowErr(i, rowCountOff, "count", "record count %d outside [1, %d]", r.Count, MaxRecordCount)
		case r.FirstRecord > MaxNumber || uint64(r.Count-1) > MaxNumber-r.FirstRecord:
			return f.rowErr(i, rowFirstRecordOff, "first_record", "records [%d, +%d) exceed 2^63-1", r.FirstRecord, r.Count)
		case r.ChunkBytes < uint64(r.Count) || r.ChunkBytes > uint64(r.Count)*math.MaxUint32:
			return f.rowErr(i, rowChunkBytesOff, "chunk_bytes", "%d bytes for %d records", r.ChunkBytes, r.Count)
		case r.EntryOffset != entOff:
			return f.rowErr(i, rowEntryOffsetOff, "entry_offset", "entry offset %d, want %d (gap or overlap)", r.EntryOffset, entOff)
		case r.EntryLength != uint32(EntryLen(int(r.Count))):
			return f.rowErr(i, rowEntryLengthOff, "entry_length", "entry length %d, want %d for %d records", r.EntryLength, EntryLen(int(r.Count)), r.Count)
		case r.ChunkBytes > f.off-dataPos:
			return f.rowErr(i, rowChunkBytesOff, "chunk_bytes", "chunk [%d, +%d) runs past the directory at %d", dataPos, r.ChunkBytes, f.off)
		}
		if i > 0 {
			c := r.Stream.Compare(prev.Stream)
			switch {
			case c < 0 || c == 0 && r.FirstRecord <= prev.FirstRecord:
				return f.rowErr(i, rowStreamOff, "stream", "rows not sorted by (stream, first record) strictly ascending")
			case f.base == TransitBase && c == 0:
				return f.rowErr(i, rowStreamOff, "stream", "second chunk of stream %s in a transit bundle", r.Stream)
			case f.base == SettledBase && c != 0:
				return f.rowErr(i, rowStreamOff, "stream", "stream %s in a settled object of stream %s", r.Stream, prev.Stream)
			case f.base == SettledBase && r.FirstRecord != prev.EndRecord():
				return f.rowErr(i, rowFirstRecordOff, "first_record", "first record %d, want %d (records not contiguous)", r.FirstRecord, prev.EndRecord())
			}
		}
		dataOff[i] = dataPos
		dataPos += r.ChunkBytes
		entOff += uint64(r.EntryLength)
		if entOff > f.off+f.trailer.DirLength {
			return f.rowErr(i, rowEntryLengthOff, "entry_length", "entry [%d, +%d) runs past the directory end %d", r.EntryOffset, r.EntryLength, f.off+f.trailer.DirLength)
		}
		prev = r
	}
	toff := f.size - TrailerSize
	if entOff != f.off+f.trailer.DirLength {
		return corruptf(f.key, toff+trDirLengthOff, "trailer.dir_length", "Σ entry lengths %d ≠ directory length %d", entOff-f.off, f.trailer.DirLength)
	}
	if dataPos != f.off {
		return corruptf(f.key, toff+trDirOffsetOff, "trailer.dir_offset", "base %d + Σ chunk bytes %d ≠ directory offset %d", f.base, dataPos-f.base, f.off)
	}
	f.dataOff = dataOff
	return nil
}

// NumChunks is the number of chunks (index rows).
func (f *Footer) NumChunks() int { return f.n }

// Trailer returns the decoded trailer.
func (f *Footer) Trailer() Trailer { return f.trailer }

// Base is the base offset (TransitBase for a slot, SettledBase for a settled object).
func (f *Footer) Base() uint64 { return f.base }

// FooterOffset and FooterLength are the footer window.
func (f *Footer) FooterOffset() uint64 { return f.off }

// FooterLength is the footer window's length: directory and index.
func (f *Footer) FooterLength() uint64 { return uint64(len(f.dir) + len(f.idx)) }

// ObjectSize is the object's total size.
func (f *Footer) ObjectSize() uint64 { return f.size }

// Row returns index row i, decoded without allocation; i must be in
// [0, NumChunks()).
func (f *Footer) Row(i int) IndexRow { return decodeRow(f.idx[i*RowSize : (i+1)*RowSize]) }

// DataOffset is where chunk i starts, from the index alone (base + prefix
// sum of chunk bytes): the extent probe of docs/format.md#chunk-index-row.
func (f *Footer) DataOffset(i int) uint64 { return f.dataOff[i] }

// cmpRow compares row i's (stream, first record) with (stream, record).
func (f *Footer) cmpRow(i int, stream *StreamID, record uint64) int {
	r := f.idx[i*RowSize : i*RowSize+rowCountOff]
	if c := bytes.Compare(r[rowStreamOff:rowFirstRecordOff], stream[:]); c != 0 {
		return c
	}
	first := binary.LittleEndian.Uint64(r[rowFirstRecordOff:])
	switch {
	case first < record:
		return -1
	case first > record:
		return 1
	}
	return 0
}

// Find binary-searches the index for record of stream. It returns (i, true)
// when row i is stream's chunk whose [first, first+count) contains record.
// Otherwise it returns (i, false) where i is the first row whose
// (stream, first record) sorts after (stream, record): the stream's first
// chunk starting after record if there is one, else a row of a later stream,
// else NumChunks(). It allocates nothing.
func (f *Footer) Find(stream StreamID, record uint64) (int, bool) {
	lo, hi := 0, f.n // invariant: rows < lo sort ≤ key, rows ≥ hi sort > key
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if f.cmpRow(m, &stream, record) <= 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo > 0 {
		r := f.idx[(lo-1)*RowSize:]
		if bytes.Equal(r[rowStreamOff:rowFirstRecordOff], stream[:]) {
			first := binary.LittleEndian.Uint64(r[rowFirstRecordOff:])
			if record-first < uint64(binary.LittleEndian.Uint32(r[rowCountOff:])) {
				return lo - 1, true
			}
		}
	}
	return lo, false
}

// FindStream returns the rows [lo, hi) of stream (lo == hi when absent).
func (f *Footer) FindStream(stream StreamID) (lo, hi int) {
	return f.searchStream(&stream, false), f.searchStream(&stream, true)
}

// StreamAt returns row i's stream, without decoding the rest of the row;
// i must be in [0, NumChunks()).
func (f *Footer) StreamAt(i int) (s StreamID) {
	copy(s[:], f.rowStream(i))
	return s
}

// rowStream is row i's stream bytes.
func (f *Footer) rowStream(i int) []byte {
	return f.idx[i*RowSize+rowStreamOff : i*RowSize+rowFirstRecordOff]
}

// SearchStreamFrom returns the first row at or after from whose stream
// sorts at or after stream, where every row before from sorts before it.
// It gallops from from (rows from, from+1, from+2, from+4, ...) and then
// halves: walking a sorted list of streams through the index costs
// O(log gap) rows a stream, not a pass over every row.
func (f *Footer) SearchStreamFrom(from int, stream StreamID) int {
	lo, hi, step := from, from, 1
	for hi < f.n && bytes.Compare(f.rowStream(hi), stream[:]) < 0 {
		lo, hi, step = hi+1, from+step, step<<1
	}
	return f.searchStreamIn(&stream, false, lo, min(hi, f.n))
}

// searchStream returns the first row whose stream sorts at or after stream
// (upper: after stream).
func (f *Footer) searchStream(stream *StreamID, upper bool) int {
	return f.searchStreamIn(stream, upper, 0, f.n)
}

// searchStreamIn is searchStream over the rows [lo, hi), where the rows
// before lo sort before stream (upper: at or before) and row hi, if any,
// does not.
func (f *Footer) searchStreamIn(stream *StreamID, upper bool, lo, hi int) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c := bytes.Compare(f.rowStream(m), stream[:]); c < 0 || upper && c == 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// entryRange returns entry i's bytes as row i places them (rows are checked).
func (f *Footer) entryRange(i int, r IndexRow) []byte {
	p := r.EntryOffset - f.off
	return f.dir[p : p+uint64(r.EntryLength)]
}

func (f *Footer) checkEntryCRC(i int, r IndexRow, eb []byte) error {
	if c := CRC32C(eb); c != r.EntryCRC {
		return checksumErr(f.key, r.EntryOffset, fmt.Sprintf("entry[%d].crc", i), r.EntryCRC, c)
	}
	return nil
}

func (f *Footer) entryErr(i int, r IndexRow, field uint64, name, format string, args ...any) error {
	return corruptf(f.key, r.EntryOffset+field, fmt.Sprintf("entry[%d].%s", i, name), format, args...)
}

// checkEntry checks a CRC-verified entry against its row and docs/format.md#directory-entry.
func (f *Footer) checkEntry(i int, r IndexRow, eb []byte) (EntryView, error) {
	le := binary.LittleEndian
	n := le.Uint32(eb[entCountOff:])
	v := EntryView{b: eb, n: int(n)}
	switch {
	case !bytes.Equal(eb[entStreamOff:entFirstRecordOff], r.Stream[:]):
		return v, f.entryErr(i, r, entStreamOff, "stream", "stream %s ≠ row's %s", v.Stream(), r.Stream)
	case v.FirstRecord() != r.FirstRecord:
		return v, f.entryErr(i, r, entFirstRecordOff, "first_record", "first record %d ≠ row's %d", v.FirstRecord(), r.FirstRecord)
	case n != r.Count:
		return v, f.entryErr(i, r, entCountOff, "count", "record count %d ≠ row's %d", n, r.Count)
	case v.DataOffset() != f.dataOff[i]:
		return v, f.entryErr(i, r, entDataOffsetOff, "data_offset", "data offset %d, want %d (gap or overlap)", v.DataOffset(), f.dataOff[i])
	}
	// The row's entry length equals EntryLen(count) (checkRows), so the
	// tables below are in range.
	var sum uint64
	for j := 0; j < v.n; j++ {
		l := v.Length(j)
		if l == 0 {
			return v, f.entryErr(i, r, uint64(entLengthOff(j)), fmt.Sprintf("length[%d]", j), "stored-record length 0")
		}
		sum += uint64(l)
	}
	if sum != r.ChunkBytes {
		return v, f.entryErr(i, r, uint64(entLengthOff(0)), "lengths", "Σ lengths %d ≠ row's chunk bytes %d", sum, r.ChunkBytes)
	}
	be := uint64(entBatchEndOff(v.n))
	last := eb[len(eb)-1]
	if k := v.n & 7; k != 0 && last>>k != 0 {
		return v, f.entryErr(i, r, uint64(len(eb)-1), "batch_end", "unused batch-end bits set: 0x%02x", last)
	}
	if !v.IsBatchEnd(v.n - 1) {
		return v, f.entryErr(i, r, be, "batch_end", "the chunk's last record does not end a batch")
	}
	return v, nil
}

// EntryView decodes entry i in place: it verifies the entry CRC, then the
// entry's agreement with row i and every docs/format.md#directory-entry rule. It allocates
// nothing on success.
func (f *Footer) EntryView(i int) (EntryView, error) {
	r := f.Row(i)
	eb := f.entryRange(i, r)
	if err := f.checkEntryCRC(i, r, eb); err != nil {
		return EntryView{}, err
	}
	return f.checkEntry(i, r, eb)
}

// Entry decodes exactly one entry (the point-read level of docs/format.md#validation-and-errors: the
// index CRC was checked by OpenFooter, the entry CRC is checked here).
func (f *Footer) Entry(i int) (Entry, error) {
	v, err := f.EntryView(i)
	if err != nil {
		return Entry{}, err
	}
	return v.Entry(), nil
}

// VerifyDirectory checks the directory CRC and then every entry (CRC,
// agreement with its row, docs/format.md#directory-entry rules): the footer + trailer level.
func (f *Footer) VerifyDirectory() error {
	if err := f.checkDirCRC(); err != nil {
		return err
	}
	for i := 0; i < f.n; i++ {
		if _, err := f.EntryView(i); err != nil {
			return err
		}
	}
	return nil
}

// Entries decodes every entry, each verified by its entry CRC. It does not
// check the directory CRC (VerifyDirectory does).
func (f *Footer) Entries() ([]Entry, error) {
	out := make([]Entry, f.n)
	for i := range out {
		e, err := f.Entry(i)
		if err != nil {
			return nil, err
		}
		out[i] = e
	}
	return out, nil
}
