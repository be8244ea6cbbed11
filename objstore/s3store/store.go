// Package s3store is the S3 backend of objstore.Store, on aws-sdk-go-v2. It
// owns the S3 calls, the retry policy and the execution of part plans; the
// plans themselves come from objstore.PlanParts. Metrics are the
// objstore.Instrument wrapper's business: this package only reports requests
// and retries to the context's objstore.Observer.
//
// Layout: store.go, the Store and its object operations (reads, PUT,
// deletes, listings, uploads); request.go, how one request is sent (retry
// policy, attempt deadlines, endpoint resolution); assemble.go, an
// assembly's plan and gathered parts, multipart.go its multipart upload,
// readback.go its read-back check; probe.go, what the server's checksums
// can be trusted with; algs.go, the algorithm each copied source is stored
// with; bucketrules.go, a bucket's rules; roots.go, the CA file.
package s3store

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// Store is objstore.Store on an S3 API.
type Store struct {
	client *s3.Client
	cfg    objstore.S3Config
	limits objstore.Limits
	algs   *algCache // sources' stored checksum algorithms (ChecksumBySource)
	// readBackWin is the bytes of one read-back GET (0: readBackWindow;
	// tests set less, to read back in several windows)
	readBackWin int64
}

var _ objstore.Store = (*Store)(nil)

// New builds a store from a complete configuration (objstore.S3Config's
// Validate; start from objstore.DefaultS3Config). It sends no request.
func New(ctx context.Context, cfg objstore.S3Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	opts := []func(*config.LoadOptions) error{
		config.WithRegion(cfg.Region),
		// one retry layer only: ours (request.go)
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		// checksums are set explicitly on every upload
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
		config.WithLogger(logging.Nop{}),
	}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, "")))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	var roots *x509.CertPool
	if cfg.CAFile != "" {
		if roots, err = loadRoots(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("s3 config: CAFile: %w", err)
		}
	}
	client := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if cfg.Endpoint != "" {
			o.BaseEndpoint = aws.String(cfg.Endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		o.EndpointResolverV2 = newEndpointCache(s3.NewDefaultEndpointResolverV2())
		if cfg.HTTPClient != nil {
			// set here, not through config.WithHTTPClient, which insists on
			// adding AWS_CA_BUNDLE's roots to the client's transport
			o.HTTPClient = cfg.HTTPClient
		} else {
			// the configured client (it carries AWS_CA_BUNDLE's roots),
			// with a short connect timeout and CAFile's roots, which
			// replace AWS_CA_BUNDLE's (this option runs after the SDK's)
			bc, ok := awsCfg.HTTPClient.(*awshttp.BuildableClient)
			if !ok {
				bc = awshttp.NewBuildableClient()
			}
			o.HTTPClient = bc.
				WithDialerOptions(func(d *net.Dialer) { d.Timeout = cfg.ConnectTimeout }).
				WithTransportOptions(func(t *http.Transport) {
					t.TLSHandshakeTimeout = cfg.ConnectTimeout
					if roots != nil {
						if t.TLSClientConfig == nil {
							t.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
						}
						t.TLSClientConfig.RootCAs = roots
					}
				})
		}
	})
	return &Store{client: client, cfg: cfg, limits: cfg.Limits(), algs: newAlgCache()}, nil
}

// WithProbe returns a store on the same client whose checksum mode is what
// the probe allows (objstore.ChecksumProbe.Configure).
func (s *Store) WithProbe(p objstore.ChecksumProbe) (*Store, error) {
	cfg := p.Configure(s.cfg)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("s3 config: %w", err)
	}
	return &Store{client: s.client, cfg: cfg, limits: s.limits, algs: newAlgCache()}, nil
}

// Config is the store's configuration, defaults applied.
func (s *Store) Config() objstore.S3Config { return s.cfg }

// Client is the underlying SDK client, for tests that speak S3 directly.
func (s *Store) Client() *s3.Client { return s.client }

// CreateBucket creates bucket; one this account already owns is success.
// Operators create production buckets: this serves the demo, test setup
// and `novasim setup --create-buckets`.
func (s *Store) CreateBucket(ctx context.Context, bucket string) error {
	_, err := s.client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(bucket)})
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode() == "BucketAlreadyOwnedByYou" || apiErr.ErrorCode() == "BucketAlreadyExists") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create bucket %s: %w", bucket, mapErr(err, nil))
	}
	return nil
}

// Limits are the part-planning limits the store uses.
func (s *Store) Limits() objstore.Limits { return s.limits }

func (s *Store) fullKey(key string) (string, error) {
	if err := objstore.ValidKey(key); err != nil {
		return "", err
	}
	return s.cfg.KeyPrefix + key, nil
}

// mapErr turns an S3 error into the objstore contract; on412 is what a
// failed precondition means for this operation.
func mapErr(err, on412 error) error {
	if err == nil {
		return nil
	}
	var te *objstore.TransientError
	if errors.As(err, &te) {
		return err
	}
	switch code := errorCode(err); {
	case code == "NoSuchBucket":
		return fmt.Errorf("%w: %w", objstore.ErrBucketNotFound, err)
	case code == "NoSuchUpload":
		return fmt.Errorf("%w: %w", objstore.ErrNoUpload, err)
	case code == "NoSuchKey" || code == "NotFound" || httpStatus(err) == 404:
		return fmt.Errorf("%w: %w", objstore.ErrNotFound, err)
	case code == "PreconditionFailed" || httpStatus(err) == 412:
		if on412 != nil {
			return fmt.Errorf("%w: %w", on412, err)
		}
	case code == "InvalidRange" || httpStatus(err) == 416:
		return fmt.Errorf("%w: %w", objstore.ErrInvalidRange, err)
	case code == "BadDigest" || code == "InvalidChecksum":
		return fmt.Errorf("%w: %w", objstore.ErrChecksum, err)
	}
	return err
}

// getRange fetches [off, off+n) (n > 0), pinned to etag when set, into dst
// when it has exactly the right length (else a new buffer). A
// response must be a 206 whose Content-Range starts at off and whose body
// holds exactly the promised bytes, or an empty object's empty 200;
// anything else is retried (a proxy's error page is never taken for data).
func (s *Store) getRange(ctx context.Context, bucket, fullKey, rng, etag string, off, n int64, suffix bool, dst []byte) ([]byte, int64, error) {
	var data []byte
	size, err := s.readRange(ctx, bucket, fullKey, rng, etag, off, n, suffix, func(body io.Reader, want int64) error {
		buf := dst
		if int64(len(buf)) != want {
			buf = make([]byte, want)
		}
		if _, err := io.ReadFull(body, buf); err != nil {
			return fmt.Errorf("read %s: %w", rng, err)
		}
		data = buf
		return nil
	})
	if size == 0 {
		data = nil
	}
	if err == nil {
		objstore.ObserverFrom(ctx).Bytes(objstore.Fetched, int64(len(data)))
	}
	return data, size, err
}

// readRange is getRange handing the body to consume instead: consume gets
// the body of a checked response and the bytes it must read from it
// (want > 0), on every attempt (a failed one is retried with a fresh
// body: consume starts over). It returns the object's size (0 for an
// empty object, whose body is not handed on).
func (s *Store) readRange(ctx context.Context, bucket, fullKey, rng, etag string, off, n int64, suffix bool, consume func(body io.Reader, want int64) error) (int64, error) {
	var size int64
	err := s.do(ctx, "GetObject", func(ctx context.Context) error {
		in := &s3.GetObjectInput{Bucket: &bucket, Key: &fullKey, Range: &rng}
		if etag != "" {
			in.IfMatch = &etag
		}
		out, err := s.client.GetObject(ctx, in)
		if err != nil {
			return err
		}
		defer out.Body.Close() //nolint:errcheck // a response body, read: its reading's errors are returned
		cl := aws.ToInt64(out.ContentLength)
		if out.ContentRange == nil {
			if cl != 0 || (!suffix && off != 0) {
				return fmt.Errorf("%w: no Content-Range for %s", errProtocol, rng)
			}
			size = 0
			return nil
		}
		first, last, total, err := parseContentRange(*out.ContentRange)
		if err != nil {
			return err
		}
		start, want := off, min(n, total-off)
		if suffix {
			want = min(n, total)
			start = total - want
		}
		if first != start || last-first+1 != want || cl != want {
			return fmt.Errorf("%w: Content-Range %q, length %d for %s", errProtocol, *out.ContentRange, cl, rng)
		}
		if err := consume(out.Body, want); err != nil {
			return err
		}
		size = total
		return nil
	})
	return size, err
}

// parseContentRange parses "bytes first-last/total".
func parseContentRange(cr string) (first, last, total int64, err error) {
	bad := fmt.Errorf("%w: Content-Range %q", errProtocol, cr)
	rest, ok := strings.CutPrefix(cr, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, tot, ok := strings.Cut(rest, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, bad
	}
	if first, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	if last, err = strconv.ParseInt(b, 10, 64); err != nil {
		return 0, 0, 0, bad
	}
	if total, err = strconv.ParseInt(tot, 10, 64); err != nil || first > last || last >= total {
		return 0, 0, 0, bad
	}
	return first, last, total, nil
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error) {
	fk, err := s.fullKey(key)
	if err != nil {
		return nil, 0, err
	}
	if off < 0 || n <= 0 {
		return nil, 0, fmt.Errorf("get %s/%s: bad range %d+%d", bucket, key, off, n)
	}
	data, size, err := s.getRange(ctx, bucket, fk, fmt.Sprintf("bytes=%d-%d", off, off+n-1), "", off, n, false, nil)
	if err != nil {
		return nil, 0, fmt.Errorf("get %s/%s [%d,+%d): %w", bucket, key, off, n, mapErr(err, nil))
	}
	return data, size, nil
}

// GetSuffix implements objstore.Store.
func (s *Store) GetSuffix(ctx context.Context, bucket, key string, n int64) ([]byte, int64, error) {
	fk, err := s.fullKey(key)
	if err != nil {
		return nil, 0, err
	}
	if n <= 0 {
		return nil, 0, fmt.Errorf("get %s/%s: bad suffix length %d", bucket, key, n)
	}
	data, size, err := s.getRange(ctx, bucket, fk, fmt.Sprintf("bytes=-%d", n), "", 0, n, true, nil)
	if err != nil {
		err = mapErr(err, nil)
		if errors.Is(err, objstore.ErrInvalidRange) {
			// some servers refuse any range of an empty object
			if a, herr := s.Head(ctx, bucket, key); herr == nil && a.Size == 0 {
				return nil, 0, nil
			}
		}
		return nil, 0, fmt.Errorf("get %s/%s last %d: %w", bucket, key, n, err)
	}
	return data, size, nil
}

// Head implements objstore.Store.
func (s *Store) Head(ctx context.Context, bucket, key string) (objstore.Attrs, error) {
	fk, err := s.fullKey(key)
	if err != nil {
		return objstore.Attrs{}, err
	}
	var a objstore.Attrs
	err = s.do(ctx, "HeadObject", func(ctx context.Context) error {
		out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &fk})
		if err != nil {
			return err
		}
		a = objstore.Attrs{Size: aws.ToInt64(out.ContentLength), ETag: aws.ToString(out.ETag)}
		return nil
	})
	if err != nil {
		return objstore.Attrs{}, fmt.Errorf("head %s/%s: %w", bucket, key, mapErr(err, nil))
	}
	return a, nil
}

// PutIfAbsent implements objstore.Store. When an earlier attempt's answer
// was lost and the key is found taken by exactly these bytes (same MD5
// ETag), the write is ours and succeeds.
//
// After an attempt that ended without an answer, the next one first asks
// with a HEAD whether the key is taken, and stops there if it is. A server
// may refuse a taken key while the body is still on its way and close the
// connection (versitygw answers 412 and resets): the client sees a reset,
// not the 412, and resending the body would be refused the same way, so a
// retry that only resent would give up on a key whose answer is ErrExists.
func (s *Store) PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error {
	return s.putIfAbsent(ctx, bucket, key, data, nil)
}

// putIfAbsent is PutIfAbsent of data whose CRC-32C the caller may know
// (crc, nil when it does not): the upload checksum, when it is CRC-32C,
// is not computed again.
func (s *Store) putIfAbsent(ctx context.Context, bucket, key string, data []byte, crc *uint32) error {
	fk, err := s.fullKey(key)
	if err != nil {
		return err
	}
	var (
		unanswered bool           // the last attempt ended without the server's answer
		taken      objstore.Attrs // what the HEAD found, when it found the key taken
		headFound  bool           // a HEAD found the key taken
		attempts   int
	)
	err = s.do(ctx, "PutObject", func(ctx context.Context) error {
		attempts++
		if unanswered {
			if a, herr := s.Head(ctx, bucket, key); herr == nil {
				taken, headFound = a, true
				return errFoundTaken
			}
			// not found, or the HEAD failed too: send the body again
		}
		in := &s3.PutObjectInput{
			Bucket: &bucket, Key: &fk, Body: bytes.NewReader(data),
			ContentLength: aws.Int64(int64(len(data))),
			IfNoneMatch:   aws.String("*"),
		}
		putChecksum(in, s.cfg.PutChecksum, data, crc)
		_, err := s.client.PutObject(ctx, in)
		unanswered = err != nil && httpStatus(err) == 0 && errorCode(err) == ""
		return err
	})
	err = mapErr(err, objstore.ErrExists)
	if errors.Is(err, objstore.ErrExists) && attempts > 1 {
		a, herr := taken, error(nil)
		if !headFound {
			a, herr = s.Head(ctx, bucket, key)
		}
		sum := md5.Sum(data)
		if herr == nil && a.Size == int64(len(data)) && strings.Trim(a.ETag, `"`) == hex.EncodeToString(sum[:]) {
			err = nil // our write, its answer lost
		}
	}
	if err != nil {
		return fmt.Errorf("put %s/%s: %w", bucket, key, err)
	}
	objstore.ObserverFrom(ctx).Bytes(objstore.Uploaded, int64(len(data)))
	return nil
}

// errFoundTaken ends PutIfAbsent's retries when a HEAD after a lost
// answer finds the key taken; the attempt it ends sent nothing (do counts
// no request for it).
var errFoundTaken = fmt.Errorf("%w (found by a HEAD after an attempt's answer was lost)", objstore.ErrExists)

// putChecksum sets the upload checksum of a PutObject: the configured
// algorithm's, which the server checks and stores; with AlgorithmNone a
// Content-MD5, checked and not stored (the server stores its default).
// crc is data's CRC-32C when the caller knows it (nil: computed here when
// needed).
func putChecksum(in *s3.PutObjectInput, alg objstore.ChecksumAlgorithm, data []byte, crc *uint32) {
	switch alg {
	case objstore.AlgorithmCRC32:
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], crc32.ChecksumIEEE(data))
		in.ChecksumAlgorithm, in.ChecksumCRC32 = types.ChecksumAlgorithmCrc32, aws.String(base64.StdEncoding.EncodeToString(b[:]))
	case objstore.AlgorithmSHA256:
		sum := sha256.Sum256(data)
		in.ChecksumAlgorithm, in.ChecksumSHA256 = types.ChecksumAlgorithmSha256, aws.String(base64.StdEncoding.EncodeToString(sum[:]))
	case objstore.AlgorithmNone:
		sum := md5.Sum(data)
		in.ContentMD5 = aws.String(base64.StdEncoding.EncodeToString(sum[:]))
	default:
		if crc == nil {
			c := bundlefmt.CRC32C(data)
			crc = &c
		}
		in.ChecksumAlgorithm, in.ChecksumCRC32C = types.ChecksumAlgorithmCrc32c, aws.String(objstore.EncodeCRC32C(*crc))
	}
}

// deleteBatch is S3's limit of keys per DeleteObjects.
const deleteBatch = 1000

// Delete implements objstore.Store with DeleteObjects batches.
func (s *Store) Delete(ctx context.Context, bucket string, keys []string) error {
	failed := map[string]error{}
	for start := 0; start < len(keys); start += deleteBatch {
		batch := keys[start:min(start+deleteBatch, len(keys))]
		ids := make([]types.ObjectIdentifier, 0, len(batch))
		byFull := map[string]string{}
		for _, k := range batch {
			fk, err := s.fullKey(k)
			if err != nil {
				failed[k] = err
				continue
			}
			byFull[fk] = k
			ids = append(ids, types.ObjectIdentifier{Key: aws.String(fk)})
		}
		if len(ids) == 0 {
			continue
		}
		var out *s3.DeleteObjectsOutput
		err := s.do(ctx, "DeleteObjects", func(ctx context.Context) error {
			var err error
			out, err = s.client.DeleteObjects(ctx, &s3.DeleteObjectsInput{
				Bucket: &bucket, Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
			})
			return err
		})
		if err != nil {
			err = mapErr(err, nil)
			for _, k := range byFull {
				failed[k] = err
			}
			continue
		}
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue // absence is success
			}
			k, ok := byFull[aws.ToString(e.Key)]
			if !ok {
				k = aws.ToString(e.Key)
			}
			ferr := fmt.Errorf("%s: %s", aws.ToString(e.Code), aws.ToString(e.Message))
			switch aws.ToString(e.Code) {
			case "InternalError", "SlowDown", "ServiceUnavailable":
				ferr = &objstore.TransientError{Op: "DeleteObjects", Err: ferr}
			}
			failed[k] = ferr
		}
	}
	if len(failed) > 0 {
		return &objstore.DeleteError{Bucket: bucket, Failed: failed}
	}
	return nil
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error {
	full := s.cfg.KeyPrefix + prefix
	var token *string
	for {
		var out *s3.ListObjectsV2Output
		err := s.do(ctx, "ListObjectsV2", func(ctx context.Context) error {
			var err error
			out, err = s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
				Bucket: &bucket, Prefix: &full, ContinuationToken: token,
			})
			return err
		})
		if err != nil {
			return fmt.Errorf("list %s/%s: %w", bucket, prefix, mapErr(err, nil))
		}
		for _, o := range out.Contents {
			k, ok := strings.CutPrefix(aws.ToString(o.Key), s.cfg.KeyPrefix)
			if !ok || objstore.ValidKey(k) != nil {
				continue // not ours, or a probe's
			}
			info := objstore.ObjectInfo{Key: k, Size: aws.ToInt64(o.Size), LastModified: aws.ToTime(o.LastModified)}
			if err := fn(info); err != nil {
				return err
			}
		}
		if !aws.ToBool(out.IsTruncated) || out.NextContinuationToken == nil {
			return nil
		}
		token = out.NextContinuationToken
	}
}

// AbortAssembly implements objstore.Store.
func (s *Store) AbortAssembly(ctx context.Context, bucket, key, uploadID string) error {
	fk, err := s.fullKey(key)
	if err != nil {
		return err
	}
	err = s.do(ctx, "AbortMultipartUpload", func(ctx context.Context) error {
		_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
			Bucket: &bucket, Key: &fk, UploadId: &uploadID,
		})
		return err
	})
	if err = mapErr(err, nil); err != nil && !errors.Is(err, objstore.ErrNoUpload) && !errors.Is(err, objstore.ErrNotFound) {
		return fmt.Errorf("abort upload %s of %s/%s: %w", uploadID, bucket, key, err)
	}
	return nil
}

// ListParts implements objstore.Store.
func (s *Store) ListParts(ctx context.Context, bucket, key, uploadID string) ([]objstore.PartInfo, error) {
	parts, _, err := s.listParts(ctx, bucket, key, uploadID)
	return parts, err
}

// ListAssemblies implements objstore.Store.
func (s *Store) ListAssemblies(ctx context.Context, bucket, key string) ([]string, error) {
	fk, err := s.fullKey(key)
	if err != nil {
		return nil, err
	}
	var ids []string
	var keyMarker, idMarker *string
	for {
		var out *s3.ListMultipartUploadsOutput
		err := s.do(ctx, "ListMultipartUploads", func(ctx context.Context) error {
			var err error
			out, err = s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{
				Bucket: &bucket, Prefix: &fk, KeyMarker: keyMarker, UploadIdMarker: idMarker,
			})
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("list uploads of %s/%s: %w", bucket, key, mapErr(err, nil))
		}
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) == fk && aws.ToString(u.UploadId) != "" {
				ids = append(ids, aws.ToString(u.UploadId))
			}
		}
		if !aws.ToBool(out.IsTruncated) || (out.NextKeyMarker == nil && out.NextUploadIdMarker == nil) {
			return ids, nil
		}
		keyMarker, idMarker = out.NextKeyMarker, out.NextUploadIdMarker
	}
}

// listParts also reports the upload's checksum type.
func (s *Store) listParts(ctx context.Context, bucket, key, uploadID string) ([]objstore.PartInfo, types.ChecksumType, error) {
	fk, err := s.fullKey(key)
	if err != nil {
		return nil, "", err
	}
	var parts []objstore.PartInfo
	var ctype types.ChecksumType
	var marker *string
	for {
		var out *s3.ListPartsOutput
		err := s.do(ctx, "ListParts", func(ctx context.Context) error {
			var err error
			out, err = s.client.ListParts(ctx, &s3.ListPartsInput{
				Bucket: &bucket, Key: &fk, UploadId: &uploadID, PartNumberMarker: marker,
			})
			return err
		})
		if err != nil {
			return nil, "", fmt.Errorf("list parts of upload %s of %s/%s: %w", uploadID, bucket, key, mapErr(err, nil))
		}
		ctype = out.ChecksumType
		for _, p := range out.Parts {
			pi := objstore.PartInfo{Number: int(aws.ToInt32(p.PartNumber)), Size: aws.ToInt64(p.Size), ETag: aws.ToString(p.ETag)}
			if c, err := objstore.DecodeCRC32C(aws.ToString(p.ChecksumCRC32C)); err == nil {
				pi.CRC32C, pi.HasCRC32C = c, true
			}
			parts = append(parts, pi)
		}
		if !aws.ToBool(out.IsTruncated) || out.NextPartNumberMarker == nil {
			return parts, ctype, nil
		}
		marker = out.NextPartNumberMarker
	}
}
