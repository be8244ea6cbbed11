package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// ObjectReader is what verify needs of the store (bundle.Reader has it):
// bytes [off, off+n) of the settled object at key (fewer only at its
// end) and its size. A missing object is objstore.ErrNotFound; an empty
// object is objstore.ErrInvalidRange (both findings). Every other read
// error is a failure to look (ErrStoreAccess).
type ObjectReader interface {
	ObjectRange(ctx context.Context, key string, off, n int64) (data []byte, size int64, err error)
}

// CatalogReader is what verify reads of the metastore (*catalog.Streams has
// it): the star's streams, each stream's entries, and its erasures.
type CatalogReader interface {
	StreamsOfStar(ctx context.Context, star string) ([]catalog.Stream, error)
	EntriesOfStream(ctx context.Context, id catalog.StreamID) ([]catalog.Entry, error)
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
}

// DefaultWindow is the most chunk bytes verify holds per object it reads
// (Options.Window): an object is read in ranges, its footer window once
// and its chunks in windows of whole records.
const DefaultWindow = 4 << 20

// Options configure Verify.
type Options struct {
	Star string
	// Stream, when set, verifies that stream only.
	Stream *catalog.StreamID
	// Concurrency bounds objects read at once (default 4).
	Concurrency int
	// Window bounds the chunk bytes held per object being read (default
	// DefaultWindow; a record longer than it is read alone). Memory is at
	// most Concurrency x (footer window + max(Window, the longest record)).
	Window int64
	// Sample, in (0, 1], verifies that fraction of the objects, chosen at
	// random (0 or 1: all); tiling is checked for every stream whatever it.
	Sample float64
	// Rate, when positive, paces the reads to at most that many bytes per
	// second overall.
	Rate int64
	// Progress, when set, is called after each object with the objects
	// verified so far and the streams begun of all (the total of objects
	// is not known ahead: streams are read one at a time).
	Progress func(objects, stream, streams int)
}

// Finding kinds. Those that are also quarantine classes are spelled as
// quarantine rows spell them (cycle.Class*; the format's three are
// bundlefmt.ClassOf's names).
const (
	FindingMissing     = cycle.ClassMissing     // the entry's object does not exist
	FindingCorrupt     = cycle.ClassCorrupt     // it does not decode as a settled bundle
	FindingChecksum    = cycle.ClassChecksum    // a CRC does not match
	FindingUnsupported = cycle.ClassUnsupported // written by a newer format: a deploy problem, not corruption
	FindingMismatch    = "mismatch"             // it decodes but is not what the catalog says
	FindingTiling      = cycle.ClassTiling      // the stream's entries overlap, leave a gap, or miss settled_through
	// FindingErasure (erasure.go): an applied erasure's record held
	// as anything but a tombstone.
)

// Finding is one problem verify found.
type Finding struct {
	Kind   string `json:"kind"`
	Stream string `json:"stream"`
	Key    string `json:"key,omitempty"` // the object's key (absent for a tiling finding between entries)
	Detail string `json:"detail"`
}

func (f Finding) String() string {
	if f.Key != "" {
		return fmt.Sprintf("%s: %s: %s", f.Kind, f.Key, f.Detail)
	}
	return fmt.Sprintf("%s: stream %s: %s", f.Kind, f.Stream, f.Detail)
}

// Report is what Verify checked and found.
type Report struct {
	Streams int `json:"streams"`
	Objects int `json:"objects"` // objects verified
	// Cataloged is every object the streams' entries name; Objects is
	// fewer only with Options.Sample.
	Cataloged int       `json:"cataloged"`
	Bytes     int64     `json:"bytes"` // bytes read
	Findings  []Finding `json:"findings"`
}

// ErrStoreAccess marks a Verify that could not read the store (credentials,
// permissions, transport): nothing was judged, so nothing is reported
// corrupt.
var ErrStoreAccess = errors.New("the object store could not be read")

// Verify is the fsck of a star's catalog (docs/operations.md#operator-surface): every
// entry's object exists, decodes as a settled bundle of its stream that
// holds exactly the entry's records, bytes, footer window and timestamps,
// holds the records of applied erasures as tombstones only, and each
// stream's entries tile it up to settled_through. Findings are
// reported, not returned as errors; the error is for failures to look
// (database, a store error other than a missing object).
func Verify(ctx context.Context, db CatalogReader, store ObjectReader, o Options) (Report, error) {
	rep := Report{Findings: []Finding{}}
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	if o.Window <= 0 {
		o.Window = DefaultWindow
	}
	if o.Sample < 0 || o.Sample > 1 {
		return rep, fmt.Errorf("verify: sample %v is not a fraction in (0, 1]", o.Sample)
	}
	streams, err := db.StreamsOfStar(ctx, o.Star)
	if err != nil {
		return rep, err
	}
	if o.Stream != nil {
		streams = slices.DeleteFunc(streams, func(s catalog.Stream) bool { return s.ID != *o.Stream })
		if len(streams) == 0 {
			return rep, fmt.Errorf("verify: stream %s: %w in star %q", *o.Stream, catalog.ErrNotFound, o.Star)
		}
	}
	pace := newPacer(o.Rate)
	// One stream's entries at a time: memory holds them and the objects
	// being read, not the star's whole catalog.
	var (
		mu          sync.Mutex
		done, begun int
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Concurrency)
	for _, s := range streams {
		if gctx.Err() != nil {
			break
		}
		entries, err := db.EntriesOfStream(gctx, s.ID)
		var applied []catalog.Erasure
		if err == nil && len(entries) > 0 {
			applied, err = appliedErasures(gctx, db, s.ID)
		}
		if err != nil {
			// An object's failure cancels gctx: that failure is the one
			// to report (ErrStoreAccess), not the cancelled read.
			if werr := g.Wait(); werr != nil {
				return rep, werr
			}
			return rep, err
		}
		mu.Lock()
		rep.Streams++
		begun++
		rep.Findings = append(rep.Findings, checkTiling(s, entries)...)
		mu.Unlock()
		for _, e := range entries {
			mu.Lock()
			rep.Cataloged++
			mu.Unlock()
			if o.Sample > 0 && o.Sample < 1 && rand.Float64() >= o.Sample {
				continue
			}
			g.Go(func() error {
				f, n, err := verifyEntry(gctx, store, o, pace, s, e, applied)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					return err
				}
				rep.Objects++
				rep.Bytes += n
				if f != nil {
					rep.Findings = append(rep.Findings, *f)
				}
				done++
				if o.Progress != nil {
					o.Progress(done, begun, len(streams))
				}
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return rep, err
	}
	slices.SortStableFunc(rep.Findings, func(a, b Finding) int {
		if a.Stream != b.Stream {
			return compare(a.Stream, b.Stream)
		}
		return compare(a.Key, b.Key)
	})
	return rep, nil
}

func compare(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// checkTiling checks a stream's entries (in record order) cover their
// records once: no overlap, no gap except below low_record (retention, or
// refs skipped below it), the last ending at settled_through, all of the
// stream's epoch.
func checkTiling(s catalog.Stream, entries []catalog.Entry) []Finding {
	var out []Finding
	id := s.ID.String()
	add := func(format string, args ...any) {
		out = append(out, Finding{Kind: FindingTiling, Stream: id, Detail: fmt.Sprintf(format, args...)})
	}
	for i, e := range entries {
		if e.Epoch != s.Epoch {
			add("entry %d~%d is of epoch %d, the stream's is %d", e.FirstRecord, e.Revision, e.Epoch, s.Epoch)
		}
		if i == 0 {
			continue
		}
		prev := entries[i-1]
		switch {
		case e.FirstRecord < prev.EndRecord():
			add("entries [%d, %d) and [%d, %d) overlap", prev.FirstRecord, prev.EndRecord(), e.FirstRecord, e.EndRecord())
		case e.FirstRecord > prev.EndRecord() && e.FirstRecord > s.LowRecord:
			add("gap [%d, %d) between entries, above low_record %d", prev.EndRecord(), e.FirstRecord, s.LowRecord)
		}
	}
	if n := len(entries); n > 0 && entries[n-1].EndRecord() != s.SettledThrough {
		add("the last entry ends at %d, settled_through is %d", entries[n-1].EndRecord(), s.SettledThrough)
	}
	return out
}

// verifyEntry reads an entry's object in ranges and checks it. It returns
// a finding (nil when the object is sound) and the bytes read.
func verifyEntry(ctx context.Context, store ObjectReader, o Options, pace *pacer, s catalog.Stream, e catalog.Entry, applied []catalog.Erasure) (*Finding, int64, error) {
	key := bundle.EntryKey(s.Bucket, e)
	find := func(kind, format string, args ...any) *Finding {
		return &Finding{Kind: kind, Stream: s.ID.String(), Key: key, Detail: fmt.Sprintf(format, args...)}
	}
	var got int64
	read := func(off, n int64) ([]byte, int64, error) {
		if err := pace.wait(ctx, n); err != nil {
			return nil, 0, err
		}
		data, size, err := store.ObjectRange(ctx, key, off, n)
		got += int64(len(data))
		return data, size, err
	}
	// The first read learns the size (and whether the object is there);
	// its bytes serve the validator's reads they hold: an object no bigger
	// than the window is read whole at once.
	first := int64(bundlefmt.EnvelopeSize)
	if e.ObjectBytes <= o.Window {
		first = e.ObjectBytes
	}
	head, size, err := read(0, first)
	switch {
	case errors.Is(err, objstore.ErrNotFound):
		return find(FindingMissing, "no object at %s in the standard bucket", key), 0, nil
	case err != nil && ctx.Err() != nil:
		return nil, 0, err
	case errors.Is(err, objstore.ErrInvalidRange):
		return find(FindingMismatch, "object is empty, the catalog says %d bytes: %v", e.ObjectBytes, err), 0, nil
	case err != nil:
		// Access denied, bad credentials, a server down: a failure to look,
		// not a property of the object.
		return nil, 0, fmt.Errorf("read %s: %w: %w", key, ErrStoreAccess, err)
	}
	if size != e.ObjectBytes {
		return find(FindingMismatch, "object is %d bytes, the catalog says %d", size, e.ObjectBytes), got, nil
	}
	exp, err := bundlefmt.ExpectFromKey(key)
	if err != nil {
		return find(FindingMismatch, "%v", err), got, nil
	}
	ranged := func(off, n uint64) ([]byte, error) {
		if off+n <= uint64(len(head)) {
			return head[off : off+n], nil
		}
		data, _, err := read(int64(off), int64(n))
		switch {
		case err != nil:
			return nil, err
		case uint64(len(data)) != n:
			return nil, fmt.Errorf("%w: read %d of %d bytes at %d (the object changed under verify?)", objstore.ErrInvalidRange, len(data), n, off)
		}
		return data, nil
	}
	v, err := bundlefmt.ValidateObjectFrom(uint64(size), ranged, uint64(o.Window), exp)
	if re := (*bundlefmt.ReadError)(nil); errors.As(err, &re) {
		if ctx.Err() != nil {
			return nil, got, ctx.Err()
		}
		if errors.Is(err, objstore.ErrNotFound) {
			return find(FindingMissing, "the object at %s went away while it was read", key), got, nil
		}
		return nil, got, fmt.Errorf("read %s: %w: %w", key, ErrStoreAccess, err)
	}
	if err != nil {
		kind := bundlefmt.ClassOf(err)
		if kind == "" {
			kind = FindingCorrupt
		}
		return find(kind, "%v", err), got, nil
	}
	if v.Kind != bundlefmt.KindSettled {
		return find(FindingMismatch, "a %s, not a settled object", v.Kind), got, nil
	}
	if off, ln := int64(v.Footer.FooterOffset()), int64(v.Footer.FooterLength()); off != e.FooterOffset || ln != e.FooterLength {
		return find(FindingMismatch, "footer window %d+%d, the catalog says %d+%d", off, ln, e.FooterOffset, e.FooterLength), got, nil
	}
	next := uint64(e.FirstRecord)
	minTS, maxTS := int64(0), int64(0)
	for i, c := range v.Entries {
		if c.Stream != e.Stream {
			return find(FindingMismatch, "chunk %d is of stream %s", i, c.Stream), got, nil
		}
		if c.FirstRecord != next {
			return find(FindingMismatch, "chunk %d starts at record %d, expected %d", i, c.FirstRecord, next), got, nil
		}
		next = c.EndRecord()
		for j, ts := range c.Timestamps {
			if (i == 0 && j == 0) || ts < minTS {
				minTS = ts
			}
			if (i == 0 && j == 0) || ts > maxTS {
				maxTS = ts
			}
		}
	}
	if end := uint64(e.EndRecord()); next != end {
		return find(FindingMismatch, "holds records [%d, %d), the catalog says [%d, %d)", e.FirstRecord, next, e.FirstRecord, end), got, nil
	}
	if minTS != e.MinTimestamp || maxTS != e.MaxTimestamp {
		return find(FindingMismatch, "timestamps [%d, %d], the catalog says [%d, %d]", minTS, maxTS, e.MinTimestamp, e.MaxTimestamp), got, nil
	}
	why, err := checkErased(v.Entries, applied, uint64(o.Window), ranged)
	if err != nil {
		if ctx.Err() != nil {
			return nil, got, ctx.Err()
		}
		return nil, got, fmt.Errorf("read %s: %w: %w", key, ErrStoreAccess, err)
	}
	if why != "" {
		return find(FindingErasure, "%s", why), got, nil
	}
	return nil, got, nil
}
