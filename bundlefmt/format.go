package bundlefmt

// The vocabulary of format v1 that every other file uses: its sizes and
// limits, the kinds of object, the stream ID, and the error classes of
// decoders and encoders.

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Sizes and constants of format v1 (docs/format.md#object-layout).
const (
	// Version is the only format version this build reads and writes, for both
	// the slot envelope and the trailer.
	Version = 1

	// EnvelopeSize, TrailerSize, RowSize and EntryFixed are in
	// conventions.go, with every field's offset.

	// TransitBase and SettledBase are the base offsets of chunk 0.
	TransitBase = EnvelopeSize
	SettledBase = 0

	// MaxRecordCount is the largest record count of one chunk: the one whose
	// entry length (40 + 12n + ⌈n/8⌉) still fits a u32.
	MaxRecordCount = 354_224_103

	// MaxNumber bounds every record number, epoch and seq (Postgres bigint).
	MaxNumber = 1<<63 - 1
	// MaxRevision bounds a settled object's revision (Postgres integer).
	MaxRevision = 1<<31 - 1

	// MaxFlightSize is the largest transit bundle: a flight is one PUT, and S3
	// takes at most 5 GiB in one PUT. docs/format.md states this as a fact of the
	// store; we read it strictly and treat a larger flight as corrupt.
	MaxFlightSize = 5 << 30

	// MinFlightSize and MinSettledSize are the smallest valid objects
	// (one chunk of one empty record).
	MinFlightSize  = EnvelopeSize + recFlagsLen + minEntryLen + RowSize + TrailerSize
	MinSettledSize = recFlagsLen + minEntryLen + RowSize + TrailerSize

	envelopeMagic = "CHNE"
	trailerMagic  = "CBDL"

	kindByteFlight = 1
	kindBytePoison = 2
)

// Kind is what an object is. The kind of an object comes from its key; a bare
// file may be sniffed (docs/format.md#object-layout).
type Kind uint8

// The kinds of object.
const (
	KindUnknown Kind = iota // sniff: CHNE means a slot, a flag byte ≤ 0x0F a settled object
	KindFlight              // transit bundle in a chain slot
	KindPoison              // poison slot: an envelope alone
	KindSettled             // settled object
	KindSlot                // expectation only: a chain slot of either kind (flight or poison)
)

func (k Kind) String() string {
	switch k {
	case KindFlight:
		return "flight"
	case KindPoison:
		return "poison"
	case KindSettled:
		return "settled"
	case KindSlot:
		return "slot"
	default:
		return "unknown"
	}
}

// Base returns the base offset of chunk 0 for an object of this kind.
func (k Kind) Base() uint64 {
	if k == KindSettled {
		return SettledBase
	}
	return TransitBase
}

// StreamID is a stream's 16 opaque bytes (a Postgres uuid): the one stream
// identity of the auditor, in the format, the catalog (catalog.StreamID is
// this type) and every command. Stream IDs sort in unsigned byte order.
//
// It has one printed form, String's uuid form, in logs, status, errors,
// findings and inspect output; only keys spell it as 32 hex digits
// (SettledKey), because that is the key layout of docs/format.md#keys.
type StreamID [streamIDLen]byte

// String returns the uuid form Postgres prints (8-4-4-4-12, lowercase hex),
// so an ID reads the same in a log line and in psql.
func (s StreamID) String() string {
	var b [36]byte
	hex.Encode(b[0:8], s[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], s[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], s[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], s[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], s[10:16])
	return string(b[:])
}

// Compare returns -1, 0 or +1 as s sorts before, equal to or after o (memcmp).
func (s StreamID) Compare(o StreamID) int { return bytes.Compare(s[:], o[:]) }

// MarshalText encodes the ID as String does (JSON documents, text logs).
func (s StreamID) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// LogValue logs the ID as String does, whatever the slog handler.
func (s StreamID) LogValue() slog.Value { return slog.StringValue(s.String()) }

// UnmarshalText accepts what ParseStreamID accepts.
func (s *StreamID) UnmarshalText(b []byte) error {
	id, err := ParseStreamID(string(b))
	if err != nil {
		return err
	}
	*s = id
	return nil
}

// ParseStreamID accepts 32 hex digits or the uuid form with hyphens
// (8-4-4-4-12), in either case: it is meant for operator input. Key parsers
// are stricter (lowercase, no hyphens).
func ParseStreamID(s string) (StreamID, error) {
	var id StreamID
	h := s
	if len(s) == 36 {
		if s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
			return id, fmt.Errorf("stream id %q: want 32 hex digits or a uuid", s)
		}
		h = s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	}
	if len(h) != 32 {
		return id, fmt.Errorf("stream id %q: want 32 hex digits or a uuid", s)
	}
	if _, err := hex.Decode(id[:], []byte(h)); err != nil {
		return StreamID{}, fmt.Errorf("stream id %q: %w", s, err)
	}
	return id, nil
}

// The three error classes of docs/format.md#validation-and-errors. Every error returned by a
// decoder or validator of this package is a *FormatError wrapping one of them.
// errors.Is(err, ErrCorrupt) holds for checksum mismatches too.
var (
	ErrCorrupt            error = &classError{msg: "corrupt"}
	ErrChecksum           error = &classError{msg: "checksum mismatch", parent: ErrCorrupt}
	ErrUnsupportedVersion error = &classError{msg: "unsupported version"}
)

type classError struct {
	msg    string
	parent error
}

func (e *classError) Error() string { return e.msg }
func (e *classError) Unwrap() error { return e.parent }

// FormatError says what failed where: the object key, the object-absolute byte
// offset of the failing field (of the covered region for a checksum), and the
// field's name. Err is ErrCorrupt, ErrChecksum or ErrUnsupportedVersion.
type FormatError struct {
	Key    string
	Offset int64
	Field  string // e.g. "envelope.crc", "row[3].first_record", "chunk[2].record[7].flags"
	Detail string // what was found and what was expected
	// Version is the version found, for ErrUnsupportedVersion.
	Version int64
	// V1CRCMatches is set for an unsupported envelope version only: whether the
	// envelope CRC, checked by the v1 rule on the bytes as found, matched. True
	// means the envelope is intact and was written with that version (a deploy
	// problem); false means the version field itself may be damaged.
	V1CRCMatches *bool
	Err          error
}

func (e *FormatError) Error() string {
	var b strings.Builder
	b.WriteString("bundlefmt: ")
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	fmt.Fprintf(&b, "%s at offset %d: %v", e.Field, e.Offset, e.Err)
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.V1CRCMatches != nil {
		if *e.V1CRCMatches {
			b.WriteString(" (the v1 envelope crc matches: intact bytes of another version)")
		} else {
			b.WriteString(" (the v1 envelope crc does not match: the version field may be damaged)")
		}
	}
	return b.String()
}

func (e *FormatError) Unwrap() error { return e.Err }

// The class names of the three error classes: what a quarantine row, a
// verify finding and `auditor inspect --json` call them. ClassOf is the one
// mapping from an error to its name.
const (
	ClassCorrupt     = "corrupt"
	ClassChecksum    = "checksum"
	ClassUnsupported = "unsupported_version"
)

// ClassOf names the class of err: ClassUnsupported, ClassChecksum (before
// corrupt, since a checksum mismatch is corrupt too), ClassCorrupt, or ""
// when err is none of them (nil included).
func ClassOf(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrUnsupportedVersion):
		return ClassUnsupported
	case errors.Is(err, ErrChecksum):
		return ClassChecksum
	case errors.Is(err, ErrCorrupt):
		return ClassCorrupt
	}
	return ""
}

func corruptf(key string, off uint64, field, format string, args ...any) error {
	return &FormatError{Key: key, Offset: int64(off), Field: field, Detail: fmt.Sprintf(format, args...), Err: ErrCorrupt}
}

func checksumErr(key string, off uint64, field string, stored, computed uint32) error {
	return &FormatError{Key: key, Offset: int64(off), Field: field,
		Detail: fmt.Sprintf("stored 0x%08x, computed 0x%08x", stored, computed), Err: ErrChecksum}
}

func versionErr(key string, off uint64, field string, v uint64, v1crc *bool) error {
	return &FormatError{Key: key, Offset: int64(off), Field: field, Version: int64(v),
		Detail: fmt.Sprintf("version %d, this build reads %d", v, Version), V1CRCMatches: v1crc, Err: ErrUnsupportedVersion}
}

// ErrInvalid is returned by encoders and builders for input that cannot be
// encoded (it is about the caller's values, not about stored bytes, so it is
// none of the three decoding classes).
var ErrInvalid = errors.New("bundlefmt: invalid input")

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...)
}
