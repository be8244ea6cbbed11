package daemon_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/trim"
)

// txCounter counts the transactions a pool commits (or rolls back), as
// the server counts them in pg_stat_database: each statement outside a
// transaction block is one, and each block one at its end. It names the
// statements too. (The pool's liveness pings bypass tracers; the server
// counts them.)
type txCounter struct {
	mu    sync.Mutex
	inTx  map[*pgx.Conn]bool
	txs   int
	stmts []string
}

func (c *txCounter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	sql := strings.ToLower(strings.TrimSpace(d.SQL))
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stmts = append(c.stmts, strings.Join(strings.Fields(sql), " "))
	switch {
	case strings.HasPrefix(sql, "begin"):
		c.inTx[conn] = true
	case sql == "commit" || sql == "rollback":
		c.inTx[conn] = false
		c.txs++
	case !c.inTx[conn]:
		c.txs++
	}
	return ctx
}

func (c *txCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *txCounter) read() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.txs, len(c.stmts)
}

// idleServe serves star s1 on a fresh database with one recording step, a
// schedule of every second and the admin poll and gauge refresh every
// poll and gauges (0: never, within the test), its pool's transactions
// counted. The lease is renewed every 30 minutes: never within the test
// (a fleet renews all its leases in one statement per round).
func idleServe(t *testing.T, poll, gauges time.Duration) (count *txCounter, m *daemon.Metrics, rec *recorder, db *catalog.DB, url string) {
	t.Helper()
	_, url = newDB(t)
	count = &txCounter{inTx: map[*pgx.Conn]bool{}}
	db, err := catalog.OpenBudgeted(url, catalog.PoolOptions{MaxConns: 4, Tracer: count})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	cfg := testConfig(t, "idle")
	if cfg.Schedule, err = config.ParseSchedule("@every 1s"); err != nil {
		t.Fatal(err)
	}
	never := func(d time.Duration) time.Duration {
		if d == 0 {
			return time.Hour
		}
		return d
	}
	cfg.LeaseTTL, cfg.LeaseRenew, cfg.LeaseCallTimeout = time.Hour, 30*time.Minute, 10*time.Second
	cfg.AdminPoll, cfg.GaugeInterval, cfg.IdleRecord = never(poll), never(gauges), 5*time.Minute
	rec = newRecorder()
	reg := prometheus.NewRegistry()
	if m, err = daemon.NewMetrics(reg, "test"); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec}, Log: tlog(t, "idle"), Metrics: m, Gatherer: reg,
		Trim: trim.Viewer{DB: db.Trim()}, Idle: trim.IdleCheck{DB: db.Trim(), Policy: cfg.Policy}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return count, m, rec, db, url
}

// idleCost counts the transactions over n idle cycles after the first
// (which follows the term's first cycle, run with its steps).
func idleCost(t *testing.T, count *txCounter, m *daemon.Metrics, rec *recorder, n int) (cycles, txs, stmts int) {
	t.Helper()
	idle := func() int {
		return int(testutil.ToFloat64(m.Cycles.WithLabelValues(daemon.TriggerSchedule, daemon.CycleIdle)))
	}
	rec.wait(t, 30*time.Second) // the term's first cycle runs its steps
	eventually(t, 10*time.Second, "a first idle cycle", func() bool { return idle() >= 1 })
	n0 := idle()
	tx0, st0 := count.read()
	eventually(t, time.Duration(3*n)*time.Second, "more idle cycles", func() bool { return idle() >= n0+n })
	n1 := idle()
	tx1, st1 := count.read()
	return n1 - n0, tx1 - tx0, st1 - st0
}

// An idle cycle (no step has work) runs no step and costs the metastore
// one transaction: the idle check's read-only snapshot (its statements are
// named in docs/architecture.md, "Idle cycles"); at most two are allowed.
// Counted by a tracer on the daemon's pool over idle cycles after the
// term's first cycle, with nothing else on a timer (no renewal within the
// ttl, no admin poll, no gauge refresh). Then a slot reap come due makes
// the next scheduled cycle run its steps.
func TestIdleCycleCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("serves for about 10 seconds")
	}
	count, m, rec, db, url := idleServe(t, 0, 0)
	n, txs, stmts := idleCost(t, count, m, rec, 8)
	// a cycle may be under way at either reading: at most one's worth
	per := float64(txs) / float64(n)
	t.Logf("%d idle cycles: %d transactions, %d statements (%.2f transactions per idle cycle)", n, txs, stmts, per)
	if per > 2 {
		t.Errorf("%.2f transactions per idle cycle, want at most 2", per)
	}
	if n := len(rec.snapshot()); n != 1 {
		t.Errorf("the steps ran %d times: want once, in the term's first cycle", n)
	}
	// The ledger: the first cycle's row, then one idle row as the star
	// went quiet (the next comes 5 minutes on).
	if runs := lastRuns(t, db, 10); len(runs) != 2 || runs[0].Trigger != catalog.TriggerIdle || runs[0].Outcome != catalog.RunOK ||
		runs[1].Trigger != daemon.TriggerSchedule {
		t.Errorf("the ledger after idle cycles: %+v, want the first cycle's row and one idle row", runs)
	}
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), `INSERT INTO nova.slot_reaps
		(star, from_epoch, from_seq, to_epoch, to_seq, reap_after) VALUES ('s1', 1, 0, 1, 0, now())`); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 10*time.Second)
}

// An idle star's whole cost, with its timers at the fleet's ratios (a
// cycle every 10 s, the admin poll every 30 s, the gauges every minute:
// here 1 s, 3 s and 6 s): per 6 idle cycles, 6 idle checks, 2 admin polls
// and 1 gauge refresh (with the schema check), each one read snapshot, so
// 1.5 transactions per idle cycle; at most 2 are allowed. Each poll and
// refresh read in autocommit statements, before they shared a snapshot,
// cost 4 or more per cycle.
func TestIdleStarCommits(t *testing.T) {
	if testing.Short() {
		t.Skip("serves for about 20 seconds")
	}
	count, m, rec, _, _ := idleServe(t, 3*time.Second, 6*time.Second)
	n, txs, stmts := idleCost(t, count, m, rec, 18)
	per := float64(txs) / float64(n)
	t.Logf("%d idle cycles with polls and refreshes: %d transactions, %d statements (%.2f transactions per idle cycle)", n, txs, stmts, per)
	if per > 2 {
		t.Errorf("%.2f transactions per idle cycle with the timers, want at most 2", per)
	}
}
