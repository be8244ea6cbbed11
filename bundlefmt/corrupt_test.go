package bundlefmt

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
)

var le = binary.LittleEndian

// testObject is a valid object with what its key says about it.
type testObject struct {
	name string
	obj  []byte
	exp  Expect
	base uint64
}

func smallChunk(t testing.TB, s StreamID, first uint64) Chunk {
	b := NewChunkBuilder(s, first)
	for i := 0; i < 2; i++ {
		if err := b.Add(Record{Body: []byte(fmt.Sprintf("r%d", first+uint64(i)))}, int64(i), i == 1); err != nil {
			t.Fatal(err)
		}
	}
	return b.Chunk()
}

func testObjects(t *testing.T) []testObject {
	flight3, err := EncodeFlight(3, 7, 1, []Chunk{smallChunk(t, sid(1), 10), smallChunk(t, sid(2), 20), smallChunk(t, sid(3), 30)})
	if err != nil {
		t.Fatal(err)
	}
	settled3, err := EncodeSettled([]Chunk{smallChunk(t, sid(9), 100), smallChunk(t, sid(9), 102), smallChunk(t, sid(9), 104)})
	if err != nil {
		t.Fatal(err)
	}
	return []testObject{
		{"example1", readTestdata(t, "example1_flight.bin"), mustExpect(t, example1Key), TransitBase},
		{"example2", readTestdata(t, "example2_settled.bin"), mustExpect(t, example2Key), SettledBase},
		{"example3", readTestdata(t, "example3_poison.bin"), mustExpect(t, example3Key), TransitBase},
		{"flight3", flight3, mustExpect(t, SlotKey("s", 3, 7)), TransitBase},
		{"settled3", settled3, mustExpect(t, SettledKey("b", sid(9), 0, 100, 0)), SettledBase},
	}
}

type field struct {
	name      string
	off, size int
	class     string
}

// fieldsOf lists every field of a valid object with the class a damaged
// byte in it must produce (bit rot: nothing resealed).
func fieldsOf(t *testing.T, o testObject) []field {
	var fs []field
	add := func(name string, off, size int, class string) { fs = append(fs, field{name, off, size, class}) }
	if o.base == TransitBase {
		add("envelope.magic", 0, 4, "corrupt")
		add("envelope.version", 4, 2, ClassUnsupported)
		for _, f := range []struct {
			n       string
			off, sz int
		}{{"kind", 6, 1}, {"reserved", 7, 1}, {"epoch", 8, 8}, {"seq", 16, 8}, {"nonce", 24, 8},
			{"object_size", 32, 8}, {"footer_offset", 40, 8}, {"footer_length", 48, 8}, {"crc", 56, 4}} {
			add("envelope."+f.n, f.off, f.sz, "checksum")
		}
		if len(o.obj) == EnvelopeSize {
			return fs
		}
	}
	f, err := OpenObjectFooter(o.name, o.obj, o.base)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < f.NumChunks(); i++ {
		r := f.Row(i)
		d := int(f.DataOffset(i))
		add(fmt.Sprintf("chunk[%d].first", i), d, 1, "checksum")
		add(fmt.Sprintf("chunk[%d].last", i), d+int(r.ChunkBytes)-1, 1, "checksum")
		e, n := int(r.EntryOffset), int(r.Count)
		for _, x := range []struct {
			n       string
			off, sz int
		}{{"stream", 0, 16}, {"first_record", 16, 8}, {"count", 24, 4}, {"data_offset", 28, 8}, {"data_crc", 36, 4},
			{"lengths", 40, 4 * n}, {"timestamps", 40 + 4*n, 8 * n}, {"batch_end", 40 + 12*n, (n + 7) / 8}} {
			add(fmt.Sprintf("entry[%d].%s", i, x.n), e+x.off, x.sz, "checksum")
		}
		ro := int(f.idxOffset()) + i*RowSize
		for _, x := range []struct {
			n       string
			off, sz int
		}{{"stream", 0, 16}, {"first_record", 16, 8}, {"count", 24, 4}, {"chunk_bytes", 28, 8},
			{"entry_offset", 36, 8}, {"entry_length", 44, 4}, {"entry_crc", 48, 4}} {
			add(fmt.Sprintf("row[%d].%s", i, x.n), ro+x.off, x.sz, "checksum")
		}
	}
	tr := len(o.obj) - TrailerSize
	add("trailer.magic", tr, 4, "corrupt")
	add("trailer.version", tr+4, 4, ClassUnsupported)
	add("trailer.dir_offset", tr+8, 8, "corrupt")
	add("trailer.dir_length", tr+16, 8, "corrupt")
	add("trailer.dir_crc", tr+24, 4, "checksum")
	add("trailer.index_length", tr+28, 8, "corrupt")
	add("trailer.index_crc", tr+36, 4, "checksum")
	return fs
}

// TestBitRotEveryField flips bits in every byte of every field of envelope,
// entries, rows and trailer (and the ends of every chunk) and expects the
// class docs/format.md#validation-and-errors gives, with the key and an offset at or before the damage.
func TestBitRotEveryField(t *testing.T) {
	for _, o := range testObjects(t) {
		for _, f := range fieldsOf(t, o) {
			for b := f.off; b < f.off+f.size; b++ {
				for _, mask := range []byte{0x01, 0x80} {
					obj := append([]byte(nil), o.obj...)
					obj[b] ^= mask
					_, err := ValidateObject(obj, o.exp)
					if got := classOf(err); got != f.class {
						t.Fatalf("%s: %s byte %d ^ 0x%02x: class %s, want %s (%v)", o.name, f.name, b-f.off, mask, got, f.class, err)
					}
					var fe *FormatError
					if !errors.As(err, &fe) || fe.Key != o.exp.Key || fe.Offset > int64(b) || fe.Offset < 0 {
						t.Fatalf("%s: %s byte %d: error %#v does not say where", o.name, f.name, b-f.off, err)
					}
					if f.class == ClassUnsupported && (fe.Version == Version) {
						t.Fatalf("%s: %s: version %d reported", o.name, f.name, fe.Version)
					}
				}
			}
		}
	}
}

// mutation edits a copy of a valid object; reseal makes every CRC right
// again afterwards, so the change reads as a writer bug rather than rot.
type mutation struct {
	name   string
	object string // testObjects name
	edit   func(t *testing.T, obj []byte, f *Footer) []byte
	reseal bool
	exp    func(Expect) Expect // optional change of expectations
	class  string
	field  string // substring of FormatError.Field
}

func put64(off int, v uint64) func(*testing.T, []byte, *Footer) []byte {
	return func(_ *testing.T, b []byte, _ *Footer) []byte { le.PutUint64(b[off:], v); return b }
}

// rowField and entryField edit a field of row/entry i at byte offset off.
func rowField(i, off int, fn func([]byte)) func(*testing.T, []byte, *Footer) []byte {
	return func(_ *testing.T, b []byte, f *Footer) []byte {
		fn(b[int(f.idxOffset())+i*RowSize+off:])
		return b
	}
}

func entryField(i, off int, fn func([]byte)) func(*testing.T, []byte, *Footer) []byte {
	return func(_ *testing.T, b []byte, f *Footer) []byte {
		fn(b[int(f.Row(i).EntryOffset)+off:])
		return b
	}
}

// both edits the same field of row i and entry i (they must agree).
func both(i, off int, fn func([]byte)) func(*testing.T, []byte, *Footer) []byte {
	return func(t *testing.T, b []byte, f *Footer) []byte {
		return entryField(i, off, fn)(t, rowField(i, off, fn)(t, b, f), f)
	}
}

func set64(v uint64) func([]byte) { return func(b []byte) { le.PutUint64(b, v) } }
func set32(v uint32) func([]byte) { return func(b []byte) { le.PutUint32(b, v) } }
func add64(d uint64) func([]byte) { return func(b []byte) { le.PutUint64(b, le.Uint64(b)+d) } }
func add32(d uint32) func([]byte) { return func(b []byte) { le.PutUint32(b, le.Uint32(b)+d) } }
func setByte(v byte) func([]byte) { return func(b []byte) { b[0] = v } }

func TestNamedCorruptions(t *testing.T) {
	trailer := func(off int, fn func([]byte)) func(*testing.T, []byte, *Footer) []byte {
		return func(_ *testing.T, b []byte, _ *Footer) []byte { fn(b[len(b)-TrailerSize+off:]); return b }
	}
	at := func(off int, fn func([]byte)) func(*testing.T, []byte, *Footer) []byte {
		return func(_ *testing.T, b []byte, _ *Footer) []byte { fn(b[off:]); return b }
	}
	// shiftDir moves the directory start one byte later, keeping the sums.
	shiftDir := func(t *testing.T, b []byte, f *Footer) []byte {
		trailer(8, add64(1))(t, b, f)
		return trailer(16, add64(^uint64(0)))(t, b, f)
	}
	set16 := func(v uint16) func([]byte) { return func(b []byte) { le.PutUint16(b, v) } }
	cases := []mutation{
		// Envelope.
		{name: "envelope_bad_magic", object: "example1", edit: at(0, setByte('X')), class: "corrupt", field: "envelope.magic"},
		{name: "envelope_version_0", object: "example1", edit: at(4, set16(0)), class: ClassUnsupported, field: "envelope.version"},
		{name: "envelope_version_2", object: "example1", edit: at(4, set16(2)), class: ClassUnsupported, field: "envelope.version"},
		{name: "envelope_version_2_resealed", object: "example1", edit: at(4, set16(2)), reseal: true, class: ClassUnsupported, field: "envelope.version"},
		{name: "poison_version_0", object: "example3", edit: at(4, set16(0)), class: ClassUnsupported, field: "envelope.version"},
		{name: "envelope_crc", object: "example1", edit: at(56, add32(1)), class: "checksum", field: "envelope.crc"},
		{name: "envelope_kind_0", object: "example1", edit: at(6, setByte(0)), reseal: true, class: "corrupt", field: "envelope.kind"},
		{name: "envelope_kind_3", object: "example1", edit: at(6, setByte(3)), reseal: true, class: "corrupt", field: "envelope.kind"},
		{name: "envelope_reserved", object: "example1", edit: at(7, setByte(1)), reseal: true, class: "corrupt", field: "envelope.reserved"},
		{name: "envelope_epoch_0", object: "example1", edit: put64(8, 0), reseal: true, class: "corrupt", field: "envelope.epoch"},
		{name: "envelope_epoch_2^63", object: "example1", edit: put64(8, 1<<63), reseal: true, class: "corrupt", field: "envelope.epoch"},
		{name: "envelope_epoch_not_key", object: "example1", edit: put64(8, 4), reseal: true, class: "corrupt", field: "envelope.epoch"},
		{name: "envelope_seq_not_key", object: "example1", edit: put64(16, 8), reseal: true, class: "corrupt", field: "envelope.seq"},
		{name: "envelope_size_not_real", object: "example1", edit: func(t *testing.T, b []byte, f *Footer) []byte {
			le.PutUint64(b[32:], 231)
			le.PutUint64(b[48:], 118)
			return b
		}, reseal: true, class: "corrupt", field: "envelope.object_size"},
		{name: "envelope_window_not_trailer", object: "example1", edit: func(t *testing.T, b []byte, f *Footer) []byte {
			le.PutUint64(b[40:], 74)
			le.PutUint64(b[48:], 116)
			return b
		}, reseal: true, class: "corrupt", field: "envelope.footer_offset"},
		{name: "envelope_window_sum", object: "example1", edit: put64(48, 118), reseal: true, class: "corrupt", field: "envelope.object_size"},
		{name: "envelope_footer_offset_60", object: "example1", edit: put64(40, 60), reseal: true, class: "corrupt", field: "envelope.footer_offset"},
		{name: "poison_object_size", object: "example3", edit: put64(32, 61), reseal: true, class: "corrupt", field: "envelope.object_size"},
		{name: "poison_footer_offset", object: "example3", edit: put64(40, 61), reseal: true, class: "corrupt", field: "envelope.footer_offset"},
		{name: "poison_seq_not_key", object: "example3", edit: put64(16, 9), reseal: true, class: "corrupt", field: "envelope.seq"},
		{name: "poison_trailing_byte", object: "example3", edit: func(_ *testing.T, b []byte, _ *Footer) []byte { return append(b, 0) }, class: "corrupt", field: "envelope.object_size"},
		{name: "flight_trailing_byte", object: "example1", edit: func(_ *testing.T, b []byte, _ *Footer) []byte { return append(b, 0) }, class: "corrupt", field: "envelope.object_size"},
		// Trailer.
		{name: "trailer_bad_magic", object: "example2", edit: trailer(0, setByte('X')), class: "corrupt", field: "trailer.magic"},
		{name: "trailer_version_0", object: "example2", edit: trailer(4, set32(0)), class: ClassUnsupported, field: "trailer.version"},
		{name: "trailer_version_2", object: "example1", edit: trailer(4, set32(2)), class: ClassUnsupported, field: "trailer.version"},
		{name: "trailer_index_length_0", object: "example2", edit: trailer(28, set64(0)), reseal: true, class: "corrupt", field: "trailer.index_length"},
		{name: "trailer_index_length_51", object: "example2", edit: func(t *testing.T, b []byte, f *Footer) []byte {
			trailer(28, set64(51))(t, b, f)
			return trailer(16, add64(1))(t, b, f)
		}, reseal: true, class: "corrupt", field: "trailer.index_length"},
		{name: "trailer_dir_shifted", object: "example2", edit: shiftDir, class: "checksum", field: "directory.crc"},
		{name: "trailer_dir_shifted_resealed", object: "example2", edit: shiftDir, reseal: true, class: "corrupt", field: "row[0].entry_offset"},
		// Entries (writer bugs: every CRC right).
		{name: "entry_stream_not_row", object: "example1", edit: entryField(0, 0, setByte(0x01)), reseal: true, class: "corrupt", field: "entry[0].stream"},
		{name: "entry_first_not_row", object: "example1", edit: entryField(0, 16, add64(1)), reseal: true, class: "corrupt", field: "entry[0].first_record"},
		{name: "entry_count_not_row", object: "example1", edit: entryField(0, 24, set32(3)), reseal: true, class: "corrupt", field: "entry[0].count"},
		{name: "data_offset_gap", object: "example1", edit: entryField(0, 28, add64(1)), reseal: true, class: "corrupt", field: "entry[0].data_offset"},
		{name: "data_offset_overlap", object: "settled3", edit: entryField(1, 28, add64(^uint64(0))), reseal: true, class: "corrupt", field: "entry[1].data_offset"},
		{name: "record_length_0", object: "example1", edit: func(t *testing.T, b []byte, f *Footer) []byte {
			entryField(0, 40, set32(0))(t, b, f)
			return entryField(0, 44, set32(13))(t, b, f)
		}, reseal: true, class: "corrupt", field: "entry[0].length[0]"},
		{name: "sum_lengths_not_chunk_bytes", object: "example1", edit: entryField(0, 40, add32(1)), reseal: true, class: "corrupt", field: "entry[0].lengths"},
		{name: "last_record_not_batch_end", object: "example1", edit: entryField(0, 64, setByte(0x01)), reseal: true, class: "corrupt", field: "entry[0].batch_end"},
		{name: "unused_batch_end_bits", object: "example1", edit: entryField(0, 64, setByte(0x06)), reseal: true, class: "corrupt", field: "entry[0].batch_end"},
		// Rows.
		{name: "row_count_0", object: "example2", edit: rowField(0, 24, set32(0)), reseal: true, class: "corrupt", field: "row[0].count"},
		{name: "row_chunk_bytes_short", object: "settled3", edit: rowField(1, 28, add64(^uint64(0))), reseal: true, class: "corrupt", field: "entry[2].data_offset"},
		{name: "row_chunk_bytes_past_directory", object: "example2", edit: rowField(0, 28, add64(1)), reseal: true, class: "corrupt", field: "row[0].chunk_bytes"},
		{name: "row_entry_offset_gap", object: "settled3", edit: rowField(1, 36, add64(1)), reseal: true, class: "corrupt", field: "row[1].entry_offset"},
		{name: "row_entry_length", object: "settled3", edit: rowField(2, 44, add32(1)), reseal: true, class: "corrupt", field: "row[2].entry_length"},
		{name: "rows_unsorted", object: "flight3", edit: both(1, 0, setByte(0)), reseal: true, class: "corrupt", field: "row[1].stream"},
		{name: "transit_stream_twice", object: "flight3", edit: func(t *testing.T, b []byte, f *Footer) []byte {
			s := sid(1)
			both(1, 0, func(x []byte) { copy(x, s[:]) })(t, b, f)
			return b
		}, reseal: true, class: "corrupt", field: "row[1].stream"},
		{name: "settled_two_streams", object: "settled3", edit: both(2, 15, setByte(0xee)), reseal: true, class: "corrupt", field: "row[2].stream"},
		{name: "settled_not_contiguous", object: "settled3", edit: both(1, 16, add64(1)), reseal: true, class: "corrupt", field: "row[1].first_record"},
		{name: "settled_records_past_2^63", object: "example2", edit: both(0, 16, set64(MaxNumber)), reseal: true,
			exp: func(e Expect) Expect { e.FirstRecord = MaxNumber; return e }, class: "corrupt", field: "row[0].first_record"},
		{name: "settled_stream_not_key", object: "example2", exp: func(e Expect) Expect { e.Stream[0] ^= 1; return e }, class: "corrupt", field: "row[0].stream"},
		{name: "settled_first_not_key", object: "settled3", exp: func(e Expect) Expect { e.FirstRecord++; return e }, class: "corrupt", field: "row[0].first_record"},
		// Stored records.
		{name: "record_reserved_bits", object: "example2", edit: at(0, setByte(0x10)), reseal: true, class: "corrupt", field: "chunk[0].record[0].flags"},
		{name: "record_width_without_headers", object: "example2", edit: at(6, setByte(0x02)), reseal: true, class: "corrupt", field: "chunk[0].record[1].flags"},
		{name: "record_width_3", object: "example2", edit: at(0, setByte(0x07)), reseal: true, class: "corrupt", field: "chunk[0].record[0].flags"},
		{name: "record_header_count_0", object: "example2", edit: at(0, setByte(0x01)), reseal: true, class: "corrupt", field: "chunk[0].record[0]"},
		{name: "record_tombstone_length_6", object: "example2", edit: at(0, setByte(0x08)), reseal: true, class: "corrupt", field: "chunk[0].record[0].length"},
		{name: "record_tombstone_in_transit", object: "flight3", edit: func(t *testing.T, b []byte, f *Footer) []byte {
			b[f.DataOffset(1)] = TombstoneByte // "r20": first record of chunk 1 becomes 08 32 30
			return b
		}, reseal: true, class: "corrupt", field: "chunk[1].record[0]"},
		// Bit rot in data is a checksum mismatch, before any record rule.
		{name: "data_bit_rot", object: "example2", edit: at(0, setByte(0x10)), class: "checksum", field: "chunk[0].data_crc"},
		{name: "directory_crc_only", object: "settled3", edit: trailer(24, add32(1)), class: "checksum", field: "directory.crc"},
	}
	objs := map[string]testObject{}
	for _, o := range testObjects(t) {
		objs[o.name] = o
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := objs[tc.object]
			obj := append([]byte(nil), o.obj...)
			var f *Footer
			if len(obj) > EnvelopeSize {
				var err error
				if f, err = OpenObjectFooter(o.name, obj, o.base); err != nil {
					t.Fatal(err)
				}
			}
			if tc.edit != nil {
				obj = tc.edit(t, obj, f)
			}
			if tc.reseal {
				reseal(obj, o.base)
			}
			exp := o.exp
			if tc.exp != nil {
				exp = tc.exp(exp)
			}
			_, err := ValidateObject(obj, exp)
			if got := classOf(err); got != tc.class {
				t.Fatalf("class %s, want %s (%v)", got, tc.class, err)
			}
			var fe *FormatError
			if !errors.As(err, &fe) || !strings.Contains(fe.Field, tc.field) || fe.Key != exp.Key {
				t.Fatalf("error %v: field %q, want %q", err, fe.Field, tc.field)
			}
			if tc.class == ClassUnsupported {
				if fe.Version == Version {
					t.Fatalf("version %d", fe.Version)
				}
				if strings.HasPrefix(fe.Field, "envelope") != (fe.V1CRCMatches != nil) {
					t.Fatalf("V1CRCMatches %v for %s", fe.V1CRCMatches, fe.Field)
				}
				if fe.V1CRCMatches != nil && *fe.V1CRCMatches != tc.reseal {
					t.Fatalf("V1CRCMatches = %v, want %v", *fe.V1CRCMatches, tc.reseal)
				}
			}
		})
	}
}

// TestUncheckedRecords builds objects whose every CRC is right around a
// stored record that breaks docs/format.md#stored-record.
func TestUncheckedRecords(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rec     []byte
		transit bool
		field   string
	}{
		{"non_canonical_w1", []byte{0x03, 1, 0, 1, 0, 1, 0, 'k', 'v', 'x'}, false, "record[0].flags"},
		{"non_canonical_w2", []byte{0x05, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 'k', 'v'}, false, "record[0].flags"},
		{"header_bytes_overrun", []byte{0x01, 1, 5, 5, 'k', 'v', 'x'}, false, "record[0].header_lengths"},
		{"header_table_overrun", []byte{0x01, 200, 1, 1}, false, "record[0].header_lengths"},
		{"tombstone_with_headers", []byte{0x09}, false, "record[0].flags"},
		{"tombstone_two_bytes", []byte{0x08, 0}, false, "record[0].length"},
		{"tombstone_in_transit", []byte{0x08}, true, "record[0].flags"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := Entry{Stream: sid(5), FirstRecord: 1, Lengths: []uint32{uint32(len(tc.rec))}, Timestamps: []int64{0}, BatchEnd: []byte{1}}
			var env *Envelope
			exp := Expect{Key: tc.name, Kind: KindSettled}
			if tc.transit {
				env = &Envelope{Epoch: 1, Seq: 1}
				exp.Kind = KindFlight
			}
			obj := encodeUnchecked(env, []Entry{e}, [][]byte{tc.rec})
			_, err := ValidateObject(obj, exp)
			var fe *FormatError
			if classOf(err) != "corrupt" || !errors.As(err, &fe) || !strings.Contains(fe.Field, tc.field) {
				t.Fatalf("err = %v, want corrupt in %s", err, tc.field)
			}
			if _, err := ParseRecord(tc.rec); !tc.transit && classOf(err) != "corrupt" {
				t.Fatalf("ParseRecord: %v", err)
			}
		})
	}
}

// TestTruncations cuts every object at every section boundary (and one
// byte either side): always corrupt, never a checksum mismatch or a panic.
func TestTruncations(t *testing.T) {
	for _, o := range testObjects(t) {
		cuts := []int{0, 1, 4, 59, 60, 61, len(o.obj) - 40, len(o.obj) - 39, len(o.obj) - 1}
		if len(o.obj) > EnvelopeSize {
			f, err := OpenObjectFooter(o.name, o.obj, o.base)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i < f.NumChunks(); i++ {
				r := f.Row(i)
				cuts = append(cuts, int(f.DataOffset(i)), int(r.EntryOffset))
			}
			cuts = append(cuts, int(f.FooterOffset()), int(f.idxOffset()))
		}
		for _, c := range cuts {
			for _, n := range []int{c - 1, c, c + 1} {
				if n < 0 || n >= len(o.obj) {
					continue
				}
				for _, exp := range []Expect{o.exp, {Key: o.exp.Key}} {
					_, err := ValidateObject(o.obj[:n], exp)
					if classOf(err) != "corrupt" {
						t.Fatalf("%s cut at %d (kind %s): %v", o.name, n, exp.Kind, err)
					}
				}
			}
		}
	}
	if _, err := ValidateObject([]byte{0x20}, Expect{}); classOf(err) != "corrupt" {
		t.Fatalf("garbage: %v", err)
	}
}

// TestFooterLevels checks the footer-window and one-entry levels: what each
// verifies and what it deliberately leaves to the next level.
func TestFooterLevels(t *testing.T) {
	obj := testObjects(t)[3].obj // flight3
	key := "flight3"
	env, err := DecodeEnvelope(key, obj)
	if err != nil {
		t.Fatal(err)
	}
	win := func(b []byte) []byte { return b[env.FooterOffset:] }
	open := func(b []byte) (*Footer, error) {
		return OpenFooter(key, env.FooterOffset, win(b), env.ObjectSize, TransitBase)
	}
	// Window disagreements.
	if _, err := OpenFooter(key, env.FooterOffset+1, obj[env.FooterOffset+1:], env.ObjectSize, TransitBase); classOf(err) != "corrupt" {
		t.Fatalf("shifted window: %v", err)
	}
	if _, err := OpenFooter(key, env.FooterOffset, win(obj), env.ObjectSize+1, TransitBase); classOf(err) != "corrupt" {
		t.Fatalf("wrong object size: %v", err)
	}
	if _, err := OpenFooter(key, env.FooterOffset, win(obj)[:30], env.ObjectSize, TransitBase); classOf(err) != "corrupt" {
		t.Fatalf("short window: %v", err)
	}
	if _, err := OpenFooter(key, env.FooterOffset, win(obj), env.ObjectSize, SettledBase); classOf(err) != "corrupt" {
		t.Fatalf("flight opened as settled: %v", err)
	}
	// A damaged entry: the index still opens, that entry fails, others work.
	bad := append([]byte(nil), obj...)
	f0, _ := open(obj)
	bad[f0.Row(1).EntryOffset+50] ^= 1
	f, err := open(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Entry(1); classOf(err) != "checksum" {
		t.Fatalf("Entry(1): %v", err)
	}
	if _, err := f.Entry(0); err != nil {
		t.Fatal(err)
	}
	if err := f.VerifyDirectory(); classOf(err) != "checksum" {
		t.Fatalf("VerifyDirectory: %v", err)
	}
	if _, err := ValidateFooter(env.FooterOffset, win(bad), env.ObjectSize, Expect{Key: key, Kind: KindFlight}); classOf(err) != "checksum" {
		t.Fatalf("ValidateFooter: %v", err)
	}
	// A damaged row: the index CRC catches it at open.
	bad = append([]byte(nil), obj...)
	bad[f0.idxOffset()+3] ^= 1
	if _, err := open(bad); classOf(err) != "checksum" {
		t.Fatalf("damaged row: %v", err)
	}
	// Damaged chunk bytes pass every footer level; only the whole object sees them.
	bad = append([]byte(nil), obj...)
	bad[f0.DataOffset(2)] ^= 1
	if f, err = open(bad); err != nil {
		t.Fatal(err)
	}
	if err := f.VerifyDirectory(); err != nil {
		t.Fatal(err)
	}
	if _, err := ValidateObject(bad, Expect{Key: key}); classOf(err) != "checksum" {
		t.Fatalf("whole object: %v", err)
	}
}

// TestHostileLengthsBoundedAllocation feeds decoders length fields that
// claim far more than the input holds and checks the bytes allocated stay
// proportional to the input.
func TestHostileLengthsBoundedAllocation(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	base := testObjects(t)[4].obj // settled3
	var inputs [][]byte
	for i := 0; i < 200; i++ {
		b := append([]byte(nil), base...)
		off := r.IntN(len(b) - 8)
		le.PutUint64(b[off:], r.Uint64()>>r.IntN(64))
		reseal(b, SettledBase)
		inputs = append(inputs, b)
	}
	inputs = append(inputs, []byte{0x01, 0xff, 0xff, 0xff, 0xff}, []byte{0x05, 0xff, 0xff, 0xff, 0x7f, 1, 2})
	var worst uint64
	for _, in := range inputs {
		n := allocBytes(func() {
			_, _ = ValidateObject(in, Expect{})
			_, _ = DecodeRecord(in)
		})
		worst = max(worst, n)
	}
	if limit := uint64(64*len(base) + 64<<10); worst > limit {
		t.Fatalf("decoding a %d-byte input allocated %d bytes (limit %d)", len(base), worst, limit)
	}
}

// allocBytes returns the bytes fn allocated on the heap.
func allocBytes(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}
