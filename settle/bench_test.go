package settle_test

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
)

// BenchmarkSettleEndToEnd settles real slots on versitygw and reports, per
// shape: bytes through the auditor (fetched + uploaded) per settled byte
// against the part planner's lower bound, S3 requests per settled GiB,
// Postgres transactions per object, slot footer GETs per slot, throughput
// against a naive download-and-reupload settle of the same outputs in the
// same run, and peak RSS growth during the settle. Run with -benchtime=1x.
func BenchmarkSettleEndToEnd(b *testing.B) {
	shapes := []struct {
		name              string
		streams, flights  int
		recordsPerChunk   int
		recordBytes       int
		capBytes, targetB int64
	}{
		{"hot-8MiB-chunks", 2, 8, 128, 64 << 10, 256 << 20, 4 << 20},
		{"cold-long-tail", 200, 8, 4, 512, 256 << 20, 4 << 20},
	}
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e := benchEnv(b)
				slots := writeSlots(b, e, sh.streams, sh.flights, sh.recordsPerChunk, sh.recordBytes)
				reg := prometheus.NewRegistry()
				metrics, err := settle.NewMetrics(reg)
				if err != nil {
					b.Fatal(err)
				}
				s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending,
					Metrics: metrics},
					settle.Config{CapBytes: sh.capBytes, TargetBytes: sh.targetB, MaxStreams: 100000, MaxBytes: 1 << 50,
						Concurrency: 4, ReapGrace: time.Hour})
				l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "bench", "", 10*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				naive := naiveSettle(b, e)
				txBefore := xactCommits(b, e)
				resetPeakRSS()
				rssBefore := peakRSS()
				b.StartTimer()
				start := time.Now()
				c, err := s.Run(e.ctx, l.Fence, cycle.Options{})
				took := time.Since(start)
				b.StopTimer()
				if err != nil {
					b.Fatal(err)
				}
				if c.StreamsSettled != int64(sh.streams) {
					q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
					b.Fatalf("settled %d of %d streams: %+v, quarantine %+v", c.StreamsSettled, sh.streams, c, q)
				}
				rssGrowth := peakRSS() - rssBefore
				txs := xactCommits(b, e) - txBefore
				settled, bound := lowerBound(b, e)
				objects := c.ObjectsPublished + c.ObjectsAdopted
				b.ReportMetric(float64(c.BytesFetched+c.BytesUploaded)/float64(settled), "through/settled-byte")
				b.ReportMetric(float64(bound)/float64(settled), "bound/settled-byte")
				b.ReportMetric(float64(c.S3Requests)/(float64(settled)/(1<<30)), "s3-req/GiB")
				b.ReportMetric(float64(txs)/float64(objects), "pg-tx/object")
				b.ReportMetric(footerGets(reg)/float64(slots), "footer-gets/slot")
				b.ReportMetric(float64(settled)/took.Seconds()/(1<<20), "MiB/s")
				b.ReportMetric(naive.Seconds()/took.Seconds(), "x-naive-speed")
				b.ReportMetric(float64(rssGrowth)/(1<<20), "peak-rss-growth-MiB")
				b.ReportMetric(float64(objects), "objects")
				_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
			}
		})
	}
}

// footerGets reads the settle step's footer GET counter from reg.
func footerGets(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "nova_auditor_slot_footer_gets_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// benchEnv is an env on versitygw without novasim (the benchmark writes
// exact chunk sizes itself).
func benchEnv(b *testing.B) *env {
	b.Helper()
	e, _ := newEnv(b, backends()[1], 0, 0)
	return e
}

// writeSlots writes flights of one chunk per stream each and absorbs them.
func writeSlots(b *testing.B, e *env, streams, flights, perChunk, recBytes int) int {
	ids := make([]bundlefmt.StreamID, streams)
	for i := range ids {
		ids[i] = bundlefmt.StreamID{0: 0xbe, 14: byte(i >> 8), 15: byte(i)}
		if err := writepath.New(e.db).CreateStream(e.ctx, ids[i], "s1", "b0"); err != nil {
			b.Fatal(err)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, recBytes)
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	for seq := 0; seq < flights; seq++ {
		var chunks []bundlefmt.Chunk
		var batches []writepath.AbsorbBatch
		for i, id := range ids {
			cb := bundlefmt.NewChunkBuilder(id, uint64(seq*perChunk))
			for j := 0; j < perChunk; j++ {
				body[j%len(body)] ^= byte(i + j)
				if err := cb.Add(bundlefmt.Record{Body: body}, int64(1_700_000_000_000+seq), j == perChunk-1); err != nil {
					b.Fatal(err)
				}
			}
			chunks = append(chunks, cb.Chunk())
			batches = append(batches, writepath.AbsorbBatch{Stream: id, FirstRecord: int64(seq * perChunk), Count: int64(perChunk)})
		}
		putFlight(b, e, seq, chunks, batches)
	}
	return flights
}

// putFlight writes slot 1/seq of star s1 holding chunks into the standard
// bucket and absorbs it with batches.
func putFlight(b testing.TB, e *env, seq int, chunks []bundlefmt.Chunk, batches []writepath.AbsorbBatch) {
	b.Helper()
	obj, err := bundlefmt.EncodeFlight(1, uint64(seq), 7, chunks)
	if err != nil {
		b.Fatal(err)
	}
	key := bundlefmt.SlotKey("s1", 1, uint64(seq))
	if err := e.store.PutIfAbsent(e.ctx, e.std, key, obj); err != nil {
		b.Fatal(err)
	}
	f, err := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
	if err != nil {
		b.Fatal(err)
	}
	if err := writepath.New(e.db).Absorb(e.ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(seq),
		FooterOffset: int64(f.FooterOffset()), FooterLength: int64(f.FooterLength()), Batches: batches}}); err != nil {
		b.Fatal(err)
	}
}

// lowerBound sums the settled bytes and, over every settled object, the
// part planner's lower bound of bytes through the process for its pieces
// (one source range per chunk, the footer local).
func lowerBound(b *testing.B, e *env) (settled, bound int64) {
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range streams {
		entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		for _, en := range entries {
			key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
			settled += en.ObjectBytes
			var specs []objstore.PieceSpec
			for _, x := range entriesOf(b, e, key, en) {
				specs = append(specs, objstore.PieceSpec{Len: int64(x.ChunkBytes()), Copy: true})
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

// naiveSettle is the baseline: for every stream, read each ref's slot
// footer, download the stream's chunk bytes, build the settled object in
// memory and upload it with one PUT (to a key of its own). It returns the
// time it took.
func naiveSettle(b *testing.B, e *env) time.Duration {
	start := time.Now()
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		b.Fatal(err)
	}
	for _, st := range streams {
		refs, _ := writepath.New(e.db).RefsOfStream(e.ctx, st.ID)
		var chunks []bundlefmt.Chunk
		for _, ref := range refs {
			rec := uint64(ref.FirstRecord)
			for _, s := range ref.Slots {
				key := bundlefmt.SlotKey("s1", uint64(s.Epoch), uint64(s.Seq))
				buf, size, err := e.store.GetRange(e.ctx, e.std, key, s.FooterOffset, s.FooterLength+bundlefmt.TrailerSize)
				if err != nil {
					b.Fatal(err)
				}
				f, err := bundlefmt.OpenFooter(key, uint64(s.FooterOffset), buf, uint64(size), bundlefmt.EnvelopeSize)
				if err != nil {
					b.Fatal(err)
				}
				i, _ := f.Find(st.ID, rec)
				en, err := f.Entry(i)
				if err != nil {
					b.Fatal(err)
				}
				data, _, err := e.store.GetRange(e.ctx, e.std, key, int64(en.DataOffset), int64(en.ChunkBytes()))
				if err != nil {
					b.Fatal(err)
				}
				chunks = append(chunks, bundlefmt.Chunk{Entry: en, Data: data})
				rec = en.EndRecord()
			}
		}
		obj, err := bundlefmt.EncodeSettled(chunks)
		if err != nil {
			b.Fatal(err)
		}
		if err := e.store.PutIfAbsent(e.ctx, e.std, fmt.Sprintf("naive/%s", st.ID), obj); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

func entriesOf(b *testing.B, e *env, key string, en catalog.Entry) []bundlefmt.Entry {
	buf, size, err := e.store.GetRange(e.ctx, e.std, key, en.FooterOffset, en.FooterLength+bundlefmt.TrailerSize)
	if err != nil {
		b.Fatal(err)
	}
	f, err := bundlefmt.OpenFooter(key, uint64(en.FooterOffset), buf, uint64(size), bundlefmt.SettledBase)
	if err != nil {
		b.Fatal(err)
	}
	es, err := f.Entries()
	if err != nil {
		b.Fatal(err)
	}
	return es
}

func xactCommits(b testing.TB, e *env) int64 {
	time.Sleep(1100 * time.Millisecond) // Postgres publishes backend stats at most once a second
	n, err := writepath.New(e.db).CommittedTransactions(e.ctx)
	if err != nil {
		b.Fatal(err)
	}
	return n
}

// resetPeakRSS resets the kernel's VmHWM for this process.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n << 10
		}
	}
	return 0
}
