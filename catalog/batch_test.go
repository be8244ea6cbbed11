package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
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

// target is the publish target of a test stream's object at record 0.
func target(id catalog.StreamID, rev int32) catalog.PublishTarget {
	return catalog.PublishTarget{
		Base:     catalog.KeyBase{Stream: id, Epoch: 1, FirstRecord: 0},
		Revision: rev,
		Key:      func(r int32) string { return fmt.Sprintf("t/%s/0~%d", id, r) },
	}
}

// setStar makes star s1 with the streams ids, each absorbing 10 records
// and then, in a second flight, 5 more.
func setStar(t *testing.T, ctx context.Context, db *catalog.DB, ids []catalog.StreamID) catalog.Fence {
	t.Helper()
	wp := writepath.New(db)
	if err := wp.CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	var first, second []writepath.AbsorbBatch
	for _, id := range ids {
		if err := wp.CreateStream(ctx, id, "s1", "b1"); err != nil {
			t.Fatal(err)
		}
		first = append(first, writepath.AbsorbBatch{Stream: id, FirstRecord: 0, Count: 10})
		second = append(second, writepath.AbsorbBatch{Stream: id, FirstRecord: 10, Count: 5})
	}
	if err := wp.Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: 0, FooterOffset: 61, FooterLength: 200, Batches: first}}); err != nil {
		t.Fatal(err)
	}
	if err := wp.Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: 1, FooterOffset: 61, FooterLength: 200, Batches: second}}); err != nil {
		t.Fatal(err)
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return lease.Fence
}

// commitOf is the commit of records [0, end) of id at rev under intent in,
// replacing prev (-1: a new entry) whose key it then reaps.
func commitOf(id catalog.StreamID, end int64, rev, prev int32, in catalog.Intent) catalog.StreamCommit {
	c := catalog.SettleCommit{
		Entry: catalog.Entry{Stream: id, Epoch: 1, FirstRecord: 0, Revision: rev, RecordCount: end, ObjectBytes: 100 * end,
			FooterOffset: 90 * end, FooterLength: 10 * end, MinTimestamp: 1, MaxTimestamp: end},
		PrevRevision: prev, IntentID: in.ID, ObjectKey: in.ObjectKey, ReapGrace: time.Hour,
	}
	if prev >= 0 {
		c.OldKey = target(id, prev).Key(prev)
	}
	return catalog.StreamCommit{Stream: id, Commits: []catalog.SettleCommit{c}}
}

// streamState is everything a settle commit changes of one stream, with
// its own ID and keys left out so two streams compare.
type streamState struct {
	Settled, Next, Low, Retained int64
	Entries                      []catalog.Entry
	Refs                         []int64
	Marker                       time.Time
	HasMarker                    bool
	PublishIntents, ReapIntents  int
	HighRevision                 int32
}

func stateOf(t *testing.T, ctx context.Context, db *catalog.DB, f catalog.Fence, id catalog.StreamID) streamState {
	t.Helper()
	st, err := db.Streams().Stream(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	s := streamState{Settled: st.SettledThrough, Next: st.NextRecord, Low: st.LowRecord}
	entries, err := db.Streams().EntriesOfStream(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		e.Stream, e.SettledAt = catalog.StreamID{}, time.Time{}
		s.Entries = append(s.Entries, e)
	}
	refs, err := writepath.New(db).RefsOfStream(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		s.Refs = append(s.Refs, r.FirstRecord)
	}
	markers, err := db.Streams().DueMarkersOfStar(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := markers[id]; ok {
		s.Marker, s.HasMarker = m.Since, true
	}
	for kind, n := range map[string]*int{"publish": &s.PublishIntents, "reap": &s.ReapIntents} {
		intents, err := db.Settle().Intents(ctx, "s1", kind, 24*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range intents {
			for rev := int32(0); rev < 4; rev++ {
				if in.ObjectKey == target(id, rev).Key(rev) {
					*n++
				}
			}
		}
	}
	if err := db.Fenced(ctx, f, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT retained_through FROM nova.streams WHERE stream_id = $1`, id).Scan(&s.Retained); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `SELECT high_revision FROM nova.auditor_key_revisions
			WHERE stream_id = $1 AND epoch = 1 AND first_record = 0`, id).Scan(&s.HighRevision)
		if errors.Is(err, pgx.ErrNoRows) {
			s.HighRevision = -1
			return nil
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestBatchSetPathMatchesStreamByStream: the set paths of a batch (the
// intents of many streams opened, and their objects committed, as a few
// statements over arrays) leave every stream exactly as the
// stream-by-stream statements do: catalog rows, settled_through,
// retention's index, refs, due markers, intents, reaps and revision
// high-waters. Streams a* go through the set paths, their twins b*
// through OpenPublishIntent and CommitSettle one at a time; the mix has
// new entries that settle all or part of the refs, a stream below its
// low_record, and tail rewrites that arm a reap of the superseded key.
func TestBatchSetPathMatchesStreamByStream(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	const n = 8
	a, b := make([]catalog.StreamID, n), make([]catalog.StreamID, n)
	for i := range a {
		a[i], b[i] = catalog.StreamID{0: 0xa, 15: byte(i)}, catalog.StreamID{0: 0xb, 15: byte(i)}
	}
	f := setStar(t, ctx, db, append(append([]catalog.StreamID{}, a...), b...))
	for _, id := range []catalog.StreamID{a[3], b[3]} {
		if err := writepath.New(db).RaiseLowRecord(ctx, id, 12); err != nil {
			t.Fatal(err)
		}
	}

	round := func(name string, which []int, end func(i int) int64, rev, prev int32) {
		t.Helper()
		reqs := make([]catalog.IntentRequest, len(which))
		for k, i := range which {
			reqs[k] = catalog.IntentRequest{Target: target(a[i], rev), Class: catalog.ClassStandard}
		}
		intents, ok, err := db.OpenIntentsAtOnce(ctx, f, reqs)
		if err != nil || !ok {
			t.Fatalf("%s: set path of the intents: ok %v, %v", name, ok, err)
		}
		group := make([]catalog.StreamCommit, len(which))
		for k, i := range which {
			if intents[k].Revision != rev || intents[k].ObjectKey != target(a[i], rev).Key(rev) || intents[k].Reopened {
				t.Fatalf("%s: intent %d: %+v", name, i, intents[k])
			}
			group[k] = commitOf(a[i], end(i), rev, prev, intents[k])
		}
		ok, errs, err := db.CommitSettlesAtOnce(ctx, f, group)
		if err != nil || !ok {
			t.Fatalf("%s: set path of the commits: ok %v, %v", name, ok, err)
		}
		for k, e := range errs {
			if e != nil {
				t.Fatalf("%s: stream %d: %v", name, which[k], e)
			}
		}
		for _, i := range which {
			in, err := writepath.OpenIntent(ctx, db, f, target(b[i], rev), catalog.ClassStandard)
			if err != nil {
				t.Fatal(err)
			}
			c := commitOf(b[i], end(i), rev, prev, in)
			if err := writepath.CommitSettle(ctx, db, f, c.Commits[0]); err != nil {
				t.Fatalf("%s: stream-by-stream commit %d: %v", name, i, err)
			}
		}
		for i := range a {
			sa, sb := stateOf(t, ctx, db, f, a[i]), stateOf(t, ctx, db, f, b[i])
			if fmt.Sprint(sa) != fmt.Sprint(sb) {
				t.Fatalf("%s: stream %d\n set path:         %+v\n stream by stream: %+v", name, i, sa, sb)
			}
		}
	}
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	// Even streams settle their first ref only (the marker moves to the
	// second), odd ones both (the marker goes).
	round("new entries", all, func(i int) int64 { return 10 + 5*int64(i%2) }, 0, -1)
	// The even streams' tails are rewritten to take the second ref.
	round("tail rewrites", []int{0, 2, 4, 6}, func(int) int64 { return 15 }, 1, 0)

	s := stateOf(t, ctx, db, f, a[0])
	if s.Settled != 15 || len(s.Entries) != 1 || s.Entries[0].Revision != 1 || s.HasMarker || s.ReapIntents != 1 || s.HighRevision != 1 {
		t.Fatalf("a rewritten stream: %+v", s)
	}
	if s := stateOf(t, ctx, db, f, a[3]); s.Low != 12 || s.Settled != 15 {
		t.Fatalf("the stream with a raised low_record: %+v", s)
	}
}

// TestBatchSetPathFallsBack: a stream the set path's checks refuse is left
// out alone (its publish intent gone: ErrIntentGone, the others commit in
// the set path); a statement of the set that fails (one stream's catalog
// row already there) rolls the whole set back, and CommitSettles's
// stream-by-stream path then singles the stream out. Intents whose bases
// were used at or above the planned revision leave the set path too, and
// OpenPublishIntents opens them as OpenPublishIntent would.
func TestBatchSetPathFallsBack(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	ids := make([]catalog.StreamID, 6)
	for i := range ids {
		ids[i] = catalog.StreamID{0: 0xc, 15: byte(i)}
	}
	other := catalog.StreamID{0: 0xd}
	f := setStar(t, ctx, db, append(append([]catalog.StreamID{}, ids...), other))
	reqs := make([]catalog.IntentRequest, len(ids))
	for i := range ids {
		reqs[i] = catalog.IntentRequest{Target: target(ids[i], 0), Class: catalog.ClassStandard}
	}
	intents, errs, err := db.Settle().OpenPublishIntents(ctx, f, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		if e != nil || intents[i].Revision != 0 || intents[i].Reopened {
			t.Fatalf("intent %d: %+v %v", i, intents[i], e)
		}
	}
	commit := func(i int) catalog.StreamCommit { return commitOf(ids[i], 10, 0, -1, intents[i]) }

	// Stream 1's intent is gone: refused alone, in the set path.
	if err := db.Settle().DeleteIntent(ctx, f, intents[1].ID); err != nil {
		t.Fatal(err)
	}
	ok, errs, err := db.CommitSettlesAtOnce(ctx, f, []catalog.StreamCommit{commit(0), commit(1), commit(3)})
	if err != nil || !ok {
		t.Fatalf("set path with an intent gone: ok %v, %v", ok, err)
	}
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], catalog.ErrIntentGone) {
		t.Fatalf("set path with an intent gone: %v", errs)
	}

	// Stream 2's catalog row is already there: the set's insert fails and
	// nothing of the set is left.
	if err := db.Fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
			footer_offset, footer_length, min_timestamp, max_timestamp) VALUES ($1, 1, 0, 7, 3, 1, 1, 1, 1, 1)`, ids[2])
		return err
	}); err != nil {
		t.Fatal(err)
	}
	group := []catalog.StreamCommit{commit(2), commit(4), commit(5)}
	ok, _, err = db.CommitSettlesAtOnce(ctx, f, group)
	if err != nil || ok {
		t.Fatalf("set path with a conflicting row: ok %v, %v; want a roll back", ok, err)
	}
	for _, i := range []int{2, 4, 5} {
		if s := stateOf(t, ctx, db, f, ids[i]); s.Settled != 0 || s.PublishIntents != 1 {
			t.Fatalf("stream %d after the rolled-back set: %+v", i, s)
		}
	}
	errs, err = db.Settle().CommitSettles(ctx, f, group, nil)
	if err != nil {
		t.Fatal(err)
	}
	if errs[0] == nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("stream-by-stream after the roll back: %v", errs)
	}
	for i, want := range []int64{10, 0, 0, 10, 10, 10} {
		if s := stateOf(t, ctx, db, f, ids[i]); s.Settled != want {
			t.Fatalf("stream %d settled through %d, want %d", i, s.Settled, want)
		}
	}

	// Stream 1's base has used revision 0: a batch asking for it again
	// leaves the set path, and the intent opens at revision 1.
	more := []catalog.IntentRequest{reqs[1], {Target: target(other, 0), Class: catalog.ClassStandard}}
	if _, ok, err := db.OpenIntentsAtOnce(ctx, f, more); err != nil || ok {
		t.Fatalf("set path of intents with a used revision: ok %v, %v", ok, err)
	}
	if s := stateOf(t, ctx, db, f, other); s.PublishIntents != 0 || s.HighRevision != -1 {
		t.Fatalf("the declined set path left %+v", s)
	}
	got, errs, err := db.Settle().OpenPublishIntents(ctx, f, more)
	if err != nil || errs[0] != nil || errs[1] != nil {
		t.Fatalf("intents after the set path declined: %v %v", errs, err)
	}
	if got[0].Revision != 1 || got[0].Reopened || got[1].Revision != 0 {
		t.Fatalf("intents after the set path declined: %+v", got)
	}

	// A revision below any (the API takes an int32): the revisions' table
	// refuses the row, the set path declines without failing the batch,
	// and the request opens at the base's first revision.
	fresh := target(other, -1)
	fresh.Base.FirstRecord = 100
	fresh.Key = func(r int32) string { return fmt.Sprintf("t/%s/100~%d", other, r) }
	neg := []catalog.IntentRequest{{Target: fresh, Class: catalog.ClassStandard}}
	if _, ok, err := db.OpenIntentsAtOnce(ctx, f, neg); err != nil || ok {
		t.Fatalf("set path of an intent below any revision: ok %v, %v", ok, err)
	}
	got, errs, err = db.Settle().OpenPublishIntents(ctx, f, neg)
	if err != nil || errs[0] != nil || got[0].Revision != 0 || got[0].ObjectKey != fresh.Key(0) {
		t.Fatalf("an intent below any revision: %+v %v %v", got, errs, err)
	}
}

// statementCount counts the statements a connection runs.
type statementCount struct{ n atomic.Int64 }

func (c *statementCount) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *statementCount) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestBatchStatementsDoNotGrowWithTheBatch: a batch's intents and its
// grouped commit cost a fixed number of statements, whatever the number
// of streams in it (the stream-by-stream path runs five per intent and
// ten per commit).
func TestBatchStatementsDoNotGrowWithTheBatch(t *testing.T) {
	t.Parallel()
	_, url := testenv.MigratedDB(t)
	ctx := context.Background()
	count := &statementCount{}
	db, err := catalog.OpenTraced(ctx, url, count)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	var ids []catalog.StreamID
	for i := 0; i < 64; i++ {
		ids = append(ids, catalog.StreamID{0: 0xe, 14: byte(i / 16), 15: byte(i)})
	}
	f := setStar(t, ctx, db, ids)
	cost := map[int][2]int64{}
	for _, part := range [][]catalog.StreamID{ids[:4], ids[4:]} {
		reqs := make([]catalog.IntentRequest, len(part))
		for i, id := range part {
			reqs[i] = catalog.IntentRequest{Target: target(id, 0), Class: catalog.ClassStandard}
		}
		before := count.n.Load()
		intents, errs, err := db.Settle().OpenPublishIntents(ctx, f, reqs)
		if err != nil {
			t.Fatal(err)
		}
		mid := count.n.Load()
		group := make([]catalog.StreamCommit, len(part))
		for i, id := range part {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			group[i] = commitOf(id, 10, 0, -1, intents[i])
		}
		errs, err = db.Settle().CommitSettles(ctx, f, group, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				t.Fatal(e)
			}
		}
		cost[len(part)] = [2]int64{mid - before, count.n.Load() - mid}
	}
	t.Logf("statements (intents, commits) by batch size: %v", cost)
	if cost[60] != cost[4] {
		t.Fatalf("statements grew with the batch: %v", cost)
	}
	// BEGIN, the fence, the savepoint, the revisions' upsert, the intents,
	// the release, COMMIT; the commit's twelve (docs/architecture.md#the-settle-pipeline)
	if c := cost[60]; c[0] > 7 || c[1] > 12 {
		t.Fatalf("a batch costs %d statements of intents and %d of commits", c[0], c[1])
	}
}
