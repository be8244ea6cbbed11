package daemon_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/trim"
)

// newDB opens a fresh, migrated metastore with one star, "s1".
func newDB(t *testing.T) (*catalog.DB, string) {
	t.Helper()
	db, url := testenv.MigratedDB(t)
	ctx := context.Background()
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	return db, url
}

// testConfig is a fast daemon configuration for star s1.
func testConfig(t *testing.T, holder string) daemon.Config {
	t.Helper()
	sched, err := config.ParseSchedule("@every 1h")
	if err != nil {
		t.Fatal(err)
	}
	return daemon.Config{
		Star: "s1", Holder: holder, Schedule: sched,
		LeaseTTL: 2 * time.Second, LeaseRenew: 500 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
		Policy: catalog.DuePolicy{Linger: 5 * time.Minute, AgeCap: 24 * time.Hour,
			ExpressLinger: 5 * time.Minute, ExpressAgeCap: time.Hour},
		AdminPoll: 5 * time.Second, GaugeInterval: 200 * time.Millisecond,
		RetryMax: daemon.DefaultRetryMax, RulesInterval: daemon.DefaultRulesInterval, DBRetryMax: daemon.DefaultDBRetryMax,
		PruneBatch: daemon.DefaultPruneBatch, LeaseCallTimeout: daemon.DefaultLeaseCallTimeout(2 * time.Second),
	}
}

// step is a fake cycle step with a function body.
type step struct {
	name string
	run  func(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error)
}

func (s step) Name() string { return s.name }
func (s step) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	return s.run(ctx, f, opts)
}

// recorder is a step that records every call's options and fence.
type recorder struct {
	mu     sync.Mutex
	calls  []cycle.Options
	fences []catalog.Fence
	counts cycle.Counts
	seen   chan struct{}
}

func newRecorder() *recorder { return &recorder{seen: make(chan struct{}, 100)} }

func (r *recorder) Name() string { return "recorder" }
func (r *recorder) Run(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
	r.mu.Lock()
	r.calls = append(r.calls, opts)
	r.fences = append(r.fences, f)
	r.mu.Unlock()
	r.seen <- struct{}{}
	return r.counts, nil
}

func (r *recorder) snapshot() []cycle.Options {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cycle.Options(nil), r.calls...)
}

// wait waits for the next call.
func (r *recorder) wait(t *testing.T, within time.Duration) {
	t.Helper()
	select {
	case <-r.seen:
	case <-time.After(within):
		t.Fatalf("no cycle within %s", within)
	}
}

// eventually polls cond until it holds or the time is up.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func lastRuns(t *testing.T, db *catalog.DB, n int) []catalog.Run {
	t.Helper()
	runs, err := db.Ledger().LastRuns(context.Background(), "s1", n)
	if err != nil {
		t.Fatal(err)
	}
	return runs
}

// tlog is a logger that writes to the test log.
func tlog(t *testing.T, name string) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t, name}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct {
	t    *testing.T
	name string
}

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s: %s", w.name, strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// served is a daemon running in this process.
type served struct {
	d      *daemon.Daemon
	m      *daemon.Metrics
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// serve starts a daemon; it is stopped when the test ends.
func serve(t *testing.T, cfg daemon.Config, db *catalog.DB, steps ...cycle.Step) *served {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := daemon.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: steps, Log: tlog(t, cfg.Holder), Metrics: m, Gatherer: reg, Trim: trim.Viewer{DB: db.Trim()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{d: d, m: m, reg: reg, cancel: cancel, done: make(chan struct{})}
	go func() {
		s.err = d.Serve(ctx)
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t, 30*time.Second) })
	return s
}

// stop cancels the daemon (the first SIGTERM) and waits for it.
func (s *served) stop(t *testing.T, within time.Duration) {
	t.Helper()
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(within):
		t.Fatalf("Serve did not return within %s", within)
	}
	if s.err != nil {
		t.Fatalf("Serve: %v", s.err)
	}
}

func (s *served) leader() bool { return testutil.ToFloat64(s.m.Leader) == 1 }

func lease(t *testing.T, db *catalog.DB) (catalog.Lease, bool) {
	t.Helper()
	l, live, err := db.Leases().CurrentLease(context.Background(), "s1")
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		t.Fatal(err)
	}
	return l, live
}
