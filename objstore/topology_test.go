package objstore_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
)

// flaky wraps a store and fails every call on the buckets in down, as an
// unreachable zone would.
type flaky struct {
	objstore.Store
	down map[string]bool
}

var errDown = &objstore.TransientError{Op: "test", Err: errors.New("zone unreachable")}

func (f *flaky) GetRange(ctx context.Context, b, k string, off, n int64) ([]byte, int64, error) {
	if f.down[b] {
		return nil, 0, errDown
	}
	return f.Store.GetRange(ctx, b, k, off, n)
}

func (f *flaky) Delete(ctx context.Context, b string, keys []string) error {
	if f.down[b] {
		return errDown
	}
	return f.Store.Delete(ctx, b, keys)
}

func (f *flaky) PutIfAbsent(ctx context.Context, b, k string, d []byte) error {
	if f.down[b] {
		return errDown
	}
	return f.Store.PutIfAbsent(ctx, b, k, d)
}

// fileBuckets is a file backend with the buckets named.
func fileBuckets(t *testing.T, buckets ...string) *filestore.Store {
	t.Helper()
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range buckets {
		if err := fs.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	return fs
}

func TestBucketSet(t *testing.T) {
	ctx := context.Background()
	fs := fileBuckets(t, "ex-a", "ex-b", "ex-c")
	reg := prometheus.NewRegistry()
	m, err := objstore.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	fl := &flaky{Store: fs, down: map[string]bool{}}
	store := objstore.Instrument(fl, m)
	zones := []objstore.ZoneBucket{{Zone: "use1-az1", Bucket: "ex-a"}, {Zone: "use1-az2", Bucket: "ex-b"}, {Zone: "use1-az4", Bucket: "ex-c"}}
	set, err := objstore.NewBucketSet(store, zones, "use1-az2")
	if err != nil {
		t.Fatal(err)
	}
	if rb := set.Buckets(); rb[0] != "ex-b" || len(rb) != 3 {
		t.Fatalf("read order %v, want the local zone first", rb)
	}

	put := func(data string) []error {
		return objstore.EachBucket(set.Buckets(), func(b string) error {
			return store.PutIfAbsent(ctx, b, "slot/1", []byte(data))
		})
	}
	if errs := put("payload"); errors.Join(errs...) != nil || len(errs) != 3 {
		t.Fatalf("put into every bucket: %v", errs)
	}
	for i, err := range put("other") {
		if !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second put into %s: %v, want ErrExists", set.Buckets()[i], err)
		}
	}
	// a slot only in a remote zone: the local miss falls through
	if err := fs.PutIfAbsent(ctx, "ex-c", "slot/2", []byte("remote")); err != nil {
		t.Fatal(err)
	}
	if d, _, err := set.GetRange(ctx, "slot/2", 0, 100); err != nil || string(d) != "remote" {
		t.Fatalf("fall-through read: %q, %v", d, err)
	}
	// the local zone down: reads fall through to the next zone
	fl.down["ex-b"] = true
	if d, _, err := set.GetRange(ctx, "slot/1", 0, 3); err != nil || string(d) != "pay" {
		t.Fatalf("read with the local zone down: %q, %v", d, err)
	}
	// a miss everywhere with a zone down is not reported as absence
	if _, _, err := set.GetRange(ctx, "slot/none", 0, 1); errors.Is(err, objstore.ErrNotFound) || !objstore.IsRetryable(err) {
		t.Fatalf("miss with a zone down: %v, want a retryable error, not ErrNotFound", err)
	}
	// deletes report the down zone and succeed once it is back
	outs := set.Delete(ctx, []string{"slot/1", "slot/2"}, nil)
	for _, o := range outs {
		if down := o.Bucket == "ex-b"; down != (o.Err != nil) || o.Confirmed("slot/1") == down || down && !objstore.IsRetryable(o.Err) {
			t.Fatalf("delete with a zone down: %+v", outs)
		}
	}
	fl.down["ex-b"] = false
	for _, o := range set.Delete(ctx, []string{"slot/1", "slot/2"}, []string{"ex-b"}) {
		if o.Bucket != "ex-b" || o.Err != nil || !o.Confirmed("slot/2") {
			t.Fatalf("delete from the zone once it is back: %+v", o)
		}
	}
	if _, _, err := set.GetRange(ctx, "slot/1", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("read after delete: %v, want ErrNotFound", err)
	}

	// an assembly copies its sources from the set's copy source and writes
	// elsewhere; a copy source that failed is held off, the next zone
	// serves
	if err := fs.CreateBucket("std"); err != nil {
		t.Fatal(err)
	}
	if err := fs.PutIfAbsent(ctx, "ex-a", "slot/3", []byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	set.SetHealth(objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax))
	if _, zb, err := set.Head(ctx, "slot/3"); err != nil || zb.Bucket != "ex-a" {
		t.Fatalf("head of a slot in one zone: %v, %v", zb, err)
	}
	if src := set.CopySource(); src != "ex-b" {
		t.Fatalf("copy source %s, want the local zone's bucket", src)
	}
	if !set.SourceFailed("ex-b") || set.SourceFailed("std") {
		t.Fatal("a failed copy source: no other zone left, or a bucket outside the set recorded")
	}
	src := set.CopySource()
	if src != "ex-a" {
		t.Fatalf("copy source after the local zone failed: %s, want ex-a", src)
	}
	pieces := []objstore.Piece{{SrcBucket: src, SrcKey: "slot/3", Off: 2, Len: 3}, objstore.DataPiece([]byte("!")), {SrcBucket: src, SrcKey: "slot/3", Off: 8, Len: 2}}
	if _, err := store.Assemble(ctx, objstore.AssembleRequest{Bucket: "std", Key: "out", Pieces: pieces}); err != nil {
		t.Fatal(err)
	}
	if d, _, err := store.GetRange(ctx, "std", "out", 0, 100); err != nil || !bytes.Equal(d, []byte("234!89")) {
		t.Fatalf("assembled %q, %v", d, err)
	}

	if got := testutil.ToFloat64(m.FallThroughs().WithLabelValues("use1-az2")); got != 5 {
		t.Errorf("fall-throughs from use1-az2: %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.Bytes().WithLabelValues("copied")); got != 5 {
		t.Errorf("copied bytes: %v, want 5", got)
	}
	if n, err := testutil.GatherAndCount(reg); err != nil || n == 0 {
		t.Errorf("gather: %d, %v", n, err)
	}
	// standard star: the same code path over one bucket
	std, err := objstore.NewBucketSet(store, []objstore.ZoneBucket{{Bucket: "std"}}, "")
	if err != nil {
		t.Fatal(err)
	}
	if d, _, err := std.GetSuffix(ctx, "out", 2); err != nil || string(d) != "89" {
		t.Fatalf("single bucket read: %q, %v", d, err)
	}
	if _, err := objstore.NewBucketSet(store, []objstore.ZoneBucket{{"a", "x"}, {"a", "y"}}, "a"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("duplicate zone accepted: %v", err)
	}
}

func TestNewMetricsTwice(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := objstore.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := objstore.NewMetrics(reg); err == nil {
		t.Fatal("second registration on one registry succeeded")
	}
}

// countingDown fails every read of one bucket as a zone outage would and
// counts the reads each bucket gets.
type countingDown struct {
	objstore.Store
	down  string
	reads map[string]int
}

func (s *countingDown) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	s.reads[bucket]++
	if bucket == s.down {
		return nil, 0, errDown
	}
	return s.Store.GetRange(ctx, bucket, key, off, n)
}

// TestBucketSetHoldsOffADownZone: reads fall through a down local zone to
// the other one; after the first failure the down zone is tried last (its
// retries are paid once, not once per read), and after the hold-off it is
// tried first again. A key missing in one zone and unreadable in the other
// is a transient failure, not a miss; missing everywhere is ErrNotFound.
func TestBucketSetHoldsOffADownZone(t *testing.T) {
	ctx := context.Background()
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"za", "zb"} {
		if err := fs.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"slot/1", "slot/2", "slot/3"} {
			if err := fs.PutIfAbsent(ctx, b, k, []byte("bytes of "+k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	st := &countingDown{Store: fs, down: "za", reads: map[string]int{}}
	set, err := objstore.NewBucketSet(st, []objstore.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	h := objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax)
	set.SetHealth(h)
	now := time.Unix(1000, 0)
	objstore.SetClock(set, func() time.Time { return now })
	objstore.SetHealthClock(h, func() time.Time { return now })
	for _, k := range []string{"slot/1", "slot/2", "slot/3"} {
		got, _, err := set.GetRange(ctx, k, 0, 100)
		if err != nil || string(got) != "bytes of "+k {
			t.Fatalf("read %s: %q %v", k, got, err)
		}
	}
	if st.reads["za"] != 1 || st.reads["zb"] != 3 {
		t.Fatalf("reads by bucket %v: want the down zone tried once, then held off", st.reads)
	}
	// zb says missing, za (tried last) is down: a transient failure, not a miss
	if _, _, err := set.GetRange(ctx, "slot/none", 0, 1); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing in one zone, down in the other: %v, want a transient failure", err)
	}
	// Failing again while held off doubles the hold-off.
	if left, fails := h.HeldOff("za"); fails != 2 || left != 2*objstore.HoldOffMin {
		t.Fatalf("hold-off after two failures: %v (%d failures), want %v", left, fails, 2*objstore.HoldOffMin)
	}
	st.down = ""
	now = now.Add(objstore.HoldOffMin + time.Second)
	if !h.Down("za") {
		t.Fatal("the doubled hold-off ended after the first one's length")
	}
	now = now.Add(objstore.HoldOffMin)
	before := st.reads["za"]
	if _, _, err := set.GetRange(ctx, "slot/1", 0, 100); err != nil || st.reads["za"] != before+1 {
		t.Fatalf("after the hold-off the local zone is not tried first: %v %v", err, st.reads)
	}
	if _, _, err := set.GetRange(ctx, "slot/none", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing everywhere: %v, want ErrNotFound", err)
	}
}

// TestHealthHoldOffCoversDetection: a failure that took longer to detect
// than the minimum hold-off (a stalled zone: attempts x attempt timeout)
// is held off at least that long; hold-offs double while the bucket keeps
// failing, up to the maximum; a success clears it.
func TestHealthHoldOffCoversDetection(t *testing.T) {
	now := time.Unix(0, 0)
	h := objstore.NewHealth(30*time.Second, 10*time.Minute)
	objstore.SetHealthClock(h, func() time.Time { return now })
	h.Failed("za", 4*time.Minute)
	if left, _ := h.HeldOff("za"); left != 4*time.Minute {
		t.Fatalf("held off %v after a 4m detection", left)
	}
	for _, want := range []time.Duration{8 * time.Minute, 10 * time.Minute, 10 * time.Minute} {
		h.Failed("za", time.Second)
		if left, _ := h.HeldOff("za"); left != want {
			t.Fatalf("held off %v, want %v", left, want)
		}
	}
	set, err := objstore.NewBucketSet(nil, []objstore.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	set.SetHealth(h)
	if got := set.CopySource(); got != "zb" {
		t.Fatalf("copy source %v: the held-off bucket must go last", got)
	}
	h.Succeeded("za")
	if h.Down("za") {
		t.Fatal("a success did not clear the hold-off")
	}
	h.Failed("za", 0)
	if left, _ := h.HeldOff("za"); left != 30*time.Second {
		t.Fatalf("after a success the hold-off starts over: %v", left)
	}
	now = now.Add(31 * time.Second)
	if h.Down("za") {
		t.Fatal("held off past its hold-off")
	}
}

// TestBucketSetDeletesAndCopiesShareHealth: a bucket whose delete failed
// whole is held off for the next delete (no request is sent to it) and is
// not the copy source; a bucket that failed as a copy source is skipped
// by deletes too; once every zone failed as a copy source none is left.
func TestBucketSetDeletesAndCopiesShareHealth(t *testing.T) {
	ctx := context.Background()
	fs := fileBuckets(t, "za", "zb", "zc")
	st := &countingDelete{flaky: flaky{Store: fs, down: map[string]bool{"za": true}}, calls: map[string]int{}}
	set, err := objstore.NewBucketSet(st, []objstore.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}, {Zone: "c", Bucket: "zc"}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	h := objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax)
	set.SetHealth(h)
	outs := set.Delete(ctx, []string{"k"}, nil)
	if outs[0].Bucket != "za" || outs[0].Err == nil || outs[0].Confirmed("k") || !outs[1].Confirmed("k") || !outs[2].Confirmed("k") {
		t.Fatalf("first delete: %+v", outs)
	}
	if !h.Down("za") || set.CopySource() != "zb" {
		t.Fatalf("a bucket whose delete failed: down %v, copy source %s", h.Down("za"), set.CopySource())
	}
	outs = set.Delete(ctx, []string{"k"}, nil)
	if !outs[0].HeldOff || st.calls["za"] != 1 || st.calls["zb"] != 2 {
		t.Fatalf("second delete: %+v, calls %v; want za held off, not asked", outs, st.calls)
	}
	if !set.SourceFailed("zb") || !h.Down("zb") || set.CopySource() != "zc" {
		t.Fatal("zb failed as a copy source: want zc next")
	}
	if outs := set.Delete(ctx, []string{"k"}, []string{"zb", "zc"}); !outs[0].HeldOff || outs[1].HeldOff || st.calls["zb"] != 2 {
		t.Fatalf("delete after zb failed as a copy source: %+v", outs)
	}
	if set.SourceFailed("zc") {
		t.Fatal("every zone failed as a copy source, and one is said to be left")
	}
}

type countingDelete struct {
	flaky
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingDelete) Delete(ctx context.Context, b string, keys []string) error {
	c.mu.Lock()
	c.calls[b]++
	c.mu.Unlock()
	return c.flaky.Delete(ctx, b, keys)
}

// TestCopySourceFailoverEnds: with a health that never holds off, a failed
// copy source is not offered again as "another zone": the failover ends.
func TestCopySourceFailoverEnds(t *testing.T) {
	set, err := objstore.NewBucketSet(nil, []objstore.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	set.SetHealth(objstore.NewHealth(0, 0))
	if set.SourceFailed(set.CopySource()) {
		t.Fatal("a health that never holds off: the same copy source offered again")
	}
	if _, err := objstore.NewTopology(nil, "std", map[string][]objstore.ZoneBucket{
		"one": {{Bucket: "std"}}, "zonal": {{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "std"}}}, "a", nil); err == nil {
		t.Fatal("a bucket in two classes accepted")
	}
}

// abortCounter counts ListAssemblies and AbortAssembly by bucket and
// fails both on the buckets in down.
type abortCounter struct {
	flaky
	mu     sync.Mutex
	calls  map[string]int
	denied map[string]bool // buckets whose aborts fail for this key alone (not retryable)
}

func (c *abortCounter) ListAssemblies(ctx context.Context, b, k string) ([]string, error) {
	c.mu.Lock()
	c.calls[b]++
	c.mu.Unlock()
	if c.down[b] {
		return nil, errDown
	}
	return c.flaky.ListAssemblies(ctx, b, k)
}

func (c *abortCounter) AbortAssembly(ctx context.Context, b, k, id string) error {
	c.mu.Lock()
	c.calls[b]++
	c.mu.Unlock()
	if c.down[b] {
		return errDown
	}
	if c.denied[b] {
		return errors.New("access denied to this upload")
	}
	return c.flaky.AbortAssembly(ctx, b, k, id)
}

// TestAbortUploadsShareHealth: reap's aborts go through the set's zone
// health as its deletes do. A failing zone is held off (its intent stays
// for a later cycle), and while it is held off it is sent nothing; an
// upload already gone is success.
func TestAbortUploadsShareHealth(t *testing.T) {
	ctx := context.Background()
	fs := fileBuckets(t, "za", "zb")
	st := &abortCounter{flaky: flaky{Store: fs, down: map[string]bool{"za": true}}, calls: map[string]int{}}
	set, err := objstore.NewBucketSet(st, []objstore.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}}, "a")
	if err != nil {
		t.Fatal(err)
	}
	h := objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax)
	set.SetHealth(h)
	outs, requests := set.AbortUploads(ctx, "k", "upload-1", true)
	if outs[0].Bucket != "za" || outs[0].Err == nil || outs[1].Err != nil || outs[1].HeldOff {
		t.Fatalf("first abort: %+v", outs)
	}
	if !h.Down("za") || requests != 3 { // za: a failed listing; zb: a listing and the recorded upload's abort
		t.Fatalf("after a failed abort: za down %v, %d requests", h.Down("za"), requests)
	}
	before := st.calls["za"]
	outs, _ = set.AbortUploads(ctx, "k", "upload-1", true)
	if !outs[0].HeldOff || st.calls["za"] != before || outs[1].Err != nil {
		t.Fatalf("second abort: %+v, za asked %d times (was %d): want za held off, not asked", outs, st.calls["za"], before)
	}
	// A failure about this key alone is not the zone's: zb stays up, and
	// the next key's abort (or delete) is sent.
	st.denied = map[string]bool{"zb": true}
	outs, _ = set.AbortUploads(ctx, "k", "upload-2", false)
	if outs[1].Err == nil || outs[1].HeldOff || h.Down("zb") {
		t.Fatalf("an abort denied for one key: %+v, zb down %v; want an error, zb not held off", outs, h.Down("zb"))
	}
}
