package trim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// Strays (docs/architecture.md#strays) are objects that no metadata names:
// a settled key with no catalog row and no intent, or a slot behind the
// trim cursor in no slot reap. Finding them is the one use of listing
// (docs/metastore.md#no-listing); sweeping them never deletes directly:
// it arms reaps, and the reap step deletes what they name.

// The kinds of stray.
const (
	StraySettled = "settled" // under a stream's settled prefix
	StraySlot    = "slot"    // under the star's chain
)

// Stray is one object a listing found that no metadata names.
type Stray struct {
	Kind         string    `json:"kind"`
	Bucket       string    `json:"bucket"`
	Key          string    `json:"key"`
	Size         int64     `json:"size"`
	LastModified time.Time `json:"last_modified"`
	// Age is the least the stray can be old by the database clock's now,
	// read once before the listing (objstore.ObjectInfo.MinAge;
	// AgeSeconds the same in seconds).
	Age        time.Duration `json:"-"`
	AgeSeconds float64       `json:"age_seconds"`
	Stream     string        `json:"stream,omitempty"` // a settled stray's stream (its prefix's)
	// Parses: the key parses as a settled key (kind settled) or a slot key
	// of the star (kind slot). One that does not is reported, never swept.
	Parses bool `json:"parses"`
	// Unswept says why the sweep leaves the stray even past the guard
	// ("" when it sweeps it): an unparseable key, or a slot outside the
	// chain that no slot reap can name.
	Unswept string `json:"unswept,omitempty"`

	coords catalog.KeyCoords // settled, parsed
	slot   Pos               // slot, in the chain
}

// StrayCounts are what a listing for strays looked at and found.
type StrayCounts struct {
	Streams  int `json:"streams"`  // streams whose settled prefix was listed
	Buckets  int `json:"buckets"`  // buckets whose chain was listed
	Settled  int `json:"settled"`  // settled strays, unparseable keys included
	Slots    int `json:"slots"`    // slot strays
	Unparsed int `json:"unparsed"` // of both, the keys that do not parse
	// HeldOff are the buckets of the chain's class not listed: a zone held
	// off, or whose listing failed for the zone (the next sweep lists
	// them; the other zones' copies serve meanwhile).
	HeldOff []string `json:"held_off,omitempty"`
}

// StrayCatalog is what finding strays reads in Postgres (*catalog.Trim has
// it): the clock, the star's streams, which listed keys metadata names,
// and the chain with its slot reaps. It takes no lease.
type StrayCatalog interface {
	Now(ctx context.Context) (time.Time, error)
	StreamsOfStar(ctx context.Context, star string) ([]catalog.Stream, error)
	NamedSettledKeys(ctx context.Context, keys []catalog.ListedKey) ([]bool, error)
	TrimState(ctx context.Context, star string) (catalog.TrimState, error)
	SlotReaps(ctx context.Context, star string) ([]catalog.SlotReap, error)
}

// ErrListing marks a FindStrays error of the store's listing (credentials,
// access, transport), apart from the metastore's.
var ErrListing = errors.New("listing the store failed")

// listing runs list, whose callbacks return cb's errors through cbErr:
// a callback's error is returned as it is, the store's marked ErrListing.
func listing(list func() error, cbErr *error) error {
	err := list()
	switch {
	case err == nil:
		return nil
	case *cbErr != nil:
		return *cbErr
	}
	return fmt.Errorf("%w: %w", ErrListing, err)
}

// FindStrays lists the settled prefix of every stream of the star and the
// star's chain in every bucket of its class, and calls fn with each stray
// (from one goroutine at a time), listing concurrency streams at once.
// The chain's state and slot reaps are read before the listing (a slot
// reaped since is not a stray; one listed behind the cursor as read and
// in no reap as read was put back after its reap). A listing that fails
// returns its error, marked ErrListing: the strays handed to fn before it
// are a part. fn's error stops it and is returned. It returns what it
// looked at and the database clock it aged the strays by, read once
// before the listing.
func FindStrays(ctx context.Context, db StrayCatalog, rd *bundle.Reader, star string, concurrency int, fn func(Stray) error) (StrayCounts, time.Time, error) {
	var counts StrayCounts
	now, err := db.Now(ctx)
	if err != nil {
		return counts, now, err
	}
	ts, err := db.TrimState(ctx, star)
	if err != nil {
		return counts, now, err
	}
	reaps, err := db.SlotReaps(ctx, star)
	if err != nil {
		return counts, now, err
	}
	streams, err := db.StreamsOfStar(ctx, star)
	if err != nil {
		return counts, now, err
	}
	var mu sync.Mutex
	emit := func(s Stray) error {
		s.Age = objstore.ObjectInfo{LastModified: s.LastModified}.MinAge(now)
		s.AgeSeconds = s.Age.Seconds()
		mu.Lock()
		defer mu.Unlock()
		switch s.Kind {
		case StraySettled:
			counts.Settled++
		case StraySlot:
			counts.Slots++
		}
		if !s.Parses {
			counts.Unparsed++
		}
		return fn(s)
	}
	if err := findSlotStrays(ctx, rd, ts, reaps, emit, &counts); err != nil {
		return counts, now, err
	}
	// One lookup of which keys metadata names serves a page of keys from
	// every stream's listing: a statement per page, not per stream.
	unnamed := bundle.NewUnnamed(db.NamedSettledKeys, func(o bundle.SettledObject) error {
		return emit(Stray{Kind: StraySettled, Bucket: o.Bucket, Key: o.Key, Size: o.Size, LastModified: o.LastModified,
			Stream: o.Coords.Stream.String(), Parses: true, coords: o.Coords})
	})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(concurrency, 1))
	for _, st := range streams {
		g.Go(func() error { return findSettledStrays(gctx, rd, st, unnamed, emit) })
	}
	err = g.Wait()
	if err == nil {
		err = unnamed.Flush(ctx)
	}
	counts.Streams = len(streams)
	return counts, now, err
}

// findSettledStrays lists one stream's settled prefix into unnamed, which
// emits each key metadata does not name, and emits every key there that
// does not parse as a settled key.
func findSettledStrays(ctx context.Context, rd *bundle.Reader, st catalog.Stream, unnamed *bundle.Unnamed, emit func(Stray) error) error {
	var cbErr error
	return listing(func() error {
		return rd.ListSettled(ctx, st, func(o bundle.SettledObject) error {
			cbErr = unnamed.Add(ctx, o)
			return cbErr
		}, func(bucket string, o objstore.ObjectInfo, _ error) error {
			cbErr = emit(Stray{Kind: StraySettled, Bucket: bucket, Key: o.Key, Size: o.Size, LastModified: o.LastModified,
				Stream: st.ID.String(), Unswept: "not a settled key"})
			return cbErr
		})
	}, &cbErr)
}

// findSlotStrays lists the star's chain in every bucket of its class and
// emits each slot behind the trim cursor that no slot reap covers, and
// each key there that no slot reap can name. A slot at or past the
// cursor is the live chain.
func findSlotStrays(ctx context.Context, rd *bundle.Reader, ts catalog.TrimState, reaps []catalog.SlotReap, emit func(Stray) error, counts *StrayCounts) error {
	c, err := newChain(ts.Star, ts.Epochs)
	if err != nil {
		return err
	}
	cursor := Pos{Epoch: c.lowest}
	if ts.HasCursor {
		if cursor, err = c.norm(ts.Cursor); err != nil {
			return cycle.Haltf("trim cursor: %v", err)
		}
	}
	armed := make([][2]Pos, 0, len(reaps))
	for _, r := range reaps {
		from, err1 := c.norm(r.From)
		to, err2 := c.norm(r.To)
		if err := errors.Join(err1, err2); err != nil {
			return cycle.Haltf("slot reap #%d: %v", r.ID, err)
		}
		armed = append(armed, [2]Pos{from, to})
	}
	buckets, err := rd.Topology().Buckets(ts.Star.ChainClass)
	if err != nil {
		return fmt.Errorf("find the slot strays of star %q: %w", ts.Star.Star, err)
	}
	counts.Buckets = len(buckets)
	v := slotView{c: c, cursor: cursor, armed: armed}
	var cbErr error
	return listing(func() error {
		var err error
		counts.HeldOff, err = rd.ListSlots(ctx, ts.Star.ChainClass, ts.Star.Star, func(o bundle.SlotObject) error {
			if s, ok := v.stray(o); ok {
				cbErr = emit(s)
			}
			return cbErr
		}, func(bucket string, o objstore.ObjectInfo, _ error) error {
			cbErr = emit(Stray{Kind: StraySlot, Bucket: bucket, Key: o.Key, Size: o.Size, LastModified: o.LastModified,
				Unswept: "not a slot key of the star"})
			return cbErr
		})
		return err
	}, &cbErr)
}

// slotView is the chain as a listed slot is judged by: its epochs, the
// cursor (normalised) and the slot reaps' ranges (normalised).
type slotView struct {
	c      chain
	cursor Pos
	armed  [][2]Pos
}

// stray returns the stray a listed slot is, or false when it is not one:
// at or past the cursor (the live chain), of an epoch not begun yet (the
// write path's), or in a slot reap's range (the reap deletes it). A slot
// no slot reap range can name (before the lowest epoch, past its epoch's
// end_seq) is a stray the sweep never takes.
func (v slotView) stray(o bundle.SlotObject) (Stray, bool) {
	s := Stray{Kind: StraySlot, Bucket: o.Bucket, Key: o.Key, Size: o.Size, LastModified: o.LastModified, Parses: true}
	p := Pos{Epoch: o.Epoch, Seq: o.Seq}
	if _, ok := v.c.epoch(p.Epoch); !ok {
		if p.Epoch > v.c.head.Epoch {
			return s, false
		}
		s.Unswept = "in no epoch of the star"
		return s, true
	}
	if end, ok := v.c.endSeq(p.Epoch); ok && p.Seq >= end {
		s.Unswept = "past its epoch's end_seq"
		return s, true
	}
	if !p.Less(v.cursor) {
		return s, false
	}
	for _, r := range v.armed {
		if !p.Less(r[0]) && p.Less(r[1]) {
			return s, false
		}
	}
	s.slot = p
	return s, true
}

// slotRanges turns stray slot positions into the fewest ranges of
// consecutive slots of the chain, each [first, one past the last).
func slotRanges(c chain, slots []Pos) ([]catalog.SlotRange, error) {
	slices.SortFunc(slots, func(a, b Pos) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	slots = slices.Compact(slots) // a slot listed in several buckets of the set
	var out []catalog.SlotRange
	for _, p := range slots {
		next, err := c.norm(Pos{Epoch: p.Epoch, Seq: p.Seq + 1})
		if err != nil {
			return nil, err
		}
		if n := len(out); n > 0 && out[n-1].To == p {
			out[n-1].To = next
			continue
		}
		out = append(out, catalog.SlotRange{From: p, To: next})
	}
	return out, nil
}
