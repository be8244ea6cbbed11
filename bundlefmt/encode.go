package bundlefmt

// Encoding whole objects (docs/format.md#object-layout): a transit bundle
// (EncodeFlight), a poison slot (EncodePoison) and a settled object
// (EncodeSettled), from chunks whose bytes are checked as they are copied.
// The footer they end with is written by entry.go's appendFooter.

import (
	"encoding/binary"
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
