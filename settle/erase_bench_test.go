package settle_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/settle"
)

// BenchmarkEraseOneRecordPerObject erases one record from each of N full
// settled objects (NOVA_BENCH_ERASE_OBJECTS, default 2; a cap of
// NOVA_BENCH_ERASE_CAP_MIB, default 256, of 8 MiB chunks) on versitygw, and
// reports the bytes that crossed the wire during the erase step per
// rewritten byte, against the part planner's bound for those rewrites: the
// chunk read to re-encode it, plus what the plan of the rewrite's pieces
// (copied runs, the re-encoded chunk, the footer) fetches and uploads
// (about one chunk fetched and one uploaded per object). It reports S3
// requests per rewrite too. The store verifies assemblies as the tests'
// versitygw does (per-part checksums and read-back): the read-back of each
// rewritten object is reported apart.
func BenchmarkEraseOneRecordPerObject(b *testing.B) {
	b.Run("readback", func(b *testing.B) { benchErase(b, false) })
	b.Run("by-source", func(b *testing.B) { benchErase(b, true) })
}

// benchErase runs the erasure benchmark with the store verifying by
// read-back (probed false) or configured as the checksum probe configures
// it on this server (by source: the server checks the rewrite when its
// source object is stored with an algorithm whose ranged copies it
// computes right).
func benchErase(b *testing.B, probed bool) {
	objects := envInt("NOVA_BENCH_ERASE_OBJECTS", 2)
	capMiB := envInt("NOVA_BENCH_ERASE_CAP_MIB", 256)
	const chunk = 8 << 20
	const recBytes = 64 << 10
	for i := 0; i < b.N; i++ {
		wc := &wireCounter{next: http.DefaultTransport}
		e, _ := newEnv(b, s3Backend("s3-erase", "erase", wc, nil), 0, 0)
		if probed {
			st := e.store.(*s3store.Store)
			p, err := st.ProbeChecksum(e.ctx, e.std)
			if err != nil {
				b.Fatal(err)
			}
			if e.store, err = st.WithProbe(p); err != nil {
				b.Fatal(err)
			}
		}
		perChunk := chunk / (recBytes + 1)
		flights := objects*capMiB*(1<<20)/chunk + 1
		writeSlots(b, e, 1, flights, perChunk, recBytes)
		s := e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending}, settle.Config{CapBytes: int64(capMiB) << 20, TargetBytes: 4 << 20, MaxStreams: 10, MaxBytes: 1 << 50,
			Concurrency: 4, ReapGrace: time.Hour})
		if _, err := e.cycle("s1", s); err != nil {
			b.Fatal(err)
		}
		st := e.firstStream("s1")
		entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		var rewritten, bound int64
		erased := 0
		for _, en := range entries[:min(objects, len(entries))] {
			key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
			chunks := entriesOf(b, e, key, en)
			mid := chunks[len(chunks)/2]
			if _, err := e.db.Erasures().RecordErasure(e.ctx, st.ID, int64(mid.FirstRecord)+1, 1); err != nil {
				b.Fatal(err)
			}
			erased++
			rewritten += en.ObjectBytes
			var specs []objstore.PieceSpec
			for _, c := range chunks {
				if c.FirstRecord == mid.FirstRecord {
					newLen := int64(c.ChunkBytes()) - int64(c.Lengths[1]) + 1
					specs = append(specs, objstore.PieceSpec{Len: newLen})
					bound += int64(c.ChunkBytes()) // read to re-encode
				} else {
					specs = append(specs, objstore.PieceSpec{Len: int64(c.ChunkBytes()), Copy: true})
				}
			}
			specs = append(specs, objstore.PieceSpec{Len: en.ObjectBytes - en.FooterOffset})
			plan, err := objstore.PlanParts(specs, objstore.DefaultLimits)
			if err != nil {
				b.Fatal(err)
			}
			bound += plan.Fetched() + plan.Uploaded() + en.FooterLength + bundlefmt.TrailerSize // and the footer read
		}
		g0, s0, r0 := wc.got.Load(), wc.sent.Load(), wc.gets.Load()+wc.uploads.Load()
		b.ResetTimer()
		start := time.Now()
		c := e.erase("s1", s)
		took := time.Since(start)
		b.StopTimer()
		if c.ObjectsRewritten != int64(erased) || c.RecordsTombstoned != int64(erased) {
			b.Fatalf("erase: %+v, want %d objects rewritten, one record each", c, erased)
		}
		wire := wc.got.Load() - g0 + wc.sent.Load() - s0
		b.ReportMetric(float64(wire)/float64(rewritten), "wire-bytes/rewritten-byte")
		b.ReportMetric(float64(bound)/float64(rewritten), "bound-bytes/rewritten-byte")
		b.ReportMetric(float64(wire)/float64(bound), "x-bound")
		if !probed {
			readBack := rewritten // read-back mode reads every rewritten object in full
			b.ReportMetric(float64(wire-readBack)/float64(bound), "x-bound-less-readback")
		}
		b.ReportMetric(float64(c.S3Requests)/float64(erased), "s3-requests/rewrite")
		b.ReportMetric(float64(wc.gets.Load()+wc.uploads.Load()-r0)/float64(erased), "wire-gets+puts/rewrite")
		b.Logf("%d objects of %d MiB: %d bytes rewritten, %d crossed the wire (counted: fetched %d, uploaded %d, copied %d), bound %d, in %s",
			erased, capMiB, rewritten, wire, c.BytesFetched, c.BytesUploaded, c.BytesCopied, bound, took)
	}
}
