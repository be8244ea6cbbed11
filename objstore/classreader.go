package objstore

import (
	"context"
	"fmt"
)

// ClassReader reads a slot of a class from that class's buckets: each class
// names one BucketSet (the standard bucket alone, or an express set), read
// in zone order with the set's zone health. The class names are the
// caller's; objstore does not interpret them.
type ClassReader struct {
	sets map[string]*BucketSet // by class
}

// NewClassReader returns a reader over the bucket set of each class. A class
// without a set fails every read.
func NewClassReader(sets map[string]*BucketSet) *ClassReader {
	r := &ClassReader{sets: make(map[string]*BucketSet, len(sets))}
	for class, set := range sets {
		r.sets[class] = set
	}
	return r
}

// GetRange reads a range of key from the first bucket of the class's set
// that has it.
func (r *ClassReader) GetRange(ctx context.Context, class, key string, off, n int64) ([]byte, int64, error) {
	set, ok := r.sets[class]
	if !ok {
		return nil, 0, fmt.Errorf("read %s: no bucket configured for class %s", key, class)
	}
	return set.GetRange(ctx, key, off, n)
}
