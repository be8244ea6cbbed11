package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestRunOnceIdle: `run --once` on a star with nothing to do reads once
// and exits 0 ("cycle idle") without the lease or a ledger row: at most 3
// transactions of its statements (the connection's ping, the schema check, the idle
// check's snapshot), against the whole cycle's dozens. It runs the whole
// cycle when the ledger's last success is older than
// --idle-record-interval, when a step has work (a slot reap come due), and
// a paused star is refused as before.
func TestRunOnceIdle(t *testing.T) {
	url, db := migratedDB(t)
	db.Close() // no connection of the test's own while the runs are counted
	// Autovacuum's transactions count in the database too: none runs here.
	execSQL(t, url, `DO $$ DECLARE r record; BEGIN
		FOR r IN SELECT tablename FROM pg_tables WHERE schemaname = 'nova' LOOP
			EXECUTE format('ALTER TABLE nova.%I SET (autovacuum_enabled = false)', r.tablename);
		END LOOP; END $$`)
	common := []string{"--star", "s1", "--database-url", url, "--fs-root", t.TempDir(), "--data-dir", t.TempDir(), "--log-level", "warn"}
	// A session's own transactions (its start and end), measured: a
	// session that runs one statement.
	tx0, s0 := settledCounts(t, url)
	execSQL(t, url, `SELECT 1`)
	tx1, s1 := settledCounts(t, url)
	perSession := (tx1 - tx0 - 1) / max(1, s1-s0)
	t.Logf("a session commits %d transactions of its own", perSession)
	// run runs run --once and counts the transactions its statements
	// made (a session's own are not counted here).
	run := func(extra ...string) (int, string, int64) {
		t.Helper()
		tx0, s0 := settledCounts(t, url)
		code, out, errs := runCLI(t, append(append([]string{"run", "--once"}, common...), extra...)...)
		if errs != "" {
			t.Logf("stderr: %s", errs)
		}
		tx1, s1 := settledCounts(t, url)
		return code, out, (tx1 - tx0) - perSession*(s1-s0)
	}
	runs := func() int {
		t.Helper()
		c, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		var n int
		if err := c.QueryRow(context.Background(), `SELECT count(*) FROM nova.auditor_runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	code, out, full := run()
	if code != exitOK || !strings.Contains(out, "cycle ok") {
		t.Fatalf("the first run: exit %d %q, want the whole cycle", code, out)
	}
	code, out, idle := run()
	t.Logf("transactions: %d for the whole cycle, %d for an idle run", full, idle)
	if code != exitOK || !strings.Contains(out, "cycle idle") {
		t.Fatalf("the second run: exit %d %q, want an idle run", code, out)
	}
	if idle > 3 {
		t.Errorf("an idle run --once made %d transactions, want at most 3 (ping, schema check, idle check)", idle)
	}
	if n := runs(); n != 1 {
		t.Errorf("the ledger has %d runs after an idle run, want the first run's only", n)
	}

	// The ledger's last success older than the interval: the whole cycle.
	time.Sleep(1100 * time.Millisecond)
	if code, out, _ := run("--idle-record-interval", "1s"); code != exitOK || !strings.Contains(out, "cycle ok") {
		t.Fatalf("a run past the idle record interval: exit %d %q, want the whole cycle", code, out)
	}

	// Work come due: the whole cycle.
	execSQL(t, url, `INSERT INTO nova.slot_reaps
		(star, from_epoch, from_seq, to_epoch, to_seq, reap_after) VALUES ('s1', 1, 0, 1, 0, now())`)
	if code, out, _ := run(); code != exitOK || !strings.Contains(out, "cycle ok") {
		t.Fatalf("a run with a slot reap due: exit %d %q, want the whole cycle", code, out)
	}

	// Paused: refused, idle or not.
	if code, out, errs := runCLI(t, "pause", "--star", "s1", "--database-url", url); code != exitOK {
		t.Fatalf("pause: exit %d %q %q", code, out, errs)
	}
	if code, out, _ := run(); code == exitOK {
		t.Fatalf("a run of a paused star: exit 0 %q, want it refused", out)
	}
}
