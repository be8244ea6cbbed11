package trim_test

import (
	"testing"

	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
)

// namedStore is a backend the tests run against, with the buckets made for
// them: the standard bucket first, then an express set of three.
type namedStore struct {
	name    string
	store   objstore.Store
	buckets []string
}

// backend makes a fresh namedStore (new buckets) for one test.
type backend struct {
	name string
	make func(testing.TB) namedStore
}

// backends are the stores the integration tests run on: memory and the file
// backend.
func backends() []backend {
	return []backend{
		{"mem", func(testing.TB) namedStore {
			return namedStore{name: "mem", store: newMemStore(), buckets: []string{"std", "z1", "z2", "z3"}}
		}},
		{"file", fileStore},
	}
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, ns namedStore)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b.make(t))
		})
	}
}

func fileStore(tb testing.TB) namedStore {
	tb.Helper()
	s, err := filestore.New(objstore.FileConfig{Root: tb.TempDir()})
	if err != nil {
		tb.Fatal(err)
	}
	ns := namedStore{name: "file", store: s, buckets: []string{"std", "z1", "z2", "z3"}}
	for _, b := range ns.buckets {
		if err := s.CreateBucket(b); err != nil {
			tb.Fatal(err)
		}
	}
	return ns
}

// realStores returns the real backends available to a benchmark.
func realStores(tb testing.TB) []namedStore {
	return []namedStore{fileStore(tb)}
}
