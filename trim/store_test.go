package trim_test

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"

	"github.com/nova/auditor/objstore"
)

// faultStore wraps a store with the faults and the audit the reap tests
// need: buckets that are down (every Delete fails whole, as a zone outage),
// keys that fail one by one, and a check run on every key before it is
// deleted.
type faultStore struct {
	objstore.Store
	mu       sync.Mutex
	down     map[string]bool
	failKeys map[string]bool
	// check, when set, sees every key a Delete is asked to remove, first.
	check    func(bucket, key string)
	deletes  int // Delete calls that reached the inner store
	deleted  int // keys in them
	aborts   []string
	requests map[string]int // Delete calls by bucket, failed or not
	// listFailPrefix, when set, makes a List of a prefix starting with it
	// fail after handing on listFailAfter keys (errListFailed).
	listFailPrefix string
	listFailAfter  int
}

var errListFailed = errors.New("injected: the listing failed")

func (f *faultStore) failLists(prefix string, after int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.listFailPrefix, f.listFailAfter = prefix, after
}

func (f *faultStore) List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error {
	f.mu.Lock()
	fail, after := f.listFailPrefix != "" && strings.HasPrefix(prefix, f.listFailPrefix), f.listFailAfter
	f.mu.Unlock()
	n := 0
	return f.Store.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
		if fail && n == after {
			return errListFailed
		}
		n++
		return fn(o)
	})
}

func newFaultStore(inner objstore.Store) *faultStore {
	return &faultStore{Store: inner, down: map[string]bool{}, failKeys: map[string]bool{}, requests: map[string]int{}}
}

func (f *faultStore) setDown(bucket string, down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down[bucket] = down
}

func (f *faultStore) Delete(ctx context.Context, bucket string, keys []string) error {
	f.mu.Lock()
	f.requests[bucket]++
	down, check := f.down[bucket], f.check
	var failed map[string]error
	var ok []string
	for _, k := range keys {
		if f.failKeys[k] {
			if failed == nil {
				failed = map[string]error{}
			}
			failed[k] = &objstore.TransientError{Op: "delete", Err: errors.New("injected")}
			continue
		}
		ok = append(ok, k)
	}
	f.mu.Unlock()
	if down {
		return &objstore.TransientError{Op: "DeleteObjects " + bucket, Err: errors.New("injected: zone down")}
	}
	if check != nil {
		for _, k := range ok {
			check(bucket, k)
		}
	}
	if err := f.Store.Delete(ctx, bucket, ok); err != nil {
		return err
	}
	f.mu.Lock()
	f.deletes++
	f.deleted += len(ok)
	f.mu.Unlock()
	if failed != nil {
		return &objstore.DeleteError{Bucket: bucket, Failed: failed}
	}
	return nil
}

func (f *faultStore) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	f.mu.Lock()
	f.aborts = append(f.aborts, key+"#"+uploadID)
	f.mu.Unlock()
	return f.Store.AbortAssembly(ctx, bucket, key, uploadID)
}

// exists reports whether bucket holds key.
func exists(ctx context.Context, s objstore.Store, bucket, key string) (bool, error) {
	_, err := s.Head(ctx, bucket, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// keysUnder lists a bucket's keys under prefix, sorted.
func keysUnder(ctx context.Context, s objstore.Store, bucket, prefix string) ([]string, error) {
	var out []string
	err := s.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
		out = append(out, o.Key)
		return nil
	})
	sort.Strings(out)
	return out, err
}
