package bundle_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
)

// failingList is a store whose listings fail after handing on after keys.
type failingList struct {
	objstore.Store
	after int
}

var errListCut = errors.New("listing cut")

func (s *failingList) List(ctx context.Context, b, prefix string, fn func(objstore.ObjectInfo) error) error {
	n := 0
	err := s.Store.List(ctx, b, prefix, func(o objstore.ObjectInfo) error {
		if n == s.after {
			return errListCut
		}
		n++
		return fn(o)
	})
	return err
}

// zoneFailing fails every listing of one bucket as a zone outage does.
type zoneFailing struct {
	objstore.Store
	bucket string
	asked  atomic.Int64
}

func (s *zoneFailing) List(ctx context.Context, b, prefix string, fn func(objstore.ObjectInfo) error) error {
	if b == s.bucket {
		s.asked.Add(1)
		return &objstore.TransientError{Op: "ListObjectsV2", Err: errors.New("zone down (injected)")}
	}
	return s.Store.List(ctx, b, prefix, fn)
}

// TestListSettled lists a stream's settled prefix on both backends: the
// stream's objects with their coordinates, size and time; every other key
// under the prefix apart; nothing outside it; and a listing cut part way
// is an error.
func TestListSettled(t *testing.T) {
	for _, name := range []string{"file", "s3"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := teststore.File(t, teststore.Options{})
			if name == "s3" {
				b = teststore.S3(t, teststore.Options{Prefix: "list"})
			}
			top, err := bundle.Topology(b.Store, b.Std, nil, "", "--s3-express-buckets", nil)
			if err != nil {
				t.Fatal(err)
			}
			testListSettled(t, &fixture{ctx: context.Background(), fs: b.Store, std: b.Std, rd: bundle.NewReader(top)})
		})
	}
}

func testListSettled(t *testing.T, f *fixture) {
	st := catalog.Stream{ID: stream, Bucket: "b", Epoch: 2}
	other := bundlefmt.StreamID{15: 8}
	if got, want := bundle.SettledPrefix(st), "buckets/b/streams/00000000000000000000000000000007/00000000000000000002/"; got != want {
		t.Fatalf("SettledPrefix = %s, want %s", got, want)
	}
	before := time.Now()
	want := map[string]catalog.KeyCoords{}
	for _, c := range []catalog.KeyCoords{{Bucket: "b", Stream: stream, Epoch: 2, FirstRecord: 0, Revision: 0},
		{Bucket: "b", Stream: stream, Epoch: 2, FirstRecord: 0, Revision: 3}, {Bucket: "b", Stream: stream, Epoch: 2, FirstRecord: 40, Revision: 0}} {
		key := bundlefmt.SettledKey(c.Bucket, c.Stream, uint64(c.Epoch), uint64(c.FirstRecord), uint32(c.Revision))
		f.put(t, key, []byte(key))
		want[key] = c
	}
	// Not the stream's epoch, not the stream, not its bucket: not listed.
	for _, key := range []string{bundlefmt.SettledKey("b", stream, 3, 0, 0), bundlefmt.SettledKey("b", other, 2, 0, 0),
		bundlefmt.SettledKey("c", stream, 2, 0, 0)} {
		f.put(t, key, []byte("elsewhere"))
	}
	// Under the prefix, not settled keys.
	bad := []string{bundle.SettledPrefix(st) + "junk", bundle.SettledPrefix(st) + "00000000000000000005~01",
		bundle.SettledPrefix(st) + "sub/00000000000000000005~0"}
	for _, key := range bad {
		f.put(t, key, []byte("bad"))
	}

	got := map[string]bundle.SettledObject{}
	var unparsed []string
	err := f.rd.ListSettled(f.ctx, st, func(o bundle.SettledObject) error {
		got[o.Key] = o
		return nil
	}, func(b string, o objstore.ObjectInfo, err error) error {
		if b != f.std || err == nil {
			t.Errorf("unparsed %s in %s: %v", o.Key, b, err)
		}
		unparsed = append(unparsed, o.Key)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Errorf("listed %d settled objects, want %d: %v", len(got), len(want), got)
	}
	for key, c := range want {
		o, ok := got[key]
		switch {
		case !ok:
			t.Errorf("%s not listed", key)
		case o.Coords != c || o.Bucket != f.std || o.Size != int64(len(key)):
			t.Errorf("%s listed as %+v, want %+v in %s, %d bytes", key, o, c, f.std, len(key))
		case o.LastModified.Before(before.Add(-30*time.Second)) || o.LastModified.After(time.Now().Add(30*time.Second)):
			t.Errorf("%s last modified %v, not around its PUT at %v", key, o.LastModified, before)
		}
	}
	slices.Sort(unparsed)
	slices.Sort(bad)
	if !slices.Equal(unparsed, bad) {
		t.Errorf("unparsed %v, want %v", unparsed, bad)
	}

	// A listing cut part way is an error, after what it listed.
	top, err := bundle.Topology(&failingList{Store: f.fs, after: 2}, f.std, nil, "", "--s3-express-buckets", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = bundle.NewReader(top).ListSettled(f.ctx, st, func(bundle.SettledObject) error { n++; return nil },
		func(string, objstore.ObjectInfo, error) error { n++; return nil })
	if !errors.Is(err, errListCut) || n != 2 {
		t.Errorf("a listing cut after 2 keys: %v after %d, want errListCut after 2", err, n)
	}
}

// TestListSlots lists a star's chain in every bucket of its class's set,
// on both backends: each slot with its position and the bucket of the
// copy; a key under the chain that is not a slot key apart; nothing of
// another star.
func TestListSlots(t *testing.T) {
	for _, op := range teststore.All(teststore.Options{Zones: 2, Prefix: "slots"}) {
		t.Run(op.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			b := op.Open(t)
			rd := bundle.NewReader(teststore.Topology(t, b.Store, b.Std, b.Express, nil))
			put := func(bucket, key string) {
				t.Helper()
				if err := b.Store.PutIfAbsent(ctx, bucket, key, []byte(key)); err != nil {
					t.Fatal(err)
				}
			}
			want := map[string]int{} // bucket/key -> copies seen
			for _, x := range b.Express {
				for _, seq := range []uint64{0, 7} {
					put(x, bundlefmt.SlotKey("s1", 2, seq))
					want[x+"/"+bundlefmt.SlotKey("s1", 2, seq)] = 0
				}
				put(x, bundlefmt.SlotKey("s10", 2, 0)) // another star, whose name s1 begins
			}
			put(b.Std, bundlefmt.SlotKey("s1", 2, 3)) // the standard bucket: not the express class's
			junk := "stars/s1/chain/00000000000000000002/x"
			put(b.Express[1], junk)
			var unparsed []string
			skipped, err := rd.ListSlots(ctx, catalog.ClassExpress, "s1", func(o bundle.SlotObject) error {
				k := o.Bucket + "/" + o.Key
				if _, ok := want[k]; !ok || o.Key != bundlefmt.SlotKey("s1", uint64(o.Epoch), uint64(o.Seq)) || o.Size != int64(len(o.Key)) {
					t.Errorf("listed %+v", o)
				}
				want[k]++
				return nil
			}, func(bucket string, o objstore.ObjectInfo, err error) error {
				unparsed = append(unparsed, bucket+"/"+o.Key)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			for k, n := range want {
				if n != 1 {
					t.Errorf("%s listed %d times", k, n)
				}
			}
			if !slices.Equal(unparsed, []string{b.Express[1] + "/" + junk}) || len(skipped) != 0 {
				t.Errorf("unparsed %v, skipped %v", unparsed, skipped)
			}

			// A zone whose listing fails for the zone is held off and
			// skipped, and so is it on the next listing, which sends it
			// nothing: the other zone's slots are listed both times.
			health := objstore.NewHealth(time.Minute, time.Hour)
			zs := &zoneFailing{Store: b.Store, bucket: b.Express[0]}
			rd = bundle.NewReader(teststore.Topology(t, zs, b.Std, b.Express, health))
			for round := range 2 {
				n := 0
				skipped, err := rd.ListSlots(ctx, catalog.ClassExpress, "s1", func(o bundle.SlotObject) error {
					if o.Bucket != b.Express[1] {
						t.Errorf("round %d: listed %+v from the failing zone", round, o)
					}
					n++
					return nil
				}, func(string, objstore.ObjectInfo, error) error { return nil })
				if err != nil || !slices.Equal(skipped, []string{b.Express[0]}) || n != 2 {
					t.Errorf("round %d: skipped %v, %d slots listed, %v; want %s skipped, 2 slots", round, skipped, n, err, b.Express[0])
				}
			}
			if zs.asked.Load() != 1 {
				t.Errorf("the failing zone was asked %d times, want once (then held off)", zs.asked.Load())
			}
		})
	}
}

// TestUnnamedPages: listings that feed one pager at once cost one lookup
// per catalog.NamedKeysPage keys in all, and every key the lookup does
// not name is handed on once.
func TestUnnamedPages(t *testing.T) {
	ctx := context.Background()
	var lookups, looked atomic.Int64
	var mu sync.Mutex
	got := map[string]int{}
	u := bundle.NewUnnamed(func(_ context.Context, keys []catalog.ListedKey) ([]bool, error) {
		lookups.Add(1)
		looked.Add(int64(len(keys)))
		named := make([]bool, len(keys))
		for i, k := range keys {
			named[i] = k.Coords.FirstRecord%3 != 0 // every third key is a stray
		}
		return named, nil
	}, func(o bundle.SettledObject) error {
		mu.Lock()
		defer mu.Unlock()
		got[o.Key]++
		return nil
	})
	const streams, perStream = 5, 500
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perStream {
				o := bundle.SettledObject{ObjectInfo: objstore.ObjectInfo{Key: fmt.Sprintf("s%d/%d", s, i)}, Coords: catalog.KeyCoords{FirstRecord: int64(i)}}
				if err := u.Add(ctx, o); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	if err := u.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	want := (streams*perStream + catalog.NamedKeysPage - 1) / catalog.NamedKeysPage
	if lookups.Load() != int64(want) || looked.Load() != streams*perStream {
		t.Errorf("%d lookups of %d keys, want %d of %d", lookups.Load(), looked.Load(), want, streams*perStream)
	}
	strays := 0
	for i := range perStream {
		if i%3 == 0 {
			strays++
		}
	}
	if len(got) != streams*strays {
		t.Errorf("%d keys handed on, want %d", len(got), streams*strays)
	}
	for k, n := range got {
		if n != 1 {
			t.Errorf("%s handed on %d times", k, n)
		}
	}

	// The lookup's error is returned, wrapped.
	boom := errors.New("boom")
	u = bundle.NewUnnamed(func(context.Context, []catalog.ListedKey) ([]bool, error) { return nil, boom }, func(bundle.SettledObject) error { return nil })
	if err := u.Add(ctx, bundle.SettledObject{}); err != nil {
		t.Fatal(err)
	}
	if err := u.Flush(ctx); !errors.Is(err, boom) {
		t.Errorf("flush: %v, want boom", err)
	}
}
