// Package wire builds what the configuration describes, for the commands
// (cmd/auditor, cmd/novasim), so that one configuration means the same
// storage to both: the object store (the file backend when fs-root is set,
// else S3) and the storage topology of
// docs/architecture.md#buckets-and-zone-health (the standard bucket, the
// buckets that hold a chain of each class in read-preference order, and
// the zone health they share); and the metastore's connection, its errors
// classed as the commands exit on (DB). It holds no state; only
// CreateBuckets makes requests, through the store.
package wire

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/s3store"
)

// Store builds the configuration's object store: the file backend rooted at
// fs-root when it is set, else S3 at s3-endpoint (region, path style, key
// prefix, CA file, attempt deadlines from the configuration; credentials
// from the SDK's default chain). A CA file that cannot be used is a
// configuration error naming s3-ca-file.
// --verify readback selects per-part checksums with read-back verification
// of assemblies; checksum, full-object checksums checked by the server.
func Store(ctx context.Context, cfg config.Config) (objstore.Store, error) {
	return StoreWithPutChecksum(ctx, cfg, "")
}

// StoreWithPutChecksum is Store whose PutIfAbsent stores objects with alg
// on S3 ("" the default, CRC-32C; objstore.S3Config.PutChecksum). novasim
// chooses how its slots are stored with it; the file backend has no
// checksum algorithms and ignores it.
func StoreWithPutChecksum(ctx context.Context, cfg config.Config, alg objstore.ChecksumAlgorithm) (objstore.Store, error) {
	if cfg.FSRoot != "" {
		s, err := filestore.New(objstore.FileConfig{Root: cfg.FSRoot, KeyPrefix: cfg.KeyPrefix})
		if err != nil {
			return nil, &config.Error{Field: "fs-root", Msg: err.Error()}
		}
		return s, nil
	}
	// The keys the configuration has, over the backend's defaults for the
	// rest (connect timeout, backoff, part size).
	s3cfg := objstore.DefaultS3Config()
	s3cfg.Endpoint, s3cfg.Region, s3cfg.PathStyle, s3cfg.KeyPrefix = cfg.S3Endpoint, cfg.S3Region, cfg.S3PathStyle, cfg.KeyPrefix
	s3cfg.AttemptTimeouts, s3cfg.MaxAttempts = cfg.S3AttemptTimeouts, int(cfg.S3MaxAttempts)
	s3cfg.CAFile = cfg.S3CAFile
	s3cfg.CopyConcurrency = int(cfg.CopyConcurrency)
	s3cfg.Checksum = objstore.ChecksumFullObject
	if alg != "" {
		s3cfg.PutChecksum = alg
	}
	if cfg.Verify == "readback" {
		s3cfg.Checksum, s3cfg.VerifyReadback = objstore.ChecksumParts, true
	}
	s, err := s3store.New(ctx, s3cfg)
	if errors.Is(err, s3store.ErrCAFile) {
		return nil, &config.Error{Field: "s3-ca-file", Msg: err.Error()}
	}
	if err != nil {
		return nil, &config.Error{Field: "s3-endpoint", Msg: err.Error()}
	}
	return s, nil
}

// Topology builds the storage topology the steps share from the
// configuration: --bucket, --s3-express-buckets and --location given to
// bundle.Topology, whose policy objstore.StarTopology states. health is
// the zone health every set shares (nil: a fresh one).
func Topology(cfg config.Config, store objstore.Store, health *objstore.Health) (*objstore.Topology, error) {
	if cfg.Bucket == "" {
		return nil, &config.Error{Field: "bucket", Msg: "no standard bucket"}
	}
	t, err := bundle.Topology(store, cfg.Bucket, cfg.S3ExpressBuckets, cfg.Location, "--s3-express-buckets", health)
	if err != nil {
		return nil, &config.Error{Field: "s3-express-buckets", Msg: err.Error()}
	}
	return t, nil
}

// Buckets returns every bucket of the configuration's topology once: the
// standard bucket, then the express set in read order; a configuration
// error when the configuration is not a topology.
func Buckets(cfg config.Config) ([]string, error) {
	t, err := Topology(cfg, nil, nil)
	if err != nil {
		return nil, err
	}
	return t.All(), nil
}

// bucketCreator is a store that can make buckets itself (the file backend).
type bucketCreator interface {
	CreateBucket(bucket string) error
}

// CreateLocalBuckets creates the configuration's buckets (standard and
// express) when the store is the file backend, where a bucket is a
// directory; it does nothing for S3, whose buckets an operator creates.
func CreateLocalBuckets(cfg config.Config, store objstore.Store) error {
	bc, ok := store.(bucketCreator)
	if !ok {
		return nil
	}
	buckets, err := Buckets(cfg)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		if err := bc.CreateBucket(b); err != nil {
			return fmt.Errorf("create bucket %s under %s: %w", b, cfg.FSRoot, err)
		}
	}
	return nil
}

// CreateBuckets creates the configuration's buckets, standard and express:
// directories on the file backend, CreateBucket on S3 (a bucket this
// account already owns is fine). Operators create production buckets; this
// serves the demo and `novasim setup --create-buckets`.
func CreateBuckets(ctx context.Context, cfg config.Config, store objstore.Store) error {
	s3s, ok := store.(*s3store.Store)
	if !ok {
		return CreateLocalBuckets(cfg, store)
	}
	buckets, err := Buckets(cfg)
	if err != nil {
		return err
	}
	for _, b := range buckets {
		if err := s3s.CreateBucket(ctx, b); err != nil {
			return err
		}
	}
	return nil
}

// DB connects to the configuration's metastore, for both binaries. A
// database that does not answer is not the URL's fault: catalog's
// ErrUnreachable, saying where it tried (the command exits 5). One that
// answers and refuses the URL (credentials, database name, TLS), or a URL
// that does not parse, is a configuration error naming database-url (exit 2).
func DB(ctx context.Context, cfg config.Config) (*catalog.DB, error) {
	db, err := catalog.Open(ctx, cfg.DatabaseURL)
	switch {
	case err == nil:
		return db, nil
	case errors.Is(err, catalog.ErrUnreachable):
		// Where it tried and what to do first, then the driver's detail.
		detail := strings.TrimPrefix(err.Error(), catalog.ErrUnreachable.Error()+": ")
		return nil, fmt.Errorf("%w at %s (--database-url); nothing was done, retry once it answers: %s",
			catalog.ErrUnreachable, config.RedactURL(cfg.DatabaseURL), detail)
	}
	return nil, &config.Error{Field: "database-url", Msg: fmt.Sprintf("%s: %v", config.RedactURL(cfg.DatabaseURL), err)}
}
