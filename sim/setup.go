package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// SetupOptions says what Setup creates.
type SetupOptions struct {
	Star          string   // the standard star
	ExpressStar   string   // the express star (default Star + "-x"); created when ExpressShare > 0
	Streams       int      // streams in all (at least 1)
	ExpressShare  float64  // share of the streams on the express star, in [0, 1]
	StreamBuckets []string // Nova buckets of the streams' settled objects, dealt round-robin (default ["b0"])
	FenceWindow   int      // the stars' fence_window: most slot PUTs in flight (default 4)
	Content       Content  // the content profile of both stars (Seed and sizes)
}

// Fixture is what Setup created.
type Fixture struct {
	Stars []FixtureStar
}

// FixtureStar is one created star and its streams (in stream ID order).
type FixtureStar struct {
	Star    string
	Class   string
	Streams []bundlefmt.StreamID
}

func (o *SetupOptions) defaults() error {
	if o.ExpressStar == "" {
		o.ExpressStar = o.Star + "-x"
	}
	if len(o.StreamBuckets) == 0 {
		o.StreamBuckets = []string{"b0"}
	}
	if o.FenceWindow == 0 {
		o.FenceWindow = 4
	}
	var errs []error
	if !bundlefmt.ValidStar(o.Star) {
		errs = append(errs, fmt.Errorf("star: %q must match [a-z0-9][a-z0-9-]{0,62}", o.Star))
	}
	if o.ExpressShare > 0 && (!bundlefmt.ValidStar(o.ExpressStar) || o.ExpressStar == o.Star) {
		errs = append(errs, fmt.Errorf("express-star: %q must be a valid star name other than %q", o.ExpressStar, o.Star))
	}
	if o.Streams < 1 {
		errs = append(errs, fmt.Errorf("streams: %d must be at least 1", o.Streams))
	}
	if !(o.ExpressShare >= 0 && o.ExpressShare <= 1) {
		errs = append(errs, fmt.Errorf("express-share: %v outside [0, 1]", o.ExpressShare))
	}
	for _, b := range o.StreamBuckets {
		if !bundlefmt.ValidBucket(b) {
			errs = append(errs, fmt.Errorf("stream-buckets: %q must match [a-z0-9][a-z0-9._-]{0,62}", b))
		}
	}
	if o.FenceWindow < 1 || o.FenceWindow > 1024 {
		errs = append(errs, fmt.Errorf("fence-window: %d outside [1, 1024]", o.FenceWindow))
	}
	if err := o.Content.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ErrUsage marks errors in the caller's options (the CLI exits 2 on them).
var ErrUsage = errors.New("usage")

// Setup creates the standard star and, with ExpressShare > 0, the express
// star, each with its epoch-1 row, its content profile and its streams, one
// transaction per star. Stream IDs are a pure function of (seed, star,
// index), so the same options give the same streams.
func Setup(ctx context.Context, db *catalog.DB, opts SetupOptions) (Fixture, error) {
	if err := opts.defaults(); err != nil {
		return Fixture{}, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	nExpress := int(math.Round(float64(opts.Streams) * opts.ExpressShare))
	if opts.ExpressShare > 0 && nExpress == 0 {
		nExpress = 1
	}
	plan := []struct {
		star, class string
		n           int
	}{
		{opts.Star, catalog.ClassStandard, opts.Streams - nExpress},
		{opts.ExpressStar, catalog.ClassExpress, nExpress},
	}
	wp := writepath.New(db)
	if err := wp.Setup(ctx); err != nil {
		return Fixture{}, err
	}
	var fx Fixture
	for _, p := range plan {
		if p.n == 0 && p.class == catalog.ClassExpress {
			continue
		}
		fs := FixtureStar{Star: p.star, Class: p.class}
		streams := make([]writepath.NewStream, p.n)
		for i := range streams {
			id := streamID(opts.Content.Seed, p.star, i)
			streams[i] = writepath.NewStream{ID: id, Bucket: opts.StreamBuckets[i%len(opts.StreamBuckets)]}
			fs.Streams = append(fs.Streams, id)
		}
		prof := writepath.SimStar{
			Star: p.star, Seed: int64(opts.Content.Seed),
			MinBytes: int64(opts.Content.MinBytes), MaxBytes: int64(opts.Content.MaxBytes),
			HeaderShare: opts.Content.HeaderShare, EmptyShare: opts.Content.EmptyShare,
		}
		if err := wp.SetupStar(ctx, p.class, opts.FenceWindow, prof, streams); err != nil {
			return fx, fmt.Errorf("set up star %q: %w", p.star, err)
		}
		sortIDs(fs.Streams)
		fx.Stars = append(fx.Stars, fs)
	}
	return fx, nil
}

// streamID derives a version-4-shaped UUID from (seed, star, index).
func streamID(seed uint64, star string, i int) bundlefmt.StreamID {
	h := mix64(seed ^ 0x73747265616d) // "stream"
	for _, c := range []byte(star) {
		h = mix64(h ^ uint64(c))
	}
	h = mix64(h ^ uint64(i))
	var id bundlefmt.StreamID
	binary.BigEndian.PutUint64(id[0:8], h)
	binary.BigEndian.PutUint64(id[8:16], mix64(h^0x5bd1e995))
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	return id
}

// contentOf turns a recorded profile back into a Content.
func contentOf(p writepath.SimStar) Content {
	return Content{Seed: uint64(p.Seed), MinBytes: int(p.MinBytes), MaxBytes: int(p.MaxBytes),
		HeaderShare: p.HeaderShare, EmptyShare: p.EmptyShare}
}
