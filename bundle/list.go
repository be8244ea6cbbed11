package bundle

import (
	"context"
	"fmt"
	"path"
	"sync"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// Listing is for finding what no metadata names (strays) and for
// reconciling the store with the catalog: nothing reads a bundle it found
// by listing (docs/metastore.md#no-listing).

// SettledObject is a settled object a listing found, with the coordinates
// its key parses to (bundlefmt.ParseSettledKey), as a catalog row and a
// key's base name them.
type SettledObject struct {
	objstore.ObjectInfo
	Bucket string // the bucket that holds it (the standard bucket)
	Coords catalog.KeyCoords
}

// SettledPrefix is the prefix of every settled key of a stream's epoch
// (docs/format.md#keys): buckets/<bucket>/streams/<hex>/<epoch>/.
func SettledPrefix(st catalog.Stream) string {
	return path.Dir(bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), 0, 0)) + "/"
}

// ListSettled lists the settled objects of a stream's epoch, under
// SettledPrefix in the bucket set of SettledClass, in no promised order.
// fn gets each object whose key parses as a settled key; unparsed gets
// every other key under the prefix, with why it does not parse. An error
// of either stops the listing and is returned; a listing that fails part
// way returns the store's error, wrapped, after handing on what it listed
// before (the caller decides whether a partial listing counts).
func (r *Reader) ListSettled(ctx context.Context, st catalog.Stream, fn func(SettledObject) error, unparsed func(bucket string, o objstore.ObjectInfo, err error) error) error {
	buckets, err := r.top.Buckets(SettledClass)
	if err != nil {
		return fmt.Errorf("list the settled objects of stream %s: %w", st.ID, err)
	}
	prefix := SettledPrefix(st)
	for _, b := range buckets {
		err := r.top.Store().List(ctx, b, prefix, func(o objstore.ObjectInfo) error {
			p, err := bundlefmt.ParseSettledKey(o.Key)
			if err != nil {
				return unparsed(b, o, err)
			}
			return fn(SettledObject{ObjectInfo: o, Bucket: b, Coords: catalog.KeyCoords{Bucket: p.Bucket, Stream: p.Stream,
				Epoch: int64(p.StreamEpoch), FirstRecord: int64(p.FirstRecord), Revision: int32(p.Revision)}})
		})
		if err != nil {
			return fmt.Errorf("list the settled objects of stream %s in %s: %w", st.ID, b, err)
		}
	}
	return nil
}

// Unnamed pages listed settled objects through named, the metastore's
// answer to which listed keys metadata names (catalog.Trim.NamedSettledKeys),
// and hands fn each object it does not name. One lookup serves
// catalog.NamedKeysPage objects whichever listings they come from, so a
// sweep of a star's many small streams costs a statement per page, not
// per stream. Add may be called from several listings at once; fn is
// called under the pager's lock, one object at a time. Flush hands on the
// last page.
type Unnamed struct {
	named func(context.Context, []catalog.ListedKey) ([]bool, error)
	fn    func(SettledObject) error

	mu   sync.Mutex
	page []SettledObject
}

// NewUnnamed returns a pager over named that hands fn the unnamed objects.
func NewUnnamed(named func(context.Context, []catalog.ListedKey) ([]bool, error), fn func(SettledObject) error) *Unnamed {
	return &Unnamed{named: named, fn: fn}
}

// Add pages o, looking the page up when it is full.
func (u *Unnamed) Add(ctx context.Context, o SettledObject) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.page = append(u.page, o)
	if len(u.page) < catalog.NamedKeysPage {
		return nil
	}
	return u.flush(ctx)
}

// Flush looks up what is paged.
func (u *Unnamed) Flush(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.flush(ctx)
}

func (u *Unnamed) flush(ctx context.Context) error {
	if len(u.page) == 0 {
		return nil
	}
	keys := make([]catalog.ListedKey, len(u.page))
	for i, o := range u.page {
		keys[i] = catalog.ListedKey{Key: o.Key, Coords: o.Coords}
	}
	named, err := u.named(ctx, keys)
	if err != nil {
		return fmt.Errorf("which of %d listed keys metadata names: %w", len(keys), err)
	}
	page := u.page
	u.page = nil
	for i, o := range page {
		if !named[i] {
			if err := u.fn(o); err != nil {
				return err
			}
		}
	}
	return nil
}

// SlotObject is a transit slot a listing found, with the position its
// key parses to (bundlefmt.ParseSlotKey).
type SlotObject struct {
	objstore.ObjectInfo
	Bucket     string // the bucket of the class's set that holds this copy
	Epoch, Seq int64
}

// ListSlots lists the chain of a star (stars/<star>/chain/) in every
// bucket of the class's set, bucket by bucket, in no promised order
// within one. fn gets each key that parses as a slot key of the star;
// unparsed every other key under the prefix, with why. A zone that is
// held off, or whose listing fails for the zone, is skipped
// (objstore.BucketSet.List): it returns the buckets skipped, whose slots
// a later listing finds. Other errors as ListSettled's.
func (r *Reader) ListSlots(ctx context.Context, class, star string, fn func(SlotObject) error, unparsed func(bucket string, o objstore.ObjectInfo, err error) error) ([]string, error) {
	set, err := r.top.Class(class)
	if err != nil {
		return nil, fmt.Errorf("list the chain of star %q: %w", star, err)
	}
	prefix := path.Dir(path.Dir(bundlefmt.SlotKey(star, 1, 0))) + "/" // stars/<star>/chain/
	skipped, err := set.List(ctx, prefix, func(b string, o objstore.ObjectInfo) error {
		s, epoch, seq, err := bundlefmt.ParseSlotKey(o.Key)
		if err == nil && s != star {
			err = fmt.Errorf("slot key %q is of star %q", o.Key, s)
		}
		if err != nil {
			return unparsed(b, o, err)
		}
		return fn(SlotObject{ObjectInfo: o, Bucket: b, Epoch: int64(epoch), Seq: int64(seq)})
	})
	if err != nil {
		return skipped, fmt.Errorf("list the chain of star %q: %w", star, err)
	}
	return skipped, nil
}
