package objstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// ZoneBucket names the bucket that serves one zone.
type ZoneBucket struct {
	Zone, Bucket string
}

// BucketSet is where one class of objects lives (docs/architecture.md#buckets-and-zone-health): for
// an express star, the same key in every zone's directory bucket; for a
// standard star, the standard bucket alone (SingleBucket). Callers use one
// code path for both.
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

// SingleBucket is the set of one bucket (zone "").
func SingleBucket(store Store, bucket string) *BucketSet {
	return &BucketSet{store: store, read: []ZoneBucket{{Bucket: bucket}}}
}

// ReadBuckets returns the buckets in read order, local zone first.
func (s *BucketSet) ReadBuckets() []ZoneBucket { return append([]ZoneBucket(nil), s.read...) }

// Store returns the store the set reads and writes.
func (s *BucketSet) Store() Store { return s.store }

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

// ResolveSources fills in, for each range piece without a SrcBucket, the
// bucket of the set that holds its key (and pins that object's ETag when
// no pin is set), so that an assembly reads its sources from the set and
// writes into another bucket.
func (s *BucketSet) ResolveSources(ctx context.Context, pieces []Piece) error {
	type found struct {
		bucket, etag string
	}
	seen := map[string]found{}
	for i := range pieces {
		p := &pieces[i]
		if p.SrcKey == "" || p.SrcBucket != "" {
			continue
		}
		f, ok := seen[p.SrcKey]
		if !ok {
			a, zb, err := s.Head(ctx, p.SrcKey)
			if err != nil {
				return fmt.Errorf("locate source %s: %w", p.SrcKey, err)
			}
			f = found{zb.Bucket, a.ETag}
			seen[p.SrcKey] = f
		}
		p.SrcBucket = f.bucket
		if p.SrcETag == "" {
			p.SrcETag = f.etag
		}
	}
	return nil
}

// PutIfAbsentAll writes the object create-once into every bucket at once.
// ErrExists from any bucket means the key is taken and is returned as
// such; otherwise the failed zones' errors are returned together.
func (s *BucketSet) PutIfAbsentAll(ctx context.Context, key string, data []byte) error {
	errs := s.each(func(zb ZoneBucket) error { return s.store.PutIfAbsent(ctx, zb.Bucket, key, data) })
	var failed []error
	for i, err := range errs {
		if errors.Is(err, ErrExists) {
			return fmt.Errorf("put %s: zone %q (%s): %w", key, s.read[i].Zone, s.read[i].Bucket, err)
		}
		if err != nil {
			failed = append(failed, fmt.Errorf("zone %q (%s): %w", s.read[i].Zone, s.read[i].Bucket, err))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("put %s: %w", key, errors.Join(failed...))
	}
	return nil
}

// DeleteAll deletes the keys from every bucket (absence is success) and
// returns the zones where some key could not be deleted, for a retry.
func (s *BucketSet) DeleteAll(ctx context.Context, keys []string) ([]ZoneBucket, error) {
	errs := s.each(func(zb ZoneBucket) error { return s.store.Delete(ctx, zb.Bucket, keys) })
	var failedZones []ZoneBucket
	var failed []error
	for i, err := range errs {
		if err != nil {
			failedZones = append(failedZones, s.read[i])
			failed = append(failed, fmt.Errorf("zone %q (%s): %w", s.read[i].Zone, s.read[i].Bucket, err))
		}
	}
	if len(failed) > 0 {
		return failedZones, fmt.Errorf("delete %d keys: %w", len(keys), errors.Join(failed...))
	}
	return nil, nil
}

// each runs f on every bucket concurrently.
func (s *BucketSet) each(f func(ZoneBucket) error) []error {
	errs := make([]error, len(s.read))
	var wg sync.WaitGroup
	for i, zb := range s.read {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = f(zb)
		}()
	}
	wg.Wait()
	return errs
}
