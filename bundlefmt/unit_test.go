package bundlefmt

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func TestErrorClasses(t *testing.T) {
	if !errors.Is(ErrChecksum, ErrCorrupt) || errors.Is(ErrCorrupt, ErrChecksum) || errors.Is(ErrUnsupportedVersion, ErrCorrupt) {
		t.Fatal("sentinel relations")
	}
	err := checksumErr("k", 7, "x.crc", 1, 2)
	if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrChecksum) || errors.Is(err, ErrUnsupportedVersion) || ClassOf(err) != ClassChecksum {
		t.Fatal("checksum error classes")
	}
	var fe *FormatError
	if !errors.As(err, &fe) || fe.Offset != 7 || !strings.Contains(err.Error(), "k: x.crc at offset 7") {
		t.Fatalf("FormatError: %v", err)
	}
	if ClassOf(corruptf("", 4, "v", "bad")) != ClassCorrupt || ClassOf(versionErr("", 4, "v", 2, nil)) != ClassUnsupported ||
		ClassOf(nil) != "" || ClassOf(ErrInvalid) != "" {
		t.Fatal("class names")
	}
}

func TestRecordRules(t *testing.T) {
	ok := [][]byte{{0x00}, {0x00, 'a'}, {0x08}, {0x01, 1, 0, 0}, {0x01, 2, 1, 0, 0, 1, 'n', 'v', 'b'}}
	for _, b := range ok {
		r, err := DecodeRecord(b)
		if err != nil {
			t.Fatalf("%x: %v", b, err)
		}
		re, err := AppendRecord(nil, r)
		if err != nil || !bytes.Equal(re, b) {
			t.Fatalf("%x re-encodes to %x, %v", b, re, err)
		}
	}
	bad := [][]byte{{}, {0x10}, {0x80}, {0x02}, {0x04, 'a'}, {0x07, 0}, {0x01}, {0x01, 0}, {0x03, 1}, {0x01, 1, 1},
		{0x01, 1, 1, 1}, {0x01, 1, 0, 2, 'v'}, {0x03, 1, 0, 0, 0, 0, 0}, {0x08, 0}, {0x09}, {0x0a}, {0x18}}
	for _, b := range bad {
		if _, err := DecodeRecord(b); classOf(err) != "corrupt" {
			t.Fatalf("%x: %v, want corrupt", b, err)
		}
	}
	// W chosen by the largest of count and lengths.
	for _, tc := range []struct {
		rec   Record
		flags byte
	}{
		{Record{Headers: []Header{{Name: make([]byte, 255)}}}, 0x01},
		{Record{Headers: []Header{{Value: make([]byte, 256)}}}, 0x03},
		{Record{Headers: make([]Header, 256)}, 0x03},
		{Record{Headers: []Header{{Value: make([]byte, 65535)}}}, 0x03},
		{Record{Headers: []Header{{Value: make([]byte, 65536)}}}, 0x05},
	} {
		b, err := AppendRecord(nil, tc.rec)
		if err != nil || b[0] != tc.flags {
			t.Fatalf("flags 0x%02x, want 0x%02x (%v)", b[0], tc.flags, err)
		}
		if n, _ := tc.rec.StoredLen(); n != len(b) {
			t.Fatalf("StoredLen %d, encoded %d", n, len(b))
		}
		info, err := ParseRecord(b)
		if err != nil || info.ContentBytes != tc.rec.ContentBytes() || info.Headers != len(tc.rec.Headers) {
			t.Fatalf("ParseRecord: %+v, %v", info, err)
		}
	}
}

func TestStreamID(t *testing.T) {
	const uuid = "00112233-4455-6677-8899-aabbccddeeff" // the one printed form, as psql shows it
	want := StreamID{0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff}
	for _, in := range []string{uuid, "00112233-4455-6677-8899-AABBCCDDEEFF", "00112233445566778899aabbccddeeff", "00112233445566778899AABBCCDDEEFF"} {
		s, err := ParseStreamID(in)
		if err != nil || s != want {
			t.Fatalf("ParseStreamID(%q) = %x, %v", in, s[:], err)
		}
	}
	if got := want.String(); got != uuid {
		t.Fatalf("String() = %s, want %s", got, uuid)
	}
	for verb, got := range map[string]string{"%s": fmt.Sprintf("%s", want), "%v": fmt.Sprintf("%v", want)} { //nolint:staticcheck // S1025: the test is of what fmt prints
		if got != uuid {
			t.Fatalf("%s prints %s, want %s", verb, got, uuid)
		}
	}
	if b, err := want.MarshalText(); err != nil || string(b) != uuid {
		t.Fatalf("MarshalText = %s, %v", b, err)
	}
	if v := want.LogValue(); v.Kind() != slog.KindString || v.String() != uuid {
		t.Fatalf("LogValue = %v", v)
	}
	if k := SettledKey("b1", want, 1, 1000, 0); !strings.Contains(k, "/streams/00112233445566778899aabbccddeeff/") {
		t.Fatalf("a settled key spells the stream as 32 hex digits: %s", k)
	}
	for _, bad := range []string{"", "0011", "00112233445566778899aabbccddeefg", "00112233x4455-6677-8899-aabbccddeeff", "00112233445566778899aabbccddeeff0"} {
		if _, err := ParseStreamID(bad); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
	s := want
	var u StreamID
	if err := u.UnmarshalText([]byte(s.String())); err != nil || u != s {
		t.Fatal("text round trip")
	}
	if sid(1).Compare(sid(2)) >= 0 || sid(2).Compare(sid(2)) != 0 {
		t.Fatal("compare")
	}
}

func TestKeys(t *testing.T) {
	if k := SlotKey("s1", 3, 7); k != example1Key {
		t.Fatalf("slot key %s", k)
	}
	star, epoch, seq, err := ParseSlotKey(example1Key)
	if err != nil || star != "s1" || epoch != 3 || seq != 7 {
		t.Fatalf("%s %d %d %v", star, epoch, seq, err)
	}
	s, _ := ParseStreamID("00112233445566778899aabbccddeeff")
	if k := SettledKey("b1", s, 1, 1000, 0); k != example2Key {
		t.Fatalf("settled key %s", k)
	}
	p, err := ParseSettledKey("buckets/b.1_x-y/streams/00112233445566778899aabbccddeeff/00000000000000000001/09223372036854775807~2147483647")
	if err != nil || p.Bucket != "b.1_x-y" || p.Stream != s || p.StreamEpoch != 1 || p.FirstRecord != MaxNumber || p.Revision != MaxRevision {
		t.Fatalf("%+v %v", p, err)
	}
	if p.Key() != "buckets/b.1_x-y/streams/00112233445566778899aabbccddeeff/00000000000000000001/09223372036854775807~2147483647" {
		t.Fatal(p.Key())
	}
	for _, bad := range []string{
		"stars/s1/chain/00000000000000000000/00000000000000000007",  // epoch 0
		"stars/s1/chain/0000000000000000003/00000000000000000007",   // 19 digits
		"stars/s1/chain/00000000000000000003/09223372036854775808",  // 2^63
		"stars/S1/chain/00000000000000000003/00000000000000000007",  // uppercase star
		"stars/-s/chain/00000000000000000003/00000000000000000007",  // leading hyphen
		"stars/s.1/chain/00000000000000000003/00000000000000000007", // dot in star
		"/stars/s1/chain/00000000000000000003/00000000000000000007",
		"stars/s1/chain/00000000000000000003/00000000000000000007/",
		"stars/s1/chain/+0000000000000000003/00000000000000000007",
	} {
		if _, _, _, err := ParseSlotKey(bad); err == nil {
			t.Errorf("slot key %q accepted", bad)
		}
	}
	for _, bad := range []string{
		"buckets/b1/streams/00112233445566778899AABBCCDDEEFF/00000000000000000001/00000000000000001000~0",
		"buckets/b1/streams/00112233-4455-6677-8899-aabbccddeeff/00000000000000000001/00000000000000001000~0",
		"buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~01",
		"buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~",
		"buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000",
		"buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~2147483648",
		"buckets/b1/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~-1",
		"buckets/.b/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~0",
		"buckets/b1/streams/00112233445566778899aabbccddeeff/1/00000000000000001000~0",
	} {
		if _, err := ParseSettledKey(bad); err == nil {
			t.Errorf("settled key %q accepted", bad)
		}
	}
	long := strings.Repeat("a", 63)
	if !ValidStar(long) || ValidStar(long+"a") || !ValidBucket("a._-") || ValidBucket("_a") || ValidStar("a_b") {
		t.Fatal("name rules")
	}
	// ExpectFromKey tolerates a store prefix and a bucket named "stars".
	e, err := ExpectFromKey("pfx/x/" + example1Key)
	if err != nil || e.Kind != KindSlot || e.Epoch != 3 || e.Seq != 7 || !e.CheckKey {
		t.Fatalf("%+v %v", e, err)
	}
	e, err = ExpectFromKey("buckets/stars/streams/00112233445566778899aabbccddeeff/00000000000000000001/00000000000000001000~0")
	if err != nil || e.Kind != KindSettled || e.FirstRecord != 1000 || e.Stream != s {
		t.Fatalf("%+v %v", e, err)
	}
	if _, err := ExpectFromKey("stars/s1/chain/3/7"); err == nil {
		t.Fatal("non-canonical key accepted")
	}
}

// TestEnvelopeLevel: one bounded GET of [0, 60) classifies a slot.
func TestEnvelopeLevel(t *testing.T) {
	obj := readTestdata(t, "example1_flight.bin")
	env, err := ValidateEnvelope(obj[:EnvelopeSize], mustExpect(t, example1Key))
	if err != nil || env.Kind != KindFlight || env.FooterOffset != 73 {
		t.Fatalf("%+v %v", env, err)
	}
	if _, err := ValidateEnvelope(obj[:EnvelopeSize], mustExpect(t, example3Key)); classOf(err) != "corrupt" {
		t.Fatalf("wrong key: %v", err)
	}
	if _, err := ValidateEnvelope(obj[:EnvelopeSize], Expect{Kind: KindPoison}); classOf(err) != "corrupt" {
		t.Fatalf("flight as poison: %v", err)
	}
	// Another version may have another size: its version is reported even
	// when fewer than 60 bytes are there, without a v1 CRC verdict.
	short := append([]byte(nil), obj[:20]...)
	short[4] = 2
	_, err = DecodeEnvelope("k", short)
	var fe *FormatError
	if classOf(err) != ClassUnsupported || !errors.As(err, &fe) || fe.Version != 2 || fe.V1CRCMatches != nil {
		t.Fatalf("short v2 envelope: %#v", err)
	}
	if _, err := DecodeEnvelope("k", obj[:59]); classOf(err) != "corrupt" {
		t.Fatalf("59 bytes: %v", err)
	}
	if _, err := DecodeEnvelope("k", []byte("CH")); classOf(err) != "corrupt" {
		t.Fatalf("2 bytes: %v", err)
	}
}

// TestSearchStreamFrom checks the galloping search against a scan of the
// rows, for every start a caller may pass (every row before it sorts
// before the stream) and streams present, absent between rows, before the
// first row and after the last.
func TestSearchStreamFrom(t *testing.T) {
	var chunks []Chunk
	for i := 1; i <= 40; i++ {
		chunks = append(chunks, fixedChunk(t, StreamID{0: byte(3 * i)}, 0, 1, 10))
	}
	obj, err := EncodeFlight(1, 1, 7, chunks)
	if err != nil {
		t.Fatal(err)
	}
	f, err := OpenObjectFooter("slot", obj, EnvelopeSize)
	if err != nil {
		t.Fatal(err)
	}
	n := f.NumChunks()
	for b := 0; b < 256; b++ {
		s := StreamID{0: byte(b)}
		want := 0
		for ; want < n; want++ {
			if r := f.Row(want); bytes.Compare(r.Stream[:], s[:]) >= 0 {
				break
			}
		}
		for from := 0; from <= want; from++ {
			if got := f.SearchStreamFrom(from, s); got != want {
				t.Fatalf("SearchStreamFrom(%d, %02x...) = %d, want %d", from, b, got, want)
			}
		}
		if want < n && f.StreamAt(want) != f.Row(want).Stream {
			t.Fatalf("StreamAt(%d) = %s, Row says %s", want, f.StreamAt(want), f.Row(want).Stream)
		}
	}
}

func TestMarkKeysRoundTrip(t *testing.T) {
	for _, n := range []uint64{1, 7, 1 << 62} {
		for _, confirm := range []bool{false, true} {
			key := MarkKey("s-1", n)
			if confirm {
				key = MarkConfirmKey("s-1", n)
			}
			got, c, err := ParseMarkKey("s-1", key)
			if err != nil || got != n || c != confirm {
				t.Errorf("ParseMarkKey(%q) = %d, %v, %v; want %d, %v", key, got, c, err, n, confirm)
			}
		}
	}
	if MarkKey("s1", 3) != "stars/s1/auditor/marks/00000000000000000003" {
		t.Errorf("MarkKey = %q", MarkKey("s1", 3))
	}
	for _, bad := range []string{"stars/s2/auditor/marks/00000000000000000003", "stars/s1/auditor/marks/3",
		"stars/s1/auditor/marks/00000000000000000000", "stars/s1/auditor/marks/00000000000000000003.tmp"} {
		if _, _, err := ParseMarkKey("s1", bad); err == nil {
			t.Errorf("ParseMarkKey(%q) accepted", bad)
		}
	}
}

func TestTimestampRange(t *testing.T) {
	es := []Entry{{Timestamps: []int64{5, -3, 9}}, {}, {Timestamps: []int64{12, 0}}}
	if lo, hi := TimestampRange(es); lo != -3 || hi != 12 {
		t.Errorf("TimestampRange = %d, %d; want -3, 12", lo, hi)
	}
	if lo, hi := TimestampRange(nil); lo != 0 || hi != 0 {
		t.Errorf("TimestampRange(nil) = %d, %d", lo, hi)
	}
}
