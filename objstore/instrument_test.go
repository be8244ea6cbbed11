package objstore_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/storetest"
)

// TestInstrumentedContract: the metrics wrapper every production store
// goes through keeps the store contract (here over the file backend).
func TestInstrumentedContract(t *testing.T) {
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	m, err := objstore.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.Instrument(fs, m)
	var n atomic.Int64
	storetest.Run(t, storetest.Harness{Store: s, NewBucket: func(t *testing.T) string {
		b := fmt.Sprintf("b%d", n.Add(1))
		if err := fs.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
		return b
	}})
}

// limitedStore is a store that plans parts under its own limits.
type limitedStore struct {
	objstore.Store
	lim objstore.Limits
}

func (s limitedStore) Limits() objstore.Limits { return s.lim }

// TestInstrumentedLimits: the wrapper reports the wrapped store's planning
// limits (what a dry run plans with), DefaultLimits for a store without.
func TestInstrumentedLimits(t *testing.T) {
	m, err := objstore.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	type limiter interface{ Limits() objstore.Limits }
	own := objstore.DefaultLimits
	own.MaxGathered *= 2
	if got := objstore.Instrument(limitedStore{lim: own}, m).(limiter).Limits(); got != own {
		t.Errorf("limits %+v, want the wrapped store's %+v", got, own)
	}
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if got := objstore.Instrument(fs, m).(limiter).Limits(); got != objstore.DefaultLimits {
		t.Errorf("limits %+v, want DefaultLimits", got)
	}
}

// assembled is a store whose Assemble reports a fixed result, and its
// bytes to the context's observer, as a backend does.
type assembled struct {
	objstore.Store
	res objstore.AssembleResult
}

func (s assembled) Assemble(ctx context.Context, _ objstore.AssembleRequest) (objstore.AssembleResult, error) {
	o := objstore.ObserverFrom(ctx)
	o.Request("UploadPartCopy", "200", 0)
	o.Bytes(objstore.Copied, s.res.BytesCopied)
	o.Bytes(objstore.Fetched, s.res.BytesFetched-s.res.BytesReadBack)
	o.Bytes(objstore.ReadBack, s.res.BytesReadBack)
	o.Bytes(objstore.Uploaded, s.res.BytesUploaded)
	return s.res, nil
}

// TestInstrumentedReadBack: the bytes an assembly read back to check the
// published object count under path read_back, not fetched, and the
// paths together are every byte the assembly moved; an observer the
// caller installed (a step's Tally) is told of the same.
func TestInstrumentedReadBack(t *testing.T) {
	m, err := objstore.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	res := objstore.AssembleResult{BytesCopied: 100, BytesFetched: 70, BytesReadBack: 50, BytesUploaded: 30}
	ctx, tally := objstore.Count(context.Background())
	if _, err := objstore.Instrument(assembled{res: res}, m).Assemble(ctx, objstore.AssembleRequest{}); err != nil {
		t.Fatal(err)
	}
	if got, want := tally.Totals(), (objstore.Totals{Requests: 1, Copied: 100, Fetched: 20, ReadBack: 50, Uploaded: 30}); got != want {
		t.Errorf("the caller's observer counted %+v, want %+v", got, want)
	}
	if got := testutil.ToFloat64(m.Requests().WithLabelValues("UploadPartCopy", "200")); got != 1 {
		t.Errorf("%g requests, want 1", got)
	}
	want := map[string]float64{"copied": 100, "fetched": 20, "read_back": 50, "uploaded": 30}
	for path, n := range want {
		if got := testutil.ToFloat64(m.Bytes().WithLabelValues(path)); got != n {
			t.Errorf("path %s: %g bytes, want %g", path, got, n)
		}
	}
}
