package catalog_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

func TestSettleCommitLifecycle(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	id := sid(1)
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	for seq := int64(0); seq < 3; seq++ { // three refs: [0,10) [10,20) [20,30)
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: seq, FooterOffset: 61, FooterLength: 200,
			Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: seq * 10, Count: 10}}}}); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := lease.Fence
	due, err := db.Settle().DueStreams(ctx, "s1", catalog.DuePolicy{Linger: time.Hour, AgeCap: 2 * time.Hour, ExpressLinger: time.Hour, ExpressAgeCap: time.Hour}, nil, 10)
	if err != nil || len(due) != 0 {
		t.Fatalf("due within linger: %+v %v", due, err)
	}
	due, err = db.Settle().DueStreams(ctx, "s1", catalog.DuePolicy{Linger: time.Hour, AgeCap: 2 * time.Hour}, []catalog.StreamID{id}, 10)
	if err != nil || len(due) != 1 || !due[0].Forced {
		t.Fatalf("forced stream not due: %+v %v", due, err)
	}
	due, err = db.Settle().DueStreams(ctx, "s1", catalog.DuePolicy{}, nil, 10)
	if err != nil || len(due) != 1 || due[0].Forced {
		t.Fatalf("due with no linger: %+v %v", due, err)
	}

	key0 := "buckets/b1/streams/x/1/0~0"
	in, err := writepath.OpenIntent(ctx, db, f, catalog.ExactTarget(key0, 0), "standard")
	if err != nil {
		t.Fatal(err)
	}
	again, err := writepath.OpenIntent(ctx, db, f, catalog.ExactTarget(key0, 0), "standard")
	if err != nil || again.ID != in.ID {
		t.Fatalf("second open of the same key: %+v %v", again, err)
	}
	if err := db.Settle().SetIntentUpload(ctx, f, in.ID, "up-1"); err != nil {
		t.Fatal(err)
	}
	for _, p := range []int{1, 2, 1} {
		if err := db.Settle().AddStagedPart(ctx, f, in.ID, p); err != nil {
			t.Fatal(err)
		}
	}
	open, err := db.Settle().Intents(ctx, "s1", "publish", time.Hour)
	if err != nil || len(open) != 1 || open[0].UploadID != "up-1" || len(open[0].StagedParts) != 2 || open[0].Due {
		t.Fatalf("open intents: %+v %v", open, err)
	}

	entry := catalog.Entry{Stream: id, Epoch: 1, FirstRecord: 0, Revision: 0, RecordCount: 15, ObjectBytes: 1000,
		FooterOffset: 800, FooterLength: 160, MinTimestamp: 1, MaxTimestamp: 9}
	// The catalog only comes to reference a key whose publish intent is
	// open (docs/architecture.md#no-late-delete): a commit with no intent,
	// or another key's, is refused and changes nothing.
	for _, c := range []catalog.SettleCommit{
		{Entry: entry, PrevRevision: -1, ObjectKey: key0},
		{Entry: entry, PrevRevision: -1, IntentID: in.ID, ObjectKey: key0 + "x"},
	} {
		if err := writepath.CommitSettle(ctx, db, f, c); !errors.Is(err, catalog.ErrIntentGone) {
			t.Fatalf("commit %+v: %v, want ErrIntentGone", c, err)
		}
	}
	if err := writepath.CommitSettle(ctx, db, f, catalog.SettleCommit{Entry: entry, PrevRevision: -1, IntentID: in.ID, ObjectKey: key0}); err != nil {
		t.Fatal(err)
	}
	st, _ := db.Streams().Stream(ctx, id)
	refs, _ := writepath.New(db).RefsOfStream(ctx, id)
	if st.SettledThrough != 15 || len(refs) != 2 || refs[0].FirstRecord != 10 {
		t.Fatalf("after first commit: settled %d, refs %+v", st.SettledThrough, refs)
	}
	marks, _ := db.Streams().DueMarkers(ctx, "s1")
	if len(marks) != 1 || !marks[0].Since.Equal(refs[0].AbsorbedAt) {
		t.Fatalf("due marker since %+v, oldest remaining ref absorbed %v", marks, refs[0].AbsorbedAt)
	}
	if open, _ := db.Settle().Intents(ctx, "s1", "publish", 0); len(open) != 0 {
		t.Fatalf("publish intent survived its commit: %+v", open)
	}

	// A commit that does not start at settled_through is an invariant break.
	bad := entry
	bad.FirstRecord, bad.RecordCount = 16, 4
	if err := writepath.CommitSettle(ctx, db, f, catalog.SettleCommit{Entry: bad, PrevRevision: -1, ObjectKey: "k"}); !errors.Is(err, catalog.ErrInvariant) {
		t.Fatalf("gap commit: %v", err)
	}

	// Tail rewrite at revision 1 covering everything: refs and marker go,
	// the old revision's reap is armed, a stray reap on the new key is dropped.
	key1 := "buckets/b1/streams/x/1/0~1"
	rewrite := entry
	rewrite.Revision, rewrite.RecordCount = 1, 30
	if err := writepath.CommitSettle(ctx, db, f, catalog.SettleCommit{Entry: rewrite, PrevRevision: 0, IntentID: intent(t, db, key1), ObjectKey: key1, OldKey: key0, ReapGrace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	entries, _ := db.Streams().EntriesOfStream(ctx, id)
	if len(entries) != 1 || entries[0].Revision != 1 || entries[0].RecordCount != 30 {
		t.Fatalf("catalog after rewrite: %+v", entries)
	}
	if refs, _ := writepath.New(db).RefsOfStream(ctx, id); len(refs) != 0 {
		t.Fatalf("refs left after full settle: %+v", refs)
	}
	if marks, _ := db.Streams().DueMarkers(ctx, "s1"); len(marks) != 0 {
		t.Fatalf("due marker left after full settle: %+v", marks)
	}
	reaps, _ := db.Settle().Intents(ctx, "s1", "reap", 0)
	if len(reaps) != 1 || reaps[0].ObjectKey != key0 || reaps[0].Due {
		t.Fatalf("reap intents: %+v", reaps)
	}
	// Repointing from a revision that is no longer current is refused.
	if err := writepath.CommitSettle(ctx, db, f, catalog.SettleCommit{Entry: rewrite, PrevRevision: 0, ObjectKey: key1}); !errors.Is(err, catalog.ErrInvariant) {
		t.Fatalf("stale rewrite: %v", err)
	}

	// A stale token changes nothing.
	if _, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "other", "", time.Minute); err == nil {
		t.Fatal("lease taken while held")
	}
	if err := db.Leases().ReleaseLease(ctx, f); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "other", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, f, id, "", "corrupt", "x"); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("quarantine with a stale token: %v", err)
	}
	if q, _ := db.Settle().Quarantined(ctx, "s1"); len(q) != 0 {
		t.Fatalf("stale quarantine landed: %+v", q)
	}
}

// TestFirstOverlapChecksWhereACycleWrites: the cycle's tiling check finds
// an overlap among a stream's last entries and an entry past
// settled_through, and leaves an overlap deep in the history (of a stream
// of a million entries, say) to `auditor verify`, so its cost does not
// grow with the history.
func TestFirstOverlapChecksWhereACycleWrites(t *testing.T) {
	t.Parallel()
	db, ctx, f := trimFixture(t)
	absorb(t, ctx, db, 3, sid(1), 20, 80)
	for i := int64(0); i < 10; i++ {
		settleEntry(t, ctx, db, f, sid(1), i*10, 10, 0, -1, fmt.Sprintf("k%d", i), "")
	}
	ids := []catalog.StreamID{sid(1), sid(2)}
	if o, err := db.Settle().FirstOverlap(ctx, ids); err != nil || o != nil {
		t.Fatalf("a tiled catalog: %v %v", o, err)
	}
	// Deep in the history: [10, 21) overlaps [20, 30). Not the cycle's.
	if err := writepath.New(db).StretchEntry(ctx, sid(1), 10, 1); err != nil {
		t.Fatal(err)
	}
	if o, err := db.Settle().FirstOverlap(ctx, ids); err != nil || o != nil {
		t.Fatalf("an overlap eight entries back is verify's: %v %v", o, err)
	}
	// Next to the tail: [80, 91) overlaps [90, 100).
	if err := writepath.New(db).StretchEntry(ctx, sid(1), 80, 1); err != nil {
		t.Fatal(err)
	}
	o, err := db.Settle().FirstOverlap(ctx, ids)
	if err != nil || o == nil || o.Stream != sid(1) || o.PrevFirst != 80 || o.PrevEnd != 91 || o.First != 90 || o.End != 100 {
		t.Fatalf("overlap before the last entry: %+v %v", o, err)
	}
	if err := writepath.New(db).StretchEntry(ctx, sid(1), 80, -1); err != nil {
		t.Fatal(err)
	}
	// The last entry reaching past settled_through.
	if err := writepath.New(db).StretchEntry(ctx, sid(1), 90, 1); err != nil {
		t.Fatal(err)
	}
	o, err = db.Settle().FirstOverlap(ctx, ids)
	if err != nil || o == nil || o.First != 90 || o.End != 101 || o.Settled != 100 {
		t.Fatalf("entry past settled_through: %+v %v", o, err)
	}
}
