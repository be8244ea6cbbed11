package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

// trimFixture is a star "s1" with a lease and two streams: A (sid 1) with
// refs [0,10)@1/0 and [10,20)@1/1, B (sid 2) with [0,5)@1/2.
func trimFixture(t *testing.T) (*catalog.DB, context.Context, catalog.Fence) {
	t.Helper()
	db, ctx := newDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []catalog.StreamID{sid(1), sid(2)} {
		if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, fl := range []writepath.AbsorbFlight{
		{Epoch: 1, Seq: 0, FooterOffset: 61, FooterLength: 100, Batches: []writepath.AbsorbBatch{{Stream: sid(1), FirstRecord: 0, Count: 10}}},
		{Epoch: 1, Seq: 1, FooterOffset: 61, FooterLength: 100, Batches: []writepath.AbsorbBatch{{Stream: sid(1), FirstRecord: 10, Count: 10}}},
		{Epoch: 1, Seq: 2, FooterOffset: 61, FooterLength: 100, Batches: []writepath.AbsorbBatch{{Stream: sid(2), FirstRecord: 0, Count: 5}}},
	} {
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{fl}); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return db, ctx, lease.Fence
}

func settleEntry(t *testing.T, ctx context.Context, db *catalog.DB, f catalog.Fence, id catalog.StreamID, first, count int64, rev, prev int32, key, old string) {
	t.Helper()
	e := catalog.Entry{Stream: id, Epoch: 1, FirstRecord: first, Revision: rev, RecordCount: count, ObjectBytes: 100,
		FooterOffset: 50, FooterLength: 30, MinTimestamp: 1, MaxTimestamp: 2}
	in, err := writepath.New(db).PublishIntent(ctx, f.Star, key)
	if err != nil {
		t.Fatal(err)
	}
	if err := writepath.CommitSettle(ctx, db, f, catalog.SettleCommit{Entry: e, PrevRevision: prev, IntentID: in, ObjectKey: key, OldKey: old, ReapGrace: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

func TestTrimStateAdvanceAndSlotReaps(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	st, err := db.Trim().TrimState(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if st.HasCursor || st.Star.NextSeq != 3 || len(st.Epochs) != 1 || st.RefMin == nil ||
		st.RefMin.Slot != (catalog.SlotPos{Epoch: 1, Seq: 0}) || st.RefMin.Stream != sid(1) || st.QuarantineMin != nil {
		t.Fatalf("fresh trim state: %+v", st)
	}
	// A ref still names 1/0: moving past it is a broken invariant.
	if _, err := db.Trim().AdvanceTrim(ctx, f, nil, catalog.SlotPos{Epoch: 1}, catalog.SlotPos{Epoch: 1, Seq: 1}, time.Hour); !errors.Is(err, catalog.ErrInvariant) {
		t.Fatalf("advance past a ref: %v", err)
	}
	settleEntry(t, ctx, db, f, sid(1), 0, 10, 0, -1, "k0", "")
	st, _ = db.Trim().TrimState(ctx, "s1")
	if st.RefMin == nil || st.RefMin.Slot != (catalog.SlotPos{Epoch: 1, Seq: 1}) {
		t.Fatalf("after settling [0,10): %+v", st.RefMin)
	}
	r, err := db.Trim().AdvanceTrim(ctx, f, nil, catalog.SlotPos{Epoch: 1}, catalog.SlotPos{Epoch: 1, Seq: 1}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Trim().AdvanceTrim(ctx, f, nil, catalog.SlotPos{Epoch: 1}, catalog.SlotPos{Epoch: 1, Seq: 1}, time.Hour); !errors.Is(err, catalog.ErrCursorMoved) {
		t.Fatalf("second advance from no row: %v", err)
	}
	stale := f
	stale.Token++
	prev := catalog.SlotPos{Epoch: 1, Seq: 1}
	if _, err := db.Trim().AdvanceTrim(ctx, stale, &prev, prev, catalog.SlotPos{Epoch: 1, Seq: 1}, 0); err == nil {
		t.Fatal("advance to the same position accepted")
	}
	if _, err := db.Trim().AdvanceTrim(ctx, stale, &prev, prev, catalog.SlotPos{Epoch: 1, Seq: 2}, 0); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("stale token: %v", err)
	}
	st, _ = db.Trim().TrimState(ctx, "s1")
	if !st.HasCursor || st.Cursor != prev {
		t.Fatalf("cursor: %+v", st)
	}
	reaps, err := db.Trim().SlotReaps(ctx, "s1")
	if err != nil || len(reaps) != 1 || reaps[0].ID != r.ID || reaps[0].Due || reaps[0].From != (catalog.SlotPos{Epoch: 1}) ||
		reaps[0].To != prev || !reaps[0].ReapAfter.After(st.Now.Add(59*time.Minute)) {
		t.Fatalf("slot reaps: %+v %v", reaps, err)
	}
	// Grace 0 is due at once, by the database clock.
	settleEntry(t, ctx, db, f, sid(1), 10, 10, 0, -1, "k1", "")
	r2, err := db.Trim().AdvanceTrim(ctx, f, &prev, prev, catalog.SlotPos{Epoch: 1, Seq: 2}, 0)
	if err != nil {
		t.Fatal(err)
	}
	reaps, _ = db.Trim().SlotReaps(ctx, "s1")
	if len(reaps) != 2 || reaps[0].Due || !reaps[1].Due {
		t.Fatalf("due flags: %+v", reaps)
	}
	if err := db.Trim().ShrinkSlotReap(ctx, f, r2.ID, catalog.SlotPos{Epoch: 9}, catalog.SlotPos{Epoch: 9, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.Trim().ShrinkSlotReap(ctx, f, r.ID, catalog.SlotPos{Epoch: 1}, catalog.SlotPos{Epoch: 1, Seq: 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.Trim().FinishSlotReap(ctx, f, r2.ID); err != nil {
		t.Fatal(err)
	}
	reaps, _ = db.Trim().SlotReaps(ctx, "s1")
	if len(reaps) != 1 || reaps[0].From != (catalog.SlotPos{Epoch: 1, Seq: 1}) || reaps[0].To != prev {
		t.Fatalf("after shrink and finish: %+v", reaps)
	}
	// B's ref is the bound; quarantined, it shows as the quarantine's hold.
	if err := db.Settle().Quarantine(ctx, f, sid(2), "", "corrupt", "test"); err != nil {
		t.Fatal(err)
	}
	st, _ = db.Trim().TrimState(ctx, "s1")
	if st.QuarantineMin == nil || st.QuarantineMin.Slot != (catalog.SlotPos{Epoch: 1, Seq: 2}) || st.QuarantinedStreams != 1 {
		t.Fatalf("quarantine hold: %+v", st)
	}
}

func TestRetentionRemovesWhollyBelowLow(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	settleEntry(t, ctx, db, f, sid(1), 0, 10, 0, -1, "k0", "")
	settleEntry(t, ctx, db, f, sid(1), 10, 10, 0, -1, "k1", "")
	if err := writepath.New(db).RaiseLowRecord(ctx, sid(1), 15); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).RaiseLowRecord(ctx, sid(1), 3); err != nil { // never lowers
		t.Fatal(err)
	}
	cands, err := db.Trim().RetentionCandidates(ctx, "s1", 10)
	if err != nil || len(cands) != 1 || cands[0].FirstRecord != 0 || cands[0].Bucket != "b1" {
		t.Fatalf("candidates: %+v %v", cands, err)
	}
	key := func(e catalog.RetiredEntry) string { return "dead-" + e.Bucket }
	removed, more, err := db.Trim().ApplyRetention(ctx, f, time.Hour, 10, key)
	if err != nil || more || len(removed) != 1 || removed[0].FirstRecord != 0 || removed[0].RecordCount != 10 {
		t.Fatalf("removed: %+v (more %v) %v", removed, more, err)
	}
	entries, _ := db.Streams().EntriesOfStream(ctx, sid(1))
	if len(entries) != 1 || entries[0].FirstRecord != 10 {
		t.Fatalf("the straddling entry must stay: %+v", entries)
	}
	intents, _ := db.Settle().Intents(ctx, "s1", "reap", 0)
	if len(intents) != 1 || intents[0].ObjectKey != "dead-b1" || intents[0].Due || intents[0].Class != "standard" {
		t.Fatalf("armed reap: %+v", intents)
	}
	if again, _, err := db.Trim().ApplyRetention(ctx, f, time.Hour, 10, key); err != nil || len(again) != 0 {
		t.Fatalf("second retention: %+v %v", again, err)
	}
	// low_record rising again puts the stream back in retention's index.
	absorb(t, ctx, db, 3, sid(1), 20, 10)
	settleEntry(t, ctx, db, f, sid(1), 20, 10, 0, -1, "k2", "")
	if err := writepath.New(db).RaiseLowRecord(ctx, sid(1), 30); err != nil {
		t.Fatal(err)
	}
	if again, _, err := db.Trim().ApplyRetention(ctx, f, time.Hour, 10, key); err != nil || len(again) != 2 ||
		again[0].FirstRecord != 10 || again[1].FirstRecord != 20 {
		t.Fatalf("retention after low_record rose to 30: %+v %v", again, err)
	}
}

// TestRetentionBatchesStreamsAndEntries: ApplyRetention takes at most limit
// streams and limit entries per call and says when there may be more; a
// stream is recorded done only when nothing below its low_record is left,
// and an entry committed wholly below low_record afterwards (its low_record
// rose while it was being settled) puts the stream back.
func TestRetentionBatchesStreamsAndEntries(t *testing.T) {
	t.Parallel()
	db, url := testenv.MigratedDB(t)
	ctx := context.Background()
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	for _, id := range []catalog.StreamID{sid(1), sid(2), sid(3), sid(4)} {
		if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := lease.Fence
	absorb(t, ctx, db, 0, sid(1), 0, 50)
	absorb(t, ctx, db, 1, sid(2), 0, 10)
	absorb(t, ctx, db, 2, sid(3), 0, 10)
	for i := int64(0); i < 5; i++ {
		settleEntry(t, ctx, db, f, sid(1), i*10, 10, 0, -1, fmt.Sprintf("a%d", i), "")
	}
	settleEntry(t, ctx, db, f, sid(2), 0, 10, 0, -1, "b0", "")
	for _, id := range []catalog.StreamID{sid(1), sid(2), sid(3), sid(4)} {
		if err := writepath.New(db).RaiseLowRecord(ctx, id, 40); err != nil {
			t.Fatal(err)
		}
	}
	key := func(e catalog.RetiredEntry) string { return fmt.Sprintf("dead-%s-%d", e.Stream, e.FirstRecord) }
	var calls, total int
	for more := true; more; calls++ {
		var removed []catalog.RetiredEntry
		var err error
		removed, more, err = db.Trim().ApplyRetention(ctx, f, time.Hour, 2, key)
		if err != nil {
			t.Fatal(err)
		}
		if len(removed) > 2 {
			t.Fatalf("call %d removed %d entries, limit 2", calls, len(removed))
		}
		total += len(removed)
		if calls > 10 {
			t.Fatal("retention does not finish")
		}
	}
	if total != 5 {
		t.Fatalf("removed %d entries, want 4 of stream 1 and 1 of stream 2", total)
	}
	if e, _ := db.Streams().EntriesOfStream(ctx, sid(1)); len(e) != 1 || e[0].FirstRecord != 40 {
		t.Fatalf("stream 1 keeps [40, 50): %+v", e)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var due int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM nova.streams WHERE low_record > retained_through`).Scan(&due); err != nil || due != 0 {
		t.Fatalf("%d streams still due for retention: %v", due, err)
	}
	// Stream 3 (no entries yet) gets an entry wholly below its low_record.
	settleEntry(t, ctx, db, f, sid(3), 0, 10, 0, -1, "c0", "")
	removed, _, err := db.Trim().ApplyRetention(ctx, f, time.Hour, 10, key)
	if err != nil || len(removed) != 1 || removed[0].Stream != sid(3) {
		t.Fatalf("an entry committed below low_record is retired: %+v %v", removed, err)
	}
}

// absorb absorbs one flight (seq) of count records of one stream.
func absorb(t *testing.T, ctx context.Context, db *catalog.DB, seq int64, id catalog.StreamID, first, count int64) {
	t.Helper()
	if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: seq, FooterOffset: 61, FooterLength: 100,
		Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: first, Count: count}}}}); err != nil {
		t.Fatal(err)
	}
}

func TestClassifyReaps(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	a := sid(1)
	settleEntry(t, ctx, db, f, a, 0, 5, 0, -1, "a0~0", "")     // [0,5) at ~0
	settleEntry(t, ctx, db, f, a, 0, 10, 1, 0, "a0~1", "a0~0") // rewritten to ~1: ~0 armed
	co := func(first int64, rev int32) catalog.KeyCoords {
		return catalog.KeyCoords{Bucket: "b1", Stream: a, Epoch: 1, FirstRecord: first, Revision: rev}
	}
	arm := func(key string) int64 { return armReap(t, ctx, db, f, key) }
	idRef := arm("a0~1")   // the catalog's own key
	idDead := arm("a0~0b") // coordinates of the superseded ~0
	idPub := arm("a10~0")  // a new entry at settled_through could still be published
	idRw := arm("a0~2")    // a rewrite of [0,10) to ~2 could still be published
	idOther := arm("a0~0c")
	// An open publish intent on a reap intent's key: a state no intent
	// opened since migration 0007 can make (the intent goes above the
	// key), kept from before it.
	if _, err := db.Pool().Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class) VALUES ('s1', 'publish', 'a0~0c', 'standard')`); err != nil {
		t.Fatal(err)
	}
	idBucket := arm("x0~1")
	cands := []catalog.ReapCandidate{
		{ID: idRef, Key: "a0~1", Coords: co(0, 1)},
		{ID: idDead, Key: "a0~0b", Coords: co(0, 0)},
		{ID: idPub, Key: "a10~0", Coords: co(10, 0)},
		{ID: idRw, Key: "a0~2", Coords: co(0, 2)},
		{ID: idOther, Key: "a0~0c", Coords: co(0, 0)},
		{ID: idBucket, Key: "x0~1", Coords: catalog.KeyCoords{Bucket: "other", Stream: a, Epoch: 1, Revision: 1}},
		{ID: 999999, Key: "nope", Coords: co(0, 0)},
	}
	// A reap intent is never publishable: whatever key a settle would
	// publish next at [10, ...) or as the next revision of [0, 10), its
	// intent opens above the revisions these keys buried.
	want := map[int64]catalog.KeyVerdict{idRef: catalog.KeyReferenced, idDead: catalog.KeyDead, idPub: catalog.KeyDead,
		idRw: catalog.KeyDead, idOther: catalog.KeyPublishing, idBucket: catalog.KeyDead, 999999: catalog.KeyGone}
	pre, err := db.Trim().PreviewReaps(ctx, "s1", time.Hour, cands)
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.Trim().ClassifyReaps(ctx, f, time.Hour, cands)
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got[id] != w || pre[id] != w {
			t.Errorf("intent %d: classify %v, preview %v, want %v", id, got[id], pre[id], w)
		}
	}
	// The referenced key's reap intent was dropped, and only it.
	due, err := db.Trim().DueObjectReaps(ctx, "s1", time.Hour, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[int64]bool{}
	for _, in := range due {
		ids[in.ID] = true
	}
	if ids[idRef] || !ids[idDead] || !ids[idPub] || len(due) != 5 {
		t.Fatalf("due after classify: %+v", due)
	}
	// Not yet due (armed with a grace): gone to the classifier.
	in, _ := writepath.OpenIntent(ctx, db, f, catalog.ExactTarget("late", 0), "standard")
	_ = db.Settle().AbandonPublish(ctx, f, in.ID, time.Hour)
	v, _ := db.Trim().ClassifyReaps(ctx, f, time.Hour, []catalog.ReapCandidate{{ID: in.ID, Key: "late", Coords: co(0, 0)}})
	if v[in.ID] != catalog.KeyGone {
		t.Fatalf("reap before its reap_after: %v", v[in.ID])
	}
	if err := db.Trim().FinishReaps(ctx, f, []int64{idDead}); err != nil {
		t.Fatal(err)
	}
	b, err := db.Trim().ObjectReapBacklog(ctx, "s1", time.Hour)
	if err != nil || b.ObjectsDue != 4 || b.ObjectsWaiting != 2 { // a0~0 armed by the rewrite, and "late"
		t.Fatalf("backlog: %+v %v", b, err)
	}
}

// TestClassifyReapsBuriesDeadKeys: every key classified dead is buried in
// the classifying transaction (docs/architecture.md#no-late-delete): its
// base's high-water revision covers it and a dead publish intent becomes a
// reap, so no later intent names the key, whatever was reaped, condemned
// or released since. A publish intent a settle would take up again (a new
// entry at settled_through) is held, and keeps its key.
func TestClassifyReapsBuriesDeadKeys(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	a, b := sid(1), sid(2)
	settleEntry(t, ctx, db, f, a, 0, 10, 0, -1, "a0~0", "")
	settleEntry(t, ctx, db, f, a, 10, 10, 0, -1, "a10~0", "") // [0,10) is no longer the last entry
	base := func(id catalog.StreamID, first int64) catalog.KeyBase {
		return catalog.KeyBase{Stream: id, Epoch: 1, FirstRecord: first}
	}
	target := func(id catalog.StreamID, first int64, rev int32, name string) catalog.PublishTarget {
		return catalog.PublishTarget{Base: base(id, first), Revision: rev, Key: func(r int32) string { return fmt.Sprintf("%s~%d", name, r) }}
	}
	co := func(id catalog.StreamID, first int64, rev int32) catalog.KeyCoords {
		return catalog.KeyCoords{Bucket: "b1", Stream: id, Epoch: 1, FirstRecord: first, Revision: rev}
	}
	open := func(tg catalog.PublishTarget) catalog.Intent {
		t.Helper()
		in, err := writepath.OpenIntent(ctx, db, f, tg, "standard")
		if err != nil {
			t.Fatal(err)
		}
		return in
	}
	// A publish of a rewrite of [0,10) that recovery would give up (the
	// entry is not the last), one of the tail [10,20) abandoned, and a
	// new entry at settled_through that a settle would take up again.
	stale := open(target(a, 0, 1, "a0"))
	tail := open(target(a, 10, 1, "a10"))
	if err := db.Settle().AbandonPublish(ctx, f, tail.ID, 0); err != nil {
		t.Fatal(err)
	}
	live := open(target(a, 20, 0, "a20"))
	// A base no plan reaches again (below settled_through, no entry): its
	// high-water row goes with its last key. And a reap intent an older
	// binary armed, with no high-water row, on a base a plan still reaches
	// (a new run at [30, ...) once more records arrive).
	gap := open(target(a, 5, 0, "a5"))
	if err := db.Settle().AbandonPublish(ctx, f, gap.ID, 0); err != nil {
		t.Fatal(err)
	}
	var legacy int64
	if err := db.Pool().QueryRow(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
		VALUES ('s1', 'reap', 'a30~0', 'standard', now()) RETURNING id`).Scan(&legacy); err != nil {
		t.Fatal(err)
	}
	absorb(t, ctx, db, 3, a, 20, 15)
	// b: its open publish intent's standing object failed its data check.
	pub := open(target(b, 0, 0, "b0"))
	if err := db.Settle().QuarantineCondemning(ctx, f, b, "", "checksum", "bad bytes in b0~0", "b0~0", 0); err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().QuarantineCondemning(ctx, f, b, "", "checksum", "again", "b0~0", 0); err != nil {
		t.Fatal(err)
	}
	reaps, _ := db.Settle().Intents(ctx, "s1", "reap", 0)
	n := 0
	for _, r := range reaps {
		if r.ObjectKey == "b0~0" {
			n++
			if r.ID != pub.ID {
				t.Fatalf("the reap is not the converted publish intent: %+v", r)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d reaps of the condemned key (condemning twice arms one)", n)
	}
	cands := []catalog.ReapCandidate{
		{ID: stale.ID, Key: "a0~1", Coords: co(a, 0, 1)},
		{ID: tail.ID, Key: "a10~1", Coords: co(a, 10, 1)},
		{ID: live.ID, Key: "a20~0", Coords: co(a, 20, 0)},
		{ID: pub.ID, Key: "b0~0", Coords: co(b, 0, 0)},
		{ID: gap.ID, Key: "a5~0", Coords: co(a, 5, 0)},
		{ID: legacy, Key: "a30~0", Coords: co(a, 30, 0)},
	}
	want := map[int64]catalog.KeyVerdict{stale.ID: catalog.KeyDead, tail.ID: catalog.KeyDead, live.ID: catalog.KeyPublishable,
		pub.ID: catalog.KeyDead, gap.ID: catalog.KeyDead, legacy: catalog.KeyDead}
	got, err := db.Trim().ClassifyReaps(ctx, f, 0, cands)
	if err != nil {
		t.Fatal(err)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("intent %d: %v, want %v", id, got[id], w)
		}
	}
	// The dead publish intent is a reap now, whose every upload a retry
	// lists again (AbortUnrecorded); the held one is still open.
	pubs, _ := db.Settle().Intents(ctx, "s1", "publish", 0)
	if len(pubs) != 1 || pubs[0].ID != live.ID {
		t.Fatalf("open publish intents after classify: %+v", pubs)
	}
	due, err := db.Trim().DueObjectReaps(ctx, "s1", time.Hour, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range due {
		if want := in.ID == stale.ID; in.AbortUnrecorded != want || (want && in.Kind != "reap") {
			t.Errorf("due reap %+v: AbortUnrecorded %v, want %v", in, in.AbortUnrecorded, want)
		}
	}
	// Released, or not: every next intent of a buried base goes above it.
	if _, err := writepath.New(db).ReleaseQuarantine(ctx, "s1", b); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tg   catalog.PublishTarget
		want string
	}{
		{target(b, 0, 0, "b0"), "b0~1"},    // the condemned key, after release
		{target(a, 10, 1, "a10"), "a10~2"}, // the abandoned tail rewrite
		{target(a, 0, 1, "a0"), "a0~2"},    // the given-up rewrite
		{target(a, 20, 0, "a20"), "a20~0"}, // the held intent, taken up again
		{target(a, 30, 0, "a30"), "a30~1"}, // buried though no intent of this binary named it
	} {
		in := open(c.tg)
		if in.ObjectKey != c.want || in.Reopened != (c.want == "a20~0") {
			t.Errorf("intent for %s: %s reopened %v, want %s", c.tg.Key(c.tg.Revision), in.ObjectKey, in.Reopened, c.want)
		}
	}
	if h, err := db.HighRevision(ctx, base(b, 0)); err != nil || h != 1 {
		t.Fatalf("high revision of b0: %d %v", h, err)
	}
	if h, err := db.HighRevision(ctx, base(a, 5)); err != nil || h != -1 {
		t.Fatalf("high revision of the unreachable a5: %d %v, want its row gone", h, err)
	}
}

// armReap opens a publish intent for key and turns it into a reap intent
// due at once, returning its ID.
func armReap(t *testing.T, ctx context.Context, db *catalog.DB, f catalog.Fence, key string) int64 {
	t.Helper()
	in, err := writepath.OpenIntent(ctx, db, f, catalog.ExactTarget(key, 0), "standard")
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().AbandonPublish(ctx, f, in.ID, 0); err != nil {
		t.Fatal(err)
	}
	return in.ID
}

// TestOpenPublishIntentTakesUpAnOlderBinarysIntent: a publish intent an
// auditor from before migration 0007 opened (no high-water row) is taken
// up again, not refused by the unique key: the stream goes on settling.
func TestOpenPublishIntentTakesUpAnOlderBinarysIntent(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	if _, err := db.Pool().Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class) VALUES ('s1', 'publish', 'old~0', 'standard')`); err != nil {
		t.Fatal(err)
	}
	tg := catalog.PublishTarget{Base: catalog.KeyBase{Stream: sid(1), Epoch: 1, FirstRecord: 0},
		Key: func(r int32) string { return fmt.Sprintf("old~%d", r) }}
	in, err := writepath.OpenIntent(ctx, db, f, tg, "standard")
	if err != nil || !in.Reopened || in.ObjectKey != "old~0" {
		t.Fatalf("intent: %+v %v, want old~0 taken up", in, err)
	}
	if h, err := db.HighRevision(ctx, tg.Base); err != nil || h != 0 {
		t.Fatalf("high revision: %d %v", h, err)
	}
}

// intent opens a publish intent on key for a test's own commit.
func intent(t *testing.T, db *catalog.DB, key string) int64 {
	t.Helper()
	id, err := writepath.New(db).PublishIntent(context.Background(), "s1", key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
