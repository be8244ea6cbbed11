package bundlefmt

import (
	"fmt"
	"testing"
	"time"
)

// benchChunks returns a flight's worth of chunks: 32 streams of 1 MiB each,
// records of recSize stored bytes.
func benchChunks(b *testing.B, recSize int) []Chunk {
	const streams, chunkBytes = 32, 1 << 20
	chunks := make([]Chunk, streams)
	for i := range chunks {
		var s StreamID
		s[0], s[15] = byte(i), 0x5a
		chunks[i] = fixedChunk(b, s, uint64(i)<<20, chunkBytes/recSize, recSize)
	}
	return chunks
}

var recSizes = []struct {
	name string
	size int
}{{"rec=1KiB", 1 << 10}, {"rec=64KiB", 64 << 10}}

// BenchmarkRawCRC32C is the machine's CRC-32C speed over the same bytes as
// the validate benchmarks: the yardstick for "validation within 2x".
func BenchmarkRawCRC32C(b *testing.B) {
	for _, rs := range recSizes {
		b.Run(rs.name, func(b *testing.B) {
			obj, err := EncodeFlight(1, 1, 1, benchChunks(b, rs.size))
			if err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(len(obj)))
			b.ResetTimer()
			for b.Loop() {
				_ = CRC32C(obj)
			}
		})
	}
}

func BenchmarkEncodeFlight(b *testing.B) {
	for _, rs := range recSizes {
		b.Run(rs.name, func(b *testing.B) {
			chunks := benchChunks(b, rs.size)
			obj, _ := EncodeFlight(1, 1, 1, chunks)
			b.SetBytes(int64(len(obj)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if _, err := EncodeFlight(1, 1, 1, chunks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkAppendFlight encodes into a reused buffer: the steady state of
// a writer, without the page faults of a fresh 32 MiB allocation.
func BenchmarkAppendFlight(b *testing.B) {
	for _, rs := range recSizes {
		b.Run(rs.name, func(b *testing.B) {
			chunks := benchChunks(b, rs.size)
			buf, _ := EncodeFlight(1, 1, 1, chunks)
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				var err error
				if buf, err = AppendFlight(buf[:0], 1, 1, 1, chunks); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkBuildAndEncode includes record encoding in the chunk builder.
func BenchmarkBuildAndEncode(b *testing.B) {
	for _, rs := range recSizes {
		b.Run(rs.name, func(b *testing.B) {
			chunks := benchChunks(b, rs.size)
			obj, _ := EncodeFlight(1, 1, 1, chunks)
			body := make([]byte, rs.size-1)
			b.SetBytes(int64(len(obj)))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				out := make([]Chunk, len(chunks))
				for i, c := range chunks {
					cb := NewChunkBuilder(c.Entry.Stream, c.Entry.FirstRecord)
					cb.Grow(c.Entry.Count(), len(c.Data))
					for j := range c.Entry.Lengths {
						if err := cb.Add(Record{Body: body}, int64(j), false); err != nil {
							b.Fatal(err)
						}
					}
					out[i] = cb.Chunk()
				}
				if _, err := EncodeFlight(1, 1, 1, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkValidateObject measures whole-object validation and, between
// iterations with the timer stopped, a raw CRC-32C over the same bytes: the
// x-raw-crc metric is their ratio, robust to a machine shared with other work.
func BenchmarkValidateObject(b *testing.B) {
	for _, rs := range recSizes {
		b.Run("flight/"+rs.name, func(b *testing.B) {
			obj, err := EncodeFlight(1, 1, 1, benchChunks(b, rs.size))
			if err != nil {
				b.Fatal(err)
			}
			benchValidate(b, obj, Expect{Key: "bench", Kind: KindFlight, Epoch: 1, Seq: 1, CheckKey: true})
		})
	}
	b.Run("settled/rec=1KiB", func(b *testing.B) {
		chunks := benchChunks(b, 1<<10)
		for i := range chunks {
			chunks[i].Entry.Stream = chunks[0].Entry.Stream
			chunks[i].Entry.FirstRecord = uint64(i * chunks[0].Entry.Count())
		}
		obj, err := EncodeSettled(chunks)
		if err != nil {
			b.Fatal(err)
		}
		benchValidate(b, obj, Expect{Key: "bench", Kind: KindSettled})
	})
}

func benchValidate(b *testing.B, obj []byte, exp Expect) {
	b.SetBytes(int64(len(obj)))
	b.ReportAllocs()
	var validate, crc time.Duration
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		if _, err := ValidateObject(obj, exp); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		b.StopTimer()
		_ = CRC32C(obj)
		crc += time.Since(t1)
		validate += t1.Sub(t0)
		b.StartTimer()
	}
	b.ReportMetric(float64(validate)/float64(crc), "x-raw-crc")
	b.ReportMetric(float64(len(obj))/(float64(crc)/float64(b.N)), "raw-crc-GB/s")
}

// lookupFlight is a flight of n streams, one 8-record chunk each, and its
// footer window.
func lookupFlight(b *testing.B, n int) (streams []StreamID, env Envelope, win []byte) {
	chunks := make([]Chunk, n)
	streams = make([]StreamID, n)
	for i := range chunks {
		var s StreamID
		s[0], s[1], s[2], s[15] = byte(i>>16), byte(i>>8), byte(i), 0x77
		streams[i] = s
		chunks[i] = fixedChunk(b, s, uint64(1000*i), 8, 100)
	}
	obj, err := EncodeFlight(1, 1, 1, chunks)
	if err != nil {
		b.Fatal(err)
	}
	env, err = DecodeEnvelope("bench", obj)
	if err != nil {
		b.Fatal(err)
	}
	return streams, env, obj[env.FooterOffset:]
}

var chunkCounts = []int{100, 10_000}

// BenchmarkPointLookup: binary search of the index plus decode and CRC
// check of exactly one entry, on an opened footer.
func BenchmarkPointLookup(b *testing.B) {
	for _, n := range chunkCounts {
		streams, env, win := lookupFlight(b, n)
		f, err := OpenFooter("bench", env.FooterOffset, win, env.ObjectSize, TransitBase)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("view/chunks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				j, ok := f.Find(streams[i%n], uint64(1000*(i%n)+3))
				if !ok {
					b.Fatal("not found")
				}
				if _, err := f.EntryView(j); err != nil {
					b.Fatal(err)
				}
				i += 7919
			}
		})
		b.Run(fmt.Sprintf("entry/chunks=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				j, ok := f.Find(streams[i%n], uint64(1000*(i%n)+3))
				if !ok {
					b.Fatal("not found")
				}
				if _, err := f.Entry(j); err != nil {
					b.Fatal(err)
				}
				i += 7919
			}
		})
	}
}

// BenchmarkFooterDecode: opening a footer window (trailer, bounds, index
// CRC, every row), and the full footer level (plus directory CRC and every
// entry decoded).
func BenchmarkFooterDecode(b *testing.B) {
	for _, n := range chunkCounts {
		_, env, win := lookupFlight(b, n)
		b.Run(fmt.Sprintf("open/chunks=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(win)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := OpenFooter("bench", env.FooterOffset, win, env.ObjectSize, TransitBase); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("entries/chunks=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(win)))
			b.ReportAllocs()
			for b.Loop() {
				f, err := OpenFooter("bench", env.FooterOffset, win, env.ObjectSize, TransitBase)
				if err != nil {
					b.Fatal(err)
				}
				if err := f.VerifyDirectory(); err != nil {
					b.Fatal(err)
				}
				if _, err := f.Entries(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
