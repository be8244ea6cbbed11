package bundlefmt_test

import (
	"fmt"

	"github.com/nova/auditor/bundlefmt"
)

// Example_mergeChunks is the worked example of docs/format.md
// ("Worked example: merging two chunks"): two one-record chunks of a stream
// merged into one chunk of a settled object, the merged DataCRC by CRC-32C
// combine, checked against the CRC of the merged bytes.
func Example_mergeChunks() {
	stream, _ := bundlefmt.ParseStreamID("00112233445566778899aabbccddeeff")
	a := bundlefmt.NewChunkBuilder(stream, 1000)
	_ = a.Add(bundlefmt.Record{Body: []byte("hello")}, 1700000000000, true)
	b := bundlefmt.NewChunkBuilder(stream, 1001)
	_ = b.Add(bundlefmt.Record{Body: []byte("world!")}, 1700000000001, true)
	ca, cb := a.Chunk(), b.Chunk()
	m, err := bundlefmt.MergeChunks(ca, cb)
	if err != nil {
		panic(err)
	}
	obj, err := bundlefmt.EncodeSettled([]bundlefmt.Chunk{m})
	if err != nil {
		panic(err)
	}
	sf, _ := bundlefmt.BuildSettledFooter([]bundlefmt.Entry{m.Entry})
	fmt.Printf("chunk A: %d bytes, DataCRC 0x%08x\n", len(ca.Data), ca.Entry.DataCRC)
	fmt.Printf("chunk B: %d bytes, DataCRC 0x%08x\n", len(cb.Data), cb.Entry.DataCRC)
	fmt.Printf("combine(A, B, 7) = 0x%08x, crc32c(A||B) = 0x%08x\n", m.Entry.DataCRC, bundlefmt.CRC32C(m.Data))
	fmt.Printf("batch-end byte 0x%02x\n", m.Entry.BatchEnd[0])
	fmt.Printf("object %d bytes, footer window (%d, %d)\n", len(obj), sf.FooterOffset, sf.FooterLength)
	fmt.Printf("entry CRC 0x%08x, index CRC 0x%08x\n", bundlefmt.CRC32C(obj[13:78]), bundlefmt.CRC32C(obj[78:130]))
	fmt.Printf("object CRC by combine 0x%08x, crc32c(object) 0x%08x\n", sf.ObjectCRC, bundlefmt.CRC32C(obj))
	// Output:
	// chunk A: 6 bytes, DataCRC 0x8829b1f3
	// chunk B: 7 bytes, DataCRC 0x818d4071
	// combine(A, B, 7) = 0xe3abc473, crc32c(A||B) = 0xe3abc473
	// batch-end byte 0x03
	// object 170 bytes, footer window (13, 117)
	// entry CRC 0x97cbd7e6, index CRC 0x4c84e143
	// object CRC by combine 0x3770fb71, crc32c(object) 0x3770fb71
}
