package objstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ZoneBucket names the bucket that serves one zone.
type ZoneBucket struct {
	Zone, Bucket string
}

// BucketSet is where one class of objects lives (docs/architecture.md#buckets-and-zone-health): for
// an express star, the same key in every zone's directory bucket; for a
// standard star, the standard bucket alone (a set of one bucket of zone
// ""). Callers use one code path for both.
//
// A Topology holds one set per class; steps get their sets from it.
//
// Reads try the local zone's bucket first and fall through to the others on
// a miss, a missing bucket or a retryable failure, counting each
// fall-through when the store is instrumented. Writes and deletes go to
// every bucket.
//
// With SetHealth, a bucket whose read failed with anything but a miss (a
// down zone) goes to the back of the read order while the shared Health
// holds it off, so during an outage each read does not pay that zone's
// retries again; a success puts it back.
type BucketSet struct {
	store  Store
	read   []ZoneBucket // local zone first
	health *Health      // nil: none
	now    func() time.Time
}

// SetHealth makes the set's reads record into, and order by, h.
func (s *BucketSet) SetHealth(h *Health) { s.health = h }

// order is the read order now: the buckets not held off first.
func (s *BucketSet) order() []ZoneBucket {
	if s.health == nil {
		return s.read
	}
	up := make([]ZoneBucket, 0, len(s.read))
	var held []ZoneBucket
	for _, zb := range s.read {
		if s.health.Down(zb.Bucket) {
			held = append(held, zb)
		} else {
			up = append(up, zb)
		}
	}
	return append(up, held...)
}

func (s *BucketSet) clock() time.Time {
	if s.now != nil {
		return s.now()
	}
	return time.Now()
}

// record notes a read's outcome: a failure other than a miss holds the
// bucket off for at least the time it took, a success clears it. A set of
// one bucket has nowhere else to read from and records nothing.
func (s *BucketSet) record(bucket string, err error, took time.Duration) {
	if len(s.read) < 2 || s.health == nil {
		return
	}
	switch {
	case err == nil:
		s.health.Succeeded(bucket)
	case !errors.Is(err, ErrNotFound) && !errors.Is(err, context.Canceled):
		s.health.Failed(bucket, took)
	}
}

// NewBucketSet returns the set of buckets; reads prefer localZone's bucket
// (a zone without a bucket in the set just keeps the given order).
func NewBucketSet(store Store, buckets []ZoneBucket, localZone string) (*BucketSet, error) {
	if len(buckets) == 0 {
		return nil, errors.New("bucket set: no buckets")
	}
	zones, names := map[string]bool{}, map[string]bool{}
	var read []ZoneBucket
	for _, zb := range buckets {
		if zones[zb.Zone] || names[zb.Bucket] || zb.Bucket == "" {
			return nil, fmt.Errorf("bucket set: zone %q or bucket %q named twice or empty", zb.Zone, zb.Bucket)
		}
		zones[zb.Zone], names[zb.Bucket] = true, true
		if zb.Zone == localZone {
			read = append([]ZoneBucket{zb}, read...)
		} else {
			read = append(read, zb)
		}
	}
	return &BucketSet{store: store, read: read}, nil
}

// Buckets returns the names of the set's buckets in read order, the local
// zone's first.
func (s *BucketSet) Buckets() []string {
	out := make([]string, len(s.read))
	for i, zb := range s.read {
		out[i] = zb.Bucket
	}
	return out
}

// FallThroughCounter is implemented by stores that count read
// fall-throughs (the Instrument wrapper).
type FallThroughCounter interface {
	CountFallThrough(zone string)
}

// fallsThrough: a read error after which the next bucket may answer.
func fallsThrough(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrBucketNotFound) || IsRetryable(err)
}

// readFirst runs read against each bucket in order until one answers. When
// every bucket misses, the error is ErrNotFound only if each said so; if
// any failed otherwise, absence cannot be told and the error is that
// (retryable) failure.
func (s *BucketSet) readFirst(key string, read func(ZoneBucket) error) (ZoneBucket, error) {
	var failure error
	order := s.order()
	for i, zb := range order {
		start := s.clock()
		err := read(zb)
		if err == nil || !fallsThrough(err) {
			if err == nil {
				s.record(zb.Bucket, nil, 0)
			}
			return zb, err
		}
		s.record(zb.Bucket, err, s.clock().Sub(start))
		if !errors.Is(err, ErrNotFound) && failure == nil {
			failure = fmt.Errorf("zone %q (%s): %w", zb.Zone, zb.Bucket, err)
		}
		if i < len(order)-1 {
			if c, ok := s.store.(FallThroughCounter); ok {
				c.CountFallThrough(zb.Zone)
			}
		}
	}
	if failure != nil {
		return ZoneBucket{}, fmt.Errorf("read %s from %d buckets: %w", key, len(s.read), failure)
	}
	return ZoneBucket{}, fmt.Errorf("read %s from %d buckets: %w", key, len(s.read), ErrNotFound)
}

// GetRange reads a range from the first bucket that has the key.
func (s *BucketSet) GetRange(ctx context.Context, key string, off, n int64) ([]byte, int64, error) {
	var data []byte
	var size int64
	_, err := s.readFirst(key, func(zb ZoneBucket) error {
		var err error
		data, size, err = s.store.GetRange(ctx, zb.Bucket, key, off, n)
		return err
	})
	return data, size, err
}

// GetSuffix reads the last n bytes from the first bucket that has the key.
func (s *BucketSet) GetSuffix(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	var data []byte
	var size int64
	_, err := s.readFirst(key, func(zb ZoneBucket) error {
		var err error
		data, size, err = s.store.GetSuffix(ctx, zb.Bucket, key, n)
		return err
	})
	return data, size, err
}

// Head finds the first bucket that has the key.
func (s *BucketSet) Head(ctx context.Context, key string) (Attrs, ZoneBucket, error) {
	var a Attrs
	zb, err := s.readFirst(key, func(zb ZoneBucket) error {
		var err error
		a, err = s.store.Head(ctx, zb.Bucket, key)
		return err
	})
	return a, zb, err
}

// CopySource is the bucket an assembly copies a source of the set from:
// the first in read order (the local zone first) that the zone health does
// not hold off.
func (s *BucketSet) CopySource() string { return s.order()[0].Bucket }

// has reports whether bucket is one of the set's.
func (s *BucketSet) has(bucket string) bool {
	for _, zb := range s.read {
		if zb.Bucket == bucket {
			return true
		}
	}
	return false
}

// SourceFailed records that bucket failed as a copy source (a down zone,
// or a missing copy of a slot) and reports whether another bucket of the
// set is left to copy from, as reads fall through. A set of one bucket, or
// a bucket not in the set, leaves nothing to try and records nothing.
//
// The failure is held off for the minimum hold-off (doubling while it
// repeats): an assembly's duration says nothing of how long the failure
// took to detect, and reads, which time each request, record that.
func (s *BucketSet) SourceFailed(bucket string) bool {
	if len(s.read) < 2 || s.health == nil || !s.has(bucket) {
		return false
	}
	s.health.Failed(bucket, 0)
	for _, zb := range s.read {
		if !s.health.Down(zb.Bucket) {
			// Another zone, not the one that failed: a health that never
			// holds off (HoldOffMin 0) must not send the caller back to it
			// for ever.
			return s.CopySource() != bucket
		}
	}
	return false
}

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
