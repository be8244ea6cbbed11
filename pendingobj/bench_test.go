package pendingobj

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

var benchSizes = []struct {
	name string
	n    int
}{{"4KiB", 4 << 10}, {"16MiB", 16 << 20}}

const benchFileName, benchMediaType = "settled/0123456789abcdef0123456789abcdef#1", "application/octet-stream"

// benchFileLen is the size of the file Install writes for an n-byte object.
func benchFileLen(n int) int {
	return headerLen + len("nova-auditor-part/1") + len(benchFileName) + len(benchMediaType) + n
}

// BenchmarkInstall measures Install; each iteration installs a new position
// (the previous file is removed outside the timer).
func BenchmarkInstall(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			s, err := New(b.TempDir(), "star1", "nova-auditor-part/1")
			if err != nil {
				b.Fatal(err)
			}
			data := randomBytes(sz.n, 1)
			b.SetBytes(int64(sz.n))
			var p uint64
			for b.Loop() {
				p++
				if err := s.Install(p, benchFileName, benchMediaType, data); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.Remove(s.Path(p)); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// fsyncBound writes an equal-sized file the way Install does, minus the
// encoding and the hash: create exclusively, one write, fsync, close, link,
// unlink the temporary name, fsync the directory. It is the disk's bound
// for a durable install.
func fsyncBound(dir string, i int, buf []byte) error {
	temp := filepath.Join(dir, "bound.tmp")
	final := filepath.Join(dir, "bound-"+string(rune('a'+i%26)))
	f, err := os.OpenFile(temp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, filePerm)
	if err != nil {
		return err
	}
	if _, err := f.Write(buf); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Link(temp, final); err != nil {
		return err
	}
	if err := os.Remove(temp); err != nil {
		return err
	}
	return osFS{}.syncDir(dir)
}

// BenchmarkFsyncBound is the bound alone, per object byte.
func BenchmarkFsyncBound(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			dir := b.TempDir()
			buf := randomBytes(benchFileLen(sz.n), 1)
			b.SetBytes(int64(sz.n))
			i := 0
			for b.Loop() {
				if err := fsyncBound(dir, i, buf); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if err := os.Remove(filepath.Join(dir, "bound-"+string(rune('a'+i%26)))); err != nil {
					b.Fatal(err)
				}
				i++
				b.StartTimer()
			}
		})
	}
}

// BenchmarkInstallVsFsyncBound interleaves an Install and a bound write of
// the same size in every iteration, so both see the same disk weather, and
// reports each throughput and their ratio (1 = Install costs nothing beyond
// the fsyncs the format requires).
func BenchmarkInstallVsFsyncBound(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			dir := b.TempDir()
			s, err := New(dir, "star1", "nova-auditor-part/1")
			if err != nil {
				b.Fatal(err)
			}
			data := randomBytes(sz.n, 1)
			buf := randomBytes(benchFileLen(sz.n), 2)
			var install, bound time.Duration
			var p uint64
			for b.Loop() {
				p++
				t0 := time.Now()
				if err := s.Install(p, benchFileName, benchMediaType, data); err != nil {
					b.Fatal(err)
				}
				t1 := time.Now()
				if err := fsyncBound(dir, 0, buf); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				install += t1.Sub(t0)
				bound += t2.Sub(t1)
				b.StopTimer()
				if err := os.Remove(s.Path(p)); err != nil {
					b.Fatal(err)
				}
				if err := os.Remove(filepath.Join(dir, "bound-a")); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			mb := float64(sz.n) * float64(b.N) / 1e6
			b.ReportMetric(mb/install.Seconds(), "install-MB/s")
			b.ReportMetric(mb/bound.Seconds(), "bound-MB/s")
			b.ReportMetric(bound.Seconds()/install.Seconds(), "ratio")
			b.ReportMetric(float64(install.Microseconds())/float64(b.N), "install-µs/op")
			b.ReportMetric(float64(bound.Microseconds())/float64(b.N), "bound-µs/op")
		})
	}
}
