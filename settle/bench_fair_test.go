package settle_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/settle"
)

// fairConcurrency is the stream and per-object request concurrency of
// both sides of BenchmarkSettleVsNaive.
const fairConcurrency = 4

// fairShape is one traffic shape: hot streams of large chunks beside cold
// streams of small ones, flights of one chunk per stream. With rewrite,
// a first cycle settles the flights into standing tails and the measured
// cycle rewrites them after one more small flight per hot stream.
type fairShape struct {
	name                  string
	hot, cold, flights    int
	hotRecs, hotBytes     int // records per hot chunk, bytes per record
	coldRecs, coldBytes   int
	rewrite               bool
	rewriteRecs, rewriteB int
}

var fairShapes = []fairShape{
	{name: "hot-8MiB-chunks", hot: 4, flights: 8, hotRecs: 128, hotBytes: 64 << 10},
	{name: "mixed", hot: 2, cold: 100, flights: 8, hotRecs: 128, hotBytes: 64 << 10, coldRecs: 4, coldBytes: 512},
	{name: "cold-long-tail", cold: 200, flights: 8, coldRecs: 4, coldBytes: 512},
	{name: "tail-rewrite-48MiB", hot: 4, flights: 6, hotRecs: 128, hotBytes: 64 << 10, rewrite: true, rewriteRecs: 16, rewriteB: 4 << 10},
}

// assembleRecorder sums what the store's assemblies report about
// verification (read-back bytes; assemblies verified by the server).
type assembleRecorder struct {
	objstore.Store
	readBack, assemblies, readBackAssemblies atomic.Int64
	unverified                               atomic.Int64 // published without a whole-object check
}

func (r *assembleRecorder) Assemble(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	res, err := r.Store.Assemble(ctx, req)
	r.assemblies.Add(1)
	r.readBack.Add(res.BytesReadBack)
	if res.BytesReadBack > 0 {
		r.readBackAssemblies.Add(1)
	}
	if err == nil && !res.Verified {
		r.unverified.Add(1)
	}
	return res, err
}

// BenchmarkSettleVsNaive settles each shape on versitygw and, in the same
// run on the same slots, a naive settle at equal concurrency: 4 streams at
// once, each downloading its chunks with up to 4 ranged GETs at once,
// building the object in memory and uploading it with one PUT (the settle
// runs 4 streams with 4 parts per object in flight). Both are timed and
// their object bytes counted where they cross the wire (wireCounter). Two
// modes: readback (per-part checksums and read-back, slots stored with
// CRC-32C) and server-checked (the probe's by-source mode, slots stored
// with CRC-32, which versitygw 1.8.0 copies from with a correct CRC-32C).
// Reported per settled byte: bytes through the auditor on the wire, the
// part planner's lower bound, the read-back's share, the naive settle's
// bytes; and the speed ratio. NOVA_BENCH_FAIR_SHAPE picks one shape. Run
// with -benchtime=1x (make bench-settle).
func BenchmarkSettleVsNaive(b *testing.B) {
	only := os.Getenv("NOVA_BENCH_FAIR_SHAPE")
	for _, sh := range fairShapes {
		if only != "" && only != sh.name {
			continue
		}
		for _, mode := range []string{"readback", "server-checked"} {
			b.Run(sh.name+"/"+mode, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					runFair(b, sh, mode)
				}
			})
		}
	}
}

func runFair(b *testing.B, sh fairShape, mode string) {
	b.StopTimer()
	wc := &wireCounter{next: &http.Transport{MaxIdleConnsPerHost: 64}}
	tune := func(c *objstore.S3Config) { c.CopyConcurrency = fairConcurrency }
	if mode == "server-checked" {
		tune = func(c *objstore.S3Config) {
			c.CopyConcurrency, c.PutChecksum = fairConcurrency, objstore.AlgorithmCRC32
		}
	}
	e, _ := newEnv(b, s3Backend("s3-fair", "fair", wc, tune), 0, 0)
	if mode == "server-checked" {
		st := e.store.(*s3store.Store)
		p, err := st.ProbeChecksum(e.ctx, e.std)
		if err != nil {
			b.Fatal(err)
		}
		if e.store, err = st.WithProbe(p); err != nil {
			b.Fatal(err)
		}
	}
	rec := &assembleRecorder{Store: e.store}
	ids, next := writeFairSlots(b, e, sh)
	s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topologyOver(rec), Pending: e.pending},
		settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 100000, MaxBytes: 1 << 50,
			Concurrency: fairConcurrency, ReapGrace: time.Hour})
	before := map[string]catalog.Entry{}
	if sh.rewrite {
		fairCycle(b, e, s, len(ids))
		for _, en := range fairEntries(b, e) {
			before[fmt.Sprintf("%s/%d", en.Stream, en.FirstRecord)] = en
		}
		writeFairFlight(b, e, sh.flights, ids[:sh.hot], next, func(int) (int, int) { return sh.rewriteRecs, sh.rewriteB })
		rec.readBack.Store(0)
		rec.assemblies.Store(0)
		rec.readBackAssemblies.Store(0)
	}
	g0, s0 := wc.got.Load(), wc.sent.Load()
	naive := naiveFair(b, e, sh.rewrite)
	naiveWire := wc.got.Load() - g0 + wc.sent.Load() - s0
	g0, s0 = wc.got.Load(), wc.sent.Load()

	b.StartTimer()
	start := time.Now()
	c := fairCycle(b, e, s, len(ids))
	took := time.Since(start)
	b.StopTimer()
	wire := wc.got.Load() - g0 + wc.sent.Load() - s0

	settled, bound := fairBound(b, e, before)
	counted := c.BytesFetched + c.BytesUploaded
	b.ReportMetric(float64(wire)/float64(settled), "through/settled-byte")
	b.ReportMetric(float64(bound)/float64(settled), "bound/settled-byte")
	b.ReportMetric(float64(rec.readBack.Load())/float64(settled), "readback/settled-byte")
	b.ReportMetric(float64(naiveWire)/float64(naive.settled), "naive-through/settled-byte")
	b.ReportMetric(float64(counted-wire)/float64(wire)*100, "counted-vs-wire-%")
	b.ReportMetric(float64(settled)/took.Seconds()/(1<<20), "MiB/s")
	b.ReportMetric(float64(naive.settled)/naive.took.Seconds()/(1<<20), "naive-MiB/s")
	b.ReportMetric((float64(settled)/took.Seconds())/(float64(naive.settled)/naive.took.Seconds()), "x-naive-speed")
	b.ReportMetric(float64(rec.readBackAssemblies.Load()), "read-back-objects")
	b.ReportMetric(float64(rec.assemblies.Load()), "objects")
	b.Logf("%s/%s: settle %v for %d bytes (%d through on the wire, %d counted, bound %d, read back %d in %d of %d objects, %d copied); naive %v for %d bytes (%d on the wire)",
		sh.name, mode, took.Round(time.Millisecond), settled, wire, counted, bound, rec.readBack.Load(), rec.readBackAssemblies.Load(),
		rec.assemblies.Load(), c.BytesCopied, naive.took.Round(time.Millisecond), naive.settled, naiveWire)
}

// fairCycle runs the settle once and requires every stream settled.
func fairCycle(b *testing.B, e *env, s *settle.Settler, streams int) cycle.Counts {
	b.Helper()
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "bench", "", 30*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	c, err := s.Run(e.ctx, l.Fence, cycle.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if c.StreamsQuarantined != 0 || c.StreamsSettled == 0 {
		q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
		b.Fatalf("settled %d of %d streams: %+v, quarantine %+v", c.StreamsSettled, streams, c, q)
	}
	return c
}

// writeFairSlots creates the shape's streams and writes its flights.
func writeFairSlots(b testing.TB, e *env, sh fairShape) ([]bundlefmt.StreamID, []uint64) {
	ids := make([]bundlefmt.StreamID, sh.hot+sh.cold)
	for i := range ids {
		ids[i] = bundlefmt.StreamID{0: 0xfa, 14: byte(i >> 8), 15: byte(i)}
		if err := writepath.New(e.db).CreateStream(e.ctx, ids[i], "s1", "b0"); err != nil {
			b.Fatal(err)
		}
	}
	next := make([]uint64, len(ids))
	for seq := 0; seq < sh.flights; seq++ {
		writeFairFlight(b, e, seq, ids, next, func(i int) (int, int) {
			if i < sh.hot {
				return sh.hotRecs, sh.hotBytes
			}
			return sh.coldRecs, sh.coldBytes
		})
	}
	return ids, next
}

// writeFairFlight writes slot seq with one chunk per stream of ids (size
// gives its records and their bytes) and absorbs it.
func writeFairFlight(b testing.TB, e *env, seq int, ids []bundlefmt.StreamID, next []uint64, size func(i int) (int, int)) {
	r := rand.New(rand.NewPCG(uint64(seq), 5))
	var chunks []bundlefmt.Chunk
	var batches []writepath.AbsorbBatch
	for i, id := range ids {
		n, rb := size(i)
		body := make([]byte, rb)
		for j := range body {
			body[j] = byte(r.Uint32())
		}
		cb := bundlefmt.NewChunkBuilder(id, next[i])
		for j := 0; j < n; j++ {
			body[j%len(body)] ^= byte(i + j)
			if err := cb.Add(bundlefmt.Record{Body: body}, int64(1_700_000_000_000+seq), j == n-1); err != nil {
				b.Fatal(err)
			}
		}
		chunks = append(chunks, cb.Chunk())
		batches = append(batches, writepath.AbsorbBatch{Stream: id, FirstRecord: int64(next[i]), Count: int64(n)})
		next[i] += uint64(n)
	}
	putFlight(b, e, seq, chunks, batches)
}

func fairEntries(b *testing.B, e *env) []catalog.Entry {
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	var out []catalog.Entry
	for _, st := range streams {
		en, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, en...)
	}
	return out
}

// fairBound sums the bytes of the entries the measured cycle published
// (those not in before, by stream and first record and revision) and the
// part planner's lower bound of bytes through the process for them: every
// chunk a source range, a rewritten tail's data one more, the footer local.
func fairBound(b *testing.B, e *env, before map[string]catalog.Entry) (settled, bound int64) {
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range streams {
		entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		for _, en := range entries {
			old, had := before[fmt.Sprintf("%s/%d", en.Stream, en.FirstRecord)]
			if had && old.Revision == en.Revision {
				continue
			}
			key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
			settled += en.ObjectBytes
			var specs []objstore.PieceSpec
			var skip int64
			if had {
				specs = append(specs, objstore.PieceSpec{Len: old.FooterOffset, Copy: true})
				skip = old.FooterOffset
			}
			for _, x := range entriesOf(b, e, key, en) {
				end := int64(x.DataOffset + x.ChunkBytes())
				if end <= skip {
					continue
				}
				specs = append(specs, objstore.PieceSpec{Len: end - max(skip, int64(x.DataOffset)), Copy: true})
			}
			specs = append(specs, objstore.PieceSpec{Len: en.ObjectBytes - en.FooterOffset})
			plan, err := objstore.PlanParts(specs, objstore.DefaultLimits)
			if err != nil {
				b.Fatal(err)
			}
			bound += plan.Fetched() + plan.Uploaded()
		}
	}
	return settled, bound
}

type naiveResult struct {
	took    time.Duration
	settled int64
}

// naiveFair is the baseline at equal concurrency: fairConcurrency streams
// at once; per stream, the standing tail's data (with rewrite) in 8 MiB
// ranged GETs and every slot footer and chunk, fairConcurrency GETs at a
// time, then the object built in memory and one PUT to a key of its own.
func naiveFair(b *testing.B, e *env, rewrite bool) naiveResult {
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	var settled atomic.Int64
	start := time.Now()
	g, ctx := errgroup.WithContext(e.ctx)
	g.SetLimit(fairConcurrency)
	for _, st := range streams {
		g.Go(func() error {
			var chunks []bundlefmt.Chunk
			if rewrite {
				ens, err := e.db.Streams().EntriesOfStream(ctx, st.ID)
				if err != nil || len(ens) == 0 {
					return fmt.Errorf("entries of %s: %d, %v", st.ID, len(ens), err)
				}
				tail := ens[len(ens)-1]
				key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(tail.Epoch), uint64(tail.FirstRecord), uint32(tail.Revision))
				buf, size, err := e.store.GetRange(ctx, e.std, key, tail.FooterOffset, tail.FooterLength+bundlefmt.TrailerSize)
				if err != nil {
					return err
				}
				f, err := bundlefmt.OpenFooter(key, uint64(tail.FooterOffset), buf, uint64(size), bundlefmt.SettledBase)
				if err != nil {
					return err
				}
				es, err := f.Entries()
				if err != nil {
					return err
				}
				data := make([]byte, tail.FooterOffset)
				wg, wctx := errgroup.WithContext(ctx)
				wg.SetLimit(fairConcurrency)
				for off := int64(0); off < tail.FooterOffset; off += 8 << 20 {
					wg.Go(func() error {
						n := min(8<<20, tail.FooterOffset-off)
						d, _, err := e.store.GetRange(wctx, e.std, key, off, n)
						copy(data[off:], d)
						return err
					})
				}
				if err := wg.Wait(); err != nil {
					return err
				}
				for _, x := range es {
					chunks = append(chunks, bundlefmt.Chunk{Entry: x, Data: data[x.DataOffset : x.DataOffset+x.ChunkBytes()]})
				}
			}
			refs, err := writepath.New(e.db).RefsOfStream(ctx, st.ID)
			if err != nil {
				return err
			}
			type slot struct {
				key   string
				ref   catalog.SlotRef
				first uint64 // the ref's first record for the first slot of a ref
				f     *bundlefmt.Footer
				chunk bundlefmt.Chunk
			}
			var slots []*slot
			for _, ref := range refs {
				for _, s := range ref.Slots {
					slots = append(slots, &slot{key: bundlefmt.SlotKey("s1", uint64(s.Epoch), uint64(s.Seq)), ref: s, first: uint64(ref.FirstRecord)})
				}
			}
			var mu sync.Mutex
			fg, fctx := errgroup.WithContext(ctx)
			fg.SetLimit(fairConcurrency)
			for _, s := range slots {
				fg.Go(func() error {
					d, size, err := e.store.GetRange(fctx, e.std, s.key, s.ref.FooterOffset, s.ref.FooterLength+bundlefmt.TrailerSize)
					if err != nil {
						return err
					}
					f, err := bundlefmt.OpenFooter(s.key, uint64(s.ref.FooterOffset), d, uint64(size), bundlefmt.EnvelopeSize)
					mu.Lock()
					s.f = f
					mu.Unlock()
					return err
				})
			}
			if err := fg.Wait(); err != nil {
				return err
			}
			rec := uint64(0)
			if len(slots) > 0 {
				rec = slots[0].first
			}
			for _, s := range slots {
				i, _ := s.f.Find(st.ID, rec)
				en, err := s.f.Entry(i)
				if err != nil {
					return err
				}
				s.chunk.Entry = en
				rec = en.EndRecord()
			}
			cg, cctx := errgroup.WithContext(ctx)
			cg.SetLimit(fairConcurrency)
			for _, s := range slots {
				cg.Go(func() error {
					d, _, err := e.store.GetRange(cctx, e.std, s.key, int64(s.chunk.Entry.DataOffset), int64(s.chunk.Entry.ChunkBytes()))
					s.chunk.Data = d
					return err
				})
			}
			if err := cg.Wait(); err != nil {
				return err
			}
			for _, s := range slots {
				chunks = append(chunks, s.chunk)
			}
			obj, err := bundlefmt.EncodeSettled(chunks)
			if err != nil {
				return err
			}
			if err := e.store.PutIfAbsent(ctx, e.std, fmt.Sprintf("naive/%s", st.ID), obj); err != nil {
				return err
			}
			settled.Add(int64(len(obj)))
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	return naiveResult{took: time.Since(start), settled: settled.Load()}
}
