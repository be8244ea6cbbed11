package main

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/sim"
)

// Tests that start real `auditor serve` processes against real Postgres.
// Leadership is observed through the database (auditor_leases,
// auditor_runs) and /metrics. The lease is 2s, renewed every 500ms.

const (
	ttl   = 2 * time.Second
	renew = 500 * time.Millisecond
)

func TestServeOneLeaderFailoverOnKillAndHandOverOnTerm(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	procs := map[string]*proc{"a": startServe(t, "a", url), "b": startServe(t, "b", url)}

	var first catalog.Lease
	eventually(t, 5*time.Second, "a leader", func() bool {
		l, live := currentLease(t, db)
		first = l
		return live && (l.Holder == "a" || l.Holder == "b")
	})
	leader := procs[first.Holder]
	standby := procs[map[string]string{"a": "b", "b": "a"}[first.Holder]]
	eventually(t, 2*time.Second, "leader gauge", func() bool { return leader.gauge("nova_auditor_leader") == 1 })
	time.Sleep(2 * renew) // the standby has tried and failed at least once
	if standby.gauge("nova_auditor_leader") != 0 {
		t.Fatal("two leaders")
	}
	if l, _ := currentLease(t, db); l.Token != first.Token || l.Holder != first.Holder {
		t.Fatalf("the lease moved without a failure: %+v then %+v", first, l)
	}

	// kill -9: the standby leads within lease-ttl plus one renew interval.
	leader.kill9()
	took := eventually(t, ttl+renew+2*time.Second, "the standby leads after kill -9", func() bool {
		l, live := currentLease(t, db)
		return live && l.Holder == standby.name
	})
	t.Logf("failover after kill -9 took %s", took)
	if limit := ttl + renew + 300*time.Millisecond; took > limit {
		t.Fatalf("failover took %s, more than lease-ttl + renew (+300ms of polling) = %s", took, limit)
	}
	second, _ := currentLease(t, db)
	if second.Token <= first.Token {
		t.Fatalf("token did not rise: %d then %d", first.Token, second.Token)
	}
	eventually(t, 2*time.Second, "new leader gauge", func() bool { return standby.gauge("nova_auditor_leader") == 1 })

	// SIGTERM: the leader releases and a new standby leads within seconds.
	c := startServe(t, "c", url)
	time.Sleep(2 * renew)
	standby.signal(syscall.SIGTERM)
	took = eventually(t, 3*time.Second, "c leads after SIGTERM", func() bool {
		l, live := currentLease(t, db)
		return live && l.Holder == "c"
	})
	t.Logf("hand-over after SIGTERM took %s", took)
	if code := standby.wait(5 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit code %d", code)
	}
	third, _ := currentLease(t, db)
	if third.Token <= second.Token {
		t.Fatalf("token did not rise: %d then %d", second.Token, third.Token)
	}
	if !standby.out.contains(`"msg":"lease released"`) {
		t.Fatal("the SIGTERMed leader did not log its release")
	}
	eventually(t, 2*time.Second, "c's gauge", func() bool { return c.gauge("nova_auditor_leader") == 1 })
}

func TestServeTriggerPauseResume(t *testing.T) {
	t.Parallel()
	url, db := migratedDBNoStar(t)
	if _, err := sim.Setup(context.Background(), db, sim.SetupOptions{Star: "s1", Streams: 4, Content: sim.DefaultContent(11)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root := t.TempDir()
	p := startServe(t, "d1", url, "--fs-root", root)
	eventually(t, 5*time.Second, "leads", func() bool { l, live := currentLease(t, db); return live && l.Holder == "d1" })
	runs := func() []catalog.Run {
		r, err := db.Ledger().LastRuns(ctx, "s1", 100)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	time.Sleep(time.Second)
	if n := len(runs()); n != 0 {
		t.Fatalf("%d cycles ran on an hourly schedule", n)
	}

	// trigger: a cycle within a second or two, and the request records
	// when the leader took it.
	code, out, errs := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "5s")
	if code != 0 || !strings.Contains(out, "taken by d1") || !strings.Contains(out, "leader: d1") {
		t.Fatalf("trigger: %d %q %q", code, out, errs)
	}
	eventually(t, 2*time.Second, "a manual cycle", func() bool {
		r := runs()
		return len(r) == 1 && r[0].Trigger == "manual" && r[0].Outcome == catalog.RunOK
	})
	var reqs []catalog.AdminRequest
	eventually(t, 2*time.Second, "the request consumed after its cycle", func() bool {
		var err error
		reqs, err = db.Requests().AdminRequests(ctx, "s1", false, 10)
		return err == nil && len(reqs) == 1 && reqs[0].ConsumedAt != nil
	})
	if reqs[0].ConsumedBy != "d1" || reqs[0].Outcome != catalog.TriggerDone {
		t.Fatalf("requests %+v", reqs)
	}
	lat := runs()[0].StartedAt.Sub(reqs[0].RequestedAt)
	t.Logf("trigger to cycle start: %s (database clock)", lat)
	if lat > 1500*time.Millisecond {
		t.Fatalf("the cycle started %s after the trigger", lat)
	}

	// trigger --stream: a "stream" cycle that settles that stream although
	// its data is well inside the 5m linger, and no other stream.
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: fs, Standard: "nova"}, sim.WriteOptions{Star: "s1", Flights: 4, FlightBytes: 64 << 10,
		FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var target catalog.Stream
	withData := 0
	for _, st := range streams {
		if st.NextRecord > 0 {
			target = st
			withData++
		}
	}
	if withData < 2 {
		t.Fatalf("only %d streams got records", withData)
	}
	id := target.ID.String()
	if code, out, errs := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--stream", id, "--wait", "5s"); code != 0 {
		t.Fatalf("trigger --stream: %d %q %q", code, out, errs)
	}
	eventually(t, 2*time.Second, "a stream cycle", func() bool {
		r := runs()
		return len(r) == 2 && r[0].Trigger == "stream" && r[0].Outcome == catalog.RunOK
	})
	if !p.out.contains(`"kind":"trigger","stream":"` + id + `"`) {
		t.Fatal("the stream trigger is not in the log")
	}
	for _, st := range streams {
		got, err := db.Streams().Stream(ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		if st.ID == target.ID && got.SettledThrough != got.NextRecord {
			t.Fatalf("the triggered stream settled %d of %d", got.SettledThrough, got.NextRecord)
		}
		if st.ID != target.ID && got.SettledThrough != 0 {
			t.Fatalf("stream %s inside its linger was settled", st.ID)
		}
	}
	if code, _, _ := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--stream", "nope"); code != 2 {
		t.Fatalf("trigger with a bad stream: exit %d", code)
	}

	// pause: the leader keeps its lease and runs nothing, not even on trigger.
	if code, out, _ := runCLI(t, "pause", "--star", "s1", "--database-url", url); code != 0 || !strings.Contains(out, "paused") {
		t.Fatalf("pause: %d %q", code, out)
	}
	eventually(t, 2*time.Second, "paused gauge", func() bool { return p.gauge("nova_auditor_paused") == 1 })
	if code, _, _ := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "2s"); code != exitTimeout {
		t.Fatalf("trigger while paused: exit %d, want %d (not taken within the wait)", code, exitTimeout)
	}
	if n := len(runs()); n != 2 {
		t.Fatalf("%d runs while paused", n-2)
	}
	if l, live := currentLease(t, db); !live || l.Holder != "d1" {
		t.Fatal("a paused leader lost its lease")
	}
	code, out, _ = runCLI(t, "status", "--star", "s1", "--database-url", url)
	if code != 0 || !strings.Contains(out, "PAUSED") || !strings.Contains(out, "PENDING REQUEST") {
		t.Fatalf("status while paused: %d\n%s", code, out)
	}

	// resume: the waiting trigger runs.
	if code, _, _ := runCLI(t, "resume", "--star", "s1", "--database-url", url); code != 0 {
		t.Fatalf("resume: %d", code)
	}
	eventually(t, 3*time.Second, "the waiting trigger ran", func() bool { return len(runs()) == 3 })
	eventually(t, 2*time.Second, "paused gauge cleared", func() bool { return p.gauge("nova_auditor_paused") == 0 })
}

func TestServePauseStopsTheScheduleAndResumeRestartsIt(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	ctx := context.Background()
	p := startServe(t, "d1", url, "--schedule", "@every 1s")
	// the cycles that ran: the ledger's rows, and the idle cycles, which
	// the ledger records one row per many
	count := func() int {
		r, err := db.Ledger().LastRuns(ctx, "s1", 1000)
		if err != nil {
			t.Fatal(err)
		}
		return len(r) + int(max(0, value(p.metrics(), "nova_auditor_cycles_total", map[string]string{"outcome": daemon.CycleIdle})))
	}
	eventually(t, 5*time.Second, "scheduled cycles", func() bool { return count() >= 2 })
	if code, _, _ := runCLI(t, "pause", "--star", "s1", "--database-url", url); code != 0 {
		t.Fatal("pause failed")
	}
	time.Sleep(1500 * time.Millisecond) // the pause lands; a cycle started before it ends
	n := count()
	time.Sleep(3 * time.Second)
	if m := count(); m != n {
		t.Fatalf("%d cycles ran while paused", m-n)
	}
	if code, _, _ := runCLI(t, "resume", "--star", "s1", "--database-url", url); code != 0 {
		t.Fatal("resume failed")
	}
	eventually(t, 4*time.Second, "cycles again", func() bool { return count() >= n+2 })
}

func TestServeMetricsAndReadinessWhileTheDatabaseIsDown(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	proxy := newProxy(t, dbHostPort(t, url))
	p := startServe(t, "m1", proxy.via(t, url), "--schedule", "@every 1s")
	eventually(t, 5*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })

	names := []string{"nova_auditor_build_info", "nova_auditor_cycles_total", "nova_auditor_cycle_duration_seconds",
		"nova_auditor_due_streams", "nova_auditor_settle_lag_seconds", "nova_auditor_oldest_transit_age_seconds",
		"nova_auditor_age_cap_breached_streams", "nova_auditor_quarantined", "nova_auditor_open_intents",
		"nova_auditor_pg_transactions_total", "nova_auditor_halted", "nova_auditor_paused", "go_goroutines"}
	// The leader's metastore gauges appear with its first refresh, a
	// moment after it takes the lease.
	var fams map[string]*dto.MetricFamily
	eventually(t, 10*time.Second, "the leader's gauges", func() bool {
		fams = p.metrics()
		for _, name := range names {
			if _, ok := fams[name]; !ok {
				return false
			}
		}
		return true
	})
	if bi := fams["nova_auditor_build_info"].GetMetric()[0]; len(bi.GetLabel()) < 3 {
		t.Errorf("build_info labels %v", bi.GetLabel())
	}
	ok := map[string]string{"star": "s1", "outcome": "ok"}
	idle := map[string]string{"star": "s1", "outcome": daemon.CycleIdle}
	cycles := value(fams, "nova_auditor_cycles_total", ok) + value(fams, "nova_auditor_cycles_total", idle)
	txs := value(fams, "nova_auditor_pg_transactions_total", ok)
	trig := value(fams, "nova_auditor_admin_requests_total", map[string]string{"kind": "trigger"})
	if code, _, _ := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "5s"); code != 0 {
		t.Fatal("trigger failed")
	}
	eventually(t, 5*time.Second, "counters move", func() bool {
		f := p.metrics()
		return value(f, "nova_auditor_cycles_total", ok)+value(f, "nova_auditor_cycles_total", idle) >= cycles+2 &&
			value(f, "nova_auditor_pg_transactions_total", ok) > txs &&
			value(f, "nova_auditor_admin_requests_total", map[string]string{"kind": "trigger"}) == trig+1 &&
			value(f, "nova_auditor_last_successful_cycle_timestamp_seconds", nil) > float64(time.Now().Add(-time.Minute).Unix())
	})
	code, body := p.get("/status")
	var st daemon.Status
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil || st.Leader.Holder != "m1" || len(st.LastRuns) == 0 {
		t.Fatalf("/status: %d %v %s", code, err, body)
	}
	// /status is the document of auditor status --json.
	code, out, _ := runCLI(t, "status", "--star", "s1", "--database-url", url, "--json")
	var cli daemon.Status
	if err := json.Unmarshal([]byte(out), &cli); code != 0 || err != nil || cli.Star != "s1" || cli.Leader.Holder != "m1" {
		t.Fatalf("status --json: %d %v", code, err)
	}
	if code, body := p.get("/readyz"); code != 200 || !strings.Contains(body, "leader") {
		t.Fatalf("/readyz: %d %q", code, body)
	}

	// The database goes away: not ready (alive all the same), the lease
	// lapses; it comes back: ready and leading again, with no restart.
	proxy.cut()
	eventually(t, 5*time.Second, "/readyz fails", func() bool { code, _ := p.get("/readyz"); return code == 503 })
	if code, _ := p.get("/healthz"); code != 200 {
		t.Fatalf("/healthz while the database is down: %d", code)
	}
	eventually(t, ttl+2*time.Second, "steps down", func() bool { return p.gauge("nova_auditor_leader") == 0 })
	proxy.restore()
	eventually(t, 10*time.Second, "/readyz recovers", func() bool { code, _ := p.get("/readyz"); return code == 200 })
	eventually(t, 5*time.Second, "leads again", func() bool { return p.gauge("nova_auditor_leader") == 1 })
	before := len(mustRuns(t, db))
	eventually(t, 5*time.Second, "cycles again", func() bool { return len(mustRuns(t, db)) > before })
	if p.exited() {
		t.Fatal("the daemon exited")
	}
}

func mustRuns(t *testing.T, db *catalog.DB) []catalog.Run {
	t.Helper()
	r, err := db.Ledger().LastRuns(context.Background(), "s1", 1000)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// blockRuns holds an exclusive lock on the run ledger, so a cycle that
// starts blocks at its first statement (a stand-in for a long cycle). That
// statement is fenced: its share lock on the lease row also holds off the
// renewal, so these tests use a lease longer than the block.
func blockRuns(t *testing.T, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE nova.auditor_runs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = tx.Rollback(ctx)
			_ = c.Close(ctx)
		}
	}
	t.Cleanup(release)
	return release
}

// startBlockedCycle triggers a cycle and waits until the leader took the
// request, i.e. the cycle is starting (and blocks on the ledger lock):
// trigger --wait would wait for the cycle to finish, which it cannot here.
func startBlockedCycle(t *testing.T, url string) {
	t.Helper()
	if code, out, errs := runCLI(t, "trigger", "--star", "s1", "--database-url", url); code != 0 {
		t.Fatalf("trigger: %d %q %q", code, out, errs)
	}
	db, err := catalog.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	eventually(t, 5*time.Second, "the trigger taken by the leader", func() bool {
		reqs, err := db.Requests().AdminRequests(context.Background(), "s1", false, 10)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reqs {
			if r.Kind == catalog.AdminTrigger && r.TakenAt != nil {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond)
}

func TestServeSignals(t *testing.T) {
	t.Parallel()
	t.Run("the cycle finishes, then exit 0", func(t *testing.T) {
		t.Parallel()
		url, db := migratedDB(t)
		p := startServe(t, "d1", url, "--shutdown-timeout", "30s", "--lease-ttl", "20s", "--lease-renew", "5s")
		eventually(t, 5*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
		release := blockRuns(t, url)
		startBlockedCycle(t, url)
		p.signal(syscall.SIGTERM)
		time.Sleep(time.Second)
		if p.exited() {
			t.Fatal("exited with a cycle running")
		}
		release()
		if code := p.wait(5 * time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
		r := mustRuns(t, db)
		if len(r) != 1 || r[0].Outcome != catalog.RunOK {
			t.Fatalf("runs %+v", r)
		}
		if _, live := currentLease(t, db); live {
			t.Fatal("lease not released")
		}
	})
	t.Run("the cycle is canceled at the shutdown timeout", func(t *testing.T) {
		t.Parallel()
		url, db := migratedDB(t)
		p := startServe(t, "d1", url, "--shutdown-timeout", "1s", "--lease-ttl", "20s", "--lease-renew", "5s")
		eventually(t, 5*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
		blockRuns(t, url)
		startBlockedCycle(t, url)
		start := time.Now()
		p.signal(syscall.SIGTERM)
		if code := p.wait(5 * time.Second); code != 0 {
			t.Fatalf("exit %d", code)
		}
		if took := time.Since(start); took < 900*time.Millisecond || took > 3*time.Second {
			t.Fatalf("exit after %s with a 1s shutdown timeout", took)
		}
		if !p.out.contains("shutdown timeout: canceling the running cycle") {
			t.Fatal("no cancel in the log")
		}
		if _, live := currentLease(t, db); live {
			t.Fatal("lease not released")
		}
	})
	t.Run("a second signal exits at once", func(t *testing.T) {
		t.Parallel()
		url, _ := migratedDB(t)
		p := startServe(t, "d1", url, "--shutdown-timeout", "60s", "--lease-ttl", "20s", "--lease-renew", "5s")
		eventually(t, 5*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
		blockRuns(t, url)
		startBlockedCycle(t, url)
		p.signal(syscall.SIGTERM)
		time.Sleep(500 * time.Millisecond)
		if p.exited() {
			t.Fatal("exited at the first signal with a cycle running")
		}
		start := time.Now()
		p.signal(syscall.SIGINT)
		if code := p.wait(2 * time.Second); code != 1 {
			t.Fatalf("exit %d after a second signal, want 1", code)
		}
		t.Logf("exit %s after the second signal", time.Since(start))
	})
}

// TestServeOnVersitygw: a real `auditor serve` against versitygw settles
// novasim traffic on a trigger, its data-path counters move (objects
// settled, bytes copied, S3 requests, slots reaped after the grace), and
// `auditor verify` against the same server passes, then names an object
// deleted behind the auditor's back.
func TestServeOnVersitygw(t *testing.T) {
	ctx := context.Background()
	s3e := testenv.S3(t)
	st, _ := teststore.S3Store(t, teststore.Options{})
	bucket := testenv.BucketName("serve")
	teststore.CreateBucket(t, st, bucket)
	url, db := migratedDBNoStar(t)
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 8, FenceWindow: 2, Content: sim.DefaultContent(13)}); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: st, Standard: bucket}, sim.WriteOptions{Star: "s1", Flights: 6,
		FlightBytes: 256 << 10, FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", s3e.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3e.SecretKey)
	storeFlags := []string{"--s3-endpoint", s3e.Endpoint, "--s3-path-style", "--bucket", bucket}
	p := startServe(t, "v1", url, append([]string{"--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "1s",
		"--denorm-output-cap-mib", "1", "--denorm-chunk-target-kib", "64"}, storeFlags...)...)
	eventually(t, 10*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })

	if code, _, errs := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "30s"); code != 0 {
		t.Fatalf("trigger: %s", errs)
	}
	eventually(t, 30*time.Second, "objects settled, bytes moved, S3 requests counted", func() bool {
		f := p.metrics()
		return value(f, "nova_auditor_settled_objects_total", nil) > 0 &&
			value(f, "nova_auditor_bytes_total", map[string]string{"path": "copied"})+
				value(f, "nova_auditor_bytes_total", map[string]string{"path": "uploaded"}) > 0 &&
			value(f, "nova_auditor_s3_requests_total", nil) > 0
	})
	// The counters move while the cycle runs; its trim step arms the
	// slots' reap (1s grace) after them, when the cycle's run row ends.
	eventually(t, 30*time.Second, "the first cycle ended", func() bool {
		r, err := db.Ledger().LastRuns(ctx, "s1", 1)
		return err == nil && len(r) == 1 && r[0].EndedAt != nil
	})
	time.Sleep(1100 * time.Millisecond) // the trimmed slots' grace
	if code, _, errs := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "30s"); code != 0 {
		t.Fatalf("second trigger: %s", errs)
	}
	eventually(t, 30*time.Second, "slots reaped", func() bool {
		return value(p.metrics(), "nova_auditor_slots_reaped_total", nil) > 0
	})
	rep, err := sim.Check(ctx, db, sim.Storage{Store: st, Standard: bucket}, sim.CheckOptions{SettledOnly: true})
	if err != nil || !rep.OK() || rep.Checked == 0 {
		t.Fatalf("novasim check: %+v %v", rep, err)
	}

	verify := append([]string{"verify", "--star", "s1", "--database-url", url}, storeFlags...)
	if code, out, errs := runCLI(t, verify...); code != 0 {
		t.Fatalf("verify on a healthy catalog: exit %d\n%s%s", code, out, errs)
	}
	var victim string
	if err := st.List(ctx, bucket, "buckets/", func(o objstore.ObjectInfo) error {
		if victim == "" {
			victim = o.Key
		}
		return nil
	}); err != nil || victim == "" {
		t.Fatalf("no settled object to delete: %v", err)
	}
	if err := st.Delete(ctx, bucket, []string{victim}); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCLI(t, verify...)
	if code == 0 || !strings.Contains(out+errs, victim) {
		t.Fatalf("verify after deleting %s: exit %d, does not name it:\n%s%s", victim, code, out, errs)
	}

	// Bad credentials, or no server at all: verify could not look (exit
	// 5), and no object is called corrupt.
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	for name, args := range map[string][]string{
		"bad credentials": verify,
		"no server":       append(append([]string{}, verify...), "--s3-endpoint", "http://127.0.0.1:1", "--s3-max-attempts", "1"),
	} {
		code, out, errs = runCLI(t, args...)
		if code != exitUnreachable || strings.Contains(out+errs, "corrupt") || !strings.Contains(errs, "nothing was judged") {
			t.Fatalf("verify with %s: exit %d, want %d without findings:\n%s%s", name, code, exitUnreachable, out, errs)
		}
	}
}

// TestServeStartChecks: serve runs auditor doctor's checks before it takes
// any work. A warning is logged and exported (the file backend cannot tell
// its lifecycle or encryption); a failed check refuses to start with exit
// 3 and the doctor's table in the log (a pool too small for the settle
// concurrency, a star that does not exist); --start-checks=false skips
// them. A database that does not answer only warns:
// TestServeWaitsForAnUnreachableDatabase.
func TestServeStartChecks(t *testing.T) {
	t.Parallel()
	url, _ := migratedDB(t)
	p := startServe(t, "c1", url)
	eventually(t, 10*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
	fams := p.metrics()
	for _, c := range []string{"no expiry", "abort incomplete multipart", "default encryption"} {
		if v := value(fams, "nova_auditor_start_check_warning", map[string]string{"star": "s1", "scope": "nova", "check": c}); v != 1 {
			t.Errorf("nova_auditor_start_check_warning{check=%q} = %v, want 1", c, v)
		}
		if !p.out.contains(`"check":"` + c + `"`) {
			t.Errorf("the %q warning is not logged", c)
		}
	}
	if v := value(fams, "nova_auditor_start_check_warning", map[string]string{"check": "ranged copy"}); v > 0 {
		t.Errorf("an ok check exported as a warning: %v", v)
	}

	refused := func(name string, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		base := []string{"serve", "--holder", name, "--http-addr", "127.0.0.1:0", "--log-format", "json",
			"--fs-root", t.TempDir(), "--data-dir", t.TempDir()}
		out, err := exec.CommandContext(ctx, auditorBinary(t), append(base, args...)...).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitFindings || !strings.Contains(string(out), "serve refuses to start") {
			t.Fatalf("%s: %v, want exit %d refusing to start:\n%s", name, err, exitFindings, out)
		}
		return string(out)
	}
	small := url + "&pool_max_conns=3"
	if !strings.Contains(url, "?") {
		small = url + "?pool_max_conns=3"
	}
	if out := refused("small-pool", "--star", "s1", "--database-url", small); !strings.Contains(out, `fail    postgres  pool size`) {
		t.Errorf("the table in the log names no failed pool size check:\n%s", out)
	}
	if out := refused("no-star", "--star", "nope", "--database-url", url); !strings.Contains(out, `no star \"nope\"`) {
		t.Errorf("no failed star check logged:\n%s", out)
	}
	q := startServe(t, "c2", small, "--start-checks=false")
	if q.out.contains("start check") {
		t.Error("--start-checks=false ran the checks")
	}
}
