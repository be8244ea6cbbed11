package verify_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/verify"
)

// objects is the file backend (a store the objstore contract suite
// proves) with one bucket, "nova", and the test's own ways to put, drop
// and damage an object; the command's test runs verify against the real
// S3 server.
type objects struct {
	*filestore.Store
	t testing.TB
}

func newObjects(t testing.TB) *objects {
	t.Helper()
	fs, err := filestore.New(objstore.FileConfig{Root: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	return &objects{Store: fs, t: t}
}

// reader reads the store's bundles, "nova" its standard bucket.
func (o *objects) reader() *bundle.Reader {
	return bundle.NewReader(teststore.Topology(o.t, o.Store, "nova", nil, nil))
}

// put stores data at key, replacing what was there.
func (o *objects) put(key string, data []byte) {
	o.t.Helper()
	o.remove(key)
	if err := o.PutIfAbsent(context.Background(), "nova", key, data); err != nil {
		o.t.Fatal(err)
	}
}

func (o *objects) remove(key string) {
	o.t.Helper()
	if err := o.Delete(context.Background(), "nova", []string{key}); err != nil {
		o.t.Fatal(err)
	}
}

// flip flips a bit of the byte at off of the object at key.
func (o *objects) flip(key string, off int) {
	o.t.Helper()
	data, _, err := o.GetRange(context.Background(), "nova", key, 0, 1<<30)
	if err != nil {
		o.t.Fatal(err)
	}
	data[off] ^= 0x40
	o.put(key, data)
}

// settleObject encodes a settled object of records [first, first+count) of
// stream id, commits its catalog entry and returns its key and bytes.
func settleObject(t testing.TB, db *catalog.DB, f catalog.Fence, id catalog.StreamID, first, count int64) (string, []byte) {
	t.Helper()
	return settleObjectOf(t, db, f, id, first, count, func(r int64) []byte { return []byte(fmt.Sprintf("record %d of the stream", r)) })
}

// settleObjectOf is settleObject with the records' bodies given.
func settleObjectOf(t testing.TB, db *catalog.DB, f catalog.Fence, id catalog.StreamID, first, count int64, body func(r int64) []byte) (string, []byte) {
	t.Helper()
	b := bundlefmt.NewChunkBuilder(id, uint64(first))
	for r := first; r < first+count; r++ {
		if err := b.Add(bundlefmt.Record{Body: body(r)}, 1000+r, true); err != nil {
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
	key := bundlefmt.SettledKey("b1", id, 1, uint64(first), 0)
	e := catalog.Entry{Stream: id, Epoch: 1, FirstRecord: first, Revision: 0, RecordCount: count, ObjectBytes: int64(len(obj)),
		FooterOffset: int64(v.Footer.FooterOffset()), FooterLength: int64(v.Footer.FooterLength()),
		MinTimestamp: 1000 + first, MaxTimestamp: 1000 + first + count - 1}
	if err := writepath.CommitSettle(context.Background(), db, f, catalog.SettleCommit{Entry: e, PrevRevision: -1, IntentID: intent(t, db, f, key), ObjectKey: key}); err != nil {
		t.Fatal(err)
	}
	return key, obj
}

// absorbStream creates stream id of star s1 and absorbs its records
// [0, count) in the flight at seq of epoch 1.
func absorbStream(t testing.TB, db *catalog.DB, id catalog.StreamID, seq, count int64) {
	t.Helper()
	ctx := context.Background()
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: seq, FooterOffset: 1, FooterLength: 1,
		Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: 0, Count: count}}}}); err != nil {
		t.Fatal(err)
	}
}

// healthyCatalog settles two streams into three objects.
func healthyCatalog(t *testing.T, db *catalog.DB) (*objects, []string) {
	t.Helper()
	ctx := context.Background()
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	store := newObjects(t)
	var keys []string
	for i, s := range []struct {
		id     byte
		counts []int64
	}{{1, []int64{10, 5}}, {2, []int64{7}}} {
		id := catalog.StreamID{15: s.id}
		var total int64
		for _, c := range s.counts {
			total += c
		}
		absorbStream(t, db, id, int64(i), total)
		var first int64
		for _, c := range s.counts {
			key, obj := settleObject(t, db, lease.Fence, id, first, c)
			store.put(key, obj)
			keys = append(keys, key)
			first += c
		}
	}
	return store, keys
}

func verifyOpts() verify.Options {
	return verify.Options{Star: "s1"}
}

// newDB opens a fresh, migrated metastore with one star, "s1".
func newDB(t testing.TB) (*catalog.DB, string) {
	t.Helper()
	db, url := testenv.MigratedDB(t)
	if err := writepath.New(db).CreateStar(context.Background(), "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	return db, url
}

func TestVerifyHealthyMissingCorruptAndTiling(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	store, keys := healthyCatalog(t, db)
	var progress []int
	opts := verifyOpts()
	opts.Progress = func(done, stream, streams int) { progress = append(progress, done*100+stream*10+streams) }
	opts.Concurrency = 1
	rep, err := verify.Verify(ctx, db.Streams(), store.reader(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 0 || rep.Streams != 2 || rep.Objects != 3 || rep.Bytes == 0 {
		t.Fatalf("healthy catalog: %+v", rep)
	}
	// Objects 1, 2, 3; the stream begun when the last one ends is the
	// second of two.
	if len(progress) != 3 || progress[0]/100 != 1 || progress[1]/100 != 2 || progress[2] != 322 {
		t.Fatalf("progress %v", progress)
	}

	// A deleted object and a flipped byte in another's chunk data.
	store.remove(keys[1])
	store.flip(keys[2], 3)
	// And an entry of stream 2 that overlaps its neighbour.
	c := testenv.Conn(t, url)
	if _, err := c.Exec(ctx, `INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
		footer_offset, footer_length, min_timestamp, max_timestamp) VALUES ($1, 1, 5, 0, 5, 1, 0, 1, 0, 0)`, catalog.StreamID{15: 2}); err != nil {
		t.Fatal(err)
	}
	rep, err = verify.Verify(ctx, db.Streams(), store.reader(), verifyOpts())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range rep.Findings {
		got[f.Kind] += f.Key + "|" + f.Detail + ";"
	}
	if !strings.Contains(got[verify.FindingMissing], keys[1]) {
		t.Fatalf("missing object %s not reported: %+v", keys[1], rep.Findings)
	}
	if !strings.Contains(got[verify.FindingChecksum], keys[2]) {
		t.Fatalf("corrupt object %s not reported: %+v", keys[2], rep.Findings)
	}
	if !strings.Contains(got[verify.FindingTiling], "overlap") {
		t.Fatalf("overlap not reported: %+v", rep.Findings)
	}
	if strings.Contains(fmt.Sprint(rep.Findings), keys[0]+"|") {
		t.Fatalf("a sound object reported: %+v", rep.Findings)
	}
}

func TestVerifyMismatchAgainstTheCatalog(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	store, keys := healthyCatalog(t, db)
	c := testenv.Conn(t, url)
	// The catalog claims other timestamps for the first object, and the
	// second stream's settled_through runs past its last entry.
	if _, err := c.Exec(ctx, `UPDATE nova.catalog SET max_timestamp = 99 WHERE stream_id = $1 AND first_record = 0`, catalog.StreamID{15: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `UPDATE nova.streams SET next_record = 9, settled_through = 9 WHERE stream_id = $1`, catalog.StreamID{15: 2}); err != nil {
		t.Fatal(err)
	}
	rep, err := verify.Verify(ctx, db.Streams(), store.reader(), verifyOpts())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Findings) != 2 {
		t.Fatalf("findings %+v", rep.Findings)
	}
	s := fmt.Sprint(rep.Findings)
	if !strings.Contains(s, "mismatch: "+keys[0]+": timestamps") || !strings.Contains(s, "settled_through is 9") {
		t.Fatalf("findings %s", s)
	}
}

// TestVerifyFindsAnOverlapDeepInTheHistory: the cycle's tiling check reads
// only a stream's last entries; verify reads them all, so an overlap far
// behind the tail (here 10 entries back, objects sound) is reported.
func TestVerifyFindsAnOverlapDeepInTheHistory(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "t", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	id := catalog.StreamID{15: 3}
	absorbStream(t, db, id, 0, 120)
	store := newObjects(t)
	for first := int64(0); first < 120; first += 10 {
		key, obj := settleObject(t, db, lease.Fence, id, first, 10)
		store.put(key, obj)
	}
	if err := writepath.New(db).StretchEntry(ctx, id, 10, 1); err != nil { // [10, 21) over [20, 30)
		t.Fatal(err)
	}
	if o, err := db.Settle().FirstOverlap(ctx, []catalog.StreamID{id}); err != nil || o != nil {
		t.Fatalf("the cycle's check reads only the tail: %v %v", o, err)
	}
	rep, err := verify.Verify(ctx, db.Streams(), store.reader(), verifyOpts())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range rep.Findings {
		found = found || f.Kind == verify.FindingTiling && strings.Contains(f.Detail, "[10, 21) and [20, 30) overlap")
	}
	if !found {
		t.Fatalf("verify missed the overlap 10 entries back: %+v", rep.Findings)
	}
}

// intent opens a publish intent on key for a test's own commit.
func intent(t testing.TB, db *catalog.DB, f catalog.Fence, key string) int64 {
	t.Helper()
	id, err := writepath.New(db).PublishIntent(context.Background(), f.Star, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
