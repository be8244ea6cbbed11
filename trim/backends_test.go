package trim_test

import (
	"context"
	"os"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/s3store"
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

// backends are the stores the integration tests run on: memory, the file
// backend, and the real S3 server (versitygw) when the environment has it
// (required with NOVA_TEST_REQUIRE_SERVICES=1).
func backends() []backend {
	return []backend{
		{"mem", func(testing.TB) namedStore {
			return namedStore{name: "mem", store: newMemStore(), buckets: []string{"std", "z1", "z2", "z3"}}
		}},
		{"file", fileStore},
		{"s3", s3Store},
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

func s3Store(tb testing.TB) namedStore {
	tb.Helper()
	env := testenv.S3(tb)
	s, err := s3store.New(context.Background(), objstore.S3Config{Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
		AccessKey: env.AccessKey, SecretKey: env.SecretKey, Checksum: objstore.ChecksumParts, VerifyReadback: true})
	if err != nil {
		tb.Fatal(err)
	}
	ns := namedStore{name: "s3", store: s}
	for _, p := range []string{"trim-std", "trim-z1", "trim-z2", "trim-z3"} {
		b := testenv.BucketName(p)
		if _, err := s.Client().CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: &b}); err != nil {
			tb.Fatalf("create bucket %s: %v", b, err)
		}
		ns.buckets = append(ns.buckets, b)
	}
	return ns
}

// realStores returns the real backends available to a benchmark: the file
// backend, and S3 when the environment has it.
func realStores(tb testing.TB) []namedStore {
	out := []namedStore{fileStore(tb)}
	if os.Getenv(testenv.EnvS3Endpoint) != "" {
		out = append(out, s3Store(tb))
	}
	return out
}
