package pendingobj

import (
	"bytes"
	"crypto/sha256"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite testdata golden files from the hand-written bytes in the tests")

// goldenHello is the sidecar for namespace "ns", position 7, format ID
// "fmt/1", file name "ñ.txt" (6 UTF-8 bytes for 5 characters), media type
// "text/plain" and object "hello", written out by hand from the spec.
var goldenHello = concat(
	// offset 0, magic (12 bytes)
	[]byte{'K', 'S', 'P', 'E', 'N', 'D', 'I', 'N', 'G', '0', '1', '\n'},
	// offset 12, u16 LE format-ID byte length = 5
	[]byte{0x05, 0x00},
	// offset 14, u32 LE file-name byte length = 6 ("ñ" is 0xC3 0xB1)
	[]byte{0x06, 0x00, 0x00, 0x00},
	// offset 18, u32 LE media-type byte length = 10
	[]byte{0x0a, 0x00, 0x00, 0x00},
	// offset 22, u64 LE object byte length = 5
	[]byte{0x05, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
	// offset 30, SHA-256("hello"), the object bytes only
	[]byte{
		0x2c, 0xf2, 0x4d, 0xba, 0x5f, 0xb0, 0xa3, 0x0e, 0x26, 0xe8, 0x3b, 0x2a, 0xc5, 0xb9, 0xe2, 0x9e,
		0x1b, 0x16, 0x1e, 0x5c, 0x1f, 0xa7, 0x42, 0x5e, 0x73, 0x04, 0x33, 0x62, 0x93, 0x8b, 0x98, 0x24,
	},
	// offset 62, format ID
	[]byte("fmt/1"),
	// offset 67, file name
	[]byte{0xc3, 0xb1, '.', 't', 'x', 't'},
	// offset 73, media type
	[]byte("text/plain"),
	// offset 83, object; the file is 88 bytes
	[]byte("hello"),
)

// goldenEmpty is position 0 with an empty object (allowed by docs/format.md).
var goldenEmpty = concat(
	[]byte("KSPENDING01\n"),
	[]byte{0x05, 0x00},             // format-ID length 5
	[]byte{0x01, 0x00, 0x00, 0x00}, // file-name length 1
	[]byte{0x18, 0x00, 0x00, 0x00}, // media-type length 24
	make([]byte, 8),                // object length 0
	[]byte{ // SHA-256 of no bytes
		0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
		0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
	},
	[]byte("fmt/1"),
	[]byte("e"),
	[]byte("application/octet-stream"),
)

func concat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

// The untyped offsets in format.go agree with an encoding built straight
// from the field list.
func TestLayoutConstants(t *testing.T) {
	b := sidecar("f", "n", "m", []byte("o"))
	sum := sha256.Sum256([]byte("o"))
	if len(b)-4 != headerLen || string(b[:offFormatIDLen]) != magic || !bytes.Equal(b[offDigest:headerLen], sum[:]) ||
		b[offFileNameLen] != 1 || b[offMediaTypeLen] != 1 || b[offObjectLen] != 1 {
		t.Fatal("offsets disagree with the layout")
	}
	if len(goldenHello) != 88 || len(goldenEmpty) != 62+5+1+24 {
		t.Fatalf("golden lengths %d, %d", len(goldenHello), len(goldenEmpty))
	}
}

func TestGolden(t *testing.T) {
	for _, g := range []struct {
		file      string
		position  uint64
		fileName  string
		mediaType string
		object    []byte
		want      []byte
	}{
		{"ns-7.pending-object", 7, "ñ.txt", "text/plain", []byte("hello"), goldenHello},
		{"ns-0.pending-object", 0, "e", "application/octet-stream", []byte{}, goldenEmpty},
	} {
		t.Run(g.file, func(t *testing.T) {
			golden := filepath.Join("testdata", g.file)
			if *rewrite {
				if err := os.WriteFile(golden, g.want, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			onDisk, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(onDisk, g.want) {
				t.Fatalf("%s differs from the hand-written bytes (run with -rewrite?)", golden)
			}

			// Install writes exactly the golden bytes.
			s, dir := newTestStore(t, nil)
			if err := s.Install(g.position, g.fileName, g.mediaType, g.object); err != nil {
				t.Fatal(err)
			}
			got := readFile(t, filepath.Join(dir, g.file))
			if !bytes.Equal(got, g.want) {
				t.Fatalf("installed bytes\n%x\nwant\n%x", got, g.want)
			}

			// Read decodes the golden file placed by hand.
			s2, dir2 := newTestStore(t, nil)
			writeFile(t, filepath.Join(dir2, g.file), onDisk)
			obj, err := s2.Read(g.position)
			if err != nil {
				t.Fatal(err)
			}
			if obj.FileName != g.fileName || obj.MediaType != g.mediaType || !bytes.Equal(obj.Bytes, g.object) {
				t.Fatalf("read %+v", obj)
			}
		})
	}
}

func TestPathNames(t *testing.T) {
	s, err := New("/var/lib/nova/pending", "star_01-a", "fmt/1")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		position uint64
		final    string
	}{
		{0, "/var/lib/nova/pending/star_01-a-0.pending-object"},
		{10000001, "/var/lib/nova/pending/star_01-a-10000001.pending-object"},
		{math.MaxUint64, "/var/lib/nova/pending/star_01-a-18446744073709551615.pending-object"},
	} {
		if got := s.Path(c.position); got != c.final {
			t.Errorf("Path(%d) = %q, want %q", c.position, got, c.final)
		}
		if got := s.path(c.position, true); got != c.final+".tmp" {
			t.Errorf("temp path(%d) = %q", c.position, got)
		}
	}
}

func TestParseName(t *testing.T) {
	for _, c := range []struct {
		name     string
		position uint64
		temp, ok bool
	}{
		{"ns-0.pending-object", 0, false, true},
		{"ns-1.pending-object", 1, false, true},
		{"ns-1.pending-object.tmp", 1, true, true},
		{"ns-18446744073709551615.pending-object", math.MaxUint64, false, true},
		{"ns-18446744073709551615.pending-object.tmp", math.MaxUint64, true, true},

		{"ns-01.pending-object", 0, false, false},     // leading zero
		{"ns-00.pending-object", 0, false, false},     // leading zero
		{"ns-01.pending-object.tmp", 0, false, false}, // leading zero, temp
		{"ns-1.pending-object.bak", 0, false, false},
		{"ns-1.pending-object.tmp.bak", 0, false, false},
		{"ns2-1.pending-object", 0, false, false},                   // similarly prefixed namespace
		{"ns-a-1.pending-object", 0, false, false},                  // namespace "ns-a"
		{"ns-1-2.pending-object", 0, false, false},                  // not a number
		{"NS-1.pending-object", 0, false, false},                    // namespaces are case-sensitive
		{"ns-18446744073709551616.pending-object", 0, false, false}, // u64 overflow
		{"ns-99999999999999999999.pending-object", 0, false, false},
		{"ns-.pending-object", 0, false, false},
		{"ns-+1.pending-object", 0, false, false},
		{"ns--1.pending-object", 0, false, false},
		{"ns- 1.pending-object", 0, false, false},
		{"ns-1 .pending-object", 0, false, false},
		{"ns-0x1.pending-object", 0, false, false},
		{"ns-1.PENDING-OBJECT", 0, false, false},
		{"ns-1", 0, false, false},
		{"ns-1.pending-object/", 0, false, false},
		{"ns-١.pending-object", 0, false, false}, // Arabic-Indic digit one
		{"xns-1.pending-object", 0, false, false},
	} {
		p, temp, ok := parseName("ns-", c.name)
		if ok != c.ok || ok && (p != c.position || temp != c.temp) {
			t.Errorf("parseName(%q) = %d, %v, %v; want %d, %v, %v", c.name, p, temp, ok, c.position, c.temp, c.ok)
		}
	}
}

// FuzzParseName: a recognised name is exactly the name the store would give
// that position, so recognition and naming agree.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"ns-0.pending-object", "ns-01.pending-object", "ns-18446744073709551616.pending-object", "ns-7.pending-object.tmp"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		p, temp, ok := parseName("ns-", name)
		if !ok {
			return
		}
		if want := string(appendName(nil, "ns", p, temp)); want != name {
			t.Fatalf("parseName(%q) = %d, %v; formatted back %q", name, p, temp, want)
		}
	})
}

func TestNewValidation(t *testing.T) {
	long := strings.Repeat("a", 255)
	for _, c := range []struct {
		name, dir, ns, fid string
		ok                 bool
	}{
		{"minimal", "d", "a", "f", true},
		{"all classes", "d", "AZaz09-_", "nova-auditor-part/1", true},
		{"namespace 255", "d", long, "f", true},
		{"format ID 65535 bytes", "d", "ns", strings.Repeat("f", math.MaxUint16), true},
		{"format ID non-ASCII UTF-8", "d", "ns", "fmt/é", true},
		{"empty dir", "", "ns", "f", false},
		{"empty namespace", "d", "", "f", false},
		{"namespace 256", "d", long + "a", "f", false},
		{"namespace dot", "d", "a.b", "f", false},
		{"namespace dotdot", "d", "..", "f", false},
		{"namespace slash", "d", "a/b", "f", false},
		{"namespace space", "d", "a b", "f", false},
		{"namespace NUL", "d", "a\x00", "f", false},
		{"namespace non-ASCII letter", "d", "é", "f", false},
		{"namespace plus", "d", "a+b", "f", false},
		{"empty format ID", "d", "ns", "", false},
		{"format ID 65536 bytes", "d", "ns", strings.Repeat("f", math.MaxUint16+1), false},
		{"format ID invalid UTF-8", "d", "ns", "fmt\xff", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := New(c.dir, c.ns, c.fid)
			if c.ok != (err == nil) {
				t.Fatalf("New: %v", err)
			}
			if !c.ok {
				if s != nil || !isInvalid(err) || !strings.HasPrefix(err.Error(), "pendingobj: invalid argument: ") {
					t.Fatalf("New: %v, want ErrInvalidArgument and fs.ErrInvalid", err)
				}
			}
		})
	}
}

func TestNewTouchesNoFile(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-yet")
	if _, err := New(missing, "ns", "fmt/1"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(missing); !os.IsNotExist(err) {
		t.Fatalf("New created or touched %s: %v", missing, err)
	}
	fsys := &faultFS{}
	if _, err := newStore(missing, "ns", "fmt/1", fsys); err != nil {
		t.Fatal(err)
	}
	if len(fsys.log) != 0 {
		t.Fatalf("newStore performed filesystem operations: %v", fsys.log)
	}
}

func TestMetadataValidation(t *testing.T) {
	for _, v := range []string{"", " ", "\t\r\n", "\u00a0", "\u2003\u3000", "\xff", "a\xc3"} {
		if err := checkMetadata("file name", v); !isInvalid(err) {
			t.Errorf("checkMetadata(%q) = %v, want invalid", v, err)
		}
	}
	for _, v := range []string{"a", " a ", "ñ", "part#1"} {
		if err := checkMetadata("file name", v); err != nil {
			t.Errorf("checkMetadata(%q) = %v", v, err)
		}
	}
}
