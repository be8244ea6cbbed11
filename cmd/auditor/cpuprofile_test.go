package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
)

// TestRunOnceCPUProfile: `run --once --cpuprofile FILE` writes a CPU
// profile of the run that pprof parses (sampled in CPU nanoseconds, over
// the run's duration); a file that cannot be created is a configuration
// error (exit 2) before the cycle.
func TestRunOnceCPUProfile(t *testing.T) {
	url, _ := migratedDB(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.pprof")
	common := []string{"--star", "s1", "--database-url", url, "--fs-root", t.TempDir(), "--data-dir", t.TempDir(), "--log-level", "warn"}
	code, out, errs := runCLI(t, append([]string{"run", "--once", "--cpuprofile", path}, common...)...)
	if code != exitOK || !strings.Contains(out, "cycle ok") {
		t.Fatalf("run --once --cpuprofile: exit %d %q %q", code, out, errs)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("the profile does not parse: %v", err)
	}
	if err := p.CheckValid(); err != nil {
		t.Fatalf("invalid profile: %v", err)
	}
	cpu := false
	for _, st := range p.SampleType {
		cpu = cpu || st.Type == "cpu" && st.Unit == "nanoseconds"
	}
	if !cpu || p.DurationNanos <= 0 {
		t.Fatalf("not a CPU profile of the run: sample types %v, duration %d ns", p.SampleType, p.DurationNanos)
	}

	code, _, errs = runCLI(t, append([]string{"run", "--once", "--cpuprofile", filepath.Join(dir, "no", "such", "dir", "cpu.pprof")}, common...)...)
	if code != exitUsage || !strings.Contains(errs, "cpuprofile") {
		t.Fatalf("an uncreatable profile: exit %d %q, want %d naming cpuprofile", code, errs, exitUsage)
	}
}
