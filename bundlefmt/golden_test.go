package bundlefmt

import (
	"bytes"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// -update rewrites the project's own golden files (golden_*.bin). The
// example*.bin files are docs/format.md#worked-example-a-transit-bundle's bytes, from an independent
// implementation: they are never rewritten.
var update = flag.Bool("update", false, "rewrite testdata/golden_*.bin")

func TestExample1Flight(t *testing.T) {
	want := readTestdata(t, "example1_flight.bin")
	got, err := EncodeFlight(3, 7, 0x0123456789abcdef, []Chunk{example1Chunk(t)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded flight differs from docs/format.md#worked-example-a-transit-bundle 1:\n got %x\nwant %x", got, want)
	}
	o, err := ValidateObject(want, mustExpect(t, example1Key))
	if err != nil {
		t.Fatal(err)
	}
	env := o.Envelope
	if o.Kind != KindFlight || env.Epoch != 3 || env.Seq != 7 || env.Nonce != 0x0123456789abcdef ||
		env.ObjectSize != 230 || env.FooterOffset != 73 || env.FooterLength != 117 {
		t.Fatalf("envelope %+v", env)
	}
	e := o.Entries[0]
	if e.DataCRC != 0xe3abc473 || e.DataOffset != 60 || e.FirstRecord != 1000 || e.Count() != 2 ||
		e.Lengths[0] != 6 || e.Lengths[1] != 7 || e.Timestamps[1] != 1700000000001 || e.IsBatchEnd(0) || !e.IsBatchEnd(1) {
		t.Fatalf("entry %+v", e)
	}
	if got := string(o.ChunkData(want, 0)); got != "\x00hello\x00world!" {
		t.Fatalf("chunk data %q", got)
	}
	// The point reader's path: one GET of [73, 230).
	f, err := OpenFooter(example1Key, 73, want[73:230], 230, TransitBase)
	if err != nil {
		t.Fatal(err)
	}
	r := f.Row(0)
	if r.ChunkBytes != 13 || r.EntryOffset != 73 || r.EntryLength != 65 || r.EntryCRC != 0x309185c9 {
		t.Fatalf("row %+v", r)
	}
	if tr := f.Trailer(); tr.DirCRC != 0x309185c9 || tr.IndexCRC != 0x1ed39a33 || tr.IndexLength != 52 {
		t.Fatalf("trailer %+v", tr)
	}
	i, ok := f.Find(e.Stream, 1001)
	if !ok || i != 0 {
		t.Fatalf("Find = %d, %v", i, ok)
	}
	if _, err := f.Entry(0); err != nil {
		t.Fatal(err)
	}
	if err := f.VerifyDirectory(); err != nil {
		t.Fatal(err)
	}
}

func TestExample2Settled(t *testing.T) {
	want := readTestdata(t, "example2_settled.bin")
	c := example1Chunk(t)
	got, err := EncodeSettled([]Chunk{c})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("encoded settled object differs from docs/format.md#worked-example-a-transit-bundle 2:\n got %x\nwant %x", got, want)
	}
	if _, err := ValidateObject(want, mustExpect(t, example2Key)); err != nil {
		t.Fatal(err)
	}
	if _, err := ValidateObject(want, Expect{}); err != nil { // sniffed
		t.Fatal(err)
	}
	sf, err := BuildSettledFooter([]Entry{c.Entry})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sf.Bytes, want[13:]) || sf.FooterOffset != 13 || sf.FooterLength != 117 || sf.ObjectSize != 170 {
		t.Fatalf("settled footer %+v differs from docs/format.md#worked-example-a-transit-bundle 2", sf)
	}
	if sf.ObjectCRC != 0xf82d0bb9 || CRC32C(want) != 0xf82d0bb9 {
		t.Fatalf("object crc 0x%08x, crc32c 0x%08x, want 0xf82d0bb9", sf.ObjectCRC, CRC32C(want))
	}
	if sf.Entries[0].DataOffset != 0 {
		t.Fatalf("data offset %d", sf.Entries[0].DataOffset)
	}
}

func TestExample3Poison(t *testing.T) {
	want := readTestdata(t, "example3_poison.bin")
	if got := EncodePoison(3, 8, 0xfedcba9876543210); !bytes.Equal(got, want) {
		t.Fatalf("poison differs from docs/format.md#worked-example-a-transit-bundle 3:\n got %x\nwant %x", got, want)
	}
	o, err := ValidateObject(want, mustExpect(t, example3Key))
	if err != nil {
		t.Fatal(err)
	}
	if o.Kind != KindPoison || o.Envelope.Nonce != 0xfedcba9876543210 || o.Footer != nil {
		t.Fatalf("object %+v", o)
	}
	// A poison read where a flight is expected is not a flight.
	if _, err := ValidateObject(want, Expect{Key: example3Key, Kind: KindFlight}); classOf(err) != "corrupt" {
		t.Fatalf("poison as flight: %v", err)
	}
}

func TestExample4Records(t *testing.T) {
	for _, tc := range []struct {
		file    string
		rec     Record
		content int64
	}{
		{"example4_record_headers.bin", Record{Headers: []Header{{Name: []byte("k"), Value: []byte("v")}}, Body: []byte("x")}, 3},
		{"example4_record_w1.bin", Record{Headers: []Header{{Name: []byte("n"), Value: bytes.Repeat([]byte("V"), 300)}}, Body: []byte{}}, 301},
		{"example4_tombstone.bin", Record{Tombstone: true}, 0},
		{"example4_record_empty.bin", Record{}, 0},
	} {
		want := readTestdata(t, tc.file)
		got, err := AppendRecord(nil, tc.rec)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s: AppendRecord = %x, %v; want %x", tc.file, got, err, want)
		}
		if n, _ := tc.rec.StoredLen(); n != len(want) {
			t.Fatalf("%s: StoredLen %d, want %d", tc.file, n, len(want))
		}
		dec, err := DecodeRecord(want)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if dec.ContentBytes() != tc.content || tc.rec.ContentBytes() != tc.content || dec.Tombstone != tc.rec.Tombstone {
			t.Fatalf("%s: content bytes %d, want %d", tc.file, dec.ContentBytes(), tc.content)
		}
		re, _ := AppendRecord(nil, dec)
		if !bytes.Equal(re, want) {
			t.Fatalf("%s: re-encoded %x", tc.file, re)
		}
	}
}

// goldenObjects are the project's own golden files: deterministic objects
// that exercise what the examples do not (many streams, all header widths,
// tombstones, merged chunks).
func goldenObjects(t *testing.T) map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	var flight []Chunk
	for s := 0; s < 5; s++ {
		c, _ := genChunk(t, r, sid(byte(0x10*s+1)), uint64(100*s), 1+s*3, false, false)
		flight = append(flight, c)
	}
	// One record with a W=2 header table (a value longer than 65535 bytes).
	w2 := NewChunkBuilder(sid(0xf0), 7)
	big := Record{Headers: []Header{{Name: []byte("big"), Value: bytes.Repeat([]byte{'z'}, 65536)}}, Body: []byte("b")}
	if err := w2.Add(big, -1, true); err != nil {
		t.Fatal(err)
	}
	flight = append(flight, w2.Chunk())
	fb, err := EncodeFlight(9, 42, 0xfeedface, flight)
	if err != nil {
		t.Fatal(err)
	}
	var settled []Chunk
	first := uint64(5000)
	for i := 0; i < 4; i++ {
		c, _ := genChunk(t, r, sid(0x77), first, 1+i*5, true, false)
		settled = append(settled, c)
		first = c.Entry.EndRecord()
	}
	sb, err := EncodeSettled(settled)
	if err != nil {
		t.Fatal(err)
	}
	m01, err := MergeChunks(settled[0], settled[1])
	if err != nil {
		t.Fatal(err)
	}
	mb, err := EncodeSettled([]Chunk{m01, settled[2], settled[3]})
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]byte{
		"golden_flight_6streams.bin": fb,
		"golden_settled_4chunks.bin": sb,
		"golden_settled_merged.bin":  mb,
	}
}

func TestGoldenProjectFiles(t *testing.T) {
	for name, got := range goldenObjects(t) {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want := readTestdata(t, name)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: encoder output changed (run go test -run TestGoldenProjectFiles -update if intended)", name)
		}
		if _, err := ValidateObject(want, Expect{Key: name}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
