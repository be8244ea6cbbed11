package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
)

// downStore fails every read of one bucket as a zone outage would, and
// counts the reads each bucket gets.
type downStore struct {
	objstore.Store
	down  string
	reads map[string]int
}

func (s *downStore) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	s.reads[bucket]++
	if bucket == s.down {
		return nil, 0, &objstore.TransientError{Op: "GetObject", Err: errors.New("503 ServiceUnavailable (injected)")}
	}
	return s.Store.GetRange(ctx, bucket, key, off, n)
}

// TestClassReaderHoldsOffADownZone: reads fall through a down local zone to
// the other one; after the first failure the down zone is tried last (its
// retries are paid once, not once per slot), and after the hold-off it is
// tried first again. A slot missing everywhere is ErrNotFound; missing in
// one zone and down in the other is a transient failure, not a miss.
func TestClassReaderHoldsOffADownZone(t *testing.T) {
	ctx := context.Background()
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"std", "za", "zb"} {
		if err := fs.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range []string{"za", "zb"} {
		for _, k := range []string{"slot/1", "slot/2", "slot/3"} {
			if err := fs.PutIfAbsent(ctx, b, k, []byte("bytes of "+k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := fs.PutIfAbsent(ctx, "za", "slot/only-a", []byte("x")); err != nil {
		t.Fatal(err)
	}
	st := &downStore{Store: fs, down: "za", reads: map[string]int{}}
	now := time.Unix(1000, 0)
	r := &classReader{store: st, now: func() time.Time { return now },
		cfg: config.Config{Bucket: "std", Location: "a", S3ExpressBuckets: []config.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}}}}
	for _, k := range []string{"slot/1", "slot/2", "slot/3"} {
		got, _, err := r.GetRange(ctx, catalog.ClassExpress, k, 0, 100)
		if err != nil || string(got) != "bytes of "+k {
			t.Fatalf("read %s: %q %v", k, got, err)
		}
	}
	if st.reads["za"] != 1 || st.reads["zb"] != 3 {
		t.Fatalf("reads by bucket %v: want the down zone tried once, then held off", st.reads)
	}
	// zb says missing, za (tried last) is down: a transient failure, not a miss
	if _, _, err := r.GetRange(ctx, catalog.ClassExpress, "slot/none", 0, 1); err == nil || errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing in one zone, down in the other: %v, want a transient failure", err)
	}
	st.down = ""
	now = now.Add(zoneHoldOff + time.Second)
	before := st.reads["za"]
	if _, _, err := r.GetRange(ctx, catalog.ClassExpress, "slot/1", 0, 100); err != nil || st.reads["za"] != before+1 {
		t.Fatalf("after the hold-off the local zone is not tried first: %v %v", err, st.reads)
	}
	if _, _, err := r.GetRange(ctx, catalog.ClassExpress, "slot/none", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing everywhere: %v, want ErrNotFound", err)
	}
	if _, _, err := r.GetRange(ctx, catalog.ClassStandard, "slot/1", 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("standard class reads the standard bucket only: %v", err)
	}
}
