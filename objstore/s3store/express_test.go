package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/storetest"
)

// zoneCut makes chosen buckets unreachable, as a down availability zone.
type zoneCut struct {
	base http.RoundTripper
	mu   sync.Mutex
	down map[string]bool
}

func (z *zoneCut) set(bucket string, down bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.down[bucket] = down
}

func (z *zoneCut) RoundTrip(r *http.Request) (*http.Response, error) {
	bucket, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	z.mu.Lock()
	down := z.down[bucket]
	z.mu.Unlock()
	if down {
		if r.Body != nil {
			r.Body.Close()
		}
		return nil, fmt.Errorf("dial zone of %s: %w", bucket, syscall.ECONNREFUSED)
	}
	return z.base.RoundTrip(r)
}

// TestExpressSet runs the express bucket set over three buckets on the
// real server with the local zone made unreachable: reads fall through,
// deletes report the zone for retry and succeed once it is back, and an
// assembly reads its sources from the set into the standard bucket.
func TestExpressSet(t *testing.T) {
	cut := &zoneCut{base: http.DefaultTransport.(*http.Transport).Clone(), down: map[string]bool{}}
	raw := newStore(t, objstore.S3Config{HTTPClient: &http.Client{Transport: cut}, MaxAttempts: 2})
	reg := prometheus.NewRegistry()
	m, err := objstore.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := objstore.Instrument(raw, m)
	var zones []objstore.ZoneBucket
	for _, z := range []string{"az1", "az2", "az3"} {
		zones = append(zones, objstore.ZoneBucket{Zone: z, Bucket: newBucket(t, raw, "ex"+z)})
	}
	std := newBucket(t, raw, "std")
	set, err := objstore.NewBucketSet(s, zones, "az2")
	if err != nil {
		t.Fatal(err)
	}
	local := zones[1].Bucket
	ctx := context.Background()
	slot := "stars/s1/chain/00000000000000000001/00000000000000000001"
	data := storetest.Bytes(9, 12<<20)
	putAll := func(key string, data []byte) []error {
		return objstore.EachBucket(set.Buckets(), func(b string) error { return s.PutIfAbsent(ctx, b, key, data) })
	}
	if err := errors.Join(putAll(slot, data)...); err != nil {
		t.Fatal(err)
	}
	for _, err := range putAll(slot, data[:10]) {
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second put: %v, want ErrExists", err)
		}
	}

	cut.set(local, true)
	got, size, err := set.GetRange(ctx, slot, 100, 1000)
	if err != nil || size != int64(len(data)) || !bytes.Equal(got, data[100:1100]) {
		t.Fatalf("read with the local zone down: %d bytes, %v", len(got), err)
	}
	if n := testutil.ToFloat64(m.FallThroughs().WithLabelValues("az2")); n != 1 {
		t.Errorf("fall-throughs from az2: %v, want 1", n)
	}
	if _, _, err := set.GetSuffix(ctx, "stars/s1/chain/none", 10); errors.Is(err, objstore.ErrNotFound) || !objstore.IsRetryable(err) {
		t.Errorf("a miss with a zone down: %v, want retryable, not ErrNotFound", err)
	}
	for i, err := range putAll("stars/s1/chain/x", data[:10]) {
		if down := set.Buckets()[i] == local; down != (err != nil) || down && !objstore.IsRetryable(err) {
			t.Errorf("put into %s with az2 down: %v, want a retryable error from az2 alone", set.Buckets()[i], err)
		}
	}

	// an assembly copies its source from the set's copy source: not the
	// down zone once it failed as one; it writes the standard bucket
	set.SetHealth(objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax))
	if !set.SourceFailed(local) {
		t.Fatal("no zone left after the local zone failed as a copy source")
	}
	src := set.CopySource()
	if src == local {
		t.Fatalf("copy source %s is the down zone", src)
	}
	pieces := []objstore.Piece{{SrcBucket: src, SrcKey: slot, Off: 0, Len: 8 << 20}, {SrcBucket: src, SrcKey: slot, Off: 9 << 20, Len: 1000}, objstore.DataPiece([]byte("footer"))}
	want := append(append(bytes.Clone(data[:8<<20]), data[9<<20:9<<20+1000]...), "footer"...)
	if _, err := s.Assemble(ctx, objstore.AssembleRequest{Bucket: std, Key: "settled/1", Pieces: pieces,
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true}); err != nil {
		t.Fatal(err)
	}
	if got := storetest.ReadAll(t, raw, std, "settled/1"); !bytes.Equal(got, want) {
		t.Fatal("assembled object differs")
	}

	set.SetHealth(nil) // the deletes ask every zone
	for _, o := range set.Delete(ctx, []string{slot, "stars/s1/chain/absent"}, nil) {
		if down := o.Bucket == local; down != (o.Err != nil) || down && !objstore.IsRetryable(o.Err) {
			t.Fatalf("delete from %s with the local zone down: %v; want the local zone alone reported", o.Bucket, o.Err)
		}
	}
	cut.set(local, false)
	for _, o := range set.Delete(ctx, []string{slot, "stars/s1/chain/absent"}, nil) {
		if o.Err != nil {
			t.Fatalf("delete from %s once the zone is back: %v", o.Bucket, o.Err)
		}
	}
	for _, zb := range zones {
		if _, err := raw.Head(ctx, zb.Bucket, slot); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("slot still in %s: %v", zb.Zone, err)
		}
	}
}
