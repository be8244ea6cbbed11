package trim

import (
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

// Reap is step 7 of the cycle: it deletes what is armed and past its grace.
//
// Every delete here may land at any later time, even from a leader that has
// since lost its lease (its metadata writes are fenced; its S3 requests
// cannot be), or as the first attempt of a request the SDK retried. It is
// harmless all the same (docs/architecture.md#no-late-delete):
//
//   - A slot behind the trim cursor: no ref names it, and none ever will
//     (absorbs name only slots at or past the head, which only moves
//     forward; a past epoch is closed by its end_seq).
//   - An object armed by a reap or publish intent is deleted only after
//     catalog.Trim.ClassifyReaps found its key dead, in a fenced transaction
//     that also buried it (the base's high-water revision raised to it, a
//     publish intent turned into a reap): no publish intent can name the
//     key again, so no commit can catalog it, now or later.
//
// Aborting a multipart upload never removes a completed object, so it is
// harmless whatever the key's state.
type Reap struct {
	d  Deps
	db ReapCatalog
	c  Config
}

var _ cycle.Step = (*Reap)(nil)

// NewReap returns the reap step.
func NewReap(d Deps, c Config) (*Reap, error) {
	d.defaults()
	if err := c.Validate(); err != nil {
		return nil, err
	}
	switch {
	case d.DB == nil:
		return nil, errors.New("reap: no database")
	case d.Topology == nil:
		return nil, errors.New("reap: no storage topology")
	case d.Topology.Store() == nil:
		return nil, errors.New("reap: no object store")
	}
	d.Metrics.buckets(d.Topology.All())
	return &Reap{d: d, db: d.DB, c: c}, nil
}

// ResetLeaderGauges resets the reap gauges when the daemon stops leading
// (see Metrics.ResetLeaderGauges).
func (r *Reap) ResetLeaderGauges() { r.d.Metrics.ResetLeaderGauges() }

// Name implements cycle.Step.
func (r *Reap) Name() string { return "reap" }

// Run implements cycle.Step. A bucket that fails (a zone down) is not an
// error of the cycle: what it holds stays due and the next cycle retries it;
// the failure shows in the logs, nova_auditor_reap_delete_failures_total and
// the due backlog.
func (r *Reap) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	var counts cycle.Counts
	if err := r.reapSlots(ctx, f, opts, &counts); err != nil {
		return counts, err
	}
	if err := r.reapObjects(ctx, f, opts, &counts); err != nil {
		return counts, err
	}
	if r.d.Metrics != nil {
		b, err := readBacklog(ctx, r.db, f.Star, r.c.ReapGrace)
		if err != nil {
			return counts, err
		}
		r.d.Metrics.backlog(b)
	}
	return counts, nil
}

// fanout deletes keys from some buckets of a class's set, over the rounds
// of one reap. Which buckets are down is the shared zone health, recorded
// and honoured by the set (objstore.BucketSet.Delete): a bucket it holds
// off is skipped (what it holds stays due), and a request that fails whole
// holds the bucket off there, so one dead zone costs one detection per
// hold-off, not one per batch or per cycle. failed remembers the buckets
// that did not confirm some key, so the caller knows which are done.
type fanout struct {
	r        *Reap
	set      *objstore.BucketSet
	buckets  []string
	mu       sync.Mutex
	failed   map[string]bool
	requests atomic.Int64
}

func (r *Reap) newFanout(set *objstore.BucketSet, buckets []string) *fanout {
	return &fanout{r: r, set: set, buckets: buckets, failed: map[string]bool{}}
}

func (fo *fanout) allDown() bool { return fo.set.AllHeldOff(fo.buckets) }

// done is the buckets that confirmed every key given to delete so far.
func (fo *fanout) done() []string {
	fo.mu.Lock()
	defer fo.mu.Unlock()
	var out []string
	for _, b := range fo.buckets {
		if !fo.failed[b] {
			out = append(out, b)
		}
	}
	return out
}

// delete removes keys from every bucket; it returns the keys that every
// bucket confirmed deleted (absence is success).
func (fo *fanout) delete(ctx context.Context, keys []string) map[string]bool {
	outs := fo.set.Delete(ctx, keys, fo.buckets)
	for _, o := range outs {
		if o.HeldOff {
			fo.mu.Lock()
			fo.failed[o.Bucket] = true
			fo.mu.Unlock()
			continue
		}
		fo.requests.Add(1)
		fo.r.d.Metrics.deleteRequest(o.Bucket, o.Err != nil)
		if o.Err == nil {
			continue
		}
		fo.mu.Lock()
		fo.failed[o.Bucket] = true
		fo.mu.Unlock()
		if o.Failed != nil {
			fo.r.d.Log.Warn("reap delete failed for some keys", "bucket", o.Bucket, "keys", len(o.Failed), "err", o.Err)
			continue
		}
		held, _ := fo.r.d.Topology.Health().HeldOff(o.Bucket)
		fo.r.d.Log.Warn("reap delete failed: bucket held off, its deletes stay due", "bucket", o.Bucket, "for", held, "err", o.Err)
	}
	ok := make(map[string]bool, len(keys))
	for _, k := range keys {
		ok[k] = true
		for _, o := range outs {
			if !o.Confirmed(k) {
				delete(ok, k)
				break
			}
		}
	}
	return ok
}

var errStop = errors.New("every bucket is down")

// notIn is the buckets of all that are not in done, in order.
func notIn(all, done []string) []string {
	var out []string
	for _, b := range all {
		skip := false
		for _, d := range done {
			skip = skip || d == b
		}
		if !skip {
			out = append(out, b)
		}
	}
	return out
}

// fresh asks the rewind check, when there is one, before deletes.
func (r *Reap) fresh(ctx context.Context, f catalog.Fence) error {
	if r.d.Marks == nil {
		return nil
	}
	return r.d.Marks.Fresh(ctx, f)
}

// reapSlots deletes the due slot ranges from every bucket of the star's
// class, in DeleteObjects batches enumerated from the epochs' end_seq. A
// range leaves slot_reaps only once every bucket confirmed every key; a
// partly confirmed range keeps its unconfirmed rest due.
func (r *Reap) reapSlots(ctx context.Context, f catalog.Fence, opts cycle.Options, counts *cycle.Counts) error {
	reaps, err := r.db.SlotReaps(ctx, f.Star)
	if err != nil {
		return err
	}
	var due []catalog.SlotReap
	for _, rp := range reaps {
		if rp.Due {
			due = append(due, rp)
		}
	}
	if len(due) == 0 {
		return nil
	}
	c, err := loadChain(ctx, r.db, f.Star)
	if err != nil {
		return err
	}
	set, err := r.d.Topology.Class(c.class)
	if err != nil {
		return fmt.Errorf("reap slots of star %q: %w", f.Star, err)
	}
	all := set.Buckets()
	for _, rp := range due {
		// The buckets that confirmed the whole range in an earlier round
		// (a zone was down then) get none of its deletes again.
		buckets := notIn(all, rp.DoneBuckets)
		if len(buckets) == 0 {
			if !opts.DryRun {
				if err := r.db.FinishSlotReap(ctx, f, rp.ID); err != nil {
					return err
				}
			}
			continue
		}
		fo := r.newFanout(set, buckets)
		if opts.DryRun {
			n, err := c.count(rp.From, rp.To)
			if err != nil {
				return err
			}
			plan(opts, "reap: would delete %d slots %s .. %s (range %s..%s, released at #%d) from %v",
				n, slotKey(f.Star, rp.From), lastKey(f.Star, rp.To, c.epochs), rp.From, rp.To, rp.ID, buckets)
			continue
		}
		if fo.allDown() {
			continue
		}
		if err := r.fresh(ctx, f); err != nil {
			return err
		}
		r.d.crash(CrashSlotsBeforeDelete)
		done, next, complete, err := r.deleteRange(ctx, c, rp, fo)
		counts.S3Requests += fo.requests.Load()
		if err != nil {
			return err
		}
		r.d.crash(CrashSlotsAfterDelete)
		switch {
		case complete:
			if err := r.db.FinishSlotReap(ctx, f, rp.ID); err != nil {
				return err
			}
		default:
			if ok := fo.done(); len(ok) > 0 {
				if err := r.db.SlotReapBucketsDone(ctx, f, rp.ID, ok); err != nil {
					return err
				}
			}
			if done > 0 {
				if err := r.db.ShrinkSlotReap(ctx, f, rp.ID, rp.From, next); err != nil {
					return err
				}
			}
		}
		counts.SlotsReaped += done
		r.d.Metrics.reapedSlots(done)
		if done > 0 || complete {
			r.d.Log.Info("slots reaped", "star", f.Star, "from", rp.From.String(), "to", rp.To.String(), "slots", done, "complete", complete)
		}
	}
	return ctx.Err()
}

// deleteRange deletes a range's keys batch by batch, Concurrency batches at
// a time, going on past a failed batch so that the healthy buckets are
// emptied all the same. It returns how many slots from the range's start
// every bucket confirmed, where the unconfirmed rest starts, and whether
// the whole range is confirmed.
func (r *Reap) deleteRange(ctx context.Context, c chain, rp catalog.SlotReap, fo *fanout) (done int64, next Pos, complete bool, err error) {
	var (
		wave      []batch
		firstFail *Pos
	)
	flush := func() error {
		oks := make([]bool, len(wave))
		var wg sync.WaitGroup
		for i, b := range wave {
			wg.Add(1)
			go func() {
				defer wg.Done()
				oks[i] = len(fo.delete(ctx, b.keys)) == len(b.keys)
			}()
		}
		wg.Wait()
		for i, b := range wave {
			switch {
			case firstFail != nil:
			case oks[i]:
				done += int64(len(b.keys))
			default:
				p := b.first
				firstFail = &p
			}
		}
		wave = wave[:0]
		return ctx.Err()
	}
	err = c.batches(rp.From, rp.To, r.c.BatchSize, func(b batch) error {
		if len(wave) == r.c.Concurrency {
			if err := flush(); err != nil {
				return err
			}
		}
		if fo.allDown() {
			if firstFail == nil {
				p := b.first
				firstFail = &p
			}
			return errStop
		}
		wave = append(wave, b)
		return nil
	})
	if err == nil {
		err = flush()
	}
	if errors.Is(err, errStop) {
		err = nil
	}
	if err != nil {
		return done, next, false, err
	}
	if firstFail == nil {
		return done, rp.To, true, nil
	}
	return done, *firstFail, false, nil
}

// candidate is a due intent with what reaping it takes.
type candidate struct {
	in     catalog.Intent
	coords catalog.KeyCoords
	set    *objstore.BucketSet // of the key's class
}

// reapObjects executes the due reap intents and the publish intents older
// than the grace, a batch at a time: each batch is classified in a fenced
// transaction (catalog.Trim.ClassifyReaps), then the dead keys are deleted from
// every bucket of their class and the finished intents removed.
func (r *Reap) reapObjects(ctx context.Context, f catalog.Fence, opts cycle.Options, counts *cycle.Counts) error {
	held := map[string]int{}
	defer func() { r.d.Metrics.heldObjects(held) }()
	var after int64
	for {
		intents, err := r.db.DueObjectReaps(ctx, f.Star, r.c.ReapGrace, after, r.c.BatchSize)
		if err != nil {
			return err
		}
		if len(intents) == 0 {
			return nil
		}
		after = intents[len(intents)-1].ID
		byID := map[int64]candidate{}
		var cands []catalog.ReapCandidate
		for _, in := range intents {
			k, err := bundlefmt.ParseSettledKey(in.ObjectKey)
			if err != nil {
				held["invalid_key"]++
				r.d.Log.Warn("reap held: not a settled key", "intent", in.ID, "key", in.ObjectKey, "err", err)
				plan(opts, "reap: intent #%d names %q, not a settled key: held", in.ID, in.ObjectKey)
				continue
			}
			set, err := r.d.Topology.Class(in.Class)
			if err != nil {
				held["unknown_class"]++
				r.d.Log.Warn("reap held: no buckets for its class", "intent", in.ID, "key", in.ObjectKey, "err", err)
				continue
			}
			co := catalog.KeyCoords{Bucket: k.Bucket, Stream: k.Stream, Epoch: int64(k.StreamEpoch),
				FirstRecord: int64(k.FirstRecord), Revision: int32(k.Revision)}
			byID[in.ID] = candidate{in: in, coords: co, set: set}
			cands = append(cands, catalog.ReapCandidate{ID: in.ID, Key: in.ObjectKey, Coords: co})
		}
		var verdicts map[int64]catalog.KeyVerdict
		if opts.DryRun {
			verdicts, err = r.db.PreviewReaps(ctx, f.Star, r.c.ReapGrace, cands)
		} else if err = r.fresh(ctx, f); err == nil {
			verdicts, err = r.db.ClassifyReaps(ctx, f, r.c.ReapGrace, cands)
		}
		if err != nil {
			return err
		}
		var act []candidate // dead: delete; referenced publish: abort only
		dropped := 0
		for _, cd := range cands {
			c := byID[cd.ID]
			v := verdicts[cd.ID]
			switch {
			case v.Deletable():
				act = append(act, c)
				plan(opts, "reap: would delete %s (%s intent #%d) from %v", c.in.ObjectKey, c.in.Kind, c.in.ID, c.set.Buckets())
			case v == catalog.KeyReferenced && c.in.Kind == "publish":
				act = append(act, c)
				plan(opts, "reap: %s is in the catalog: would drop publish intent #%d (abort its upload, keep the object)", c.in.ObjectKey, c.in.ID)
			case v == catalog.KeyReferenced:
				dropped++
				plan(opts, "reap: %s is in the catalog: would drop reap intent #%d unexecuted", c.in.ObjectKey, c.in.ID)
			case v == catalog.KeyPublishable || v == catalog.KeyPublishing:
				held[v.String()]++
				plan(opts, "reap: %s (%s intent #%d) could still be published: held", c.in.ObjectKey, c.in.Kind, c.in.ID)
			}
		}
		if opts.DryRun {
			if len(intents) < r.c.BatchSize {
				return nil
			}
			continue
		}
		if dropped > 0 {
			r.d.Metrics.dropped(dropped)
			r.d.Log.Info("reap intents dropped: their keys are in the catalog", "star", f.Star, "intents", dropped)
		}
		r.d.crash(CrashObjectBeforeDelete)
		done, reaped := r.executeObjects(ctx, act, verdicts, counts)
		r.d.crash(CrashObjectAfterDelete)
		if err := r.db.FinishReaps(ctx, f, done); err != nil {
			return err
		}
		counts.ObjectsReaped += int64(len(reaped))
		for _, c := range reaped {
			r.d.Metrics.reapedObject(c.in.Kind)
		}
		if len(reaped) > 0 {
			r.d.Log.Info("objects reaped", "star", f.Star, "objects", len(reaped))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(intents) < r.c.BatchSize {
			return nil
		}
	}
}

// executeObjects aborts the uploads of publish intents and deletes the dead
// keys from every bucket of their class. It returns the intents that are
// finished and, of those, the ones whose object was deleted.
func (r *Reap) executeObjects(ctx context.Context, act []candidate, verdicts map[int64]catalog.KeyVerdict, counts *cycle.Counts) (done []int64, reaped []candidate) {
	ready := make([]candidate, 0, len(act))
	for _, c := range act {
		ok := true
		listAll := c.in.Kind == "publish" || c.in.AbortUnrecorded
		if listAll || c.in.UploadID != "" {
			// Every upload of the key, not only the recorded one, for a
			// publish intent (and one the classification turned into a
			// reap: AbortUnrecorded, so a retry lists again): a kill
			// between creating an upload and recording its ID leaves one
			// that only a listing finds, and once this intent is finished
			// nothing would ever abort it. The key is never published
			// again (dead and buried, or already cataloged), so no upload
			// of it is anyone's.
			outs, requests := c.set.AbortUploads(ctx, c.in.ObjectKey, c.in.UploadID, listAll)
			counts.S3Requests += requests
			for _, o := range outs {
				switch {
				case o.HeldOff:
					r.d.Log.Debug("abort held: its zone is held off", "key", c.in.ObjectKey, "bucket", o.Bucket)
					ok = false // a later cycle aborts there
				case o.Err != nil:
					r.d.Log.Warn("abort the uploads of an abandoned publish failed", "key", c.in.ObjectKey, "bucket", o.Bucket, "err", o.Err)
					ok = false
				}
			}
		}
		if !ok {
			continue
		}
		if !verdicts[c.in.ID].Deletable() {
			done = append(done, c.in.ID) // referenced: the upload is gone, the object stays
			continue
		}
		ready = append(ready, c)
	}
	// Settled objects are one class (standard), but group by bucket set all
	// the same.
	groups := map[*objstore.BucketSet][]candidate{}
	for _, c := range ready {
		groups[c.set] = append(groups[c.set], c)
	}
	for set, g := range groups {
		fo := r.newFanout(set, set.Buckets())
		keys := make([]string, 0, len(g))
		seen := map[string]bool{}
		for _, c := range g {
			if !seen[c.in.ObjectKey] { // two intents may name one key
				seen[c.in.ObjectKey] = true
				keys = append(keys, c.in.ObjectKey)
			}
		}
		ok := fo.delete(ctx, keys)
		counts.S3Requests += fo.requests.Load()
		for _, c := range g {
			if ok[c.in.ObjectKey] {
				done = append(done, c.in.ID)
				if seen[c.in.ObjectKey] {
					seen[c.in.ObjectKey] = false // count each object once
					reaped = append(reaped, c)
				}
			}
		}
	}
	return done, reaped
}
