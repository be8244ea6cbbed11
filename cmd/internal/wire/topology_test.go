package wire

import (
	"context"
	"errors"
	"testing"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
)

// TestTopologyReads: a class's slots are read from that class's buckets only
// (the standard bucket, or the express set local zone first with
// fall-through; the hold-off of a down zone is objstore's
// TestBucketSetHoldsOffADownZone).
func TestTopologyReads(t *testing.T) {
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
	for b, k := range map[string]string{"std": "slot/std", "za": "slot/a", "zb": "slot/b"} {
		if err := fs.PutIfAbsent(ctx, b, k, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := Topology(config.Config{Bucket: "std", Location: "b",
		S3ExpressBuckets: []objstore.ZoneBucket{{Zone: "a", Bucket: "za"}, {Zone: "b", Bucket: "zb"}}}, fs, objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ class, key, want string }{
		{catalog.ClassStandard, "slot/std", "std"},
		{catalog.ClassExpress, "slot/b", "zb"},
		{catalog.ClassExpress, "slot/a", "za"}, // missing in the local zone: falls through
	} {
		got, _, err := r.GetRange(ctx, tc.class, tc.key, 0, 10)
		if err != nil || string(got) != tc.want {
			t.Errorf("%s %s: %q %v, want %q", tc.class, tc.key, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ class, key string }{{catalog.ClassStandard, "slot/a"}, {catalog.ClassExpress, "slot/std"}} {
		if _, _, err := r.GetRange(ctx, tc.class, tc.key, 0, 10); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s %s read outside its class's buckets: %v", tc.class, tc.key, err)
		}
	}
	none, err := Topology(config.Config{Bucket: "std"}, fs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := none.GetRange(ctx, catalog.ClassExpress, "slot/a", 0, 1); err == nil {
		t.Error("an express read without an express set succeeded")
	}
}
