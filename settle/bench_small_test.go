package settle_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/settle"
)

// latency adds a fixed delay to every S3 request (a realistic per-request
// latency of a remote object store in front of the local versitygw).
type latency struct {
	next  http.RoundTripper
	delay time.Duration
}

func (l latency) RoundTrip(req *http.Request) (*http.Response, error) {
	t := time.NewTimer(l.delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-req.Context().Done():
		return nil, req.Context().Err()
	}
	return l.next.RoundTrip(req)
}

// wireCount counts the requests that cross the wire, by method.
type wireCount struct {
	next      http.RoundTripper
	gets, all atomic.Int64
	dials     atomic.Int64 // connections opened (dialer)
}

// dialer is a transport whose new connections w counts.
func (w *wireCount) dialer(delay time.Duration) http.RoundTripper {
	var d net.Dialer
	return latency{next: &http.Transport{MaxIdleConnsPerHost: 256, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		w.dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}, delay: delay}
}

func (w *wireCount) RoundTrip(req *http.Request) (*http.Response, error) {
	w.all.Add(1)
	if req.Method == http.MethodGet {
		w.gets.Add(1)
	}
	return w.next.RoundTrip(req)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkManySmallStreamsAtS3Latency settles many small streams (a cold
// long tail: two slots, a few hundred bytes per stream) through the S3
// backend with a per-request latency added in front of versitygw, at
// several settle concurrencies, and reports objects per second, Postgres
// transactions, S3 requests (as the auditor counts them, and as they
// cross the wire: all, and GETs) and this process's CPU time (user +
// system: the auditor's side, versitygw and Postgres are other processes)
// per settled object. NOVA_BENCH_CYCLE_CPUPROFILE=DIR writes a CPU profile
// of each cycle alone (cycleProfile; -cpuprofile also samples the setup).
// Sizes:
// NOVA_BENCH_STREAMS (default 2000), NOVA_BENCH_S3_LATENCY_MS (default 30).
// Run with -benchtime=1x.
func BenchmarkManySmallStreamsAtS3Latency(b *testing.B) {
	streams := envInt("NOVA_BENCH_STREAMS", 2000)
	delay := time.Duration(envInt("NOVA_BENCH_S3_LATENCY_MS", 30)) * time.Millisecond
	for _, conc := range []int{4, 16, 64} {
		b.Run("concurrency-"+strconv.Itoa(conc), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				wire := &wireCount{}
				wire.next = wire.dialer(delay)
				lat := s3Backend("s3-latency", "small", wire, nil)
				e, _ := newEnv(b, lat, 0, 0)
				writeSlots(b, e, streams, 2, 2, 256)
				s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending},
					settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 100000, MaxBytes: 1 << 50,
						Concurrency: conc, ReapGrace: time.Hour})
				l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "bench", "", 30*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				txBefore := xactCommits(b, e)
				runtime.GC() // the setup's garbage (the write path's: another process in production) is not the cycle's
				cpu0 := processCPU()
				stopProfile := cycleProfile(b, "concurrency-"+strconv.Itoa(conc))
				gets0, all0, dials0 := wire.gets.Load(), wire.all.Load(), wire.dials.Load()
				b.StartTimer()
				start := time.Now()
				c, err := s.Run(e.ctx, l.Fence, cycle.Options{})
				took := time.Since(start)
				b.StopTimer()
				stopProfile()
				cpu := processCPU() - cpu0
				gets, all, dials := wire.gets.Load()-gets0, wire.all.Load()-all0, wire.dials.Load()-dials0
				if err != nil || c.StreamsSettled != int64(streams) {
					b.Fatalf("settled %d of %d streams: %+v %v", c.StreamsSettled, streams, c, err)
				}
				txs := xactCommits(b, e) - txBefore
				objects := float64(c.ObjectsPublished + c.ObjectsAdopted)
				b.ReportMetric(objects/took.Seconds(), "objects/s")
				b.ReportMetric(float64(txs)/objects, "pg-tx/object")
				b.ReportMetric(float64(c.S3Requests)/objects, "s3-req/object")
				b.ReportMetric(cpu.Seconds()*1000/objects, "cpu-ms/object")
				b.ReportMetric(float64(all)/objects, "wire-req/object")
				b.ReportMetric(float64(gets)/objects, "wire-get/object")
				b.ReportMetric(float64(dials)/objects, "dials/object")
				b.ReportMetric(took.Seconds(), "cycle-s")
				_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
			}
		})
	}
}

// BenchmarkManySmallStreamsFile settles many small streams (two slots, a
// few hundred bytes per stream) on the file backend and reports the
// process's CPU time per settled object (user + system, Postgres's own
// excluded: it is another process). Profile it with -cpuprofile.
// NOVA_BENCH_STREAMS (default 2000). Run with -benchtime=1x.
func BenchmarkManySmallStreamsFile(b *testing.B) {
	streams := envInt("NOVA_BENCH_STREAMS", 2000)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e, _ := newEnv(b, backends()[0], 0, 0)
		writeSlots(b, e, streams, 2, 2, 256)
		s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending},
			settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 100000, MaxBytes: 1 << 50,
				Concurrency: 16, ReapGrace: time.Hour})
		l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "bench", "", 30*time.Minute)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC() // the setup's garbage (the write path's: another process in production) is not the cycle's
		cpu0 := processCPU()
		b.StartTimer()
		start := time.Now()
		c, err := s.Run(e.ctx, l.Fence, cycle.Options{})
		took := time.Since(start)
		b.StopTimer()
		cpu := processCPU() - cpu0
		if err != nil || c.StreamsSettled != int64(streams) {
			b.Fatalf("settled %d of %d streams: %+v %v", c.StreamsSettled, streams, c, err)
		}
		objects := float64(c.ObjectsPublished + c.ObjectsAdopted)
		b.ReportMetric(cpu.Seconds()*1000/objects, "cpu-ms/object")
		b.ReportMetric(objects/took.Seconds(), "objects/s")
		_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
	}
}

// cycleProfile starts a CPU profile of one settle cycle into
// $NOVA_BENCH_CYCLE_CPUPROFILE/name.pprof when that is set (the setup's
// writes stay out of it, which go test -cpuprofile samples too) and
// returns what stops it.
func cycleProfile(b *testing.B, name string) func() {
	dir := os.Getenv("NOVA_BENCH_CYCLE_CPUPROFILE")
	if dir == "" {
		return func() {}
	}
	return startProfile(b, filepath.Join(dir, name+".pprof"))
}

// startProfile starts a CPU profile into the file at path and returns
// what stops it.
func startProfile(tb testing.TB, path string) func() {
	f, err := os.Create(path)
	if err != nil {
		tb.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			tb.Error(err)
		}
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
