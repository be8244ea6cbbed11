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
	"sort"
	"strconv"
	"strings"
	"syscall"
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

// alertRule is one rule of deploy/prometheus/alerts.yaml.
type alertRule struct {
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
			Rules []alertRule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("alerts.yaml: %v", err)
	}
	var rules []alertRule
	for _, g := range doc.Groups {
		rules = append(rules, g.Rules...)
	}
	if len(rules) == 0 {
		t.Fatal("alerts.yaml has no rules")
	}
	return rules
}

// panelTarget is one query of the Grafana dashboard.
type panelTarget struct {
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
	for _, p := range doc.Panels {
		for _, tg := range p.Targets {
			out = append(out, panelTarget{Panel: p.Title, Expr: tg.Expr, Legend: tg.Legend})
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

// grafanaVars replaces the dashboard's variables as Grafana does: every
// star, and a rate interval of a few scrapes (the test scrapes every
// second).
func grafanaVars(expr string) string {
	return strings.NewReplacer(`"$star"`, `".*"`, "$__rate_interval", "15s").Replace(expr)
}

// promServer is a Prometheus process on a loopback port.
type promServer struct {
	t      *testing.T
	url    string
	config string
	cmd    *exec.Cmd
}

// scrapeTarget is one auditor instance, labelled with its star as the
// reference scrape configuration (deploy/prometheus/scrape.yaml) does.
type scrapeTarget struct{ Star, Addr string }

// writeConfig writes the Prometheus configuration: the shipped rules and
// one job nova-auditor (honor_labels, star per target), scraped every
// second.
func (p *promServer) writeConfig(targets []scrapeTarget) {
	p.t.Helper()
	rules, err := filepath.Abs(deployFile("prometheus/alerts.yaml"))
	if err != nil {
		p.t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n")
	fmt.Fprintf(&b, "  external_labels:\n    runbook_base_url: https://runbooks.example/nova\n")
	fmt.Fprintf(&b, "rule_files:\n  - %q\n", rules)
	fmt.Fprintf(&b, "scrape_configs:\n  - job_name: nova-auditor\n    honor_labels: true\n    static_configs:\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "      - targets: [%q]\n        labels: {star: %q}\n", tg.Addr, tg.Star)
	}
	if err := os.WriteFile(p.config, []byte(b.String()), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func startPrometheus(t *testing.T, targets []scrapeTarget) *promServer {
	t.Helper()
	bin := promTool(t, "prometheus")
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := &promServer{t: t, url: "http://" + addr, config: filepath.Join(dir, "prometheus.yml")}
	p.writeConfig(targets)
	p.cmd = exec.Command(bin, "--config.file", p.config, "--storage.tsdb.path", filepath.Join(dir, "data"),
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

// reload applies a new target list (SIGHUP rereads the configuration).
func (p *promServer) reload(targets []scrapeTarget) {
	p.t.Helper()
	p.writeConfig(targets)
	if err := p.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		p.t.Fatal(err)
	}
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
			if len(all) == 0 {
				errf("%s: no series of %s", e, e.Name)
			}
			for _, m := range e.LabelMatchers {
				if m.Name == "__name__" {
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
			if len(eval(n)) == 0 {
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

// sortedKeys lists a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
