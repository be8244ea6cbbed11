package settle_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/settle"
)

// TestTailRewritesFromSpill settles small streams on versitygw with a tail
// cache whose memory holds only a few of their tails: the others spill to
// disk, and the next cycle rewrites every tail without a GET of it, from
// memory or from its spill segment. Spilled tails that are no longer what
// was written (corrupted here) are caught by the checks every held byte
// passes: those tails are read from the store, and every stream still
// settles its exact bytes.
func TestTailRewritesFromSpill(t *testing.T) {
	const n, k = 40, 3
	rc := newReqCounter()
	e, _ := newEnv(t, s3Backend("s3-tailspill", "tailspill", rc, nil), 0, 0)
	star := newSmallStar(t, e, n)
	reg := prometheus.NewRegistry()
	m, err := settle.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending, Metrics: m},
		settle.Config{CapBytes: 256 << 20, TargetBytes: 4 << 20, MaxStreams: 100000, MaxBytes: 1 << 50,
			Concurrency: 4, ReapGrace: time.Hour,
			TailCacheBytes: 16 << 10, TailSpillDir: dir, TailSpillBytes: 1 << 20}) // a few tails in memory, the rest spilled

	reads := func(outcome string) int {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "nova_auditor_tail_reads_total" {
				continue
			}
			for _, mt := range mf.GetMetric() {
				if mt.GetLabel()[0].GetValue() == outcome {
					return int(mt.GetCounter().GetValue())
				}
			}
		}
		t.Fatalf("no tail reads of outcome %s", outcome)
		return 0
	}
	round := func(name string, wantGets int) {
		t.Helper()
		star.write(t, k, 2, 256, nil)
		g0, p0 := rc.now()
		c, err := e.cycle("s1", s)
		if err != nil || c.StreamsSettled != n || c.StreamsQuarantined != 0 {
			t.Fatalf("%s: %+v %v", name, c, err)
		}
		gets, puts := rc.since(g0, p0)
		t.Logf("%s: %d GETs, %d PUTs; tail reads: %d from memory, %d spilled, %d missed", name, gets, puts,
			reads("hit"), reads("spill"), reads("miss"))
		if puts != n || gets != wantGets {
			t.Errorf("%s: %d GETs and %d PUTs, want %d and %d", name, gets, puts, wantGets, n)
		}
		star.check(t, nil)
	}
	round("first settle", 3*k)
	round("tail rewrite, from memory and spill", 3*k)
	if hit, spill, miss := reads("hit"), reads("spill"), reads("miss"); spill < n/2 || hit+spill != n || miss != 0 {
		t.Fatalf("tail reads: %d from memory, %d spilled, %d missed; want most of %d spilled and none missed", hit, spill, miss, n)
	}
	// The spilled tails share a few segment files, not one file each.
	files, _ := filepath.Glob(filepath.Join(dir, "*.tail"))
	if len(files) == 0 || len(files) >= n/4 {
		t.Fatalf("%d spill files for %d tails, want a few segments (of 64 KiB at this budget)", len(files), n)
	}
	// Corrupt every spilled tail: a byte in every 128 of each segment (a
	// tail's chunks are longer, so each of its chunks has one).
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 64; i < len(b); i += 128 {
			b[i] ^= 0xff
		}
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hit0, spill0, miss0 := reads("hit"), reads("spill"), reads("miss")
	// Each tail not held in memory is corrupted, and is read from the
	// store once: a GET of its bytes when its footer no longer opens (the
	// likely case: a footer is longer than 128 bytes), else a ranged GET
	// of a piece whose chunk fails its CRC.
	star.write(t, k, 2, 256, nil)
	g0, _ := rc.now()
	c, err := e.cycle("s1", s)
	if err != nil || c.StreamsSettled != n || c.StreamsQuarantined != 0 {
		t.Fatalf("after corrupting the spill: %+v %v", c, err)
	}
	gets, _ := rc.since(g0, 0)
	hit, spill, miss := reads("hit")-hit0, reads("spill")-spill0, reads("miss")-miss0
	bad := n - hit
	t.Logf("corrupted spill (%d tails not in memory): %d GETs; tail reads: %d from memory, %d spilled, %d missed", bad, gets, hit, spill, miss)
	if hit+spill+miss != n || bad < n/2 || gets < 3*k+bad || gets > 3*k+2*bad {
		t.Errorf("corrupted spill: %d GETs for %d corrupted tails (want between %d and %d), tail reads %d/%d/%d",
			gets, bad, 3*k+bad, 3*k+2*bad, hit, spill, miss)
	}
	star.check(t, nil)
}
