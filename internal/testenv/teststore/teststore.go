// Package teststore is the one fixture of the object stores the
// integration tests run on: the file backend and the real S3 server
// (versitygw), each with fresh buckets per test, a standard bucket and an
// express set of one bucket per zone. The S3 backend skips (or fails, with
// services required) when the server is not configured (testenv.S3).
//
// It is a package of its own, not part of testenv, because the backends'
// own tests use testenv.
package teststore

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/s3store"
)

// Backend is an object store with the buckets made for one test.
type Backend struct {
	Name    string // "file" or "s3"
	Store   objstore.Store
	Std     string   // the standard bucket: standard slots, every settled object
	Express []string // the express set, one bucket per zone of Zones
	Zones   []string // the express zones in read order: za, zb, ...
	Root    string   // file backend: the store's root directory
	S3      testenv.S3Env
}

// Buckets are the standard bucket, then the express set.
func (b Backend) Buckets() []string { return append([]string{b.Std}, b.Express...) }

// Flags are the storage flags that point the auditor or novasim at the
// backend: the store, the standard bucket and the express set.
func (b Backend) Flags() []string {
	var f []string
	if b.Name == "file" {
		f = []string{"--fs-root", b.Root}
	} else {
		f = []string{"--s3-endpoint", b.S3.Endpoint, "--s3-path-style"}
	}
	f = append(f, "--bucket", b.Std)
	if len(b.Express) > 0 {
		zb := make([]string, len(b.Express))
		for i, x := range b.Express {
			zb[i] = b.Zones[i] + "=" + x
		}
		f = append(f, "--s3-express-buckets", strings.Join(zb, ","))
	}
	return f
}

// Env is the environment a process needs for the backend (S3 credentials).
func (b Backend) Env() []string {
	if b.Name == "file" {
		return nil
	}
	return []string{"AWS_ACCESS_KEY_ID=" + b.S3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + b.S3.SecretKey, "AWS_REGION=" + b.S3.Region}
}

// Options shape a backend. The zero value is a standard bucket alone.
type Options struct {
	// Zones is the number of express buckets (zones za, zb, ...).
	Zones int
	// Prefix starts the S3 buckets' names (testenv.BucketName; "std" when
	// empty). The file backend's buckets are std and the zones' names.
	Prefix string
	// Root is the file backend's root ("": a fresh temporary directory).
	Root string
	// Transport, when set, carries the S3 client's requests (a
	// fault-injecting or counting RoundTripper).
	Transport http.RoundTripper
	// Tune, when set, changes the S3 configuration before the store is
	// built (S3Config's).
	Tune func(*objstore.S3Config)
}

func (o Options) prefix() string {
	if o.Prefix == "" {
		return "std"
	}
	return o.Prefix
}

func zones(n int) []string {
	z := make([]string, n)
	for i := range z {
		z[i] = "z" + string(rune('a'+i))
	}
	return z
}

// File is the file backend with its buckets.
func File(tb testing.TB, o Options) Backend {
	tb.Helper()
	root := o.Root
	if root == "" {
		root = filepath.Join(tb.TempDir(), "store")
	}
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		tb.Fatal(err)
	}
	b := Backend{Name: "file", Store: fs, Std: "std", Zones: zones(o.Zones), Root: root}
	for _, z := range b.Zones { // a bucket is a directory; names valid as the auditor's flags require (3+ characters)
		b.Express = append(b.Express, b.Std+"-"+z)
	}
	for _, name := range b.Buckets() {
		if err := fs.CreateBucket(name); err != nil {
			tb.Fatal(err)
		}
	}
	return b
}

// S3Config is the configuration of a store on the test server: the
// defaults with the server's endpoint and credentials, and per-part
// checksums with read-back verification. versitygw 1.8.0 reports the whole
// source's CRC for a ranged part copy, so full-object checksums cannot be
// checked there; this is what the auditor's probe picks on that server.
func S3Config(e testenv.S3Env) objstore.S3Config {
	c := objstore.DefaultS3Config()
	c.Endpoint, c.Region, c.PathStyle = e.Endpoint, e.Region, true
	c.AccessKey, c.SecretKey = e.AccessKey, e.SecretKey
	c.Checksum, c.VerifyReadback = objstore.ChecksumParts, true
	return c
}

// S3Store is a store on the test server with no bucket made (the caller's
// own setup), configured by S3Config and o's Transport and Tune.
func S3Store(tb testing.TB, o Options) (*s3store.Store, testenv.S3Env) {
	tb.Helper()
	e := testenv.S3(tb)
	c := S3Config(e)
	if o.Transport != nil {
		c.HTTPClient = &http.Client{Transport: o.Transport}
	}
	if o.Tune != nil {
		o.Tune(&c)
	}
	st, err := s3store.New(context.Background(), c)
	if err != nil {
		tb.Fatal(err)
	}
	return st, e
}

// S3 is the test server with fresh buckets: the standard bucket named
// after o.Prefix, the express set after it plus the zone.
func S3(tb testing.TB, o Options) Backend {
	tb.Helper()
	st, e := S3Store(tb, o)
	b := Backend{Name: "s3", Store: st, Std: testenv.BucketName(o.prefix()), Zones: zones(o.Zones), S3: e}
	for _, z := range b.Zones {
		b.Express = append(b.Express, testenv.BucketName(o.prefix()+"-"+z))
	}
	for _, name := range b.Buckets() {
		CreateBucket(tb, st, name)
	}
	return b
}

// CreateBucket makes a bucket on the test server.
func CreateBucket(tb testing.TB, st *s3store.Store, name string) {
	tb.Helper()
	if err := st.CreateBucket(context.Background(), name); err != nil {
		tb.Fatalf("create bucket %s: %v", name, err)
	}
}

// Opener makes a fresh backend for one test.
type Opener struct {
	Name string
	Open func(testing.TB) Backend
}

// All are the backends the integration tests run on, file then S3.
func All(o Options) []Opener {
	return []Opener{
		{"file", func(tb testing.TB) Backend { return File(tb, o) }},
		{"s3", func(tb testing.TB) Backend { return S3(tb, o) }},
	}
}

// Topology is the storage topology over store that the auditor's wiring
// builds for the buckets given: std holds settled objects and standard
// slots, express (zones zone0, zone1, ... read in the order given, the
// first local) the express slots; no express class when express is empty.
// health nil: a fresh one.
func Topology(tb testing.TB, store objstore.Store, std string, express []string, health *objstore.Health) *objstore.Topology {
	tb.Helper()
	zones := make([]string, len(express))
	for i := range express {
		zones[i] = fmt.Sprintf("zone%d", i)
	}
	return topology(tb, store, std, express, zones, health)
}

func topology(tb testing.TB, store objstore.Store, std string, express, zones []string, health *objstore.Health) *objstore.Topology {
	tb.Helper()
	var (
		zbs   []objstore.ZoneBucket
		local string
	)
	if len(express) > 0 {
		zbs = make([]objstore.ZoneBucket, len(express))
		for i, b := range express {
			zbs[i] = objstore.ZoneBucket{Zone: zones[i], Bucket: b}
		}
		local = zones[0]
	}
	t, err := bundle.Topology(store, std, zbs, local, "no express buckets in this test", health)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}
