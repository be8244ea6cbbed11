package settle

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
)

// Reader reads a byte range of a slot of a class from the class's buckets
// (objstore.Topology: standard slots from the standard bucket, express
// slots from the express set, local zone first). It returns the object's
// total size too (Content-Range), and an error matching
// objstore.ErrNotFound when no bucket has the object.
type Reader interface {
	GetRange(ctx context.Context, class, key string, off, n int64) ([]byte, int64, error)
}

// classify turns a read or decode error into a quarantine when it is about
// the data (corrupt, checksum, version, missing); other errors (network,
// throttling) are returned as they are, for a retry next cycle.
func classify(key string, err error) error {
	if cycle.IsQuarantine(err) {
		return err
	}
	if c := bundlefmt.ClassOf(err); c != "" {
		return &cycle.QuarantineError{SlotKey: key, Class: c, Err: err}
	}
	switch {
	case errors.Is(err, objstore.ErrChecksum):
		// Source bytes disagree with their DataCRC (found while gathering
		// or by the server's full-object check): damaged data.
		return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassChecksum, Err: err}
	case errors.Is(err, objstore.ErrNotFound):
		return &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassMissing, Err: err}
	}
	return err
}

// footerCache holds slot footers for one cycle, shared by every stream: one
// ranged GET per slot per cycle (many streams share a slot). It is bounded
// in bytes (least recently used out) and fetches each slot once even when
// several streams ask at the same time.
type footerCache struct {
	r     Reader
	limit int64

	mu       sync.Mutex
	size     int64
	lru      *list.List // of *cached, most recent at the front
	byKey    map[string]*list.Element
	inflight map[string]*fetch
	gets     int64
	bytes    int64 // envelope and footer bytes read
}

type cached struct {
	key    string
	window [2]int64
	f      *bundlefmt.Footer
	bytes  int64
}

type fetch struct {
	done chan struct{}
	c    *cached
	err  error
}

func newFooterCache(r Reader, limit int64) *footerCache {
	return &footerCache{r: r, limit: limit, lru: list.New(), byKey: map[string]*list.Element{}, inflight: map[string]*fetch{}}
}

// Bytes is the envelope and footer bytes read (fetched through the auditor).
func (c *footerCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Gets is the number of footer GETs issued.
func (c *footerCache) Gets() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gets
}

// get returns the slot's footer, opened from the ref's window. Two refs that
// disagree on a slot's window are corruption.
func (c *footerCache) get(ctx context.Context, class, key string, off, length int64) (*bundlefmt.Footer, error) {
	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		ce := el.Value.(*cached)
		c.lru.MoveToFront(el)
		c.mu.Unlock()
		return ce.check(key, off, length)
	}
	if fl, ok := c.inflight[key]; ok {
		c.mu.Unlock()
		select {
		case <-fl.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if fl.err != nil {
			return nil, fl.err
		}
		return fl.c.check(key, off, length)
	}
	fl := &fetch{done: make(chan struct{})}
	c.inflight[key] = fl
	c.gets++
	c.mu.Unlock()

	var read int64
	fl.c, read, fl.err = c.load(ctx, class, key, off, length)
	c.mu.Lock()
	c.bytes += read
	delete(c.inflight, key)
	if fl.err == nil {
		c.byKey[key] = c.lru.PushFront(fl.c)
		c.size += fl.c.bytes
		for c.size > c.limit && c.lru.Len() > 1 {
			old := c.lru.Back()
			ce := old.Value.(*cached)
			c.lru.Remove(old)
			delete(c.byKey, ce.key)
			c.size -= ce.bytes
		}
	}
	c.mu.Unlock()
	close(fl.done)
	if fl.err != nil {
		return nil, fl.err
	}
	return fl.c.f, nil
}

func (ce *cached) check(key string, off, length int64) (*bundlefmt.Footer, error) {
	if ce.window != [2]int64{off, length} {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt,
			Err: fmt.Errorf("refs disagree on the footer window: (%d, %d) and (%d, %d)", ce.window[0], ce.window[1], off, length)}
	}
	return ce.f, nil
}

func (c *footerCache) load(ctx context.Context, class, key string, off, length int64) (*cached, int64, error) {
	var read int64
	ce, err := c.loadInto(ctx, class, key, off, length, &read)
	return ce, read, err
}

func (c *footerCache) loadInto(ctx context.Context, class, key string, off, length int64, read *int64) (*cached, error) {
	if off < bundlefmt.EnvelopeSize+1 || length < 1 {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt, Err: fmt.Errorf("ref footer window (%d, %d) is out of range", off, length)}
	}
	// The envelope (60 bytes) says the slot is a flight of this key's
	// epoch and seq, and locates the same footer the ref names: a slot
	// written under the wrong key is corruption, found before any chunk of
	// it is copied. One small GET per slot per cycle, like the footer's.
	env, _, err := c.r.GetRange(ctx, class, key, 0, bundlefmt.EnvelopeSize)
	*read += int64(len(env))
	if err != nil {
		return nil, classify(key, fmt.Errorf("read envelope of %s: %w", key, err))
	}
	_, epoch, seq, err := bundlefmt.ParseSlotKey(key)
	if err != nil {
		return nil, fmt.Errorf("slot key %s: %w", key, err)
	}
	ev, err := bundlefmt.ValidateEnvelope(env, bundlefmt.Expect{Key: key, Kind: bundlefmt.KindFlight, Epoch: epoch, Seq: seq, CheckKey: true})
	if err != nil {
		return nil, classify(key, err)
	}
	if ev.FooterOffset != uint64(off) || ev.FooterLength != uint64(length) {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt, Err: fmt.Errorf(
			"ref footer window (%d, %d), envelope says (%d, %d)", off, length, ev.FooterOffset, ev.FooterLength)}
	}
	buf, size, err := c.r.GetRange(ctx, class, key, off, length+bundlefmt.TrailerSize)
	*read += int64(len(buf))
	if err != nil {
		return nil, classify(key, fmt.Errorf("read footer of %s: %w", key, err))
	}
	f, err := bundlefmt.OpenFooter(key, uint64(off), buf, uint64(size), bundlefmt.EnvelopeSize)
	if err != nil {
		return nil, classify(key, err)
	}
	if f.FooterLength() != uint64(length) {
		return nil, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassCorrupt,
			Err: fmt.Errorf("ref footer length %d, trailer says %d", length, f.FooterLength())}
	}
	return &cached{key: key, window: [2]int64{off, length}, f: f, bytes: int64(len(buf))}, nil
}

// Resolved is one window of a stream's unsettled data: its chunks in
// record order.
type Resolved struct {
	Chunks []SourceChunk
	Bytes  int64 // Σ chunk bytes
	// Complete: the chunks reach the stream's next_record (this is the
	// last window of the stream's backlog).
	Complete bool
}

// resolver walks a stream's refs window by window: each window's chunks
// must start where the previous window's ended, and the last must end at
// the next_record of the stream snapshot, so a backlog of any length is
// checked and planned in pieces of bounded size.
type resolver struct {
	fc      *footerCache
	star    string
	st      catalog.Stream
	at      int64 // the next record the chunks must start at
	started bool  // a live chunk was found already
}

func newResolver(fc *footerCache, star string, st catalog.Stream) *resolver {
	return &resolver{fc: fc, star: star, st: st, at: st.SettledThrough}
}

// window reads the refs' slots and returns the chunks that continue the
// stream from r.at, skipping chunks wholly below settled_through (already
// settled) or below low_record (dead). It stops before a ref once the
// window holds maxRecords records (a window holds at least one ref), and
// more says the refs given may not be all that remain below next_record.
// Any break is a *cycle.QuarantineError naming the slot and the error class.
func (r *resolver) window(ctx context.Context, refs []catalog.SpanRef, maxRecords int64, more bool) (Resolved, error) {
	var out Resolved
	stream := r.st.ID
	var records int64
	for n, ref := range refs {
		if ref.EndRecord() <= r.at {
			continue // wholly settled; deleted by the next commit
		}
		if records >= maxRecords && len(out.Chunks) > 0 {
			more = more || n < len(refs)
			break
		}
		rec := uint64(ref.FirstRecord)
		for _, s := range ref.Slots {
			key := bundlefmt.SlotKey(r.star, uint64(s.Epoch), uint64(s.Seq))
			f, err := r.fc.get(ctx, ref.Class, key, s.FooterOffset, s.FooterLength)
			if err != nil {
				return out, err
			}
			i, ok := f.Find(stream, rec)
			if !ok {
				return out, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
					Err: fmt.Errorf("stream %s has no chunk at record %d", stream, rec)}
			}
			e, err := f.Entry(i)
			if err != nil {
				return out, classify(key, err)
			}
			if e.Stream != stream || e.FirstRecord != rec {
				return out, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
					Err: fmt.Errorf("chunk [%d, %d) where the ref expects record %d", e.FirstRecord, e.EndRecord(), rec)}
			}
			rec = e.EndRecord()
			end := int64(e.EndRecord())
			if end <= r.at || end <= r.st.LowRecord {
				continue // settled already, or dead
			}
			// A live chunk starts where the last one ended, or, for the first
			// live chunk after dead ones, above settled_through but not above
			// low_record (the catalog then starts above a gap: retention).
			first := int64(e.FirstRecord)
			if first != r.at && !(first > r.at && !r.started && first <= r.st.LowRecord) {
				return out, &cycle.QuarantineError{SlotKey: key, Class: cycle.ClassTiling,
					Err: fmt.Errorf("chunk [%d, %d) does not start at record %d", e.FirstRecord, e.EndRecord(), r.at)}
			}
			out.Chunks = append(out.Chunks, SourceChunk{Src: Source{Key: key, Class: ref.Class}, Entry: e})
			out.Bytes += int64(e.ChunkBytes())
			records += int64(e.Count())
			r.at, r.started = end, true
		}
		if rec != uint64(ref.EndRecord()) {
			return out, &cycle.QuarantineError{Class: cycle.ClassTiling,
				Err: fmt.Errorf("ref [%d, %d) of stream %s: its chunks end at %d", ref.FirstRecord, ref.EndRecord(), stream, rec)}
		}
		if ref.EndRecord() > r.at {
			r.at = ref.EndRecord() // its chunks were dead: the stream continues past them
		}
	}
	switch {
	case r.at == r.st.NextRecord:
		out.Complete = true
	case r.at > r.st.NextRecord || !more:
		return out, &cycle.QuarantineError{Class: cycle.ClassTiling,
			Err: fmt.Errorf("stream %s: chunks end at %d, next_record is %d", stream, r.at, r.st.NextRecord)}
	}
	return out, nil
}
