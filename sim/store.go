package sim

import (
	"context"
	"errors"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// Store is what novasim needs of object storage, by bucket. wire.SimStore
// adapts an objstore.Store to it; tests may fake it.
type Store interface {
	// PutIfAbsent writes data at key create-once; an error wrapping
	// objstore.ErrExists when the key is taken.
	PutIfAbsent(ctx context.Context, bucket, key string, data []byte) error
	// GetRange reads [off, off+n) of the object at key (fewer bytes at its
	// end) and returns them with the object's total size; an error wrapping
	// objstore.ErrNotFound when there is no object.
	GetRange(ctx context.Context, bucket, key string, off, n int64) ([]byte, int64, error)
	// List calls fn for every object under prefix, in any order.
	List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error
}

// Storage says where novasim's objects live (docs/architecture.md#buckets-and-zone-health): the
// standard bucket holds standard-class slots and every settled object; an
// express star's slots live in every bucket of the express set, the
// preferred one (--location) first.
type Storage struct {
	Store    Store
	Standard string
	Express  []string
}

// slotBuckets returns the buckets that hold a chain of the class.
func (s Storage) slotBuckets(class string) []string {
	if class == catalog.ClassExpress {
		return s.Express
	}
	return []string{s.Standard}
}

func isExists(err error) bool   { return errors.Is(err, objstore.ErrExists) }
func isNotFound(err error) bool { return errors.Is(err, objstore.ErrNotFound) }
