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
	"github.com/nova/auditor/internal/testenv"
)

// newAdminDB is newDB with star s1 and a direct connection for setting up
// what the catalog API does not write (times in the past, trim cursors).
func newAdminDB(t *testing.T) (*catalog.DB, *pgx.Conn, context.Context) {
	t.Helper()
	ctx := context.Background()
	db, url := testenv.MigratedDB(t)
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return db, conn, ctx
}

func TestAdminRequestsStateAndNotify(t *testing.T) {
	t.Parallel()
	db, _, ctx := newAdminDB(t)
	l, err := db.Requests().Listen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()

	if st, err := db.Ledger().DaemonState(ctx, "s1"); err != nil || st.Paused || st.Halted() {
		t.Fatalf("initial state %+v %v", st, err)
	}
	id := sid(7)
	trig, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, &id, "alice")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	payload, err := l.Wait(wctx)
	cancel()
	if err != nil || payload != "s1" {
		t.Fatalf("notification: %q %v", payload, err)
	}
	if trig.Kind != "trigger" || trig.Stream == nil || *trig.Stream != id || trig.RequestedBy != "alice" || trig.ConsumedAt != nil {
		t.Fatalf("trigger row %+v", trig)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminPause, nil, "alice"); err != nil {
		t.Fatal(err)
	}
	st, err := db.Ledger().DaemonState(ctx, "s1")
	if err != nil || !st.Paused || st.PausedAt == nil {
		t.Fatalf("after pause %+v %v", st, err)
	}
	// release of a stream that is not quarantined records nothing.
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminRelease, &id, "alice"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("release of a free stream: %v", err)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", "explode", nil, "alice"); err == nil {
		t.Fatal("unknown kind accepted")
	}
	open, err := db.Requests().AdminRequests(ctx, "s1", true, 10)
	if err != nil || len(open) != 2 || open[0].Kind != "pause" || open[1].Kind != "trigger" {
		t.Fatalf("open requests %+v %v", open, err)
	}

	// Consuming is fenced and takes only the kinds asked for.
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "d1", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	got, err := db.Requests().ConsumeAdminRequests(ctx, lease.Fence, []string{catalog.AdminPause, catalog.AdminResume})
	if err != nil || len(got) != 1 || got[0].Kind != "pause" || got[0].ConsumedBy != "d1" || got[0].ConsumedAt == nil {
		t.Fatalf("consume pause: %+v %v", got, err)
	}
	stale := lease.Fence
	stale.Token--
	if _, err := db.Requests().ConsumeAdminRequests(ctx, stale, []string{catalog.AdminTrigger}); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("consume with a stale token: %v", err)
	}
	got, err = db.Requests().ConsumeAdminRequests(ctx, lease.Fence, []string{catalog.AdminTrigger})
	if err != nil || len(got) != 1 || got[0].ID != trig.ID {
		t.Fatalf("consume trigger: %+v %v", got, err)
	}
	if r, err := db.Requests().AdminRequest(ctx, trig.ID); err != nil || r.ConsumedAt == nil || r.ConsumedBy != "d1" {
		t.Fatalf("consumed trigger reads back as %+v %v", r, err)
	}

	// A halt is fenced, keeps its first reason, and resume clears it with the pause.
	if err := db.Ledger().SetHalted(ctx, stale, "x"); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("halt with a stale token: %v", err)
	}
	if err := db.Ledger().SetHalted(ctx, lease.Fence, "overlap in stream 7"); err != nil {
		t.Fatal(err)
	}
	if err := db.Ledger().SetHalted(ctx, lease.Fence, "second"); err != nil {
		t.Fatal(err)
	}
	st, _ = db.Ledger().DaemonState(ctx, "s1")
	if !st.Halted() || st.HaltedReason != "overlap in stream 7" || st.HaltedAt == nil || !st.Paused {
		t.Fatalf("halted state %+v", st)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminResume, nil, "bob"); err != nil {
		t.Fatal(err)
	}
	if st, _ = db.Ledger().DaemonState(ctx, "s1"); st.Halted() || st.Paused {
		t.Fatalf("after resume %+v", st)
	}

	// release lifts a quarantine and records the request.
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, lease.Fence, id, "", "corrupt", "bad crc"); err != nil {
		t.Fatal(err)
	}
	rel, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminRelease, &id, "bob")
	if err != nil || rel.Kind != "release" {
		t.Fatalf("release: %+v %v", rel, err)
	}
	if q, _ := db.Settle().Quarantined(ctx, "s1"); len(q) != 0 {
		t.Fatalf("quarantine after release: %+v", q)
	}
}

func TestRunLedger(t *testing.T) {
	t.Parallel()
	db, _, ctx := newAdminDB(t)
	a, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := db.Ledger().StartRun(ctx, a.Fence, "schedule", false)
	if err != nil || r1.ID == 0 || r1.EndedAt != nil || r1.Token != a.Token || r1.Holder != "a" {
		t.Fatalf("start: %+v %v", r1, err)
	}
	done, err := db.Ledger().FinishRun(ctx, r1.ID, catalog.RunOK, catalog.RunCounts{StreamsSettled: 3, BytesCopied: 1 << 40}, "")
	if err != nil || done.EndedAt == nil || done.Outcome != "ok" || done.Counts.StreamsSettled != 3 || done.Counts.BytesCopied != 1<<40 {
		t.Fatalf("finish: %+v %v", done, err)
	}
	if _, err := db.Ledger().FinishRun(ctx, r1.ID, catalog.RunFailed, catalog.RunCounts{}, "late"); !errors.Is(err, catalog.ErrNotFound) {
		t.Fatalf("second finish: %v", err)
	}
	// a crashes mid-run; b takes over and closes a's open row.
	r2, err := db.Ledger().StartRun(ctx, a.Fence, "manual", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Leases().ReleaseLease(ctx, a.Fence); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ledger().StartRun(ctx, a.Fence, "manual", false); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("start without the lease: %v", err)
	}
	b, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "b", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r3, err := db.Ledger().StartRun(ctx, b.Fence, "schedule", true)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := db.Ledger().CloseAbandonedRuns(ctx, b.Fence); err != nil || n != 1 {
		t.Fatalf("close abandoned: %d %v", n, err)
	}
	runs, err := db.Ledger().LastRuns(ctx, "s1", 10)
	if err != nil || len(runs) != 3 || runs[0].ID != r3.ID || runs[0].EndedAt != nil || !runs[0].DryRun ||
		runs[1].ID != r2.ID || runs[1].Outcome != catalog.RunLostLease || runs[1].Error == "" {
		t.Fatalf("runs %+v %v", runs, err)
	}
	last, ok, err := db.Ledger().LastRunWithOutcome(ctx, "s1", catalog.RunOK)
	if err != nil || !ok || last.ID != r1.ID {
		t.Fatalf("last ok run: %+v %v %v", last, ok, err)
	}
	if _, ok, err := db.Ledger().LastRunWithOutcome(ctx, "nope", catalog.RunOK); err != nil || ok {
		t.Fatalf("last ok run of an unknown star: %v %v", ok, err)
	}
}

func TestTransitAndBacklog(t *testing.T) {
	t.Parallel()
	db, conn, ctx := newAdminDB(t)
	if err := writepath.New(db).CreateStar(ctx, "x1", catalog.ClassExpress, 1); err != nil {
		t.Fatal(err)
	}
	p := catalog.DuePolicy{Linger: 5 * time.Minute, AgeCap: time.Hour, ExpressLinger: time.Minute, ExpressAgeCap: 10 * time.Minute}

	// Empty: both classes, zero.
	now, classes, err := db.Ledger().TransitByClass(ctx, "s1", p)
	if err != nil || now.IsZero() || len(classes) != 2 || classes[0].Class != "standard" || classes[1].Class != "express" ||
		classes[0].Markers != 0 || classes[0].OldestSince != nil || classes[0].Lag != 0 {
		t.Fatalf("empty transit: %+v %v", classes, err)
	}

	// Standard stream 1: 2h old (over the cap, due); stream 2: 1m old (not
	// due); stream 3: 3h old but quarantined. Express stream 4 of x1 is not
	// s1's.
	for i, s := range []struct {
		id   byte
		star string
	}{{1, "s1"}, {2, "s1"}, {3, "s1"}, {4, "x1"}} {
		if err := writepath.New(db).CreateStream(ctx, sid(s.id), s.star, "b1"); err != nil {
			t.Fatal(err)
		}
		if err := writepath.New(db).Absorb(ctx, s.star, []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(i), FooterOffset: 1, FooterLength: 1,
			Batches: []writepath.AbsorbBatch{{Stream: sid(s.id), FirstRecord: 0, Count: 1}}}}); err != nil {
			t.Fatal(err)
		}
	}
	for id, age := range map[byte]string{1: "2 hours", 2: "1 minute", 3: "3 hours", 4: "1 day"} {
		if _, err := conn.Exec(ctx, `UPDATE nova.due_markers SET since = now() - $2::interval WHERE stream_id = $1`, sid(id), age); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, lease.Fence, sid(3), "stars/s1/chain/1/0", "checksum", "bad crc"); err != nil {
		t.Fatal(err)
	}
	_, classes, err = db.Ledger().TransitByClass(ctx, "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	std := classes[0]
	if std.Markers != 3 || std.Due != 1 || std.OverAgeCap != 2 || std.OldestSince == nil ||
		std.OldestAge < 3*time.Hour-time.Minute || std.OldestAge > 3*time.Hour+time.Minute ||
		std.Lag < 115*time.Minute-time.Minute || std.Lag > 115*time.Minute+time.Minute {
		t.Fatalf("standard class: %+v", std)
	}
	if classes[1].Markers != 0 {
		t.Fatalf("express class of s1: %+v", classes[1])
	}
	_, xc, err := db.Ledger().TransitByClass(ctx, "x1", p)
	if err != nil || xc[1].Markers != 1 || xc[1].Due != 1 || xc[1].OverAgeCap != 1 || xc[0].Markers != 0 {
		t.Fatalf("express star: %+v %v", xc, err)
	}

	// Backlog.
	if _, err := writepath.OpenIntent(ctx, db, lease.Fence, catalog.ExactTarget("k1", 0), "standard"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after) VALUES
		('s1', 'reap', 'k2', 'standard', now() - interval '1 minute'), ('s1', 'reap', 'k3', 'standard', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	b, err := db.Ledger().Backlog(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if b.PublishIntents != 1 || b.OldestPublish == nil || b.ReapIntents != 2 || b.Quarantined != 1 {
		t.Fatalf("backlog %+v", b)
	}
}

// TestPruneHistory: finished runs and consumed requests older than the
// window go, at most limit per call; the latest successful run, open runs
// and unconsumed requests stay however old, and so does what is recent.
func TestPruneHistory(t *testing.T) {
	t.Parallel()
	db, conn, ctx := newAdminDB(t)
	a, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "a", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	run := func(outcome string, dry bool, daysAgo int) int64 {
		t.Helper()
		r, err := db.Ledger().StartRun(ctx, a.Fence, "schedule", dry)
		if err != nil {
			t.Fatal(err)
		}
		if outcome != "" {
			if _, err := db.Ledger().FinishRun(ctx, r.ID, outcome, catalog.RunCounts{}, ""); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, `UPDATE nova.auditor_runs SET started_at = now() - make_interval(days => $2),
			ended_at = CASE WHEN ended_at IS NULL THEN NULL ELSE now() - make_interval(days => $2) END WHERE id = $1`, r.ID, daysAgo); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	oldOK := run(catalog.RunOK, false, 90)  // older successful run: pruned
	lastOK := run(catalog.RunOK, false, 60) // the latest successful run: kept
	oldFailed := run(catalog.RunFailed, false, 50)
	oldDry := run(catalog.RunOK, true, 45)     // a dry run is not "the last success"
	open := run("", false, 40)                 // open (abandoned, not yet closed): kept
	recent := run(catalog.RunFailed, false, 1) // inside the window: kept
	request := func(kind string, consumedDaysAgo int) int64 {
		t.Helper()
		r, err := db.Requests().RequestAdmin(ctx, "s1", kind, nil, "op")
		if err != nil {
			t.Fatal(err)
		}
		if consumedDaysAgo >= 0 {
			if _, err := conn.Exec(ctx, `UPDATE nova.admin_requests SET requested_at = now() - make_interval(days => $2 + 1),
				consumed_at = now() - make_interval(days => $2), consumed_by = 'a' WHERE id = $1`, r.ID, consumedDaysAgo); err != nil {
				t.Fatal(err)
			}
		} else if _, err := conn.Exec(ctx, `UPDATE nova.admin_requests SET requested_at = now() - interval '100 days' WHERE id = $1`, r.ID); err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	oldReq1 := request(catalog.AdminTrigger, 80)
	oldReq2 := request(catalog.AdminPause, 70)
	openReq := request(catalog.AdminTrigger, -1) // unconsumed, 100 days old: kept
	recentReq := request(catalog.AdminResume, 2)

	keep := 30 * 24 * time.Hour
	p, err := db.Ledger().PruneHistory(ctx, a.Fence, keep, 2)
	if err != nil || p.Runs != 2 || p.Requests != 2 {
		t.Fatalf("first prune (limit 2): %+v %v", p, err)
	}
	p, err = db.Ledger().PruneHistory(ctx, a.Fence, keep, 2)
	if err != nil || p.Runs != 1 || p.Requests != 0 {
		t.Fatalf("second prune: %+v %v", p, err)
	}
	if p, err := db.Ledger().PruneHistory(ctx, a.Fence, keep, 2); err != nil || p != (catalog.HistoryPruned{}) {
		t.Fatalf("third prune: %+v %v", p, err)
	}
	var runs, reqs []int64
	rows, _ := conn.Query(ctx, `SELECT id FROM nova.auditor_runs ORDER BY id`)
	runs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	rows, _ = conn.Query(ctx, `SELECT id FROM nova.admin_requests ORDER BY id`)
	reqs, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs, []int64{lastOK, open, recent}) {
		t.Fatalf("runs left %v, want last ok %d, open %d, recent %d (pruned %d, %d, %d)", runs, lastOK, open, recent, oldOK, oldFailed, oldDry)
	}
	if !slices.Equal(reqs, []int64{openReq, recentReq}) {
		t.Fatalf("requests left %v, want open %d and recent %d (pruned %d, %d)", reqs, openReq, recentReq, oldReq1, oldReq2)
	}
	if last, ok, err := db.Ledger().LastRunWithOutcome(ctx, "s1", catalog.RunOK); err != nil || !ok || last.ID != lastOK {
		t.Fatalf("last success after pruning: %+v %v %v", last, ok, err)
	}
	// Only the leader prunes.
	if err := db.Leases().ReleaseLease(ctx, a.Fence); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Ledger().PruneHistory(ctx, a.Fence, keep, 2); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("prune without the lease: %v", err)
	}
}
