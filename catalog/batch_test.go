package catalog_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// TestBatchIsolation: 64 streams share one snapshot, one transaction of
// publish intents and one grouped commit. One stream's commit fails its
// check (it claims records another commit already settled): it is rolled
// back alone, the other 63 commit, and its intent stays open for a retry.
func TestBatchIsolation(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	wp := writepath.New(db)
	if err := wp.CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	const n = 64
	ids := make([]catalog.StreamID, n)
	var batches []writepath.AbsorbBatch
	for i := range ids {
		ids[i] = catalog.StreamID{0: 0xb, 15: byte(i)}
		if err := wp.CreateStream(ctx, ids[i], "s1", "b1"); err != nil {
			t.Fatal(err)
		}
		batches = append(batches, writepath.AbsorbBatch{Stream: ids[i], FirstRecord: 0, Count: 10})
	}
	if err := wp.Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: 0, FooterOffset: 61, FooterLength: 200, Batches: batches}}); err != nil {
		t.Fatal(err)
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	f := lease.Fence

	snaps, err := db.Settle().StreamSnapshots(ctx, append(ids, catalog.StreamID{0: 0xc}), 16)
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != n {
		t.Fatalf("%d snapshots of %d streams and one that does not exist", len(snaps), n)
	}
	for _, id := range ids {
		s := snaps[id]
		if s.Stream.NextRecord != 10 || len(s.Refs) != 1 || s.Refs[0].Stream != id || s.Last != nil {
			t.Fatalf("snapshot of %s: %+v", id, s)
		}
	}

	key := func(i int) string { return fmt.Sprintf("buckets/b1/streams/%d/1/0~0", i) }
	reqs := make([]catalog.IntentRequest, n)
	for i := range reqs {
		reqs[i] = catalog.IntentRequest{Target: catalog.ExactTarget(key(i), 0), Class: catalog.ClassStandard}
	}
	intents, errs, err := db.Settle().OpenPublishIntents(ctx, f, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i := range intents {
		if errs[i] != nil || intents[i].ObjectKey != key(i) || intents[i].Reopened {
			t.Fatalf("intent %d: %+v %v", i, intents[i], errs[i])
		}
	}

	const bad = 17
	group := make([]catalog.StreamCommit, n)
	for i := range group {
		e := catalog.Entry{Stream: ids[i], Epoch: 1, FirstRecord: 0, RecordCount: 10, ObjectBytes: 1000,
			FooterOffset: 800, FooterLength: 160, MinTimestamp: 1, MaxTimestamp: 9}
		if i == bad {
			e.FirstRecord, e.RecordCount = 5, 5 // not where the stream's settled_through is
		}
		group[i] = catalog.StreamCommit{Stream: ids[i], Commits: []catalog.SettleCommit{
			{Entry: e, PrevRevision: -1, IntentID: intents[i].ID, ObjectKey: key(i), ReapGrace: time.Hour}}}
	}
	between := 0
	cerrs, err := db.Settle().CommitSettles(ctx, f, group, func() { between++ })
	if err != nil {
		t.Fatal(err)
	}
	if between != n-1 {
		t.Fatalf("between called %d times, want once per committed stream (%d)", between, n-1)
	}
	for i, e := range cerrs {
		if (i == bad) != (e != nil) {
			t.Fatalf("stream %d: %v", i, e)
		}
	}
	if !errors.Is(cerrs[bad], catalog.ErrInvariant) {
		t.Fatalf("the bad stream's error: %v, want ErrInvariant", cerrs[bad])
	}
	for i, id := range ids {
		st, err := db.Streams().Stream(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := int64(10)
		if i == bad {
			want = 0
		}
		if st.SettledThrough != want {
			t.Fatalf("stream %d settled through %d, want %d", i, st.SettledThrough, want)
		}
	}
	open, err := db.Settle().Intents(ctx, "s1", "publish", time.Hour)
	if err != nil || len(open) != 1 || open[0].ObjectKey != key(bad) {
		t.Fatalf("open intents after the group: %+v %v", open, err)
	}
	markers, err := db.Streams().DueMarkers(ctx, "s1")
	if err != nil || len(markers) != 1 || markers[0].Stream != ids[bad] {
		t.Fatalf("due markers after the group: %+v %v", markers, err)
	}

	// A lost fence commits nothing of a group.
	stale := f
	stale.Token++
	if _, err := db.Settle().CommitSettles(ctx, stale, group[bad:bad+1], nil); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("grouped commit under a stale token: %v", err)
	}
	if _, _, err := db.Settle().OpenPublishIntents(ctx, stale, reqs[:1]); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("batched intents under a stale token: %v", err)
	}
}
