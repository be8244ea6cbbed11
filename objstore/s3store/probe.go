package s3store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/objstore"
)

// ProbeChecksum finds out whether the server can check a whole assembled
// object's CRC-32C: it stores a two-byte object with a CRC-32C, copies one
// byte of it into a FULL_OBJECT upload and completes that with the
// expected CRC. It answers ChecksumFullObject when the copied part's
// checksum is that byte's and the completion is accepted, ChecksumParts
// otherwise (versitygw 1.8.0 reports the whole source's CRC for a ranged
// copy). The probe writes under the reserved "<prefix>.nova-probe/" and
// removes what it wrote.
func (s *Store) ProbeChecksum(ctx context.Context, bucket string) (objstore.ChecksumMode, error) {
	base := fmt.Sprintf("%s%sprobe/%d", s.cfg.KeyPrefix, objstore.ReservedPrefix, time.Now().UnixNano())
	src, dst := base+"/src", base+"/dst"
	body := []byte("ab")
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		for _, k := range []string{src, dst} {
			_ = s.do(cctx, "DeleteObject", func(ctx context.Context) error {
				_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &bucket, Key: aws.String(k)})
				return err
			})
		}
	}()
	err := s.do(ctx, "PutObject", func(ctx context.Context) error {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: &bucket, Key: &src, Body: bytes.NewReader(body), ContentLength: aws.Int64(2),
			ChecksumAlgorithm: types.ChecksumAlgorithmCrc32c,
			ChecksumCRC32C:    aws.String(objstore.EncodeCRC32C(objstore.CRC32C(body))),
		})
		return err
	})
	if err != nil {
		return "", fmt.Errorf("probe checksums in %s: %w", bucket, mapErr(err, nil))
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
			return objstore.ChecksumParts, nil // the server refuses the checksum type
		}
		return "", fmt.Errorf("probe checksums in %s: %w", bucket, err)
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_ = s.do(cctx, "AbortMultipartUpload", func(ctx context.Context) error {
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{Bucket: &bucket, Key: &dst, UploadId: &uploadID})
			return err
		})
	}()
	want := objstore.EncodeCRC32C(objstore.CRC32C(body[1:]))
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
		return "", fmt.Errorf("probe checksums in %s: %w", bucket, mapErr(err, nil))
	}
	if part == nil || aws.ToString(part.ChecksumCRC32C) != want {
		return objstore.ChecksumParts, nil
	}
	err = s.do(ctx, "CompleteMultipartUpload", func(ctx context.Context) error {
		_, err := s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
			Bucket: &bucket, Key: &dst, UploadId: &uploadID,
			MultipartUpload: &types.CompletedMultipartUpload{Parts: []types.CompletedPart{
				{PartNumber: aws.Int32(1), ETag: part.ETag, ChecksumCRC32C: part.ChecksumCRC32C},
			}},
			ChecksumType: types.ChecksumTypeFullObject, ChecksumCRC32C: aws.String(want),
		})
		return err
	})
	var te *objstore.TransientError
	switch {
	case err == nil:
		return objstore.ChecksumFullObject, nil
	case errors.As(err, &te):
		return "", fmt.Errorf("probe checksums in %s: %w", bucket, err)
	default:
		return objstore.ChecksumParts, nil
	}
}
