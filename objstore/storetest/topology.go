package storetest

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// zoneDown wraps the store under test and fails every request to the
// buckets marked down, as an unreachable zone would (a retryable failure).
type zoneDown struct {
	objstore.Store
	mu   sync.Mutex
	down map[string]bool
}

var errZoneDown = &objstore.TransientError{Op: "storetest", Err: errors.New("zone unreachable")}

func (z *zoneDown) set(bucket string, down bool) {
	z.mu.Lock()
	defer z.mu.Unlock()
	z.down[bucket] = down
}

func (z *zoneDown) isDown(bucket string) bool {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.down[bucket]
}

func (z *zoneDown) GetRange(ctx context.Context, b, k string, off, n int64) ([]byte, int64, error) {
	if z.isDown(b) {
		return nil, 0, errZoneDown
	}
	return z.Store.GetRange(ctx, b, k, off, n)
}

func (z *zoneDown) Head(ctx context.Context, b, k string) (objstore.Attrs, error) {
	if z.isDown(b) {
		return objstore.Attrs{}, errZoneDown
	}
	return z.Store.Head(ctx, b, k)
}

func (z *zoneDown) Delete(ctx context.Context, b string, keys []string) error {
	if z.isDown(b) {
		return errZoneDown
	}
	return z.Store.Delete(ctx, b, keys)
}

// testTopology is the contract of the storage topology over the store: a
// class kept in one bucket, a class kept in every bucket of three zones
// (the local zone read first), and the zone health reads, copy sources and
// deletes share. It runs on every backend, so the topology the steps use
// is proven on each, as the Store contract is.
func testTopology(t *testing.T, h Harness) {
	ctx := ctxT(t)
	std := h.NewBucket(t)
	za, zb, zc := h.NewBucket(t), h.NewBucket(t), h.NewBucket(t)
	store := &zoneDown{Store: h.Store, down: map[string]bool{}}
	top, err := objstore.NewTopology(store, std, map[string][]objstore.ZoneBucket{
		"one":   {{Bucket: std}},
		"zonal": {{Zone: "a", Bucket: za}, {Zone: "b", Bucket: zb}, {Zone: "c", Bucket: zc}},
	}, "b", nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := top.Buckets("zonal"); !reflect.DeepEqual(got, []string{zb, za, zc}) {
		t.Fatalf("read order %v, want the local zone's bucket first", got)
	}
	if got := top.All(); !reflect.DeepEqual(got, []string{std, zb, za, zc}) || top.Standard() != std {
		t.Fatalf("every bucket: %v", got)
	}
	if _, _, err := top.GetRange(ctx, "none", "k", 0, 1); err == nil {
		t.Fatal("a read of a class without buckets succeeded")
	}
	set, err := top.Class("zonal")
	if err != nil {
		t.Fatal(err)
	}

	// A slot in every zone, written create-once through the one fan-out.
	const slot = "stars/s1/chain/00000000000000000001/00000000000000000001"
	data := Bytes(21, 6*mib)
	for i, err := range objstore.EachBucket(set.Buckets(), func(b string) error {
		return store.PutIfAbsent(ctx, b, slot, data)
	}) {
		if err != nil {
			t.Fatalf("put into %s: %v", set.Buckets()[i], err)
		}
	}
	if err := store.PutIfAbsent(ctx, zc, "stars/s1/chain/remote", []byte("remote")); err != nil {
		t.Fatal(err)
	}
	if got, _, err := top.GetRange(ctx, "zonal", "stars/s1/chain/remote", 0, 10); err != nil || string(got) != "remote" {
		t.Fatalf("a slot only in a remote zone: %q, %v", got, err)
	}
	if _, _, err := top.GetRange(ctx, "one", slot, 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a zonal slot read from the other class's bucket: %v, want ErrNotFound", err)
	}
	if src, _ := top.CopySource("zonal"); src != zb {
		t.Fatalf("copy source %s with every zone up, want the local %s", src, zb)
	}

	// The local zone goes down: reads fall through and hold it off, so
	// copies and deletes avoid it too.
	store.set(zb, true)
	if got, _, err := top.GetRange(ctx, "zonal", slot, 100, 50); err != nil || !bytes.Equal(got, data[100:150]) {
		t.Fatalf("read with the local zone down: %v", err)
	}
	if !top.Health().Down(zb) {
		t.Fatal("a zone whose read failed is not held off")
	}
	if _, _, err := top.GetRange(ctx, "zonal", "stars/s1/chain/none", 0, 1); errors.Is(err, objstore.ErrNotFound) || !objstore.IsRetryable(err) {
		t.Fatalf("a miss with a zone down: %v, want a retryable error, never absence", err)
	}
	src, err := top.CopySource("zonal")
	if err != nil || src == zb {
		t.Fatalf("copy source %s (%v) with %s held off", src, err, zb)
	}
	footer := []byte("footer")
	want := append(bytes.Clone(data[:5*mib]), footer...)
	if _, err := store.Assemble(ctx, objstore.AssembleRequest{Bucket: std, Key: "settled/1",
		Pieces:         []objstore.Piece{{SrcBucket: src, SrcKey: slot, Off: 0, Len: 5 * mib}, objstore.DataPiece(footer)},
		ExpectedCRC32C: bundlefmt.CRC32C(want), HasExpectedCRC32C: true}); err != nil {
		t.Fatalf("assemble from the copy source %s: %v", src, err)
	}
	if got := ReadAll(t, h.Store, std, "settled/1"); !bytes.Equal(got, want) {
		t.Fatal("the assembled object differs")
	}
	outs := set.Delete(ctx, []string{slot}, nil)
	for _, o := range outs {
		if held := o.Bucket == zb; o.HeldOff != held || o.Confirmed(slot) == held {
			t.Fatalf("delete with %s held off: %+v", zb, outs)
		}
	}

	// Back up (its hold-off over): the delete reaches it.
	store.set(zb, false)
	top.Health().Succeeded(zb)
	for _, o := range set.Delete(ctx, []string{slot, "stars/s1/chain/remote"}, []string{zb, zc}) {
		if o.Err != nil || !o.Confirmed(slot) {
			t.Fatalf("delete from %s once it is back: %v", o.Bucket, o.Err)
		}
	}
	if _, _, err := top.GetRange(ctx, "zonal", slot, 0, 1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("read after the deletes: %v, want ErrNotFound", err)
	}

	// Every zone failing as a copy source leaves none to try.
	if !top.SourceFailed(zb) || !top.SourceFailed(za) || top.SourceFailed(zc) || top.SourceFailed(std) {
		t.Fatal("copy-source failover: want the next zone while one is left, none after the last")
	}
}
