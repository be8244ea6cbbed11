package s3store

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/nova/auditor/objstore"
)

// BucketRules reads the bucket's lifecycle configuration, default
// encryption, versioning and Object Lock configuration. A server that
// does not implement a call (versitygw 1.8.0 answers 501 NotImplemented to
// the lifecycle and encryption reads; a directory bucket has no
// versioning) or refuses it (AccessDenied: the auditor's role may not be
// granted the read) makes that part unknown, which is not an error; an
// outage or a missing bucket is.
func (s *Store) BucketRules(ctx context.Context, bucket string) (objstore.BucketRules, error) {
	out := objstore.BucketRules{Bucket: bucket, Lifecycle: objstore.KnownYes, Rules: []objstore.LifecycleRule{},
		EncryptionKnown: objstore.KnownYes, VersioningKnown: objstore.KnownYes, ObjectLockKnown: objstore.KnownYes}
	var lc *s3.GetBucketLifecycleConfigurationOutput
	err := s.do(ctx, "GetBucketLifecycleConfiguration", func(ctx context.Context) error {
		var err error
		lc, err = s.client.GetBucketLifecycleConfiguration(ctx, &s3.GetBucketLifecycleConfigurationInput{Bucket: &bucket})
		return err
	})
	switch {
	case err == nil:
		for _, r := range lc.Rules {
			out.Rules = append(out.Rules, lifecycleRule(r))
		}
	case errorCode(err) == "NoSuchLifecycleConfiguration":
	case unanswered(err):
		out.Lifecycle = objstore.KnownUnknown
		out.Note = addNote(out.Note, "lifecycle", err)
	default:
		return out, fmt.Errorf("read the lifecycle configuration of bucket %s: %w", bucket, mapErr(err, nil))
	}
	var enc *s3.GetBucketEncryptionOutput
	err = s.do(ctx, "GetBucketEncryption", func(ctx context.Context) error {
		var err error
		enc, err = s.client.GetBucketEncryption(ctx, &s3.GetBucketEncryptionInput{Bucket: &bucket})
		return err
	})
	switch {
	case err == nil:
		if c := enc.ServerSideEncryptionConfiguration; c != nil {
			for _, r := range c.Rules {
				if d := r.ApplyServerSideEncryptionByDefault; d != nil && d.SSEAlgorithm != "" {
					out.Encryption = string(d.SSEAlgorithm)
					break
				}
			}
		}
	case errorCode(err) == "ServerSideEncryptionConfigurationNotFoundError":
	case unanswered(err):
		out.EncryptionKnown = objstore.KnownUnknown
		out.Note = addNote(out.Note, "encryption", err)
	default:
		return out, fmt.Errorf("read the default encryption of bucket %s: %w", bucket, mapErr(err, nil))
	}
	if err := s.readVersioning(ctx, &out); err != nil {
		return out, err
	}
	return out, s.readObjectLock(ctx, &out)
}

// readVersioning reads the bucket's versioning status: an answer without
// a status is a bucket that never had versioning enabled.
func (s *Store) readVersioning(ctx context.Context, out *objstore.BucketRules) error {
	var ver *s3.GetBucketVersioningOutput
	err := s.do(ctx, "GetBucketVersioning", func(ctx context.Context) error {
		var err error
		ver, err = s.client.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &out.Bucket})
		return err
	})
	switch {
	case err == nil:
		out.Versioning = string(ver.Status)
	case unanswered(err):
		out.VersioningKnown = objstore.KnownUnknown
		out.Note = addNote(out.Note, "versioning", err)
	default:
		return fmt.Errorf("read the versioning of bucket %s: %w", out.Bucket, mapErr(err, nil))
	}
	return nil
}

// readObjectLock reads whether the bucket has an Object Lock
// configuration; ObjectLockConfigurationNotFoundError says it has none.
func (s *Store) readObjectLock(ctx context.Context, out *objstore.BucketRules) error {
	var ol *s3.GetObjectLockConfigurationOutput
	err := s.do(ctx, "GetObjectLockConfiguration", func(ctx context.Context) error {
		var err error
		ol, err = s.client.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &out.Bucket})
		return err
	})
	switch {
	case err == nil:
		if c := ol.ObjectLockConfiguration; c != nil {
			out.ObjectLock = c.ObjectLockEnabled == types.ObjectLockEnabledEnabled || c.Rule != nil
		}
	case errorCode(err) == "ObjectLockConfigurationNotFoundError":
	case unanswered(err):
		out.ObjectLockKnown = objstore.KnownUnknown
		out.Note = addNote(out.Note, "object lock", err)
	default:
		return fmt.Errorf("read the object lock configuration of bucket %s: %w", out.Bucket, mapErr(err, nil))
	}
	return nil
}

// addNote appends the server's refusal of one read to a note.
func addNote(note, what string, err error) string {
	n := fmt.Sprintf("%s: %s", what, refusal(err))
	if note != "" {
		return note + "; " + n
	}
	return n
}

// unanswered reports a definite refusal to say: not implemented, or not
// permitted.
func unanswered(err error) bool {
	switch errorCode(err) {
	case "NotImplemented", "AccessDenied", "MethodNotAllowed":
		return true
	}
	switch httpStatus(err) {
	case 501, 403, 405:
		return true
	}
	return false
}

// refusal names the server's refusal for a note.
func refusal(err error) string {
	code := errorCode(err)
	if code == "" {
		code = "no error code"
	}
	return fmt.Sprintf("the server answered %d %s", httpStatus(err), code)
}

// lifecycleRule converts one rule. The filter's prefix is the rule's
// (Filter.Prefix, And.Prefix, or the deprecated rule-level Prefix).
func lifecycleRule(r types.LifecycleRule) objstore.LifecycleRule {
	out := objstore.LifecycleRule{ID: aws.ToString(r.ID), Enabled: r.Status == types.ExpirationStatusEnabled,
		Prefix: aws.ToString(r.Prefix)} //nolint:staticcheck // SA1019: the deprecated rule-level prefix, still sent by some servers
	if f := r.Filter; f != nil {
		if f.Prefix != nil {
			out.Prefix = *f.Prefix
		}
		if a := f.And; a != nil {
			out.Prefix = aws.ToString(a.Prefix)
			out.Filtered = len(a.Tags) > 0 || a.ObjectSizeGreaterThan != nil || a.ObjectSizeLessThan != nil
		}
		out.Filtered = out.Filtered || f.Tag != nil || f.ObjectSizeGreaterThan != nil || f.ObjectSizeLessThan != nil
	}
	if e := r.Expiration; e != nil && (e.Days != nil && *e.Days > 0 || e.Date != nil) {
		out.Expiration = true
		out.ExpirationDays = aws.ToInt32(e.Days)
		out.ExpirationDate = e.Date
	}
	if a := r.AbortIncompleteMultipartUpload; a != nil && a.DaysAfterInitiation != nil {
		out.AbortIncompleteDays = *a.DaysAfterInitiation
	}
	return out
}
