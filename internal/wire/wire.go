// Package wire builds what the configuration describes and several commands
// share: the object store (the file backend when fs-root is set, else S3)
// and the bucket layout of docs/architecture.md#buckets-and-zone-health (which buckets hold a chain of
// each class, in read-preference order). cmd/auditor and cmd/novasim both use
// it, so one configuration means the same storage to both. It holds no state
// and makes no request.
package wire

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/objstore/s3store"
)

// Store builds the configuration's object store: the file backend rooted at
// fs-root when it is set, else S3 at s3-endpoint (region, path style, key
// prefix from the configuration; credentials from the SDK's default chain).
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
	s3cfg.AttemptTimeout, s3cfg.MaxAttempts = cfg.S3AttemptTimeout, int(cfg.S3MaxAttempts)
	s3cfg.CopyConcurrency = int(cfg.CopyConcurrency)
	s3cfg.Checksum = objstore.ChecksumFullObject
	if alg != "" {
		s3cfg.PutChecksum = alg
	}
	if cfg.Verify == "readback" {
		s3cfg.Checksum, s3cfg.VerifyReadback = objstore.ChecksumParts, true
	}
	s, err := s3store.New(ctx, s3cfg)
	if err != nil {
		return nil, &config.Error{Field: "s3-endpoint", Msg: err.Error()}
	}
	return s, nil
}

// SlotBucketSet returns the bucket set that holds the slots of a chain of
// the class (docs/architecture.md#buckets-and-zone-health): the standard bucket (--bucket) alone for
// a standard chain; for an express chain every bucket of the express set
// (--s3-express-buckets), reads preferring the bucket of --location. A
// configuration error when an express chain has no express set.
func SlotBucketSet(cfg config.Config, store objstore.Store, class string) (*objstore.BucketSet, error) {
	if class != catalog.ClassExpress {
		return objstore.SingleBucket(store, cfg.Bucket), nil
	}
	if len(cfg.S3ExpressBuckets) == 0 {
		return nil, &config.Error{Field: "s3-express-buckets", Msg: "an express chain needs the express bucket set"}
	}
	zbs := make([]objstore.ZoneBucket, len(cfg.S3ExpressBuckets))
	for i, zb := range cfg.S3ExpressBuckets {
		zbs[i] = objstore.ZoneBucket{Zone: zb.Zone, Bucket: zb.Bucket}
	}
	set, err := objstore.NewBucketSet(store, zbs, cfg.Location)
	if err != nil {
		return nil, &config.Error{Field: "s3-express-buckets", Msg: err.Error()}
	}
	return set, nil
}

// SlotBuckets returns the names of SlotBucketSet's buckets in read order
// (nil when an express chain has no express set), for callers that fan out
// themselves: novasim's writer needs each bucket's own answer to a PUT.
func SlotBuckets(cfg config.Config, class string) []string {
	set, err := SlotBucketSet(cfg, nil, class)
	if err != nil {
		return nil
	}
	var out []string
	for _, zb := range set.ReadBuckets() {
		out = append(out, zb.Bucket)
	}
	return out
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
	buckets := append([]string{cfg.Bucket}, SlotBuckets(cfg, catalog.ClassExpress)...)
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
	for _, b := range append([]string{cfg.Bucket}, SlotBuckets(cfg, catalog.ClassExpress)...) {
		_, err := s3s.Client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(b)})
		var apiErr smithy.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode() == "BucketAlreadyOwnedByYou" || apiErr.ErrorCode() == "BucketAlreadyExists") {
			continue
		}
		if err != nil {
			return fmt.Errorf("create bucket %s: %w", b, err)
		}
	}
	return nil
}
