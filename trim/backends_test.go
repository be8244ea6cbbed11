package trim_test

import (
	"os"
	"testing"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
)

// namedStore is a backend the tests run on, with the buckets made for
// them: the standard bucket first, then an express set of three.
type namedStore struct {
	name    string
	store   objstore.Store
	buckets []string
}

// options shape the trim tests' backends: an express set of three zones.
func options() teststore.Options { return teststore.Options{Zones: 3, Prefix: "trim"} }

func named(b teststore.Backend) namedStore {
	return namedStore{name: b.Name, store: b.Store, buckets: b.Buckets()}
}

// forEachBackend runs fn as a parallel subtest per backend: the file
// backend, and the real S3 server (versitygw) when the environment has it
// (required with NOVA_TEST_REQUIRE_SERVICES=1).
func forEachBackend(t *testing.T, fn func(t *testing.T, ns namedStore)) {
	for _, b := range teststore.All(options()) {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			fn(t, named(b.Open(t)))
		})
	}
}

func fileStore(tb testing.TB) namedStore { return named(teststore.File(tb, options())) }

func s3Store(tb testing.TB) namedStore { return named(teststore.S3(tb, options())) }

// realStores returns the real backends available to a benchmark: the file
// backend, and S3 when the environment has it.
func realStores(tb testing.TB) []namedStore {
	out := []namedStore{fileStore(tb)}
	if os.Getenv(testenv.EnvS3Endpoint) != "" {
		out = append(out, s3Store(tb))
	}
	return out
}
