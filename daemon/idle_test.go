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
	_, url := newDB(t)
	count := &txCounter{inTx: map[*pgx.Conn]bool{}}
	db, err := catalog.OpenBudgeted(url, catalog.PoolOptions{MaxConns: 4, Tracer: count})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cfg := testConfig(t, "idle")
	if cfg.Schedule, err = config.ParseSchedule("@every 1s"); err != nil {
		t.Fatal(err)
	}
	cfg.LeaseTTL, cfg.LeaseRenew, cfg.LeaseCallTimeout = time.Hour, 30*time.Minute, 10*time.Second
	cfg.AdminPoll, cfg.GaugeInterval, cfg.IdleRecord = time.Hour, time.Hour, 5*time.Minute
	rec := newRecorder()
	reg := prometheus.NewRegistry()
	m, err := daemon.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{DB: db, Steps: []cycle.Step{rec}, Log: tlog(t, "idle"), Metrics: m, Gatherer: reg,
		Trim: trim.Viewer{DB: db}, Idle: trim.IdleCheck{DB: db, Policy: cfg.Policy}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	idle := func() int {
		return int(testutil.ToFloat64(m.Cycles.WithLabelValues(daemon.TriggerSchedule, daemon.CycleIdle)))
	}
	rec.wait(t, 30*time.Second) // the term's first cycle runs its steps
	eventually(t, 10*time.Second, "a first idle cycle", func() bool { return idle() >= 1 })
	n0 := idle()
	tx0, st0 := count.read()
	eventually(t, 20*time.Second, "eight more idle cycles", func() bool { return idle() >= n0+8 })
	n1 := idle()
	tx1, st1 := count.read()
	// a cycle may be under way at either reading: at most one's worth
	per := float64(tx1-tx0) / float64(n1-n0)
	t.Logf("%d idle cycles: %d transactions, %d statements (%.2f transactions per idle cycle)", n1-n0, tx1-tx0, st1-st0, per)
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
