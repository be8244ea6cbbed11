package trim_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/nova/auditor/objstore"
)

// memStore is an in-memory objstore.Store for the tests that the real
// backends cannot serve yet: it concatenates an assembly's pieces and keeps
// create-once and absence-is-success semantics.
type memStore struct {
	mu      sync.Mutex
	objects map[string][]byte // bucket + "\x00" + key
	uploads int
}

var _ objstore.Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{objects: map[string][]byte{}} }

func mk(bucket, key string) string { return bucket + "\x00" + key }

func (m *memStore) get(bucket, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[mk(bucket, key)]
	if !ok {
		return nil, fmt.Errorf("get %s/%s: %w", bucket, key, objstore.ErrNotFound)
	}
	return b, nil
}

func (m *memStore) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	b, err := m.get(bucket, key)
	if err != nil {
		return nil, 0, err
	}
	if off >= int64(len(b)) {
		return nil, int64(len(b)), objstore.ErrInvalidRange
	}
	return append([]byte(nil), b[off:min(off+n, int64(len(b)))]...), int64(len(b)), nil
}

func (m *memStore) GetSuffix(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
	b, err := m.get(bucket, key)
	if err != nil {
		return nil, 0, err
	}
	return append([]byte(nil), b[max(0, int64(len(b))-n):]...), int64(len(b)), nil
}

func (m *memStore) Head(ctx context.Context, bucket, key string) (objstore.Attrs, error) {
	b, err := m.get(bucket, key)
	if err != nil {
		return objstore.Attrs{}, err
	}
	return objstore.Attrs{Size: int64(len(b)), ETag: fmt.Sprintf("%08x", objstore.CRC32C(b))}, nil
}

func (m *memStore) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.objects[mk(bucket, key)]; ok {
		return fmt.Errorf("put %s/%s: %w", bucket, key, objstore.ErrExists)
	}
	m.objects[mk(bucket, key)] = append([]byte(nil), data...)
	return nil
}

func (m *memStore) Delete(ctx context.Context, bucket string, keys []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range keys {
		delete(m.objects, mk(bucket, k))
	}
	return nil
}

func (m *memStore) List(ctx context.Context, bucket, prefix string, fn func(string, int64) error) error {
	m.mu.Lock()
	type kv struct {
		k string
		n int64
	}
	var all []kv
	for k, v := range m.objects {
		b, key, _ := strings.Cut(k, "\x00")
		if b == bucket && strings.HasPrefix(key, prefix) {
			all = append(all, kv{key, int64(len(v))})
		}
	}
	m.mu.Unlock()
	for _, e := range all {
		if err := fn(e.k, e.n); err != nil {
			return err
		}
	}
	return nil
}

func (m *memStore) Assemble(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	var out []byte
	res := objstore.AssembleResult{}
	for _, p := range req.Pieces {
		if p.SrcKey == "" {
			out = append(out, p.Data...)
			res.BytesUploaded += int64(len(p.Data))
			continue
		}
		b, _, err := m.GetRange(ctx, p.SrcBucket, p.SrcKey, p.Off, p.Len)
		if err != nil {
			return res, fmt.Errorf("assemble %s: piece %s: %w", req.Key, p.SrcKey, err)
		}
		out = append(out, b...)
		res.BytesCopied += int64(len(b))
	}
	if req.HasExpectedCRC32C && objstore.CRC32C(out) != req.ExpectedCRC32C {
		return res, fmt.Errorf("assemble %s: %w", req.Key, objstore.ErrChecksum)
	}
	res.Size, res.Requests = int64(len(out)), 1
	if err := req.Hooks.CallCompleted(); err != nil {
		return res, err
	}
	return res, m.PutIfAbsent(ctx, req.Bucket, req.Key, out)
}

func (m *memStore) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error { return nil }

func (m *memStore) ListParts(ctx context.Context, bucket, key, uploadID string) ([]objstore.PartInfo, error) {
	return nil, objstore.ErrNoUpload
}

func (m *memStore) ListAssemblies(ctx context.Context, bucket, key string) ([]string, error) {
	return nil, nil
}

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
	err := s.List(ctx, bucket, prefix, func(k string, _ int64) error {
		out = append(out, k)
		return nil
	})
	sort.Strings(out)
	return out, err
}
