package settle_test

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/settle"
)

// smallStar is a star of small streams written flight by flight, one chunk
// per stream per flight, with the data bytes each stream's chunks hold.
type smallStar struct {
	e    *env
	ids  []bundlefmt.StreamID
	data map[bundlefmt.StreamID][]byte // every chunk's bytes, in record order
	seq  int
}

func newSmallStar(t testing.TB, e *env, streams int) *smallStar {
	t.Helper()
	s := &smallStar{e: e, data: map[bundlefmt.StreamID][]byte{}}
	for i := 0; i < streams; i++ {
		id := bundlefmt.StreamID{0: 0xfe, 14: byte(i >> 8), 15: byte(i)}
		if err := writepath.New(e.db).CreateStream(e.ctx, id, "s1", "b0"); err != nil {
			t.Fatal(err)
		}
		s.ids = append(s.ids, id)
	}
	return s
}

// write writes flights more flights of perChunk records of recBytes bytes
// per stream; bad, when set, corrupts one byte of that stream's chunk in
// the first of them (its DataCRC no longer agrees).
func (s *smallStar) write(t testing.TB, flights, perChunk, recBytes int, bad *bundlefmt.StreamID) {
	t.Helper()
	for n := 0; n < flights; n, s.seq = n+1, s.seq+1 {
		var chunks []bundlefmt.Chunk
		var batches []writepath.AbsorbBatch
		for i, id := range s.ids {
			cb := bundlefmt.NewChunkBuilder(id, uint64(s.seq*perChunk))
			for j := 0; j < perChunk; j++ {
				body := bytes.Repeat([]byte{byte(i + j + s.seq)}, recBytes)
				body[0] = byte(i >> 8)
				if err := cb.Add(bundlefmt.Record{Body: body}, int64(1_700_000_000_000+s.seq), j == perChunk-1); err != nil {
					t.Fatal(err)
				}
			}
			chunks = append(chunks, cb.Chunk())
			batches = append(batches, writepath.AbsorbBatch{Stream: id, FirstRecord: int64(s.seq * perChunk), Count: int64(perChunk)})
		}
		obj, err := bundlefmt.EncodeFlight(1, uint64(s.seq), 7, chunks)
		if err != nil {
			t.Fatal(err)
		}
		key := bundlefmt.SlotKey("s1", 1, uint64(s.seq))
		f, err := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range s.ids {
			i, ok := f.Find(id, uint64(s.seq*perChunk))
			if !ok {
				t.Fatalf("stream %s has no chunk in %s", id, key)
			}
			off, n := f.DataOffset(i), f.Row(i).ChunkBytes
			s.data[id] = append(s.data[id], obj[off:off+n]...)
			if bad != nil && *bad == id && n > 0 {
				obj[off+n-1] ^= 0xff
				bad = nil
			}
		}
		if err := s.e.store.PutIfAbsent(s.e.ctx, s.e.std, key, obj); err != nil {
			t.Fatal(err)
		}
		if err := writepath.New(s.e.db).Absorb(s.e.ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(s.seq),
			FooterOffset: int64(f.FooterOffset()), FooterLength: int64(f.FooterLength()), Batches: batches}}); err != nil {
			t.Fatal(err)
		}
	}
}

// check requires every stream but skip to be settled, its settled objects
// holding exactly the data bytes written.
func (s *smallStar) check(t testing.TB, skip *bundlefmt.StreamID) {
	t.Helper()
	streams, err := s.e.db.Streams().StreamsOfStar(s.e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range streams {
		if skip != nil && st.ID == *skip {
			continue
		}
		if st.SettledThrough != st.NextRecord {
			t.Fatalf("stream %s: settled_through %d, next_record %d", st.ID, st.SettledThrough, st.NextRecord)
		}
		entries, err := s.e.db.Streams().EntriesOfStream(s.e.ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		for _, en := range entries {
			key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
			for _, c := range s.e.chunksOf(st, en) {
				d, _, err := s.e.store.GetRange(s.e.ctx, s.e.std, key, int64(c.DataOffset), int64(c.ChunkBytes()))
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, d...)
			}
		}
		if !bytes.Equal(got, s.data[st.ID]) {
			t.Fatalf("stream %s: settled %d data bytes, not the %d written", st.ID, len(got), len(s.data[st.ID]))
		}
	}
}

// reqCounter counts S3 requests as they cross the wire.
type reqCounter struct {
	next            http.RoundTripper
	gets, puts, all int
	mu              chan struct{}
}

func newReqCounter() *reqCounter {
	return &reqCounter{next: http.DefaultTransport, mu: make(chan struct{}, 1)}
}

func (c *reqCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	c.mu <- struct{}{}
	c.all++
	switch req.Method {
	case http.MethodGet:
		c.gets++
	case http.MethodPut:
		c.puts++
	}
	<-c.mu
	return c.next.RoundTrip(req)
}

// since returns the GETs and PUTs since the snapshot (gets, puts).
func (c *reqCounter) since(gets, puts int) (int, int) {
	c.mu <- struct{}{}
	defer func() { <-c.mu }()
	return c.gets - gets, c.puts - puts
}

func (c *reqCounter) now() (int, int) { return c.since(0, 0) }

func smallSettler(e *env, slotRead int64, conc int) *settle.Settler {
	return e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending},
		settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 100000, MaxBytes: 1 << 50,
			Concurrency: conc, ReapGrace: time.Hour, SlotReadBytes: slotRead})
}

// TestSmallStreamsReadEachSlotOnce settles N small streams sharing K slots
// on versitygw through a transport that counts the requests: each slot is
// read with one ranged GET (besides its envelope and footer GETs), not
// once per stream, and each object is one PUT. The next cycle rewrites
// every stream's tail from the tail cache (no GET of a tail); a fresh
// settler (its tail cache empty, as after a restart) reads each tail in
// one GET.
func TestSmallStreamsReadEachSlotOnce(t *testing.T) {
	const n, k = 40, 3
	rc := newReqCounter()
	e, _ := newEnv(t, s3Backend("s3-slotreads", "slotreads", rc, nil), 0, 0)
	star := newSmallStar(t, e, n)
	s := smallSettler(e, 0, 4)

	round := func(name string, s *settle.Settler, wantGets int) {
		t.Helper()
		star.write(t, k, 2, 256, nil)
		g0, p0 := rc.now()
		c, err := e.cycle("s1", s)
		if err != nil || c.StreamsSettled != n || c.StreamsQuarantined != 0 {
			t.Fatalf("%s: %+v %v", name, c, err)
		}
		gets, puts := rc.since(g0, p0)
		t.Logf("%s: %d streams over %d slots: %d GETs, %d PUTs; counted %d requests", name, n, k, gets, puts, c.S3Requests)
		if puts != n {
			t.Errorf("%s: %d PUTs for %d objects", name, puts, n)
		}
		if gets != wantGets {
			t.Errorf("%s: %d GETs, want %d (a read per slot, not per stream and slot: %d)", name, gets, wantGets, n*k)
		}
		if int(c.S3Requests) != gets+puts {
			t.Errorf("%s: the cycle counted %d requests, %d crossed the wire", name, c.S3Requests, gets+puts)
		}
		star.check(t, nil)
	}
	// Each slot: envelope, footer, and one range of every stream's chunk.
	round("first settle", s, 3*k)
	round("tail rewrite, cached", s, 3*k)
	round("tail rewrite, not cached", smallSettler(e, 0, 4), 3*k+n)
}

// TestSlotReadBudgetHolds settles the same shape with a slot-read budget
// too small for any slot's range: nothing is held, every piece is read
// alone, and every stream settles all the same.
func TestSlotReadBudgetHolds(t *testing.T) {
	const n, k = 20, 2
	rc := newReqCounter()
	e, _ := newEnv(t, s3Backend("s3-slotbudget", "slotbudget", rc, nil), 0, 0)
	star := newSmallStar(t, e, n)
	star.write(t, k, 2, 256, nil)
	g0, p0 := rc.now()
	c, err := e.cycle("s1", smallSettler(e, 1, 4))
	if err != nil || c.StreamsSettled != n {
		t.Fatalf("%+v %v", c, err)
	}
	gets, puts := rc.since(g0, p0)
	t.Logf("budget 1 byte: %d GETs, %d PUTs", gets, puts)
	if gets != 2*k+n*k || puts != n {
		t.Errorf("%d GETs and %d PUTs, want %d (a read per stream and slot) and %d", gets, puts, 2*k+n*k, n)
	}
	star.check(t, nil)
}

// TestBadChunkInASharedRange corrupts one stream's chunk inside a slot
// whose chunks are read in one range: that stream alone is quarantined
// (checksum, naming the slot); the others settle from the same range.
func TestBadChunkInASharedRange(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			const n = 12
			e, _ := newEnv(t, b, 0, 0)
			star := newSmallStar(t, e, n)
			bad := star.ids[5]
			star.write(t, 2, 2, 256, &bad)
			c, err := e.cycle("s1", smallSettler(e, 0, 3))
			if err != nil || c.StreamsSettled != n-1 || c.StreamsQuarantined != 1 {
				t.Fatalf("%+v %v", c, err)
			}
			qs, err := e.db.Settle().Quarantined(e.ctx, "s1")
			if err != nil || len(qs) != 1 || qs[0].Stream == nil || *qs[0].Stream != bad || qs[0].ErrorClass != cycle.ClassChecksum ||
				qs[0].SlotKey != bundlefmt.SlotKey("s1", 1, 0) {
				t.Fatalf("quarantined: %+v %v", qs, err)
			}
			star.check(t, &bad)
		})
	}
}

// TestSmallStreamsOnTheFileStore settles small streams over shared slots
// and rewrites their tails twice on the file backend (its store plans no
// parts: the default limits decide what is read through the process).
func TestSmallStreamsOnTheFileStore(t *testing.T) {
	e, _ := newEnv(t, backends()[0], 0, 0)
	star := newSmallStar(t, e, 16)
	s := smallSettler(e, 0, 4)
	for r := 0; r < 3; r++ {
		star.write(t, 2, 2, 256, nil)
		if r == 2 {
			s = smallSettler(e, 0, 4) // a cold tail cache
		}
		c, err := e.cycle("s1", s)
		if err != nil || c.StreamsSettled != 16 {
			t.Fatalf("round %d: %+v %v", r, c, err)
		}
		star.check(t, nil)
	}
}
