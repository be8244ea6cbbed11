package objstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
)

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
