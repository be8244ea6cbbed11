package objstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// What a BucketSet sends to every bucket rather than to the first that
// answers: deletes and upload aborts (fanned out at once, skipping the
// buckets the zone health holds off) and listings.

// AllHeldOff reports whether the zone health holds off every one of
// buckets (nil: the set's), so that a delete would send nothing.
func (s *BucketSet) AllHeldOff(buckets []string) bool {
	if buckets == nil {
		buckets = s.Buckets()
	}
	for _, b := range buckets {
		if !s.health.Down(b) {
			return false
		}
	}
	return true
}

// DeleteOutcome is one bucket's answer to a Delete fanned out over a set.
type DeleteOutcome struct {
	Bucket string
	// HeldOff: the zone health held the bucket off, so no request was
	// sent and none of the keys is confirmed.
	HeldOff bool
	// Err is the request's failure (nil: every key is gone from the
	// bucket). Failed holds the keys it did not confirm; nil with an Err
	// means none was confirmed.
	Err    error
	Failed map[string]bool
}

// Confirmed reports whether the bucket confirmed key deleted.
func (o DeleteOutcome) Confirmed(key string) bool {
	switch {
	case o.HeldOff:
		return false
	case o.Err == nil:
		return true
	case o.Failed == nil:
		return false
	}
	return !o.Failed[key]
}

// Delete deletes keys from the given buckets of the set (nil: every
// bucket) at once, absence being success, and returns each bucket's
// outcome in the order given. A bucket the zone health holds off is
// skipped, what it holds staying for a later attempt; a request that fails
// whole holds its bucket off (fanOut).
func (s *BucketSet) Delete(ctx context.Context, keys []string, buckets []string) []DeleteOutcome {
	if buckets == nil {
		buckets = s.Buckets()
	}
	out := make([]DeleteOutcome, len(buckets))
	for i, b := range buckets {
		out[i].Bucket = b
		if !s.has(b) {
			out[i].Err = fmt.Errorf("delete from bucket %s: not a bucket of the set", b)
		}
	}
	s.fanOut(ctx, out, func(o *DeleteOutcome) bool {
		o.Err = s.store.Delete(ctx, o.Bucket, keys)
		var de *DeleteError
		if errors.As(o.Err, &de) && len(de.Failed) < len(keys) {
			o.Failed = make(map[string]bool, len(de.Failed))
			for k := range de.Failed {
				o.Failed[k] = true
			}
			return false // some keys were deleted: the bucket answers
		}
		return true
	})
	return out
}

// AbortUploads aborts the multipart uploads of key in every bucket of the
// set at once: recorded (when not "") and, with listAll, every other
// upload a listing of the key finds (one a crash kept from being
// recorded). An upload already gone is success. It returns each bucket's
// outcome (Err nil: no upload of the key is left there) and the requests
// sent. The zone health is the one deletes keep (fanOut): a bucket it
// holds off is sent nothing (HeldOff), and a success clears it; only a
// failure that is the zone's (retryable: a timeout, a refused connection,
// a 5xx) holds the bucket off, not one about this key, which must not
// stop the other keys' reaps.
func (s *BucketSet) AbortUploads(ctx context.Context, key, recorded string, listAll bool) ([]DeleteOutcome, int64) {
	out := make([]DeleteOutcome, len(s.read))
	for i, zb := range s.read {
		out[i].Bucket = zb.Bucket
	}
	var requests atomic.Int64
	s.fanOut(ctx, out, func(o *DeleteOutcome) bool {
		o.Err = s.abortUploads(ctx, o.Bucket, key, recorded, listAll, &requests)
		return IsRetryable(o.Err)
	})
	return out, requests.Load()
}

func (s *BucketSet) abortUploads(ctx context.Context, bucket, key, recorded string, listAll bool, requests *atomic.Int64) error {
	var ids []string
	if recorded != "" {
		ids = append(ids, recorded)
	}
	if listAll {
		requests.Add(1)
		found, err := s.store.ListAssemblies(ctx, bucket, key)
		if err != nil {
			return fmt.Errorf("list the uploads of %s in %s: %w", key, bucket, err)
		}
		for _, id := range found {
			if id != recorded {
				ids = append(ids, id)
			}
		}
	}
	for _, id := range ids {
		requests.Add(1)
		if err := s.store.AbortAssembly(ctx, bucket, key, id); err != nil && !errors.Is(err, ErrNoUpload) {
			return fmt.Errorf("abort upload %s of %s in %s: %w", id, key, bucket, err)
		}
	}
	return nil
}

// fanOut runs op on the buckets of outs at once (those without an Err
// already), skipping the ones the zone health holds off (HeldOff), and
// records each answer into the health: a success clears the bucket; a
// failure op calls the zone's (not a cancellation) holds it off for at
// least the time it took, so one dead zone costs one detection per
// hold-off, not one per batch. The one fan-out of deletes and aborts;
// unlike reads, it records health for a set of one bucket too: there is
// nowhere else to delete from, but nothing gained by asking a dead bucket
// every batch.
func (s *BucketSet) fanOut(ctx context.Context, outs []DeleteOutcome, op func(o *DeleteOutcome) (zoneWide bool)) {
	var asked []*DeleteOutcome
	for i := range outs {
		o := &outs[i]
		switch {
		case o.Err != nil:
		case s.health.Down(o.Bucket):
			o.HeldOff = true
		default:
			asked = append(asked, o)
		}
	}
	EachBucket(asked, func(o *DeleteOutcome) error {
		start := s.clock()
		zoneWide := op(o)
		switch {
		case o.Err == nil:
			s.health.Succeeded(o.Bucket)
		case zoneWide && ctx.Err() == nil:
			s.health.Failed(o.Bucket, s.clock().Sub(start))
		}
		return o.Err
	})
}

// EachBucket runs f on every bucket at once and returns each one's error in
// the order given: the one fan-out of a write or delete to every bucket of
// a class (BucketSet.Delete, and novasim's create-once slot writes, which
// need every zone's own answer to read back the ones whose reply was lost).
func EachBucket[B any](buckets []B, f func(B) error) []error {
	errs := make([]error, len(buckets))
	var wg sync.WaitGroup
	for i, b := range buckets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(b)
		}()
	}
	wg.Wait()
	return errs
}

// List lists prefix in every bucket of the set, one after another, and
// hands fn each object with the bucket it was listed in. A bucket the
// zone health holds off is skipped; in a set of more than one bucket, a
// listing that fails for its zone (IsRetryable: a timeout, a refused
// connection, a 5xx) holds the bucket off and is skipped too, after what
// it listed before was handed on. It returns the buckets skipped: what
// they hold is listed by a later call. fn's error, and any other failure
// (or the zone failure of a set of one), stops it and is returned.
func (s *BucketSet) List(ctx context.Context, prefix string, fn func(bucket string, o ObjectInfo) error) ([]string, error) {
	var skipped []string
	for _, zb := range s.read {
		b := zb.Bucket
		if s.health.Down(b) {
			skipped = append(skipped, b)
			continue
		}
		var fnErr error
		start := s.clock()
		err := s.store.List(ctx, b, prefix, func(o ObjectInfo) error {
			fnErr = fn(b, o)
			return fnErr
		})
		switch {
		case err == nil:
			s.health.Succeeded(b)
		case fnErr != nil:
			return skipped, fnErr
		case len(s.read) > 1 && IsRetryable(err) && ctx.Err() == nil:
			s.health.Failed(b, s.clock().Sub(start))
			skipped = append(skipped, b)
		default:
			return skipped, fmt.Errorf("list %s in bucket %s: %w", prefix, b, err)
		}
	}
	return skipped, nil
}
