package sim

import (
	"context"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// naiveSettle settles records [settled_through, upTo) of every stream of
// the star into one settled object per stream, built from the generator
// (whose content is what the slots hold) with chunks of at most chunk
// records, and commits it with the auditor's CommitSettle. It returns the
// keys written.
func naiveSettle(t *testing.T, db *catalog.DB, st Storage, star string, frac float64, chunk int) []string {
	t.Helper()
	return naiveSettleErasing(t, db, st, star, frac, chunk, nil)
}

// naiveSettleErasing is naiveSettle writing the records dead reports true
// for as tombstones (nil: none).
func naiveSettleErasing(t *testing.T, db *catalog.DB, st Storage, star string, frac float64, chunk int, dead func(catalog.StreamID, int64) bool) []string {
	t.Helper()
	ctx := context.Background()
	lease, err := db.Leases().AcquireLeaseInstance(ctx, star, "naive-settler", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := db.Leases().ReleaseLease(ctx, lease.Fence); err != nil {
			t.Error(err)
		}
	}()
	prof, err := writepath.New(db).Star(ctx, star)
	if err != nil {
		t.Fatal(err)
	}
	content := contentOf(prof)
	g := NewGen(content)
	streams, err := db.Streams().StreamsOfStar(ctx, star)
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, s := range streams {
		from := s.SettledThrough
		to := from + int64(float64(s.NextRecord-from)*frac)
		if to <= from {
			continue
		}
		id := s.ID
		p := content.Stream(id)
		var chunks []bundlefmt.Chunk
		for r := from; r < to; {
			b := bundlefmt.NewChunkBuilder(id, uint64(r))
			for ; r < to && b.Len() < chunk; r++ {
				rec, ts := g.Record(p, r)
				var err error
				if dead != nil && dead(s.ID, r) {
					err = b.AddStored([]byte{bundlefmt.TombstoneByte}, ts, false)
				} else {
					err = b.Add(rec, ts, false)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			chunks = append(chunks, b.Chunk())
		}
		obj, err := bundlefmt.EncodeSettled(chunks)
		if err != nil {
			t.Fatal(err)
		}
		o, err := bundlefmt.ValidateObject(obj, bundlefmt.Expect{Kind: bundlefmt.KindSettled})
		if err != nil {
			t.Fatal(err)
		}
		minTS, maxTS := int64(1<<63-1), int64(-1<<63)
		for _, e := range o.Entries {
			for _, ts := range e.Timestamps {
				minTS, maxTS = min(minTS, ts), max(maxTS, ts)
			}
		}
		key := bundlefmt.SettledKey(s.Bucket, id, uint64(s.Epoch), uint64(from), 0)
		intent, err := writepath.New(db).PublishIntent(ctx, lease.Fence.Star, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Store.PutIfAbsent(ctx, st.Standard, key, obj); err != nil {
			t.Fatal(err)
		}
		tr := o.Footer.Trailer()
		entry := catalog.Entry{Stream: s.ID, Epoch: s.Epoch, FirstRecord: from, Revision: 0, RecordCount: to - from,
			ObjectBytes: int64(len(obj)), FooterOffset: int64(tr.FooterOffset()), FooterLength: int64(tr.FooterLength()),
			MinTimestamp: minTS, MaxTimestamp: maxTS, Class: catalog.ClassStandard}
		if err := writepath.CommitSettle(ctx, db, lease.Fence, catalog.SettleCommit{Entry: entry, PrevRevision: -1, IntentID: intent, ObjectKey: key}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key)
	}
	return keys
}

// TestCheckSettled settles part of every stream naively and checks both
// ways: everything, and settled objects only.
func TestCheckSettled(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	ms := newFaultStore(t)
	st := Storage{Store: ms, Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "st1", Streams: 12, Content: smallContent(5), StreamBuckets: []string{"b0", "b1"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(ctx, db, st, WriteOptions{Star: "st1", Flights: 60, FlightBytes: 16 << 10, Faults: Faults{Lost: 0.1}}); err != nil {
		t.Fatal(err)
	}
	keys := naiveSettle(t, db, st, "st1", 0.6, 7)
	keys = append(keys, naiveSettle(t, db, st, "st1", 0.5, 50)...)
	full := mustCheck(t, db, st, CheckOptions{})
	if full.FromSettled == 0 || full.FromSlots == 0 || full.Checked != full.Records {
		t.Fatalf("full check: %+v", summary(full))
	}
	settled := mustCheck(t, db, st, CheckOptions{SettledOnly: true})
	if settled.Checked != full.FromSettled || settled.Unsettled != full.FromSlots || settled.Objects != int64(len(keys)) {
		t.Fatalf("settled-only check: %+v\nfull: %+v", summary(settled), summary(full))
	}

	// A damaged settled object is found by both.
	ms.corrupt("std", keys[0], 3)
	for _, o := range []CheckOptions{{}, {SettledOnly: true}} {
		rep, err := Check(ctx, db, st, o)
		if err != nil {
			t.Fatal(err)
		}
		if rep.OK() || rep.Wrong == 0 {
			t.Fatalf("damage in %s not found (%+v)", keys[0], summary(rep))
		}
	}
}
