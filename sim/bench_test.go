package sim

import (
	"context"
	"fmt"
	"testing"
)

// BenchmarkWrite measures the writer against the real stores: b.N flights
// into one star of 100 streams (records 16 B..16 KiB, skewed), fence window
// 4, 4 flights per absorb. It reports flights/s and MiB/s of flight bytes
// (one copy; an express star writes each to both buckets of its set), so
// settle benchmarks can size their inputs. Run with a fixed count, e.g.
//
//	go test ./sim -run XXX -bench Write -benchtime 200x
func BenchmarkWrite(b *testing.B) {
	for _, be := range backends() {
		for _, class := range []string{"standard", "express"} {
			for _, fb := range []int64{256 << 10, 1 << 20, 4 << 20} {
				b.Run(fmt.Sprintf("%s/%s/flight=%dKiB", be.name, class, fb>>10), func(b *testing.B) {
					ctx := context.Background()
					db := newTestDB(b)
					st := be.storage(b)
					opts := SetupOptions{Star: "bench", Streams: 100, Content: DefaultContent(1)}
					star := "bench"
					if class == "express" {
						opts.ExpressShare, star = 1, "bench-x"
					}
					if _, err := Setup(ctx, db, opts); err != nil {
						b.Fatal(err)
					}
					b.ResetTimer()
					ws, err := Write(ctx, db, st, WriteOptions{Star: star, Flights: int64(b.N), FlightBytes: fb})
					if err != nil {
						b.Fatal(err)
					}
					secs := ws.Elapsed.Seconds()
					b.ReportMetric(float64(ws.Flights)/secs, "flights/s")
					b.ReportMetric(float64(ws.FlightBytes)/(1<<20)/secs, "MiB/s")
					b.ReportMetric(ws.AbsorbTime.Seconds()/secs, "absorb-busy")
				})
			}
		}
	}
}
