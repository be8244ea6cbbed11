package bundlefmt

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// classOf names the exact class of err as the package does (ClassOf:
// checksum before corrupt, since a checksum mismatch is also corrupt), "ok"
// for none and "other: ..." for an error of no class.
func classOf(err error) string {
	if err == nil {
		return "ok"
	}
	if c := ClassOf(err); c != "" {
		return c
	}
	return "other: " + err.Error()
}

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sid(b byte) StreamID {
	var s StreamID
	for i := range s {
		s[i] = b ^ byte(i*17)
	}
	s[0] = b
	return s
}

// genRecord returns a random record: no headers, or headers whose widths
// exercise all three W codes; empty bodies; tombstones when allowed.
func genRecord(r *rand.Rand, tombstones, big bool) Record {
	switch x := r.IntN(20); {
	case tombstones && x == 0:
		return Record{Tombstone: true}
	case x < 4:
		return Record{Body: randBytes(r, r.IntN(3))} // empty and tiny bodies
	case x < 12:
		return Record{Body: randBytes(r, r.IntN(200))}
	default:
		var rec Record
		n := 1 + r.IntN(4)
		if r.IntN(30) == 0 {
			n = 256 + r.IntN(10) // count forces W=1
		}
		for range n {
			h := Header{Name: randBytes(r, r.IntN(8)), Value: randBytes(r, r.IntN(16))}
			switch r.IntN(40) {
			case 0:
				h.Value = randBytes(r, 256+r.IntN(300)) // W=1
			case 1:
				if big {
					h.Name = randBytes(r, 65536+r.IntN(10)) // W=2
				}
			}
			rec.Headers = append(rec.Headers, h)
		}
		rec.Body = randBytes(r, r.IntN(50))
		return rec
	}
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// genChunk builds a chunk of n random records and returns what went in.
func genChunk(t testing.TB, r *rand.Rand, stream StreamID, first uint64, n int, tombstones, big bool) (Chunk, []Record) {
	t.Helper()
	b := NewChunkBuilder(stream, first)
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = genRecord(r, tombstones, big)
		if err := b.Add(recs[i], r.Int64()-(1<<62), r.IntN(3) == 0); err != nil {
			t.Fatal(err)
		}
	}
	return b.Chunk(), recs
}

// fixedChunk builds a chunk of n records of size bytes each (benchmarks).
func fixedChunk(t testing.TB, stream StreamID, first uint64, n, size int) Chunk {
	t.Helper()
	b := NewChunkBuilder(stream, first)
	body := make([]byte, size-1)
	for i := range body {
		body[i] = byte(i * 7)
	}
	for i := 0; i < n; i++ {
		if err := b.Add(Record{Body: body}, int64(1_700_000_000_000+i), i%4 == 3); err != nil {
			t.Fatal(err)
		}
	}
	return b.Chunk()
}

// encodeUnchecked lays out an object like the encoders but checks nothing,
// so tests can build objects that break a rule with every CRC right. A slot
// is built when env is non-nil (its size and footer window are filled in).
func encodeUnchecked(env *Envelope, entries []Entry, data [][]byte) []byte {
	base := uint64(SettledBase)
	if env != nil {
		base = TransitBase
	}
	l := layout{base: base}
	for i := range entries {
		entries[i].DataCRC = CRC32C(data[i])
		l.dataLen += uint64(len(data[i]))
		l.dirLen += uint64(EntryLen(entries[i].Count()))
	}
	l.indexLen = uint64(len(entries)) * RowSize
	l.dirOffset = base + l.dataLen
	var out []byte
	if env != nil {
		out = appendEnvelope(out, kindByteFlight, env.Epoch, env.Seq, env.Nonce, l.objectSize(), l.dirOffset, l.footerLen())
	}
	for _, d := range data {
		out = append(out, d...)
	}
	return appendFooter(out, entries, l)
}

// reseal recomputes, from the layout the bytes claim, every DataCRC whose
// range is in bounds, every entry CRC into its row, the directory and index
// CRCs, and the envelope CRC: a field changed before reseal then looks like a
// writer bug, not bit rot.
func reseal(obj []byte, base uint64) {
	le := binary.LittleEndian
	size := uint64(len(obj))
	if size < TrailerSize {
		return
	}
	tr := obj[size-TrailerSize:]
	dirOff, dirLen, idxLen := le.Uint64(tr[8:]), le.Uint64(tr[16:]), le.Uint64(tr[28:])
	// Every check is written so that hostile (fuzzed) values cannot wrap.
	if dirOff <= size && dirLen <= size && idxLen <= size && dirOff+dirLen+idxLen+TrailerSize == size {
		idx := obj[dirOff+dirLen : dirOff+dirLen+idxLen]
		for i := uint64(0); i+RowSize <= idxLen; i += RowSize {
			row := idx[i : i+RowSize]
			eo, el := le.Uint64(row[36:]), uint64(le.Uint32(row[44:]))
			if eo < dirOff || eo > dirOff+dirLen || el > dirOff+dirLen-eo || el < EntryFixed {
				continue
			}
			e := obj[eo : eo+el]
			do, cb := le.Uint64(e[28:]), le.Uint64(row[28:])
			if do <= dirOff && cb <= dirOff-do {
				le.PutUint32(e[36:], CRC32C(obj[do:do+cb]))
			}
			le.PutUint32(row[48:], CRC32C(e))
		}
		le.PutUint32(tr[24:], CRC32C(obj[dirOff:dirOff+dirLen]))
		le.PutUint32(tr[36:], CRC32C(idx))
	}
	if base == TransitBase && len(obj) >= EnvelopeSize {
		le.PutUint32(obj[56:], CRC32C(obj[:56]))
	}
}

// example1Chunk is the chunk of docs/format.md#worked-example-a-transit-bundle examples 1 and 2.
func example1Chunk(t testing.TB) Chunk {
	t.Helper()
	s, err := ParseStreamID("00112233445566778899aabbccddeeff")
	if err != nil {
		t.Fatal(err)
	}
	b := NewChunkBuilder(s, 1000)
	if err := b.Add(Record{Body: []byte("hello")}, 1700000000000, false); err != nil {
		t.Fatal(err)
	}
	if err := b.Add(Record{Body: []byte("world!")}, 1700000000001, true); err != nil {
		t.Fatal(err)
	}
	return b.Chunk()
}

const (
	example1Key = "stars/s1/chain/00000000000000000003/00000000000000000007"
	example2Key = "buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~0"
	example3Key = "stars/s1/chain/00000000000000000003/00000000000000000008"
)

func mustExpect(t testing.TB, key string) Expect {
	t.Helper()
	exp, err := ExpectFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return exp
}
