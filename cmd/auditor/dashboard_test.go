package main

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

// TestDashboardScopeAndAnnotations: the dashboard has the cluster and
// namespace variables (All by default, allValue .*, so a Prometheus whose
// series carry neither label still shows everything), every selector of
// every panel query, annotation and the star variable's query matches
// cluster=~"$cluster" and namespace=~"$namespace", and the annotations
// mark deploys (an auditor process started in the last 2 minutes,
// process_start_time_seconds, with its star and version from
// nova_auditor_build_info) and halts (nova_auditor_halted at 1). Needs no Prometheus: the live tests
// evaluate the same expressions.
func TestDashboardScopeAndAnnotations(t *testing.T) {
	b, err := os.ReadFile(deployFile("grafana/auditor.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Templating struct {
			List []struct {
				Name       string          `json:"name"`
				Query      json.RawMessage `json:"query"`
				IncludeAll bool            `json:"includeAll"`
				AllValue   string          `json:"allValue"`
				Current    struct {
					Value any `json:"value"`
				} `json:"current"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("auditor.json: %v", err)
	}
	vars := map[string]bool{}
	for _, v := range doc.Templating.List {
		vars[v.Name] = true
		if !dashboardScope[v.Name] {
			continue
		}
		if !v.IncludeAll || v.AllValue != ".*" || v.Current.Value != "$__all" {
			t.Errorf("variable %s: includeAll %v, allValue %q, current %v; want All (.*) by default", v.Name, v.IncludeAll, v.AllValue, v.Current.Value)
		}
	}
	for name := range dashboardScope {
		if !vars[name] {
			t.Errorf("the dashboard has no %s variable", name)
		}
	}

	scoped := func(what, expr string) {
		t.Helper()
		e, err := parser.ParseExpr(grafanaVars(expr))
		if err != nil {
			t.Errorf("%s: %s: %v", what, expr, err)
			return
		}
		n := 0
		parser.Inspect(e, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			n++
			for name := range dashboardScope {
				found := false
				for _, m := range vs.LabelMatchers {
					found = found || (m.Name == name && m.Type.String() == "=~")
				}
				if !found {
					t.Errorf("%s: selector %s has no %s=~\"$%s\"", what, vs, name, name)
				}
			}
			return nil
		})
		if n == 0 {
			t.Errorf("%s: %s selects nothing", what, expr)
		}
	}
	targets := loadDashboard(t)
	for _, tg := range targets {
		scoped("panel "+tg.Panel, tg.Expr)
	}
	scoped("the star variable", starVariable(t))

	annotations := map[string]string{}
	for _, a := range loadAnnotations(t) {
		annotations[a.Name] = a.Expr
		scoped("annotation "+a.Name, a.Expr)
	}
	for name, metrics := range map[string][]string{"Deploys": {"nova_auditor_build_info", "process_start_time_seconds"}, "Halts": {"nova_auditor_halted"}} {
		e, ok := annotations[name]
		if !ok {
			t.Errorf("the dashboard has no %s annotation", name)
			continue
		}
		expr, err := parser.ParseExpr(e)
		if err != nil {
			continue
		}
		reads := map[string]bool{}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				reads[vs.Name] = true
			}
			return nil
		})
		for _, metric := range metrics {
			if !reads[metric] {
				t.Errorf("annotation %s does not read %s: %s", name, metric, e)
			}
		}
	}
	t.Logf("%d panel queries and %d annotations, each scoped by cluster and namespace", len(targets), len(annotations))
}
