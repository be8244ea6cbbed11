package settle

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/nova/auditor/bundlefmt"
)

// world is a set of real source objects (encoded flights and settled tails)
// so that a plan can be executed in memory and its output validated byte for
// byte by the format's own decoder.
type world struct {
	objects map[string][]byte
}

func (w *world) assemble(t *testing.T, o Output) []byte {
	t.Helper()
	var b []byte
	for _, p := range o.Pieces {
		obj, ok := w.objects[p.Src.Key]
		if !ok {
			t.Fatalf("piece names unknown object %s", p.Src.Key)
		}
		if p.Off+p.Len > uint64(len(obj)) {
			t.Fatalf("piece [%d,+%d) beyond %s (%d bytes)", p.Off, p.Len, p.Src.Key, len(obj))
		}
		part := obj[p.Off : p.Off+p.Len]
		if got := bundlefmt.CRC32C(part); got != p.CRC32C {
			t.Fatalf("piece CRC %08x, bytes have %08x", p.CRC32C, got)
		}
		b = append(b, part...)
	}
	return append(b, o.Footer.Bytes...)
}

func randomChunk(r *rand.Rand, stream bundlefmt.StreamID, first uint64, n int, maxLen int) bundlefmt.Chunk {
	cb := bundlefmt.NewChunkBuilder(stream, first)
	for i := 0; i < n; i++ {
		body := make([]byte, r.IntN(maxLen+1))
		for j := range body {
			body[j] = byte(r.Uint32())
		}
		rec := bundlefmt.Record{Body: body}
		if r.IntN(4) == 0 {
			rec.Headers = []bundlefmt.Header{{Name: []byte("h"), Value: body[:len(body)/2]}}
		}
		if err := cb.Add(rec, int64(1_700_000_000_000+r.IntN(1000)), r.IntN(3) == 0); err != nil {
			panic(err)
		}
	}
	return cb.Chunk()
}

// randomInput builds a stream's unsettled chunks spread over flights (each
// flight also holds other streams' chunks) and, sometimes, a standing tail.
func randomInput(r *rand.Rand) (PlanInput, *world) {
	w := &world{objects: map[string][]byte{}}
	stream := bundlefmt.StreamID{0: 0x42, 15: byte(r.IntN(256))}
	other := bundlefmt.StreamID{0: 0x01}
	in := PlanInput{
		Stream: stream, Bucket: "b1", StreamEpoch: 1,
		CapBytes:    int64(64 + r.IntN(2000)),
		TargetBytes: int64(16 + r.IntN(600)),
	}
	next := uint64(r.IntN(5))
	if r.IntN(2) == 0 {
		tc := randomChunk(r, stream, next, 1+r.IntN(6), 60)
		obj, err := bundlefmt.EncodeSettled([]bundlefmt.Chunk{tc})
		if err != nil {
			panic(err)
		}
		key := bundlefmt.SettledKey(in.Bucket, stream, 1, next, uint32(r.IntN(3)))
		w.objects[key] = obj
		o, err := bundlefmt.ValidateObject(obj, bundlefmt.Expect{Key: key, Kind: bundlefmt.KindSettled})
		if err != nil {
			panic(err)
		}
		p, _ := bundlefmt.ParseSettledKey(key)
		in.Tail = &Tail{Key: key, FirstRecord: next, Revision: p.Revision, Entries: o.Entries}
		next = tc.Entry.EndRecord()
	}
	nChunks := 1 + r.IntN(12)
	for seq := 0; seq < nChunks; seq++ {
		mine := randomChunk(r, stream, next, 1+r.IntN(20), []int{0, 5, 80, 400}[r.IntN(4)])
		theirs := randomChunk(r, other, uint64(seq*3), 3, 20)
		obj, err := bundlefmt.EncodeFlight(7, uint64(seq), 99, []bundlefmt.Chunk{theirs, mine})
		if err != nil {
			panic(err)
		}
		key := bundlefmt.SlotKey("s1", 7, uint64(seq))
		w.objects[key] = obj
		o, err := bundlefmt.ValidateObject(obj, bundlefmt.Expect{Key: key, Kind: bundlefmt.KindFlight})
		if err != nil {
			panic(err)
		}
		in.Chunks = append(in.Chunks, SourceChunk{Src: Source{Key: key, Class: "standard"}, Entry: o.Entries[1]})
		next = mine.Entry.EndRecord()
	}
	return in, w
}

func TestPlanProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var rewrites, fresh, multi int
	defer func() {
		// The generator must exercise every branch, or the test proves little.
		if rewrites == 0 || fresh == 0 || multi == 0 {
			t.Errorf("branches exercised: %d rewrites, %d fresh, %d multi-output plans", rewrites, fresh, multi)
		}
	}()
	for iter := 0; iter < 400; iter++ {
		in, w := randomInput(r)
		outs, err := Plan(in)
		if err != nil {
			t.Fatalf("iter %d: %v", iter, err)
		}
		if len(outs) == 0 {
			t.Fatalf("iter %d: no outputs for %d chunks", iter, len(in.Chunks))
		}
		if outs[0].Rewrite != nil {
			rewrites++
		} else {
			fresh++
		}
		if len(outs) > 1 {
			multi++
		}
		start := in.Chunks[0].Entry.FirstRecord
		if in.Tail != nil {
			tailMeter := MeterAll(in.Tail.Entries)
			fits := !IsFull(tailMeter, Meter(&in.Chunks[0].Entry), in.CapBytes)
			if fits != (outs[0].Rewrite != nil) {
				t.Fatalf("iter %d: tail meter %d, first chunk %d, cap %d: rewrite=%v", iter, tailMeter,
					Meter(&in.Chunks[0].Entry), in.CapBytes, outs[0].Rewrite != nil)
			}
			if fits {
				start = in.Tail.FirstRecord
				if outs[0].Revision != in.Tail.Revision+1 || outs[0].FirstRecord != in.Tail.FirstRecord {
					t.Fatalf("iter %d: rewrite at %d~%d of tail %d~%d", iter, outs[0].FirstRecord, outs[0].Revision, in.Tail.FirstRecord, in.Tail.Revision)
				}
			}
		}
		// Outputs tile the records with no gap or overlap.
		at := start
		for i, o := range outs {
			if o.FirstRecord != at {
				t.Fatalf("iter %d: output %d starts at %d, want %d", iter, i, o.FirstRecord, at)
			}
			at = o.EndRecord()
		}
		if want := in.Chunks[len(in.Chunks)-1].Entry.EndRecord(); at != want {
			t.Fatalf("iter %d: outputs end at %d, want %d", iter, at, want)
		}
		// Every output but the last is full; an output over the cap is one
		// source chunk.
		for i, o := range outs {
			srcChunks := 0
			var firstNew int64 = -1
			for _, c := range in.Chunks {
				if c.Entry.FirstRecord >= o.FirstRecord && c.Entry.FirstRecord < o.EndRecord() {
					srcChunks++
				}
			}
			if i+1 < len(outs) {
				for _, c := range in.Chunks {
					if c.Entry.FirstRecord == outs[i+1].FirstRecord {
						firstNew = Meter(&c.Entry)
					}
				}
				if !IsFull(o.Meter, firstNew, in.CapBytes) {
					t.Fatalf("iter %d: output %d (meter %d) is not full (next chunk %d, cap %d)", iter, i, o.Meter, firstNew, in.CapBytes)
				}
			}
			if o.Meter > in.CapBytes && (srcChunks != 1 || o.Rewrite != nil) {
				t.Fatalf("iter %d: output %d meters %d over cap %d with %d chunks", iter, i, o.Meter, in.CapBytes, srcChunks)
			}
			// The assembled object is a valid settled bundle of the stream at its key.
			obj := w.assemble(t, o)
			if uint64(len(obj)) != o.Footer.ObjectSize {
				t.Fatalf("iter %d: assembled %d bytes, footer says %d", iter, len(obj), o.Footer.ObjectSize)
			}
			if got := bundlefmt.CRC32C(obj); got != o.Footer.ObjectCRC {
				t.Fatalf("iter %d: object CRC %08x, combine said %08x", iter, got, o.Footer.ObjectCRC)
			}
			vo, err := bundlefmt.ValidateObject(obj, bundlefmt.Expect{Key: o.Key, Kind: bundlefmt.KindSettled,
				Stream: in.Stream, FirstRecord: o.FirstRecord, CheckKey: true})
			if err != nil {
				t.Fatalf("iter %d: output %d does not validate: %v", iter, i, err)
			}
			for j := range vo.Entries {
				if j > 0 && Meter(&vo.Entries[j-1])+Meter(&vo.Entries[j]) <= in.TargetBytes {
					t.Fatalf("iter %d: adjacent chunks %d,%d could have merged under target %d", iter, j-1, j, in.TargetBytes)
				}
			}
			// The bytes of every record equal the source's.
			checkRecords(t, w, in, vo, obj)
		}
	}
}

// checkRecords compares each record of a settled output with the same
// record in the sources.
func checkRecords(t *testing.T, w *world, in PlanInput, vo *bundlefmt.Object, obj []byte) {
	t.Helper()
	src := map[uint64][]byte{}
	add := func(e bundlefmt.Entry, data []byte) {
		off := uint64(0)
		for i, l := range e.Lengths {
			src[e.FirstRecord+uint64(i)] = data[off : off+uint64(l)]
			off += uint64(l)
		}
	}
	if in.Tail != nil {
		tobj := w.objects[in.Tail.Key]
		for _, e := range in.Tail.Entries {
			add(e, tobj[e.DataOffset:e.DataOffset+e.ChunkBytes()])
		}
	}
	for _, c := range in.Chunks {
		sobj := w.objects[c.Src.Key]
		add(c.Entry, sobj[c.Entry.DataOffset:c.Entry.DataOffset+c.Entry.ChunkBytes()])
	}
	for i, e := range vo.Entries {
		data := vo.ChunkData(obj, i)
		off := uint64(0)
		for j, l := range e.Lengths {
			rec := e.FirstRecord + uint64(j)
			if !bytes.Equal(data[off:off+uint64(l)], src[rec]) {
				t.Fatalf("record %d differs from its source", rec)
			}
			off += uint64(l)
		}
	}
}

func TestPlanFullTailIsLeftAlone(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	stream := bundlefmt.StreamID{1}
	tail := randomChunk(r, stream, 0, 10, 50)
	next := randomChunk(r, stream, 10, 3, 50)
	in := PlanInput{Stream: stream, Bucket: "b", StreamEpoch: 1, CapBytes: Meter(&tail.Entry) + 1, TargetBytes: 1 << 20,
		Tail:   &Tail{Key: "t", FirstRecord: 0, Revision: 4, Entries: []bundlefmt.Entry{tail.Entry}},
		Chunks: []SourceChunk{{Src: Source{Key: "s"}, Entry: next.Entry}}}
	if Meter(&next.Entry) <= 1 {
		t.Skip("random chunk too small")
	}
	outs, err := Plan(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 1 || outs[0].Rewrite != nil || outs[0].FirstRecord != 10 || outs[0].Revision != 0 {
		t.Fatalf("plan over a full tail: %+v", outs)
	}
}

func TestPlanRejectsBrokenInput(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	s := bundlefmt.StreamID{1}
	a := randomChunk(r, s, 0, 2, 5)
	c := randomChunk(r, s, 5, 2, 5) // gap: a ends at 2
	_, err := Plan(PlanInput{Stream: s, Bucket: "b", StreamEpoch: 1, CapBytes: 100, TargetBytes: 10,
		Chunks: []SourceChunk{{Entry: a.Entry}, {Entry: c.Entry}}})
	if err == nil {
		t.Fatal("a gap between chunks was planned")
	}
	other := randomChunk(r, bundlefmt.StreamID{2}, 0, 1, 5)
	if _, err := Plan(PlanInput{Stream: s, Bucket: "b", StreamEpoch: 1, CapBytes: 100, TargetBytes: 10,
		Chunks: []SourceChunk{{Entry: other.Entry}}}); err == nil {
		t.Fatal("another stream's chunk was planned")
	}
}

func BenchmarkPlan(b *testing.B) {
	r := rand.New(rand.NewPCG(7, 8))
	s := bundlefmt.StreamID{1}
	var chunks []SourceChunk
	next := uint64(0)
	for i := 0; i < 1000; i++ {
		c := randomChunk(r, s, next, 20, 200)
		chunks = append(chunks, SourceChunk{Src: Source{Key: bundlefmt.SlotKey("s", 1, uint64(i))}, Entry: c.Entry})
		next = c.Entry.EndRecord()
	}
	in := PlanInput{Stream: s, Bucket: "b", StreamEpoch: 1, CapBytes: 256 << 10, TargetBytes: 16 << 10, Chunks: chunks}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Plan(in); err != nil {
			b.Fatal(err)
		}
	}
}
