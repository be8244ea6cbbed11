package verify_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/verify"
)

// countingReader is a verify.ObjectReader that records the largest read
// and the most bytes asked for by reads in flight at once.
type countingReader struct {
	verify.ObjectReader
	mu                     sync.Mutex
	inFlight, peak, maxOne int64
	reads                  int
}

func (c *countingReader) ObjectRange(ctx context.Context, key string, off, n int64) ([]byte, int64, error) {
	c.mu.Lock()
	c.inFlight += n
	c.peak, c.maxOne = max(c.peak, c.inFlight), max(c.maxOne, n)
	c.reads++
	c.mu.Unlock()
	// Stay in flight a moment, so concurrent reads overlap.
	time.Sleep(time.Millisecond)
	data, size, err := c.ObjectReader.ObjectRange(ctx, key, off, n)
	c.mu.Lock()
	c.inFlight -= n
	c.mu.Unlock()
	return data, size, err
}

// TestVerifyReadsInBoundedRanges: with a window smaller than any object,
// verify reads every object in ranges no larger than the window, the
// footer window or a record, with at most Concurrency objects' reads in
// flight; it finds what it finds reading whole, and a flipped byte of a
// chunk still fails its checksum.
func TestVerifyReadsInBoundedRanges(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	store, keys := healthyCatalog(t, db)
	var footer, record, objSize int64
	for _, k := range keys {
		data, _, err := store.GetRange(ctx, "nova", k, 0, 1<<30)
		if err != nil {
			t.Fatal(err)
		}
		o, err := bundlefmt.ValidateObject(data, bundlefmt.Expect{Key: k})
		if err != nil {
			t.Fatal(err)
		}
		footer = max(footer, int64(len(data))-int64(o.Footer.FooterOffset()))
		objSize = max(objSize, int64(len(data)))
		for _, e := range o.Entries {
			for _, l := range e.Lengths {
				record = max(record, int64(l))
			}
		}
	}
	const window, concurrency = 8, 2
	if objSize-footer <= 2*max(record, window) {
		t.Fatalf("objects of %d bytes hold too little data to show ranged reads (footer %d, record %d)", objSize, footer, record)
	}
	cr := &countingReader{ObjectReader: store.reader()}
	opts := verifyOpts()
	opts.Window, opts.Concurrency = window, concurrency
	rep, err := verify.Verify(ctx, db.Streams(), cr, opts)
	if err != nil || len(rep.Findings) != 0 || rep.Objects != len(keys) || rep.Cataloged != len(keys) {
		t.Fatalf("healthy catalog read in ranges: %+v %v", rep, err)
	}
	bound := max(footer, record, window, bundlefmt.EnvelopeSize)
	if cr.maxOne > bound || cr.peak > concurrency*bound {
		t.Errorf("largest read %d bytes, %d in flight at once; want at most %d and %d", cr.maxOne, cr.peak, bound, concurrency*bound)
	}
	if cr.reads <= 3*len(keys) {
		t.Errorf("%d reads for %d objects: not read in windows", cr.reads, len(keys))
	}
	t.Logf("%d reads, the largest %d bytes, at most %d bytes in flight (objects up to %d bytes, footer %d, record %d)",
		cr.reads, cr.maxOne, cr.peak, objSize, footer, record)

	store.flip(keys[2], 3)
	rep, err = verify.Verify(ctx, db.Streams(), &countingReader{ObjectReader: store.reader()}, opts)
	if err != nil || len(rep.Findings) != 1 || rep.Findings[0].Kind != verify.FindingChecksum || rep.Findings[0].Key != keys[2] {
		t.Fatalf("a flipped chunk byte read in ranges: %+v %v", rep.Findings, err)
	}
}

// TestVerifyScopes: --stream verifies one stream (an unknown one is an
// error), a sample verifies fewer objects than cataloged (tiling still
// checked for every stream), and a rate paces the reads.
func TestVerifyScopes(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	store, _ := healthyCatalog(t, db)
	opts := verifyOpts()
	one := catalog.StreamID{15: 2}
	opts.Stream = &one
	rep, err := verify.Verify(ctx, db.Streams(), store.reader(), opts)
	if err != nil || rep.Streams != 1 || rep.Objects != 1 || rep.Cataloged != 1 || len(rep.Findings) != 0 {
		t.Fatalf("--stream %s: %+v %v", one, rep, err)
	}
	unknown := catalog.StreamID{15: 9}
	opts.Stream = &unknown
	if _, err := verify.Verify(ctx, db.Streams(), store.reader(), opts); err == nil || !strings.Contains(err.Error(), unknown.String()) {
		t.Fatalf("an unknown stream: %v", err)
	}

	opts = verifyOpts()
	opts.Sample = 1e-9
	rep, err = verify.Verify(ctx, db.Streams(), store.reader(), opts)
	if err != nil || rep.Objects != 0 || rep.Cataloged != 3 || rep.Streams != 2 {
		t.Fatalf("a tiny sample: %+v %v", rep, err)
	}
	for _, bad := range []float64{-0.5, 1.5} {
		opts.Sample = bad
		if _, err := verify.Verify(ctx, db.Streams(), store.reader(), opts); err == nil {
			t.Errorf("sample %v accepted", bad)
		}
	}

	// Paced: every byte after the first read waits its turn, so the run
	// takes at least (bytes - the largest read) / rate (a lower bound
	// only: a loaded machine makes it longer).
	opts = verifyOpts()
	opts.Rate = rep.Bytes * 2 // bytes per second: about half a second in all
	cr := &countingReader{ObjectReader: store.reader()}
	start := time.Now()
	paced, err := verify.Verify(ctx, db.Streams(), cr, opts)
	took := time.Since(start)
	if err != nil || paced.Bytes == 0 {
		t.Fatalf("paced: %+v %v", paced, err)
	}
	if floor := time.Duration(float64(paced.Bytes-cr.maxOne) / float64(opts.Rate) * float64(time.Second)); took < floor {
		t.Errorf("%d bytes at %d bytes/s took %s, less than %s", paced.Bytes, opts.Rate, took, floor)
	}
}
