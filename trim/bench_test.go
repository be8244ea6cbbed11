package trim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/trim"
)

// benchStores are the stores the reap benchmark runs against: memory always,
// the real backends where the environment has them (see backends_test.go).
func benchStores(b *testing.B) []namedStore {
	return realStores(b)
}

// BenchmarkReapSlots measures the slot reap alone: a released range of
// slotsPerOp poison slots, deleted from every bucket of the class. It reports
// slots reaped per second and DeleteObjects requests per 1,000 slots.
//
//	go test -run '^$' -bench ReapSlots ./trim/
func BenchmarkReapSlots(b *testing.B) {
	const slotsPerOp = 5000
	for _, ns := range benchStores(b) {
		b.Run(ns.name, func(b *testing.B) {
			db, ctx := openDB(b)
			fs := newFaultStore(ns.store)
			deps := trim.Deps{DB: db.Trim(), Topology: teststore.Topology(b, fs, ns.buckets[0], nil, nil)}
			cfg := trim.Config{ReapGrace: 0, BatchSize: 1000, Concurrency: trim.DefaultConcurrency}
			tr, _ := trim.NewTrim(deps, cfg)
			rp, _ := trim.NewReap(deps, cfg)
			var slots int64
			var elapsed time.Duration
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				f := benchChain(b, ctx, db, ns.store, ns.buckets[0], fmt.Sprintf("bench-%d", i), slotsPerOp)
				if _, err := tr.Run(ctx, f, cycle.Options{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				start := time.Now()
				c, err := rp.Run(ctx, f, cycle.Options{})
				elapsed += time.Since(start)
				if err != nil || c.SlotsReaped != slotsPerOp {
					b.Fatalf("reaped %d: %v", c.SlotsReaped, err)
				}
				slots += c.SlotsReaped
			}
			b.ReportMetric(float64(slots)/elapsed.Seconds(), "slots/s")
			b.ReportMetric(float64(fs.requests[ns.buckets[0]])*1000/float64(slots), "DeleteObjects/1000slots")
		})
	}
}

// benchChain writes n poison slots of a new star and absorbs them for one
// stream, settled at once, so that trim releases them all.
func benchChain(b *testing.B, ctx context.Context, db *catalog.DB, s objstore.Store, bucket, star string, n int) catalog.Fence {
	b.Helper()
	if err := writepath.New(db).CreateStar(ctx, star, catalog.ClassStandard, 1); err != nil {
		b.Fatal(err)
	}
	id := catalog.StreamID{1, byte(len(star)), star[len(star)-1]}
	copy(id[4:], star)
	if err := writepath.New(db).CreateStream(ctx, id, star, "b1"); err != nil {
		b.Fatal(err)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	flights := make([]writepath.AbsorbFlight, n)
	for seq := range n {
		flights[seq] = writepath.AbsorbFlight{Epoch: 1, Seq: int64(seq), FooterOffset: 61, FooterLength: 1,
			Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: int64(seq), Count: 1}}}
		g.Go(func() error {
			return s.PutIfAbsent(gctx, bucket, bundlefmt.SlotKey(star, 1, uint64(seq)), bundlefmt.EncodePoison(1, uint64(seq), 1))
		})
	}
	if err := g.Wait(); err != nil {
		b.Fatal(err)
	}
	if err := writepath.New(db).Absorb(ctx, star, flights); err != nil {
		b.Fatal(err)
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, star, "bench", "", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	ent := catalog.Entry{Stream: id, Epoch: 1, RecordCount: int64(n), ObjectBytes: 1, FooterOffset: 1, FooterLength: 1}
	if err := writepath.CommitSettle(ctx, db, lease.Fence, catalog.SettleCommit{Entry: ent, PrevRevision: -1, IntentID: publishIntent(b, db, star, "x"), ObjectKey: "x"}); err != nil {
		b.Fatal(err)
	}
	return lease.Fence
}
