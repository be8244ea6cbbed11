package wire

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/s3store"
)

func TestStorePicksTheBackend(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.FSRoot = t.TempDir()
	st, err := Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*filestore.Store); !ok {
		t.Fatalf("fs-root gave %T", st)
	}
	if err := CreateLocalBuckets(cfg, st); err != nil {
		t.Fatal(err)
	}
	if err := st.PutIfAbsent(context.Background(), cfg.Bucket, "k", []byte("x")); err != nil {
		t.Fatalf("put into the created standard bucket: %v", err)
	}
	cfg = config.Defaults()
	cfg.S3Endpoint = "http://127.0.0.1:1"
	cfg.S3PathStyle = true
	st, err = Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := st.(*s3store.Store); !ok {
		t.Fatalf("s3-endpoint gave %T", st)
	}
	if err := CreateLocalBuckets(cfg, st); err != nil {
		t.Fatalf("S3 buckets are the operator's: %v", err)
	}
}

func TestTopologyBuckets(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.Bucket = "std"
	top, err := Topology(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := top.Buckets(catalog.ClassStandard); err != nil || !reflect.DeepEqual(got, []string{"std"}) {
		t.Fatalf("standard: %v %v", got, err)
	}
	if got, err := top.Buckets(catalog.ClassExpress); got != nil || err == nil {
		t.Fatalf("express without a set: %v %v", got, err)
	}
	if _, err := top.Class(catalog.ClassExpress); err == nil || !strings.Contains(err.Error(), "--s3-express-buckets") {
		t.Fatalf("express without a set: %v, want an error naming the flag", err)
	}
	if _, err := top.Class("glacier"); err == nil || !strings.Contains(err.Error(), `unknown class "glacier"`) {
		t.Fatalf("an unknown class: %v", err)
	}
	cfg.S3ExpressBuckets = []objstore.ZoneBucket{{Zone: "a", Bucket: "xa"}, {Zone: "b", Bucket: "xb"}, {Zone: "c", Bucket: "xc"}}
	cfg.Location = "b"
	top, err = Topology(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := top.Buckets(catalog.ClassExpress); !reflect.DeepEqual(got, []string{"xb", "xa", "xc"}) {
		t.Fatalf("express: %v (want the location's bucket first)", got)
	}
	set, err := top.Class(catalog.ClassExpress)
	if err != nil || set.Buckets()[0] != "xb" {
		t.Fatalf("express set: %v %v", set, err)
	}
	if got := top.All(); !reflect.DeepEqual(got, []string{"std", "xb", "xa", "xc"}) || !reflect.DeepEqual(must(Buckets(cfg)), got) {
		t.Fatalf("every bucket: %v", got)
	}
	twice := cfg
	twice.S3ExpressBuckets = append(append([]objstore.ZoneBucket(nil), cfg.S3ExpressBuckets...), objstore.ZoneBucket{Zone: "d", Bucket: "xa"})
	if _, err := Topology(twice, nil, nil); !errors.Is(err, config.ErrConfig) {
		t.Fatalf("a bucket named twice: %v, want a configuration error", err)
	}
	twice.S3ExpressBuckets = append(append([]objstore.ZoneBucket(nil), cfg.S3ExpressBuckets...), objstore.ZoneBucket{Zone: "d", Bucket: "std"})
	if _, err := Topology(twice, nil, nil); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "both class") {
		t.Fatalf("the standard bucket in the express set: %v, want a configuration error", err)
	}
}

// TestStoreTakesTheConfiguredValues: the S3 backend gets the
// configuration's values, not defaults of its own: a zero copy concurrency
// is refused (it used to become 8 while the key's default was 4).
func TestStoreTakesTheConfiguredValues(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.S3Endpoint, cfg.S3PathStyle = "http://127.0.0.1:1", true
	if cfg.CopyConcurrency != objstore.DefaultCopyConcurrency || cfg.S3MaxAttempts != objstore.DefaultMaxAttempts ||
		cfg.S3AttemptTimeouts != objstore.DefaultAttemptTimeouts() || cfg.S3Region != objstore.DefaultRegion {
		t.Fatalf("the configuration's S3 defaults are not the backend's: %+v", cfg)
	}
	cfg.CopyConcurrency = 0
	if _, err := Store(context.Background(), cfg); err == nil {
		t.Fatal("a zero copy concurrency was accepted")
	}
}

// TestStoreTakesTheTransportSettings: the CA file and the attempt
// deadlines reach the S3 backend; a CA file that cannot be used is a
// configuration error (exit 2) naming s3-ca-file.
func TestStoreTakesTheTransportSettings(t *testing.T) {
	t.Parallel()
	cfg := config.Defaults()
	cfg.S3Endpoint, cfg.S3PathStyle = "https://127.0.0.1:1", true
	cfg.S3AttemptTimeouts.Copy = 42 * time.Minute
	cfg.S3CAFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(cfg.S3CAFile, testenv.NewCA(t).PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := Store(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	got := st.(*s3store.Store).Config()
	if got.CAFile != cfg.S3CAFile || got.AttemptTimeouts != cfg.S3AttemptTimeouts {
		t.Fatalf("the store's CA file %q and deadlines %+v, want %q and %+v", got.CAFile, got.AttemptTimeouts, cfg.S3CAFile, cfg.S3AttemptTimeouts)
	}
	for name, path := range map[string]string{"missing": cfg.S3CAFile + ".missing", "not PEM": filepath.Join(t.TempDir(), "x")} {
		if name == "not PEM" {
			if err := os.WriteFile(path, []byte("not a certificate"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		bad := cfg
		bad.S3CAFile = path
		_, err := Store(context.Background(), bad)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != "s3-ca-file" || !errors.Is(err, config.ErrConfig) {
			t.Errorf("%s CA file: %v, want a configuration error naming s3-ca-file", name, err)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
