package bundlefmt

import (
	"encoding/binary"
	"math"
)

// appendEnvelope appends a slot envelope (docs/format.md#slot-envelope).
func appendEnvelope(dst []byte, kind byte, epoch, seq, nonce, size, footerOff, footerLen uint64) []byte {
	dst, b := extend(dst, EnvelopeSize)
	le := binary.LittleEndian
	copy(b[envMagicOff:], envelopeMagic)
	le.PutUint16(b[envVersionOff:], Version)
	b[envKindOff] = kind
	b[envReservedOff] = 0
	le.PutUint64(b[envEpochOff:], epoch)
	le.PutUint64(b[envSeqOff:], seq)
	le.PutUint64(b[envNonceOff:], nonce)
	le.PutUint64(b[envObjectSizeOff:], size)
	le.PutUint64(b[envFooterOffsetOff:], footerOff)
	le.PutUint64(b[envFooterLengthOff:], footerLen)
	le.PutUint32(b[envCRCOff:], CRC32C(b[:envCRCOff]))
	return dst
}

// EncodePoison returns the EnvelopeSize-byte poison slot for the slot (epoch, seq),
// with the fencing writer's nonce. epoch must be in [1, 2^63-1] and seq in
// [0, 2^63-1], as for every slot key; other values give an envelope that
// DecodeEnvelope rejects.
func EncodePoison(epoch, seq, nonce uint64) []byte {
	return appendEnvelope(make([]byte, 0, EnvelopeSize), kindBytePoison, epoch, seq, nonce, EnvelopeSize, 0, 0)
}

func checkSlotNumbers(epoch, seq uint64) error {
	if epoch == 0 || epoch > MaxNumber {
		return invalidf("slot epoch %d outside [1, 2^63-1]", epoch)
	}
	if seq > MaxNumber {
		return invalidf("seq %d exceeds 2^63-1", seq)
	}
	return nil
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

const copyPiece = 64 << 10

// copyChunks appends each chunk's bytes after checking them: the length
// against Σ lengths, the DataCRC against the bytes, and every stored record
// against docs/format.md#stored-record, so an encoder never writes what the decoder rejects.
func copyChunks(dst []byte, chunks []Chunk, transit bool) ([]byte, error) {
	for i := range chunks {
		c := &chunks[i]
		if uint64(len(c.Data)) != c.Entry.ChunkBytes() {
			return dst, invalidf("chunk %d: %d data bytes, Σ lengths %d", i, len(c.Data), c.Entry.ChunkBytes())
		}
		// Copy and check in cache-sized pieces, so the CRC reads bytes the
		// copy just wrote.
		var crc uint32
		for p := 0; p < len(c.Data); p += copyPiece {
			q := min(p+copyPiece, len(c.Data))
			dst = append(dst, c.Data[p:q]...)
			crc = UpdateCRC32C(crc, dst[len(dst)-(q-p):])
		}
		if crc != c.Entry.DataCRC {
			return dst, invalidf("chunk %d: DataCRC 0x%08x, bytes have 0x%08x", i, c.Entry.DataCRC, crc)
		}
		p := 0
		for j, ln := range c.Entry.Lengths {
			if c.Data[p+recFlagsOff] != 0 { // flags 0: no headers, always valid
				if _, fe := parseRecord(c.Data[p:p+int(ln)], !transit); fe != nil {
					return dst, invalidf("chunk %d record %d: %s: %s", i, c.Entry.FirstRecord+uint64(j), fe.Field, fe.Detail)
				}
			}
			p += int(ln)
		}
	}
	return dst, nil
}

func chunkEntries(chunks []Chunk) []Entry {
	entries := make([]Entry, len(chunks))
	for i := range chunks {
		entries[i] = chunks[i].Entry
	}
	return entries
}

// EncodeFlight encodes a transit bundle: envelope, chunks back to back from
// TransitBase, footer, trailer. It sorts nothing: chunks must be in strictly
// ascending stream order (at most one per stream). Each chunk's DataCRC must
// match its bytes (it is checked while copying); DataOffset is ignored and
// assigned.
func EncodeFlight(epoch, seq, nonce uint64, chunks []Chunk) ([]byte, error) {
	return AppendFlight(nil, epoch, seq, nonce, chunks)
}

// AppendFlight is EncodeFlight appending to dst, so a writer can reuse its
// buffer. On error dst is returned unchanged in length.
func AppendFlight(dst []byte, epoch, seq, nonce uint64, chunks []Chunk) ([]byte, error) {
	if err := checkSlotNumbers(epoch, seq); err != nil {
		return dst, err
	}
	entries := chunkEntries(chunks)
	l, err := planLayout(entries, TransitBase)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	out := grow(dst, l.objectSize())
	out = appendEnvelope(out, kindByteFlight, epoch, seq, nonce, l.objectSize(), l.dirOffset, l.footerLen())
	if out, err = copyChunks(out, chunks, true); err != nil {
		return dst[:start], err
	}
	return appendFooter(out, entries, l), nil
}

// EncodeSettled encodes a whole settled object (base offset 0): one stream,
// contiguous records, tombstones allowed. Each chunk's DataCRC must match its
// bytes; DataOffset is ignored and assigned.
func EncodeSettled(chunks []Chunk) ([]byte, error) {
	return AppendSettled(nil, chunks)
}

// AppendSettled is EncodeSettled appending to dst.
func AppendSettled(dst []byte, chunks []Chunk) ([]byte, error) {
	entries := chunkEntries(chunks)
	l, err := planLayout(entries, SettledBase)
	if err != nil {
		return dst, err
	}
	start := len(dst)
	out := grow(dst, l.objectSize())
	if out, err = copyChunks(out, chunks, false); err != nil {
		return dst[:start], err
	}
	return appendFooter(out, entries, l), nil
}

// grow returns dst with room for n more bytes.
func grow(dst []byte, n uint64) []byte {
	if uint64(cap(dst)-len(dst)) >= n {
		return dst
	}
	return append(make([]byte, 0, uint64(len(dst))+n), dst...)
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
