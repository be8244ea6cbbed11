package catalog_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

func newDB(t *testing.T) (*catalog.DB, context.Context) {
	t.Helper()
	db, _ := testenv.MigratedDB(t)
	return db, context.Background()
}

func sid(b byte) catalog.StreamID { return catalog.StreamID{15: b} }

func TestAbsorbWritesRefsMarkersAndHead(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 2); err != nil {
		t.Fatal(err)
	}
	for _, id := range []catalog.StreamID{sid(2), sid(1)} {
		if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
			t.Fatal(err)
		}
	}
	flights := []writepath.AbsorbFlight{
		{Epoch: 1, Seq: 0, FooterOffset: 100, FooterLength: 200, Batches: []writepath.AbsorbBatch{{Stream: sid(1), FirstRecord: 0, Count: 5}, {Stream: sid(2), FirstRecord: 0, Count: 3}}},
		{Epoch: 1, Seq: 1, FooterOffset: 70, FooterLength: 117, Batches: []writepath.AbsorbBatch{{Stream: sid(1), FirstRecord: 5, Count: 2}}},
	}
	if err := writepath.New(db).Absorb(ctx, "s1", flights); err != nil {
		t.Fatal(err)
	}
	star, err := db.Streams().Star(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if star.Epoch != 1 || star.NextSeq != 2 || star.FenceWindow != 2 || star.ChainClass != "standard" {
		t.Fatalf("star after absorb: %+v", star)
	}
	refs, err := writepath.New(db).RefsOfStream(ctx, sid(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 || refs[0].FirstRecord != 0 || refs[0].RecordCount != 7 || len(refs[0].Slots) != 2 ||
		refs[0].Slots[1] != (catalog.SlotRef{Epoch: 1, Seq: 1, FooterOffset: 70, FooterLength: 117}) || refs[0].Class != "standard" {
		t.Fatalf("refs of stream 1: %+v", refs)
	}
	st, err := db.Streams().Stream(ctx, sid(2))
	if err != nil {
		t.Fatal(err)
	}
	if st.NextRecord != 3 || st.SettledThrough != 0 || st.Bucket != "b1" || st.Class != "standard" {
		t.Fatalf("stream 2: %+v", st)
	}
	marks, err := db.Streams().DueMarkers(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(marks) != 2 {
		t.Fatalf("due markers: %+v", marks)
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "s1")
	if err != nil || len(streams) != 2 || streams[0].ID != sid(1) {
		t.Fatalf("streams of star: %+v %v", streams, err)
	}

	// A batch that does not start at next_record is refused and changes nothing.
	bad := []writepath.AbsorbFlight{{Epoch: 1, Seq: 2, FooterOffset: 1, FooterLength: 1, Batches: []writepath.AbsorbBatch{{Stream: sid(2), FirstRecord: 9, Count: 1}}}}
	if err := writepath.New(db).Absorb(ctx, "s1", bad); !errors.Is(err, writepath.ErrOutOfOrder) {
		t.Fatalf("out-of-order absorb: %v", err)
	}
	// A seq behind the head is refused.
	behind := []writepath.AbsorbFlight{{Epoch: 1, Seq: 1, FooterOffset: 1, FooterLength: 1, Batches: []writepath.AbsorbBatch{{Stream: sid(2), FirstRecord: 3, Count: 1}}}}
	if err := writepath.New(db).Absorb(ctx, "s1", behind); !errors.Is(err, writepath.ErrOutOfOrder) {
		t.Fatalf("absorb behind head: %v", err)
	}
	// Fencing: after BeginFence an absorb of the old epoch fails its epoch check.
	e, h, err := writepath.New(db).BeginFence(ctx, "s1")
	if err != nil || e != 1 || h != 2 {
		t.Fatalf("BeginFence = %d, %d, %v", e, h, err)
	}
	stale := []writepath.AbsorbFlight{{Epoch: 1, Seq: 2, FooterOffset: 1, FooterLength: 1, Batches: []writepath.AbsorbBatch{{Stream: sid(2), FirstRecord: 3, Count: 1}}}}
	if err := writepath.New(db).Absorb(ctx, "s1", stale); !errors.Is(err, writepath.ErrFenced) {
		t.Fatalf("absorb of a fenced epoch: %v", err)
	}
	if err := writepath.New(db).EndFence(ctx, "s1", 1, 4); err != nil {
		t.Fatal(err)
	}
	eps, err := db.Streams().StarEpochs(ctx, "s1")
	if err != nil || len(eps) != 2 || eps[0].EndSeq == nil || *eps[0].EndSeq != 4 || eps[1].EndSeq != nil {
		t.Fatalf("epochs: %+v %v", eps, err)
	}
	if st, _ := db.Streams().Stream(ctx, sid(2)); st.NextRecord != 3 {
		t.Fatalf("refused absorbs moved stream 2 to %d", st.NextRecord)
	}
}

func TestLeaseAndFencingToken(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	a, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, err = db.Leases().AcquireLeaseInstance(ctx, "s1", "b", "", time.Minute)
	var held *catalog.LeaseHeldError
	if !errors.As(err, &held) || held.Holder != "a" {
		t.Fatalf("second holder got %v", err)
	}
	if _, err := db.Leases().RenewLease(ctx, a.Fence, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := db.Leases().ReleaseLease(ctx, a.Fence); err != nil {
		t.Fatal(err)
	}
	b, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "b", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token <= a.Token {
		t.Fatalf("token did not rise: %d then %d", a.Token, b.Token)
	}
	if _, err := db.Leases().RenewLease(ctx, a.Fence, time.Minute); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("renew with the stale token: %v", err)
	}
	// An expired lease is free for anyone.
	if _, err := db.Leases().RenewLease(ctx, b.Fence, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	c, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "c", "", time.Minute)
	if err != nil || c.Token != b.Token+1 {
		t.Fatalf("acquire after expiry: %+v %v", c, err)
	}
}

func TestOpenUnreachableHidesPassword(t *testing.T) {
	t.Parallel()
	_, err := catalog.Open(context.Background(), "postgres://u:s3cretpw@127.0.0.1:1/db?connect_timeout=2")
	if !errors.Is(err, catalog.ErrUnreachable) {
		t.Fatalf("Open of a closed port: %v", err)
	}
	if msg := err.Error(); len(msg) == 0 || strings.Contains(msg, "s3cretpw") {
		t.Fatalf("error leaks the password: %s", msg)
	}
}

// TestStreamIDIsAUUID: the one stream type (bundlefmt.StreamID, a named
// [16]byte) goes to Postgres and back as a uuid, as a parameter, in a
// uuid[] and through a nullable column, and String prints it as psql does.
func TestStreamIDIsAUUID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, url := testenv.MigratedDB(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	id, err := bundlefmt.ParseStreamID("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0") // no two bytes alike: the byte order shows
	if err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 2); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	var text string
	if err := conn.QueryRow(ctx, `SELECT stream_id::text FROM nova.streams WHERE star = 's1'`).Scan(&text); err != nil || text != id.String() {
		t.Fatalf("psql shows %q (%v), String() is %q", text, err, id)
	}
	if err := conn.QueryRow(ctx, `SELECT $1::uuid::text`, id).Scan(&text); err != nil || text != id.String() {
		t.Fatalf("as a parameter: %q (%v), want %q", text, err, id)
	}
	var back catalog.StreamID
	if err := conn.QueryRow(ctx, `SELECT '0f1e2d3c4b5a69788796a5b4c3d2e1f0'::uuid`).Scan(&back); err != nil || back != id {
		t.Fatalf("scanned %s (%v), want %s", back, err, id)
	}
	st, err := db.Streams().Stream(ctx, id)
	if err != nil || st.ID != id {
		t.Fatalf("Stream: %s, %v", st.ID, err)
	}
	missing := catalog.StreamID{15: 1}
	prog, err := db.Requests().ForcedProgress(ctx, "s1", []catalog.StreamID{id, missing}) // a uuid[] parameter
	if err != nil || len(prog) != 1 || !prog[id].Found || prog[missing].Found {
		t.Fatalf("ForcedProgress: %+v, %v", prog, err)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, &id, "t"); err != nil {
		t.Fatal(err)
	}
	reqs, err := db.Requests().AdminRequests(ctx, "s1", true, 10)
	if err != nil || len(reqs) != 1 || reqs[0].Stream == nil || *reqs[0].Stream != id {
		t.Fatalf("admin requests: %+v, %v", reqs, err)
	}
}

// TestPoolSizeFromTheURL: both ways of opening the pool give it
// DefaultMaxConns unless the URL sets pool_max_conns, which wins (serve
// opened its pool lazily at a fixed 16 and ignored the URL).
func TestPoolSizeFromTheURL(t *testing.T) {
	const base = "postgres://nobody@127.0.0.1:1/none?sslmode=disable"
	for _, c := range []struct {
		url  string
		want int32
	}{{base, catalog.DefaultMaxConns}, {base + "&pool_max_conns=7", 7}} {
		db, err := catalog.OpenLazy(c.url)
		if err != nil {
			t.Fatal(err)
		}
		if got := db.PoolStats().Max; got != c.want {
			t.Errorf("OpenLazy(%s): pool of %d, want %d", c.url, got, c.want)
		}
		db.Close()
	}
}
