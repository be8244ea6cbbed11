package settle_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/objstore"
)

// TestTailRewriteCycles measures tail rewrites under trickle traffic: two
// streams settle a 16 MiB backlog each into standing tails, then every
// cycle adds one flight of 64 KiB per stream and settles it, rewriting
// both tails. Per cycle it logs the bytes copied (server side or by the
// file system), fetched, uploaded and read back, and the cycle's time, on
// the file backend and on versitygw in readback and server-checked
// (by-source, slots stored with CRC-32) modes. In server-checked mode the
// auditor's own bytes of a cycle whose assemblies the server checked stay
// within the small-tail rule (fetching and re-uploading less than the part
// minimum per stream), whatever the tail's size. Off by default: set
// NOVA_BENCH_TAIL_CYCLES (make bench-settle runs 50).
func TestTailRewriteCycles(t *testing.T) {
	cycles := envInt("NOVA_BENCH_TAIL_CYCLES", 0)
	if cycles == 0 {
		t.Skip("set NOVA_BENCH_TAIL_CYCLES to run (make bench-settle runs 50)")
	}
	const streams = 2
	backlog := fairShape{hot: streams, flights: 2, hotRecs: 128, hotBytes: 64 << 10}
	for _, mode := range []string{"file", "s3-readback", "s3-server-checked"} {
		t.Run(mode, func(t *testing.T) {
			var e *env
			var rec *assembleRecorder
			switch mode {
			case "file":
				e, _ = newEnv(t, backends()[0], 0, 0)
				rec = &assembleRecorder{Store: e.store}
			case "s3-readback":
				e, _ = newEnv(t, s3Backend("s3-tail", "tail", nil, nil), 0, 0)
				rec = &assembleRecorder{Store: e.store}
			default:
				e, rec, _ = probedEnv(t, objstore.AlgorithmCRC32)
			}
			ids, next := writeFairSlots(t, e, backlog)
			s := probedSettler(e, rec)
			if c, err := e.cycle("s1", s); err != nil || c.StreamsSettled != streams {
				t.Fatalf("backlog: %+v %v", c, err)
			}
			var tab strings.Builder
			fmt.Fprintf(&tab, "cycle  copied_MiB  fetched_KiB  uploaded_KiB  readback_KiB  own_KiB  seconds\n")
			var own []int64
			var checked []bool
			for k := 1; k <= cycles; k++ {
				writeFairFlight(t, e, backlog.flights+k-1, ids, next, func(int) (int, int) { return 16, 4 << 10 })
				rb0, rba0 := rec.readBack.Load(), rec.readBackAssemblies.Load()
				start := time.Now()
				c, err := e.cycle("s1", s)
				took := time.Since(start)
				if err != nil || c.StreamsSettled != streams || c.StreamsQuarantined != 0 {
					t.Fatalf("cycle %d: %+v %v", k, c, err)
				}
				rb := rec.readBack.Load() - rb0
				o := c.BytesFetched + c.BytesUploaded - rb
				own = append(own, o)
				checked = append(checked, rec.readBackAssemblies.Load() == rba0)
				fmt.Fprintf(&tab, "%5d  %10.1f  %11.1f  %12.1f  %12.1f  %7.1f  %7.3f\n", k, float64(c.BytesCopied)/(1<<20),
					float64(c.BytesFetched)/(1<<10), float64(c.BytesUploaded)/(1<<10), float64(rb)/(1<<10), float64(o)/(1<<10), took.Seconds())
			}
			t.Logf("%s, %d streams with 16 MiB tails, 64 KiB per stream per cycle (own = fetched + uploaded - read back):\n%s", mode, streams, tab.String())
			if mode != "s3-server-checked" {
				return
			}
			bound := int64(streams) * 2 * objstore.DefaultLimits.MinPart
			n := 0
			for k, o := range own {
				if !checked[k] {
					continue // read back (its sources were stored with CRC-32C)
				}
				n++
				if o > bound {
					t.Errorf("cycle %d: the auditor moved %d bytes itself, above the small-tail bound %d", k+1, o, bound)
				}
			}
			if n == 0 {
				t.Error("no cycle was checked by the server")
			}
			t.Logf("%d of %d cycles checked by the server with no read-back", n, cycles)
		})
	}
}
