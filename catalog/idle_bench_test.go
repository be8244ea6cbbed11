package catalog_test

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

// BenchmarkIdleState is the idle check of an empty star in a loop; it
// reports the process's CPU (user and system) per check beside the wall
// time, since the check's cost to the auditor is its round trips' CPU.
func BenchmarkIdleState(b *testing.B) {
	db, _ := testenv.MigratedDB(b)
	ctx := context.Background()
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		b.Fatal(err)
	}
	p := catalog.DuePolicy{Linger: time.Minute, AgeCap: time.Hour, ExpressLinger: time.Minute, ExpressAgeCap: time.Hour}
	var r0, r1 syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r0); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := db.Trim().IdleState(ctx, "s1", p, time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r1); err != nil {
		b.Fatal(err)
	}
	cpu := r1.Utime.Nano() - r0.Utime.Nano() + r1.Stime.Nano() - r0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
}
