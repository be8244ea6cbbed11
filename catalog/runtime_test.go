package catalog_test

import (
	"errors"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// TestRuntimeRoundTrip: the leader's recorded policy, the tail-growth
// rule included (migration 0008), reads back as it was written, and a
// stale token records nothing.
func TestRuntimeRoundTrip(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ledger().Runtime(ctx, "s1"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("runtime before any leader: %v", err)
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	p := catalog.DuePolicy{Linger: 5 * time.Minute, AgeCap: 24 * time.Hour, ExpressLinger: time.Minute, ExpressAgeCap: time.Hour,
		TailGrowth: 1.5, CopyFloor: 5 << 20}
	if err := db.Ledger().RecordRuntime(ctx, lease.Fence, "v1", p, 2*time.Hour); err != nil {
		t.Fatal(err)
	}
	rt, err := db.Ledger().Runtime(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if rt.Policy != p || rt.ReapGrace != 2*time.Hour || rt.Holder != "me" || rt.Version != "v1" {
		t.Fatalf("runtime %+v, want policy %+v", rt, p)
	}
	stale := lease.Fence
	stale.Token++
	if err := db.Ledger().RecordRuntime(ctx, stale, "v2", catalog.DuePolicy{}, 0); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("record under a stale token: %v", err)
	}
}
