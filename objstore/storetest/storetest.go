// Package storetest is the contract suite every objstore.Store backend
// passes (the file backend and the S3 backend against a real server alike,
// and the instrumenting wrapper over them), including the storage topology
// over the backend (topology.go).
package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/objstore"
)

// Harness is a backend under test.
type Harness struct {
	Store objstore.Store
	// NewBucket creates an empty bucket for one test (through the store's
	// own API: CreateBucket on S3, a directory for the file backend).
	NewBucket func(t *testing.T) string
}

const mib = 1 << 20

// listClockSlack is how far a listed object's LastModified may lie from the
// test's clock around its PUT: the server's second granularity and a
// little skew between the server's clock and ours.
const listClockSlack = 30 * time.Second

// Run runs the whole suite.
func Run(t *testing.T, h Harness) {
	t.Run("RoundTrip", func(t *testing.T) { t.Parallel(); testRoundTrip(t, h) })
	t.Run("InvalidKeys", func(t *testing.T) { t.Parallel(); testInvalidKeys(t, h) })
	t.Run("CreateOnce", func(t *testing.T) { t.Parallel(); testCreateOnce(t, h) })
	t.Run("Delete", func(t *testing.T) { t.Parallel(); testDelete(t, h) })
	t.Run("List", func(t *testing.T) { t.Parallel(); testList(t, h) })
	t.Run("AssembleMixes", func(t *testing.T) { t.Parallel(); testAssembleMixes(t, h) })
	t.Run("AssembleOntoExisting", func(t *testing.T) { t.Parallel(); testAssembleOntoExisting(t, h) })
	t.Run("AssembleRace", func(t *testing.T) { t.Parallel(); testAssembleRace(t, h) })
	t.Run("AssembleResume", func(t *testing.T) { t.Parallel(); testAssembleResume(t, h) })
	t.Run("AssembleResumeOtherPlan", func(t *testing.T) { t.Parallel(); testAssembleResumeOtherPlan(t, h) })
	t.Run("ListAssemblies", func(t *testing.T) { t.Parallel(); testListAssemblies(t, h) })
	t.Run("AssembleSourceChanged", func(t *testing.T) { t.Parallel(); testSourceChanged(t, h) })
	t.Run("AssembleChecksum", func(t *testing.T) { t.Parallel(); testAssembleChecksum(t, h) })
	t.Run("Topology", func(t *testing.T) { t.Parallel(); testTopology(t, h) })
	t.Run("Observer", func(t *testing.T) { t.Parallel(); testObserver(t, h) })
	t.Run("AssembleSource", func(t *testing.T) { t.Parallel(); testAssembleSource(t, h) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// Bytes returns n pseudo-random bytes from seed.
func Bytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(r.Uint32())
	}
	return b
}

// ReadAll reads a whole object back.
func ReadAll(t *testing.T, s objstore.Store, bucket, key string) []byte {
	t.Helper()
	a, err := s.Head(ctxT(t), bucket, key)
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	if a.Size == 0 {
		return []byte{}
	}
	data, size, err := s.GetRange(ctxT(t), bucket, key, 0, a.Size)
	if err != nil || size != a.Size {
		t.Fatalf("get %s: %v (size %d, head %d)", key, err, size, a.Size)
	}
	return data
}

func mustPut(t *testing.T, s objstore.Store, bucket, key string, data []byte) {
	t.Helper()
	if err := s.PutIfAbsent(ctxT(t), bucket, key, data); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// MemStager is an in-memory objstore.Stager for tests.
type MemStager struct {
	mu     sync.Mutex
	Parts  map[int][]byte
	Staged int // Stage calls
	Loaded int // successful Load calls
}

// NewMemStager returns an empty stager.
func NewMemStager() *MemStager { return &MemStager{Parts: map[int][]byte{}} }

// Stage implements objstore.Stager.
func (m *MemStager) Stage(part int, data []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Parts[part] = bytes.Clone(data)
	m.Staged++
	return nil
}

// Load implements objstore.Stager.
func (m *MemStager) Load(part int) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, ok := m.Parts[part]
	if !ok {
		return nil, fmt.Errorf("part %d not staged", part)
	}
	m.Loaded++
	return bytes.Clone(d), nil
}
