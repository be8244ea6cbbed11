package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// Helpers for the tests that run a real Prometheus (Debian's prometheus
// package, which scripts/services.sh installs) against real auditors, and
// that evaluate the shipped dashboard and alert rules through its HTTP API.

// promTool finds a Prometheus binary (prometheus, promtool). Missing, the
// test fails when services are required (make test installs them) and is
// skipped otherwise.
func promTool(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("NOVA_TEST_REQUIRE_SERVICES") != "" {
			t.Fatalf("%s is not installed (scripts/services.sh installs Debian's prometheus package): %v", name, err)
		}
		t.Skipf("%s is not installed: %v", name, err)
	}
	return path
}

// deployFile is a file of deploy/, relative to this package.
func deployFile(rel string) string { return filepath.Join("..", "..", "deploy", rel) }

// fleetRules is the group of alerts.yaml that watches the fleet's stars
// (auditor serve --stars); its rules read only the fleet members' series.
const fleetRules = "nova-auditor-fleet"

// alertRule is one rule of deploy/prometheus/alerts.yaml.
type alertRule struct {
	Group       string            `yaml:"-"` // the group's name
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func loadAlertRules(t *testing.T) []alertRule {
	t.Helper()
	b, err := os.ReadFile(deployFile("prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Groups []struct {
			Name  string      `yaml:"name"`
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var rules []alertRule
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			r.Group = g.Name
			rules = append(rules, r)
		}
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
	return rules
}

// fleetRow is the dashboard's row of the fleet's panels (auditor serve
// --stars): they read only the fleet members' series.
const fleetRow = "Fleet"

// panelTarget is one query of the Grafana dashboard.
type panelTarget struct {
	Row    string // the title of the row the panel is in
	Panel  string
	Expr   string
	Legend string
}

func loadDashboard(t *testing.T) []panelTarget {
	t.Helper()
	b, err := os.ReadFile(deployFile("grafana/auditor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("auditor.json: %v", err)
	}
	var out []panelTarget
	row := ""
	for _, p := range doc.Panels {
		if p.Type == "row" {
			row = p.Title
		}
		for _, tg := range p.Targets {
			out = append(out, panelTarget{Row: row, Panel: p.Title, Expr: tg.Expr, Legend: tg.Legend})
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// grafanaVars replaces the dashboard's variables as Grafana does with
// All selected: every cluster, namespace and star (the variables' allValue
// .*), and a rate interval of a few scrapes (the test scrapes every
// second).
func grafanaVars(expr string) string {
	return strings.NewReplacer(`"$cluster"`, `".*"`, `"$namespace"`, `".*"`, `"$star"`, `".*"`, "$__rate_interval", "15s").Replace(expr)
}

// dashboardScope names the dashboard's template variables that scope
// every query to a Prometheus deployment: each selector of each panel and
// annotation matches label=~"$label".
var dashboardScope = map[string]bool{"cluster": true, "namespace": true}

// dashboardAnnotation is one Prometheus annotation query of the dashboard
// (deploys, restarts, halts).
type dashboardAnnotation struct {
	Name string `json:"name"`
	Expr string `json:"expr"`
	Text string `json:"textFormat"`
}

// loadAnnotations lists the dashboard's annotation queries (Grafana's
// built-in annotation, which has no expression, left out).
func loadAnnotations(t *testing.T) []dashboardAnnotation {
	t.Helper()
	b, err := os.ReadFile(deployFile("grafana/auditor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Annotations struct {
			List []dashboardAnnotation `json:"list"`
		} `json:"annotations"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("auditor.json: %v", err)
	}
	var out []dashboardAnnotation
	for _, a := range doc.Annotations.List {
		if a.Expr != "" {
			out = append(out, a)
		}
	}
	return out
}

// starVariable is the selector the dashboard's star variable takes its
// values from (label_values(<selector>, star)).
func starVariable(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(deployFile("grafana/auditor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"` // a string for the data source variable
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("auditor.json: %v", err)
	}
	for _, v := range doc.Templating.List {
		if v.Name != "star" {
			continue
		}
		var query struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &query); err != nil {
			t.Fatalf("the star variable's query: %v", err)
		}
		q, ok := strings.CutPrefix(query.Query, "label_values(")
		sel, ok2 := strings.CutSuffix(q, ", star)")
		if !ok || !ok2 {
			t.Fatalf("the star variable's query %q is not label_values(<selector>, star)", query.Query)
		}
		return grafanaVars(sel)
	}
	t.Fatal("the dashboard has no star variable")
	return ""
}

// isFleetMetric reports whether a metric is one of a fleet member's own
// series (fleet/metrics.go), which single-star instances do not export.
func isFleetMetric(name string) bool { return strings.HasPrefix(name, "nova_auditor_fleet_") }

// promServer is a Prometheus process on a loopback port.
type promServer struct {
	t            *testing.T
	url          string
	targets      string // the file_sd file of the job nova-auditor
	fleetTargets string // the file_sd file of the job nova-auditor-fleet
	cmd          *exec.Cmd
	// mayBeAbsent names the metrics that checkExpr lets have no series
	// (nil: none): the series of the other mode, which an expression
	// made for both reads where they exist.
	mayBeAbsent func(metric string) bool
}

// scrapeTarget is one auditor instance, labelled with its star.
type scrapeTarget struct{ Star, Addr string }

// promConfig is the reference configuration (deploy/prometheus/scrape.yaml)
// as the test runs it: scrapes and rule evaluations every second, the
// shipped rules by absolute path, the targets of the job nova-auditor from
// targetsFile and those of nova-auditor-fleet from fleetFile.
func promConfig(t *testing.T, targetsFile, fleetFile string) []byte {
	t.Helper()
	b, err := os.ReadFile(deployFile("prometheus/scrape.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		t.Fatal(err)
	}
	rules, err := filepath.Abs(deployFile("prometheus/alerts.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	global := cfg["global"].(map[string]any)
	global["scrape_interval"], global["scrape_timeout"], global["evaluation_interval"] = "1s", "1s", "1s"
	cfg["rule_files"] = []string{rules}
	jobs := cfg["scrape_configs"].([]any)
	if len(jobs) != 2 {
		t.Fatalf("scrape.yaml has %d jobs, want 2 (nova-auditor, nova-auditor-fleet)", len(jobs))
	}
	for i, want := range []struct{ name, file string }{{"nova-auditor", targetsFile}, {"nova-auditor-fleet", fleetFile}} {
		job := jobs[i].(map[string]any)
		if job["job_name"] != want.name || job["honor_labels"] != true {
			t.Fatalf("scrape.yaml's job %d: %v, want %s with honor_labels", i, job, want.name)
		}
		sd := job["file_sd_configs"].([]any)[0].(map[string]any)
		sd["files"], sd["refresh_interval"] = []string{want.file}, "1s"
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// setTargets writes the file_sd file (Prometheus watches it).
func (p *promServer) setTargets(targets []scrapeTarget) {
	p.t.Helper()
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	groups := []group{}
	for _, tg := range targets {
		groups = append(groups, group{Targets: []string{tg.Addr}, Labels: map[string]string{"star": tg.Star}})
	}
	p.writeTargets(p.targets, groups)
}

// setFleetTargets writes the file_sd file of the fleet's members: no star
// on their targets.
func (p *promServer) setFleetTargets(addrs []string) {
	p.t.Helper()
	groups := []map[string][]string{}
	if len(addrs) > 0 {
		groups = append(groups, map[string][]string{"targets": addrs})
	}
	p.writeTargets(p.fleetTargets, groups)
}

func (p *promServer) writeTargets(file string, groups any) {
	p.t.Helper()
	b, err := json.Marshal(groups)
	if err != nil {
		p.t.Fatal(err)
	}
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		p.t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		p.t.Fatal(err)
	}
}

// startPrometheus runs Prometheus with the reference configuration,
// scraping single-star targets and fleet members (their addresses).
func startPrometheus(t *testing.T, targets []scrapeTarget, fleet ...string) *promServer {
	t.Helper()
	bin := promTool(t, "prometheus")
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &promServer{t: t, url: "http://" + addr, targets: filepath.Join(dir, "targets.json"), fleetTargets: filepath.Join(dir, "fleet-targets.json")}
	p.setTargets(targets)
	p.setFleetTargets(fleet)
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, promConfig(t, p.targets, p.fleetTargets), 0o644); err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(bin, "--config.file", config, "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", addr, "--log.level", "warn")
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-done
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("prometheus log:\n%s", b)
		}
	})
	eventually(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get(p.url + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

// series is one element of an instant vector.
type series struct {
	Labels map[string]string
	Value  float64
}

// query evaluates expr now through /api/v1/query.
func (p *promServer) query(expr string) ([]series, error) {
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(p.url + "/api/v1/query?query=" + url.QueryEscape(expr))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string          `json:"resultType"`
			Result     json.RawMessage `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("query %s: %w", expr, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", expr, r.Error)
	}
	switch r.Data.ResultType {
	case "vector":
		var v []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		}
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		out := make([]series, 0, len(v))
		for _, s := range v {
			f, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
			out = append(out, series{Labels: s.Metric, Value: f})
		}
		return out, nil
	case "scalar":
		var v [2]any
		if err := json.Unmarshal(r.Data.Result, &v); err != nil {
			return nil, err
		}
		f, _ := strconv.ParseFloat(fmt.Sprint(v[1]), 64)
		return []series{{Labels: map[string]string{}, Value: f}}, nil
	}
	return nil, fmt.Errorf("query %s: result type %s", expr, r.Data.ResultType)
}

func (p *promServer) mustQuery(expr string) []series {
	p.t.Helper()
	s, err := p.query(expr)
	if err != nil {
		p.t.Fatal(err)
	}
	return s
}

// byStar is an expression's result keyed by its star label.
func (p *promServer) byStar(expr string) map[string]float64 {
	p.t.Helper()
	out := map[string]float64{}
	for _, s := range p.mustQuery(expr) {
		out[s.Labels["star"]] = s.Value
	}
	return out
}

// filtering reports whether a node may rightly return nothing: a
// comparison without bool, a set operation, absent().
func filtering(n parser.Node) bool {
	switch e := n.(type) {
	case *parser.BinaryExpr:
		return (e.Op.IsComparisonOperator() && !e.ReturnBool) || e.Op.IsSetOperator()
	case *parser.Call:
		return e.Func.Name == "absent" || e.Func.Name == "absent_over_time"
	}
	return false
}

// hasFiltering reports whether n or a node below it is filtering.
func hasFiltering(n parser.Node) bool {
	found := false
	parser.Inspect(n, func(m parser.Node, _ []parser.Node) error {
		if filtering(m) {
			found = true
		}
		return nil
	})
	return found
}

// exprCheck is what checkExpr found of one expression.
type exprCheck struct {
	Series int      // series of the whole expression
	Parts  int      // sub-expressions evaluated (each returned series)
	Errs   []string // what is wrong
}

// checkExpr evaluates expr and every sub-expression that must return
// series when the auditors run (selectors, aggregations, functions and
// arithmetic with no comparison, set operation or absent() below them),
// and checks that each label of a by(), an on(), a selector's matcher and
// legend exists on the series it applies to.
func (p *promServer) checkExpr(expr, legend string, wantSeries bool) exprCheck {
	p.t.Helper()
	var c exprCheck
	errf := func(format string, args ...any) { c.Errs = append(c.Errs, fmt.Sprintf(format, args...)) }
	root, err := parser.ParseExpr(expr)
	if err != nil {
		errf("parse: %v", err)
		return c
	}
	eval := func(n parser.Node) []series {
		s, err := p.query(n.String())
		if err != nil {
			errf("%v", err)
		}
		return s
	}
	labelsOnAll := func(what string, ss []series, labels []string) {
		for _, l := range labels {
			for _, s := range ss {
				if s.Labels[l] == "" {
					errf("%s: label %q missing on %v", what, l, s.Labels)
					break
				}
			}
		}
	}
	parser.Inspect(root, func(n parser.Node, _ []parser.Node) error {
		switch e := n.(type) {
		case *parser.VectorSelector:
			all := eval(&parser.VectorSelector{Name: e.Name, LabelMatchers: nameOnly(e)})
			if len(all) == 0 && p.absentOK(e) {
				return nil
			}
			if len(all) == 0 {
				errf("%s: no series of %s", e, e.Name)
			}
			for _, m := range e.LabelMatchers {
				// The dashboard's cluster and namespace at All (.*)
				// match where the label is absent too: the test's
				// Prometheus attaches neither.
				if m.Name == "__name__" || (dashboardScope[m.Name] && m.Matches("")) {
					continue
				}
				if !slices.ContainsFunc(all, func(s series) bool { return s.Labels[m.Name] != "" }) {
					errf("%s: no series of %s has the label %q", e, e.Name, m.Name)
				}
			}
		case *parser.AggregateExpr:
			if !e.Without && len(e.Grouping) > 0 {
				labelsOnAll(fmt.Sprintf("by (%s) of %s", strings.Join(e.Grouping, ", "), e.Expr), eval(e.Expr), e.Grouping)
			}
		case *parser.BinaryExpr:
			if vm := e.VectorMatching; vm != nil && vm.On && len(vm.MatchingLabels) > 0 {
				labelsOnAll(fmt.Sprintf("on (%s) of %s", strings.Join(vm.MatchingLabels, ", "), e.LHS), eval(e.LHS), vm.MatchingLabels)
				labelsOnAll(fmt.Sprintf("on (%s) of %s", strings.Join(vm.MatchingLabels, ", "), e.RHS), eval(e.RHS), vm.MatchingLabels)
			}
		}
		switch n.(type) {
		case *parser.VectorSelector, *parser.AggregateExpr, *parser.Call, *parser.BinaryExpr:
			ex, ok := n.(parser.Expr)
			if !ok || ex.Type() != parser.ValueTypeVector || hasFiltering(n) || n == root {
				return nil
			}
			c.Parts++
			if len(eval(n)) == 0 && !p.absentOK(n) {
				errf("sub-expression %s returns no series", n)
			}
		}
		return nil
	})
	whole := eval(root)
	c.Series = len(whole)
	if wantSeries && len(whole) == 0 {
		errf("returns no series")
	}
	for _, m := range regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`).FindAllStringSubmatch(legend, -1) {
		labelsOnAll("legend "+legend, whole, []string{m[1]})
	}
	return c
}

// absentOK reports whether every selector in n names a metric that
// p.mayBeAbsent lets have no series.
func (p *promServer) absentOK(n parser.Node) bool {
	if p.mayBeAbsent == nil {
		return false
	}
	selectors, ok := 0, true
	parser.Inspect(n, func(m parser.Node, _ []parser.Node) error {
		if vs, is := m.(*parser.VectorSelector); is {
			selectors++
			ok = ok && p.mayBeAbsent(vs.Name)
		}
		return nil
	})
	return selectors > 0 && ok
}

// nameOnly is a selector's name matcher alone.
func nameOnly(e *parser.VectorSelector) []*labels.Matcher {
	var out []*labels.Matcher
	for _, m := range e.LabelMatchers {
		if m.Name == "__name__" {
			out = append(out, m)
		}
	}
	return out
}

// TestAlertRules runs promtool on the shipped rules (check rules, and the
// unit tests of alerts_test.yaml), and checks that every alert has a unit
// test in which it fires. TestAlertRunbookSections, which needs no
// promtool, checks the runbook.
func TestAlertRules(t *testing.T) {
	promtool := promTool(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "alerts.yaml"}, {"test", "rules", "alerts_test.yaml"}, {"check", "config", "scrape.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = deployFile("prometheus")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		t.Logf("promtool %s:\n%s", strings.Join(args, " "), out)
	}

	b, err := os.ReadFile(deployFile("prometheus/alerts_test.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(b, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, g := range tests.Tests {
		for _, a := range g.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	rules := loadAlertRules(t)
	names := map[string]bool{}
	for _, r := range rules {
		names[r.Alert] = true
		if !fires[r.Alert] {
			t.Errorf("alert %s has no unit test in which it fires", r.Alert)
		}
	}
	for name := range fires {
		if !names[name] {
			t.Errorf("alerts_test.yaml tests %s, which alerts.yaml does not define", name)
		}
	}
	t.Logf("%d alert rules, each with a firing unit test", len(rules))
}

// TestAlertRunbookSections: every alert of deploy/prometheus/alerts.yaml
// has a "## <alert name>" section in deploy/RUNBOOK.md, which its
// runbook_url's anchor names (taking the base from the runbook_base_url
// external label), and a severity and summary; and every alert-named
// section of the runbook is for an alert that exists.
func TestAlertRunbookSections(t *testing.T) {
	runbook, err := os.ReadFile(deployFile("RUNBOOK.md"))
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	var sections []string
	for _, line := range strings.Split(string(runbook), "\n") {
		if h, ok := strings.CutPrefix(line, "## "); ok {
			anchors[githubAnchor(h)] = true
			sections = append(sections, strings.TrimSpace(h))
		}
	}
	rules := loadAlertRules(t)
	names := map[string]bool{}
	for _, r := range rules {
		names[r.Alert] = true
		if !anchors[githubAnchor(r.Alert)] {
			t.Errorf("alert %s has no section \"## %s\" in RUNBOOK.md", r.Alert, r.Alert)
		}
		u := r.Annotations["runbook_url"]
		_, anchor, ok := strings.Cut(u, "#")
		if !ok || !anchors[anchor] {
			t.Errorf("alert %s: runbook_url %q names no section of RUNBOOK.md", r.Alert, u)
		}
		if anchor != strings.ToLower(r.Alert) {
			t.Errorf("alert %s: runbook anchor %q is not the alert's name in lower case", r.Alert, anchor)
		}
		if !strings.Contains(u, "$externalLabels.runbook_base_url") {
			t.Errorf("alert %s: runbook_url %q does not take the base from the runbook_base_url external label", r.Alert, u)
		}
		if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
			t.Errorf("alert %s: no severity or summary", r.Alert)
		}
	}
	for _, h := range sections {
		if strings.HasPrefix(h, "NovaAuditor") && !names[h] {
			t.Errorf("RUNBOOK.md has a section %q, which is no alert of alerts.yaml", h)
		}
	}
	t.Logf("%d alert rules, each with a runbook section", len(rules))
}

// TestOperationsGuideListsEveryAlert: docs/operations.md's "Responding to
// alerts" links every alert of deploy/prometheus/alerts.yaml to its
// runbook section, and names no alert that alerts.yaml does not define.
func TestOperationsGuideListsEveryAlert(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Responding to alerts\n")
	if start < 0 {
		t.Fatal("docs/operations.md has no section \"Responding to alerts\"")
	}
	section := doc[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	names := map[string]bool{}
	for _, r := range loadAlertRules(t) {
		names[r.Alert] = true
		if link := "[" + r.Alert + "](../deploy/RUNBOOK.md#" + githubAnchor(r.Alert) + ")"; !strings.Contains(section, link) {
			t.Errorf("docs/operations.md does not link %s's runbook section as %s", r.Alert, link)
		}
	}
	for _, m := range regexp.MustCompile(`\[(NovaAuditor\w+)\]`).FindAllStringSubmatch(section, -1) {
		if !names[m[1]] {
			t.Errorf("docs/operations.md names %s, which is no alert of alerts.yaml", m[1])
		}
	}
}

// githubAnchor is the anchor GitHub gives a Markdown heading.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
