package objstore

import (
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"hash/crc32"
)

// castagnoli is the CRC-32C table used for every checksum in the store.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC-32C (Castagnoli) of b.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// NewCRC32C returns a streaming CRC-32C hash.
func NewCRC32C() hash.Hash32 { return crc32.New(castagnoli) }

// UpdateCRC32C extends crc with b.
func UpdateCRC32C(crc uint32, b []byte) uint32 { return crc32.Update(crc, castagnoli, b) }

// CombineCRC32C returns the CRC-32C of A||B given crcA = CRC(A), crcB = CRC(B)
// and lenB = len(B), as zlib's crc32_combine with the Castagnoli polynomial
// (docs/format.md#crc-32c-combine). It never touches the bytes.
func CombineCRC32C(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	// even and odd hold the operator for 2^k and 2^(k+1) zero bits;
	// reflected polynomial 0x82F63B78.
	var even, odd [32]uint32
	odd[0] = 0x82F63B78
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(even[:], odd[:]) // 2 zero bits
	gf2Square(odd[:], even[:]) // 4 zero bits
	for {
		gf2Square(even[:], odd[:]) // first pass: 1 zero byte
		if lenB&1 != 0 {
			crcA = gf2Times(even[:], crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
		gf2Square(odd[:], even[:])
		if lenB&1 != 0 {
			crcA = gf2Times(odd[:], crcA)
		}
		lenB >>= 1
		if lenB == 0 {
			break
		}
	}
	return crcA ^ crcB
}

func gf2Times(mat []uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat []uint32) {
	for n := 0; n < 32; n++ {
		square[n] = gf2Times(mat, mat[n])
	}
}

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
