package daemon_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
)

// proxied opens the test database through a TCP proxy that can be
// blackholed.
func proxied(t *testing.T, rawURL string) (*catalog.DB, *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	db, err := catalog.Open(context.Background(), p.URL(t, rawURL))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// pgx sends a cancel request for every connection it gave up on
		// and waits up to 15s for it: let those through.
		p.Restore()
		db.Close()
	})
	return db, p
}

// TestABlackholedDatabaseCostsTheLeaseNotTheDaemon: the leader's
// connections are blackholed (accepted, never answered). Its renewals give
// up at their deadline, so it steps down when the lease runs out locally,
// and its standby attempts do the same, so once the network is back it
// leads again instead of waiting for TCP to notice.
func TestABlackholedDatabaseCostsTheLeaseNotTheDaemon(t *testing.T) {
	t.Parallel()
	_, rawURL := newDB(t)
	db, p := proxied(t, rawURL)
	rec := newRecorder()
	s := serve(t, withHolder(every(t, "@every 1h"), "d1"), db, rec)
	eventually(t, 5*time.Second, "leads", s.leader)
	first, _ := lease(t, db)
	p.Blackhole()
	eventually(t, 10*time.Second, "steps down", func() bool { return !s.leader() })
	if v := testutil.ToFloat64(s.m.LeaseLosses); v != 1 {
		t.Fatalf("lease_losses_total = %v", v)
	}
	time.Sleep(time.Second) // standby attempts meet the blackhole too
	p.Restore()
	eventually(t, 15*time.Second, "leads again", s.leader)
	again, _ := lease(t, db)
	if again.Token <= first.Token {
		t.Fatalf("token %d after %d", again.Token, first.Token)
	}
}

// TestRunOnceGivesUpOnABlackholedDatabase: auditor run --once against a
// blackholed database fails at the acquisition's deadline.
func TestRunOnceGivesUpOnABlackholedDatabase(t *testing.T) {
	t.Parallel()
	_, rawURL := newDB(t)
	db, p := proxied(t, rawURL)
	p.Blackhole()
	cfg := testConfig(t, "once")
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := daemon.RunOnce(context.Background(), cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{newRecorder()}}, cycle.Options{})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("RunOnce through a blackhole: %v", err)
		}
		t.Logf("RunOnce gave up after %s: %v", time.Since(start).Round(time.Millisecond), err)
	case <-time.After(time.Minute):
		// Far past the deadline and far short of TCP's own timeout.
		t.Fatal("RunOnce through a blackhole did not return")
	}
}

// TestTwoProcessesWithOneHolderNameTakeTurns: two daemons given the same
// --holder. One leads; the other waits as its standby instead of taking
// the lease on every attempt (which fenced the leader each time). The
// token stays, no cycle loses its lease, and when the leader stops the
// other takes over.
func TestTwoProcessesWithOneHolderNameTakeTurns(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	cfg := withHolder(every(t, "@every 1s"), "same")
	cfg.LeaseRenew = 200 * time.Millisecond // many standby attempts
	fencedWork := func() cycle.Step {
		return step{"fenced", func(ctx context.Context, f catalog.Fence, _ cycle.Options) (cycle.Counts, error) {
			return cycle.Counts{}, db.Settle().AbandonPublish(ctx, f, -1, 0)
		}}
	}
	a := serve(t, cfg, db, fencedWork())
	eventually(t, 5*time.Second, "a leads", a.leader)
	first, _ := lease(t, db)
	b := serve(t, cfg, db, fencedWork())
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if a.leader() && b.leader() {
			t.Fatal("both lead")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !a.leader() || b.leader() {
		t.Fatalf("leaders: a %v, b %v", a.leader(), b.leader())
	}
	if l, _ := lease(t, db); l.Token != first.Token || l.Instance != first.Instance {
		t.Fatalf("lease %+v, was %+v: the second process took it", l, first)
	}
	for _, r := range lastRuns(t, db, 100) {
		if r.Outcome == catalog.RunLostLease {
			t.Fatalf("a cycle lost its lease: %+v", r)
		}
	}
	if v := testutil.ToFloat64(a.m.LeaseLosses); v != 0 {
		t.Fatalf("a lost its lease %v times", v)
	}
	if len(lastRuns(t, db, 100)) < 2 {
		t.Fatal("the leader ran no cycles")
	}
	a.stop(t, 10*time.Second)
	eventually(t, 5*time.Second, "b takes over", b.leader)
	if l, _ := lease(t, db); l.Token != first.Token+1 || l.Instance == first.Instance {
		t.Fatalf("lease after the hand-over %+v, was %+v", l, first)
	}
}
