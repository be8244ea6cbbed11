package bundle

import (
	"context"
	"fmt"
	"strings"

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
	k := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), 0, 0)
	return k[:strings.LastIndexByte(k, '/')+1]
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
