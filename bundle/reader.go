package bundle

// The Reader: where a stored bundle's bytes are read, what a failure to
// read or decode them means, and the footers it opens, slot footers through
// the footer cache (FooterCache) kept across cycles. The slot reads that
// serve a cycle's chunk pieces are slotreads.go's.

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// SettledClass is the class whose bucket set holds every settled object:
// the standard bucket alone (docs/architecture.md#buckets-and-zone-health).
// A settled object read as a copy source is a Source of this class.
const SettledClass = catalog.ClassStandard

// Source names a stored bundle: its key (docs/format.md#keys) and the
// class whose buckets hold it.
type Source struct {
	Key   string
	Class string // catalog.ClassStandard or catalog.ClassExpress
}

// Settled is the Source of the settled object at key.
func Settled(key string) Source { return Source{Key: key, Class: SettledClass} }

// EntryKey is the key of a catalog entry's object, of a stream whose
// key prefix is bucket (its streams.bucket).
func EntryKey(bucket string, e catalog.Entry) string {
	return bundlefmt.SettledKey(bucket, e.Stream, uint64(e.Epoch), uint64(e.FirstRecord), uint32(e.Revision))
}

// Reader reads stored bundles from a topology. The zero value is not
// usable; NewReader makes one. A Reader is safe for concurrent use.
type Reader struct {
	top     *objstore.Topology
	footers *FooterCache // nil: slot footers are read afresh each time
	counts  *footerReads // the footers this reader's callers fetched (WithFooters)
	slots   *slotCache   // nil: no slot reads (WithSlotReads)
}

// NewReader returns a reader of the bundles of top, with no footer cache.
func NewReader(top *objstore.Topology) *Reader { return &Reader{top: top} }

// WithFooters returns a reader over the same topology that takes slot
// footers from c (reading into it what it does not hold), with counts of
// its own (FooterReads): a cycle's reader over a cache that outlives it.
func (r *Reader) WithFooters(c *FooterCache) *Reader {
	return &Reader{top: r.top, footers: c, counts: &footerReads{}}
}

// WithFooterCache returns a reader over the same topology with a footer
// cache of its own of at most limit bytes (WithFooters, NewFooterCache):
// the cache is dropped with the reader.
func (r *Reader) WithFooterCache(limit int64) *Reader { return r.WithFooters(NewFooterCache(limit)) }

// Topology is where the reader reads.
func (r *Reader) Topology() *objstore.Topology { return r.top }

// FooterReads returns how many slot footers this reader fetched into its
// footer cache (each an envelope GET and a footer GET) and the bytes those
// read: the reads of its callers, not of others sharing the cache.
func (r *Reader) FooterReads() (gets, bytes int64) {
	if r.counts == nil {
		return 0, 0
	}
	return r.counts.gets.Load(), r.counts.bytes.Load()
}

// Classify turns a read or decode error about the stored bundle at key
// into a quarantine when it is about the data: a format error (corrupt,
// checksum, unsupported version, by bundlefmt.ClassOf), source bytes that
// disagree with their DataCRC (objstore.ErrChecksum), or a missing object.
// Any other error (network, throttling, a down zone) is returned as it is:
// a retry (docs/architecture.md#error-classes).
func Classify(key string, err error) error {
	if err == nil || cycle.IsQuarantine(err) {
		return err
	}
	if c := bundlefmt.ClassOf(err); c != "" {
		return &cycle.QuarantineError{SlotKey: key, Class: c, Err: err}
	}
	switch {
	case errors.Is(err, objstore.ErrChecksum):
		return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassChecksum, Err: err}
	case errors.Is(err, objstore.ErrNotFound):
		return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassMissing, Err: err}
	}
	return err
}

// ClassOf is the quarantine class Classify gives a decode error (corrupt
// when it has none of the format's).
func ClassOf(err error) string {
	if q, ok := cycle.AsQuarantine(Classify("", err)); ok {
		return q.Class
	}
	return cycle.ClassCorrupt
}

func corrupt(key string, format string, args ...any) error {
	return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt, Err: fmt.Errorf(format, args...)}
}

// SlotFooter returns the footer of the transit slot at key of a class,
// opened from the window a ref names (off, length). The slot's envelope
// is read and checked first: it must be a flight of the key's epoch and
// seq and locate the same footer, so a slot written under the wrong key
// is found before any chunk of it is copied. Two refs that disagree on a
// slot's window are corruption. Every data error is a quarantine naming
// the slot (Classify); the reader's footer cache, if any, is used.
func (r *Reader) SlotFooter(ctx context.Context, class, key string, off, length int64) (*bundlefmt.Footer, error) {
	if r.footers != nil {
		return r.footers.get(ctx, r, class, key, off, length)
	}
	var read int64
	c, err := r.loadSlot(ctx, class, key, off, length, &read)
	if err != nil {
		return nil, err
	}
	return c.f, nil
}

// loadSlot reads and checks a slot's envelope and footer, adding the bytes
// it read to *read.
func (r *Reader) loadSlot(ctx context.Context, class, key string, off, length int64, read *int64) (*cached, error) {
	if off < bundlefmt.EnvelopeSize+1 || length < 1 {
		return nil, corrupt(key, "ref footer window (%d, %d) is out of range", off, length)
	}
	env, _, err := r.top.GetRange(ctx, class, key, 0, bundlefmt.EnvelopeSize)
	*read += int64(len(env))
	if err != nil {
		return nil, Classify(key, fmt.Errorf("read envelope of %s: %w", key, err))
	}
	_, epoch, seq, err := bundlefmt.ParseSlotKey(key)
	if err != nil {
		return nil, fmt.Errorf("slot key %s: %w", key, err)
	}
	ev, err := bundlefmt.ValidateEnvelope(env, bundlefmt.Expect{Key: key, Kind: bundlefmt.KindFlight, Epoch: epoch, Seq: seq, CheckKey: true})
	if err != nil {
		return nil, Classify(key, err)
	}
	if ev.FooterOffset != uint64(off) || ev.FooterLength != uint64(length) {
		return nil, corrupt(key, "ref footer window (%d, %d), envelope says (%d, %d)", off, length, ev.FooterOffset, ev.FooterLength)
	}
	buf, size, err := r.top.GetRange(ctx, class, key, off, length+bundlefmt.TrailerSize)
	*read += int64(len(buf))
	if err != nil {
		return nil, Classify(key, fmt.Errorf("read footer of %s: %w", key, err))
	}
	f, err := bundlefmt.OpenFooter(key, uint64(off), buf, uint64(size), bundlefmt.EnvelopeSize)
	if err != nil {
		return nil, Classify(key, err)
	}
	if f.FooterLength() != uint64(length) {
		return nil, corrupt(key, "ref footer length %d, trailer says %d", length, f.FooterLength())
	}
	return &cached{window: [2]int64{off, length}, f: f, bytes: int64(len(buf))}, nil
}

// EntryFooter returns the footer of the settled object at key, opened
// from the window its catalog entry names (off, length). The catalog
// references the object, so its absence halts the auditor (nothing may
// guess past a lost settled object); bad bytes are a quarantine naming
// the key; any other failure is a retry.
func (r *Reader) EntryFooter(ctx context.Context, key string, off, length int64) (*bundlefmt.Footer, error) {
	buf, size, err := r.top.GetRange(ctx, SettledClass, key, off, length+bundlefmt.TrailerSize)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, cycle.Haltf("cataloged object %s is missing", key)
		}
		return nil, fmt.Errorf("read footer of %s: %w", key, err)
	}
	f, err := bundlefmt.OpenFooter(key, uint64(off), buf, uint64(size), bundlefmt.SettledBase)
	if err != nil {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: ClassOf(err), Err: err}
	}
	return f, nil
}

// HeldFooter returns the footer of the settled object at key whose bytes
// are held whole (obj: read in one GET, or kept since this process PUT
// them), opened from the window its catalog entry names (off, length).
// Bytes that do not decode, or a window outside obj, are a quarantine
// naming the key, as EntryFooter's.
func HeldFooter(key string, obj []byte, off, length int64) (*bundlefmt.Footer, error) {
	end := off + length + bundlefmt.TrailerSize
	if off < 0 || length < 0 || end > int64(len(obj)) {
		return nil, corrupt(key, "footer window (%d, %d) of a %d-byte object", off, length, len(obj))
	}
	f, err := bundlefmt.OpenFooter(key, uint64(off), obj[off:end], uint64(len(obj)), bundlefmt.SettledBase)
	if err != nil {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: ClassOf(err), Err: err}
	}
	return f, nil
}

// StandingFooter returns the footer of a settled object at key that no
// catalog entry describes (one a crash left standing before its commit):
// its trailer locates the footer, whose directory is checked whole. A
// read failure, a missing object included, is returned wrapped as it is
// (the caller decides what absence means); bytes that do not decode are a
// quarantine naming the key (Classify).
func (r *Reader) StandingFooter(ctx context.Context, key string) (*bundlefmt.Footer, error) {
	tr, size, err := r.top.GetSuffix(ctx, SettledClass, key, bundlefmt.TrailerSize)
	if err != nil {
		return nil, fmt.Errorf("read trailer of standing %s: %w", key, err)
	}
	t, err := bundlefmt.DecodeTrailer(key, tr, uint64(size))
	if err != nil {
		return nil, Classify(key, err)
	}
	buf, _, err := r.top.GetRange(ctx, SettledClass, key, int64(t.FooterOffset()), int64(t.FooterLength())+bundlefmt.TrailerSize)
	if err != nil {
		return nil, fmt.Errorf("read footer of standing %s: %w", key, err)
	}
	f, err := bundlefmt.OpenFooter(key, t.FooterOffset(), buf, uint64(size), bundlefmt.SettledBase)
	if err == nil {
		err = f.VerifyDirectory()
	}
	if err != nil {
		return nil, Classify(key, err)
	}
	return f, nil
}

// FooterCache holds the footers of transit slots across cycles, shared by
// every stream of a cycle and, in a fleet member, by every star it leads:
// a slot's envelope and footer are read once while the slot is wanted and
// the cache holds it, not once per cycle. It is bounded in bytes (least
// recently used out: a budget, not a growth) and fetches each slot once
// even when several callers ask at the same time.
//
// Keeping a footer past its cycle is safe because a slot's bytes never
// change: a slot is written create-once under a key of its star, epoch and
// seq, and a seq is never reused under a fence (docs/format.md#keys), so
// the footer read once is the footer of that key for as long as the key
// exists. Every use still checks the ref's window against the one the
// footer was opened from, and every chunk's bytes against its DataCRC; a
// slot reaped since is found missing when its bytes are read (nothing
// reads a slot that no ref names). A read that failed is not kept.
type FooterCache struct {
	limit int64

	mu       sync.Mutex
	size     int64
	lru      *list.List // of *cached, most recent at the front
	byKey    map[footerKey]*list.Element
	inflight map[footerKey]*fetch
}

// footerKey names a slot: its class and key (an express slot lives under
// the same key in every bucket of its class).
type footerKey struct{ class, key string }

type cached struct {
	id     footerKey
	window [2]int64
	f      *bundlefmt.Footer
	bytes  int64
}

type fetch struct {
	done   chan struct{}
	window [2]int64 // the (off, length) the fetch was asked for
	c      *cached
	err    error
}

// NewFooterCache returns an empty footer cache of at most limit bytes of
// footers (the last one read is kept even when it alone is larger).
func NewFooterCache(limit int64) *FooterCache {
	return &FooterCache{limit: limit, lru: list.New(), byKey: map[footerKey]*list.Element{}, inflight: map[footerKey]*fetch{}}
}

// footerReads counts the footers one reader's callers had fetched (a
// cycle's: FooterReads), whoever else shares the cache.
type footerReads struct {
	gets  atomic.Int64
	bytes atomic.Int64 // envelope and footer bytes read
}

// get returns the slot's footer, opened from the ref's window, reading it
// with r (and counting the read in r's counts) when it is not cached.
func (c *FooterCache) get(ctx context.Context, r *Reader, class, key string, off, length int64) (*bundlefmt.Footer, error) {
	id := footerKey{class, key}
	c.mu.Lock()
	if el, ok := c.byKey[id]; ok {
		ce := el.Value.(*cached)
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return ce.check(key, off, length)
	}
	if fl, ok := c.inflight[id]; ok {
		c.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err != nil && ctx.Err() == nil && isContextErr(fl.err) {
			// The fetch was its caller's, cancelled or out of time (a
			// cycle that ended: the cache outlives it); this caller's
			// context is live, so it fetches for itself.
			return c.get(ctx, r, class, key, off, length)
		}
		if fl.err != nil && fl.window != [2]int64{off, length} {
			// The fetch failed for another ref's window (one broken ref
			// that disagrees with the envelope), which may say nothing of
			// this one's: a stream must not be quarantined for another
			// stream's bad ref, so this caller fetches for itself.
			return c.get(ctx, r, class, key, off, length)
		}
		if fl.err != nil {
			return nil, fl.err
		}
		return fl.c.check(key, off, length)
	}
	fl := &fetch{done: make(chan struct{}), window: [2]int64{off, length}}
	c.inflight[id] = fl
	c.mu.Unlock()

	var read int64
	fl.c, fl.err = r.loadSlot(ctx, class, key, off, length, &read)
	if r.counts != nil {
		r.counts.gets.Add(1)
		r.counts.bytes.Add(read)
	}
	c.mu.Lock()
	delete(c.inflight, id)
	if fl.err == nil {
		fl.c.id = id
		c.byKey[id] = c.lru.PushFront(fl.c)
		c.size += fl.c.bytes
		for c.size > c.limit && c.lru.Len() > 1 {
			old := c.lru.Back()
			ce := old.Value.(*cached)
			c.lru.Remove(old)
			delete(c.byKey, ce.id)
			c.size -= ce.bytes
		}
	}
	c.mu.Unlock()
	close(fl.done)
	if fl.err != nil {
		return nil, fl.err
	}
	return fl.c.check(key, off, length)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// Bytes returns the footer bytes the cache holds.
func (c *FooterCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.size
}

// check returns the cached footer when the ref names the window it was
// opened from: two refs that disagree on a slot's window are corruption.
func (ce *cached) check(key string, off, length int64) (*bundlefmt.Footer, error) {
	if ce.window != [2]int64{off, length} {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt,
			Err: fmt.Errorf("refs disagree on the footer window: (%d, %d) and (%d, %d)", ce.window[0], ce.window[1], off, length)}
	}
	return ce.f, nil
}

// peek returns the cached footer of the slot of class at key, reading
// nothing; nil when it is not cached (or c is nil).
func (c *FooterCache) peek(class, key string) *bundlefmt.Footer {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byKey[footerKey{class, key}]; ok {
		return el.Value.(*cached).f
	}
	return nil
}

// Chunk returns the data bytes of the chunk e of the bundle src, checked
// against e's DataCRC. Bytes that disagree, and a missing source, are a
// quarantine naming src.Key; any other failure is a retry.
func (r *Reader) Chunk(ctx context.Context, src Source, e bundlefmt.Entry) ([]byte, error) {
	data, err := r.Range(ctx, src, int64(e.DataOffset), int64(e.ChunkBytes()))
	if err != nil {
		return nil, Classify(src.Key, fmt.Errorf("chunk [%d, %d): %w", e.FirstRecord, e.EndRecord(), err))
	}
	if uint64(len(data)) != e.ChunkBytes() {
		return nil, corrupt(src.Key, "chunk [%d, %d) at %d: read %d bytes of %d", e.FirstRecord, e.EndRecord(), e.DataOffset, len(data), e.ChunkBytes())
	}
	if got := bundlefmt.CRC32C(data); got != e.DataCRC {
		return nil, &cycle.QuarantineError{SlotKey: src.Key, Class: cycle.ClassChecksum,
			Err: fmt.Errorf("chunk [%d, %d) at %d: CRC-32C %08x, its entry says %08x", e.FirstRecord, e.EndRecord(), e.DataOffset, got, e.DataCRC)}
	}
	return data, nil
}

// Range returns the bytes [off, off+n) of the bundle src, fewer only at
// its end. Errors are the store's, wrapped (objstore.ErrNotFound when no
// bucket of the class has it); nothing is classified.
func (r *Reader) Range(ctx context.Context, src Source, off, n int64) ([]byte, error) {
	data, _, err := r.top.GetRange(ctx, src.Class, src.Key, off, n)
	if err != nil {
		return nil, fmt.Errorf("read [%d, +%d) of %s: %w", off, n, src.Key, err)
	}
	return data, nil
}

// Object returns the first n bytes of the settled object at key (n at
// least its size reads it whole) and its size. Errors are the store's,
// unclassified: objstore.ErrNotFound for a missing object,
// objstore.ErrInvalidRange for an empty one; verify judges them.
func (r *Reader) Object(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	return r.top.GetRange(ctx, SettledClass, key, 0, max(n, 1))
}

// ObjectRange returns the bytes [off, off+n) of the settled object at key
// (fewer only at its end) and its size. Errors as Object's.
func (r *Reader) ObjectRange(ctx context.Context, key string, off, n int64) ([]byte, int64, error) {
	return r.top.GetRange(ctx, SettledClass, key, off, max(n, 1))
}

// Find reads the object at key whole from the first bucket of the
// topology that has it (the standard bucket first, then each class's, in
// read order), returning that bucket. It is inspect's: a key of any kind,
// settled or transit, whose class the caller does not know. An empty
// object is returned as no bytes, not an error.
func (r *Reader) Find(ctx context.Context, key string) (bucket string, obj []byte, err error) {
	store := r.top.Store()
	err = fmt.Errorf("%s: %w", key, objstore.ErrNotFound)
	for _, b := range r.top.All() {
		a, herr := store.Head(ctx, b, key)
		if errors.Is(herr, objstore.ErrNotFound) {
			continue
		}
		if herr != nil {
			return "", nil, fmt.Errorf("head %s/%s: %w", b, key, herr)
		}
		if a.Size == 0 {
			return b, []byte{}, nil
		}
		obj, _, err := store.GetRange(ctx, b, key, 0, a.Size)
		if err != nil {
			return "", nil, fmt.Errorf("read %s/%s: %w", b, key, err)
		}
		return b, obj, nil
	}
	return "", nil, err
}
