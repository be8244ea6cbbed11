package main

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Memory per led star, bounded: a member leading the 200 stars of a
// metastore holds at most maxHeapPerStar more live heap per star, and
// maxGoroutinesPerStar more goroutines per star, than the same member
// leading one of them (the member's fixed part: pools, the fleet's loop,
// the HTTP server). Each star's part is its daemon (lease term, schedule,
// admin state), its cycle's steps and their caches, and its metrics
// series, which a member registers in one registry under a star label
// (docs/architecture.md#per-star-isolation-and-shared-budgets). The heap is read after a
// collection the profiler forces (/debug/pprof/heap?gc=1), so garbage is
// not counted.
func TestFleetMemoryPerStar(t *testing.T) {
	if testing.Short() {
		t.Skip("leads 200 stars")
	}
	const (
		stars                = 200
		maxHeapPerStar       = 512 << 10
		maxGoroutinesPerStar = 8
	)
	e := newFleetEnv(t, stars)
	measure := func(name, pattern string, n int) (heap, goroutines float64) {
		t.Helper()
		p := startServeWith(t, name, e.url, serveOptions{fleet: true, quiet: true},
			"--stars", pattern, "--fs-root", e.root, "--data-dir", t.TempDir(), "--schedule", "@every 5s",
			"--lease-ttl", fleetTTL.String(), "--lease-renew", fleetTick.String(), "--fleet-grace", fleetGrace.String(),
			"--pprof", "--start-checks=false", "--log-level", "info")
		eventually(t, 3*time.Minute, name+" leads its stars, each after an ok cycle", func() bool {
			if p.processGauge("nova_auditor_fleet_stars_owned") != float64(n) {
				return false
			}
			var ok int
			if err := e.db.Pool().QueryRow(e.ctx, `SELECT count(DISTINCT star) FROM nova.auditor_runs WHERE outcome = 'ok'`).Scan(&ok); err != nil {
				t.Fatal(err)
			}
			return ok >= n
		})
		time.Sleep(6 * time.Second) // an idle cycle of each
		if code, _ := p.get("/debug/pprof/heap?gc=1"); code != 200 {
			t.Fatalf("%s: the heap profile: HTTP %d", name, code)
		}
		heap, goroutines = p.processGauge("go_memstats_heap_inuse_bytes"), p.processGauge("go_goroutines")
		t.Logf("%s leading %d stars: heap in use %.1f MiB, %v goroutines, resident %.1f MiB", name, n, heap/(1<<20),
			goroutines, p.processGauge("process_resident_memory_bytes")/(1<<20))
		p.signal(syscall.SIGTERM)
		if code := p.wait(60 * time.Second); code != 0 {
			t.Fatalf("%s drained with exit %d", name, code)
		}
		return heap, goroutines
	}
	heap1, g1 := measure("one", e.stars[0], 1)
	heapN, gN := measure("all", "all", stars)
	perHeap := (heapN - heap1) / (stars - 1)
	perG := (gN - g1) / (stars - 1)
	t.Logf("per led star: %s KiB of heap, %.1f goroutines", strconv.FormatFloat(perHeap/1024, 'f', 1, 64), perG)
	if perHeap > maxHeapPerStar {
		t.Errorf("%.0f KiB of heap per led star, want at most %d", perHeap/1024, maxHeapPerStar>>10)
	}
	if perG > maxGoroutinesPerStar {
		t.Errorf("%.1f goroutines per led star, want at most %d", perG, maxGoroutinesPerStar)
	}
}
