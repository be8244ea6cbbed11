package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
)

// faultStore is the file backend (bucket std, express buckets std-za,
// std-zb, std-zc: see express) with fault
// hooks and direct damage, for tests that need failures the real backends
// do not produce on demand. It replaced an in-memory copy of a store that
// the contract suite (objstore/storetest) would not pass.
type faultStore struct {
	objstore.Store
	// beforePut, when set, may fail a PUT before it lands (ambiguous or not).
	beforePut func(bucket, key string) error
	// afterPut, when set, may fail a PUT after it landed (a lost reply).
	afterPut func(bucket, key string) error
	t        testing.TB
	b        teststore.Backend
}

func newFaultStore(t testing.TB) *faultStore {
	b := teststore.File(t, teststore.Options{Zones: 3})
	return &faultStore{Store: b.Store, t: t, b: b}
}

// express is the first n express buckets in zone read order: the names
// come from the fixture, never from a literal here (a renamed fixture once
// left two tests writing to buckets that did not exist).
func (m *faultStore) express(n int) []string { return m.b.Express[:n] }

func (m *faultStore) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.beforePut != nil {
		if err := m.beforePut(bucket, key); err != nil {
			return err
		}
	}
	if err := m.Store.PutIfAbsent(ctx, bucket, key, data); err != nil {
		return err
	}
	if m.afterPut != nil {
		return m.afterPut(bucket, key)
	}
	return nil
}

// corrupt flips one byte of an object.
func (m *faultStore) corrupt(bucket, key string, off int) {
	m.t.Helper()
	b, _, err := m.Store.GetRange(context.Background(), bucket, key, 0, 1<<40)
	if err != nil {
		m.t.Fatalf("corrupt %s/%s: %v", bucket, key, err)
	}
	b[off] ^= 0x40
	m.put(bucket, key, b)
}

// remove deletes an object.
func (m *faultStore) remove(bucket, key string) {
	m.t.Helper()
	if err := m.Store.Delete(context.Background(), bucket, []string{key}); err != nil {
		m.t.Fatalf("remove %s/%s: %v", bucket, key, err)
	}
}

// put stores an object, replacing any.
func (m *faultStore) put(bucket, key string, data []byte) {
	m.t.Helper()
	m.remove(bucket, key)
	if err := m.Store.PutIfAbsent(context.Background(), bucket, key, data); err != nil {
		m.t.Fatal(fmt.Errorf("put %s/%s: %w", bucket, key, err))
	}
}
