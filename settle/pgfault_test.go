package settle_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/sim"
)

// TestPostgresConnectionsKilledMidCycle kills every backend connection of
// the auditor's database again and again while settle cycles run (a
// Postgres fault mid-cycle), then lets the cycles run clean: the auditor
// converges, and every invariant holds (every record once with the right
// bytes, entries tile, every object but the last full, no intent left).
func TestPostgresConnectionsKilledMidCycle(t *testing.T) {
	e, _ := newEnv(t, backends()[0], 10, 0.3)
	e.write("s1", 20, sim.Faults{}, 1)
	url := e.url
	killer, err := pgx.Connect(e.ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(context.Background())

	var kills atomic.Int64
	failed := 0
	for i := 0; i < 4; i++ {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(15 * time.Millisecond):
				}
				var n int64
				if err := killer.QueryRow(e.ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
					WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err == nil {
					kills.Add(n)
				}
			}
		}()
		if _, err := e.cycleNoFatal("s1"); err != nil {
			failed++
		}
		close(stop)
		<-done
	}
	if kills.Load() == 0 {
		t.Fatal("no connection was killed: the fault never happened")
	}
	// Clean cycles converge. The pool may still hand out a connection the
	// killer closed: the first statement on it fails (57P01), a transient
	// error the daemon retries with backoff; so does this test, a little.
	ok := 0
	for i := 0; ok < 2; i++ {
		if i == 5 {
			t.Fatalf("no two clean cycles in 5 tries")
		}
		if _, err := e.cycleNoFatal("s1"); err != nil {
			t.Logf("clean cycle: %v (retried)", err)
			continue
		}
		ok++
	}
	e.checkSettled("s1")
	// Reap intents of superseded revisions wait for their grace; no publish
	// intent may stay open.
	if in, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(in) != 0 {
		t.Errorf("open publish intents: %+v", in)
	}
	t.Logf("%d connections killed; %d of 4 faulted cycles failed and were retried", kills.Load(), failed)
}
