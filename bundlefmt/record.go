package bundlefmt

// Stored records (docs/format.md#stored-record): a record's content
// (Record), its stored form written (AppendRecord), checked (ParseRecord)
// and decoded (DecodeRecord).

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Stored-record flag bits (docs/format.md#stored-record).
const (
	flagHasHeaders = 0x01
	flagWidthMask  = 0x06
	flagTombstone  = 0x08
	flagReserved   = 0xf0

	// TombstoneByte is the whole stored form of a tombstone.
	TombstoneByte = flagTombstone
)

// Header is one record header. Names and values are opaque bytes; either may
// be empty; duplicates are allowed and order is kept.
type Header struct{ Name, Value []byte }

// Record is one record's content. A tombstone has no headers and no body.
type Record struct {
	Headers   []Header
	Body      []byte
	Tombstone bool
}

// ContentBytes is what every cap and budget meters: body length plus every
// header name and value length. Flags and header table are framing.
func (r Record) ContentBytes() int64 {
	n := int64(len(r.Body))
	for _, h := range r.Headers {
		n += int64(len(h.Name)) + int64(len(h.Value))
	}
	return n
}

// widthCode returns the canonical width code W for a largest value maxv.
func widthCode(maxv uint64) byte {
	switch {
	case maxv <= math.MaxUint8:
		return 0
	case maxv <= math.MaxUint16:
		return 1
	default:
		return 2
	}
}

// StoredLen returns the length AppendRecord would produce for r.
func (r Record) StoredLen() (int, error) {
	if r.Tombstone {
		if len(r.Headers) != 0 || len(r.Body) != 0 {
			return 0, invalidf("a tombstone has no headers and no body")
		}
		return recFlagsLen, nil
	}
	if len(r.Headers) == 0 {
		return recFlagsLen + len(r.Body), nil
	}
	maxv := uint64(len(r.Headers))
	n := recFlagsLen + len(r.Body)
	for _, h := range r.Headers {
		maxv = max(maxv, uint64(len(h.Name)), uint64(len(h.Value)))
		n += len(h.Name) + len(h.Value)
	}
	if maxv > math.MaxUint32 {
		return 0, invalidf("header count or length %d does not fit u32", maxv)
	}
	w := 1 << widthCode(maxv)
	return n + w*(1+2*len(r.Headers)), nil // the count, then two lengths per header
}

// AppendRecord appends r's stored form to dst, with the canonical width code.
// A tombstone is the single byte 0x08.
func AppendRecord(dst []byte, r Record) ([]byte, error) {
	if r.Tombstone {
		if len(r.Headers) != 0 || len(r.Body) != 0 {
			return dst, invalidf("a tombstone has no headers and no body")
		}
		return append(dst, TombstoneByte), nil
	}
	if len(r.Headers) == 0 {
		dst = append(dst, 0)
		return append(dst, r.Body...), nil
	}
	maxv := uint64(len(r.Headers))
	for _, h := range r.Headers {
		maxv = max(maxv, uint64(len(h.Name)), uint64(len(h.Value)))
	}
	if maxv > math.MaxUint32 {
		return dst, invalidf("header count or length %d does not fit u32", maxv)
	}
	w := widthCode(maxv)
	dst = append(dst, flagHasHeaders|w<<1)
	dst = appendWidth(dst, w, uint64(len(r.Headers)))
	for _, h := range r.Headers {
		dst = appendWidth(dst, w, uint64(len(h.Name)))
		dst = appendWidth(dst, w, uint64(len(h.Value)))
	}
	for _, h := range r.Headers {
		dst = append(dst, h.Name...)
		dst = append(dst, h.Value...)
	}
	return append(dst, r.Body...), nil
}

func appendWidth(dst []byte, w byte, v uint64) []byte {
	switch w {
	case 0:
		return append(dst, byte(v))
	case 1:
		return binary.LittleEndian.AppendUint16(dst, uint16(v))
	default:
		return binary.LittleEndian.AppendUint32(dst, uint32(v))
	}
}

func readWidth(b []byte, width int) uint64 {
	switch width {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	default:
		return uint64(binary.LittleEndian.Uint32(b))
	}
}

// RecordInfo describes one stored record without copying it.
type RecordInfo struct {
	Tombstone    bool
	Headers      int   // header count
	Width        int   // header-table field width in bytes (1, 2 or 4)
	BodyOffset   int   // offset of the body within the stored record
	ContentBytes int64 // body + Σ (name + value) lengths
}

// ParseRecord checks one stored record (exactly its directory-framed bytes)
// against every rule of docs/format.md#stored-record and describes it, without
// allocating. Error offsets are relative to the start of b. Tombstones are
// accepted; a transit-bundle validator rejects them separately.
func ParseRecord(b []byte) (RecordInfo, error) {
	info, fe := parseRecord(b, true)
	if fe != nil {
		return info, fe
	}
	return info, nil
}

// parseRecord returns a *FormatError (not error) so that the success path
// allocates nothing; offsets are relative to b and fields start "record.".
func parseRecord(b []byte, allowTombstone bool) (RecordInfo, *FormatError) {
	var info RecordInfo
	if len(b) == 0 {
		return info, recFault(0, "record.length", "stored record of length 0")
	}
	f := b[recFlagsOff]
	if f&flagReserved != 0 {
		return info, recFault(recFlagsOff, "record.flags", fmt.Sprintf("reserved bits set in flags 0x%02x", f))
	}
	if f&flagTombstone != 0 {
		if f != TombstoneByte {
			return info, recFault(recFlagsOff, "record.flags", fmt.Sprintf("tombstone flags 0x%02x, want exactly 0x08", f))
		}
		if len(b) != recFlagsLen {
			return info, recFault(0, "record.length", fmt.Sprintf("tombstone of stored length %d, want 1", len(b)))
		}
		if !allowTombstone {
			return info, recFault(recFlagsOff, "record.flags", "tombstone in a transit bundle")
		}
		info.Tombstone = true
		info.BodyOffset = recPlainBodyOff
		return info, nil
	}
	w := int(f&flagWidthMask) >> 1
	if f&flagHasHeaders == 0 {
		if w != 0 {
			return info, recFault(recFlagsOff, "record.flags", fmt.Sprintf("width code %d without headers", w))
		}
		info.Width = 1
		info.BodyOffset = recPlainBodyOff
		info.ContentBytes = int64(len(b) - recPlainBodyOff)
		return info, nil
	}
	if w == 3 {
		return info, recFault(recFlagsOff, "record.flags", "width code 3")
	}
	width := 1 << w
	rest := uint64(len(b) - recHeaderCountOff)
	if rest < uint64(width) {
		return info, recFault(recHeaderCountOff, "record.header_count", "header count past the end of the record")
	}
	count := readWidth(b[recHeaderCountOff:], width)
	if count == 0 {
		return info, recFault(recHeaderCountOff, "record.header_count", "has-headers with a header count of 0")
	}
	// count ≤ rest bounds the product below (no overflow, no big loop).
	if count > rest || 2*count*uint64(width) > rest-uint64(width) {
		return info, recFault(recTableOff(width), "record.header_lengths", fmt.Sprintf("%d headers do not fit a record of %d bytes", count, len(b)))
	}
	table := recTableOff(width)
	hdr := table + 2*int(count)*width
	maxv := count
	var sum uint64
	for p := table; p < hdr; p += width {
		l := readWidth(b[p:], width)
		sum += l
		maxv = max(maxv, l)
	}
	if sum > uint64(len(b)-hdr) {
		return info, recFault(table, "record.header_lengths", fmt.Sprintf("header bytes (%d) run past the end of the record", sum))
	}
	if want := int(widthCode(maxv)); w != want {
		return info, recFault(recFlagsOff, "record.flags", fmt.Sprintf("width code %d is not canonical (want %d)", w, want))
	}
	info.Headers = int(count)
	info.Width = width
	info.BodyOffset = hdr + int(sum)
	info.ContentBytes = int64(sum) + int64(len(b)-info.BodyOffset)
	return info, nil
}

func recFault(off int, field, detail string) *FormatError {
	return &FormatError{Offset: int64(off), Field: field, Detail: detail, Err: ErrCorrupt}
}

// DecodeRecord decodes exactly one stored record (b is framed by the
// directory). Names, values and body alias b; only the header slice is
// allocated, bounded by len(b).
func DecodeRecord(b []byte) (Record, error) {
	info, fe := parseRecord(b, true)
	if fe != nil {
		return Record{}, fe
	}
	if info.Tombstone {
		return Record{Tombstone: true}, nil
	}
	r := Record{Body: b[info.BodyOffset:len(b):len(b)]}
	if info.Headers == 0 {
		return r, nil
	}
	r.Headers = make([]Header, info.Headers)
	w := info.Width
	p := recTableOff(w)
	q := p + 2*info.Headers*w
	for i := range r.Headers {
		nl := int(readWidth(b[p:], w))
		vl := int(readWidth(b[p+w:], w))
		p += 2 * w
		r.Headers[i].Name = b[q : q+nl : q+nl]
		q += nl
		r.Headers[i].Value = b[q : q+vl : q+vl]
		q += vl
	}
	return r, nil
}
