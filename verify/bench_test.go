package verify_test

import (
	"context"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/verify"
)

// BenchmarkVerifyStar verifies a star of NOVA_BENCH_VERIFY_OBJECTS
// settled objects (default 10^4) of NOVA_BENCH_VERIFY_OBJECT_KIB each
// (default 64), over 100 streams, on the file backend: objects per second
// and the peak of the Go heap during the run, read whole (the window as
// large as an object, as verify read before it read in ranges), in the
// default window (4 MiB) and in 16 KiB windows. `make bench-verify` runs it; the figures are in
// docs/measurements.md#auditor-verify-measured.
func BenchmarkVerifyStar(b *testing.B) {
	n := envInt(b, "NOVA_BENCH_VERIFY_OBJECTS", 10000)
	kib := envInt(b, "NOVA_BENCH_VERIFY_OBJECT_KIB", 64)
	db, _ := newDB(b)
	ctx := context.Background()
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "bench", "", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	store := newObjects(b)
	const streams, recordBytes = 100, 1024
	perObject := int64(kib * 1024 / recordBytes)
	perStream := (n + streams - 1) / streams
	rnd := rand.New(rand.NewPCG(1, 2))
	body := make([]byte, recordBytes)
	var objectBytes int64
	for s := range streams {
		id := catalog.StreamID{14: byte(s >> 8), 15: byte(s)}
		absorbStream(b, db, id, int64(s), int64(perStream)*perObject)
		for o := range perStream {
			key, obj := settleObjectOf(b, db, lease.Fence, id, int64(o)*perObject, perObject, func(int64) []byte {
				for i := range body {
					body[i] = byte(rnd.Uint32())
				}
				return body
			})
			store.put(key, obj)
			objectBytes = int64(len(obj))
		}
	}
	b.ResetTimer()
	for range b.N {
		for _, w := range []struct {
			name   string
			window int64
		}{{"whole", objectBytes}, {"default", verify.DefaultWindow}, {"16KiB", 16 << 10}} {
			runtime.GC()
			stop, peak := heapPeak()
			start := time.Now()
			rep, err := verify.Verify(ctx, db.Streams(), store.reader(), verify.Options{Star: "s1", Window: w.window})
			took := time.Since(start)
			stop()
			if err != nil || len(rep.Findings) != 0 || rep.Objects != streams*perStream {
				b.Fatalf("verify: %d objects, %d findings, %v", rep.Objects, len(rep.Findings), err)
			}
			b.ReportMetric(float64(rep.Objects)/took.Seconds(), w.name+"-objects/s")
			b.ReportMetric(float64(*peak)/(1<<20), w.name+"-peak-heap-MiB")
			b.Logf("%s: %d objects of %d bytes in %s: %.0f objects/s, %.1f MiB/s read, peak heap %.1f MiB (bound: 4 x (footer + window))",
				w.name, rep.Objects, objectBytes, took.Round(time.Millisecond), float64(rep.Objects)/took.Seconds(),
				float64(rep.Bytes)/(1<<20)/took.Seconds(), float64(*peak)/(1<<20))
		}
	}
}

// heapPeak samples the heap's live objects every millisecond until stop.
func heapPeak() (stop func(), peak *int64) {
	var p atomic.Int64
	done := make(chan struct{})
	finished := make(chan struct{})
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	go func() {
		defer close(finished)
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := int64(sample[0].Value.Uint64()); v > p.Load() {
				p.Store(v)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var out int64
	return func() { close(done); <-finished; out = p.Load() }, &out
}

func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("%s=%q: a positive integer", name, v)
	}
	return n
}
