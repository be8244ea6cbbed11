package objstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Where objects live and which zone is down: the Topology every step is
// handed, the BucketSet of each slot class (reads falling through to
// another zone, the copy source), the zone Health they share, and the
// per-attempt deadlines (AttemptTimeouts) that cut a stalled request, so
// that a stalled zone is found failed and held off.

// Topology is the one answer to "which bucket, and which zone is down"
// (docs/architecture.md#buckets-and-zone-health), built once by the binary
// and handed to every step: the standard bucket (every settled object),
// the bucket set that holds the slots of each class, and the zone health
// that slot reads, copy sources and deletes all record into and order by.
// The class names are the caller's; StarTopology is the bucket policy of a
// star's two classes.
type Topology struct {
	store    Store
	standard string
	classes  map[string]*BucketSet
	health   *Health
	// unset names the classes the caller knows but gave no buckets, with
	// how to configure them (unconfigured).
	unset map[string]string
}

// NewTopology returns the topology over store: standard is the standard
// bucket; classes gives each slot class its buckets (one bucket of zone ""
// for a class kept in one bucket), reads preferring localZone's. Every set
// shares health (nil: a record of its own, with HoldOffMin and HoldOffMax).
func NewTopology(store Store, standard string, classes map[string][]ZoneBucket, localZone string, health *Health) (*Topology, error) {
	if standard == "" {
		return nil, fmt.Errorf("topology: no standard bucket")
	}
	if health == nil {
		health = NewHealth(HoldOffMin, HoldOffMax)
	}
	t := &Topology{store: store, standard: standard, classes: map[string]*BucketSet{}, health: health, unset: map[string]string{}}
	owner := map[string]string{} // bucket -> class
	for _, class := range slices.Sorted(maps.Keys(classes)) {
		set, err := NewBucketSet(store, classes[class], localZone)
		if err != nil {
			return nil, fmt.Errorf("topology: class %s: %w", class, err)
		}
		// A bucket holds the slots of one class: which set a failed copy
		// source or a delete belongs to must have one answer.
		for _, zb := range set.read {
			if other, ok := owner[zb.Bucket]; ok {
				return nil, fmt.Errorf("topology: bucket %s holds both class %s and class %s", zb.Bucket, other, class)
			}
			owner[zb.Bucket] = class
		}
		set.SetHealth(health)
		t.classes[class] = set
	}
	return t, nil
}

// ClassNames are the caller's names of a star's two slot classes (the
// metastore's chain classes), for StarTopology.
type ClassNames struct{ Standard, Express string }

// StarTopology is the one statement of the bucket policy
// (docs/architecture.md#buckets-and-zone-health): the standard bucket
// holds every settled object and the slots of the standard class; the
// slots of the express class are in every bucket of the express set,
// reads and copies preferring localZone's bucket. With no express set the
// express class is left unconfigured: a read, copy or delete of an express
// slot fails naming expressHow (how to configure it, e.g. a flag). health
// is the zone health every set shares (nil: a fresh one).
func StarTopology(store Store, names ClassNames, standard string, express []ZoneBucket, localZone, expressHow string, health *Health) (*Topology, error) {
	classes := map[string][]ZoneBucket{names.Standard: {{Bucket: standard}}}
	if len(express) > 0 {
		classes[names.Express] = express
	}
	t, err := NewTopology(store, standard, classes, localZone, health)
	if err != nil {
		return nil, err
	}
	if len(express) == 0 {
		t.unconfigured(names.Express, expressHow)
	}
	return t, nil
}

// unconfigured names a class the caller knows of but gave no buckets, and
// how an operator gives it some (a flag): a read, copy or delete of that
// class fails saying so, where an unknown class fails as unknown.
func (t *Topology) unconfigured(class, how string) { t.unset[class] = how }

// Store is the store every bucket of the topology is on.
func (t *Topology) Store() Store { return t.store }

// Standard is the standard bucket: every settled object lives there.
func (t *Topology) Standard() string { return t.standard }

// Health is the zone health the topology's sets share.
func (t *Topology) Health() *Health { return t.health }

// Class returns the bucket set of a class's slots; an error names a class
// the topology has no buckets for.
func (t *Topology) Class(class string) (*BucketSet, error) {
	set, ok := t.classes[class]
	if ok {
		return set, nil
	}
	if how, known := t.unset[class]; known {
		return nil, fmt.Errorf("%s class but no %s buckets configured (%s)", class, class, how)
	}
	return nil, fmt.Errorf("unknown class %q", class)
}

// Buckets returns the names of a class's buckets in read order.
func (t *Topology) Buckets(class string) ([]string, error) {
	set, err := t.Class(class)
	if err != nil {
		return nil, err
	}
	return set.Buckets(), nil
}

// All returns every bucket of the topology once: the standard bucket
// first, then each class's (classes in name order) in read order.
func (t *Topology) All() []string {
	out := []string{t.standard}
	for _, class := range slices.Sorted(maps.Keys(t.classes)) {
		for _, zb := range t.classes[class].read {
			if zb.Bucket != t.standard {
				out = append(out, zb.Bucket)
			}
		}
	}
	return out
}

// GetRange reads a range of a slot of a class from the first bucket of the
// class's set that has it.
func (t *Topology) GetRange(ctx context.Context, class, key string, off, n int64) ([]byte, int64, error) {
	set, err := t.Class(class)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", key, err)
	}
	return set.GetRange(ctx, key, off, n)
}

// GetSuffix reads the last n bytes of an object of a class from the first
// bucket of the class's set that has it.
func (t *Topology) GetSuffix(ctx context.Context, class, key string, n int64) ([]byte, int64, error) {
	set, err := t.Class(class)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", key, err)
	}
	return set.GetSuffix(ctx, key, n)
}

// CopySource is the bucket an assembly copies a slot of a class from
// (BucketSet.CopySource).
func (t *Topology) CopySource(class string) (string, error) {
	set, err := t.Class(class)
	if err != nil {
		return "", err
	}
	return set.CopySource(), nil
}

// SourceFailed records that bucket failed as a copy source and reports
// whether another bucket of its set is left to copy from
// (BucketSet.SourceFailed); a bucket of no set of several leaves nothing.
func (t *Topology) SourceFailed(bucket string) bool {
	for _, set := range t.classes {
		if set.has(bucket) {
			return set.SourceFailed(bucket) // a bucket is in one class's set
		}
	}
	return false
}

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

// Health is the one memory, shared by slot reads, copy sources and deletes,
// of which buckets are failing (a zone that is down or stalls). A bucket
// that failed is held off: reads and copies try it last, deletes skip it,
// so an outage costs one detection, not one per request. The hold-off is
// at least as long as the failure took to detect (a stalled zone is found
// only after attempts x the attempt timeout, and holding it off for less
// would spend most of the outage waiting on it again) and doubles while the
// bucket keeps failing, up to a maximum; a success clears it. It lasts
// across cycles for as long as the process runs.
type Health struct {
	min, max time.Duration
	now      func() time.Time

	mu    sync.Mutex
	state map[string]*heldOff
}

type heldOff struct {
	until time.Time
	hold  time.Duration
	fails int
}

// Hold-off bounds the auditor uses: a failed bucket is held off for at
// least HoldOffMin, and at most HoldOffMax however long it stays bad.
const (
	HoldOffMin = 30 * time.Second
	HoldOffMax = 15 * time.Minute
)

// NewHealth returns an empty health record with hold-offs in [min, max]
// (min 0: never hold off).
func NewHealth(min, max time.Duration) *Health {
	return &Health{min: min, max: max, state: map[string]*heldOff{}}
}

func (h *Health) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// Failed records a failure of bucket that took took to detect.
func (h *Health) Failed(bucket string, took time.Duration) {
	if h == nil || h.min <= 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state[bucket]
	if st == nil {
		st = &heldOff{}
		h.state[bucket] = st
	}
	hold := max(h.min, took, 2*st.hold)
	if h.max > 0 {
		hold = min(hold, max(h.max, took))
	}
	st.hold, st.fails = hold, st.fails+1
	st.until = h.clock().Add(hold)
}

// Succeeded clears bucket's hold-off.
func (h *Health) Succeeded(bucket string) {
	if h == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.state, bucket)
}

// Down reports whether bucket is held off now.
func (h *Health) Down(bucket string) bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state[bucket]
	return st != nil && h.clock().Before(st.until)
}

// HeldOff returns bucket's hold-off now (0 when it is not held off) and its
// failures in a row.
func (h *Health) HeldOff(bucket string) (time.Duration, int) {
	if h == nil {
		return 0, 0
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	st := h.state[bucket]
	if st == nil {
		return 0, 0
	}
	left := st.until.Sub(h.clock())
	if left < 0 {
		left = 0
	}
	return left, st.fails
}

// OpClass is a class of S3 operations sharing one attempt deadline
// (AttemptTimeouts).
type OpClass string

// The operation classes. The S3 backend puts each of its operations in
// one (s3store's opClass).
const (
	OpRead    OpClass = "read"    // GetObject, HeadObject
	OpWrite   OpClass = "write"   // PutObject, UploadPart: the body goes up
	OpCopy    OpClass = "copy"    // UploadPartCopy: the server copies the range before it answers
	OpDelete  OpClass = "delete"  // DeleteObjects
	OpList    OpClass = "list"    // ListObjectsV2, ListParts, ListMultipartUploads
	OpControl OpClass = "control" // Create/Complete/AbortMultipartUpload, bucket settings
)

// OpClasses lists every class.
func OpClasses() []OpClass {
	return []OpClass{OpRead, OpWrite, OpCopy, OpDelete, OpList, OpControl}
}

// AttemptTimeouts are the deadlines of one S3 request attempt, by the
// class of its operation: an attempt that has no complete answer by then
// is cut and retried (within MaxAttempts and the caller's deadline). A
// GET or a part upload carries up to a part's bytes; an UploadPartCopy
// and a CompleteMultipartUpload work server side before the answer, which
// can take minutes on AWS for large ranges or many parts.
type AttemptTimeouts struct {
	Read, Write, Copy, Delete, List, Control time.Duration
}

// Of is the deadline of class c (the longest of all for an unknown class,
// so no attempt is cut shorter than any class allows).
func (t AttemptTimeouts) Of(c OpClass) time.Duration {
	if p := t.Field(c); p != nil {
		return *p
	}
	return max(t.Read, t.Write, t.Copy, t.Delete, t.List, t.Control)
}

// Field points at the deadline of class c in t (nil for an unknown class),
// for configuration that sets the classes one by one.
func (t *AttemptTimeouts) Field(c OpClass) *time.Duration {
	switch c {
	case OpRead:
		return &t.Read
	case OpWrite:
		return &t.Write
	case OpCopy:
		return &t.Copy
	case OpDelete:
		return &t.Delete
	case OpList:
		return &t.List
	case OpControl:
		return &t.Control
	}
	return nil
}

// UniformAttemptTimeouts gives every class the deadline d.
func UniformAttemptTimeouts(d time.Duration) AttemptTimeouts {
	return AttemptTimeouts{Read: d, Write: d, Copy: d, Delete: d, List: d, Control: d}
}

// DefaultAttemptTimeouts are the attempt deadlines by default (the
// Default*AttemptTimeout constants).
func DefaultAttemptTimeouts() AttemptTimeouts {
	return AttemptTimeouts{Read: DefaultReadAttemptTimeout, Write: DefaultWriteAttemptTimeout,
		Copy: DefaultCopyAttemptTimeout, Delete: DefaultDeleteAttemptTimeout,
		List: DefaultListAttemptTimeout, Control: DefaultControlAttemptTimeout}
}

// Validate checks that every class has a positive deadline.
func (t AttemptTimeouts) Validate() error {
	var errs []error
	for _, c := range OpClasses() {
		if d := t.Of(c); d <= 0 {
			errs = append(errs, fmt.Errorf("AttemptTimeouts.%s: %s must be positive", c, d))
		}
	}
	return errors.Join(errs...)
}
