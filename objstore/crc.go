package objstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
)

// EncodeCRC32C renders crc as S3's x-amz-checksum-crc32c value (base64 of
// the big-endian bytes).
func EncodeCRC32C(crc uint32) string {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], crc)
	return base64.StdEncoding.EncodeToString(b[:])
}

// DecodeCRC32C parses an x-amz-checksum-crc32c value. Multipart composite
// values ("...-N") are rejected: they are not a CRC of the bytes.
func DecodeCRC32C(s string) (uint32, error) {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil || len(b) != 4 {
		return 0, fmt.Errorf("objstore: bad crc32c value %q", s)
	}
	return binary.BigEndian.Uint32(b), nil
}
