package bundlefmt

// The one CRC-32C (Castagnoli) of the auditor, the format's checksum:
// checksums, streaming updates and the combine that gives the CRC of A‖B
// from the CRCs of A and B and the length of B, without the bytes
// (docs/format.md#crc-32c-combine). Stores import it from here to check
// what they assemble.

import (
	"hash"
	"hash/crc32"
)

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

// CombineCRC32C returns the CRC-32C of A‖B given crc1 = Checksum(A),
// crc2 = Checksum(B) and len2 = len(B), without the bytes: zlib's
// crc32_combine with the Castagnoli polynomial. A negative len2 is treated
// as 0.
func CombineCRC32C(crc1, crc2 uint32, len2 int64) uint32 {
	if len2 <= 0 {
		return crc1 ^ crc2
	}
	return multModP(x2nModP(uint64(len2), 3), crc1) ^ crc2
}
