package storetest

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/objstore"
)

func testRoundTrip(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	data := Bytes(1, 100000)
	mustPut(t, s, b, "stars/s1/chain/00000000000000000001/00000000000000000007", data)
	key := "stars/s1/chain/00000000000000000001/00000000000000000007"
	for _, c := range []struct{ off, n int64 }{{0, 100000}, {0, 1}, {99999, 1}, {5000, 300}, {90000, 50000}} {
		got, size, err := s.GetRange(ctx, b, key, c.off, c.n)
		want := data[c.off:min(c.off+c.n, int64(len(data)))]
		if err != nil || size != int64(len(data)) || !bytes.Equal(got, want) {
			t.Errorf("GetRange(%d, %d) = %d bytes, size %d, %v", c.off, c.n, len(got), size, err)
		}
	}
	if _, _, err := s.GetRange(ctx, b, key, 100000, 10); !errors.Is(err, objstore.ErrInvalidRange) {
		t.Errorf("GetRange past the end: %v, want ErrInvalidRange", err)
	}
	for _, n := range []int64{1, 40, 100000, 200000} {
		got, size, err := s.GetSuffix(ctx, b, key, n)
		want := data[int64(len(data))-min(n, int64(len(data))):]
		if err != nil || size != int64(len(data)) || !bytes.Equal(got, want) {
			t.Errorf("GetSuffix(%d) = %d bytes, size %d, %v", n, len(got), size, err)
		}
	}
	a, err := s.Head(ctx, b, key)
	if err != nil || a.Size != int64(len(data)) || a.ETag == "" {
		t.Errorf("Head = %+v, %v", a, err)
	}
	mustPut(t, s, b, "empty", nil)
	if got, size, err := s.GetSuffix(ctx, b, "empty", 10); err != nil || size != 0 || len(got) != 0 {
		t.Errorf("GetSuffix of an empty object = %d bytes, size %d, %v", len(got), size, err)
	}
	if a, err := s.Head(ctx, b, "empty"); err != nil || a.Size != 0 {
		t.Errorf("Head of an empty object = %+v, %v", a, err)
	}
	for name, f := range map[string]func() error{
		"GetRange":  func() error { _, _, err := s.GetRange(ctx, b, "missing/key", 0, 1); return err },
		"GetSuffix": func() error { _, _, err := s.GetSuffix(ctx, b, "missing/key", 1); return err },
		"Head":      func() error { _, err := s.Head(ctx, b, "missing/key"); return err },
		"prefix":    func() error { _, err := s.Head(ctx, b, "stars/s1"); return err },
	} {
		if err := f(); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s of a missing key: %v, want ErrNotFound", name, err)
		}
	}
	if _, _, err := s.GetRange(ctx, b+"-missing", key, 0, 1); !errors.Is(err, objstore.ErrBucketNotFound) {
		t.Errorf("GetRange in a missing bucket: %v, want ErrBucketNotFound", err)
	}
}

func testInvalidKeys(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	for _, k := range []string{"", "/a", "a/", "a//b", "a/../b", "..", "./a", ".nova-tmp/x", "a/.nova-tmp", "a\x00b"} {
		if err := s.PutIfAbsent(ctx, b, k, []byte("x")); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("PutIfAbsent(%q): %v, want ErrInvalidKey", k, err)
		}
		if _, err := s.Head(ctx, b, k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("Head(%q): %v, want ErrInvalidKey", k, err)
		}
	}
}

func testCreateOnce(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	first := Bytes(2, 1000)
	mustPut(t, s, b, "k", first)
	if err := s.PutIfAbsent(ctx, b, "k", Bytes(3, 10)); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second put: %v, want ErrExists", err)
	}
	if got := ReadAll(t, s, b, "k"); !bytes.Equal(got, first) {
		t.Fatalf("second put changed the object")
	}
	// racers: exactly one wins
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = s.PutIfAbsent(ctx, b, "race/slot", Bytes(uint64(10+i), 5000))
		}()
	}
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Fatalf("racers %d and %d both won", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, objstore.ErrExists):
			t.Fatalf("racer %d: %v", i, err)
		}
	}
	if won < 0 {
		t.Fatal("no racer won")
	}
	if got := ReadAll(t, s, b, "race/slot"); !bytes.Equal(got, Bytes(uint64(10+won), 5000)) {
		t.Fatal("the standing object is not the winner's")
	}
}

func testDelete(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	mustPut(t, s, b, "d/a", []byte("a"))
	mustPut(t, s, b, "d/b/c", []byte("c"))
	if err := s.Delete(ctx, b, []string{"d/a", "d/b/c", "d/absent", "never/there"}); err != nil {
		t.Fatalf("delete: %v", err)
	}
	for _, k := range []string{"d/a", "d/b/c"} {
		if _, err := s.Head(ctx, b, k); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("%s after delete: %v", k, err)
		}
	}
	if err := s.Delete(ctx, b, []string{"d/a"}); err != nil {
		t.Errorf("delete again: %v", err)
	}
	if err := s.Delete(ctx, b, nil); err != nil {
		t.Errorf("delete nothing: %v", err)
	}
	// the key can be created again after a delete
	mustPut(t, s, b, "d/b/c", []byte("again"))
	var de *objstore.DeleteError
	if err := s.Delete(ctx, b, []string{"ok", "bad/../key"}); !errors.As(err, &de) || len(de.Failed) != 1 || de.Keys()[0] != "bad/../key" {
		t.Errorf("delete with an invalid key: %v, want a DeleteError naming it", err)
	}
}

func testList(t *testing.T, h Harness) {
	s, b, ctx := h.Store, h.NewBucket(t), ctxT(t)
	want := map[string]int64{"l/a/1": 1, "l/a/2": 2, "l/b": 3, "m": 4}
	before := time.Now()
	for k, n := range want {
		mustPut(t, s, b, k, make([]byte, n))
	}
	after := time.Now()
	for prefix, keys := range map[string][]string{"l/": {"l/a/1", "l/a/2", "l/b"}, "l/a": {"l/a/1", "l/a/2"}, "": {"l/a/1", "l/a/2", "l/b", "m"}, "z": nil} {
		got := map[string]objstore.ObjectInfo{}
		err := s.List(ctx, b, prefix, func(o objstore.ObjectInfo) error { got[o.Key] = o; return nil })
		if err != nil || len(got) != len(keys) {
			t.Errorf("List(%q) = %v, %v; want %v", prefix, got, err, keys)
		}
		for _, k := range keys {
			if got[k].Size != want[k] {
				t.Errorf("List(%q): %s has size %d, want %d", prefix, k, got[k].Size, want[k])
			}
			// S3 reports whole seconds, and the server's clock is not
			// ours: a small skew either side is allowed, a zero time or
			// a wrong unit is not.
			if lm := got[k].LastModified; lm.Before(before.Add(-listClockSlack)) || lm.After(after.Add(listClockSlack)) {
				t.Errorf("List(%q): %s last modified %v, want within %v of the PUTs (%v .. %v)", prefix, k, lm, listClockSlack, before, after)
			}
		}
	}
	stop := errors.New("stop")
	if err := s.List(ctx, b, "", func(objstore.ObjectInfo) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("List did not return fn's error: %v", err)
	}
}
