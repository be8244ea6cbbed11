package pendingobj

import (
	"crypto/sha256"
	"encoding/binary"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Sidecar layout (docs/format.md#pending-object-sidecar), all integers little-endian:
//
//	offset  size  field
//	     0    12  magic "KSPENDING01\n"
//	    12     2  u16 format-ID byte length (F)
//	    14     4  u32 file-name byte length (N)
//	    18     4  u32 media-type byte length (M)
//	    22     8  u64 object byte length (L)
//	    30    32  SHA-256 of the object bytes only
//	    62     F  format ID
//	  62+F     N  file name, UTF-8
//	62+F+N     M  media type, UTF-8
//	  ...      L  object bytes
//
// The file is exactly 62+F+N+M+L bytes long.
const (
	magic = "KSPENDING01\n"

	offFormatIDLen  = 12                  // len(magic), kept untyped
	offFileNameLen  = offFormatIDLen + 2  // 14
	offMediaTypeLen = offFileNameLen + 4  // 18
	offObjectLen    = offMediaTypeLen + 4 // 22
	offDigest       = offObjectLen + 8    // 30
	headerLen       = offDigest + 32      // 62; 32 = sha256.Size

	finalSuffix = ".pending-object"
	tempSuffix  = ".pending-object.tmp"

	maxNamespaceLen = 255
)

// fieldAt returns the start of the fixed-header field containing byte off,
// so a file cut short inside the header is reported at the field it cuts.
func fieldAt(off int) int64 {
	for _, start := range [...]int{offDigest, offObjectLen, offMediaTypeLen, offFileNameLen, offFormatIDLen} {
		if off >= start {
			return int64(start)
		}
	}
	return 0
}

// header is the fixed part of a sidecar after the magic.
type header struct {
	formatIDLen  uint16
	fileNameLen  uint32
	mediaTypeLen uint32
	objectLen    uint64
	digest       [sha256.Size]byte
}

func parseHeader(b *[headerLen]byte) header {
	var h header
	h.formatIDLen = binary.LittleEndian.Uint16(b[offFormatIDLen:])
	h.fileNameLen = binary.LittleEndian.Uint32(b[offFileNameLen:])
	h.mediaTypeLen = binary.LittleEndian.Uint32(b[offMediaTypeLen:])
	h.objectLen = binary.LittleEndian.Uint64(b[offObjectLen:])
	copy(h.digest[:], b[offDigest:])
	return h
}

// metaLen is the byte length of the three variable metadata fields; the
// widths (16+32+32 bits) make it impossible to overflow a uint64.
func (h header) metaLen() uint64 {
	return uint64(h.formatIDLen) + uint64(h.fileNameLen) + uint64(h.mediaTypeLen)
}

// encodeHead returns everything before the object bytes, with the digest
// field zero for the writer to fill in. The caller has checked that every
// length fits its field.
func encodeHead(formatID, fileName, mediaType string, objectLen uint64) []byte {
	b := make([]byte, 0, headerLen+len(formatID)+len(fileName)+len(mediaType))
	b = append(b, magic...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(formatID)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(fileName)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(mediaType)))
	b = binary.LittleEndian.AppendUint64(b, objectLen)
	b = append(b, make([]byte, sha256.Size)...)
	b = append(b, formatID...)
	b = append(b, fileName...)
	b = append(b, mediaType...)
	return b
}

func validNamespace(ns string) bool {
	if len(ns) == 0 || len(ns) > maxNamespaceLen {
		return false
	}
	for i := 0; i < len(ns); i++ {
		c := ns[i]
		ok := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
		if !ok {
			return false
		}
	}
	return true
}

func checkFormatID(id string) error {
	switch {
	case id == "":
		return invalidf("format ID is empty")
	case len(id) > math.MaxUint16:
		return invalidf("format ID is %d bytes, more than %d", len(id), math.MaxUint16)
	case !utf8.ValidString(id):
		return invalidf("format ID is not valid UTF-8")
	}
	return nil
}

// blank reports metadata the format treats as empty: the reference
// implementation (kcode-session-log) trims Unicode white space before its
// emptiness check, so a whitespace-only name is empty too. Go's TrimSpace
// uses the same White_Space set as Rust's str::trim.
func blank(s string) bool { return strings.TrimSpace(s) == "" }

func checkMetadata(field, v string) error {
	switch {
	case blank(v):
		return invalidf("%s is empty", field)
	case uint64(len(v)) > math.MaxUint32:
		return invalidf("%s is %d bytes, more than %d", field, len(v), uint64(math.MaxUint32))
	case !utf8.ValidString(v):
		return invalidf("%s is not valid UTF-8", field)
	}
	return nil
}

// appendName appends "<namespace>-<n>.pending-object[.tmp]".
func appendName(b []byte, namespace string, position uint64, temp bool) []byte {
	b = append(b, namespace...)
	b = append(b, '-')
	b = strconv.AppendUint(b, position, 10)
	if temp {
		return append(b, tempSuffix...)
	}
	return append(b, finalSuffix...)
}

// parseName recognises the store's own file names: prefix is "<namespace>-",
// the position is a canonical decimal uint64 (no sign, no leading zero except
// "0" itself, no overflow). Anything else is not owned by the store.
func parseName(prefix, name string) (position uint64, temp, ok bool) {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false, false
	}
	num, temp := strings.CutSuffix(rest, tempSuffix)
	if !temp {
		if num, ok = strings.CutSuffix(rest, finalSuffix); !ok {
			return 0, false, false
		}
	}
	if num == "" || len(num) > 1 && num[0] == '0' {
		return 0, false, false
	}
	for i := 0; i < len(num); i++ {
		if num[i] < '0' || num[i] > '9' {
			return 0, false, false
		}
	}
	position, err := strconv.ParseUint(num, 10, 64)
	if err != nil {
		return 0, false, false
	}
	return position, temp, true
}
