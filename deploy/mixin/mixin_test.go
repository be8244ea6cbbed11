package mixin

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
	"go.yaml.in/yaml/v3"
)

// committed is the generated rules file of the repository.
const committed = "../prometheus/alerts.yaml"

type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func parseRules(t *testing.T, b []byte) map[string]rule {
	t.Helper()
	var doc struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("generated rules: %v", err)
	}
	out := map[string]rule{}
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			if _, dup := out[r.Alert]; dup {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			out[r.Alert] = r
		}
	}
	if len(out) == 0 {
		t.Fatal("no rules generated")
	}
	return out
}

func generate(t *testing.T, c Config) []byte {
	t.Helper()
	b, err := Rules(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestGeneratedRulesAreCommitted: deploy/prometheus/alerts.yaml is what
// the generator writes with the default _config, byte for byte, so the
// template and the committed rules cannot drift apart.
func TestGeneratedRulesAreCommitted(t *testing.T) {
	want := generate(t, Default())
	got, err := os.ReadFile(committed)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := 0; i < len(gl) || i < len(wl); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("deploy/prometheus/alerts.yaml differs from the mixin's output at line %d:\ncommitted: %s\ngenerated: %s\nrun `make mixin` and commit the result", i+1, g, w)
			}
		}
	}
}

// custom is a non-default _config: other job selectors, other thresholds,
// another runbook base; as an operator writes it.
const custom = `
_config:
  singleStarSelector: 'job="auditor", namespace="nova"'
  fleetSelector: 'job="auditor-fleet"'
  anySelector: 'job=~"auditor|auditor-fleet"'
  runbookBaseURL: https://runbooks.example/nova/RUNBOOK.md
  noSuccessfulCycleAfter: 1h
  settleLagAbove: 45m
  s3ErrorRatio: 0.1
  ageCapHeadroom: 0.5
  fleetStarNoProgressAfter: 20m
  pausedLongFor: 6h
`

// TestCustomConfigChangesRules: a _config with other selectors and
// thresholds is in the generated rules where each belongs (and the
// defaults nowhere), every expression still parses, the fields it does not
// set keep their defaults, and promtool check rules accepts the file.
func TestCustomConfigChangesRules(t *testing.T) {
	c, err := ParseConfig([]byte(custom))
	if err != nil {
		t.Fatal(err)
	}
	if c.GaugesStaleAfter != Default().GaugesStaleAfter || c.LeaseLossesAbove != Default().LeaseLossesAbove {
		t.Errorf("fields the _config does not set lost their defaults: %+v", c)
	}
	b := generate(t, c)
	rules := parseRules(t, b)
	if len(rules) != len(parseRules(t, generate(t, Default()))) {
		t.Errorf("%d rules, want as many as the default's", len(rules))
	}
	for name, r := range rules {
		if _, err := parser.ParseExpr(r.Expr); err != nil {
			t.Errorf("%s: %v\n%s", name, err, r.Expr)
		}
		if strings.Contains(r.Expr, "nova-auditor") {
			t.Errorf("%s still selects a default job: %s", name, r.Expr)
		}
		if u := r.Annotations["runbook_url"]; !strings.Contains(u, "{{ else }}https://runbooks.example/nova/RUNBOOK.md{{ end }}#"+strings.ToLower(name)) {
			t.Errorf("%s: runbook_url %q does not default to the configured base", name, u)
		}
	}
	contains := func(alert string, want ...string) {
		t.Helper()
		r := rules[alert]
		all := r.Expr + "\n" + r.For + "\n" + r.Annotations["summary"] + "\n" + r.Annotations["description"]
		for _, w := range want {
			if !strings.Contains(all, w) {
				t.Errorf("%s does not contain %q:\n%s", alert, w, all)
			}
		}
	}
	contains("NovaAuditorNoLeader", `nova_auditor_build_info{job="auditor", namespace="nova"}`)
	contains("NovaAuditorStarDown", `up{job="auditor", namespace="nova"}`)
	contains("NovaAuditorStarGone", `up{job="auditor", namespace="nova"}[1d]`, `nova_auditor_fleet_star_unowned_seconds{job="auditor-fleet"}`)
	contains("NovaAuditorAbsent", `absent(up{job=~"auditor|auditor-fleet"} == 1)`)
	contains("NovaAuditorNoSuccessfulCycle", "> 3600")
	contains("NovaAuditorSettleLag", "> 2700")
	contains("NovaAuditorS3Errors", "> 0.1", "More than 10% of")
	contains("NovaAuditorAgeCapHeadroom", "< 0.5 *")
	contains("NovaAuditorFleetStarNoProgress", `nova_auditor_fleet_star_progress_age_seconds{job="auditor-fleet"}) > 1200`)
	contains("NovaAuditorFleetMemberBlind", `nova_auditor_fleet_ticks_total{job="auditor-fleet", outcome="ok"}`)
	contains("NovaAuditorPausedLong", "6h", "over 6 hours")
	for _, gone := range []string{"> 900)", "> 1800", "> 0.05", "< 0.25 *"} {
		for name, r := range rules {
			if strings.Contains(r.Expr, gone) {
				t.Errorf("%s keeps the default threshold %q: %s", name, gone, r.Expr)
			}
		}
	}

	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("NOVA_TEST_REQUIRE_SERVICES") != "" {
			t.Fatalf("promtool is not installed: %v", err)
		}
		t.Skipf("promtool is not installed: %v", err)
	}
	f := filepath.Join(t.TempDir(), "alerts.yaml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", f).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	t.Logf("promtool check rules:\n%s", out)
}

// TestEveryAlertDescribed: every generated alert, with the default and a
// custom _config, has a severity, a summary, a description and a
// runbook_url of <base>#<alert name in lower case> that the
// runbook_base_url external label overrides.
func TestEveryAlertDescribed(t *testing.T) {
	c, err := ParseConfig([]byte(custom))
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]Config{"default": Default(), "custom": c} {
		for alert, r := range parseRules(t, generate(t, cfg)) {
			for _, a := range []string{"summary", "description", "runbook_url"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s config: alert %s has no %s", name, alert, a)
				}
			}
			if r.Labels["severity"] == "" {
				t.Errorf("%s config: alert %s has no severity", name, alert)
			}
			want := "{{ with $externalLabels.runbook_base_url }}{{ . }}{{ else }}" + cfg.RunbookBaseURL + "{{ end }}#" + strings.ToLower(alert)
			if r.Annotations["runbook_url"] != want {
				t.Errorf("%s config: alert %s: runbook_url %q, want %q", name, alert, r.Annotations["runbook_url"], want)
			}
		}
	}
}

// TestConfigRejected: a _config that would make broken rules, or names a
// field that does not exist, is an error, not a file of bad rules.
func TestConfigRejected(t *testing.T) {
	for _, bad := range []string{
		"_config: {fleetSelectr: 'job=\"x\"'}",
		"_config: {singleStarSelector: ''}",
		"_config: {fleetSelector: '{job=\"x\"}'}",
		"_config: {runbookBaseURL: 'runbook.md'}",
		"_config: {runbookBaseURL: 'https://x.example/r.md#top'}",
		"_config: {settleLagAbove: 0s}",
		"_config: {s3ErrorRatio: 5}",
		"_config: {noLeaderFor: two minutes}",
	} {
		if _, err := ParseConfig([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestHuman: durations in the summaries and descriptions read as words.
func TestHuman(t *testing.T) {
	for in, want := range map[string]string{"2m": "2 minutes", "1d": "1 day", "2h": "2 hours", "90s": "90 seconds", "1h30m": "90 minutes"} {
		c, err := ParseConfig([]byte("_config: {pausedLongFor: " + in + "}"))
		if err != nil {
			t.Fatal(err)
		}
		if got := human(c.PausedLongFor); got != want {
			t.Errorf("human(%s) = %q, want %q", in, got, want)
		}
	}
	if !regexp.MustCompile(`over 2 hours`).Match(generate(t, Default())) {
		t.Error("the default rules do not say NovaAuditorPausedLong's 2 hours in words")
	}
}
