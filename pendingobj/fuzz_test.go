package pendingobj

import (
	"bytes"
	"errors"
	"os"
	"testing"
)

// FuzzRead writes arbitrary bytes as the final file of a position and reads
// it. It must never panic; a rejection must be classified (ErrCorrupt or
// ErrFormatID, as a *FormatError with an offset inside the file); Read and
// the streaming VerifyAll must agree; and whatever is accepted must be the
// canonical encoding of what was read.
func FuzzRead(f *testing.F) {
	valid := sidecar("fmt/1", "name", "text/plain", []byte("payload"))
	f.Add(valid)
	f.Add(goldenHello)
	f.Add(goldenEmpty)
	f.Add([]byte{})
	f.Add([]byte(magic))
	for _, c := range corruptions {
		f.Add(c.damage(bytes.Clone(valid)))
	}
	dir := f.TempDir()
	s, err := New(dir, "ns", "fmt/1")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(s.Path(1), b, 0o600); err != nil {
			t.Fatal(err)
		}
		obj, err := s.Read(1)
		verr := s.VerifyAll([]uint64{1})
		if (err == nil) != (verr == nil) {
			t.Fatalf("Read = %v but VerifyAll = %v", err, verr)
		}
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrFormatID) {
				t.Fatalf("unclassified rejection: %v", err)
			}
			if fe.Offset < 0 || fe.Offset > int64(len(b)) {
				t.Fatalf("offset %d outside a %d-byte file: %v", fe.Offset, len(b), err)
			}
			return
		}
		head := encodeHead(s.formatID, obj.FileName, obj.MediaType, uint64(len(obj.Bytes)))
		copy(head[offDigest:], b[offDigest:headerLen])
		if !bytes.Equal(append(head, obj.Bytes...), b) {
			t.Fatalf("accepted a non-canonical file")
		}
	})
}
