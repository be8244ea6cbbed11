// Package reconcile rebuilds a star's metastore view from its object store
// after the metastore went back in time (docs/architecture.md#reconcile):
// `auditor reconcile`. The store is the last word: every settled object is
// self-describing (its key, trailer and footer say what it holds), so each
// stream's catalog is chosen again from what its settled prefix holds, the
// refs those objects cover are released, what the chain supersedes is
// armed for the reap, every key base's high-water revision is raised above
// every key found, and the star's mark past every marker.
//
// It lists (a recovery tool may; the auditor's cycles never do) and reads
// footers through the bundle reader; it writes through the catalog, fenced
// by the lease its caller holds, one transaction per stream, so a stream is
// reconciled whole or not at all and a rerun continues. It does not own the
// rewind check (package rewind) nor the cut's publish (settle.PublishCut).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
)

// Crash points of reconcile --apply (the cut's are settle's: settle.CrashCut*).
const (
	CrashAfterRaise  crashpoint.Point = "reconcile.after-raise"  // a stream's keys are claimed and its high-water revisions raised
	CrashAfterStream crashpoint.Point = "reconcile.after-stream" // a stream's commit is done
	CrashAfterMark   crashpoint.Point = "reconcile.after-mark"   // the star's mark is raised, the halt not yet lifted
)

// CrashPoints lists reconcile's crash points, the cut's included, in order.
func CrashPoints() []crashpoint.Point {
	return []crashpoint.Point{CrashAfterRaise, settle.CrashCutAfterIntent, settle.CrashCutAfterComplete, CrashAfterStream, CrashAfterMark}
}

// Catalog is what reconcile reads and writes in the metastore
// (*catalog.Restore).
type Catalog interface {
	StreamsOfStar(ctx context.Context, star string) ([]catalog.Stream, error)
	Stream(ctx context.Context, id catalog.StreamID) (catalog.Stream, error)
	ReconcileView(ctx context.Context, id catalog.StreamID, keyLow, keyHigh string) (catalog.ReconcileView, error)
	ClaimForReconcile(ctx context.Context, f catalog.Fence, id catalog.StreamID, epoch int64, keys []string, firsts []int64, revs []int32) ([]int64, error)
	CommitReconcile(ctx context.Context, f catalog.Fence, c catalog.ReconcileCommit) error
	Mark(ctx context.Context, star string) (catalog.Mark, error)
	RaiseMark(ctx context.Context, f catalog.Fence, n int64) error
	ClearRewoundHalt(ctx context.Context, f catalog.Fence, prefix string) (bool, error)
}

// Cutter publishes the cut of an object at a stream's next_record
// (settle.Settler).
type Cutter interface {
	PublishCut(ctx context.Context, f catalog.Fence, st catalog.Stream, key string, entries []bundlefmt.Entry, end uint64) (settle.Cut, error)
}

// Lister lists keys under a prefix and heads one (objstore.Store has it):
// the star's markers, the slots of refs left.
type Lister interface {
	List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error
	Head(ctx context.Context, bucket, key string) (objstore.Attrs, error)
}

// Deps are what reconcile works with.
type Deps struct {
	DB     Catalog
	Reader *bundle.Reader // settled listings, footers and chunks, through the topology
	Store  Lister         // the markers' listing and slot HEADs (the topology's store)
	Cutter Cutter         // nil: a stream that needs a cut is reported, not applied
	Log    *slog.Logger
	Crash  func(crashpoint.Point) // nil: none
	// Progress, when set, is told of each stream as it is done.
	Progress func(done, total int, s StreamReport)
}

// Config is one reconcile.
type Config struct {
	Star      string
	Apply     bool               // false: a dry run, nothing written
	Streams   []catalog.StreamID // only these (none: every stream of the star)
	ReapGrace time.Duration      // what the chain supersedes is reaped after it
	// Concurrency is how many streams are reconciled at once
	// (DefaultConcurrency when 0).
	Concurrency int
}

// DefaultConcurrency is how many streams a reconcile works on at once:
// each is a few requests in a row (a listing, two footer reads per
// object), so latency, not the machine, bounds one at a time.
const DefaultConcurrency = 8

// ErrIncomplete is a stream that could not be read whole (a listing or a
// read that failed): nothing of it was applied.
var ErrIncomplete = errors.New("the store could not be read whole")

// Run reconciles the star's streams, applied under f when c.Apply. It
// stops at the first stream it cannot read whole or commit: the streams
// before it are done (each in its own transaction), and a rerun goes on.
// The mark is raised and the rewind halt lifted only once every stream is.
func Run(ctx context.Context, d Deps, c Config, f catalog.Fence) (rep Report, err error) {
	start := time.Now()
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	crash := func(p crashpoint.Point) {
		if d.Crash != nil {
			d.Crash(p)
		}
	}
	rep = Report{Star: c.Star, Apply: c.Apply}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	defer func() { rep.Seconds = time.Since(start).Seconds() }()
	streams, err := streamsOf(ctx, d.DB, c)
	if err != nil {
		return rep, err
	}
	// Streams are independent (one transaction each): Concurrency of them
	// at a time. The first failure stops new ones; those running finish
	// (each commits whole or not at all).
	reports := make([]*StreamReport, len(streams))
	var (
		mu    sync.Mutex
		first error
		done  int
		next  int
		wg    sync.WaitGroup
	)
	for w := 0; w < max(c.Concurrency, 1); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				if first != nil || next == len(streams) {
					mu.Unlock()
					return
				}
				i := next
				next++
				mu.Unlock()
				st := streams[i]
				sr, err := reconcileStream(ctx, d, c, f, st, crash)
				mu.Lock()
				reports[i] = &sr
				if err != nil && first == nil {
					first = fmt.Errorf("stream %s: %w", st.ID, err)
				}
				done++
				if err == nil && d.Progress != nil {
					d.Progress(done, len(streams), sr)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, sr := range reports {
		if sr != nil {
			rep.add(*sr)
		}
	}
	if first != nil {
		return rep, first
	}
	if len(c.Streams) > 0 {
		// Some streams only: the star's others are as the restore left
		// them, so the mark stays and the halt with it.
		return rep, nil
	}
	marks, err := maxMarker(ctx, d, c.Star)
	if err != nil {
		return rep, err
	}
	m, err := d.DB.Mark(ctx, c.Star)
	if err != nil {
		return rep, err
	}
	rep.MarkersFound, rep.Mark = marks, max(m.N, marks)
	if marks > m.N {
		rep.Changes++
	}
	if !c.Apply {
		return rep, nil
	}
	if marks > m.N {
		if err := d.DB.RaiseMark(ctx, f, marks); err != nil {
			return rep, err
		}
	}
	crash(CrashAfterMark)
	lifted, err := d.DB.ClearRewoundHalt(ctx, f, cycle.ReasonRewound)
	if err != nil {
		return rep, err
	}
	if lifted {
		rep.HaltLifted = true
		rep.Changes++
	}
	return rep, nil
}

func streamsOf(ctx context.Context, db Catalog, c Config) ([]catalog.Stream, error) {
	if len(c.Streams) == 0 {
		return db.StreamsOfStar(ctx, c.Star)
	}
	var out []catalog.Stream
	for _, id := range c.Streams {
		st, err := db.Stream(ctx, id)
		if err != nil {
			return nil, err
		}
		if st.Star != c.Star {
			return nil, fmt.Errorf("stream %s is of star %q, not %q: %w", id, st.Star, c.Star, catalog.ErrNotFound)
		}
		out = append(out, st)
	}
	return out, nil
}

// maxMarker is the highest marker number the star's marker prefix holds
// (0: none), by a listing.
func maxMarker(ctx context.Context, d Deps, star string) (int64, error) {
	bucket := d.Reader.Topology().Standard()
	var high int64
	err := d.Store.List(ctx, bucket, bundlefmt.MarkPrefix(star), func(o objstore.ObjectInfo) error {
		if n, _, err := bundlefmt.ParseMarkKey(star, o.Key); err == nil {
			high = max(high, int64(n))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w: list the markers of star %q: %w", ErrIncomplete, star, err)
	}
	return high, nil
}

// keyRange bounds every settled key of the stream's epoch: [low, high).
func keyRange(st catalog.Stream) (string, string) {
	prefix := bundle.SettledPrefix(st)
	return prefix, prefix[:len(prefix)-1] + "0" // '/' + 1 is '0'
}

// reconcileStream reads the stream from the metastore and the store,
// plans its chain and, when applying, carries it out.
func reconcileStream(ctx context.Context, d Deps, c Config, f catalog.Fence, st catalog.Stream, crash func(crashpoint.Point)) (StreamReport, error) {
	sr := StreamReport{Stream: st.ID.String(), SettledBefore: st.SettledThrough, NextRecord: st.NextRecord}
	low, high := keyRange(st)
	v, err := d.DB.ReconcileView(ctx, st.ID, low, high)
	if err != nil {
		return sr, err
	}
	st = v.Stream
	sr.SettledBefore, sr.NextRecord = st.SettledThrough, st.NextRecord
	objs, present, err := listObjects(ctx, d, st, v, &sr)
	if err != nil {
		return sr, err
	}
	// Choose the chain; an object chosen and not yet cataloged has its
	// bytes read first, and one that fails is set aside and the chain
	// chosen again.
	cataloged := map[string]bool{}
	for _, e := range v.Entries {
		cataloged[entryKeyOf(st, e)] = true
	}
	var ch chain
	limit := uint64(st.NextRecord)
	erased := erasedBy(v.Erasures)
	for {
		ch = plan(st, v.Entries, objs, present, limit)
		again := false
		for _, l := range ch.links {
			if l.obj == nil || l.obj.verified || cataloged[l.obj.key] && !l.cut {
				continue
			}
			n, err := verifyObject(ctx, d, l.obj)
			sr.BytesRead += n
			sr.ObjectsRead++
			var q *cycle.QuarantineError
			if errors.As(err, &q) {
				l.obj.bad = true
				sr.Unsound = append(sr.Unsound, Problem{Key: l.obj.key, Error: err.Error()})
				again = true
				break
			}
			if err != nil {
				return sr, fmt.Errorf("%w: %w", ErrIncomplete, err)
			}
			l.obj.verified = true
		}
		if again {
			continue
		}
		// Records past settled_through may have been given again since
		// the restore (the write path goes on): where a ref's slot still
		// stands, the chain's records must be its records (or, where an
		// erasure names one, its tombstone); the chain ends at the first
		// chunk that differs, and the refs keep the rest.
		at, n, err := firstMismatch(ctx, d, st, v.Refs, ch, erased)
		sr.BytesRead += n
		if err != nil {
			return sr, err
		}
		if at < ch.end && at < limit {
			sr.Differ = append(sr.Differ, Range{From: int64(at), To: int64(ch.end),
				Why: "the store's objects hold other bytes than the slots the refs name: the write path gave these records again since the restore"})
			limit = at
			continue
		}
		// A cut falls on a batch end of the object cut (every chunk the
		// write path absorbs ends one); else the chain ends at the last
		// batch end before, and the refs keep the rest.
		if n := len(ch.links); n > 0 && ch.links[n-1].cut {
			o := ch.links[n-1].obj
			if !endsBatch(o, limit) {
				b := lastBatchEnd(o, limit)
				if b <= max(o.first, uint64(st.SettledThrough)) {
					o.bad = true
					sr.Unsound = append(sr.Unsound, Problem{Key: o.key,
						Error: fmt.Sprintf("cannot be cut at record %d: no batch ends there, nor after settled_through before it", limit)})
				} else {
					limit = b
				}
				continue
			}
		}
		break
	}
	ops := diff(st, v, ch, objs)
	sr.fill(st, ch, ops)
	if err := checkRefs(ctx, d, st, v.Refs, ch.end, &sr); err != nil {
		return sr, err
	}
	if !c.Apply || sr.Changes == 0 {
		return sr, nil
	}
	// Claim what the commit catalogs (and the object a cut is made
	// from) with publish intents, and raise every base found, in one
	// transaction: a rerun after a crash tells the claimed keys, named by
	// their intents, from keys given up below the raised high-water.
	var claims []string
	for _, l := range ch.links {
		if l.obj != nil && (l.cut || !cataloged[l.obj.key]) {
			claims = append(claims, l.obj.key)
		}
	}
	claimed, err := d.DB.ClaimForReconcile(ctx, f, st.ID, st.Epoch, claims, ops.raiseFirst, ops.raiseRev)
	if err != nil {
		return sr, err
	}
	crash(CrashAfterRaise)
	commit := catalog.ReconcileCommit{Stream: st.ID, Bucket: st.Bucket, ExpectSettled: v.Stream.SettledThrough,
		Remove: ops.remove, Add: ops.add, Settled: int64(ch.end), Close: append(claimed, ops.close...), Reap: ops.reap, ReapGrace: c.ReapGrace}
	if ops.cut != nil {
		if d.Cutter == nil {
			return sr, fmt.Errorf("the object %s must be cut at record %d, and this reconcile cannot publish", ops.cut.key, ch.end)
		}
		cut, err := d.Cutter.PublishCut(ctx, f, st, ops.cut.key, ops.cut.entries, ch.end)
		if err != nil {
			return sr, err
		}
		commit.Add = append(commit.Add, cut.Entry)
		commit.Close = append(commit.Close, cut.IntentID)
		sr.Cut.Published = cut.Key
	}
	if err := d.DB.CommitReconcile(ctx, f, commit); err != nil {
		return sr, err
	}
	crash(CrashAfterStream)
	d.Log.Info("stream reconciled", "stream", st.ID, "settled_before", sr.SettledBefore, "settled_after", sr.SettledAfter,
		"entries_added", sr.EntriesAdded, "entries_removed", sr.EntriesRemoved, "reaps_armed", sr.ReapsArmed, "lost", len(sr.Lost), "retired", len(sr.Retired))
	return sr, nil
}
