package s3store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// benchSources puts n source objects of size bytes (transit slots) into a
// fresh bucket.
func benchSources(b *testing.B, s *Store, n int, size int) (string, []string) {
	b.Helper()
	bucket := newBucket(b, s, "bench")
	var keys []string
	for i := 0; i < n; i++ {
		k := fmt.Sprintf("stars/s1/chain/%020d/%020d", 1, i)
		if err := s.PutIfAbsent(context.Background(), bucket, k, storetest.Bytes(uint64(i), size)); err != nil {
			b.Fatal(err)
		}
		keys = append(keys, k)
	}
	return bucket, keys
}

// mix draws ranges of the sources whose lengths come from size until total
// bytes, then a 4 KiB local footer.
func mix(r *rand.Rand, bucket string, keys []string, srcSize, total int64, size func() int64) []objstore.Piece {
	var pieces []objstore.Piece
	var n int64
	for n < total {
		l := min(size(), total-n, srcSize)
		off := r.Int64N(srcSize - l + 1)
		pieces = append(pieces, objstore.RangePiece(bucket, keys[r.IntN(len(keys))], off, l))
		n += l
	}
	return append(pieces, objstore.DataPiece(make([]byte, 4096)))
}

func specsOf(pieces []objstore.Piece) []objstore.PieceSpec {
	specs := make([]objstore.PieceSpec, len(pieces))
	for i, p := range pieces {
		specs[i] = objstore.PieceSpec{Len: p.Size(), Copy: p.SrcKey != ""}
	}
	return specs
}

// BenchmarkAssembleMixes reports the bytes through the process per
// assembled byte for chunk-size mixes, measured and as planned (the
// planner's optimum under S3's rules), with requests and throughput.
func BenchmarkAssembleMixes(b *testing.B) {
	s := newStore(b, objstore.S3Config{Checksum: objstore.ChecksumParts})
	const srcSize, total = 40 << 20, 256 << 20
	bucket, keys := benchSources(b, s, 8, srcSize)
	mixes := map[string]func(r *rand.Rand) int64{
		"all-8MiB":  func(*rand.Rand) int64 { return 8 << 20 },
		"all-64KiB": func(*rand.Rand) int64 { return 64 << 10 },
		// most chunks small, a fifth medium, one in ten large
		"skew": func(r *rand.Rand) int64 {
			switch x := r.IntN(100); {
			case x < 70:
				return 1 + r.Int64N(64<<10)
			case x < 90:
				return 64<<10 + r.Int64N(4<<20)
			default:
				return 4<<20 + r.Int64N(28<<20)
			}
		},
	}
	for name, size := range mixes {
		b.Run(name, func(b *testing.B) {
			r := rand.New(rand.NewPCG(1, 2))
			pieces := mix(r, bucket, keys, srcSize, total, func() int64 { return size(r) })
			plan, err := objstore.PlanParts(specsOf(pieces), s.Limits())
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			var res objstore.AssembleResult
			i := 0
			var elapsed time.Duration
			for b.Loop() {
				key := fmt.Sprintf("out/%s/%d", name, i)
				i++
				start := time.Now()
				if res, err = s.Assemble(ctx, objstore.AssembleRequest{Bucket: bucket, Key: key, Pieces: pieces}); err != nil {
					b.Fatal(err)
				}
				elapsed += time.Since(start)
				b.StopTimer()
				if err := s.Delete(ctx, bucket, []string{key}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			size := float64(res.Size)
			b.ReportMetric(float64(res.BytesFetched+res.BytesUploaded)/size, "through/B")
			b.ReportMetric(float64(plan.Fetched()+plan.Uploaded())/size, "planned-through/B")
			b.ReportMetric(float64(res.Requests), "requests")
			b.ReportMetric(float64(len(pieces)), "pieces")
			b.ReportMetric(size*float64(i)/elapsed.Seconds()/(1<<20), "MiB/s")
		})
	}
}

// BenchmarkAssembleVsNaive assembles 256 MiB from 8 MiB ranges server side
// and, in the same run, fetches the same ranges and uploads the bytes (a
// naive download-and-reupload settle); it reports both throughputs and
// their ratio.
func BenchmarkAssembleVsNaive(b *testing.B) {
	s := newStore(b, objstore.S3Config{Checksum: objstore.ChecksumParts})
	const srcSize, total = 40 << 20, 256 << 20
	bucket, keys := benchSources(b, s, 8, srcSize)
	r := rand.New(rand.NewPCG(3, 4))
	pieces := mix(r, bucket, keys, srcSize, total, func() int64 { return 8 << 20 })
	ctx := context.Background()
	var tAsm, tNaive time.Duration
	i := 0
	for b.Loop() {
		key := fmt.Sprintf("asm/%d", i)
		start := time.Now()
		if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: bucket, Key: key, Pieces: pieces}); err != nil {
			b.Fatal(err)
		}
		tAsm += time.Since(start)

		start = time.Now()
		local := make([]objstore.Piece, len(pieces))
		for j, p := range pieces {
			if p.SrcKey == "" {
				local[j] = p
				continue
			}
			d, _, err := s.GetRange(ctx, p.SrcBucket, p.SrcKey, p.Off, p.Len)
			if err != nil {
				b.Fatal(err)
			}
			local[j] = objstore.DataPiece(d)
		}
		if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: bucket, Key: "naive/" + key, Pieces: local}); err != nil {
			b.Fatal(err)
		}
		tNaive += time.Since(start)
		b.StopTimer()
		if err := s.Delete(ctx, bucket, []string{key, "naive/" + key}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		i++
	}
	mib := float64(total) * float64(i) / (1 << 20)
	b.ReportMetric(mib/tAsm.Seconds(), "assemble-MiB/s")
	b.ReportMetric(mib/tNaive.Seconds(), "naive-MiB/s")
	b.ReportMetric(tNaive.Seconds()/tAsm.Seconds(), "speedup")
}
