package bundlefmt

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// checkChunkRecords decodes every record of entry e in data and compares it
// with what went in.
func checkChunkRecords(t *testing.T, e Entry, data []byte, want []Record) {
	t.Helper()
	if e.Count() != len(want) {
		t.Fatalf("chunk of %d records, want %d", e.Count(), len(want))
	}
	var p uint64
	for i, l := range e.Lengths {
		rec, err := DecodeRecord(data[p : p+uint64(l)])
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		w := want[i]
		if rec.Tombstone != w.Tombstone || !bytes.Equal(rec.Body, w.Body) || len(rec.Headers) != len(w.Headers) {
			t.Fatalf("record %d: got %+v want %+v", i, rec, w)
		}
		for j := range w.Headers {
			if !bytes.Equal(rec.Headers[j].Name, w.Headers[j].Name) || !bytes.Equal(rec.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d differs", i, j)
			}
		}
		if rec.ContentBytes() != w.ContentBytes() {
			t.Fatalf("record %d: content bytes %d want %d", i, rec.ContentBytes(), w.ContentBytes())
		}
		p += uint64(l)
	}
}

func TestRoundTripFlight(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for iter := 0; iter < 60; iter++ {
		nStreams := 1 + r.IntN(40)
		ids := map[StreamID]bool{}
		for len(ids) < nStreams {
			var s StreamID
			for i := range s {
				s[i] = byte(r.IntN(4)) // many shared prefixes
			}
			ids[s] = true
		}
		streams := make([]StreamID, 0, nStreams)
		for s := range ids {
			streams = append(streams, s)
		}
		slices.SortFunc(streams, StreamID.Compare)
		chunks := make([]Chunk, nStreams)
		recs := make([][]Record, nStreams)
		for i, s := range streams {
			n := 1
			if r.IntN(2) == 0 {
				n = 1 + r.IntN(30)
			}
			chunks[i], recs[i] = genChunk(t, r, s, r.Uint64N(MaxNumber-100), n, false, iter%10 == 0)
		}
		epoch, seq, nonce := 1+r.Uint64N(1000), r.Uint64N(1000), r.Uint64()
		obj, err := EncodeFlight(epoch, seq, nonce, chunks)
		if err != nil {
			t.Fatal(err)
		}
		key := SlotKey("star-1", epoch, seq)
		o, err := ValidateObject(obj, mustExpect(t, key))
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if o.Envelope.Nonce != nonce || len(o.Entries) != nStreams {
			t.Fatalf("iter %d: envelope %+v, %d entries", iter, o.Envelope, len(o.Entries))
		}
		for i, e := range o.Entries {
			in := chunks[i].Entry
			if e.Stream != in.Stream || e.FirstRecord != in.FirstRecord || e.DataCRC != in.DataCRC ||
				!slices.Equal(e.Lengths, in.Lengths) || !slices.Equal(e.Timestamps, in.Timestamps) || !bytes.Equal(e.BatchEnd, in.BatchEnd) {
				t.Fatalf("iter %d: entry %d differs", iter, i)
			}
			if !bytes.Equal(o.ChunkData(obj, i), chunks[i].Data) {
				t.Fatalf("iter %d: chunk %d bytes differ", iter, i)
			}
			checkChunkRecords(t, e, o.ChunkData(obj, i), recs[i])
		}
		// Decoding from the footer window alone, as a ref gives it.
		env, err := DecodeEnvelope(key, obj[:EnvelopeSize])
		if err != nil {
			t.Fatal(err)
		}
		win := obj[env.FooterOffset : env.FooterOffset+env.FooterLength+TrailerSize]
		f, err := OpenFooter(key, env.FooterOffset, win, env.ObjectSize, TransitBase)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.VerifyDirectory(); err != nil {
			t.Fatal(err)
		}
		checkLookups(t, r, f, o.Entries)
		// From the object size alone: trailer first.
		tr, err := DecodeTrailer(key, obj[len(obj)-TrailerSize:], uint64(len(obj)))
		if err != nil || tr.FooterOffset() != env.FooterOffset || tr.FooterLength() != env.FooterLength {
			t.Fatalf("trailer %+v, %v", tr, err)
		}
		if _, err := ValidateFooter(tr.FooterOffset(), obj[tr.FooterOffset():], uint64(len(obj)), Expect{Key: key, Kind: KindSlot}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkLookups probes Find, FindStream and Entry against the entries.
func checkLookups(t *testing.T, r *rand.Rand, f *Footer, entries []Entry) {
	t.Helper()
	if f.NumChunks() != len(entries) {
		t.Fatalf("%d chunks, want %d", f.NumChunks(), len(entries))
	}
	all, err := f.Entries()
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if all[i].DataOffset != e.DataOffset || f.DataOffset(i) != e.DataOffset {
			t.Fatalf("entry %d: data offset", i)
		}
		rec := e.FirstRecord + r.Uint64N(uint64(e.Count()))
		j, ok := f.Find(e.Stream, rec)
		if !ok {
			t.Fatalf("Find(%s, %d) missed", e.Stream, rec)
		}
		got, err := f.Entry(j)
		if err != nil {
			t.Fatal(err)
		}
		if got.Stream != e.Stream || rec < got.FirstRecord || rec >= got.EndRecord() {
			t.Fatalf("Find(%s, %d) = row %d [%d, %d)", e.Stream, rec, j, got.FirstRecord, got.EndRecord())
		}
		if e.FirstRecord > 0 {
			if j, ok := f.Find(e.Stream, e.FirstRecord-1); ok && (i == 0 || entries[i-1].Stream != e.Stream || j != i-1) {
				t.Fatalf("Find before chunk %d found row %d", i, j)
			} else if !ok && j != i {
				t.Fatalf("Find before chunk %d = %d, want the chunk itself", i, j)
			}
		}
		if j, ok := f.Find(e.Stream, e.EndRecord()); ok {
			if j != i+1 {
				t.Fatalf("Find after chunk %d = %d", i, j)
			}
		} else if j != i+1 {
			t.Fatalf("Find after chunk %d = %d, want %d", i, j, i+1)
		}
		lo, hi := f.FindStream(e.Stream)
		if lo > i || hi <= i {
			t.Fatalf("FindStream: [%d, %d) misses row %d", lo, hi, i)
		}
		for _, from := range []int{0, lo / 2, lo} {
			if got := f.SearchStreamFrom(from, e.Stream); got != lo {
				t.Fatalf("SearchStreamFrom(%d, %s) = %d, FindStream's first row %d", from, e.Stream, got, lo)
			}
		}
		if f.StreamAt(i) != e.Stream {
			t.Fatalf("StreamAt(%d) = %s, want %s", i, f.StreamAt(i), e.Stream)
		}
		for k := lo; k < hi; k++ {
			if f.Row(k).Stream != e.Stream {
				t.Fatalf("FindStream: row %d of another stream", k)
			}
		}
		if lo > 0 && f.Row(lo-1).Stream == e.Stream || hi < f.NumChunks() && f.Row(hi).Stream == e.Stream {
			t.Fatalf("FindStream: [%d, %d) is not the whole stream", lo, hi)
		}
	}
	var absent StreamID
	absent[0] = 0xff
	absent[15] = 0xfe
	if lo, hi := f.FindStream(absent); lo != hi {
		t.Fatalf("absent stream: [%d, %d)", lo, hi)
	}
}

func TestRoundTripSettled(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 8))
	for iter := 0; iter < 60; iter++ {
		stream := sid(byte(iter))
		first := r.Uint64N(1 << 40)
		n := 1 + r.IntN(12)
		chunks := make([]Chunk, n)
		recs := make([][]Record, n)
		next := first
		for i := range chunks {
			k := 1
			if r.IntN(2) == 0 {
				k = 1 + r.IntN(40)
			}
			chunks[i], recs[i] = genChunk(t, r, stream, next, k, true, iter%15 == 0)
			next = chunks[i].Entry.EndRecord()
		}
		obj, err := EncodeSettled(chunks)
		if err != nil {
			t.Fatal(err)
		}
		key := SettledKey("bucket.a_b-c", stream, r.Uint64N(10), first, uint32(r.IntN(3)))
		o, err := ValidateObject(obj, mustExpect(t, key))
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		for i, e := range o.Entries {
			checkChunkRecords(t, e, o.ChunkData(obj, i), recs[i])
		}
		// The footer built without the bytes matches the encoder's, and its
		// whole-object CRC (by combine) matches the bytes.
		entries := make([]Entry, n)
		for i := range chunks {
			entries[i] = chunks[i].Entry
			entries[i].DataOffset = 12345 // reassigned
		}
		sf, err := BuildSettledFooter(entries)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(sf.Bytes, obj[sf.FooterOffset:]) || sf.ObjectSize != uint64(len(obj)) || sf.ObjectCRC != CRC32C(obj) {
			t.Fatalf("iter %d: BuildSettledFooter disagrees with EncodeSettled", iter)
		}
		if entries[0].DataOffset != 12345 {
			t.Fatal("BuildSettledFooter modified its input")
		}
		f, err := OpenObjectFooter(key, obj, SettledBase)
		if err != nil {
			t.Fatal(err)
		}
		checkLookups(t, r, f, o.Entries)
		// Merging every chunk into one keeps the bytes and the records.
		m := chunks[0]
		for _, c := range chunks[1:] {
			if m, err = MergeChunks(m, c); err != nil {
				t.Fatal(err)
			}
		}
		if m.Entry.DataCRC != CRC32C(m.Data) {
			t.Fatalf("merged DataCRC 0x%08x, bytes 0x%08x", m.Entry.DataCRC, CRC32C(m.Data))
		}
		mobj, err := EncodeSettled([]Chunk{m})
		if err != nil {
			t.Fatal(err)
		}
		mo, err := ValidateObject(mobj, mustExpect(t, key))
		if err != nil {
			t.Fatal(err)
		}
		var flat []Record
		for _, rs := range recs {
			flat = append(flat, rs...)
		}
		checkChunkRecords(t, mo.Entries[0], mo.ChunkData(mobj, 0), flat)
		for i := range chunks {
			for j := range chunks[i].Entry.Lengths {
				k := int(chunks[i].Entry.FirstRecord-first) + j
				if mo.Entries[0].IsBatchEnd(k) != chunks[i].Entry.IsBatchEnd(j) {
					t.Fatalf("merged batch end of record %d", k)
				}
			}
		}
	}
}

func TestEncoderRejects(t *testing.T) {
	c := example1Chunk(t)
	a, b := sid(1), sid(2)
	ca, cb := c, c
	ca.Entry.Stream, cb.Entry.Stream = a, b
	noEnd := c
	noEnd.Entry.BatchEnd = []byte{0}
	badCRC := c
	badCRC.Entry.DataCRC ^= 1
	tomb := NewChunkBuilder(a, 0)
	if err := tomb.Add(Record{Tombstone: true}, 0, true); err != nil {
		t.Fatal(err)
	}
	gap := cb
	gap.Entry.Stream = a
	gap.Entry.FirstRecord = 5000
	for name, fn := range map[string]func() error{
		"no chunks":          func() error { _, err := EncodeFlight(1, 0, 0, nil); return err },
		"epoch 0":            func() error { _, err := EncodeFlight(0, 0, 0, []Chunk{c}); return err },
		"seq > 2^63-1":       func() error { _, err := EncodeFlight(1, 1<<63, 0, []Chunk{c}); return err },
		"unsorted streams":   func() error { _, err := EncodeFlight(1, 0, 0, []Chunk{cb, ca}); return err },
		"duplicate stream":   func() error { _, err := EncodeFlight(1, 0, 0, []Chunk{ca, ca}); return err },
		"no batch end":       func() error { _, err := EncodeFlight(1, 0, 0, []Chunk{noEnd}); return err },
		"wrong DataCRC":      func() error { _, err := EncodeSettled([]Chunk{badCRC}); return err },
		"tombstone transit":  func() error { _, err := EncodeFlight(1, 0, 0, []Chunk{tomb.Chunk()}); return err },
		"two streams":        func() error { _, err := EncodeSettled([]Chunk{ca, cb}); return err },
		"not contiguous":     func() error { _, err := EncodeSettled([]Chunk{ca, gap}); return err },
		"footer two streams": func() error { _, err := BuildSettledFooter([]Entry{ca.Entry, cb.Entry}); return err },
		"empty builder":      func() error { _, err := EncodeSettled([]Chunk{NewChunkBuilder(a, 0).Chunk()}); return err },
		"tombstone content":  func() error { _, err := AppendRecord(nil, Record{Tombstone: true, Body: []byte("x")}); return err },
		"merge gap":          func() error { _, err := MergeEntries(ca.Entry, gap.Entry); return err },
		"merge streams":      func() error { _, err := MergeEntries(ca.Entry, cb.Entry); return err },
	} {
		if err := fn(); err == nil || classOf(err) != "other: "+err.Error() {
			t.Errorf("%s: err = %v, want an ErrInvalid error", name, err)
		}
	}
	// The builder refuses a record number past 2^63-1.
	hi := NewChunkBuilder(a, MaxNumber)
	if err := hi.Add(Record{}, 0, false); err != nil {
		t.Fatal(err)
	}
	if err := hi.Add(Record{}, 0, true); err == nil {
		t.Fatal("record 2^63 accepted")
	}
	// AddStored checks the stored form.
	if err := hi.AddStored([]byte{0x10}, 0, true); classOf(err) != "corrupt" {
		t.Fatalf("AddStored(0x10) = %v", err)
	}
}
