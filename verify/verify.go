package verify

import (
	"context"
	"errors"
	"fmt"
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
// the first n bytes of the settled object at key and its size. A missing
// object is objstore.ErrNotFound; an empty object is
// objstore.ErrInvalidRange (both findings). Every other read error is a
// failure to look (ErrStoreAccess).
type ObjectReader interface {
	Object(ctx context.Context, key string, n int64) (data []byte, size int64, err error)
}

// CatalogReader is what verify reads of the metastore (*catalog.DB has
// it): the star's streams, each stream's entries, and its erasures.
type CatalogReader interface {
	StreamsOfStar(ctx context.Context, star string) ([]catalog.Stream, error)
	EntriesOfStream(ctx context.Context, id catalog.StreamID) ([]catalog.Entry, error)
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
}

// Options configure Verify.
type Options struct {
	Star string
	// Concurrency bounds objects read at once (default 4).
	Concurrency int
	// Progress, when set, is called after each object with (done, total).
	Progress func(done, total int)
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
	Streams  int       `json:"streams"`
	Objects  int       `json:"objects"`
	Bytes    int64     `json:"bytes"`
	Findings []Finding `json:"findings"`
}

// ErrStoreAccess marks a Verify that could not read the store (credentials,
// permissions, transport): nothing was judged, so nothing is reported
// corrupt.
var ErrStoreAccess = errors.New("the object store could not be read")

// Verify is the fsck of a star's catalog (docs/architecture.md#operator-surface): every
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
	streams, err := db.StreamsOfStar(ctx, o.Star)
	if err != nil {
		return rep, err
	}
	type job struct {
		stream  catalog.Stream
		entry   catalog.Entry
		applied []catalog.Erasure
	}
	var jobs []job
	for _, s := range streams {
		entries, err := db.EntriesOfStream(ctx, s.ID)
		if err != nil {
			return rep, err
		}
		rep.Streams++
		rep.Findings = append(rep.Findings, checkTiling(s, entries)...)
		var applied []catalog.Erasure
		if len(entries) > 0 {
			if applied, err = appliedErasures(ctx, db, s.ID); err != nil {
				return rep, err
			}
		}
		for _, e := range entries {
			jobs = append(jobs, job{s, e, applied})
		}
	}
	rep.Objects = len(jobs)
	var (
		mu   sync.Mutex
		done int
	)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(o.Concurrency)
	for _, j := range jobs {
		g.Go(func() error {
			f, n, err := verifyEntry(gctx, store, o, j.stream, j.entry, j.applied)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				return err
			}
			rep.Bytes += n
			if f != nil {
				rep.Findings = append(rep.Findings, *f)
			}
			done++
			if o.Progress != nil {
				o.Progress(done, len(jobs))
			}
			return nil
		})
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

// verifyEntry reads an entry's object whole and checks it. It returns a
// finding (nil when the object is sound) and the bytes read.
func verifyEntry(ctx context.Context, store ObjectReader, o Options, s catalog.Stream, e catalog.Entry, applied []catalog.Erasure) (*Finding, int64, error) {
	key := bundle.EntryKey(s.Bucket, e)
	find := func(kind, format string, args ...any) *Finding {
		return &Finding{Kind: kind, Stream: s.ID.String(), Key: key, Detail: fmt.Sprintf(format, args...)}
	}
	obj, size, err := store.Object(ctx, key, e.ObjectBytes)
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
	got := int64(len(obj))
	if size != e.ObjectBytes {
		return find(FindingMismatch, "object is %d bytes, the catalog says %d", size, e.ObjectBytes), got, nil
	}
	exp, err := bundlefmt.ExpectFromKey(key)
	if err != nil {
		return find(FindingMismatch, "%v", err), got, nil
	}
	v, err := bundlefmt.ValidateObject(obj, exp)
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
	if why := checkErased(obj, v.Entries, applied); why != "" {
		return find(FindingErasure, "%s", why), got, nil
	}
	return nil, got, nil
}
