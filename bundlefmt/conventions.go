package bundlefmt

// The conventions every structure of format v1 is built on
// (docs/format.md#conventions), in one place: the byte layout of each
// structure (every field's offset and width), the CRC-32C that checks
// those bytes, and the keys that name the objects in the store.

import (
	"encoding/hex"
	"fmt"
	"hash"
	"hash/crc32"
	"strconv"
	"strings"
)

// Byte layout: the layouts of format v1, each named once. Every encoder,
// decoder and error offset of this package takes its field offsets and
// sizes from here. An offset is from the start of its structure (the envelope starts at
// object offset 0) and is the previous field's offset plus that field's
// width, so a layout has no gaps by construction; the value after each
// constant is the "off" column of docs/format.md's table for the structure
// (TestLayoutMatchesDocs checks the tables against these constants).

// Field widths.
const (
	magicLen    = 4  // "CHNE", "CBDL"
	streamIDLen = 16 // a StreamID
	u8Len       = 1
	u16Len      = 2
	u32Len      = 4 // also every CRC-32C
	u64Len      = 8 // also an i64 timestamp
)

// Slot envelope (docs/format.md#slot-envelope), at offset 0 of every chain slot.
const (
	envMagicOff        = 0                           // "CHNE"
	envVersionOff      = envMagicOff + magicLen      // 4: u16
	envKindOff         = envVersionOff + u16Len      // 6: u8, kindByteFlight or kindBytePoison
	envReservedOff     = envKindOff + u8Len          // 7: u8, 0
	envEpochOff        = envReservedOff + u8Len      // 8: u64 slot epoch
	envSeqOff          = envEpochOff + u64Len        // 16: u64
	envNonceOff        = envSeqOff + u64Len          // 24: u64
	envObjectSizeOff   = envNonceOff + u64Len        // 32: u64
	envFooterOffsetOff = envObjectSizeOff + u64Len   // 40: u64
	envFooterLengthOff = envFooterOffsetOff + u64Len // 48: u64
	envCRCOff          = envFooterLengthOff + u64Len // 56: u32, CRC-32C of [0, envCRCOff)

	// EnvelopeSize is the slot envelope's length (60), and a poison slot's.
	EnvelopeSize = envCRCOff + u32Len
)

// Stored record (docs/format.md#stored-record): a flags byte, then either
// the body (no headers) or the header count, the header table of w-byte
// fields, the header bytes and the body.
const (
	recFlagsOff       = 0                         // u8
	recFlagsLen       = u8Len                     // a tombstone is its flags byte alone
	recHeaderCountOff = recFlagsOff + recFlagsLen // 1: w bytes, with has-headers
	recPlainBodyOff   = recFlagsOff + recFlagsLen // 1: the body, without has-headers
)

// recTableOff is where the header table (name length, value length per
// header) of a record with w-byte fields starts.
func recTableOff(w int) int { return recHeaderCountOff + w }

// Directory entry (docs/format.md#directory-entry): a fixed part, then the
// three per-record tables of an entry of n records.
const (
	entStreamOff      = 0                              // 16 bytes
	entFirstRecordOff = entStreamOff + streamIDLen     // 16: u64
	entCountOff       = entFirstRecordOff + u64Len     // 24: u32 n
	entDataOffsetOff  = entCountOff + u32Len           // 28: u64, object-absolute
	entDataCRCOff     = entDataOffsetOff + u64Len      // 36: u32
	EntryFixed        = entDataCRCOff + u32Len         // 40: entry bytes before the per-record tables
	entLengthLen      = u32Len                         // one stored-record length
	entTimestampLen   = u64Len                         // one i64 timestamp
	entRecordLen      = entLengthLen + entTimestampLen // 12: table bytes per record, batch-end bit aside

	// minEntryLen is EntryLen(1), the shortest entry (53): one record's
	// table bytes and one bitmap byte.
	minEntryLen = EntryFixed + entRecordLen + 1
)

// entLengthOff is where record i's stored length starts (40 + 4i).
func entLengthOff(i int) int { return EntryFixed + entLengthLen*i }

// entTimestampOff is where record i's timestamp starts in an entry of n
// records (40 + 4n + 8i).
func entTimestampOff(n, i int) int { return EntryFixed + entLengthLen*n + entTimestampLen*i }

// entBatchEndOff is where the batch-end bitmap of an entry of n records
// starts (40 + 12n).
func entBatchEndOff(n int) int { return EntryFixed + entRecordLen*n }

// batchEndLen is the batch-end bitmap's length for n records, ⌈n/8⌉.
func batchEndLen(n int) int { return (n + 7) / 8 }

// Chunk index row (docs/format.md#chunk-index-row).
const (
	rowStreamOff      = 0                          // 16 bytes
	rowFirstRecordOff = rowStreamOff + streamIDLen // 16: u64
	rowCountOff       = rowFirstRecordOff + u64Len // 24: u32
	rowChunkBytesOff  = rowCountOff + u32Len       // 28: u64
	rowEntryOffsetOff = rowChunkBytesOff + u64Len  // 36: u64, object-absolute
	rowEntryLengthOff = rowEntryOffsetOff + u64Len // 44: u32
	rowEntryCRCOff    = rowEntryLengthOff + u32Len // 48: u32
	RowSize           = rowEntryCRCOff + u32Len    // 52: one chunk index row
)

// Trailer (docs/format.md#trailer), the last TrailerSize bytes of every bundle.
const (
	trMagicOff       = 0                         // "CBDL"
	trVersionOff     = trMagicOff + magicLen     // 4: u32
	trDirOffsetOff   = trVersionOff + u32Len     // 8: u64
	trDirLengthOff   = trDirOffsetOff + u64Len   // 16: u64
	trDirCRCOff      = trDirLengthOff + u64Len   // 24: u32
	trIndexLengthOff = trDirCRCOff + u32Len      // 28: u64
	trIndexCRCOff    = trIndexLengthOff + u64Len // 36: u32
	TrailerSize      = trIndexCRCOff + u32Len    // 40
)

// extend appends n zero bytes to dst and returns the result and those n
// bytes, for an encoder to fill at the offsets above.
func extend(dst []byte, n int) (out, field []byte) {
	out = append(dst, make([]byte, n)...) //nolint:gocritic // appendAssign: out is dst extended, returned beside its new bytes
	return out, out[len(dst):]
}

// CRC-32C: the one CRC-32C (Castagnoli) of the auditor, the format's
// checksum: checksums, streaming updates and the combine that gives the CRC
// of A‖B from the CRCs of A and B and the length of B, without the bytes
// (docs/format.md#crc-32c-combine). Stores import it from here to check
// what they assemble.

// castagnoli is the standard library's CRC-32C table (immutable once made);
// crc32.Update with it uses SSE4.2 (amd64) or the CRC instructions (arm64).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC-32C of b.
func CRC32C(b []byte) uint32 { return crc32.Update(0, castagnoli, b) }

// UpdateCRC32C extends crc with b.
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// NewCRC32C returns a streaming CRC-32C hash.
func NewCRC32C() hash.Hash32 { return crc32.New(castagnoli) }

// castagnoliReversed is the Castagnoli polynomial in reflected bit order.
const castagnoliReversed = 0x82f63b78

// x2nTable[k] is x^(2^k) modulo the polynomial, reflected. It is built by a
// pure function, not by init.
var x2nTable = makeX2nTable()

func makeX2nTable() [32]uint32 {
	var t [32]uint32
	p := uint32(1) << 30 // x^1
	t[0] = p
	for n := 1; n < 32; n++ {
		p = multModP(p, p)
		t[n] = p
	}
	return t
}

// multModP returns a(x)·b(x) modulo p(x), reflected (zlib's multmodp).
func multModP(a, b uint32) uint32 {
	var p uint32
	for m := uint32(1) << 31; m != 0; m >>= 1 {
		if a&m != 0 {
			p ^= b
			if a&(m-1) == 0 {
				break
			}
		}
		if b&1 != 0 {
			b = b>>1 ^ castagnoliReversed
		} else {
			b >>= 1
		}
	}
	return p
}

// x2nModP returns x^(n·2^k) modulo p(x) (zlib's x2nmodp).
func x2nModP(n uint64, k uint) uint32 {
	p := uint32(1) << 31 // x^0
	for n != 0 {
		if n&1 != 0 {
			p = multModP(x2nTable[k&31], p)
		}
		n >>= 1
		k++
	}
	return p
}

// CombineCRC32C returns the CRC-32C of A‖B given crc1 = CRC32C(A),
// crc2 = CRC32C(B) and len2 = len(B), without the bytes: zlib's
// crc32_combine with the Castagnoli polynomial. A negative len2 is treated
// as 0.
func CombineCRC32C(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1 ^ crc2
	}
	return multModP(x2nModP(uint64(len2), 3), crc1) ^ crc2
}

// Keys: the keys of docs/format.md#keys, built and parsed here without the
// store's prefix (objstore prepends its configured prefix).

// ValidStar reports whether s fully matches [a-z0-9][a-z0-9-]{0,62}.
func ValidStar(s string) bool { return validName(s, "-") }

// ValidBucket reports whether s fully matches [a-z0-9][a-z0-9._-]{0,62}.
func ValidBucket(s string) bool { return validName(s, "._-") }

func validName(s, extra string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			continue
		}
		if i == 0 || strings.IndexByte(extra, c) < 0 {
			return false
		}
	}
	return true
}

// SlotKey is the key of a chain slot: stars/<star>/chain/<epoch:20>/<seq:20>.
// It only formats: star must satisfy ValidStar, epoch be in [1, 2^63-1] and
// seq in [0, 2^63-1] for the key to parse back.
func SlotKey(star string, epoch, seq uint64) string {
	return fmt.Sprintf("stars/%s/chain/%020d/%020d", star, epoch, seq)
}

// MarkKey is the key of a star's n-th marker object, and MarkConfirmKey
// that of its confirmation: stars/<star>/auditor/marks/<n:20> and the same
// with ".ok" (docs/format.md#marker-objects). Auditor-owned: only the
// auditor writes and reads them, in the standard bucket.
func MarkKey(star string, n uint64) string { return MarkPrefix(star) + fmt.Sprintf("%020d", n) }

// MarkConfirmKey is the key that confirms marker n of star (see MarkKey).
func MarkConfirmKey(star string, n uint64) string { return MarkKey(star, n) + markConfirmSuffix }

const markConfirmSuffix = ".ok"

// MarkPrefix is the prefix of every marker key of star.
func MarkPrefix(star string) string { return "stars/" + star + "/auditor/marks/" }

// ParseMarkKey parses a marker or confirmation key of star (no store
// prefix): its number and whether it is a confirmation.
func ParseMarkKey(star, key string) (n uint64, confirm bool, err error) {
	rest, ok := strings.CutPrefix(key, MarkPrefix(star))
	if !ok {
		return 0, false, fmt.Errorf("marker key %q: not under %s", key, MarkPrefix(star))
	}
	rest, confirm = strings.CutSuffix(rest, markConfirmSuffix)
	n, ok = parsePadded(rest)
	if !ok || n == 0 {
		return 0, false, fmt.Errorf("marker key %q: number %q is not 20 digits in [1, 2^63-1]", key, rest)
	}
	return n, confirm, nil
}

// SettledKey is the key of a settled object:
// buckets/<bucket>/streams/<stream-hex>/<stream-epoch:20>/<first-record:20>~<revision>.
// It only formats; see ParseSettledKey for the ranges that parse back.
func SettledKey(bucket string, stream StreamID, streamEpoch, firstRecord uint64, revision uint32) string {
	// 32 hex digits, not the uuid form of StreamID.String: the key layout
	return fmt.Sprintf("buckets/%s/streams/%x/%020d/%020d~%d", bucket, stream[:], streamEpoch, firstRecord, revision)
}

// SettledKeyParts are the coordinates of a settled key.
type SettledKeyParts struct {
	Bucket      string
	Stream      StreamID
	StreamEpoch uint64
	FirstRecord uint64
	Revision    uint32
}

// Key returns the canonical key of p.
func (p SettledKeyParts) Key() string {
	return SettledKey(p.Bucket, p.Stream, p.StreamEpoch, p.FirstRecord, p.Revision)
}

// parsePadded parses exactly 20 ASCII digits as a number ≤ 2^63-1.
func parsePadded(s string) (uint64, bool) {
	if len(s) != 20 {
		return 0, false
	}
	var v uint64
	for i := 0; i < 20; i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (MaxNumber-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// ParseSlotKey parses a canonical slot key (no prefix). The epoch must be
// ≥ 1 (an envelope's epoch is) and both numbers ≤ 2^63-1.
func ParseSlotKey(key string) (star string, epoch, seq uint64, err error) {
	parts := strings.Split(key, "/")
	if len(parts) != 5 || parts[0] != "stars" || parts[2] != "chain" {
		return "", 0, 0, fmt.Errorf("slot key %q: want stars/<star>/chain/<epoch:20>/<seq:20>", key)
	}
	if !ValidStar(parts[1]) {
		return "", 0, 0, fmt.Errorf("slot key %q: invalid star name %q", key, parts[1])
	}
	epoch, ok := parsePadded(parts[3])
	if !ok || epoch == 0 {
		return "", 0, 0, fmt.Errorf("slot key %q: epoch %q is not 20 digits in [1, 2^63-1]", key, parts[3])
	}
	seq, ok = parsePadded(parts[4])
	if !ok {
		return "", 0, 0, fmt.Errorf("slot key %q: seq %q is not 20 digits in [0, 2^63-1]", key, parts[4])
	}
	return parts[1], epoch, seq, nil
}

// ParseSettledKey parses a canonical settled key (no prefix): lowercase hex
// stream ID, 20-digit stream epoch and first record ≤ 2^63-1, and a revision
// in plain decimal without leading zeros, ≤ 2^31-1.
func ParseSettledKey(key string) (SettledKeyParts, error) {
	var p SettledKeyParts
	parts := strings.Split(key, "/")
	if len(parts) != 6 || parts[0] != "buckets" || parts[2] != "streams" {
		return p, fmt.Errorf("settled key %q: want buckets/<bucket>/streams/<stream>/<epoch:20>/<first:20>~<revision>", key)
	}
	if !ValidBucket(parts[1]) {
		return p, fmt.Errorf("settled key %q: invalid bucket name %q", key, parts[1])
	}
	p.Bucket = parts[1]
	if !isLowerHex(parts[3], 32) {
		return p, fmt.Errorf("settled key %q: stream %q is not 32 lowercase hex digits", key, parts[3])
	}
	if _, err := hex.Decode(p.Stream[:], []byte(parts[3])); err != nil {
		return p, fmt.Errorf("settled key %q: %w", key, err)
	}
	var ok bool
	if p.StreamEpoch, ok = parsePadded(parts[4]); !ok {
		return p, fmt.Errorf("settled key %q: stream epoch %q is not 20 digits in [0, 2^63-1]", key, parts[4])
	}
	first, rev, found := strings.Cut(parts[5], "~")
	if !found {
		return p, fmt.Errorf("settled key %q: missing ~<revision>", key)
	}
	if p.FirstRecord, ok = parsePadded(first); !ok {
		return p, fmt.Errorf("settled key %q: first record %q is not 20 digits in [0, 2^63-1]", key, first)
	}
	if rev == "" || len(rev) > 10 || rev[0] == '0' && len(rev) > 1 || strings.TrimLeft(rev, "0123456789") != "" {
		return p, fmt.Errorf("settled key %q: revision %q is not canonical decimal", key, rev)
	}
	r, err := strconv.ParseUint(rev, 10, 32)
	if err != nil || r > MaxRevision {
		return p, fmt.Errorf("settled key %q: revision %q exceeds 2^31-1", key, rev)
	}
	p.Revision = uint32(r)
	return p, nil
}

func isLowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
