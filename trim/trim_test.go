package trim_test

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/nova/auditor/objstore/s3store"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/trim"
)

// metric reads one sample from the registry (0 when absent).
func metric(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestTrimAndReapAcrossFailover is the acceptance test with hand-made
// traffic (novasim's version follows once settle runs end to end): two
// epochs with a failover, poison slots, a lost flight between absorbed ones
// and one past the head; a cycle after a partial settle trims to the
// earliest remaining ref and reaps everything behind it from every bucket of
// the class; a cycle after the rest is settled trims to the head.
func TestTrimAndReapAcrossFailover(t *testing.T) {
	t.Parallel()
	for _, class := range []string{catalog.ClassStandard, catalog.ClassExpress} {
		t.Run(class, func(t *testing.T) {
			t.Parallel()
			forEachBackend(t, func(t *testing.T, ns namedStore) { trimAndReapAcrossFailover(t, ns, class) })
		})
	}
}

func trimAndReapAcrossFailover(t *testing.T, ns namedStore, class string) {
	a, b, c := sid(1), sid(2), sid(3)
	e := newEnvOn(t, ns, class, 2, a, b, c)
	e.flight(1, 0, batch{a, 3}, batch{b, 2})
	e.flight(1, 1, batch{a, 2})
	e.lost(1, 2, batch{b, 1}, batch{c, 1}) // lost: its records go again in 1/3
	e.flight(1, 3, batch{b, 1}, batch{c, 1})
	e.lost(1, 4, batch{a, 1}) // landed past the head: the fence's poison finds it taken
	old, end := e.failover(true)
	if old != 1 || end != 7 {
		t.Fatalf("fence: epoch %d end_seq %d, want 1 and 7 (poison at 5, 6)", old, end)
	}
	e.flight(2, 0, batch{a, 1}, batch{c, 2})
	e.flight(2, 1, batch{b, 3})
	settledKeys := e.settle(a, b)

	n := e.mustCycle()
	e.checkChain(P(1, 3), P(1, 3), P(1, 4), P(1, 5), P(1, 6), P(2, 0), P(2, 1))
	if n.SlotsReaped != 3 {
		t.Fatalf("slots reaped %d, want 3", n.SlotsReaped)
	}
	if want := int64(3 * len(e.buckets())); n.S3Requests != int64(len(e.buckets())) || int64(e.store.deleted) != want {
		t.Fatalf("requests %d, keys deleted %d; want one DeleteObjects per bucket and %d keys", n.S3Requests, e.store.deleted, want)
	}

	settledKeys = append(settledKeys, e.settle(c)...)
	n = e.mustCycle()
	e.checkChain(P(2, 2))
	if n.SlotsReaped != 6 {
		t.Fatalf("second cycle reaped %d slots, want 6", n.SlotsReaped)
	}
	// New traffic after the cursor: a ref at the head holds the bound.
	e.flight(2, 2, batch{a, 1})
	e.lost(2, 3, batch{a, 1})
	e.mustCycle()
	e.checkChain(P(2, 2), P(2, 2), P(2, 3))
	for _, k := range settledKeys {
		if ok, err := exists(e.ctx, e.store, e.std, k); err != nil || !ok {
			t.Fatalf("settled object %s gone: %v", k, err)
		}
	}
	if got := metric(t, e.reg, "nova_auditor_slots_reaped_total"); got != 9 {
		t.Fatalf("slots_reaped_total %v", got)
	}
	if got := metric(t, e.reg, "nova_auditor_trim_slots_released_total"); got != 9 {
		t.Fatalf("trim_slots_released_total %v", got)
	}
	st, err := trim.ReadStatus(e.ctx, e.db.Trim(), e.star, 0)
	if err != nil || st.Cursor != P(2, 2) || st.Bound != P(2, 2) || st.Backlog != (trim.Backlog{}) {
		t.Fatalf("status: %+v %v", st, err)
	}
}

// TestFenceInProgressHoldsTrim: a past epoch without end_seq releases
// nothing of itself (even with the cursor already inside it), shows in the
// metrics, the status and the plan, and is released once end_seq is set.
func TestFenceInProgressHoldsTrim(t *testing.T) {
	t.Parallel()
	a := sid(1)
	e := newEnv(t, catalog.ClassStandard, 2, a)
	e.flight(1, 0, batch{a, 1})
	e.flight(1, 1, batch{a, 1})
	e.settle(a)
	e.mustCycle()
	e.checkChain(P(1, 2))

	e.flight(1, 2, batch{a, 1})
	e.settle(a)
	old, end := e.failover(false)
	e.flight(2, 0, batch{a, 1})
	e.settle(a)
	if _, err := e.cycle(false); err != nil {
		t.Fatalf("a fence in progress must not halt: %v", err)
	}
	e.checkChain(P(1, 2), P(1, 2), P(1, 3), P(1, 4), P(2, 0))
	if got := metric(t, e.reg, "nova_auditor_trim_fence_wait_epoch"); got != 1 {
		t.Fatalf("fence wait epoch metric %v", got)
	}
	st, err := trim.ReadStatus(e.ctx, e.db.Trim(), e.star, 0)
	if err != nil || st.FenceWait == nil || st.FenceWait.Epoch != 1 || st.Move {
		t.Fatalf("status: %+v %v", st, err)
	}
	e.plan.Reset()
	if _, err := e.cycle(true); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(e.plan.String(), "waits at epoch 1") {
		t.Fatalf("plan does not show the fence:\n%s", e.plan.String())
	}

	if err := writepath.New(e.db).EndFence(e.ctx, e.star, old, end); err != nil {
		t.Fatal(err)
	}
	e.mustCycle()
	e.checkChain(P(2, 1))
	if got := metric(t, e.reg, "nova_auditor_trim_fence_wait_epoch"); got != 0 {
		t.Fatalf("fence wait epoch metric after end_seq %v", got)
	}
}

// TestQuarantineHoldsTrim: a quarantined stream's refs hold the bound (its
// slots are never deleted) and the hold shows with the oldest held slot.
func TestQuarantineHoldsTrim(t *testing.T) {
	t.Parallel()
	a, b := sid(1), sid(2)
	e := newEnv(t, catalog.ClassStandard, 1, a, b)
	e.flight(1, 0, batch{a, 2})
	e.flight(1, 1, batch{b, 2})
	e.flight(1, 2, batch{a, 2})
	e.settle(a)
	if err := e.db.Settle().Quarantine(e.ctx, e.fence, b, bundlefmt.SlotKey(e.star, 1, 1), "corrupt", "test"); err != nil {
		t.Fatal(err)
	}
	e.mustCycle()
	e.checkChain(P(1, 1), P(1, 1), P(1, 2))
	if metric(t, e.reg, "nova_auditor_trim_held_by_quarantine") != 1 ||
		metric(t, e.reg, "nova_auditor_trim_quarantine_held_slot_epoch") != 1 ||
		metric(t, e.reg, "nova_auditor_trim_quarantine_held_slot_seq") != 1 {
		t.Fatal("quarantine hold not in the metrics")
	}
	st, err := trim.ReadStatus(e.ctx, e.db.Trim(), e.star, 0)
	if err != nil || st.Quarantine == nil || !st.Quarantine.Bounding || st.Quarantine.Stream != b || st.Quarantine.Slot != P(1, 1) {
		t.Fatalf("status: %+v %v", st.Quarantine, err)
	}

	// One trim step over many cycles logs the hold at warn once, and its
	// end once.
	var logs bytes.Buffer
	d := e.deps()
	d.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tr, err := trim.NewTrim(d, e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := tr.Run(e.ctx, e.fence, cycle.Options{Trigger: "once"}); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), `level=WARN msg="trim held by quarantine"`); n != 1 {
		t.Fatalf("the hold was logged %d times at warn over 3 cycles, want once:\n%s", n, logs.String())
	}
	if _, err := writepath.New(e.db).ReleaseQuarantine(e.ctx, e.star, b); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Run(e.ctx, e.fence, cycle.Options{Trigger: "once"}); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "trim no longer held by quarantine"); n != 1 {
		t.Fatalf("the end of the hold was logged %d times, want once:\n%s", n, logs.String())
	}
}

// TestReapWithExpressZoneDown: with one express zone down the reap deletes
// from the other zones, keeps the range due, and finishes once the zone is
// back; a range whose middle fails keeps exactly its unconfirmed rest.
func TestReapWithExpressZoneDown(t *testing.T) {
	t.Parallel()
	t.Run("zone down", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, reapWithZoneDown)
	})
	t.Run("a failed batch keeps the rest due", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, reapWithFailedBatch)
	})
	t.Run("progress per bucket", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, reapProgressPerBucket)
	})
}

// reapProgressPerBucket: while one zone is down, the healthy zones confirm
// the range once and never receive its deletes again, and the down zone,
// held off by the shared zone health, gets no request while held off: the
// requests per cycle do not grow with the outage.
func reapProgressPerBucket(t *testing.T, ns namedStore) {
	a := sid(1)
	e := newEnvOn(t, ns, catalog.ClassExpress, 1, a)
	e.cfg.BatchSize, e.cfg.Concurrency = 2, 1
	e.health = objstore.NewHealth(time.Hour, time.Hour)
	for s := int64(0); s < 5; s++ {
		e.flight(1, s, batch{a, 1})
	}
	e.settle(a)
	down := e.express[1]
	e.store.setDown(down, true)
	requests := func() map[string]int {
		e.store.mu.Lock()
		defer e.store.mu.Unlock()
		out := map[string]int{}
		for b, n := range e.store.requests {
			out[b] = n
		}
		return out
	}
	e.mustCycle()
	first := requests()
	if first[down] != 1 || first[e.express[0]] != 3 || first[e.express[2]] != 3 {
		t.Fatalf("first round's deletes by bucket %v: want 3 batches to each healthy zone, 1 request to the down one", first)
	}
	reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star)
	if len(reaps) != 1 || len(reaps[0].DoneBuckets) != 2 {
		t.Fatalf("the healthy zones are done with the range: %+v", reaps)
	}
	for i := 0; i < 3; i++ {
		e.mustCycle()
	}
	if again := requests(); fmt.Sprint(again) != fmt.Sprint(first) {
		t.Fatalf("three more cycles of the outage sent deletes: %v, after the first %v", again, first)
	}
	// The zone is back and no longer held off: only it gets the range.
	e.store.setDown(down, false)
	e.health.Succeeded(down)
	n := e.mustCycle()
	last := requests()
	if n.SlotsReaped != 5 || last[down] != first[down]+3 || last[e.express[0]] != first[e.express[0]] {
		t.Fatalf("after the zone came back: %+v, requests %v (before %v)", n, last, first)
	}
	e.checkChain(P(1, 5))
	if reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star); len(reaps) != 0 {
		t.Fatalf("range not finished: %+v", reaps)
	}
}

func reapWithZoneDown(t *testing.T, ns namedStore) {
	a := sid(1)
	e := newEnvOn(t, ns, catalog.ClassExpress, 1, a)
	for s := int64(0); s < 5; s++ {
		e.flight(1, s, batch{a, 1})
	}
	e.settle(a)
	e.store.setDown(e.express[1], true)
	n := e.mustCycle()
	if n.SlotsReaped != 0 {
		t.Fatalf("reaped %d slots with a zone down", n.SlotsReaped)
	}
	have := e.present()
	for s := int64(0); s < 5; s++ {
		if have[P(1, s)] != 1 {
			t.Fatalf("slot 1/%d in %d buckets, want only the down zone's copy", s, have[P(1, s)])
		}
	}
	reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star)
	if len(reaps) != 1 || !reaps[0].Due || reaps[0].From != P(1, 0) || reaps[0].To != P(1, 5) {
		t.Fatalf("the range must stay due and whole: %+v", reaps)
	}
	if metric(t, e.reg, "nova_auditor_reap_delete_failures_total", "bucket", e.express[1]) < 1 ||
		metric(t, e.reg, "nova_auditor_reap_backlog_slots", "state", "due") != 5 {
		t.Fatal("zone failure not in the metrics")
	}
	e.mustCycle() // still down: nothing lost, nothing finished
	if reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star); len(reaps) != 1 {
		t.Fatalf("range lost while the zone is down: %+v", reaps)
	}
	e.store.setDown(e.express[1], false)
	n = e.mustCycle()
	e.checkChain(P(1, 5))
	if n.SlotsReaped != 5 {
		t.Fatalf("reaped %d after the zone came back", n.SlotsReaped)
	}
	if reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star); len(reaps) != 0 {
		t.Fatalf("range not finished: %+v", reaps)
	}
}

func reapWithFailedBatch(t *testing.T, ns namedStore) {
	a := sid(1)
	e := newEnvOn(t, ns, catalog.ClassExpress, 1, a)
	e.cfg.BatchSize, e.cfg.Concurrency = 2, 1
	for s := int64(0); s < 5; s++ {
		e.flight(1, s, batch{a, 1})
	}
	e.settle(a)
	e.store.failKeys[bundlefmt.SlotKey(e.star, 1, 3)] = true
	n := e.mustCycle()
	if n.SlotsReaped != 2 {
		t.Fatalf("reaped %d, want the confirmed prefix 1/0, 1/1", n.SlotsReaped)
	}
	reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star)
	if len(reaps) != 1 || reaps[0].From != P(1, 2) || reaps[0].To != P(1, 5) {
		t.Fatalf("rest of the range: %+v", reaps)
	}
	have := e.present()
	if have[P(1, 3)] != 3 || len(have) != 1 {
		t.Fatalf("only 1/3 must remain (in every bucket): %v", have)
	}
	delete(e.store.failKeys, bundlefmt.SlotKey(e.star, 1, 3))
	n = e.mustCycle()
	e.checkChain(P(1, 5))
	if n.SlotsReaped != 3 {
		t.Fatalf("reaped %d on retry, want 3", n.SlotsReaped)
	}
}

// TestNothingDeletedBeforeReapAfter: with a grace of 5 minutes nothing is
// deleted, however often reap runs; with a short grace the slots and objects
// go only once the database clock has passed reap_after.
func TestNothingDeletedBeforeReapAfter(t *testing.T) {
	t.Parallel()
	forEachBackend(t, nothingDeletedBeforeReapAfter)
}

func nothingDeletedBeforeReapAfter(t *testing.T, ns namedStore) {
	a := sid(1)
	e := newEnvOn(t, ns, catalog.ClassStandard, 1, a)
	e.cfg.ReapGrace = 5 * time.Minute
	for s := int64(0); s < 3; s++ {
		e.flight(1, s, batch{a, 2})
		e.settle(a)
	}
	if err := writepath.New(e.db).RaiseLowRecord(e.ctx, a, 4); err != nil { // retires [0,2) and [2,4)
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		e.mustCycle()
	}
	if e.store.deletes != 0 {
		t.Fatalf("%d deletes within the grace", e.store.deletes)
	}
	if have := e.present(); len(have) != 3 {
		t.Fatalf("slots deleted within the grace: %v", have)
	}
	intents, _ := e.db.Settle().Intents(e.ctx, e.star, "reap", 0)
	reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star)
	if len(intents) != 2 || len(reaps) != 1 || reaps[0].Due || intents[0].Due {
		t.Fatalf("armed: %+v %+v", intents, reaps)
	}
	for _, in := range intents {
		if ok, _ := exists(e.ctx, e.store, e.std, in.ObjectKey); !ok {
			t.Fatalf("retired object %s deleted within the grace", in.ObjectKey)
		}
	}

	// A short grace: not before reap_after by the database clock, then yes.
	e.cfg.ReapGrace = 2 * time.Second
	e.flight(1, 3, batch{a, 1})
	e.settle(a)
	if err := writepath.New(e.db).RaiseLowRecord(e.ctx, a, 6); err != nil {
		t.Fatal(err)
	}
	e.mustCycle()
	reaps, _ = e.db.Trim().SlotReaps(e.ctx, e.star)
	if len(reaps) != 2 {
		t.Fatalf("slot reaps: %+v", reaps)
	}
	short := reaps[1]
	for {
		now, err := e.db.Now(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		have := e.present()
		if now.Before(short.ReapAfter) && have[P(1, 3)] == 0 {
			t.Fatalf("slot 1/3 deleted before its reap_after %s (database now %s)", short.ReapAfter, now)
		}
		if !now.Before(short.ReapAfter.Add(100 * time.Millisecond)) {
			break
		}
		e.mustCycle()
		time.Sleep(200 * time.Millisecond)
	}
	e.mustCycle()
	if have := e.present(); have[P(1, 3)] != 0 || len(have) != 3 {
		t.Fatalf("after reap_after: %v", have)
	}
}

// TestRetentionAndObjectReaps: entries wholly below low_record are removed
// and reaped with superseded revisions and dead abandoned publishes; the
// straddling entry stays; a reap intent on a referenced key is dropped;
// a publish intent whose key can still be published is held.
func TestRetentionAndObjectReaps(t *testing.T) {
	t.Parallel()
	forEachBackend(t, retentionAndObjectReaps)
}

func retentionAndObjectReaps(t *testing.T, ns namedStore) {
	a := sid(1)
	e := newEnvOn(t, ns, catalog.ClassStandard, 1, a)
	for s := int64(0); s < 3; s++ {
		e.flight(1, s, batch{a, 10})
		e.settle(a) // entries [0,10) [10,20) [20,30)
	}
	key := func(first int64, rev uint32) string {
		return bundlefmt.SettledKey("b1", a, 1, uint64(first), rev)
	}
	// Tail rewrite of [20,30) to ~1 covering [20,35): ~0 is superseded.
	e.flight(1, 3, batch{a, 5})
	ent := catalog.Entry{Stream: a, Epoch: 1, FirstRecord: 20, Revision: 1, RecordCount: 15, ObjectBytes: 1, FooterOffset: 1, FooterLength: 1}
	if err := e.store.PutIfAbsent(e.ctx, e.std, key(20, 1), []byte("rewrite")); err != nil {
		t.Fatal(err)
	}
	if err := writepath.CommitSettle(e.ctx, e.db, e.fence, catalog.SettleCommit{Entry: ent, PrevRevision: 0, IntentID: publishIntent(t, e.db, e.fence.Star, key(20, 1)), ObjectKey: key(20, 1), OldKey: key(20, 0)}); err != nil {
		t.Fatal(err)
	}
	// An abandoned publish of a key no settle can publish again, with an
	// upload and a completed object; a live publish at settled_through; a
	// recovery's reap intent on the key the catalog now holds.
	dead, err := writepath.OpenIntent(e.ctx, e.db, e.fence, target(t, key(0, 7)), "standard")
	if err != nil {
		t.Fatal(err)
	}
	_ = e.db.Settle().SetIntentUpload(e.ctx, e.fence, dead.ID, "up-dead")
	_ = e.store.PutIfAbsent(e.ctx, e.std, key(0, 7), []byte("orphan"))
	live, _ := writepath.OpenIntent(e.ctx, e.db, e.fence, target(t, key(35, 0)), "standard")
	_ = e.store.PutIfAbsent(e.ctx, e.std, key(35, 0), []byte("in flight"))
	ref, _ := writepath.OpenIntent(e.ctx, e.db, e.fence, target(t, key(10, 0)), "standard")
	if err := e.db.Settle().AbandonPublish(e.ctx, e.fence, ref.ID, 0); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(e.db).RaiseLowRecord(e.ctx, a, 15); err != nil { // [0,10) retired, [10,20) straddles
		t.Fatal(err)
	}
	n := e.mustCycle()
	if n.ObjectsReaped != 3 {
		t.Fatalf("objects reaped %d, want 3 (retired ~0 at 0, superseded 20~0, abandoned 0~7)", n.ObjectsReaped)
	}
	for k, want := range map[string]bool{key(0, 0): false, key(20, 0): false, key(0, 7): false,
		key(10, 0): true, key(20, 1): true, key(35, 0): true} {
		if ok, _ := exists(e.ctx, e.store, e.std, k); ok != want {
			t.Errorf("%s exists %v, want %v", k, ok, want)
		}
	}
	entries, _ := e.db.Streams().EntriesOfStream(e.ctx, a)
	if len(entries) != 2 || entries[0].FirstRecord != 10 || entries[1].Revision != 1 {
		t.Fatalf("catalog after retention: %+v", entries)
	}
	if len(e.store.aborts) != 1 || e.store.aborts[0] != key(0, 7)+"#up-dead" {
		t.Fatalf("aborts: %v", e.store.aborts)
	}
	left, _ := e.db.Trim().DueObjectReaps(e.ctx, e.star, 0, 0, 100)
	if len(left) != 1 || left[0].ID != live.ID {
		t.Fatalf("left: %+v (want only the live publish, held)", left)
	}
	if metric(t, e.reg, "nova_auditor_reap_intents_dropped_total") != 1 ||
		metric(t, e.reg, "nova_auditor_reap_held_objects", "reason", "publishable") != 1 ||
		metric(t, e.reg, "nova_auditor_retention_entries_removed_total") != 1 ||
		metric(t, e.reg, "nova_auditor_objects_reaped_total", "intent", "reap") != 2 {
		t.Fatal("object reap metrics")
	}
}

// TestDryRunChangesNothing: a dry run lists what it would retire, trim and
// reap, and changes neither the metastore nor the store.
func TestDryRunChangesNothing(t *testing.T) {
	t.Parallel()
	a := sid(1)
	e := newEnv(t, catalog.ClassStandard, 1, a)
	for s := int64(0); s < 3; s++ {
		e.flight(1, s, batch{a, 10})
		e.settle(a)
	}
	// A due slot range already released by an earlier trim, and more to trim.
	tr, _ := trim.NewTrim(e.deps(), e.cfg)
	if _, err := tr.Run(e.ctx, e.fence, cycle.Options{}); err != nil {
		t.Fatal(err)
	}
	e.flight(1, 3, batch{a, 1})
	e.settle(a)
	if err := writepath.New(e.db).RaiseLowRecord(e.ctx, a, 20); err != nil {
		t.Fatal(err)
	}
	snap := func() string {
		st, _ := e.db.Trim().TrimState(e.ctx, e.star)
		reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star)
		ents, _ := e.db.Streams().EntriesOfStream(e.ctx, a)
		ins, _ := e.db.Settle().Intents(e.ctx, e.star, "reap", 0)
		var b strings.Builder
		for _, r := range reaps {
			b.WriteString(r.From.String() + r.To.String() + ";")
		}
		return st.Cursor.String() + "|" + b.String() + "|" + strings.Repeat("e", len(ents)) + strings.Repeat("i", len(ins))
	}
	before, slots := snap(), len(e.present())
	if _, err := e.cycle(true); err != nil {
		t.Fatal(err)
	}
	if after := snap(); after != before || len(e.present()) != slots || e.store.deletes != 0 {
		t.Fatalf("dry run changed things: %s -> %s", before, after)
	}
	plan := e.plan.String()
	for _, want := range []string{"retention: would remove catalog entry", "would move its cursor 1/3 -> 1/4, releasing 1 slots",
		"reap: would delete 3 slots stars/s1/chain/00000000000000000001/00000000000000000000"} {
		if !strings.Contains(plan, want) {
			t.Errorf("plan lacks %q:\n%s", want, plan)
		}
	}
}

// TestCrashPointsConverge kills the steps at every named boundary (a panic
// standing in for SIGKILL: nothing after it runs) and checks that the next
// cycle converges: slots behind the cursor gone, dead objects gone (a
// stray, past a guard of a millisecond, included), every catalog object
// still there, nothing left armed.
func TestCrashPointsConverge(t *testing.T) {
	t.Parallel()
	for _, point := range trim.CrashPoints() {
		t.Run(string(point), func(t *testing.T) {
			t.Parallel()
			a := sid(1)
			e := newEnv(t, catalog.ClassExpress, 1, a)
			for s := int64(0); s < 4; s++ {
				e.flight(1, s, batch{a, 5})
				e.settle(a)
			}
			if err := writepath.New(e.db).RaiseLowRecord(e.ctx, a, 10); err != nil {
				t.Fatal(err)
			}
			stray := bundlefmt.SettledKey("b1", a, 1, 0, 9)
			if err := e.store.PutIfAbsent(e.ctx, e.std, stray, []byte("stray")); err != nil {
				t.Fatal(err)
			}
			e.guard, e.sweepEvery = time.Millisecond, time.Hour
			// Past the guard by more than a listing's time resolution.
			time.Sleep(objstore.ListedTimeResolution + 10*time.Millisecond)
			fired := false
			e.crash = func(name crashpoint.Point) {
				if name == point && !fired {
					fired = true
					panic("crash point " + name)
				}
			}
			func() {
				defer func() { _ = recover() }()
				_, _ = e.cycle(false)
			}()
			if !fired {
				t.Fatalf("crash point %s never reached", point)
			}
			e.crash = nil
			e.mustCycle()
			e.checkChain(P(1, 4))
			ents, _ := e.db.Streams().EntriesOfStream(e.ctx, a)
			for _, en := range ents {
				k := bundlefmt.SettledKey("b1", a, 1, uint64(en.FirstRecord), uint32(en.Revision))
				if ok, _ := exists(e.ctx, e.store, e.std, k); !ok {
					t.Fatalf("catalog object %s deleted", k)
				}
			}
			for _, first := range []uint64{0, 5} {
				if ok, _ := exists(e.ctx, e.store, e.std, bundlefmt.SettledKey("b1", a, 1, first, 0)); ok {
					t.Fatalf("retired object at %d not reaped", first)
				}
			}
			if ok, _ := exists(e.ctx, e.store, e.std, stray); ok {
				t.Fatalf("stray %s not reaped", stray)
			}
			b, err := trim.ReadStatus(e.ctx, e.db.Trim(), e.star, 0)
			if err != nil || b.Backlog != (trim.Backlog{}) {
				t.Fatalf("backlog after convergence: %+v %v", b.Backlog, err)
			}
		})
	}
}

// TestStepsAndMetricsConstruction: constructors refuse missing
// dependencies and an incomplete configuration (a zero field is an error,
// not a default); metrics register once per registry.
func TestStepsAndMetricsConstruction(t *testing.T) {
	full := trim.Config{BatchSize: 1000, Concurrency: trim.DefaultConcurrency}
	if _, err := trim.NewReap(trim.Deps{}, full); err == nil {
		t.Fatal("reap without a database")
	}
	for _, bad := range []trim.Config{{Concurrency: 1}, {BatchSize: 1001, Concurrency: 1}, {BatchSize: 1}, {BatchSize: 1, Concurrency: 1, ReapGrace: -1}} {
		if _, err := trim.NewTrim(trim.Deps{DB: (&catalog.DB{}).Trim()}, bad); err == nil {
			t.Errorf("trim accepted the configuration %+v", bad)
		}
	}
	reg := prometheus.NewRegistry()
	if _, err := trim.NewMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := trim.NewMetrics(reg); err == nil {
		t.Fatal("second registration accepted")
	}
	// Beside the daemon's metrics in one registry: no name is taken twice.
	both := prometheus.NewRegistry()
	if _, err := daemon.NewMetrics(both, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := trim.NewMetrics(both); err != nil {
		t.Fatalf("trim metrics beside the daemon's: %v", err)
	}
	var st cycle.Step
	st, _ = trim.NewTrim(trim.Deps{DB: (&catalog.DB{}).Trim()}, full)
	if st.Name() != "trim" {
		t.Fatal(st.Name())
	}
}

// TestStaleLeaderIsFenced: with a stale fencing token every step fails with
// catalog.ErrStaleToken and the metastore is unchanged; no object is deleted
// (object reaps are classified in a fenced transaction first), and the
// slots a stale reap may still delete are behind the cursor: harmless.
func TestStaleLeaderIsFenced(t *testing.T) {
	t.Parallel()
	a := sid(1)
	e := newEnv(t, catalog.ClassStandard, 1, a)
	for s := int64(0); s < 3; s++ {
		e.flight(1, s, batch{a, 10})
		e.settle(a)
	}
	if err := writepath.New(e.db).RaiseLowRecord(e.ctx, a, 10); err != nil {
		t.Fatal(err)
	}
	good := e.fence
	e.fence.Token++
	for _, s := range e.steps() {
		if s.Name() != "retention" && s.Name() != "trim" {
			continue // strays is not due and reap has nothing armed: no transaction to refuse
		}
		if _, err := s.Run(e.ctx, e.fence, cycle.Options{}); !errors.Is(err, catalog.ErrStaleToken) {
			t.Fatalf("%s with a stale token: %v", s.Name(), err)
		}
	}
	if _, ok := e.cursor(); ok {
		t.Fatal("a stale trim moved the cursor")
	}
	if ents, _ := e.db.Streams().EntriesOfStream(e.ctx, a); len(ents) != 3 {
		t.Fatalf("a stale retention removed entries: %+v", ents)
	}
	// The real leader trims; a stale reap deletes nothing it may not.
	e.fence = good
	tr, _ := trim.NewTrim(e.deps(), e.cfg)
	ret, _ := trim.NewRetention(e.deps(), e.cfg)
	for _, s := range []cycle.Step{ret, tr} {
		if _, err := s.Run(e.ctx, e.fence, cycle.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	stale := good
	stale.Token++
	rp, _ := trim.NewReap(e.deps(), e.cfg)
	if _, err := rp.Run(e.ctx, stale, cycle.Options{}); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("stale reap: %v", err)
	}
	if ok, _ := exists(e.ctx, e.store, e.std, bundlefmt.SettledKey("b1", a, 1, 0, 0)); !ok {
		t.Fatal("a stale reap deleted an object")
	}
	if reaps, _ := e.db.Trim().SlotReaps(e.ctx, e.star); len(reaps) != 1 {
		t.Fatalf("a stale reap finished a slot range: %+v", reaps)
	}
	e.mustCycle()
	e.checkChain(P(1, 3))
}

// TestReapAbortsUnrecordedUploadsOfAFinishedPublish: a kill between
// creating a publish's upload and recording its ID leaves an upload only a
// listing finds. When the reap finishes that publish intent (its key will
// never be published: here a revision no settle reaches), it aborts every
// upload of the key, or the upload would stay open for ever.
func TestReapAbortsUnrecordedUploadsOfAFinishedPublish(t *testing.T) {
	t.Parallel()
	for _, mk := range []func(testing.TB) namedStore{fileStore, s3Store} {
		ns := mk(t)
		t.Run(ns.name, func(t *testing.T) {
			t.Parallel()
			a := sid(1)
			e := newEnvOn(t, ns, catalog.ClassStandard, 1, a)
			for s := int64(0); s < 2; s++ {
				e.flight(1, s, batch{a, 10})
				e.settle(a)
			}
			key := bundlefmt.SettledKey("b1", a, 1, 0, 7) // no settle publishes (0, 7) again
			if _, err := writepath.OpenIntent(e.ctx, e.db, e.fence, target(t, key), "standard"); err != nil {
				t.Fatal(err)
			}
			// The process dies inside the upload-created hook: the upload
			// exists, its ID was never recorded.
			if st, ok := ns.store.(*s3store.Store); ok {
				// (an object of local bytes is one PutObject there: create
				// the upload as the assembly of a larger one would)
				if _, err := st.Client().CreateMultipartUpload(e.ctx, &s3.CreateMultipartUploadInput{Bucket: &e.std, Key: &key}); err != nil {
					t.Fatal(err)
				}
			} else {
				done := make(chan struct{})
				go func() {
					defer close(done)
					_, _ = e.store.Assemble(e.ctx, objstore.AssembleRequest{Bucket: e.std, Key: key,
						Pieces: []objstore.Piece{objstore.DataPiece([]byte("object bytes"))},
						Hooks:  objstore.Hooks{UploadCreated: func(string) error { runtime.Goexit(); return nil }}})
				}()
				<-done
			}
			if ids, err := e.store.ListAssemblies(e.ctx, e.std, key); err != nil || len(ids) != 1 {
				t.Fatalf("the unrecorded upload: %v %v", ids, err)
			}
			e.mustCycle()
			if in, _ := e.db.Settle().Intents(e.ctx, e.star, "publish", 0); len(in) != 0 {
				t.Fatalf("the stale publish intent was not finished: %+v", in)
			}
			if ids, err := e.store.ListAssemblies(e.ctx, e.std, key); err != nil || len(ids) != 0 {
				t.Fatalf("uploads of the finished publish left open: %v %v", ids, err)
			}
		})
	}
}
