package settle_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/trim"
)

// pausePoint is a crash hook that, instead of dying, blocks the calling
// goroutine the first time the named point is hit, until released: a
// leader frozen (GC, SIGSTOP, a frozen VM) at that step.
type pausePoint struct {
	name    crashpoint.Point
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newPause(name crashpoint.Point) *pausePoint {
	return &pausePoint{name: name, reached: make(chan struct{}), release: make(chan struct{})}
}

func (p *pausePoint) hook(n crashpoint.Point) {
	if n != p.name {
		return
	}
	p.once.Do(func() {
		close(p.reached)
		<-p.release
	})
}

// leaderA is a leader of star with a lease of its own, whose lease the
// test lets run out while A is paused.
type leaderA struct {
	e     *env
	star  string
	fence catalog.Fence
}

func newLeaderA(t *testing.T, e *env, star string) *leaderA {
	t.Helper()
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, star, "leader-a", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return &leaderA{e: e, star: star, fence: l.Fence}
}

// reapPaused runs A's reap in the background; it pauses at the point and
// returns once A is paused there, with the channel A's outcome arrives on.
func (a *leaderA) reapPaused(t *testing.T, p *pausePoint) <-chan error {
	t.Helper()
	r, err := trim.NewReap(trim.Deps{DB: a.e.db.Trim(), Topology: a.e.topology(), Crash: p.hook},
		trim.Config{BatchSize: 1000, Concurrency: trim.DefaultConcurrency})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := r.Run(context.Background(), a.fence, cycle.Options{Trigger: "once"})
		done <- err
	}()
	select {
	case <-p.reached:
	case err := <-done:
		t.Fatalf("leader A's reap ended before its delete (%v)", err)
	case <-time.After(time.Minute):
		t.Fatal("leader A's reap never reached its delete")
	}
	return done
}

// freezeBeforeDelete lets every armed reap fall due, runs A's reap until
// it freezes before its DELETE, and lets A's lease run out.
func (a *leaderA) freezeBeforeDelete(t *testing.T) (*pausePoint, <-chan error) {
	t.Helper()
	a.e.skipGrace()
	p := newPause(trim.CrashObjectBeforeDelete)
	done := a.reapPaused(t, p)
	a.expire(t)
	return p, done
}

// expire ends A's lease (its renewals stopped while it was paused).
func (a *leaderA) expire(t *testing.T) {
	t.Helper()
	if _, err := a.e.db.Pool().Exec(a.e.ctx, `UPDATE nova.auditor_leases SET expires_at = now() WHERE star = $1`, a.star); err != nil {
		t.Fatal(err)
	}
}

// resume lets A's held DELETE go, and checks that A then finds its lease
// lost (its metadata writes are fenced; its S3 requests were not).
func (a *leaderA) resume(t *testing.T, p *pausePoint, done <-chan error) {
	t.Helper()
	close(p.release)
	select {
	case err := <-done:
		if !cycle.IsLeaseLost(err) {
			t.Fatalf("leader A after its late delete: %v, want its lease lost", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("leader A never finished its reap")
	}
}

// damagedStanding leaves the standing object of a publish that died after
// its complete with one data byte flipped: adoption's data check fails on
// it, and the key is condemned. It returns the key.
func damagedStanding(t *testing.T, b backend) (*env, string) {
	t.Helper()
	e, in := crashedPublish(t, b, settle.CrashAfterComplete)
	obj := readAll(t, e, in.ObjectKey)
	obj[len(obj)/3] ^= 0x40 // a data byte: the footer is in the last few hundred bytes
	replaceSlot(e, in.ObjectKey, obj)
	return e, in.ObjectKey
}

// release lifts the quarantine of the stream of a settled key.
func (e *env) release(key string) {
	e.t.Helper()
	k, _ := bundlefmt.ParseSettledKey(key)
	if ok, err := writepath.New(e.db).ReleaseQuarantine(e.ctx, "s1", k.Stream); err != nil || !ok {
		e.t.Fatalf("release: %v %v", ok, err)
	}
}

// skipGrace moves every armed reap past its grace.
func (e *env) skipGrace() {
	e.t.Helper()
	if err := writepath.New(e.db).SkipGrace(e.ctx, "s1", 2*time.Hour); err != nil {
		e.t.Fatal(err)
	}
}

// checkCatalogReadable asserts that every cataloged object of the star
// exists, and that novasim check reads every record back from them.
func (e *env) checkCatalogReadable(star string) {
	e.t.Helper()
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, star)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, st := range streams {
		entries, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, en := range entries {
			key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
			if _, err := e.store.Head(e.ctx, e.std, key); err != nil {
				e.t.Errorf("cataloged %s: %v", key, err)
			}
			n++
		}
	}
	if n == 0 {
		e.t.Fatal("nothing cataloged")
	}
	e.checkSettled(star)
}

// TestLateDeleteAfterRelease reproduces the late delete of a released,
// republished key, made deterministic: a standing object is found damaged and its key
// condemned; leader A's reap classifies the key dead and freezes before
// its DELETE; A's lease runs out; leader B reaps the key itself, the
// operator releases the stream, and B publishes the stream's records
// again. Then A's DELETE lands. Every cataloged key must still exist and
// read back: B's publish went to a revision above the condemned key.
func TestLateDeleteAfterRelease(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, key := damagedStanding(t, b)

			a := newLeaderA(t, e, "s1")
			c, err := e.settler(nil).Run(e.ctx, a.fence, cycle.Options{Trigger: "once"})
			if err != nil || c.StreamsQuarantined != 1 {
				t.Fatalf("leader A's settle: %+v %v, want the stream quarantined", c, err)
			}
			p, done := a.freezeBeforeDelete(t)

			// Leader B: reaps the condemned key, the operator releases
			// the stream, B settles it again.
			if c := e.reap("s1"); c.ObjectsReaped != 1 {
				t.Fatalf("leader B's reap: %+v", c)
			}
			e.release(key)
			c, err = e.cycle("s1", e.settler(nil))
			if err != nil || c.StreamsQuarantined != 0 || c.ObjectsPublished == 0 {
				t.Fatalf("leader B's settle after the release: %+v %v", c, err)
			}
			a.resume(t, p, done)
			e.checkCatalogReadable("s1")
		})
	}
}

// TestLateDeleteAfterNewErasure: an erasure rewrite of a settled object
// dies after its complete; the erasure is withdrawn, so recovery gives
// the rewrite up and leader A's reap classifies its key dead, then freezes
// before its DELETE. A's lease runs out; a new erasure of the same object
// arrives, and leader B rewrites the object and applies the erasure. Then
// A's DELETE lands: B's rewrite must not have gone to A's key.
func TestLateDeleteAfterNewErasure(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 8, sim.Faults{}, 1)
			e.settleOK(e.settler(nil))
			id := e.firstStream("s1").ID
			first := e.lastEntry(id)
			e.record(id, first.FirstRecord+1, 1)
			hits := 0
			if c := e.erase("s1", e.eraseSettler(crashAt(settle.CrashEraseAfterComplete, &hits))); hits != 1 {
				t.Fatalf("erasure rewrite did not reach its complete: %+v", c)
			}
			open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0)
			if len(open) != 1 {
				t.Fatalf("open publish intents after the crash: %+v", open)
			}
			abandoned := open[0].ObjectKey
			// The erasure is withdrawn: the rewrite's intent is stale.
			if _, err := e.db.Pool().Exec(e.ctx, `DELETE FROM nova.erasures WHERE stream_id = $1`, id); err != nil {
				t.Fatal(err)
			}
			a := newLeaderA(t, e, "s1")
			if _, err := e.settler(nil).Run(e.ctx, a.fence, cycle.Options{Trigger: "once"}); err != nil {
				t.Fatal(err)
			}
			if reaps, _ := e.db.Settle().Intents(e.ctx, "s1", "reap", 0); len(reaps) != 1 || reaps[0].ObjectKey != abandoned {
				t.Fatalf("recovery did not give up the withdrawn rewrite %s: %+v", abandoned, reaps)
			}
			p, done := a.freezeBeforeDelete(t)

			// Leader B: reaps the abandoned key itself, then a new erasure
			// of the same object, rewritten and applied.
			if c := e.reap("s1"); c.ObjectsReaped != 1 {
				t.Fatalf("leader B's reap: %+v", c)
			}
			e.record(id, first.FirstRecord+2, 1)
			e.finishErasures(e.eraseSettler(nil), id)
			if got := e.lastEntry(id); got.FirstRecord != first.FirstRecord || got.Revision <= first.Revision {
				t.Fatalf("the object was not rewritten: %+v, before %+v", got, first)
			}
			a.resume(t, p, done)
			e.checkCatalogReadable("s1")
			if _, err := e.store.Head(e.ctx, e.std, abandoned); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("the abandoned rewrite %s still stands: %v", abandoned, err)
			}
		})
	}
}

// replayDeletes records every DeleteObjects request it carries, to send
// one again later: the first attempt of a request the SDK retried, held
// in the network and delivered after the retry succeeded.
type replayDeletes struct {
	next http.RoundTripper
	mu   sync.Mutex
	held []*http.Request
}

func (r *replayDeletes) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && strings.Contains(req.URL.RawQuery, "delete") && req.Body != nil {
		body, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		late := req.Clone(context.Background())
		late.Body = io.NopCloser(bytes.NewReader(body))
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.mu.Lock()
		r.held = append(r.held, late)
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

// deliver sends every held request again, as it was signed.
func (r *replayDeletes) deliver(t *testing.T) int {
	t.Helper()
	r.mu.Lock()
	held := r.held
	r.held = nil
	r.mu.Unlock()
	for _, req := range held {
		resp, err := r.next.RoundTrip(req)
		if err != nil {
			t.Fatalf("late delete: %v", err)
		}
		_, _ = io.Copy(io.Discard, resp.Body) // drained for the connection's reuse, not read
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("late delete: %s", resp.Status)
		}
	}
	return len(held)
}

// TestLateDeleteReplayedBySDKRetry: a delete need not come from a paused
// process. The reap's DeleteObjects of a condemned key is delivered
// again, byte for byte as it was signed, after the stream was released
// and its records published again: the late copy must find nothing the
// catalog references.
func TestLateDeleteReplayedBySDKRetry(t *testing.T) {
	rp := &replayDeletes{next: http.DefaultTransport}
	e, key := damagedStanding(t, s3Backend("s3-replay", "replay", rp, nil))
	if c, err := e.cycle("s1", e.settler(nil)); err != nil || c.StreamsQuarantined != 1 {
		t.Fatalf("settle of the damaged object: %+v %v", c, err)
	}
	e.skipGrace()
	if c := e.reap("s1"); c.ObjectsReaped != 1 {
		t.Fatalf("reap of the condemned key: %+v", c)
	}
	e.release(key)
	if c, err := e.cycle("s1", e.settler(nil)); err != nil || c.StreamsQuarantined != 0 || c.ObjectsPublished == 0 {
		t.Fatalf("settle after the release: %+v %v", c, err)
	}
	if n := rp.deliver(t); n == 0 {
		t.Fatal("no delete was held to deliver late")
	}
	e.checkCatalogReadable("s1")
}

// TestReleaseBeforeTheReap: the operator releases a stream whose
// condemned object still stands (its reap not yet due). The next settle
// publishes the records at a revision above the condemned key, so it
// neither meets the damaged object again (no second quarantine) nor can
// the condemned key's reap, later, touch what it publishes.
func TestReleaseBeforeTheReap(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, key := damagedStanding(t, b)
			if c, err := e.cycle("s1", e.settler(nil)); err != nil || c.StreamsQuarantined != 1 {
				t.Fatalf("settle of the damaged object: %+v %v", c, err)
			}
			e.release(key)
			c, err := e.cycle("s1", e.settler(nil))
			if err != nil || c.StreamsQuarantined != 0 || c.ObjectsPublished == 0 {
				q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
				t.Fatalf("settle after the release: %+v %v; quarantine %+v", c, err, q)
			}
			e.skipGrace()
			if c := e.reap("s1"); c.ObjectsReaped != 1 {
				t.Fatalf("reap of the condemned key: %+v", c)
			}
			if _, err := e.store.Head(e.ctx, e.std, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("condemned %s still stands: %v", key, err)
			}
			e.checkCatalogReadable("s1")
		})
	}
}
