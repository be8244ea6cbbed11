package filestore

import (
	"context"
	"errors"
	"time"

	"github.com/nova/auditor/objstore"
)

// Every Store call is reported to the context's objstore.Observer as one
// request of the S3 operation it stands for (an assembly, which writes one
// part and publishes it, as one CompleteMultipartUpload), with the status
// an S3 server would answer (see status); the bytes are reported where
// they move (GetRange, GetSuffix: fetched; PutIfAbsent: uploaded; an
// assembly: each piece copied or uploaded, and the whole-file CRC check
// as read back).

// observe reports one call of op that started at start and ended with err.
func observe(ctx context.Context, op string, start time.Time, err error) {
	objstore.ObserverFrom(ctx).Request(op, status(err), time.Since(start))
}

// status is the HTTP status an S3 server would answer with for err.
func status(err error) string {
	switch {
	case err == nil:
		return "200"
	case errors.Is(err, objstore.ErrNotFound), errors.Is(err, objstore.ErrBucketNotFound), errors.Is(err, objstore.ErrNoUpload):
		return "404"
	case errors.Is(err, objstore.ErrExists), errors.Is(err, objstore.ErrSourceChanged):
		return "412"
	case errors.Is(err, objstore.ErrInvalidRange):
		return "416"
	}
	return "error"
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	start := time.Now()
	data, size, err := s.getRange(ctx, bucket, key, off, n)
	observe(ctx, "GetObject", start, err)
	objstore.ObserverFrom(ctx).Bytes(objstore.Fetched, int64(len(data)))
	return data, size, err
}

// GetSuffix implements objstore.Store.
func (s *Store) GetSuffix(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
	start := time.Now()
	data, size, err := s.getSuffix(ctx, bucket, key, n)
	observe(ctx, "GetObject", start, err)
	objstore.ObserverFrom(ctx).Bytes(objstore.Fetched, int64(len(data)))
	return data, size, err
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, bucket, key string) (objstore.Attrs, error) {
	start := time.Now()
	a, err := s.head(ctx, bucket, key)
	observe(ctx, "HeadObject", start, err)
	return a, err
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	start := time.Now()
	err := s.putIfAbsent(ctx, bucket, key, data)
	observe(ctx, "PutObject", start, err)
	if err == nil {
		objstore.ObserverFrom(ctx).Bytes(objstore.Uploaded, int64(len(data)))
	}
	return err
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, bucket string, keys []string) error {
	start := time.Now()
	err := s.delete(ctx, bucket, keys)
	observe(ctx, "DeleteObjects", start, err)
	return err
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error {
	start := time.Now()
	err := s.list(ctx, bucket, prefix, fn)
	observe(ctx, "ListObjectsV2", start, err)
	return err
}

// Assemble implements objstore.Store (build).
func (s *Store) Assemble(ctx context.Context, req objstore.AssembleRequest) (objstore.AssembleResult, error) {
	start := time.Now()
	res, err := s.build(ctx, req)
	observe(ctx, "CompleteMultipartUpload", start, err)
	res.Requests = 1
	return res, err
}

// AbortAssembly implements objstore.Store.
func (s *Store) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	start := time.Now()
	err := s.abortAssembly(ctx, bucket, key, uploadID)
	observe(ctx, "AbortMultipartUpload", start, err)
	return err
}

// ListParts implements objstore.Store.
func (s *Store) ListParts(ctx context.Context, bucket, key, uploadID string) ([]objstore.PartInfo, error) {
	start := time.Now()
	parts, err := s.listParts(ctx, bucket, key, uploadID)
	observe(ctx, "ListParts", start, err)
	return parts, err
}

// ListAssemblies implements objstore.Store.
func (s *Store) ListAssemblies(ctx context.Context, bucket, key string) ([]string, error) {
	start := time.Now()
	ids, err := s.listAssemblies(ctx, bucket, key)
	observe(ctx, "ListMultipartUploads", start, err)
	return ids, err
}
