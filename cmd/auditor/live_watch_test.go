package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
)

// liveWatcher watches a live run from outside the daemons: every poll it
// hashes (SHA-256 of the whole object) each settled object it has not seen
// and each whose ETag changed, and records a rewrite when a key holds other
// bytes than when it was first seen (also after it was deleted and put
// back); it records every quarantine row and halt it sees, and trim cursors
// that move backwards.
type liveWatcher struct {
	ctx    context.Context
	db     *catalog.DB
	store  objstore.Store
	bucket string
	stars  []string

	mu          sync.Mutex
	polls       int
	objects     map[string]*watchedObject
	rewrites    []string
	quarantines map[string]string // stream or slot: the first row seen
	halts       map[string]string // star: reason
	cursors     map[string]pos
	backwards   []string
	errs        []error
	// policy is the daemons' due policy; deferred the most streams of a
	// star seen held back or waiting for their cohort's turn at once
	policy   catalog.DuePolicy
	deferred map[string]int64
}

type watchedObject struct {
	sum  [sha256.Size]byte // the bytes first seen
	etag string            // the ETag last hashed
}

func newLiveWatcher(ctx context.Context, db *catalog.DB, store objstore.Store, bucket string, stars []string) *liveWatcher {
	return &liveWatcher{ctx: ctx, db: db, store: store, bucket: bucket, stars: stars,
		objects: map[string]*watchedObject{}, quarantines: map[string]string{}, halts: map[string]string{}, cursors: map[string]pos{},
		deferred: map[string]int64{}}
}

// start polls every interval until the returned stop (which polls once
// more; later calls do nothing).
func (w *liveWatcher) start(every time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			w.poll()
			select {
			case <-done:
				return
			case <-time.After(every):
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			w.poll()
		})
	}
}

func (w *liveWatcher) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) < 20 {
		w.errs = append(w.errs, err)
	}
}

func (w *liveWatcher) poll() {
	w.mu.Lock()
	w.polls++
	w.mu.Unlock()
	w.pollObjects()
	for _, star := range w.stars {
		w.pollStar(star)
	}
}

func (w *liveWatcher) pollObjects() {
	var keys []string
	err := w.store.List(w.ctx, w.bucket, "buckets/", func(o objstore.ObjectInfo) error {
		keys = append(keys, o.Key)
		return nil
	})
	if err != nil {
		w.fail(fmt.Errorf("list settled objects: %w", err))
		return
	}
	for _, key := range keys {
		a, err := w.store.Head(w.ctx, w.bucket, key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue // reaped since the listing
		}
		if err != nil {
			w.fail(fmt.Errorf("head %s: %w", key, err))
			continue
		}
		w.mu.Lock()
		o := w.objects[key]
		w.mu.Unlock()
		if o != nil && o.etag == a.ETag {
			continue
		}
		w.hash(key, a.ETag)
	}
}

// hash reads the whole object and compares it with the bytes first seen.
func (w *liveWatcher) hash(key, etag string) {
	a, err := w.store.Head(w.ctx, w.bucket, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return
	}
	if err != nil {
		w.fail(fmt.Errorf("head %s: %w", key, err))
		return
	}
	var b []byte
	if a.Size > 0 {
		if b, _, err = w.store.GetRange(w.ctx, w.bucket, key, 0, a.Size); errors.Is(err, objstore.ErrNotFound) {
			return
		} else if err != nil {
			w.fail(fmt.Errorf("read %s: %w", key, err))
			return
		}
	}
	sum := sha256.Sum256(b)
	if etag == "" {
		etag = a.ETag
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.objects[key]
	switch {
	case o == nil:
		w.objects[key] = &watchedObject{sum: sum, etag: etag}
	case o.sum != sum:
		w.rewrites = append(w.rewrites, fmt.Sprintf("%s: first seen with SHA-256 %x, now %x (%d bytes)", key, o.sum[:8], sum[:8], len(b)))
		o.sum, o.etag = sum, etag // report each change once
	default:
		o.etag = etag
	}
}

func (w *liveWatcher) pollStar(star string) {
	q, err := w.db.Settle().Quarantined(w.ctx, star)
	if err != nil {
		w.fail(err)
		return
	}
	st, err := w.db.Ledger().DaemonState(w.ctx, star)
	if err != nil {
		w.fail(err)
		return
	}
	ts, err := w.db.Trim().TrimState(w.ctx, star)
	if err != nil {
		w.fail(err)
		return
	}
	var deferred int64
	if w.policy.TailGrowth > 0 {
		_, cls, err := w.db.Ledger().TransitByClass(w.ctx, star, w.policy)
		if err != nil {
			w.fail(err)
			return
		}
		for _, c := range cls {
			deferred += c.Deferred
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.deferred[star] = max(w.deferred[star], deferred)
	for _, row := range q {
		id := row.SlotKey
		if row.Stream != nil {
			id = row.Stream.String()
		}
		if _, ok := w.quarantines[id]; !ok {
			w.quarantines[id] = fmt.Sprintf("star %s %s: %s: %s (since %s)", star, id, row.ErrorClass, row.Reason, row.Since.Format(time.RFC3339Nano))
		}
	}
	if st.Halted() && w.halts[star] == "" {
		w.halts[star] = st.HaltedReason
	}
	if ts.HasCursor {
		c := pos{ts.Cursor.Epoch, ts.Cursor.Seq}
		if prev, ok := w.cursors[star]; ok && c.less(prev) {
			w.backwards = append(w.backwards, fmt.Sprintf("star %s: trim cursor %v after %v", star, c, prev))
		}
		w.cursors[star] = c
	}
}

// final rehashes every settled object still standing, whatever its ETag.
func (w *liveWatcher) final() {
	w.mu.Lock()
	keys := make([]string, 0, len(w.objects))
	for k := range w.objects {
		keys = append(keys, k)
	}
	w.mu.Unlock()
	for _, k := range keys {
		w.hash(k, "")
	}
}

// report fails the test for everything the watcher saw go wrong.
func (w *liveWatcher) report(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.rewrites {
		t.Errorf("settled key rewritten with other bytes: %s", r)
	}
	for _, q := range w.quarantines {
		t.Errorf("quarantined: %s", q)
	}
	for star, reason := range w.halts {
		t.Errorf("star %s halted: %s", star, reason)
	}
	for _, b := range w.backwards {
		t.Errorf("%s", b)
	}
	for _, err := range w.errs {
		t.Errorf("watcher: %v", err)
	}
}

// TestLiveWatcherCatchesRewrite: the watcher of the live-traffic test
// reports a settled key whose bytes change, in place or by deletion and
// recreation, and not one put back with the same bytes.
func TestLiveWatcherCatchesRewrite(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, _ := testenv.MigratedDB(t)
	fs, err := filestore.New(objstore.FileConfig{Root: filepath.Join(t.TempDir(), "store")})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	w := newLiveWatcher(ctx, db, fs, "nova", nil)
	put := func(key, data string) {
		t.Helper()
		if err := fs.Delete(ctx, "nova", []string{key}); err != nil {
			t.Fatal(err)
		}
		if err := fs.PutIfAbsent(ctx, "nova", key, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	put("buckets/b0/a", "first bytes")
	put("buckets/b0/b", "other bytes")
	w.poll()
	put("buckets/b0/b", "other bytes") // reaped and put back alike: fine
	w.poll()
	if len(w.rewrites) != 0 {
		t.Fatalf("same bytes reported as a rewrite: %v", w.rewrites)
	}
	put("buckets/b0/a", "FIRST bytes")
	w.poll()
	if len(w.rewrites) != 1 {
		t.Fatalf("a rewritten key: %d rewrites reported, want 1: %v", len(w.rewrites), w.rewrites)
	}
	if err := fs.Delete(ctx, "nova", []string{"buckets/b0/b"}); err != nil {
		t.Fatal(err)
	}
	w.poll()
	put("buckets/b0/b", "other BYTES") // gone for a while, then back with other bytes
	w.final()
	if len(w.rewrites) != 2 || len(w.errs) != 0 {
		t.Fatalf("rewrites %v, errors %v", w.rewrites, w.errs)
	}
}
