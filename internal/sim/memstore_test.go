package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nova/auditor/objstore"
)

// memStore is an in-memory Store with fault hooks, for tests that need
// failures the real backends do not produce on demand.
type memStore struct {
	mu      sync.Mutex
	objects map[string][]byte // bucket + "\x00" + key
	// beforePut, when set, may fail a PUT before it lands (ambiguous or not).
	beforePut func(bucket, key string) error
	// afterPut, when set, may fail a PUT after it landed (a lost reply).
	afterPut func(bucket, key string) error
	puts     int
}

func newMemStore() *memStore { return &memStore{objects: map[string][]byte{}} }

func (m *memStore) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.beforePut != nil {
		if err := m.beforePut(bucket, key); err != nil {
			return err
		}
	}
	m.mu.Lock()
	k := bucket + "\x00" + key
	if _, ok := m.objects[k]; ok {
		m.mu.Unlock()
		return fmt.Errorf("put %s: %w", key, objstore.ErrExists)
	}
	m.objects[k] = append([]byte(nil), data...)
	m.puts++
	m.mu.Unlock()
	if m.afterPut != nil {
		return m.afterPut(bucket, key)
	}
	return nil
}

func (m *memStore) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.objects[bucket+"\x00"+key]
	if !ok {
		return nil, 0, fmt.Errorf("get %s: %w", key, objstore.ErrNotFound)
	}
	if off >= int64(len(b)) {
		return nil, int64(len(b)), objstore.ErrInvalidRange
	}
	end := min(off+n, int64(len(b)))
	return append([]byte(nil), b[off:end]...), int64(len(b)), nil
}

func (m *memStore) List(ctx context.Context, bucket, prefix string, fn func(string, int64) error) error {
	m.mu.Lock()
	var keys []string
	var sizes []int64
	for k, v := range m.objects {
		b, key, _ := strings.Cut(k, "\x00")
		if b == bucket && strings.HasPrefix(key, prefix) {
			keys = append(keys, key)
			sizes = append(sizes, int64(len(v)))
		}
	}
	m.mu.Unlock()
	for i, k := range keys {
		if err := fn(k, sizes[i]); err != nil {
			return err
		}
	}
	return nil
}

// corrupt flips one byte of an object.
func (m *memStore) corrupt(bucket, key string, off int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[bucket+"\x00"+key][off] ^= 0x40
}

// remove deletes an object.
func (m *memStore) remove(bucket, key string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, bucket+"\x00"+key)
}

// put stores an object, replacing any.
func (m *memStore) put(bucket, key string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[bucket+"\x00"+key] = data
}
