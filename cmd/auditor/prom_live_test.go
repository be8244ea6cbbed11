package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/sim"
)

// TestMonitoringAgainstPrometheus is the monitoring's proof: a real
// Prometheus scrapes a leader and a standby of two stars (s1 on the file
// backend, s2 on versitygw behind a proxy that answers 2% of the requests
// 503 SlowDown) while novasim writes to both. Every expression of the
// dashboard and of the alert rules is evaluated through the HTTP API: each
// returns series, and each label of a by(), an on(), a selector and a
// legend exists on the series. Then the failure states are driven and the
// alert expressions' values asserted: a quarantine and its release, a
// stolen lease, every instance of a star stopped, and a star whose targets
// are gone. promtool check metrics lints a real scrape. The fleet's panels
// and rules are TestFleetMonitoringAgainstPrometheus's; here the fleet's
// rules must stay silent, and the fleet's series may be absent from the
// expressions made for both modes.
func TestMonitoringAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	promTool(t, "prometheus")
	promtool := promTool(t, "promtool")
	ctx := context.Background()
	dbURL, db := migratedDBNoStar(t)
	for _, star := range []string{"s1", "s2"} {
		if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: star, Streams: 12, Content: sim.DefaultContent(21)}); err != nil {
			t.Fatal(err)
		}
	}
	s3e := testenv.S3(t)
	st, _ := teststore.S3Store(t, teststore.Options{})
	bucket := testenv.BucketName("prom")
	teststore.CreateBucket(t, st, bucket)
	t.Setenv("AWS_ACCESS_KEY_ID", s3e.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3e.SecretKey)
	fp := newZoneProxy(t, s3e.Endpoint)
	fp.rate = 0.02
	fp.flaky.Store(true)
	srv := httptest.NewServer(fp)
	t.Cleanup(srv.Close)

	root := t.TempDir()
	common := []string{"--schedule", "@every 2s", "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "1s", "--log-level", "info"}
	// s1's erasure alert bound is short, so the erasure recorded on its
	// quarantined stream below crosses it within the test.
	s1Flags := append([]string{"--star", "s1", "--fs-root", root, "--erasure-alert-after", "3s"}, common...)
	s2Flags := append([]string{"--star", "s2", "--s3-endpoint", srv.URL, "--s3-path-style", "--bucket", bucket,
		"--s3-max-attempts", "6", "--denorm-output-cap-mib", "1", "--denorm-chunk-target-kib", "64"}, common...)
	procs := map[string]*proc{
		"s1a": startServe(t, "s1a", dbURL, s1Flags...), "s1b": startServe(t, "s1b", dbURL, s1Flags...),
		"s2a": startServe(t, "s2a", dbURL, s2Flags...), "s2b": startServe(t, "s2b", dbURL, s2Flags...),
	}
	targets := []scrapeTarget{{"s1", procs["s1a"].addr}, {"s1", procs["s1b"].addr}, {"s2", procs["s2a"].addr}, {"s2", procs["s2b"].addr}}
	prom := startPrometheus(t, targets)
	prom.mayBeAbsent = isFleetMetric // no fleet member runs here

	// novasim writes to both stars for the whole test.
	writeCtx, stopWriters := context.WithCancel(ctx)
	var writers sync.WaitGroup
	t.Cleanup(func() { stopWriters(); writers.Wait() })
	write := func(name string, storage ...string) {
		args := append([]string{"write", "--star", name, "--database-url", dbURL, "--rate", "64KiB", "--flight-interval", "300ms",
			"--flight-bytes", "32KiB", "--progress", "none"}, storage...)
		cmd := exec.CommandContext(writeCtx, novasimBinary(t), args...)
		out := &lineLog{t: t, name: "novasim " + name, addr: make(chan string, 1)}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		writers.Go(func() { _ = cmd.Wait(); out.close() })
	}
	write("s1", "--fs-root", root)
	write("s2", "--s3-endpoint", s3e.Endpoint, "--s3-path-style", "--bucket", bucket)

	leaderOf := func(star string) *proc {
		t.Helper()
		var l catalog.Lease
		eventually(t, 15*time.Second, star+" has a leader", func() bool {
			var err error
			l, err = currentLeaseOf(ctx, db, star)
			return err == nil && procs[l.Holder] != nil
		})
		return procs[l.Holder]
	}
	// Warm up: both stars settle, trim and reap; Prometheus has a few
	// scrapes of everything; the injected 503s have been counted.
	eventually(t, 90*time.Second, "both stars settle, reap, and Prometheus sees it", func() bool {
		ok := true
		for _, star := range []string{"s1", "s2"} {
			f := leaderOf(star).metrics()
			ok = ok && value(f, "nova_auditor_settled_objects_total", map[string]string{"star": star, "outcome": "published"}) > 0 &&
				value(f, "nova_auditor_slots_reaped_total", nil) > 0
		}
		return ok && fp.slowDowns.Load() > 0 &&
			len(prom.mustQuery(`sum by (star) (rate(nova_auditor_slots_reaped_total[15s])) > 0`)) == 2 &&
			len(prom.mustQuery(`nova_auditor_s3_requests_total{status="503"}`)) > 0 &&
			len(prom.mustQuery(`up{job="nova-auditor"} == 1`)) == 4
	})
	time.Sleep(3 * time.Second) // a few more scrapes past the first settled objects, for the rates

	// Every expression of the dashboard and the alerts, healthy.
	var table []string
	bad := 0
	if got := prom.byStar(`count by (star) (` + starVariable(t) + `)`); len(got) != 2 || got["s1"] == 0 || got["s2"] == 0 {
		t.Errorf("the dashboard's star variable selects %v, want s1 and s2", got)
	}
	for _, tg := range loadDashboard(t) {
		if tg.Row == fleetRow {
			continue
		}
		expr := grafanaVars(tg.Expr)
		c := prom.checkExpr(expr, tg.Legend, true)
		table = append(table, fmt.Sprintf("| dashboard | %s | `%s` | %d series |", tg.Panel, expr, c.Series))
		for _, e := range c.Errs {
			t.Errorf("dashboard panel %q: %s: %s", tg.Panel, expr, e)
			bad++
		}
	}
	// The annotations (deploys, restarts, halts) may rightly return
	// nothing while all is well; their parts and labels are checked.
	for _, a := range loadAnnotations(t) {
		expr := grafanaVars(a.Expr)
		c := prom.checkExpr(expr, a.Text, false)
		table = append(table, fmt.Sprintf("| annotation | %s | `%s` | %d series |", a.Name, expr, c.Series))
		for _, e := range c.Errs {
			t.Errorf("dashboard annotation %q: %s: %s", a.Name, expr, e)
			bad++
		}
	}
	rules := loadAlertRules(t)
	for _, r := range rules {
		c := prom.checkExpr(r.Expr, "", false)
		table = append(table, fmt.Sprintf("| alert (healthy) | %s | `%s` | %d series, %d sub-expressions with series |",
			r.Alert, strings.Join(strings.Fields(r.Expr), " "), c.Series, c.Parts))
		for _, e := range c.Errs {
			t.Errorf("alert %s: %s", r.Alert, e)
			bad++
		}
	}
	expr := map[string]string{}
	for _, r := range rules {
		expr[r.Alert] = r.Expr
	}
	quiet := func(state string, alerts ...string) {
		t.Helper()
		for _, a := range alerts {
			if got := prom.byStar(expr[a]); len(got) != 0 {
				t.Errorf("%s: %s returns %v", state, a, got)
			}
		}
	}
	quiet("healthy", "NovaAuditorHalted", "NovaAuditorNoLeader", "NovaAuditorStarDown", "NovaAuditorStarGone", "NovaAuditorAbsent",
		"NovaAuditorTwoLeaders", "NovaAuditorQuarantine", "NovaAuditorTrimHeldByQuarantine", "NovaAuditorGaugesStale",
		"NovaAuditorNoSuccessfulCycle", "NovaAuditorLeaseFlapping", "NovaAuditorS3Errors", "NovaAuditorPausedLong",
		"NovaAuditorErasurePending", "NovaAuditorFleetStarUnowned", "NovaAuditorFleetStarNoProgress", "NovaAuditorFleetImbalance",
		"NovaAuditorFleetMoveRate", "NovaAuditorFleetMemberBlind")
	// No phantom series: each star reports its own class only.
	if got := prom.mustQuery(`count by (star, class) (nova_auditor_due_streams)`); len(got) != 2 {
		t.Errorf("class series: %v, want one class per star", got)
	}
	// Nor S3 series for the file-backed star.
	if got := prom.mustQuery(`count by (__name__) ({__name__=~"nova_auditor_s3_.*", star="s1"})`); len(got) != 0 {
		t.Errorf("the file-backed star reports S3 series: %v", got)
	}

	// promtool check metrics on a real scrape of a leader.
	_, scrape := leaderOf("s2").get("/metrics")
	lint := exec.Command(promtool, "check", "metrics")
	lint.Stdin = strings.NewReader(scrape)
	if out, err := lint.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	record := func(state, alert string) map[string]float64 {
		v := prom.byStar(expr[alert])
		table = append(table, fmt.Sprintf("| alert (%s) | %s | | %v |", state, alert, v))
		return v
	}

	// Quarantine: pause s1, let novasim write, corrupt a slot that
	// unsettled refs name, resume. The streams with refs in it are
	// quarantined and, once the others have settled, hold trim.
	args := []string{"--star", "s1", "--database-url", dbURL}
	if code, _, errs := runCLI(t, append([]string{"pause"}, args...)...); code != 0 {
		t.Fatalf("pause: %s", errs)
	}
	eventually(t, 10*time.Second, "PausedLong's expression shows the pause", func() bool {
		return prom.byStar(expr["NovaAuditorPausedLong"])["s1"] == 1
	})
	record("s1 paused", "NovaAuditorPausedLong")
	slotKey, original := corruptNewestSlot(t, ctx, dbURL, root, "s1")
	if code, _, errs := runCLI(t, append([]string{"resume"}, args...)...); code != 0 {
		t.Fatalf("resume: %s", errs)
	}
	eventually(t, 60*time.Second, "the corrupt slot's streams are quarantined and hold trim", func() bool {
		return prom.byStar(expr["NovaAuditorQuarantine"])["s1"] >= 1 && prom.byStar(expr["NovaAuditorTrimHeldByQuarantine"])["s1"] == 1
	})
	record("s1 quarantined", "NovaAuditorQuarantine")
	record("s1 quarantined", "NovaAuditorTrimHeldByQuarantine")
	quiet("s1 quarantined", "NovaAuditorHalted", "NovaAuditorNoLeader")

	// An erasure of a quarantined stream's first record: recorded with a
	// warning, it stays pending (no rewrite runs on a quarantined stream),
	// and once it is older than s1's 3s bound NovaAuditorErasurePending
	// names s1 (and not s2, whose bound is the default 24h). The erasure
	// panels and series are evaluated with it pending.
	q, err := db.Settle().Quarantined(ctx, "s1")
	if err != nil || len(q) == 0 || q[0].Stream == nil {
		t.Fatalf("quarantine %v %v", q, err)
	}
	erased := q[0].Stream.String()
	if code, out, errs := runCLI(t, append([]string{"erase", "--stream", erased, "--from", "0", "--count", "1"}, args...)...); code != 0 ||
		!strings.Contains(errs, "quarantined") || !strings.Contains(out, "recorded") {
		t.Fatalf("erase: %d %q %q", code, out, errs)
	}
	eventually(t, 30*time.Second, "ErasurePending's expression names s1", func() bool {
		return prom.byStar(expr["NovaAuditorErasurePending"])["s1"] > 3 &&
			prom.byStar(`max by (star) (nova_auditor_erasures_pending_quarantined)`)["s1"] == 1
	})
	if got := record("s1 erasure pending", "NovaAuditorErasurePending"); len(got) != 1 {
		t.Errorf("ErasurePending names %v, want s1 only", got)
	}
	for _, tg := range loadDashboard(t) {
		if tg.Row == fleetRow || !strings.Contains(tg.Expr, "erasure") && !strings.Contains(tg.Expr, "tombstoned") && !strings.Contains(tg.Expr, "rewritten") {
			continue
		}
		e := grafanaVars(tg.Expr)
		c := prom.checkExpr(e, tg.Legend, true)
		table = append(table, fmt.Sprintf("| dashboard (s1 erasure pending) | %s | `%s` | %v |", tg.Panel, e, prom.byStar(e)))
		for _, msg := range c.Errs {
			t.Errorf("dashboard panel %q with an erasure pending: %s: %s", tg.Panel, e, msg)
		}
	}
	if v := prom.byStar(`max by (star) (nova_auditor_erasures_pending)`); v["s1"] != 1 || v["s2"] != 0 {
		t.Errorf("pending erasures by star %v, want s1 1, s2 0", v)
	}
	if v := prom.byStar(`max by (star) (nova_auditor_erasure_pending_bound_seconds)`); v["s1"] != 3 || v["s2"] != 86400 {
		t.Errorf("erasure bounds by star %v, want s1 3, s2 86400", v)
	}
	if code, out, _ := runCLI(t, append([]string{"status"}, args...)...); code != 0 || !strings.Contains(out, "1 pending, 1 on quarantined streams") ||
		!strings.Contains(out, erased) || !strings.Contains(out, "release: the stream is quarantined") {
		t.Errorf("status with the erasure pending: %d\n%s", code, out)
	}

	// A stolen lease: another holder takes s1's lease in the database. The
	// leader notices, counts the loss and drops its leader-only gauges; the
	// standby cannot take the lease: no leader.
	former := leaderOf("s1")
	stealLease(t, ctx, dbURL, "s1", "thief", time.Hour)
	eventually(t, 20*time.Second, "s1 has no leader and its trim hold is not reported", func() bool {
		return prom.byStar(expr["NovaAuditorNoLeader"])["s1"] == 1 &&
			len(prom.byStar(expr["NovaAuditorTrimHeldByQuarantine"])) == 0 &&
			prom.byStar(`sum by (star) (increase(nova_auditor_lease_losses_total[5m]))`)["s1"] >= 1
	})
	record("s1 lease stolen", "NovaAuditorNoLeader")
	record("s1 lease stolen", "NovaAuditorTrimHeldByQuarantine")
	table = append(table, fmt.Sprintf("| alert part (s1 lease stolen) | lease losses | `sum by (star) (increase(nova_auditor_lease_losses_total[5m]))` | %v |",
		prom.byStar(`sum by (star) (increase(nova_auditor_lease_losses_total[5m]))`)))
	f := former.metrics()
	if v := value(f, "nova_auditor_lease_losses_total", nil); v != 1 {
		t.Errorf("the former leader counts %v lease losses, want 1", v)
	}
	for _, g := range []string{"nova_auditor_trim_held_by_quarantine", "nova_auditor_trim_quarantine_held_slot_seq", "nova_auditor_trim_fence_wait_seconds"} {
		if v := value(f, g, nil); v != 0 {
			t.Errorf("the former leader still reports %s %v", g, v)
		}
	}
	stealLease(t, ctx, dbURL, "s1", "thief", -time.Second) // the thief's lease expires
	eventually(t, 30*time.Second, "s1 leads again, and the quarantine holds trim again", func() bool {
		return len(prom.byStar(expr["NovaAuditorNoLeader"])) == 0 && prom.byStar(expr["NovaAuditorTrimHeldByQuarantine"])["s1"] == 1
	})

	// Release: the slot is repaired (the writer re-wrote it), the operator
	// releases the streams; they settle and the alerts clear.
	if err := os.WriteFile(filepath.Join(root, "nova", slotKey), original, 0o644); err != nil {
		t.Fatal(err)
	}
	q, err = db.Settle().Quarantined(ctx, "s1")
	if err != nil || len(q) == 0 {
		t.Fatalf("quarantine %v %v", q, err)
	}
	for _, row := range q {
		if row.Stream == nil {
			continue
		}
		if code, out, errs := runCLI(t, append([]string{"release", "--stream", row.Stream.String()}, args...)...); code != 0 {
			t.Fatalf("release: %d %s %s", code, out, errs)
		}
	}
	eventually(t, 60*time.Second, "the quarantine alerts clear after the release", func() bool {
		return len(prom.byStar(expr["NovaAuditorQuarantine"])) == 0 && len(prom.byStar(expr["NovaAuditorTrimHeldByQuarantine"])) == 0 &&
			len(prom.mustQuery(`nova_auditor_trim_held_by_quarantine{star="s1"} != 0`)) == 0
	})
	record("s1 released", "NovaAuditorQuarantine")
	record("s1 released", "NovaAuditorTrimHeldByQuarantine")

	// Every instance of s1 stopped: the per-star absence fires for s1
	// only; the global one does not (s2 is scraped).
	procs["s1a"].signal(syscall.SIGTERM)
	procs["s1b"].signal(syscall.SIGTERM)
	procs["s1a"].wait(15 * time.Second)
	procs["s1b"].wait(15 * time.Second)
	eventually(t, 15*time.Second, "StarDown's expression names s1", func() bool {
		v, ok := prom.byStar(expr["NovaAuditorStarDown"])["s1"]
		return ok && v == 0
	})
	if got := record("s1 stopped", "NovaAuditorStarDown"); len(got) != 1 {
		t.Errorf("StarDown names %v, want s1 only", got)
	}
	quiet("s1 stopped", "NovaAuditorAbsent", "NovaAuditorStarGone")
	record("s1 stopped", "NovaAuditorAbsent")

	// s1's targets are removed from service discovery (its Deployment is
	// gone): StarGone names it.
	prom.setTargets(targets[2:])
	eventually(t, 20*time.Second, "StarGone's expression names s1", func() bool {
		_, ok := prom.byStar(expr["NovaAuditorStarGone"])["s1"]
		return ok
	})
	record("s1 targets gone", "NovaAuditorStarGone")

	t.Logf("expressions and what they returned (%d problems):\n| kind | name | expression | result |\n|---|---|---|---|\n%s",
		bad, strings.Join(table, "\n"))
}

// currentLeaseOf reads a star's live lease.
func currentLeaseOf(ctx context.Context, db *catalog.DB, star string) (catalog.Lease, error) {
	l, live, err := db.Leases().CurrentLease(ctx, star)
	if err == nil && !live {
		err = fmt.Errorf("no live lease of %s", star)
	}
	return l, err
}

// unsettledSlotKeys lists the first slots of a star's span refs, oldest
// first.
func unsettledSlotKeys(ctx context.Context, dbURL, star string) ([]string, error) {
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, `SELECT DISTINCT slot_epochs[1], slot_seqs[1] FROM nova.span_refs WHERE star = $1 ORDER BY 1, 2`, star)
	if err != nil {
		return nil, err
	}
	var keys []string
	var e, q int64
	_, err = pgx.ForEachRow(rows, []any{&e, &q}, func() error {
		keys = append(keys, bundlefmt.SlotKey(star, uint64(e), uint64(q)))
		return nil
	})
	return keys, err
}

// stealLease gives a star's lease to holder for d (negative: expired) with
// a higher token, as another auditor that took it over would.
func stealLease(t *testing.T, ctx context.Context, dbURL, star, holder string, d time.Duration) {
	t.Helper()
	c, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `UPDATE nova.auditor_leases SET holder = $2, token = token + 1,
		expires_at = now() + make_interval(secs => $3) WHERE star = $1`, star, holder, d.Seconds()); err != nil {
		t.Fatal(err)
	}
}

// corruptNewestSlot waits until unsettled refs of star name a slot, then
// overwrites the slot's trailer with zeros; it returns the key and the
// original bytes.
func corruptNewestSlot(t *testing.T, ctx context.Context, dbURL, root, star string) (string, []byte) {
	t.Helper()
	var key string
	eventually(t, 30*time.Second, "an unsettled ref names a slot written after the pause", func() bool {
		keys, err := unsettledSlotKeys(ctx, dbURL, star)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			return false
		}
		key = keys[len(keys)-1]
		return true
	})
	path := filepath.Join(root, "nova", key)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), b...)
	for i := max(0, len(bad)-64); i < len(bad); i++ {
		bad[i] = 0
	}
	if err := os.WriteFile(path, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("corrupted slot %s (%d bytes): its last 64 bytes zeroed", key, len(b))
	return key, b
}
