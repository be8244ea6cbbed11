package verify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/verify"
)

// settleTombstoned is settleObject with the records dead reports true for
// stored as tombstones.
func settleTombstoned(t *testing.T, db *catalog.DB, f catalog.Fence, id catalog.StreamID, first, count int64, dead func(int64) bool) (string, []byte) {
	t.Helper()
	key, obj, e := tombstonedObject(t, id, first, count, 0, dead)
	if err := writepath.CommitSettle(context.Background(), db, f, catalog.SettleCommit{Entry: e, PrevRevision: -1, IntentID: intent(t, db, f, key), ObjectKey: key}); err != nil {
		t.Fatal(err)
	}
	return key, obj
}

// tombstonedObject encodes the settled object of records [first,
// first+count) at revision rev, the records dead reports true for stored as
// tombstones (what an erasure rewrite leaves), and its catalog entry.
func tombstonedObject(t *testing.T, id catalog.StreamID, first, count int64, rev int32, dead func(int64) bool) (string, []byte, catalog.Entry) {
	t.Helper()
	b := bundlefmt.NewChunkBuilder(id, uint64(first))
	for r := first; r < first+count; r++ {
		var err error
		if dead(r) {
			err = b.AddStored([]byte{bundlefmt.TombstoneByte}, 1000+r, true)
		} else {
			err = b.Add(bundlefmt.Record{Body: []byte(fmt.Sprintf("record %d of the stream", r))}, 1000+r, true)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	obj, err := bundlefmt.EncodeSettled([]bundlefmt.Chunk{b.Chunk()})
	if err != nil {
		t.Fatal(err)
	}
	v, err := bundlefmt.ValidateObject(obj, bundlefmt.Expect{Kind: bundlefmt.KindSettled})
	if err != nil {
		t.Fatal(err)
	}
	key := bundlefmt.SettledKey("b1", id, 1, uint64(first), uint32(rev))
	e := catalog.Entry{Stream: id, Epoch: 1, FirstRecord: first, Revision: rev, RecordCount: count, ObjectBytes: int64(len(obj)),
		FooterOffset: int64(v.Footer.FooterOffset()), FooterLength: int64(v.Footer.FooterLength()),
		MinTimestamp: 1000 + first, MaxTimestamp: 1000 + first + count - 1}
	return key, obj, e
}

// TestVerifyFindsAppliedErasuresStillHoldingBytes: an applied erasure
// whose records an object still holds is a finding of its own class
// naming the object, the count and the first record; an applied erasure
// held as tombstones, and a pending one whose records still hold their
// bytes (its rewrite may not have run), are not.
func TestVerifyFindsAppliedErasuresStillHoldingBytes(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	store, keys := healthyCatalog(t, db) // stream 1: [0, 10) [10, 15); stream 2: [0, 7)
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	s3 := catalog.StreamID{15: 3}
	absorbStream(t, db, s3, 9, 8)
	k3, obj3 := settleTombstoned(t, db, lease.Fence, s3, 0, 8, func(r int64) bool { return r == 2 || r == 3 })
	store.put(k3, obj3)
	for _, e := range []struct {
		id          catalog.StreamID
		first, n    int64
		markApplied bool
	}{
		{catalog.StreamID{15: 1}, 3, 2, true},   // [3, 5) of [0, 10): live bytes
		{catalog.StreamID{15: 1}, 12, 1, false}, // [12, 13) pending: either is right
		{s3, 2, 2, true},                        // tombstones: right
	} {
		if _, err := db.Erasures().RecordErasure(ctx, e.id, e.first, e.n); err != nil {
			t.Fatal(err)
		}
		if e.markApplied {
			if _, err := testenv.Conn(t, url).Exec(ctx, `UPDATE nova.erasures SET applied_at = now() WHERE stream_id = $1 AND first_record = $2`, e.id, e.first); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Read whole, and in windows smaller than a record (the erased
	// records read again one at a time): the same finding.
	for _, window := range []int64{0, 1} {
		opts := verifyOpts()
		opts.Window = window
		rep, err := verify.Verify(ctx, db.Streams(), store.reader(), opts)
		if err != nil {
			t.Fatal(err)
		}
		if len(rep.Findings) != 1 || rep.Objects != 4 {
			t.Fatalf("window %d: findings %+v (want one, of %s)", window, rep.Findings, keys[0])
		}
		f := rep.Findings[0]
		if f.Kind != verify.FindingErasure || f.Key != keys[0] || !strings.Contains(f.Detail, "2 records of applied erasures") ||
			!strings.Contains(f.Detail, "the first: record 3 ") || !strings.Contains(f.Detail, "[3, 5)") {
			t.Fatalf("window %d: finding %+v", window, f)
		}
		t.Logf("finding: %s", f)
	}

	// The object rewritten at revision 1 with the erasure's tombstones and
	// repointed: sound.
	k, obj, e := tombstonedObject(t, catalog.StreamID{15: 1}, 0, 10, 1, func(r int64) bool { return r >= 3 && r < 5 })
	store.put(k, obj)
	if err := db.Erasures().CommitRewrite(ctx, lease.Fence, catalog.RewriteCommit{Entry: e, PrevRevision: 0, IntentID: intent(t, db, lease.Fence, k), ObjectKey: k, OldKey: keys[0],
		ReapGrace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if rep, err := verify.Verify(ctx, db.Streams(), store.reader(), verifyOpts()); err != nil || len(rep.Findings) != 0 {
		t.Fatalf("after the rewrite: %+v %v", rep.Findings, err)
	}
}
