package repocheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPrometheusInstallStartsNoService: wherever a script installs
// Debian's prometheus package (which enables and starts its service on
// install), it does so in services.sh's prometheus_installed, under a
// policy-rc.d that exits 101 (invoke-rc.d then starts nothing), and then
// disables and stops the service (systemctl disable --now, or the init.d
// script's service stop). make test must leave no system service running.
func TestPrometheusInstallStartsNoService(t *testing.T) {
	root := repoRoot(t)
	scripts, err := filepath.Glob(filepath.Join(root, "scripts", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	install := regexp.MustCompile(`apt-get install[^\n]*\bprometheus\b`)
	for _, p := range append(scripts, filepath.Join(root, "Makefile"), filepath.Join(root, ".ci", "run")) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if rel, _ := filepath.Rel(root, p); install.Match(b) && rel != filepath.Join("scripts", "services.sh") {
			t.Errorf("%s installs prometheus outside scripts/services.sh's prometheus_installed", rel)
		}
	}

	b, err := os.ReadFile(filepath.Join(root, "scripts", "services.sh"))
	if err != nil {
		t.Fatal(err)
	}
	fn := func(name string) string {
		m := regexp.MustCompile(`(?ms)^` + name + `\(\) \{\n.*?^\}\n`).FindString(string(b))
		if m == "" {
			t.Fatalf("scripts/services.sh has no function %s", name)
		}
		return m
	}
	body := fn("prometheus_installed")
	at := func(what string) int {
		i := strings.Index(body, what)
		if i < 0 {
			t.Errorf("prometheus_installed has no %q", what)
		}
		return i
	}
	policy, exit101, installs := at("/usr/sbin/policy-rc.d"), at(`exit 101`), install.FindStringIndex(body)
	if installs == nil {
		t.Fatal("prometheus_installed installs no prometheus")
	}
	removed, stopped := at(`rm -f "$policy"`), at("prometheus_service_stopped")
	if policy > installs[0] || exit101 > installs[0] {
		t.Error("prometheus_installed writes its policy-rc.d (exit 101) after the install")
	}
	if removed < installs[0] || stopped < installs[0] {
		t.Error("prometheus_installed removes its policy-rc.d or stops the service before the install")
	}
	stop := fn("prometheus_service_stopped")
	for _, want := range []string{"systemctl disable --now prometheus", "service prometheus stop", "return 1"} {
		if !strings.Contains(stop, want) {
			t.Errorf("prometheus_service_stopped has no %q", want)
		}
	}
}
