package bundlefmt

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// seedObjects returns every object in testdata (examples and goldens).
func seedObjects(f *testing.F) [][]byte {
	paths, err := filepath.Glob(filepath.Join("testdata", "*.bin"))
	if err != nil {
		f.Fatal(err)
	}
	var out [][]byte
	for _, p := range paths {
		if strings.Contains(p, "record") || strings.Contains(p, "tombstone") {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		out = append(out, b)
	}
	return out
}

// checkErr fails unless err is a FormatError of one of the three classes.
func checkErr(t *testing.T, err error) {
	t.Helper()
	var fe *FormatError
	if !errors.As(err, &fe) || ClassOf(err) == "" || fe.Offset < 0 {
		t.Fatalf("error outside the three classes: %#v", err)
	}
}

// FuzzValidateObject: the whole-object decoder never panics, fails only
// with the three classes, and everything it accepts re-encodes to exactly
// the same bytes (the format has one encoding).
func FuzzValidateObject(f *testing.F) {
	for _, b := range seedObjects(f) {
		for k := uint8(0); k < 5; k++ {
			f.Add(b, k)
		}
	}
	f.Fuzz(func(t *testing.T, obj []byte, kind uint8) {
		exp := Expect{Key: "fuzz", Kind: Kind(kind % 5)}
		o, err := ValidateObject(obj, exp)
		sameRanged(t, obj, exp, 1+uint64(kind), o, err)
		if err != nil {
			checkErr(t, err)
			return
		}
		var re []byte
		switch o.Kind {
		case KindPoison:
			env := o.Envelope
			re = EncodePoison(env.Epoch, env.Seq, env.Nonce)
		case KindFlight, KindSettled:
			chunks := make([]Chunk, len(o.Entries))
			for i := range chunks {
				chunks[i] = Chunk{Entry: o.Entries[i], Data: o.ChunkData(obj, i)}
			}
			if o.Kind == KindFlight {
				env := o.Envelope
				re, err = EncodeFlight(env.Epoch, env.Seq, env.Nonce, chunks)
			} else {
				re, err = EncodeSettled(chunks)
			}
			if err != nil {
				t.Fatalf("valid object does not re-encode: %v", err)
			}
			ft, err := OpenObjectFooter("fuzz", obj, o.Footer.Base())
			if err != nil {
				t.Fatalf("valid object's footer does not open: %v", err)
			}
			for i, e := range o.Entries {
				if j, ok := ft.Find(e.Stream, e.FirstRecord); !ok || j != i {
					t.Fatalf("Find(chunk %d) = %d, %v", i, j, ok)
				}
			}
		default:
			t.Fatalf("kind %s", o.Kind)
		}
		if !bytes.Equal(re, obj) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", re, obj)
		}
	})
}

// FuzzValidateResealed mutates an object and then makes every CRC right
// again (reseal), so the mutations reach the structural rules behind the
// checksums; the same properties must hold.
func FuzzValidateResealed(f *testing.F) {
	for _, b := range seedObjects(f) {
		f.Add(b, uint8(0))
	}
	f.Fuzz(func(t *testing.T, obj []byte, kind uint8) {
		obj = append([]byte(nil), obj...)
		base := uint64(SettledBase)
		if len(obj) > 0 && obj[0] == 'C' {
			base = TransitBase
		}
		reseal(obj, base)
		exp := Expect{Key: "fuzz", Kind: Kind(kind % 5)}
		o, err := ValidateObject(obj, exp)
		sameRanged(t, obj, exp, 1+uint64(kind), o, err)
		if err != nil {
			checkErr(t, err)
			return
		}
		if o.Kind == KindSettled {
			chunks := make([]Chunk, len(o.Entries))
			for i := range chunks {
				chunks[i] = Chunk{Entry: o.Entries[i], Data: o.ChunkData(obj, i)}
			}
			re, err := EncodeSettled(chunks)
			if err != nil || !bytes.Equal(re, obj) {
				t.Fatalf("valid settled object re-encodes differently: %v", err)
			}
		}
	})
}

// FuzzOpenFooter: the footer-window decoder (as a ref gives it) never
// panics, fails only with the three classes, and agrees with itself across
// its levels.
func FuzzOpenFooter(f *testing.F) {
	for _, b := range seedObjects(f) {
		if len(b) <= EnvelopeSize {
			continue
		}
		t, err := DecodeTrailer("", b, uint64(len(b)))
		if err != nil {
			f.Fatal(err)
		}
		settled := b[0] != 'C'
		f.Add(b[t.DirOffset:], t.DirOffset, uint64(len(b)), settled, b[t.DirOffset:t.DirOffset+16], uint64(1000))
	}
	f.Fuzz(func(t *testing.T, win []byte, off, size uint64, settled bool, probe []byte, record uint64) {
		base := uint64(TransitBase)
		kind := KindFlight
		if settled {
			base, kind = SettledBase, KindSettled
		}
		ft, err := OpenFooter("fuzz", off, win, size, base)
		if err != nil {
			checkErr(t, err)
			return
		}
		var s StreamID
		copy(s[:], probe)
		i, found := ft.Find(s, record)
		if i < 0 || i > ft.NumChunks() {
			t.Fatalf("Find = %d of %d", i, ft.NumChunks())
		}
		if found {
			r := ft.Row(i)
			if r.Stream != s || record < r.FirstRecord || record >= r.EndRecord() {
				t.Fatalf("Find(%s, %d) = row %+v", s, record, r)
			}
		}
		lo, hi := ft.FindStream(s)
		if lo > hi || hi > ft.NumChunks() || found && (i < lo || i >= hi) {
			t.Fatalf("FindStream = [%d, %d), Find = %d", lo, hi, i)
		}
		if got := ft.SearchStreamFrom(lo/2, s); got != lo {
			t.Fatalf("SearchStreamFrom(%d) = %d, FindStream's first row %d", lo/2, got, lo)
		}
		entryErr := false
		for j := 0; j < ft.NumChunks(); j++ {
			v, err := ft.EntryView(j)
			if err != nil {
				checkErr(t, err)
				entryErr = true
				continue
			}
			if v.Count() != int(ft.Row(j).Count) || v.ChunkBytes() != ft.Row(j).ChunkBytes {
				t.Fatalf("entry %d disagrees with its row", j)
			}
		}
		verr := ft.VerifyDirectory()
		if verr != nil {
			checkErr(t, verr)
		} else if entryErr {
			t.Fatal("VerifyDirectory passed over a bad entry")
		}
		_, ferr := ValidateFooter(off, win, size, Expect{Key: "fuzz", Kind: kind})
		if (ferr == nil) != (verr == nil) {
			t.Fatalf("ValidateFooter %v, OpenFooter+VerifyDirectory %v", ferr, verr)
		}
	})
}

// FuzzDecodeRecord: the stored-record decoder never panics, allocates by
// the input only, and what it accepts is canonical: it re-encodes to the
// same bytes.
func FuzzDecodeRecord(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("testdata", "example4_*.bin"))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x05, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 'v'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeRecord(b)
		info, perr := ParseRecord(b)
		if (err == nil) != (perr == nil) {
			t.Fatalf("DecodeRecord %v, ParseRecord %v", err, perr)
		}
		if err != nil {
			checkErr(t, err)
			return
		}
		if r.ContentBytes() != info.ContentBytes || len(r.Headers) != info.Headers || r.Tombstone != info.Tombstone {
			t.Fatalf("DecodeRecord and ParseRecord disagree: %+v", info)
		}
		re, err := AppendRecord(nil, r)
		if err != nil || !bytes.Equal(re, b) {
			t.Fatalf("re-encodes to %x, %v; want %x", re, err, b)
		}
	})
}
