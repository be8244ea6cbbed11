package catalog_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

func fleetStars(t *testing.T, ctx context.Context, db *catalog.DB, names ...string) {
	t.Helper()
	for _, s := range names {
		if err := writepath.New(db).CreateStar(ctx, s, catalog.ClassStandard, 1); err != nil {
			t.Fatal(err)
		}
	}
}

func claimed(ls []catalog.Claimed) []string {
	var out []string
	for _, l := range ls {
		out = append(out, l.Star)
	}
	return out
}

func claims(stars ...string) []catalog.Claim {
	var out []catalog.Claim
	for _, s := range stars {
		out = append(out, catalog.Claim{Star: s})
	}
	return out
}

// Claims take free stars in the order asked, never a live one, and are
// recorded with why the star moved; one statement renews many leases and
// leaves out the stale ones.
func TestFleetClaimRenewHandOff(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	fleetStars(t, ctx, db, "s1", "s2", "s3", "s4")
	v, err := db.Fleet().FleetView(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Stars) != 4 || v.Stars[0].Holder != "" || v.Stars[0].Live || v.Stars[0].LastMove >= 0 {
		t.Fatalf("fleet of new stars: %+v", v.Stars)
	}
	a, err := db.Fleet().ClaimStars(ctx, "a", "ia", claims("s2", "s1", "s3"), 2, time.Minute, time.Minute)
	if err != nil || !slices.Equal(claimed(a), []string{"s2", "s1"}) || a[0].Token != 1 {
		t.Fatalf("a's claim: %+v, %v", a, err)
	}
	b, err := db.Fleet().ClaimStars(ctx, "b", "ib", claims("s1", "s2", "s3", "s4"), 4, time.Minute, time.Minute)
	if err != nil || !slices.Equal(claimed(b), []string{"s3", "s4"}) {
		t.Fatalf("b's claim beside a's live leases: %+v, %v", b, err)
	}
	// One statement renews a's leases; a stale token is left out.
	got, err := db.Fleet().RenewLeases(ctx, "a", []catalog.Fence{a[0].Fence, {Star: "s1", Holder: "a", Token: 99}}, time.Minute)
	if err != nil || len(got) != 1 || got["s2"].IsZero() {
		t.Fatalf("renew: %v, %v", got, err)
	}
	// b's renewal of a's star is refused too: the holder must match.
	if got, err := db.Fleet().RenewLeases(ctx, "b", []catalog.Fence{{Star: "s2", Holder: "b", Token: a[0].Token}}, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("b renews a's star: %v, %v", got, err)
	}

	// A hand-off to b, a live member: c may not take it within the
	// window, b may.
	if _, err := db.Fleet().Heartbeat(ctx, "b", "ib", "all", false, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := db.Fleet().HandOff(ctx, a[0].Fence, "b", "balance"); err != nil {
		t.Fatal(err)
	}
	if c, err := db.Fleet().ClaimStars(ctx, "c", "ic", claims("s2"), 1, time.Minute, time.Minute); err != nil || len(c) != 0 {
		t.Fatalf("c claims a star handed to b: %+v, %v", c, err)
	}
	b2, err := db.Fleet().ClaimStars(ctx, "b", "ib", []catalog.Claim{{Star: "s2", OverCap: true}}, 1, time.Minute, time.Minute)
	if err != nil || len(b2) != 1 || b2[0].Token != a[0].Token+1 {
		t.Fatalf("b claims the star handed to it: %+v, %v", b2, err)
	}
	// A hand-off to a member that is not live binds no one.
	if err := db.Fleet().HandOff(ctx, b[0].Fence, "gone", "drain"); err != nil {
		t.Fatal(err)
	}
	if c, err := db.Fleet().ClaimStars(ctx, "c", "ic", claims("s3"), 1, time.Minute, time.Minute); err != nil || len(c) != 1 {
		t.Fatalf("c claims a star handed to a member that is not live: %+v, %v", c, err)
	}
	// A lease let expire is claimed as lost.
	if _, err := db.Pool().Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now() WHERE star = 's1'`); err != nil {
		t.Fatal(err)
	}
	if c, err := db.Fleet().ClaimStars(ctx, "c", "ic", claims("s1"), 1, time.Minute, time.Minute); err != nil || len(c) != 1 || c[0].Reason != "lost" {
		t.Fatalf("c claims an expired lease: %+v, %v (want it, as lost)", c, err)
	}
	moves, err := db.Fleet().FleetMoves(ctx, time.Hour, 100)
	if err != nil {
		t.Fatal(err)
	}
	type mv struct{ star, from, to, reason string }
	var seen []mv
	for _, m := range slices.Backward(moves) {
		seen = append(seen, mv{m.Star, m.From, m.To, m.Reason})
	}
	want := []mv{{"s2", "", "a", "new"}, {"s1", "", "a", "new"}, {"s3", "", "b", "new"}, {"s4", "", "b", "new"},
		{"s2", "a", "b", "balance"}, {"s3", "b", "c", "drain"}, {"s1", "a", "c", "lost"}}
	if !slices.Equal(seen, want) {
		t.Fatalf("moves:\n got %v\nwant %v", seen, want)
	}
	if !moves[2].OverCap || moves[0].OverCap || moves[1].OverCap {
		t.Fatalf("over-cap flags: %+v", moves)
	}
	v, err = db.Fleet().FleetView(ctx, time.Hour)
	if err != nil || v.BalanceMoves != 1 {
		t.Fatalf("balance moves in the window: %d, %v", v.BalanceMoves, err)
	}
}

// A claim never waits for, nor takes, a row a fenced transaction of the old
// holder still holds: it skips it (SKIP LOCKED) and takes it once that
// transaction ended.
func TestFleetClaimSkipsAFencedTransaction(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	fleetStars(t, ctx, db, "s1", "s2")
	if _, err := db.Fleet().FleetView(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	a, err := db.Fleet().ClaimStars(ctx, "a", "ia", claims("s1"), 1, 2*time.Second, time.Minute)
	if err != nil || len(a) != 1 {
		t.Fatalf("a's claim: %+v, %v", a, err)
	}
	inTx, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- db.Fenced(ctx, a[0].Fence, func(pgx.Tx) error {
			close(inTx)
			<-release
			return nil
		})
	}()
	<-inTx
	time.Sleep(2500 * time.Millisecond) // a's lease expires while its transaction is open
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	b, err := db.Fleet().ClaimStars(cctx, "b", "ib", claims("s1", "s2"), 2, time.Minute, time.Minute)
	cancel()
	if err != nil || !slices.Equal(claimed(b), []string{"s2"}) {
		t.Fatalf("b's claim while a's fenced transaction is open: %+v, %v (want s2 alone, at once)", b, err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("a's fenced transaction: %v", err)
	}
	b, err = db.Fleet().ClaimStars(ctx, "b", "ib", claims("s1"), 1, time.Minute, time.Minute)
	if err != nil || len(b) != 1 || b[0].Token != a[0].Token+1 {
		t.Fatalf("b's claim after it ended: %+v, %v", b, err)
	}
	if err := db.Fenced(ctx, a[0].Fence, func(pgx.Tx) error { return nil }); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("a's token after the takeover: %v, want ErrStaleToken", err)
	}
}

// A member name is one process's: a live row of another instance is not
// taken, an expired one is.
func TestFleetMemberIdentity(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	if _, err := db.Fleet().Heartbeat(ctx, "m1", "i1", "all", false, time.Second); err != nil {
		t.Fatal(err)
	}
	var held *catalog.MemberHeldError
	if _, err := db.Fleet().Heartbeat(ctx, "m1", "i2", "all", false, time.Second); !errors.As(err, &held) {
		t.Fatalf("a second process as m1: %v, want MemberHeldError", err)
	}
	time.Sleep(1100 * time.Millisecond)
	if _, err := db.Fleet().Heartbeat(ctx, "m1", "i2", "all", true, time.Minute); err != nil {
		t.Fatalf("taking an expired member row: %v", err)
	}
	v, err := db.Fleet().FleetView(ctx, time.Hour)
	if err != nil || len(v.Members) != 1 || v.Members[0].Instance != "i2" || !v.Members[0].Draining || !v.Members[0].Alive {
		t.Fatalf("members: %+v, %v", v.Members, err)
	}
	if err := db.Fleet().LeaveFleet(ctx, "m1", "i1"); err != nil {
		t.Fatal(err)
	}
	if v, _ := db.Fleet().FleetView(ctx, time.Hour); len(v.Members) != 1 {
		t.Fatalf("another instance's leave removed the row: %+v", v.Members)
	}
	if err := db.Fleet().LeaveFleet(ctx, "m1", "i2"); err != nil {
		t.Fatal(err)
	}
	if v, _ := db.Fleet().FleetView(ctx, time.Hour); len(v.Members) != 0 {
		t.Fatalf("members after leaving: %+v", v.Members)
	}
}

// The moves of a window are counted by reason, every reason listed in
// the schema's order, zero included; older moves are left out.
func TestFleetMoveCounts(t *testing.T) {
	t.Parallel()
	db, ctx := newDB(t)
	fleetStars(t, ctx, db, "s1", "s2", "s3")
	if _, err := db.Fleet().FleetView(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	a, err := db.Fleet().ClaimStars(ctx, "a", "ia", claims("s1", "s2", "s3"), 3, time.Minute, time.Minute)
	if err != nil || len(a) != 3 {
		t.Fatalf("a's claim: %+v, %v", a, err)
	}
	if err := db.Fleet().HandOff(ctx, a[0].Fence, "b", "drain"); err != nil {
		t.Fatal(err)
	}
	if b, err := db.Fleet().ClaimStars(ctx, "b", "ib", claims("s1"), 1, time.Minute, time.Minute); err != nil || len(b) != 1 {
		t.Fatalf("b's claim of the drained star: %+v, %v", b, err)
	}
	// One of a's claims is two hours old: out of the window.
	if _, err := db.Pool().Exec(ctx, `UPDATE nova.auditor_fleet_moves SET at = now() - interval '2 hours'
		WHERE star = 's3'`); err != nil {
		t.Fatal(err)
	}
	got, err := db.Fleet().FleetMoveCounts(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	want := []catalog.MoveCount{{Reason: "new", Count: 2}, {Reason: "released"}, {Reason: "drain", Count: 1},
		{Reason: "balance"}, {Reason: "stuck"}, {Reason: "lost"}}
	if !slices.Equal(got, want) {
		t.Fatalf("counts:\n got %+v\nwant %+v", got, want)
	}
}
