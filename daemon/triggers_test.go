package daemon_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
)

// absorbed creates stream id in s1 with records [0, n) absorbed (one flight).
func absorbed(t *testing.T, db *catalog.DB, id catalog.StreamID, seq, n int64) {
	t.Helper()
	ctx := context.Background()
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		return
	}
	f := writepath.AbsorbFlight{Epoch: 1, Seq: seq, FooterOffset: 1, FooterLength: 1,
		Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: 0, Count: n}}}
	if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{f}); err != nil {
		t.Fatal(err)
	}
}

func request(t *testing.T, db *catalog.DB, id int64) catalog.AdminRequest {
	t.Helper()
	r, err := db.Requests().AdminRequest(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestTriggersSurviveAFailedCycle: the first cycle that runs the triggers
// fails (an injected step error); the requests stay open, noting the
// attempt and its error, and the retry, which forces the same streams,
// consumes them with their outcomes: a plain trigger and a settled stream
// are done; a quarantined stream and an unknown one fail with the reason.
func TestTriggersSurviveAFailedCycle(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	settled := catalog.StreamID{0: 0x5e, 15: 1}
	held := catalog.StreamID{0: 0x5e, 15: 2}
	unknown := catalog.StreamID{0: 0x5e, 15: 3}
	absorbed(t, db, settled, 0, 10)
	absorbed(t, db, held, 1, 4)
	// Retention made all of settled's records dead, so the step below
	// "settles" it with SkipBelowLow, a real fenced settle statement.
	if err := writepath.New(db).RaiseLowRecord(ctx, settled, 10); err != nil {
		t.Fatal(err)
	}

	var calls atomic.Int32
	var mu sync.Mutex
	var forced [][]catalog.StreamID
	settle := step{"settle", func(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
		mu.Lock()
		forced = append(forced, opts.Streams)
		mu.Unlock()
		if calls.Add(1) == 1 {
			return cycle.Counts{}, errors.New("injected: s3 503 SlowDown")
		}
		for _, s := range opts.Streams {
			if s == settled {
				if _, err := db.Settle().SkipBelowLow(ctx, f, s); err != nil {
					return cycle.Counts{}, err
				}
			}
		}
		return cycle.Counts{}, nil
	}}
	// The quarantine is fenced: an earlier leader put it there.
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "earlier", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Settle().Quarantine(ctx, l.Fence, held, "", "corrupt", "bad chunk crc"); err != nil {
		t.Fatal(err)
	}
	if err := db.Leases().ReleaseLease(ctx, l.Fence); err != nil {
		t.Fatal(err)
	}

	var reqs []catalog.AdminRequest
	for _, id := range []*catalog.StreamID{nil, &settled, &held, &unknown} {
		r, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, id, "op")
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	// Asked before the daemon leads, so its first cycle runs them all.
	s := serve(t, withHolder(every(t, "@every 1h"), "d1"), db, settle)
	if reqs[1].TargetRecord == nil || *reqs[1].TargetRecord != 10 || reqs[3].TargetRecord != nil {
		t.Fatalf("targets recorded: %+v / %+v", reqs[1], reqs[3])
	}
	eventually(t, 5*time.Second, "the failed cycle noted", func() bool {
		for _, r := range reqs {
			if request(t, db, r.ID).Attempts != 1 {
				return false
			}
		}
		return true
	})
	runs := lastRuns(t, db, 5)
	if len(runs) != 1 || runs[0].Outcome != catalog.RunFailed {
		t.Fatalf("runs after the first cycle: %+v", runs)
	}
	for _, r := range reqs {
		got := request(t, db, r.ID)
		if got.ConsumedAt != nil || got.RunID == nil || *got.RunID != runs[0].ID || !strings.Contains(got.LastError, "injected: s3 503") {
			t.Fatalf("request %d after the failed cycle: %+v", r.ID, got)
		}
	}

	// The retry (backoff about 1s) runs them again and consumes them.
	eventually(t, 10*time.Second, "consumed by the retry", func() bool {
		for _, r := range reqs {
			if request(t, db, r.ID).ConsumedAt == nil {
				return false
			}
		}
		return true
	})
	runs = lastRuns(t, db, 5)
	if len(runs) != 2 || runs[0].Outcome != catalog.RunOK || runs[0].Trigger != daemon.TriggerStream || testutil.ToFloat64(s.m.CycleRetries) != 1 {
		t.Fatalf("runs: %+v", runs)
	}
	want := []struct {
		outcome, reason string
	}{{catalog.TriggerDone, ""}, {catalog.TriggerDone, ""}, {catalog.TriggerFailed, "quarantined (corrupt: bad chunk crc)"},
		{catalog.TriggerFailed, "is not a stream of this star"}}
	for i, r := range reqs {
		got := request(t, db, r.ID)
		if got.Outcome != want[i].outcome || !strings.Contains(got.Reason, want[i].reason) || got.Attempts != 2 ||
			got.RunID == nil || *got.RunID != runs[0].ID || got.ConsumedBy != "d1" {
			t.Fatalf("request %d: %+v, want %s %q", i, got, want[i].outcome, want[i].reason)
		}
		t.Logf("request %d: %s %s", i, got.Outcome, got.Reason)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(forced) != 2 || len(forced[0]) != 3 || len(forced[1]) != 3 {
		t.Fatalf("forced streams per cycle: %s", forced)
	}
	if v := testutil.ToFloat64(s.m.AdminRequests.WithLabelValues("trigger")); v != 4 {
		t.Fatalf("admin_requests_total{kind=trigger} = %v", v)
	}
}

// TestTriggersRunInCommitOrder: request ids are drawn when a transaction
// inserts, not when it commits. Two operators' trigger transactions commit
// out of id order: the higher id first, which a cycle runs and consumes,
// then the lower one. No cycle has run the lower one yet, so the next cycle
// starts at once and consumes it: not the scheduled cycle an hour away.
func TestTriggersRunInCommitOrder(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	rec := newRecorder()
	s := serve(t, withHolder(every(t, "@every 1h"), "d1"), db, rec)
	eventually(t, 5*time.Second, "leads", s.leader)

	// What catalog.Requests.RequestAdmin does, held open before the commit.
	begin := func() (pgx.Tx, int64) {
		tx, err := testenv.Conn(t, url).Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO nova.admin_requests (star, kind, requested_by)
			VALUES ('s1', 'trigger', 'op') RETURNING id`).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, 's1')`, catalog.AdminChannel); err != nil {
			t.Fatal(err)
		}
		return tx, id
	}
	lowTx, low := begin()
	highTx, high := begin()
	if low >= high {
		t.Fatalf("ids %d then %d", low, high)
	}
	consumed := func(id int64) func() bool {
		return func() bool { return request(t, db, id).ConsumedAt != nil }
	}
	if err := highTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the higher id consumed", consumed(high))
	if err := lowTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the lower id, committed last, consumed", consumed(low))
	runs := lastRuns(t, db, 5)
	if len(runs) != 2 || runs[0].Trigger != daemon.TriggerManual || runs[1].Trigger != daemon.TriggerManual {
		t.Fatalf("runs: %+v", runs)
	}
	for id, run := range map[int64]catalog.Run{high: runs[1], low: runs[0]} {
		got := request(t, db, id)
		if got.Outcome != catalog.TriggerDone || got.RunID == nil || *got.RunID != run.ID || got.Attempts != 1 {
			t.Fatalf("request %d: %+v, want done by run %d", id, got, run.ID)
		}
	}
	if n := len(rec.snapshot()); n != 2 {
		t.Fatalf("%d cycles, want 2", n)
	}
}

// TestATriggerSurvivesALostLease: the cycle running a trigger loses the
// lease (another holder takes it, and the step's fenced statement finds
// out). The request stays open; once the thief's lease expires the daemon
// leads again and its first cycle consumes it. The loss, found by a fenced
// statement and not by the renewer, is counted once.
func TestATriggerSurvivesALostLease(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	c := testenv.Conn(t, url)
	ctx := context.Background()
	var calls atomic.Int32
	steal := step{"steal", func(ctx context.Context, f catalog.Fence, _ cycle.Options) (cycle.Counts, error) {
		if calls.Add(1) == 1 {
			if _, err := c.Exec(ctx, `UPDATE nova.auditor_leases SET holder = 'thief', token = token + 1,
				expires_at = now() + interval '1500 milliseconds' WHERE star = 's1'`); err != nil {
				return cycle.Counts{}, err
			}
		}
		return cycle.Counts{}, db.Settle().AbandonPublish(ctx, f, -1, 0) // a fenced statement
	}}
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.LeaseRenew = 1500 * time.Millisecond // the renewer finds out late: the step's statement first
	cfg.LeaseTTL = 4 * time.Second
	cfg.LeaseCallTimeout = daemon.DefaultLeaseCallTimeout(cfg.LeaseTTL)
	s := serve(t, cfg, db, steal)
	eventually(t, 5*time.Second, "leads", s.leader)
	req, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "op")
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the lost cycle", func() bool {
		r := lastRuns(t, db, 1)
		return len(r) == 1 && r[0].Outcome == catalog.RunLostLease
	})
	if got := request(t, db, req.ID); got.ConsumedAt != nil {
		t.Fatalf("consumed by a cycle that lost the lease: %+v", got)
	}
	eventually(t, 10*time.Second, "consumed after leading again", func() bool { return request(t, db, req.ID).ConsumedAt != nil })
	got := request(t, db, req.ID)
	runs := lastRuns(t, db, 5)
	if got.Outcome != catalog.TriggerDone || got.RunID == nil || *got.RunID != runs[0].ID || runs[0].Outcome != catalog.RunOK {
		t.Fatalf("request %+v, runs %+v", got, runs)
	}
	if v := testutil.ToFloat64(s.m.LeaseLosses); v != 1 {
		t.Fatalf("lease_losses_total = %v", v)
	}
}

// TestRunOnceCountsALeaseLossFoundByAFencedStatement: a run whose step
// finds the token stale reports the loss in lease_losses_total (the
// renewer never sees it: the run ends first).
func TestRunOnceCountsALeaseLossFoundByAFencedStatement(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	c := testenv.Conn(t, url)
	steal := step{"steal", func(ctx context.Context, f catalog.Fence, _ cycle.Options) (cycle.Counts, error) {
		if _, err := c.Exec(ctx, `UPDATE nova.auditor_leases SET holder = 'thief', token = token + 1 WHERE star = 's1'`); err != nil {
			return cycle.Counts{}, err
		}
		return cycle.Counts{}, db.Settle().AbandonPublish(ctx, f, -1, 0)
	}}
	cfg := testConfig(t, "once")
	m := newMetrics(t)
	_, err := daemon.RunOnce(context.Background(), cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{steal}, Metrics: m}, cycle.Options{})
	if !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("RunOnce: %v", err)
	}
	if v := testutil.ToFloat64(m.LeaseLosses); v != 1 {
		t.Fatalf("lease_losses_total = %v", v)
	}
}

func newMetrics(t *testing.T) *daemon.Metrics {
	t.Helper()
	m, err := daemon.NewMetrics(prometheus.NewRegistry(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return m
}
