package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/settle"
)

// TestFaultPointsHiddenFromHelp: the top-level help (auditor --help,
// auditor help, and the usage printed without a command) and the
// completion do not list crashpoints, a command of the
// fault-injection hooks for tests; `auditor crashpoints` still runs and
// lists the points.
func TestFaultPointsHiddenFromHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {}} {
		_, out, errs := runCLI(t, args...)
		if help := out + errs; strings.Contains(help, "crashpoints") || !strings.Contains(help, "  serve ") {
			t.Errorf("auditor %v lists crashpoints, or not serve:\n%s", args, help)
		}
	}
	code, out, _ := runCLI(t, "crashpoints")
	if code != exitOK || !strings.Contains(out, string(daemon.CrashAfterLeaseRenew)+"\n") || !strings.Contains(out, string(settle.CrashAfterIntent)+"\n") {
		t.Fatalf("auditor crashpoints: exit %d\n%s", code, out)
	}
	if code, _, _ := runCLI(t, "crashpoints", "extra"); code != exitUsage {
		t.Fatalf("auditor crashpoints extra: exit %d, want %d", code, exitUsage)
	}
	// The completion scripts ask the binary for the commands.
	if code, commands, _ := runCLI(t, "__complete", ""); code != exitOK || strings.Contains(commands, "crashpoints") || !strings.Contains(commands, "\nserve\t") {
		t.Fatalf("auditor __complete '': exit %d, lists crashpoints or not serve:\n%s", code, commands)
	}
}

// TestServeWarnsOfArmedFaultPoints: a single-star serve and a fleet member
// started with a crash point and a stall point armed (at a hit they never
// reach) log a warning naming both and export
// nova_auditor_fault_points_armed 1 for the crash and stall kinds, 0 for
// pause; started without, they log no such warning and export 0 for every
// kind.
func TestServeWarnsOfArmedFaultPoints(t *testing.T) {
	t.Parallel()
	url, _ := migratedDB(t)
	const never = ":1000000000"
	armed := []string{crashpoint.EnvVar + "=" + string(daemon.CrashAfterLeaseRenew) + never,
		crashpoint.StallVar + "=" + string(settle.CrashAfterIntent) + never}
	const warning = "fault-injection points armed"
	for _, tc := range []struct {
		name  string
		o     serveOptions
		extra []string
		want  map[string]float64
	}{
		{"serve-armed", serveOptions{env: armed, quiet: true}, nil, map[string]float64{"crash": 1, "pause": 0, "stall": 1}},
		{"member-armed", serveOptions{env: armed, quiet: true, fleet: true}, []string{"--stars", "s1", "--start-checks=false"}, map[string]float64{"crash": 1, "pause": 0, "stall": 1}},
		{"serve", serveOptions{quiet: true}, nil, map[string]float64{"crash": 0, "pause": 0, "stall": 0}},
		{"member", serveOptions{quiet: true, fleet: true}, []string{"--stars", "s1", "--start-checks=false"}, map[string]float64{"crash": 0, "pause": 0, "stall": 0}},
	} {
		p := startServeWith(t, tc.name, url, tc.o, tc.extra...)
		fams := p.metrics()
		for kind, want := range tc.want {
			if got := value(fams, "nova_auditor_fault_points_armed", map[string]string{"kind": kind}); got != want {
				t.Errorf("%s: nova_auditor_fault_points_armed{kind=%q} = %v, want %v", tc.name, kind, got, want)
			}
		}
		if f := fams["nova_auditor_fault_points_armed"]; f != nil && len(f.GetMetric()) != 3 {
			t.Errorf("%s: %d series of nova_auditor_fault_points_armed, want one per kind", tc.name, len(f.GetMetric()))
		}
		if tc.o.env != nil {
			for _, s := range []string{warning, "crash " + string(daemon.CrashAfterLeaseRenew) + never, "stall " + string(settle.CrashAfterIntent) + never} {
				if !p.out.contains(s) {
					t.Errorf("%s: the log does not say %q:\n%s", tc.name, s, strings.Join(p.out.lines(), "\n"))
				}
			}
		} else if p.out.contains(warning) {
			t.Errorf("%s: warns of fault points none armed", tc.name)
		}
		p.kill9()
	}
}

// TestRunAndReconcileWarnOfArmedFaultPoints: `auditor run --once` and
// `auditor reconcile` (the other commands that arm the environment's
// points) started with a crash point and a stall point armed (at a hit
// they never reach) log the warning naming both, as serve does; started
// without, they do not.
func TestRunAndReconcileWarnOfArmedFaultPoints(t *testing.T) {
	t.Parallel()
	url, _ := migratedDB(t)
	const never = ":1000000000"
	armed := []string{crashpoint.EnvVar + "=" + string(settle.CrashAfterComplete) + never,
		crashpoint.StallVar + "=" + string(settle.CrashAfterIntent) + never}
	const warning = "fault-injection points armed"
	for _, cmd := range [][]string{{"run", "--once"}, {"reconcile"}} {
		for _, env := range [][]string{armed, nil} {
			c := exec.Command(auditorBinary(t), append(cmd, "--star", "s1", "--database-url", url, "--fs-root", t.TempDir(),
				"--data-dir", t.TempDir(), "--log-format", "text")...)
			c.Env = append(os.Environ(), env...)
			out, err := c.CombinedOutput()
			if err != nil {
				t.Fatalf("auditor %v (%v): %v\n%s", cmd, env, err, out)
			}
			log := string(out)
			if env == nil {
				if strings.Contains(log, warning) {
					t.Errorf("auditor %v warns of fault points none armed:\n%s", cmd, log)
				}
				continue
			}
			for _, s := range []string{warning, "crash " + string(settle.CrashAfterComplete) + never, "stall " + string(settle.CrashAfterIntent) + never} {
				if !strings.Contains(log, s) {
					t.Errorf("auditor %v with points armed: the log does not say %q:\n%s", cmd, s, log)
				}
			}
		}
	}
}
