package bundlefmt

// The byte layouts of format v1, each named once. Every encoder, decoder
// and error offset of this package takes its field offsets and sizes from
// here. An offset is from the start of its structure (the envelope starts at
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
