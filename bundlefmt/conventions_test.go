package bundlefmt

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
)

// docField is one row of an "| off | size | field |" table of docs/format.md.
type docField struct{ off, size, field string }

func num(n int) string { return strconv.Itoa(n) }

// TestLayoutMatchesDocs holds conventions.go's layout constants to the tables of
// docs/format.md: the same fields at the same offsets with the same sizes,
// in the same order.
func TestLayoutMatchesDocs(t *testing.T) {
	tables := docTables(t, "../docs/format.md")
	want := map[string][]docField{
		"Slot envelope": {
			{num(envMagicOff), num(magicLen), "magic"},
			{num(envVersionOff), num(u16Len), "version"},
			{num(envKindOff), num(u8Len), "kind"},
			{num(envReservedOff), num(u8Len), "reserved"},
			{num(envEpochOff), num(u64Len), "slot epoch"},
			{num(envSeqOff), num(u64Len), "seq"},
			{num(envNonceOff), num(u64Len), "nonce"},
			{num(envObjectSizeOff), num(u64Len), "object size"},
			{num(envFooterOffsetOff), num(u64Len), "footer offset"},
			{num(envFooterLengthOff), num(u64Len), "footer length"},
			{num(envCRCOff), num(EnvelopeSize - envCRCOff), "crc"},
		},
		"Directory entry": {
			{num(entStreamOff), num(streamIDLen), "stream ID"},
			{num(entFirstRecordOff), num(u64Len), "first record"},
			{num(entCountOff), num(u32Len), "record count"},
			{num(entDataOffsetOff), num(u64Len), "data offset"},
			{num(entDataCRCOff), num(EntryFixed - entDataCRCOff), "DataCRC"},
			{num(entLengthOff(0)), fmt.Sprintf("%d·n", entLengthLen), "stored-record lengths"},
			{fmt.Sprintf("%d+%dn", EntryFixed, entTimestampOff(1, 0)-EntryFixed), fmt.Sprintf("%d·n", entTimestampLen), "record timestamps"},
			{fmt.Sprintf("%d+%dn", EntryFixed, entBatchEndOff(1)-EntryFixed), "⌈n/8⌉", "batch-end flags"},
		},
		"Chunk index row": {
			{num(rowStreamOff), num(streamIDLen), "stream ID"},
			{num(rowFirstRecordOff), num(u64Len), "first record"},
			{num(rowCountOff), num(u32Len), "record count"},
			{num(rowChunkBytesOff), num(u64Len), "chunk bytes"},
			{num(rowEntryOffsetOff), num(u64Len), "directory entry offset"},
			{num(rowEntryLengthOff), num(u32Len), "directory entry length"},
			{num(rowEntryCRCOff), num(RowSize - rowEntryCRCOff), "entry CRC"},
		},
		"Trailer": {
			{num(trMagicOff), num(magicLen), "magic"},
			{num(trVersionOff), num(u32Len), "format version"},
			{num(trDirOffsetOff), num(u64Len), "directory offset"},
			{num(trDirLengthOff), num(u64Len), "directory length"},
			{num(trDirCRCOff), num(u32Len), "directory CRC"},
			{num(trIndexLengthOff), num(u64Len), "index length"},
			{num(trIndexCRCOff), num(TrailerSize - trIndexCRCOff), "index CRC"},
		},
	}
	for section, fields := range want {
		got := tables[section]
		if len(got) != len(fields) {
			t.Errorf("docs/format.md %q: %d table rows, conventions.go has %d fields", section, len(got), len(fields))
			continue
		}
		for i, w := range fields {
			g := got[i]
			if g.off != w.off || g.size != w.size || !strings.HasPrefix(g.field, w.field) {
				t.Errorf("docs/format.md %q row %d: off %s size %s %q; conventions.go: off %s size %s %q",
					section, i, g.off, g.size, g.field, w.off, w.size, w.field)
			}
		}
	}
	// Each layout's fixed fields end where the next begins, and the last
	// ends at the structure's size: the sizes in the tables add up.
	for section, size := range map[string]int{"Slot envelope": EnvelopeSize, "Chunk index row": RowSize, "Trailer": TrailerSize, "Directory entry": EntryFixed} {
		end := 0
		for _, f := range tables[section] {
			off, err1 := strconv.Atoi(f.off)
			n, err2 := strconv.Atoi(f.size)
			if err1 != nil || err2 != nil {
				break // the entry's per-record tables
			}
			if off != end {
				t.Errorf("docs/format.md %q: %s at %d, the field before ends at %d", section, f.field, off, end)
			}
			end = off + n
		}
		if end != size {
			t.Errorf("docs/format.md %q: fixed fields end at %d, want %d", section, end, size)
		}
	}
	if got, want := EntryLen(1), minEntryLen; got != want {
		t.Errorf("EntryLen(1) = %d, minEntryLen = %d", got, want)
	}
	if len(envelopeMagic) != magicLen || len(trailerMagic) != magicLen || len(StreamID{}) != streamIDLen {
		t.Errorf("magics %q %q or a stream ID are not %d and %d bytes", envelopeMagic, trailerMagic, magicLen, streamIDLen)
	}
}

// docTables returns, per "## " section of the markdown file, the rows of its
// first table whose header begins "| off | size |".
func docTables(t *testing.T, path string) map[string][]docField {
	t.Helper()
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tables := map[string][]docField{}
	section, state := "", 0 // 0: looking for a header, 1: separator, 2: rows
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "## "):
			section, state = strings.TrimPrefix(line, "## "), 0
		case state == 0 && strings.HasPrefix(line, "| off | size |") && tables[section] == nil:
			state = 1
		case state == 1:
			state = 2
		case state == 2 && strings.HasPrefix(line, "|"):
			cells := strings.Split(line, "|")
			if len(cells) < 5 {
				t.Fatalf("%s %q: row %q", path, section, line)
			}
			tables[section] = append(tables[section], docField{
				strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2]), strings.TrimSpace(cells[3])})
		case state == 2:
			state = 3 // the table ended
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tables
}

func TestChecksum(t *testing.T) {
	if got := CRC32C([]byte("123456789")); got != 0xe3069283 {
		t.Fatalf("check value 0x%08x", got)
	}
	h := NewCRC32C()
	h.Write([]byte("1234"))
	h.Write([]byte("56789"))
	if got := h.Sum32(); got != 0xe3069283 {
		t.Fatalf("streaming check value 0x%08x", got)
	}
	if got := UpdateCRC32C(CRC32C([]byte("1234")), []byte("56789")); got != 0xe3069283 {
		t.Fatalf("update check value 0x%08x", got)
	}
}

func TestCombine(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	for i := 0; i < 500; i++ {
		a, b := randBytes(r, r.IntN(3000)), randBytes(r, r.IntN(3000))
		if i%50 == 0 {
			b = randBytes(r, 1<<20+r.IntN(100))
		}
		want := CRC32C(append(append([]byte(nil), a...), b...))
		if got := CombineCRC32C(CRC32C(a), CRC32C(b), int64(len(b))); got != want {
			t.Fatalf("combine(%d, %d bytes) = 0x%08x, want 0x%08x", len(a), len(b), got, want)
		}
	}
	if got := CombineCRC32C(0x12345678, 0, 0); got != 0x12345678 {
		t.Fatalf("combine with empty = 0x%08x", got)
	}
	// A combine over a length no test could hold in memory: associativity.
	x, y, z := uint32(0xdeadbeef), uint32(0x01020304), uint32(0xcafef00d)
	const lb, lc = 3 << 40, 5<<33 + 7
	left := CombineCRC32C(CombineCRC32C(x, y, lb), z, lc)
	right := CombineCRC32C(x, CombineCRC32C(y, z, lc), lb+lc)
	if left != right {
		t.Fatalf("combine not associative: 0x%08x 0x%08x", left, right)
	}
}

// TestCombineCuts: every cut of random buffers combines back to the whole.
func TestCombineCuts(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < 200; i++ {
		b := randBytes(r, r.IntN(5000))
		cut := r.IntN(len(b) + 1)
		if got, want := CombineCRC32C(CRC32C(b[:cut]), CRC32C(b[cut:]), int64(len(b)-cut)), CRC32C(b); got != want {
			t.Fatalf("combine at %d of %d: %08x, want %08x", cut, len(b), got, want)
		}
	}
}

func BenchmarkCombine(b *testing.B) {
	for b.Loop() {
		_ = CombineCRC32C(0x12345678, 0x9abcdef0, 4<<20+12345)
	}
}
