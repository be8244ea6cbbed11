package main

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/fleet"
)

// fleetMember stands for one `auditor serve --stars` process as Prometheus
// scrapes it: the fleet's series, registered once (fleet.NewMetrics), and,
// for each star it leads, the star's daemon series in a registry of the
// star's own (labelled star), created when it claims the star and dropped
// when it gives the star up; /metrics serves them together.
type fleetMember struct {
	t     *testing.T
	m     *fleet.Metrics
	reg   *prometheus.Registry
	srv   *httptest.Server
	mu    sync.Mutex
	stars map[string]*prometheus.Registry
}

func newFleetMember(t *testing.T) *fleetMember {
	t.Helper()
	f := &fleetMember{t: t, reg: prometheus.NewRegistry(), stars: map[string]*prometheus.Registry{}}
	m, err := fleet.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	f.srv = httptest.NewServer(f)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fleetMember) addr() string { return strings.TrimPrefix(f.srv.URL, "http://") }

func (f *fleetMember) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	g := prometheus.Gatherers{f.reg}
	for _, reg := range f.stars {
		g = append(g, reg)
	}
	f.mu.Unlock()
	promhttp.HandlerFor(g, promhttp.HandlerOpts{}).ServeHTTP(w, r)
}

// claim makes the member the star's leader, for why it left its last owner.
func (f *fleetMember) claim(star, reason string) {
	f.t.Helper()
	reg := prometheus.NewRegistry()
	dm, err := daemon.NewMetrics(prometheus.WrapRegistererWith(prometheus.Labels{"star": star}, reg), "test")
	if err != nil {
		f.t.Fatal(err)
	}
	dm.Leader.Set(1)
	f.mu.Lock()
	f.stars[star] = reg
	f.m.Owned.Set(float64(len(f.stars)))
	f.mu.Unlock()
	f.m.Progress.WithLabelValues(star).Set(2)
	f.m.Moves.WithLabelValues(reason).Inc()
}

func (f *fleetMember) owned() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for s := range f.stars {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// readFleet sets what each live member reads of the fleet in the
// metastore at its tick: the members, the stars, the cap, the imbalance,
// each star's unowned time (unowned: the stars nobody leads, with how
// long).
func readFleet(live []*fleetMember, stars []string, unowned map[string]float64) {
	most, fewest := 0, math.MaxInt
	for _, f := range live {
		n := len(f.owned())
		most, fewest = max(most, n), min(fewest, n)
	}
	for _, f := range live {
		f.m.Members.Set(float64(len(live)))
		f.m.Stars.Set(float64(len(stars)))
		f.m.Cap.Set(math.Ceil(float64(len(stars)) / float64(len(live))))
		f.m.Imbalance.Set(float64(most - fewest))
		f.m.MoveBudget.Set(10)
		f.m.CycleSlots.Set(2)
		f.m.CyclesHeld.Set(1)
		f.m.Ticks.WithLabelValues("ok").Inc()
		for _, s := range stars {
			f.m.Unowned.WithLabelValues(s).Set(unowned[s])
		}
	}
}

// TestFleetMonitoringAgainstPrometheus holds the fleet's panels and alert
// rules to a real Prometheus with the reference scrape configuration
// (deploy/prometheus/scrape.yaml: the members are the job
// nova-auditor-fleet, without star on their targets). Three members lead
// six stars and export the series fleet.NewMetrics and daemon.NewMetrics
// register, as `auditor serve --stars` does; their values are set by the
// test, which plays the members' loops. Every expression of the dashboard's
// Fleet row and of the rules' fleet group returns series and carries the
// labels it groups, matches and names by; the per-star rules made for
// single-star instances stay silent, and the dashboard's star variable
// lists the fleet's stars. Then the states the fleet's rules are for:
// a member gone (its stars unowned until the others claim them), a star
// without progress, an imbalance, balance moves above the budget.
func TestFleetMonitoringAgainstPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("runs Prometheus")
	}
	promTool(t, "prometheus")
	stars := []string{"s1", "s2", "s3", "s4", "s5", "s6"}
	members := []*fleetMember{newFleetMember(t), newFleetMember(t), newFleetMember(t)}
	for i, s := range stars {
		members[i%len(members)].claim(s, "new")
	}
	readFleet(members, stars, nil)
	var addrs []string
	for _, f := range members {
		addrs = append(addrs, f.addr())
	}
	prom := startPrometheus(t, nil, addrs...)
	eventually(t, 30*time.Second, "Prometheus scrapes the three members", func() bool {
		return len(prom.mustQuery(`up{job="nova-auditor-fleet"} == 1`)) == 3 &&
			len(prom.mustQuery(`nova_auditor_fleet_members`)) == 3
	})
	time.Sleep(3 * time.Second) // a few scrapes, for the rates

	rules := loadAlertRules(t)
	expr := map[string]string{}
	var fleetAlerts []string
	for _, r := range rules {
		expr[r.Alert] = r.Expr
		if r.Group == fleetRules {
			fleetAlerts = append(fleetAlerts, r.Alert)
		}
	}
	if len(fleetAlerts) == 0 {
		t.Fatalf("alerts.yaml has no group %s", fleetRules)
	}
	var table []string
	quiet := func(state string, alerts ...string) {
		t.Helper()
		for _, a := range alerts {
			if got := prom.byStar(expr[a]); len(got) != 0 {
				t.Errorf("%s: %s returns %v", state, a, got)
			}
		}
	}
	record := func(state, alert string) map[string]float64 {
		v := prom.byStar(expr[alert])
		table = append(table, fmt.Sprintf("| alert (%s) | %s | | %v |", state, alert, v))
		return v
	}
	fires := func(state, alert string, want ...string) {
		t.Helper()
		eventually(t, 20*time.Second, state+": "+alert+" returns "+strings.Join(want, ", "), func() bool {
			got := prom.byStar(expr[alert])
			for _, s := range want {
				if _, ok := got[s]; !ok {
					return false
				}
			}
			return len(got) == len(want)
		})
		record(state, alert)
	}

	// The fixture is a fleet as Prometheus sees one: every star's daemon
	// series once, on its leader, without a star on the targets.
	if got := prom.byStar(`sum by (star) (nova_auditor_leader)`); len(got) != len(stars) || slices.ContainsFunc(stars, func(s string) bool { return got[s] != 1 }) {
		t.Fatalf("leaders by star %v, want one for each of %v", got, stars)
	}
	if got := prom.mustQuery(`up{job="nova-auditor-fleet", star!=""}`); len(got) != 0 {
		t.Errorf("fleet targets carry a star: %v", got)
	}
	if got := prom.byStar(`count by (star) (` + starVariable(t) + `)`); len(got) != len(stars) {
		t.Errorf("the dashboard's star variable selects %v, want %v", got, stars)
	}

	// Every expression of the Fleet row and of the fleet's rules, healthy.
	bad, panels := 0, 0
	for _, tg := range loadDashboard(t) {
		if tg.Row != fleetRow {
			continue
		}
		panels++
		e := grafanaVars(tg.Expr)
		c := prom.checkExpr(e, tg.Legend, true)
		table = append(table, fmt.Sprintf("| dashboard | %s | `%s` | %d series |", tg.Panel, e, c.Series))
		for _, msg := range c.Errs {
			t.Errorf("dashboard panel %q: %s: %s", tg.Panel, e, msg)
			bad++
		}
	}
	if panels == 0 {
		t.Fatalf("the dashboard has no row %q", fleetRow)
	}
	for _, r := range rules {
		if r.Group != fleetRules {
			continue
		}
		c := prom.checkExpr(r.Expr, "", false)
		table = append(table, fmt.Sprintf("| alert (healthy) | %s | `%s` | %d series, %d sub-expressions with series |",
			r.Alert, strings.Join(strings.Fields(r.Expr), " "), c.Series, c.Parts))
		for _, msg := range c.Errs {
			t.Errorf("alert %s: %s", r.Alert, msg)
			bad++
		}
	}
	singleStar := []string{"NovaAuditorNoLeader", "NovaAuditorStarDown", "NovaAuditorStarGone", "NovaAuditorAbsent", "NovaAuditorTwoLeaders"}
	quiet("healthy", fleetAlerts...)
	quiet("healthy", singleStar...)

	unownedStars := func() float64 {
		t.Helper()
		for _, tg := range loadDashboard(t) {
			if tg.Row == fleetRow && tg.Panel == "Unowned stars" {
				if got := prom.mustQuery(grafanaVars(tg.Expr)); len(got) == 1 {
					return got[0].Value
				}
				return -1
			}
		}
		t.Fatal("the Fleet row has no panel \"Unowned stars\"")
		return 0
	}
	if n := unownedStars(); n != 0 {
		t.Errorf("healthy: the Unowned stars panel shows %v", n)
	}

	// A member is gone (killed: its scrapes fail). The others read its
	// stars unowned for 150 s (their liveness rule has not run yet):
	// FleetStarUnowned names them; the single-star rules stay silent.
	gone := members[2]
	lost := gone.owned()
	gone.srv.Close()
	live := members[:2]
	unowned := map[string]float64{}
	for _, s := range lost {
		unowned[s] = 150
	}
	readFleet(live, stars, unowned)
	fires("member m3 gone", "NovaAuditorFleetStarUnowned", lost...)
	eventually(t, 10*time.Second, "the gone member's up is 0", func() bool {
		return len(prom.mustQuery(`up{job="nova-auditor-fleet"} == 0`)) == 1
	})
	if n := unownedStars(); n != float64(len(lost)) {
		t.Errorf("member gone: the Unowned stars panel shows %v, want %d", n, len(lost))
	}
	quiet("member m3 gone", singleStar...)
	record("member m3 gone", "NovaAuditorAbsent")

	// The others claim its stars (lost leases): nothing unowned.
	for i, s := range lost {
		live[i%len(live)].claim(s, "lost")
	}
	readFleet(live, stars, nil)
	eventually(t, 20*time.Second, "the lost stars are led again", func() bool {
		return len(prom.byStar(expr["NovaAuditorFleetStarUnowned"])) == 0 &&
			len(prom.byStar(`sum by (star) (nova_auditor_leader) == 1`)) == len(stars)
	})
	quiet("stars claimed", fleetAlerts...)
	quiet("stars claimed", singleStar...)

	// A led star's cycle loop makes no progress.
	members[0].m.Progress.WithLabelValues("s1").Set(1000)
	fires("s1 stuck", "NovaAuditorFleetStarNoProgress", "s1")
	members[0].m.Progress.WithLabelValues("s1").Set(3)

	// The members lead stars 3 apart.
	members[0].m.Imbalance.Set(3)
	fires("imbalance 3", "NovaAuditorFleetImbalance", "")
	members[0].m.Imbalance.Set(0)

	// Balance moves above the budget (10 per window).
	quiet("before the balance moves", "NovaAuditorFleetMoveRate")
	members[1].m.Releases.WithLabelValues("balance").Add(20)
	fires("20 balance moves", "NovaAuditorFleetMoveRate", "")

	t.Logf("expressions and what they returned (%d problems):\n| kind | name | expression | result |\n|---|---|---|---|\n%s",
		bad, strings.Join(table, "\n"))
}

// TestFleetMonitoringOfRealMembers: two real `auditor serve --stars all`
// members over four stars, scraped by a real Prometheus as the job
// nova-auditor-fleet: every expression of the dashboard's Fleet row
// returns series and carries its labels, every fleet rule evaluates, and
// none of them, nor the single-star rules, fires on a healthy fleet. (The
// failure states are driven by TestFleetMonitoringAgainstPrometheus, whose
// members are played by the test.)
func TestFleetMonitoringOfRealMembers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes and Prometheus")
	}
	promTool(t, "prometheus")
	e := newFleetEnv(t, 4)
	stopWriter := e.startWriter()
	defer stopWriter()
	a, b := e.start("a"), e.start("b")
	e.balanced(60 * time.Second)
	prom := startPrometheus(t, nil, a.addr, b.addr)
	eventually(t, 60*time.Second, "Prometheus scrapes both members, each leading stars that cycled", func() bool {
		return len(prom.mustQuery(`up{job="nova-auditor-fleet"} == 1`)) == 2 &&
			len(prom.mustQuery(`nova_auditor_fleet_stars_owned > 0`)) == 2 &&
			len(prom.mustQuery(`count by (star) (nova_auditor_cycles_total{outcome="ok"})`)) == 4
	})
	time.Sleep(5 * time.Second) // a few scrapes, for the rates
	panels := 0
	for _, tg := range loadDashboard(t) {
		if tg.Row != fleetRow {
			continue
		}
		panels++
		ex := grafanaVars(tg.Expr)
		c := prom.checkExpr(ex, tg.Legend, true)
		for _, msg := range c.Errs {
			t.Errorf("dashboard panel %q: %s: %s", tg.Panel, ex, msg)
		}
	}
	if panels == 0 {
		t.Fatalf("the dashboard has no row %q", fleetRow)
	}
	for _, r := range loadAlertRules(t) {
		switch {
		case r.Group == fleetRules:
			c := prom.checkExpr(r.Expr, "", false)
			for _, msg := range c.Errs {
				t.Errorf("alert %s: %s", r.Alert, msg)
			}
			fallthrough
		case slices.Contains([]string{"NovaAuditorNoLeader", "NovaAuditorStarDown", "NovaAuditorStarGone", "NovaAuditorAbsent", "NovaAuditorTwoLeaders"}, r.Alert):
			if got := prom.byStar(r.Expr); len(got) != 0 {
				t.Errorf("healthy fleet: %s returns %v", r.Alert, got)
			}
		}
	}
	if got := prom.byStar(`sum by (star) (nova_auditor_leader)`); len(got) != 4 {
		t.Errorf("leaders by star over the real members: %v, want the 4 stars once each", got)
	}
}
