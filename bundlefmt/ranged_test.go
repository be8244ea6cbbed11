package bundlefmt

import (
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// sameRanged checks that ValidateObjectFrom, reading obj in windows of
// window bytes, judges it as ValidateObject did (got, err): the same
// error, or the same entries; and that no read of chunk bytes asked for
// more than max(window, the longest record).
func sameRanged(t *testing.T, obj []byte, exp Expect, window uint64, got *Object, err error) {
	t.Helper()
	var largest uint64
	if got != nil && got.Footer != nil {
		for _, e := range got.Entries {
			for _, l := range e.Lengths {
				largest = max(largest, uint64(l))
			}
		}
	}
	var maxChunkRead uint64
	read := func(off, n uint64) ([]byte, error) {
		if off+n > uint64(len(obj)) {
			t.Fatalf("read [%d, +%d) past the object's %d bytes", off, n, len(obj))
		}
		if got != nil && got.Footer != nil && off < got.Footer.FooterOffset() && off+n > EnvelopeSize {
			maxChunkRead = max(maxChunkRead, n)
		}
		return obj[off : off+n], nil
	}
	o, rerr := ValidateObjectFrom(uint64(len(obj)), read, window, exp)
	if fmt.Sprint(rerr) != fmt.Sprint(err) {
		t.Fatalf("window %d: %v; whole: %v", window, rerr, err)
	}
	if err != nil {
		return
	}
	if o.Kind != got.Kind || o.Envelope != got.Envelope || !reflect.DeepEqual(o.Entries, got.Entries) {
		t.Fatalf("window %d: object %+v, whole %+v", window, o, got)
	}
	if bound := max(window, largest); got.Footer != nil && maxChunkRead > bound {
		t.Fatalf("window %d: a read of %d chunk bytes, more than max(window, longest record %d)", window, maxChunkRead, largest)
	}
}

// TestRangedValidationAgrees: every object, and every bit flipped in
// every field of it, is judged the same read whole and read in windows
// of 1, 7 and 4096 bytes.
func TestRangedValidationAgrees(t *testing.T) {
	for _, o := range testObjects(t) {
		for _, w := range []uint64{1, 7, 4096} {
			got, err := ValidateObject(o.obj, o.exp)
			sameRanged(t, o.obj, o.exp, w, got, err)
			for _, f := range fieldsOf(t, o) {
				for b := f.off; b < f.off+f.size; b++ {
					obj := append([]byte(nil), o.obj...)
					obj[b] ^= 0x01
					got, err := ValidateObject(obj, o.exp)
					sameRanged(t, obj, o.exp, w, got, err)
				}
			}
		}
	}
}

// TestRangedReadError: a failed read is returned as a ReadError with its
// cause, of no format class.
func TestRangedReadError(t *testing.T) {
	o := testObjects(t)[0]
	boom := errors.New("boom")
	for _, at := range []uint64{0, uint64(len(o.obj)) - 1, EnvelopeSize + 1} {
		read := func(off, n uint64) ([]byte, error) {
			if off <= at && at < off+n {
				return nil, boom
			}
			return o.obj[off : off+n], nil
		}
		_, err := ValidateObjectFrom(uint64(len(o.obj)), read, 3, o.exp)
		var re *ReadError
		if !errors.As(err, &re) || !errors.Is(err, boom) || ClassOf(err) != "" {
			t.Errorf("a read failing at byte %d: %v (class %q), want a ReadError of boom", at, err, ClassOf(err))
		}
	}
}
