package pendingobj

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
)

// sidecar encodes a file independently of the package's encoder, straight
// from the layout, so tests can build valid and damaged files.
func sidecar(formatID, fileName, mediaType string, object []byte) []byte {
	sum := sha256.Sum256(object)
	b := []byte("KSPENDING01\n")
	b = binary.LittleEndian.AppendUint16(b, uint16(len(formatID)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(fileName)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(mediaType)))
	b = binary.LittleEndian.AppendUint64(b, uint64(len(object)))
	b = append(b, sum[:]...)
	b = append(b, formatID...)
	b = append(b, fileName...)
	b = append(b, mediaType...)
	return append(b, object...)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 0))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestInstallReadRoundTrip(t *testing.T) {
	s, dir := newTestStore(t, nil)
	for i, c := range []struct {
		fileName, mediaType string
		size                int
	}{
		{"empty", "application/octet-stream", 0},
		{"k#1", "application/octet-stream", 1},
		{"ñandú/ключ#2", "text/plain; charset=utf-8", 4 << 10},
		{" padded ", "x", readChunk},
		{"three chunks and a bit", "application/octet-stream", 3*readChunk + 17},
	} {
		position := uint64(i)*10000 + 1
		data := randomBytes(c.size, position)
		if err := s.Install(position, c.fileName, c.mediaType, data); err != nil {
			t.Fatal(err)
		}
		obj, err := s.Read(position)
		if err != nil {
			t.Fatal(err)
		}
		if obj.FileName != c.fileName || obj.MediaType != c.mediaType || !bytes.Equal(obj.Bytes, data) || obj.Bytes == nil {
			t.Fatalf("position %d: read back %q %q %d bytes", position, obj.FileName, obj.MediaType, len(obj.Bytes))
		}
		if got := readFile(t, s.Path(position)); !bytes.Equal(got, sidecar("fmt/1", c.fileName, c.mediaType, data)) {
			t.Fatalf("position %d: file bytes differ from the layout", position)
		}
		fi, err := os.Stat(s.Path(position))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != filePerm {
			t.Fatalf("mode %v", fi.Mode())
		}
	}
	if err := s.VerifyAll([]uint64{1, 10001, 20001, 30001, 40001}); err != nil {
		t.Fatal(err)
	}
	for _, name := range dirNames(t, dir) {
		if strings.HasSuffix(name, ".tmp") {
			t.Fatalf("temporary file left behind: %s", name)
		}
	}
}

func TestInstallRejectsInvalidMetadata(t *testing.T) {
	s, dir := newTestStore(t, nil)
	for _, c := range []struct{ fileName, mediaType string }{
		{"", "text/plain"},
		{" ", "text/plain"},
		{"\t\n", "text/plain"},
		{"\u00a0\u3000", "text/plain"},
		{"a\xff", "text/plain"},
		{"a", ""},
		{"a", "  "},
		{"a", "text/\xc3"},
	} {
		err := s.Install(1, c.fileName, c.mediaType, []byte("x"))
		if !isInvalid(err) || strings.Count(err.Error(), "pendingobj:") != 1 || !strings.Contains(err.Error(), "position 1") {
			t.Errorf("Install(%q, %q) = %v, want ErrInvalidArgument naming the position", c.fileName, c.mediaType, err)
		}
	}
	if names := dirNames(t, dir); len(names) != 0 {
		t.Fatalf("rejected installs left %v", names)
	}
}

func TestInstallRequiresExistingDirectory(t *testing.T) {
	parent := t.TempDir()
	s, err := New(filepath.Join(parent, "missing"), "ns", "fmt/1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Install(1, "a", "b", []byte("x")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Install = %v, want fs.ErrNotExist", err)
	}
	if names := dirNames(t, parent); len(names) != 0 {
		t.Fatalf("Install created %v", names)
	}
}

func TestInstallRefusesExistingFinal(t *testing.T) {
	s, dir := newTestStore(t, nil)
	if err := s.Install(3, "a", "b", []byte("first")); err != nil {
		t.Fatal(err)
	}
	before := readFile(t, s.Path(3))
	stale := []byte("stale temp of position 3")
	writeFile(t, s.path(3, true), stale)

	err := s.Install(3, "a", "b", []byte("second"))
	if !errors.Is(err, fs.ErrExist) || !strings.Contains(err.Error(), s.Path(3)) {
		t.Fatalf("Install over an existing final = %v, want fs.ErrExist naming the path", err)
	}
	if !bytes.Equal(readFile(t, s.Path(3)), before) {
		t.Fatal("final file changed")
	}
	// Refusal happens before anything is touched.
	if !bytes.Equal(readFile(t, s.path(3, true)), stale) {
		t.Fatal("temporary file changed by a refused install")
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"ns-3.pending-object", "ns-3.pending-object.tmp"}) {
		t.Fatalf("directory %v", got)
	}
}

// The final file appears after Install's check but before it links: link
// refuses, the intruder's bytes stay, the temporary file is cleaned up.
func TestInstallRefusesFinalCreatedDuringInstall(t *testing.T) {
	intruder := sidecar("fmt/1", "other", "writer", []byte("intruder"))
	var dir string
	fsys := &faultFS{}
	fsys.before = func(op, name string) {
		if op == "link" {
			writeFile(t, filepath.Join(dir, "ns-4.pending-object"), intruder)
		}
	}
	s, d := newTestStore(t, fsys)
	dir = d
	err := s.Install(4, "mine", "b", []byte("mine"))
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("Install = %v, want fs.ErrExist", err)
	}
	if !bytes.Equal(readFile(t, s.Path(4)), intruder) {
		t.Fatal("final file was overwritten")
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"ns-4.pending-object"}) {
		t.Fatalf("directory %v", got)
	}
}

func TestInstallRemovesOnlyExactStaleTemp(t *testing.T) {
	s, dir := newTestStore(t, nil)
	others := map[string][]byte{
		"ns-6.pending-object.tmp":     []byte("other position"),
		"ns-05.pending-object.tmp":    []byte("malformed"),
		"ns-5.pending-object.tmp.bak": []byte("suffix"),
		"ns2-5.pending-object.tmp":    []byte("other namespace"),
		"ns-5.pending-object.bak":     []byte("suffix"),
	}
	for name, b := range others {
		writeFile(t, filepath.Join(dir, name), b)
	}
	writeFile(t, s.path(5, true), []byte("torn garbage from a crash"))
	if err := s.Install(5, "a", "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(5); err != nil {
		t.Fatal(err)
	}
	for name, b := range others {
		if !bytes.Equal(readFile(t, filepath.Join(dir, name)), b) {
			t.Errorf("%s changed", name)
		}
	}
	if _, err := os.Lstat(s.path(5, true)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("stale temp still present: %v", err)
	}
}

// The durability order: check, clear the stale temp, create exclusively,
// write everything, sync the file, close, link, unlink the temp, sync the
// directory, and nothing else. A large object is hashed while it is
// written, so its digest goes into the header afterwards, before the sync.
func TestInstallStepOrder(t *testing.T) {
	tmp, final := "ns-9.pending-object.tmp", "ns-9.pending-object"
	for _, c := range []struct {
		size  int
		write []string
	}{
		{largeObject - 1, []string{"write " + tmp, "sync " + tmp}},
		{largeObject, []string{"write " + tmp, "write " + tmp, "writeat " + tmp, "sync " + tmp}},
	} {
		fsys := &faultFS{}
		s, _ := newTestStore(t, fsys)
		data := randomBytes(c.size, 9)
		if err := s.Install(9, "a", "b", data); err != nil {
			t.Fatal(err)
		}
		want := slices.Concat(
			[]string{"lstat " + final, "unlink " + tmp, "create " + tmp},
			c.write,
			[]string{"close " + tmp, "link " + final, "unlink " + tmp, "syncdir " + filepath.Base(s.dir)},
		)
		if !slices.Equal(fsys.log, want) {
			t.Fatalf("%d bytes: steps\n%s\nwant\n%s", c.size, strings.Join(fsys.log, "\n"), strings.Join(want, "\n"))
		}
		if got := readFile(t, s.Path(9)); !bytes.Equal(got, sidecar("fmt/1", "a", "b", data)) {
			t.Fatalf("%d bytes: file differs from the layout", c.size)
		}
	}
}

func TestReadOpensOnlyCanonicalPath(t *testing.T) {
	s, dir := newTestStore(t, nil)
	valid := sidecar("fmt/1", "a", "b", []byte("x"))
	for _, name := range []string{
		"ns-7.pending-object.tmp",
		"ns-07.pending-object",
		"ns-7.pending-object.bak",
		"ns2-7.pending-object",
	} {
		writeFile(t, filepath.Join(dir, name), valid)
	}
	if _, err := s.Read(7); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Read = %v, want fs.ErrNotExist", err)
	}
	fsys := &faultFS{}
	s2, _ := newStore(dir, "ns", "fmt/1", fsys)
	_, _ = s2.Read(7)
	if len(fsys.log) != 1 || fsys.log[0] != "open ns-7.pending-object" {
		t.Fatalf("Read touched %v", fsys.log)
	}
}

// corruptions is the table of named damaged files, each with the error
// class and the offset of the field it must be reported at. base is a valid
// file: format ID "fmt/1" at 62, file name "name" at 67, media type
// "text/plain" at 71, object "payload" at 81.
var corruptions = []struct {
	name    string
	damage  func(b []byte) []byte
	class   error
	offset  int64
	message string
}{
	{"bad_magic", func(b []byte) []byte { b[0] = 'X'; return b }, ErrCorrupt, 0, "bad magic"},
	{"other_magic_version", func(b []byte) []byte { b[10] = '2'; return b }, ErrCorrupt, 0, "bad magic"},
	{"empty_file", func(b []byte) []byte { return b[:0] }, ErrCorrupt, 0, "truncated"},
	{"torn_magic", func(b []byte) []byte { return b[:5] }, ErrCorrupt, 0, "truncated"},
	{"torn_magic_wrong", func(b []byte) []byte { b[1] = 'x'; return b[:5] }, ErrCorrupt, 0, "bad magic"},
	{"torn_fixed_header", func(b []byte) []byte { return b[:40] }, ErrCorrupt, 30, "truncated"},
	{"torn_length_field", func(b []byte) []byte { return b[:16] }, ErrCorrupt, 14, "truncated"},
	{"torn_metadata", func(b []byte) []byte { return b[:65] }, ErrCorrupt, 12, "truncated"},
	{"torn_object", func(b []byte) []byte { return b[:len(b)-1] }, ErrCorrupt, 12, "truncated"},
	{"trailing_byte", func(b []byte) []byte { return append(b, 0) }, ErrCorrupt, 12, "trailing bytes"},
	{"object_length_overflow", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[22:], math.MaxUint64-70)
		return b
	}, ErrCorrupt, 22, "length overflow"},
	{"object_length_max", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[22:], math.MaxUint64)
		return b
	}, ErrCorrupt, 22, "length overflow"},
	{"object_length_beyond_file", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[22:], 64<<20)
		return b
	}, ErrCorrupt, 12, "truncated"},
	{"object_length_short", func(b []byte) []byte {
		binary.LittleEndian.PutUint64(b[22:], 3)
		return b
	}, ErrCorrupt, 12, "trailing bytes"},
	{"file_name_length_max", func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[14:], math.MaxUint32)
		return b
	}, ErrCorrupt, 12, "truncated"},
	{"all_lengths_max", func(b []byte) []byte {
		binary.LittleEndian.PutUint16(b[12:], math.MaxUint16)
		binary.LittleEndian.PutUint32(b[14:], math.MaxUint32)
		binary.LittleEndian.PutUint32(b[18:], math.MaxUint32)
		binary.LittleEndian.PutUint64(b[22:], math.MaxUint64-2*math.MaxUint32-math.MaxUint16-62) // sums to exactly 2^64-1
		return b
	}, ErrCorrupt, 12, "truncated"},
	// The metadata is not covered by the checksum (the spec's SHA-256 covers
	// the object only), so lengths shifted between the two text fields
	// decode as "namet" and "ext/plain". Listed to record the limit.
	{"metadata_lengths_shifted_undetectable", func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[14:], 5)
		binary.LittleEndian.PutUint32(b[18:], 9)
		return b
	}, nil, 0, ""},
	{"format_id_other", func(b []byte) []byte { b[66] = '2'; return b }, ErrFormatID, 62, "format ID"},
	{"format_id_other_length", func(b []byte) []byte {
		return sidecar("fmt/10", "name", "text/plain", []byte("payload"))
	}, ErrFormatID, 12, "format ID"},
	{"format_id_invalid_utf8", func(b []byte) []byte { b[66] = 0xff; return b }, ErrFormatID, 62, "format ID"},
	{"file_name_invalid_utf8", func(b []byte) []byte { b[67] = 0xc3; return b }, ErrCorrupt, 67, "file name is not valid UTF-8"},
	{"media_type_invalid_utf8", func(b []byte) []byte { b[80] = 0xff; return b }, ErrCorrupt, 71, "media type is not valid UTF-8"},
	{"file_name_empty", func(b []byte) []byte {
		return sidecar("fmt/1", "", "text/plain", []byte("payload"))
	}, ErrCorrupt, 67, "file name is empty"},
	{"file_name_whitespace", func(b []byte) []byte { copy(b[67:], "  \t "); return b }, ErrCorrupt, 67, "file name is empty"},
	{"media_type_empty", func(b []byte) []byte {
		return sidecar("fmt/1", "name", "", []byte("payload"))
	}, ErrCorrupt, 71, "media type is empty"},
	{"object_bit_flip", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, ErrChecksum, 30, "SHA-256"},
	{"digest_bit_flip", func(b []byte) []byte { b[30] ^= 0x80; return b }, ErrChecksum, 30, "SHA-256"},
	{"digest_zeroed", func(b []byte) []byte { clear(b[30:62]); return b }, ErrChecksum, 30, "SHA-256"},
}

func TestReadRejectsCorruption(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newTestStore(t, nil)
			damaged := c.damage(sidecar("fmt/1", "name", "text/plain", []byte("payload")))
			writeFile(t, s.Path(2), damaged)
			if c.message == "" { // a damage the format cannot detect
				if _, err := s.Read(2); err != nil {
					t.Fatalf("Read = %v", err)
				}
				return
			}
			for _, mode := range []string{"Read", "VerifyAll"} {
				var err error
				if mode == "Read" {
					var obj Object
					obj, err = s.Read(2)
					if err != nil && (obj.Bytes != nil || obj.FileName != "") {
						t.Fatalf("Read returned data with an error")
					}
				} else {
					err = s.VerifyAll([]uint64{2})
				}
				if !errors.Is(err, c.class) {
					t.Fatalf("%s = %v, want %v", mode, err, c.class)
				}
				// A format-ID mismatch is a deploy problem, not corruption;
				// a checksum mismatch is both.
				if errors.Is(err, ErrCorrupt) != (c.class != ErrFormatID) {
					t.Fatalf("%s = %v: wrong ErrCorrupt classification", mode, err)
				}
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("%s = %v, want a *FormatError", mode, err)
				}
				if fe.Path != s.Path(2) || fe.Position != 2 || fe.Offset != c.offset || !strings.Contains(fe.What, c.message) {
					t.Fatalf("%s = %+v, want offset %d and %q", mode, fe, c.offset, c.message)
				}
			}
		})
	}
}

// A header declaring far more bytes than the file holds is rejected before
// the declared size is allocated.
func TestReadBoundsAllocationByFileSize(t *testing.T) {
	s, _ := newTestStore(t, nil)
	for _, declared := range []uint64{64 << 20, 1 << 40, math.MaxInt64} {
		b := sidecar("fmt/1", "name", "text/plain", []byte("payload"))
		binary.LittleEndian.PutUint64(b[22:], declared)
		writeFile(t, s.Path(2), b)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := s.Read(2)
		runtime.ReadMemStats(&after)
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("declared %d: Read = %v", declared, err)
		}
		if n := after.TotalAlloc - before.TotalAlloc; n > 1<<20 {
			t.Fatalf("declared %d: Read allocated %d bytes before rejecting", declared, n)
		}
	}
}

func TestReadRejectsNonRegularFile(t *testing.T) {
	s, _ := newTestStore(t, nil)
	if err := os.Mkdir(s.Path(2), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read of a directory = %v, want ErrCorrupt", err)
	}
}

// An I/O failure while reading is reported as such, never as corruption
// (the bytes may be fine).
func TestReadIOErrorIsNotCorrupt(t *testing.T) {
	s, dir := newTestStore(t, nil)
	if err := s.Install(2, "a", "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	for _, op := range []int{1, 2, 3, 4} { // open, stat, read header, read metadata
		fsys := &faultFS{failAt: op}
		s2, _ := newStore(dir, "ns", "fmt/1", fsys)
		_, err := s2.Read(2)
		if !errors.Is(err, errInjected) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "position 2") {
			t.Fatalf("fault at %v: Read = %v", fsys.log, err)
		}
	}
}

func TestVerifyAllReportsEveryFailureWithoutCleanup(t *testing.T) {
	s, dir := newTestStore(t, nil)
	for p := uint64(1); p <= 3; p++ {
		if err := s.Install(p, "a", "b", []byte{byte(p)}); err != nil {
			t.Fatal(err)
		}
	}
	b := readFile(t, s.Path(2))
	b[len(b)-1] ^= 0xff
	writeFile(t, s.Path(2), b)
	writeFile(t, s.path(4, true), []byte("temp"))
	writeFile(t, filepath.Join(dir, "ns-01.pending-object"), []byte("junk"))
	before := dirNames(t, dir)

	if err := s.VerifyAll(nil); err != nil {
		t.Fatal(err)
	}
	if err := s.VerifyAll([]uint64{1, 3, 1}); err != nil {
		t.Fatal(err)
	}
	err := s.VerifyAll([]uint64{1, 2, 5, 3, 2})
	if !errors.Is(err, ErrChecksum) || !errors.Is(err, ErrCorrupt) || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("VerifyAll = %v, want checksum and not-exist failures", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "position 2,") || !strings.Contains(msg, "position 5:") || strings.Contains(msg, "position 1") ||
		!strings.Contains(msg, "2 of 4 positions failed") {
		t.Fatalf("VerifyAll message does not name exactly the failing positions:\n%s", msg)
	}
	if got := dirNames(t, dir); !slices.Equal(got, before) {
		t.Fatalf("VerifyAll changed the directory: %v -> %v", before, got)
	}
}

// malformed holds names Reconcile and DeleteAll must leave alone for
// namespace "ns".
var malformed = []string{
	"ns-01.pending-object",
	"ns-00.pending-object.tmp",
	"ns-1.pending-object.bak",
	"ns-1.pending-object.tmp.bak",
	"ns2-1.pending-object",
	"ns2-1.pending-object.tmp",
	"ns-a-1.pending-object",
	"NS-1.pending-object",
	"ns-18446744073709551616.pending-object",
	"ns-18446744073709551616.pending-object.tmp",
	"ns-+1.pending-object",
	"ns-.pending-object",
	"ns-x.pending-object",
	"unrelated.txt",
}

func plantMalformed(t *testing.T, dir string) {
	for _, name := range malformed {
		writeFile(t, filepath.Join(dir, name), []byte(name))
	}
}

func checkMalformedUntouched(t *testing.T, dir string) {
	t.Helper()
	for _, name := range malformed {
		if got, err := os.ReadFile(filepath.Join(dir, name)); err != nil || string(got) != name {
			t.Errorf("%s was touched: %v", name, err)
		}
	}
}

func TestReconcile(t *testing.T) {
	s, dir := newTestStore(t, nil)
	for _, p := range []uint64{1, 2, 18446744073709551615} {
		if err := s.Install(p, "a", "b", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, s.path(1, true), []byte("temp of a referenced position"))
	writeFile(t, s.path(3, true), []byte("temp of an unknown position"))
	writeFile(t, s.Path(4), []byte("an unreferenced final, even corrupt"))
	plantMalformed(t, dir)

	if err := s.Reconcile([]uint64{1, 1}); err != nil {
		t.Fatal(err)
	}
	want := slices.Sorted(slices.Values(append([]string{"ns-1.pending-object"}, malformed...)))
	if got := dirNames(t, dir); !slices.Equal(got, want) {
		t.Fatalf("after Reconcile\n%v\nwant\n%v", got, want)
	}
	checkMalformedUntouched(t, dir)
	if _, err := s.Read(1); err != nil {
		t.Fatal(err)
	}
}

func TestReconcileVerifiesReferencedAfterCleanup(t *testing.T) {
	s, dir := newTestStore(t, nil)
	if err := s.Install(1, "a", "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.Path(2), []byte("corrupt and referenced"))
	writeFile(t, s.path(5, true), []byte("temp"))
	err := s.Reconcile([]uint64{1, 2, 3})
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), "position 2,") || !strings.Contains(err.Error(), "position 3:") {
		t.Fatalf("Reconcile = %v, want position 2 corrupt and position 3 missing", err)
	}
	// Cleanup still happened; the corrupt referenced file is the caller's
	// to rebuild, not Reconcile's to delete.
	if got := dirNames(t, dir); !slices.Equal(got, []string{"ns-1.pending-object", "ns-2.pending-object"}) {
		t.Fatalf("directory %v", got)
	}
}

// The directory is synced only if something was removed, and before the
// referenced positions are verified.
func TestReconcileSyncsDirectoryOnlyAfterRemoval(t *testing.T) {
	fsys := &faultFS{}
	s, dir := newTestStore(t, fsys)
	if err := s.Install(1, "a", "b", []byte("x")); err != nil {
		t.Fatal(err)
	}
	plantMalformed(t, dir)
	fsys.log = nil
	if err := s.Reconcile([]uint64{1}); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(fsys.log, func(op string) bool { return strings.HasPrefix(op, "syncdir") }) {
		t.Fatalf("synced the directory with nothing removed: %v", fsys.log)
	}

	writeFile(t, s.path(2, true), nil)
	fsys.log = nil
	if err := s.Reconcile([]uint64{1}); err != nil {
		t.Fatal(err)
	}
	want := []string{"readdir", "unlink ns-2.pending-object.tmp", "syncdir", "open ns-1.pending-object"}
	var got []string
	for _, op := range fsys.log {
		if op == "readdir "+filepath.Base(dir) || op == "syncdir "+filepath.Base(dir) {
			op = strings.Fields(op)[0]
		}
		if !slices.Contains([]string{"stat", "read", "close"}, strings.Fields(op)[0]) {
			got = append(got, op)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Reconcile steps %v, want %v", got, want)
	}
}

func TestReconcileMissingDirectory(t *testing.T) {
	s, err := New(filepath.Join(t.TempDir(), "missing"), "ns", "fmt/1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reconcile(nil); err != nil {
		t.Fatalf("Reconcile(nil) = %v", err)
	}
	if err := s.Reconcile([]uint64{1}); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Reconcile([1]) = %v, want fs.ErrNotExist", err)
	}
}

// A directory that carries a recognised name is reported, not removed.
func TestReconcileLeavesDirectoriesAlone(t *testing.T) {
	s, dir := newTestStore(t, nil)
	if err := os.Mkdir(s.path(9, true), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, s.path(8, true), nil)
	err := s.Reconcile(nil)
	if err == nil || !strings.Contains(err.Error(), "position 9") {
		t.Fatalf("Reconcile = %v, want an error naming position 9", err)
	}
	if got := dirNames(t, dir); !slices.Equal(got, []string{"ns-9.pending-object.tmp"}) {
		t.Fatalf("directory %v", got)
	}
}

func TestDeleteAll(t *testing.T) {
	fsys := &faultFS{}
	s, dir := newTestStore(t, fsys)
	for _, p := range []uint64{0, 1, 20001} {
		if err := s.Install(p, "a", "b", []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, s.path(7, true), nil)
	writeFile(t, s.Path(8), []byte("corrupt"))
	plantMalformed(t, dir)
	fsys.log = nil
	if err := s.DeleteAll(); err != nil {
		t.Fatal(err)
	}
	if got, want := dirNames(t, dir), slices.Sorted(slices.Values(malformed)); !slices.Equal(got, want) {
		t.Fatalf("after DeleteAll\n%v\nwant\n%v", got, want)
	}
	checkMalformedUntouched(t, dir)
	if last := fsys.log[len(fsys.log)-1]; !strings.HasPrefix(last, "syncdir") {
		t.Fatalf("DeleteAll did not end with a directory sync: %v", fsys.log)
	}

	// With nothing to remove it still syncs before success.
	fsys.log = nil
	if err := s.DeleteAll(); err != nil {
		t.Fatal(err)
	}
	if len(fsys.log) != 2 || !strings.HasPrefix(fsys.log[1], "syncdir") {
		t.Fatalf("steps %v", fsys.log)
	}

	// A failed directory sync is a failure.
	fsys.failAt, fsys.n = 2, 0
	if err := s.DeleteAll(); !errors.Is(err, errInjected) {
		t.Fatalf("DeleteAll with a failing sync = %v", err)
	}
}

func TestDeleteAllMissingDirectory(t *testing.T) {
	s, err := New(filepath.Join(t.TempDir(), "missing"), "ns", "fmt/1")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteAll(); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("DeleteAll = %v, want fs.ErrNotExist", err)
	}
}

func TestPositions(t *testing.T) {
	s, dir := newTestStore(t, nil)
	if ps, err := s.Positions(); err != nil || len(ps) != 0 {
		t.Fatalf("Positions of an empty store = %v, %v", ps, err)
	}
	for _, p := range []uint64{10, 9, 100, 0, math.MaxUint64} {
		if err := s.Install(p, "a", "b", nil); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, s.path(5, true), nil)
	plantMalformed(t, dir)
	ps, err := s.Positions()
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{0, 9, 10, 100, math.MaxUint64}; !slices.Equal(ps, want) {
		t.Fatalf("Positions = %v, want %v", ps, want)
	}
}

// Install of distinct positions and Reads may run at once (the store keeps
// no mutable state); run with -race.
func TestConcurrentDistinctPositions(t *testing.T) {
	s, _ := newTestStore(t, nil)
	const workers, each = 8, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers*each*2)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				p := uint64(w*each + i)
				data := []byte(fmt.Sprint("object ", p))
				if err := s.Install(p, "a", "b", data); err != nil {
					errs <- err
					continue
				}
				if obj, err := s.Read(p); err != nil || !bytes.Equal(obj.Bytes, data) {
					errs <- fmt.Errorf("position %d: %v", p, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if ps, _ := s.Positions(); len(ps) != workers*each {
		t.Fatalf("%d positions", len(ps))
	}
}

// The concurrency boundary, shown rather than papered over: two Installs of
// the same position that overlap can put a torn final file in place, which
// is why the caller must serialise them. Install B starts while Install A
// is between its sync and its link, replaces A's temporary file and dies
// halfway through its write; A then links B's torn file. Read catches it.
func TestConcurrencyBoundarySamePositionInstalls(t *testing.T) {
	dirFS := &faultFS{}
	a, dir := newTestStore(t, dirFS)
	bFS := &faultFS{failAt: 4, crash: true} // lstat, unlink, create, dies halfway through its write
	b, err := newStore(dir, "ns", "fmt/1", bFS)
	if err != nil {
		t.Fatal(err)
	}
	dirFS.before = func(op, name string) {
		if op == "link" {
			dirFS.before = nil
			if err := b.Install(1, "b", "b", randomBytes(1000, 2)); !errors.Is(err, errCrashed) {
				t.Errorf("B = %v", err)
			}
		}
	}
	if err := a.Install(1, "a", "a", randomBytes(1000, 1)); err != nil {
		t.Fatalf("A = %v", err)
	}
	if _, err := a.Read(1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read after overlapping installs = %v; the boundary test no longer shows the hazard", err)
	}
}
