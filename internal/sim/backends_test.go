package sim

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/s3store"
)

// backend is a real object store under test.
type backend struct {
	name    string
	storage func(t testing.TB) Storage
}

// backends are the file backend and the real S3 server (versitygw), each
// with a standard bucket and an express set of two buckets per test.
func backends() []backend {
	return []backend{
		{"file", func(t testing.TB) Storage {
			fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range []string{"std", "za", "zb"} {
				if err := fs.CreateBucket(b); err != nil {
					t.Fatal(err)
				}
			}
			return Storage{Store: fs, Standard: "std", Express: []string{"za", "zb"}}
		}},
		{"s3", func(t testing.TB) Storage {
			env := testenv.S3(t)
			ctx := context.Background()
			st, err := s3store.New(ctx, objstore.S3Config{Endpoint: env.Endpoint, Region: env.Region, PathStyle: true,
				AccessKey: env.AccessKey, SecretKey: env.SecretKey})
			if err != nil {
				t.Fatal(err)
			}
			names := []string{testenv.BucketName("nsim"), testenv.BucketName("nsim-za"), testenv.BucketName("nsim-zb")}
			for _, b := range names {
				// Test setup only: buckets are made through the SDK client
				// the backend exposes for it.
				if _, err := st.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: &b}); err != nil {
					t.Fatalf("create bucket %s: %v", b, err)
				}
			}
			return Storage{Store: st, Standard: names[0], Express: names[1:]}
		}},
	}
}
