package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/objstore"
)

// probeAlgorithms are the ways a probe source is stored ("" sends no
// checksum: the server stores its default).
var probeAlgorithms = []types.ChecksumAlgorithm{"", types.ChecksumAlgorithmCrc32, types.ChecksumAlgorithmCrc32c,
	types.ChecksumAlgorithmSha1, types.ChecksumAlgorithmSha256, types.ChecksumAlgorithmCrc64nvme}

// ProbeChecksum finds out where the server can check a whole assembled
// object's CRC-32C. For each way a source can be stored (no checksum,
// CRC-32, CRC-32C, SHA-1, SHA-256, CRC-64/NVME) it stores a two-byte
// object, asks HEAD which algorithm the server keeps for it, copies one
// byte of it into a FULL_OBJECT CRC-32C upload and compares the part's
// reported CRC with that byte's. The first correct copy is completed once
// with a wrong whole-object CRC, which the server must refuse, and then
// with the right one, which it must accept: only then does the server
// check full objects at all. versitygw 1.8.0 answers FullObject with every
// algorithm but CRC-32C (a ranged copy from a CRC-32C source reports the
// whole source's stored CRC). The probe writes under the reserved
// "<prefix>.nova-probe/" and removes what it wrote.
func (s *Store) ProbeChecksum(ctx context.Context, bucket string) (objstore.ChecksumProbe, error) {
	p := objstore.ChecksumProbe{Copies: map[objstore.ChecksumAlgorithm]bool{}}
	base := fmt.Sprintf("%s%sprobe/%d", s.cfg.KeyPrefix, objstore.ReservedPrefix, time.Now().UnixNano())
	completed := false
	for i, alg := range probeAlgorithms {
		stored, ok, refused, err := s.probeCopy(ctx, bucket, fmt.Sprintf("%s/%d", base, i), alg, !completed)
		if err != nil {
			return objstore.ChecksumProbe{}, fmt.Errorf("probe checksums in %s (source stored with %q): %w", bucket, alg, err)
		}
		if refused {
			return objstore.ChecksumProbe{}, nil // no full-object checksums
		}
		if !completed && ok {
			completed, p.FullObject = true, true
		}
		// two ways of storing that the server keeps as one algorithm count
		// as good only if both copied correctly
		if prev, seen := p.Copies[stored]; seen {
			ok = ok && prev
		}
		p.Copies[stored] = ok
	}
	if !p.FullObject {
		return objstore.ChecksumProbe{}, nil
	}
	return p, nil
}

// probeCopy stores a probe source with alg and copies one byte of it into
// a FULL_OBJECT upload. It reports the algorithm HEAD shows for the source,
// whether the copy's CRC was right (and, with complete, whether the server
// refused a wrong whole-object CRC and accepted the right one), and whether
// the server refused the full-object upload itself.
func (s *Store) probeCopy(ctx context.Context, bucket, base string, alg types.ChecksumAlgorithm, complete bool) (stored objstore.ChecksumAlgorithm, ok, refused bool, err error) {
	src, dst := base+"/src", base+"/dst"
	body := []byte("ab")
	defer s.removeProbe(ctx, bucket, src, dst)
	err = s.do(ctx, "PutObject", func(ctx context.Context) error {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: &src, Body: bytes.NewReader(body), ContentLength: aws.Int64(2), ChecksumAlgorithm: alg,
		})
		return err
	})
	if err != nil {
		return "", false, false, mapErr(err, nil)
	}
	if stored, err = s.storedAlgorithm(ctx, bucket, src, ""); err != nil {
		return "", false, false, err
	}
	var uploadID string
	err = s.do(ctx, "CreateMultipartUpload", func(ctx context.Context) error {
		out, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
			Bucket: &bucket, Key: &dst,
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c, ChecksumType: types.ChecksumTypeFullObject,
		})
		if err == nil {
			uploadID = aws.ToString(out.UploadId)
		}
		return err
	})
	if err != nil {
		if errorCode(err) != "" {
			return stored, false, true, nil // the server refuses the checksum type
		}
		return "", false, false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = s.do(cctx, "AbortMultipartUpload", func(ctx context.Context) error {
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &dst, UploadId: &uploadID})
			return err
		})
	}()
	want := objstore.EncodeCRC32C(bundlefmt.CRC32C(body[1:]))
	var part *types.CopyPartResult
	err = s.do(ctx, "UploadPartCopy", func(ctx context.Context) error {
		out, err := s.client.UploadPartCopy(ctx, &s3.UploadPartCopyInput{
			Bucket: &bucket, Key: &dst, UploadId: &uploadID, PartNumber: aws.Int32(1),
			CopySource: aws.String(copySource(bucket, src)), CopySourceRange: aws.String("bytes=1-1"),
		})
		if err == nil {
			part = out.CopyPartResult
		}
		return err
	})
	if err != nil {
		return "", false, false, mapErr(err, nil)
	}
	if part == nil || aws.ToString(part.ChecksumCRC32C) != want {
		return stored, false, false, nil
	}
	if !complete {
		return stored, true, false, nil
	}
	ok, err = s.probeComplete(ctx, bucket, dst, uploadID, part, body, want)
	if err != nil {
		return "", false, false, err
	}
	return stored, ok, false, nil
}

// probeComplete completes the probe's upload first with a wrong
// whole-object CRC-32C, then with the right one: the copy is checked only
// when the server refuses the wrong one and accepts the right one.
func (s *Store) probeComplete(ctx context.Context, bucket, dst, uploadID string, part *types.CopyPartResult, body []byte, want string) (bool, error) {
	completeWith := func(full string) error {
		return s.do(ctx, "CompleteMultipartUpload", func(ctx context.Context) error {
			_, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
				Bucket: &bucket, Key: &dst, UploadId: &uploadID,
				MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
					{PartNumber: aws.Int32(1), ETag: part.ETag, ChecksumCRC32C: part.ChecksumCRC32C},
				}},
				ChecksumType: types.ChecksumTypeFullObject, ChecksumCRC32C: aws.String(full),
			})
			return err
		})
	}
	var te *objstore.TransientError
	switch err := completeWith(objstore.EncodeCRC32C(bundlefmt.CRC32C(body))); {
	case err == nil:
		return false, nil // a wrong whole-object CRC was accepted: nothing is checked
	case errors.As(err, &te):
		return false, err
	}
	switch err := completeWith(want); {
	case err == nil:
		return true, nil
	case errors.As(err, &te):
		return false, err
	default:
		return false, nil
	}
}

// removeProbe deletes a probe's source and destination and aborts every
// upload of its destination key, past the probe's own cancellation.
func (s *Store) removeProbe(ctx context.Context, bucket, src, dst string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	// Every upload of the probe's key, the recorded one and any a lost
	// reply to CreateMultipartUpload hid from it (a retry made another).
	// (The probe's keys are raw, outside the store's key rules.)
	var out *s3.ListMultipartUploadsOutput
	if err := s.do(cctx, "ListMultipartUploads", func(ctx context.Context) error {
		var err error
		out, err = s.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: &bucket, Prefix: aws.String(dst)})
		return err
	}); err == nil {
		for _, u := range out.Uploads {
			if aws.ToString(u.Key) != dst {
				continue
			}
			_ = s.do(cctx, "AbortMultipartUpload", func(ctx context.Context) error {
				_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &dst, UploadId: u.UploadId})
				return err
			})
		}
	}
	for _, k := range []string{src, dst} {
		_ = s.do(cctx, "DeleteObject", func(ctx context.Context) error {
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(k)})
			return err
		})
	}
}

// ClockSkew is how far the server's clock runs ahead of this process's
// (negative: behind), read off the Date header of a HEAD of key. The
// header is to the second (and some servers refresh it only once a
// second), so the answer is the smallest skew consistent with it: 0 when
// the header fits this host's clock. SigV4 requests are refused beyond 15 minutes of skew.
func (s *Store) ClockSkew(ctx context.Context, bucket, key string) (time.Duration, error) {
	fk, err := s.fullKey(key)
	if err != nil {
		return 0, err
	}
	var skew time.Duration
	err = s.do(ctx, "HeadObject", func(ctx context.Context) error {
		sent := time.Now()
		out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &bucket, Key: &fk})
		if err != nil {
			return err
		}
		answered := time.Now()
		server, ok := awsmiddleware.GetServerTime(out.ResultMetadata)
		if !ok {
			return errors.New("the answer carried no Date header")
		}
		// Between sent and answered (by this host's clock) the server's
		// clock read at least the header and less than two seconds more
		// (truncated to the second, refreshed once a second).
		lo, hi := server.Sub(answered), server.Add(2*time.Second).Sub(sent)
		skew = max(lo, min(hi, 0))
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("read the clock of %s: %w", bucket, mapErr(err, nil))
	}
	return skew, nil
}
