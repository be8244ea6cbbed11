package settle

import (
	"context"
	"errors"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/internal/cycle"
)

// standingChunk is one chunk of a standing object a test adopts: its entry
// and its bytes.
type standingChunk struct {
	e    bundlefmt.Entry
	data []byte
}

// adoptCheck runs adoption's checks of a standing object made of chunks
// (laid out from offset 0) against known: the footer against the sources
// (matchSources), then the bytes (checkStanding, reading the chunks'
// bytes from memory). It returns the quarantine's class ("" when adopted).
func adoptCheck(t *testing.T, first uint64, chunks []standingChunk, known []knownChunk) (string, error) {
	t.Helper()
	var obj []byte
	got := make([]bundlefmt.Entry, len(chunks))
	for i, c := range chunks {
		got[i] = c.e
		got[i].DataOffset = uint64(len(obj))
		obj = append(obj, c.data...)
	}
	o := Output{FirstRecord: first, Footer: bundlefmt.SettledFooter{Entries: []bundlefmt.Entry{{Stream: got[0].Stream}}}}
	expect, err := matchSources(o, got, known)
	if err != nil {
		return cycle.ClassAdoption, err
	}
	get := func(_ context.Context, off, n int64) ([]byte, error) { return obj[off : off+n], nil }
	err = checkStanding(context.Background(), "standing", got, expect, get)
	var q *cycle.QuarantineError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &q):
		if q.Condemn != "standing" {
			t.Errorf("a standing object that does not match was not condemned: %v", err)
		}
		return q.Class, err
	default:
		t.Fatalf("check: %v", err)
		return "", err
	}
}

// testChunk builds a chunk of stream 7 at record 100 of the records.
func testChunk(t *testing.T, recs ...bundlefmt.Record) bundlefmt.Chunk {
	t.Helper()
	b := bundlefmt.NewChunkBuilder(bundlefmt.StreamID{7}, 100)
	for i, r := range recs {
		if err := b.Add(r, int64(i), false); err != nil {
			t.Fatal(err)
		}
	}
	return b.Chunk()
}

// eraseOf re-encodes chunk c with the records dead tombstoned.
func eraseOf(t *testing.T, c bundlefmt.Chunk, dead ...uint64) standingChunk {
	t.Helper()
	e, d, _, err := bundlefmt.EraseRecords("src", c.Entry, c.Data, func(r uint64) bool {
		for _, x := range dead {
			if x == r {
				return true
			}
		}
		return false
	})
	if err != nil {
		t.Fatal(err)
	}
	return standingChunk{e, d}
}

// knownOf is the known chunk of c as a plan that erases dead holds it.
func knownOf(t *testing.T, c bundlefmt.Chunk, dead ...uint64) knownChunk {
	t.Helper()
	p := eraseOf(t, c, dead...)
	orig := c.Entry
	return knownChunk{e: p.e, orig: &orig, origData: c.Data, data: p.data}
}

// TestMatchSourcesAcceptsARewriteUnderOtherErasures: a standing object
// written before a newer erasure holds some of the planned chunk's records
// as tombstones and others as the source has them; adoption accepts it
// record by record, with the DataCRC of exactly that mix, and refuses a
// tombstone no erasure asked for or a wrong DataCRC.
func TestMatchSourcesAcceptsARewriteUnderOtherErasures(t *testing.T) {
	var recs []bundlefmt.Record
	for i := 0; i < 5; i++ {
		recs = append(recs, bundlefmt.Record{Body: []byte{'a' + byte(i), 'b', 'c'}})
	}
	c := testChunk(t, recs...)
	known := []knownChunk{knownOf(t, c, 101, 102)} // the plan now: two records erased
	for name, got := range map[string]standingChunk{
		"as planned":    eraseOf(t, c, 101, 102),
		"as the source": {c.Entry, c.Data},
		"a mix":         eraseOf(t, c, 101), // an attempt before the second erasure
	} {
		if class, err := adoptCheck(t, 100, []standingChunk{got}, known); err != nil {
			t.Errorf("%s: %s %v", name, class, err)
		}
	}
	stray := eraseOf(t, c, 101, 104) // a tombstone where no erasure applies
	if class, err := adoptCheck(t, 100, []standingChunk{stray}, known); class != cycle.ClassAdoption {
		t.Errorf("a tombstone no erasure asked for: %q %v", class, err)
	}
	bad := eraseOf(t, c, 101)
	bad.e.DataCRC ^= 1
	if class, err := adoptCheck(t, 100, []standingChunk{bad}, known); class != cycle.ClassChecksum {
		t.Errorf("a mix with the wrong DataCRC: %q %v", class, err)
	}
	// A consistent object (its DataCRC its bytes') whose record 103 is not
	// the source's.
	forged := eraseOf(t, c, 101)
	forged.data = append([]byte(nil), forged.data...)
	forged.data[len(forged.data)-5] ^= 0x20 // record 103's last body byte, 'c' -> 'C'
	forged.e.DataCRC = bundlefmt.CRC32C(forged.data)
	if class, err := adoptCheck(t, 100, []standingChunk{forged}, known); class != cycle.ClassAdoption {
		t.Errorf("a record that is not the source's: %q %v", class, err)
	}
}

// TestMatchSourcesTellsAnEmptyRecordFromATombstone: an empty record (the
// one byte 0x00) and a tombstone (the one byte 0x08) have the same length.
// A standing object written under other erasures than the plan's, with an
// empty record the plan erases still empty, has every length the plan's:
// adoption must compare the bytes, accept it, and refuse an object whose
// empty record no erasure names is a tombstone.
func TestMatchSourcesTellsAnEmptyRecordFromATombstone(t *testing.T) {
	c := testChunk(t, bundlefmt.Record{Body: []byte("x")}, bundlefmt.Record{}, bundlefmt.Record{Body: []byte("yz")},
		bundlefmt.Record{}, bundlefmt.Record{Body: []byte("w")})
	if c.Entry.Lengths[1] != 1 || c.Data[2] != 0x00 {
		t.Fatalf("record 101 is not the one byte 0x00: lengths %v", c.Entry.Lengths)
	}
	// The plan erases 100 (two bytes to one) and the empty 101.
	known := []knownChunk{knownOf(t, c, 100, 101)}
	// The first rewrite erased 100 only: every length is the plan's, but
	// record 101 is 0x00, not 0x08.
	first := eraseOf(t, c, 100)
	if class, err := adoptCheck(t, 100, []standingChunk{first}, known); err != nil {
		t.Fatalf("a rewrite under the first erasure only: %s %v", class, err)
	}
	// Under the second erasure only, and under both.
	for _, dead := range [][]uint64{{101}, {100, 101}} {
		if class, err := adoptCheck(t, 100, []standingChunk{eraseOf(t, c, dead...)}, known); err != nil {
			t.Fatalf("a rewrite erasing %v: %s %v", dead, class, err)
		}
	}
	// The empty record 103, which no erasure names, as a tombstone: its
	// length is the source's, its byte is not.
	if class, err := adoptCheck(t, 100, []standingChunk{eraseOf(t, c, 100, 103)}, known); class != cycle.ClassAdoption {
		t.Fatalf("a tombstone for the empty record no erasure names: %q %v", class, err)
	}
	// Next to a chunk the plan copies as it is, in one settled chunk.
	c2 := testChunk(t, bundlefmt.Record{Body: []byte("abc")})
	c2.Entry.FirstRecord = 105
	known = append(known, knownChunk{e: c2.Entry})
	merged := first
	merged.e.Lengths = append(append([]uint32(nil), first.e.Lengths...), c2.Entry.Lengths...)
	merged.e.Timestamps = append(append([]int64(nil), first.e.Timestamps...), c2.Entry.Timestamps...)
	merged.data = append(append([]byte(nil), first.data...), c2.Data...)
	merged.e.DataCRC = bundlefmt.CRC32C(merged.data)
	if class, err := adoptCheck(t, 100, []standingChunk{merged}, known); err != nil {
		t.Fatalf("a merged chunk: %s %v", class, err)
	}
	merged.data = append([]byte(nil), merged.data...)
	merged.data[len(merged.data)-1] ^= 1 // the copied chunk's last byte
	merged.e.DataCRC = bundlefmt.CRC32C(merged.data)
	if class, err := adoptCheck(t, 100, []standingChunk{merged}, known); class != cycle.ClassAdoption {
		t.Fatalf("a merged chunk whose copied part is not the source's: %q %v", class, err)
	}
}
