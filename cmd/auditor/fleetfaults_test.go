package main

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// The fleet under bad input and a database that goes away:
//   - a --stars that does not parse is a configuration error (exit 2,
//     naming stars);
//   - a --stars that selects no star starts, says so in a warning, leads
//     nothing and takes nothing from the others;
//   - the database gone for longer than the lease ttl under two members (a
//     proxy cuts every connection and refuses new ones, as a restart does):
//     neither member exits or livelocks, and once it is back every star is
//     led again and has an ok cycle after the outage.
func TestFleetBadInputAndDatabaseRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("serves a fleet through a database outage")
	}
	e := newFleetEnv(t, 12)

	code, _, errs := runCLI(t, "serve", "--stars", "f0[", "--database-url", e.url, "--fs-root", e.root, "--data-dir", t.TempDir())
	if code != exitUsage || !strings.Contains(errs, "stars") {
		t.Fatalf("serve --stars 'f0[': exit %d %q, want %d naming stars", code, errs, exitUsage)
	}

	proxy := newProxy(t, dbHostPort(t, e.url))
	via := proxy.via(t, e.url)
	start := func(name, stars string) *proc {
		return startServeWith(t, name, via, serveOptions{fleet: true, quiet: true},
			"--stars", stars, "--fs-root", e.root, "--data-dir", t.TempDir(),
			"--lease-ttl", fleetTTL.String(), "--lease-renew", fleetTick.String(), "--schedule", "@every 2s",
			"--fleet-grace", fleetGrace.String(), "--fleet-stable-for", "3s", "--start-checks=false", "--log-level", "info")
	}
	typo := start("typo", "g*")
	eventually(t, 30*time.Second, "the typo member's warning", func() bool { return typo.out.contains("selects no star") })
	m1, m2 := start("m1", "all"), start("m2", "all")
	ledAfter := func(since time.Time) bool {
		var led, ok int
		if err := e.db.Pool().QueryRow(e.ctx, `SELECT
			(SELECT count(*) FROM nova.auditor_leases WHERE expires_at > now() AND holder IN ('m1', 'm2')),
			(SELECT count(DISTINCT star) FROM nova.auditor_runs WHERE outcome = 'ok' AND ended_at > $1)`, since).Scan(&led, &ok); err != nil {
			t.Fatal(err)
		}
		return led == len(e.stars) && ok == len(e.stars)
	}
	eventually(t, 2*time.Minute, "every star led by m1 or m2 with an ok cycle", func() bool { return ledAfter(e.started) })
	if n := typo.processGauge("nova_auditor_fleet_stars_owned"); n != 0 {
		t.Fatalf("the typo member leads %v stars", n)
	}

	proxy.cut()
	time.Sleep(2 * fleetTTL) // every lease expires meanwhile
	back := time.Now()
	proxy.restore()
	took := eventually(t, 2*time.Minute, "every star led again with an ok cycle after the outage", func() bool { return ledAfter(back) })
	t.Logf("every star led again with an ok cycle %s after the database came back", took.Round(100*time.Millisecond))
	for _, p := range []*proc{m1, m2, typo} {
		if p.exited() {
			t.Fatalf("%s exited during the outage: %v", p.name, p.err)
		}
	}
	for _, p := range []*proc{m1, m2, typo} {
		p.signal(syscall.SIGTERM)
		if code := p.wait(60 * time.Second); code != 0 {
			t.Errorf("%s drained with exit %d", p.name, code)
		}
	}
}
