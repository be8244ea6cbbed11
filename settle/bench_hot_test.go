package settle_test

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/settle"
)

// writeHotBacklog writes one stream's backlog of records (bodies of
// recBytes) as slots of perSlot records each, absorbed a slot at a time,
// straight into the store and the catalog (no simulator: sizes are exact).
func writeHotBacklog(b *testing.B, e *env, records, perSlot, recBytes int) catalog.StreamID {
	id := bundlefmt.StreamID{0: 0x40, 15: 1}
	if err := writepath.New(e.db).CreateStream(e.ctx, id, "s1", "b0"); err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	body := make([]byte, recBytes)
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	for seq, first := 0, 0; first < records; seq++ {
		n := min(perSlot, records-first)
		cb := bundlefmt.NewChunkBuilder(id, uint64(first))
		for j := 0; j < n; j++ {
			body[j%len(body)] ^= byte(j)
			if err := cb.Add(bundlefmt.Record{Body: body}, int64(1_700_000_000_000+first+j), j == n-1); err != nil {
				b.Fatal(err)
			}
		}
		putFlight(b, e, seq, []bundlefmt.Chunk{cb.Chunk()},
			[]writepath.AbsorbBatch{{Stream: id, FirstRecord: int64(first), Count: int64(n)}})
		first += n
	}
	return id
}

// BenchmarkHotBacklogPeakRSS settles one hot stream's backlog of 10^5 and
// 10^6 records (NOVA_BENCH_BACKLOG sets the larger; make bench-scale runs
// 10^7) of 100-byte records with the default window bounds on the file
// backend, and reports the process's peak RSS growth during the cycle for
// each: it must not grow with the backlog. Run with -benchtime=1x.
func BenchmarkHotBacklogPeakRSS(b *testing.B) {
	large := envInt("NOVA_BENCH_BACKLOG", 1_000_000)
	for _, records := range []int{large / 10, large} {
		b.Run("records-"+strconv.Itoa(records), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				e, _ := newEnv(b, backends()[0], 0, 0)
				writeHotBacklog(b, e, records, 20_000, 100)
				s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending},
					settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 10, MaxBytes: 1 << 50,
						Concurrency: 4, ReapGrace: time.Hour})
				l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "bench", "", 30*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				resetPeakRSS()
				before := peakRSS()
				b.StartTimer()
				start := time.Now()
				c, err := s.Run(e.ctx, l.Fence, cycle.Options{})
				took := time.Since(start)
				b.StopTimer()
				if err != nil || c.StreamsSettled != 1 {
					b.Fatalf("%+v %v", c, err)
				}
				b.ReportMetric(float64(peakRSS()-before)/(1<<20), "peak-rss-growth-MiB")
				b.ReportMetric(float64(records)/took.Seconds(), "records/s")
				b.ReportMetric(float64(c.ObjectsPublished), "objects")
				_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
			}
		})
	}
}
