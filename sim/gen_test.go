package sim

import (
	"bytes"
	"testing"

	"github.com/nova/auditor/bundlefmt"
)

func TestGenIsPure(t *testing.T) {
	t.Parallel()
	c := Content{Seed: 42, MinBytes: 0, MaxBytes: 100 << 10, HeaderShare: 0.5, EmptyShare: 0.1}
	s := bundlefmt.StreamID{1, 2, 3}
	g1, g2 := NewGen(c), NewGen(c)
	p := c.Stream(s)
	for _, n := range []int64{0, 1, 7, 1 << 20, 1<<40 + 3} {
		a, ta, err := g1.Append(nil, p, n)
		if err != nil {
			t.Fatal(err)
		}
		// Interleave another record so reused buffers would show.
		if _, _, err := g2.Append(nil, p, n+1); err != nil {
			t.Fatal(err)
		}
		b, tb, _ := g2.Append(nil, c.Stream(s), n)
		if !bytes.Equal(a, b) || ta != tb {
			t.Fatalf("record %d differs between generators", n)
		}
	}
	other := NewGen(Content{Seed: 43, MinBytes: 0, MaxBytes: 100 << 10, HeaderShare: 0.5, EmptyShare: 0.1})
	a, _, _ := g1.Append(nil, p, 5)
	b, _, _ := other.Append(nil, other.Content().Stream(s), 5)
	if bytes.Equal(a, b) {
		t.Fatal("seed does not change content")
	}
}

func TestGenDistribution(t *testing.T) {
	t.Parallel()
	c := Content{Seed: 9, MinBytes: 10, MaxBytes: 80 << 10, HeaderShare: 0.3, EmptyShare: 0.05}
	g := NewGen(c)
	var headers, empty, n int
	widths := map[byte]int{}
	sizes := map[int]int{} // log2 buckets
	for i := 0; i < 200; i++ {
		s := streamID(9, "dist", i)
		p := c.Stream(s)
		for r := int64(0); r < 100; r++ {
			rec, _ := g.Record(p, r)
			cb := int(rec.ContentBytes())
			if cb > c.MaxBytes || (cb < c.MinBytes && len(rec.Body) > 0) {
				t.Fatalf("content bytes %d outside [%d, %d]", cb, c.MinBytes, c.MaxBytes)
			}
			stored, err := bundlefmt.AppendRecord(nil, rec)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := bundlefmt.ParseRecord(stored); err != nil {
				t.Fatal(err)
			}
			n++
			if len(rec.Headers) > 0 {
				headers++
				widths[stored[0]&0x06>>1]++
			}
			if len(rec.Body) == 0 {
				empty++
			}
			b := 0
			for v := cb; v > 1; v >>= 1 {
				b++
			}
			sizes[b]++
		}
	}
	if f := float64(headers) / float64(n); f < 0.25 || f > 0.35 {
		t.Errorf("header share %.3f, want about 0.3", f)
	}
	if f := float64(empty) / float64(n); f < 0.03 || f > 0.08 {
		t.Errorf("empty share %.3f, want about 0.05", f)
	}
	if widths[0] == 0 || widths[1] == 0 {
		t.Errorf("header table widths seen: %v (want 1 and 2 bytes)", widths)
	}
	if len(sizes) < 8 {
		t.Errorf("sizes fall in only %d octaves: %v", len(sizes), sizes)
	}
}

func TestTrafficIsSkewed(t *testing.T) {
	t.Parallel()
	ids := make([]bundlefmt.StreamID, 1000)
	for i := range ids {
		ids[i] = streamID(1, "t", i)
	}
	tr := NewTraffic(1, 0, ids, 32)
	counts := map[bundlefmt.StreamID]int{}
	for i := 0; i < 100000; i++ {
		id, n := tr.Next()
		if n < 1 {
			t.Fatal("empty batch")
		}
		counts[id]++
	}
	hot := counts[tr.streams[0]]
	cold := counts[tr.streams[len(tr.streams)-1]]
	if hot < 100*max(cold, 1) {
		t.Errorf("hottest stream %d batches, coldest %d: not skewed", hot, cold)
	}
	if len(counts) < 500 {
		t.Errorf("only %d of 1000 streams sent anything: no long tail", len(counts))
	}
}
