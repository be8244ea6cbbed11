package daemon_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/trim"
)

// leaderGaugeStep is a step whose gauge only the leader computes: it sets
// it to 1 in every cycle and counts the resets.
type leaderGaugeStep struct {
	step
	gauge  prometheus.Gauge
	resets atomic.Int64
}

func (s *leaderGaugeStep) ResetLeaderGauges() {
	s.resets.Add(1)
	s.gauge.Set(0)
}

// slowRenewal is a configuration whose lease renewal would notice a loss
// only after half an hour: every loss the test sees is found by a fenced
// transaction of the leader.
func slowRenewal(t *testing.T) daemon.Config {
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.LeaseTTL, cfg.LeaseRenew = time.Hour, 30*time.Minute
	cfg.LeaseCallTimeout = daemon.DefaultLeaseCallTimeout(cfg.LeaseTTL)
	cfg.AdminPoll = 100 * time.Millisecond
	return cfg
}

func stealLease(t *testing.T, url string) {
	t.Helper()
	if _, err := testenv.Conn(t, url).Exec(context.Background(), `UPDATE nova.auditor_leases SET holder = 'thief', token = token + 1,
		expires_at = now() + interval '1 hour' WHERE star = 's1'`); err != nil {
		t.Fatal(err)
	}
}

// A lease loss that a fenced transaction of the cycle finds (not the
// renewal) ends the term, counts in lease_losses_total once, and resets
// the leader-only gauges of the steps.
func TestALeaseLossFoundByTheCycleIsCountedAndResetsLeaderGauges(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	started := make(chan struct{}, 10)
	cfg := slowRenewal(t)
	cfg.RunNow = true
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "leader_only"})
	loop := fencedLoop(db, started)
	lg := &leaderGaugeStep{gauge: g, step: step{"gauge", func(ctx context.Context, f catalog.Fence, o cycle.Options) (cycle.Counts, error) {
		g.Set(1)
		return loop.Run(ctx, f, o)
	}}}
	s := serve(t, cfg, db, lg)
	<-started
	if testutil.ToFloat64(g) != 1 {
		t.Fatal("the step did not set its gauge")
	}
	stealLease(t, url)
	eventually(t, 5*time.Second, "steps down", func() bool { return !s.leader() })
	eventually(t, 2*time.Second, "ledger row", func() bool {
		r := lastRuns(t, db, 1)
		return len(r) == 1 && r[0].Outcome == catalog.RunLostLease
	})
	if v := testutil.ToFloat64(s.m.LeaseLosses); v != 1 {
		t.Fatalf("lease_losses_total = %v after a loss found by the cycle", v)
	}
	if testutil.ToFloat64(g) != 0 || lg.resets.Load() == 0 {
		t.Fatalf("leader-only gauge %v after stepping down (%d resets)", testutil.ToFloat64(g), lg.resets.Load())
	}
}

// A lease loss that the leader's fenced consumption of an operator request
// finds is counted too.
func TestALeaseLossFoundByAnAdminRequestIsCounted(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	s := serve(t, slowRenewal(t), db, newRecorder())
	eventually(t, 5*time.Second, "leads", s.leader)
	stealLease(t, url)
	if _, err := db.Requests().RequestAdmin(context.Background(), "s1", catalog.AdminTrigger, nil, "op"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "steps down", func() bool { return !s.leader() })
	if v := testutil.ToFloat64(s.m.LeaseLosses); v != 1 {
		t.Fatalf("lease_losses_total = %v after a loss found by consuming a trigger", v)
	}
}

// The metastore gauges exist for the star's class only, carry a freshness
// timestamp, and the per-step durations and the pool statistics are
// reported from the start.
func TestGaugesOfTheStarsClassFreshnessStepsAndPool(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t) // s1 is a standard star
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.HTTPAddr = "127.0.0.1:0"
	reg := prometheus.NewRegistry()
	m, err := daemon.NewMetrics(reg, "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(daemon.NewPoolCollector(db.PoolStats)); err != nil {
		t.Fatal(err)
	}
	d, err := daemon.New(cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{newRecorder()}, Log: tlog(t, "d1"), Metrics: m, Gatherer: reg,
		Trim: trim.Viewer{DB: db.Trim()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = d.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	before := float64(time.Now().Unix())
	eventually(t, 5*time.Second, "a refresh", func() bool { return testutil.ToFloat64(m.StatusRefreshed) >= before })
	eventually(t, 5*time.Second, "listening", func() bool { return d.Addr() != "" })
	body := metrics(t, "http://"+d.Addr())
	for _, want := range []string{`nova_auditor_due_streams{class="standard"} 0`, `nova_auditor_age_cap_seconds{class="standard"} 86400`,
		`nova_auditor_unsettled_records{class="standard"} 0`, `nova_auditor_trim_lag_slots 0`,
		`nova_auditor_step_duration_seconds_count{step="recorder"} 0`, `nova_auditor_pg_pool_max_connections 32`,
		`nova_auditor_pg_pool_connections{state="idle"}`, `nova_auditor_cycles_total{outcome="ok",trigger="manual"} 0`,
		`nova_auditor_status_refresh_timestamp_seconds `} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	if strings.Contains(body, `class="express"`) {
		t.Errorf("a standard star reports express series:\n%s", grepLines(body, `class="express"`))
	}
}

func grepLines(body, s string) string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// /debug/pprof/ is served only with Config.Pprof.
func TestPprofOnlyWhenEnabled(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	for _, on := range []bool{false, true} {
		cfg := withHolder(every(t, "@every 1h"), "p")
		cfg.HTTPAddr = "127.0.0.1:0"
		cfg.Pprof = on
		s := serve(t, cfg, db)
		eventually(t, 5*time.Second, "listening", func() bool { return s.d.Addr() != "" })
		base := "http://" + s.d.Addr()
		for _, path := range []string{"/debug/pprof/", "/debug/pprof/heap?debug=1", "/debug/pprof/cmdline"} {
			code, body := get(t, base+path)
			want := http.StatusNotFound
			if on {
				want = http.StatusOK
			}
			if code != want {
				t.Errorf("pprof %v: GET %s: %d, want %d (%.80q)", on, path, code, want, body)
			}
		}
		if code, _ := get(t, base+"/metrics"); code != http.StatusOK {
			t.Errorf("pprof %v: /metrics %d", on, code)
		}
		s.stop(t, 10*time.Second)
	}
}
