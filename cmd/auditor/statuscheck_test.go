package main

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/sim"
)

// TestStatusCheck: against a real metastore, `auditor status --check`
// exits 0 for a led, running star with no quarantine, and with each
// condition's own code once it holds: no live leader, paused, quarantine
// past --max-quarantined, halted; each condition is named on stderr.
// `status` without --check exits 0 in every one of these states.
func TestStatusCheck(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, db := migratedDBNoStar(t)
	fx, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 3, Content: sim.DefaultContent(5)})
	if err != nil {
		t.Fatal(err)
	}
	status := func(t *testing.T, want int, says string, extra ...string) {
		t.Helper()
		args := append([]string{"status", "--star", "s1", "--database-url", url}, extra...)
		if code, _, errs := runCLI(t, args...); code != exitOK {
			t.Fatalf("status without --check: exit %d, want 0 (%q)", code, errs)
		}
		code, out, errs := runCLI(t, append(args, "--check")...)
		if code != want || !strings.Contains(errs, says) {
			t.Fatalf("status --check %v: exit %d, want %d saying %q\nstdout %q\nstderr %q", extra, code, want, says, out, errs)
		}
		if !strings.Contains(out, "s1") {
			t.Errorf("status --check printed no status: %q", out)
		}
	}

	// No lease was ever taken.
	status(t, exitCheckNoLeader, "no live leader")

	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "checker", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	status(t, exitOK, "")

	if code, out, errs := runCLI(t, "pause", "--star", "s1", "--database-url", url); code != exitOK {
		t.Fatalf("pause: %d %q %q", code, out, errs)
	}
	status(t, exitCheckPaused, "is paused")
	if code, out, errs := runCLI(t, "resume", "--star", "s1", "--database-url", url); code != exitOK {
		t.Fatalf("resume: %d %q %q", code, out, errs)
	}
	status(t, exitOK, "")

	// One quarantined stream fails the default check, not one that
	// tolerates it; two fail that one.
	if err := db.Settle().Quarantine(ctx, lease.Fence, fx.Stars[0].Streams[0], "", "corrupt", "a test quarantine"); err != nil {
		t.Fatal(err)
	}
	status(t, exitCheckQuarantine, "1 quarantined")
	status(t, exitOK, "", "--max-quarantined", "1")
	if err := db.Settle().Quarantine(ctx, lease.Fence, fx.Stars[0].Streams[1], "", "corrupt", "a test quarantine"); err != nil {
		t.Fatal(err)
	}
	status(t, exitCheckQuarantine, "2 quarantined", "--max-quarantined", "1")

	// A halt outranks the quarantine, and both are named.
	if err := db.Ledger().SetHalted(ctx, lease.Fence, "a test halt"); err != nil {
		t.Fatal(err)
	}
	status(t, exitCheckHalted, "halted: a test halt")
	_, _, errs := runCLI(t, "status", "--star", "s1", "--database-url", url, "--check")
	if !strings.Contains(errs, "quarantined") {
		t.Errorf("status --check names only the first condition: %q", errs)
	}

	// A lease given up: still halted, and no live leader named too.
	if err := db.Leases().ReleaseLease(ctx, lease.Fence); err != nil {
		t.Fatal(err)
	}
	status(t, exitCheckHalted, "no live leader")

	// --check judges one star.
	if code, _, errs := runCLI(t, "status", "--fleet", "--check", "--database-url", url); code != exitUsage || !strings.Contains(errs, "check") {
		t.Errorf("status --fleet --check: exit %d %q", code, errs)
	}
}

// TestStatusCheckOrder: with every condition holding, the code is the
// most urgent; with none, 0.
func TestStatusCheckOrder(t *testing.T) {
	all := daemon.Status{Star: "s", Halted: true, Paused: true, Quarantine: make([]daemon.QuarantineStatus, 3)}
	for _, c := range []struct {
		name string
		edit func(*daemon.Status)
		max  int
		want int
	}{
		{"everything", func(*daemon.Status) {}, 0, exitCheckHalted},
		{"not halted", func(s *daemon.Status) { s.Halted = false }, 0, exitCheckNoLeader},
		{"led", func(s *daemon.Status) { s.Halted, s.Leader.Live = false, true }, 0, exitCheckPaused},
		{"running", func(s *daemon.Status) { s.Halted, s.Leader.Live, s.Paused = false, true, false }, 0, exitCheckQuarantine},
		{"within the threshold", func(s *daemon.Status) { s.Halted, s.Leader.Live, s.Paused = false, true, false }, 3, exitOK},
	} {
		s := all
		c.edit(&s)
		if got, why := statusCheck(s, c.max); got != c.want {
			t.Errorf("%s: %d, want %d (%v)", c.name, got, c.want, why)
		}
	}
}

// TestStatusCheckCodesMatchTheDocsAndHelp: statusCheckCodes is the one
// table of --check's codes: `auditor status -h` prints each row, and
// docs/operations.md's operator surface holds the same table. No code
// is one of exitCodes'.
func TestStatusCheckCodesMatchTheDocsAndHelp(t *testing.T) {
	code, help, _ := runCLI(t, "status", "-h")
	if code != exitOK {
		t.Fatalf("auditor status -h: exit %d", code)
	}
	rows := codeTableRows(t, filepath.Join("..", "..", "docs", "operations.md"), "## Operator surface", "| status --check code |")
	if len(rows) != len(statusCheckCodes) {
		t.Errorf("docs/operations.md lists %d --check codes, the binary %d", len(rows), len(statusCheckCodes))
	}
	for _, c := range statusCheckCodes {
		if line := "  " + strconv.Itoa(c.code) + "  " + c.meaning + "\n"; !strings.Contains(help, line) {
			t.Errorf("auditor status -h does not print %q", line)
		}
		if got := rows[strconv.Itoa(c.code)]; got != c.meaning {
			t.Errorf("--check code %d: the docs say %q, the binary %q", c.code, got, c.meaning)
		}
		for _, e := range exitCodes {
			if e.code == c.code {
				t.Errorf("--check code %d is also exit code %d of the table", c.code, e.code)
			}
		}
	}
}
