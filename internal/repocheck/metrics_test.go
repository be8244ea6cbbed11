package repocheck

import (
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/fleet"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/rewind"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/trim"
)

// metricPackages are the packages that define metrics, each with the
// constructor that registers them, called as `auditor serve` does
// (cmd/auditor/serve.go and buildCycle in cmd/auditor/steps.go): the
// per-star series into the registry wrapped with the star's label (star),
// the fleet member's into the process's registry itself (process: they are
// registered once per process, and the two per-star fleet gauges carry
// star as a label of their own). A package that starts defining metrics
// must be added here (TestDaemonMetricsAreDocumented checks that no other
// package does).
var metricPackages = map[string]func(process, star prometheus.Registerer) error{
	"daemon": func(process, reg prometheus.Registerer) error {
		if _, err := daemon.NewMetrics(reg, "test"); err != nil {
			return err
		}
		if err := daemon.RegisterFaultPoints(process, nil); err != nil {
			return err
		}
		return reg.Register(daemon.NewPoolCollector(func() catalog.PoolStats { return catalog.PoolStats{} }))
	},
	"fleet":    func(reg, _ prometheus.Registerer) error { _, err := fleet.NewMetrics(reg); return err },
	"objstore": func(_, reg prometheus.Registerer) error { _, err := objstore.NewMetrics(reg); return err },
	"settle":   func(_, reg prometheus.Registerer) error { _, err := settle.NewMetrics(reg); return err },
	"trim":     func(_, reg prometheus.Registerer) error { _, err := trim.NewMetrics(reg); return err },
	"rewind":   func(_, reg prometheus.Registerer) error { _, err := rewind.NewMarksCounter(reg); return err },
}

// registeredMetrics builds every package's metrics into one registry and
// returns the names of the auditor's own (nova_auditor_*) series: every
// metric a registered collector describes, whether or not it has a series
// yet (a labelled vector has none until its first label values).
func registeredMetrics(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	starReg := prometheus.WrapRegistererWith(prometheus.Labels{"star": "s1"}, reg)
	for _, pkg := range slices.Sorted(maps.Keys(metricPackages)) {
		if err := metricPackages[pkg](reg, starReg); err != nil {
			t.Fatalf("%s metrics: %v", pkg, err)
		}
	}
	// A Desc's name has no accessor; its String() begins with it.
	fqName := regexp.MustCompile(`^Desc\{fqName: "([^"]+)"`)
	ch := make(chan *prometheus.Desc)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	names := map[string]bool{}
	for d := range ch {
		m := fqName.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("cannot read the metric name of %s", d)
		}
		if !strings.HasPrefix(m[1], "nova_auditor_") {
			t.Errorf("metric %s is not named nova_auditor_*", m[1])
		}
		names[m[1]] = true
	}
	// What the registry gathers (the series that exist already) is a
	// subset of what it describes: the names above are the real ones.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !names[f.GetName()] {
			t.Fatalf("the registry gathers %s, which no collector describes: the name reader is wrong", f.GetName())
		}
	}
	if len(names) < 50 {
		t.Fatalf("%d metrics described: the registry misses some", len(names))
	}
	return names
}

// metricName is a nova_auditor_* name as the docs and rules spell it.
var metricName = regexp.MustCompile(`nova_auditor_[a-z0-9_]*[a-z0-9]`)

// TestDaemonMetricsAreDocumented: every metric the auditor registers is in
// deploy/README.md's Metrics section under its full name, and every
// nova_auditor_* name that a doc, an alert rule or the dashboard uses is
// a registered metric (or a histogram's _bucket, _sum or _count).
func TestDaemonMetricsAreDocumented(t *testing.T) {
	root := repoRoot(t)

	// No package outside metricPackages defines a metric.
	define := regexp.MustCompile(`prometheus\.New(Gauge|Counter|Histogram|Summary|Untyped)(Vec|Func)?\(|prometheus\.NewDesc\(`)
	sources(t, root, func(p, text string) {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "internal/repocheck/") {
			return
		}
		if define.MatchString(text) {
			if _, ok := metricPackages[filepath.ToSlash(filepath.Dir(rel))]; !ok {
				t.Errorf("%s defines metrics, and its package is not in metricPackages: this check misses them", rel)
			}
		}
	})

	names := registeredMetrics(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(b)
	start := strings.Index(section, "\n## Metrics\n")
	if start < 0 {
		t.Fatal("deploy/README.md has no Metrics section")
	}
	section = section[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	documented := map[string]bool{}
	for _, n := range metricName.FindAllString(section, -1) {
		documented[n] = true
	}
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if !documented[n] {
			t.Errorf("metric %s is not in deploy/README.md's Metrics section (under its full name)", n)
		}
	}

	// Every name used anywhere is one of ours.
	histogram := regexp.MustCompile(`_(bucket|sum|count)$`)
	var used []string
	for _, glob := range []string{"README.md", "docs/*.md", "deploy/*.md", "deploy/prometheus/*.yaml", "deploy/grafana/*.json"} {
		files, err := filepath.Glob(filepath.Join(root, filepath.FromSlash(glob)))
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, files...)
	}
	for _, f := range used {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		for i, line := range strings.Split(string(b), "\n") {
			for _, n := range metricName.FindAllString(line, -1) {
				if !names[n] && !names[histogram.ReplaceAllString(n, "")] {
					t.Errorf("%s:%d names %s, which the auditor does not register", filepath.ToSlash(rel), i+1, n)
				}
			}
		}
	}
	t.Logf("%d metrics registered, each documented; %d files' names checked", len(names), len(used))
}
