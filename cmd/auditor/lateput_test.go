package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// TestPausedLeaderPutsNoStray, on both backends: leader A stops itself
// after its batch's publish intents and before any PUT
// (NOVA_AUDITOR_PAUSEPOINT); its lease runs out; retention makes every
// record it was about to publish dead, and leader B abandons A's intents
// and buries their keys. When A goes on, it stops at its fence and
// commits nothing. A PUT of another of A's streams that was already past
// its fence check when A froze (the stop freezes every goroutine) lands
// late: a stray at a buried key, which verify --strays reports and the
// catalog never names (TestStraysFoundAndSwept holds the sweep to such
// objects). A freeze inside a transaction holds rows the test's next
// step needs: that schedule shows nothing and is skipped.
func TestPausedLeaderPutsNoStray(t *testing.T) {
	t.Parallel()
	bin := auditorBinary(t)
	for _, c := range []struct {
		name string
		open crashStore
	}{{"file", fileCrashStore}, {"s3", s3CrashStore}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pausedLeaderPutsNoStray(t, newCrashEnv(t, bin, c.open))
		})
	}
}

func pausedLeaderPutsNoStray(t *testing.T, e *crashEnv) {
	e.write(1, sim.Faults{})
	a := exec.Command(e.bin, append(append([]string{"run", "--once"}, e.common...), "--holder", "leader-a",
		"--lease-ttl", "2h", "--lease-renew", "1h")...)
	a.Env = append(append(os.Environ(), e.env...), crashpoint.PauseVar+"="+string(settle.CrashAfterIntent))
	var aout bytes.Buffer
	a.Stdout, a.Stderr = &aout, &aout
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- a.Wait() }()
	t.Cleanup(func() { _ = a.Process.Signal(syscall.SIGCONT); _ = a.Process.Kill() })
	eventually(t, time.Minute, "leader A stopped after its intents", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("leader A exited before its PUTs: %v: %s", err, aout.String())
		default:
		}
		return processStopped(t, a.Process.Pid)
	})
	open, err := e.db.Settle().Intents(e.ctx, "s1", "publish", 0)
	if err != nil || len(open) == 0 {
		t.Fatalf("leader A left no publish intent: %+v %v", open, err)
	}
	keys := map[string]bool{}
	for _, in := range open {
		keys[in.ObjectKey] = true
	}
	if _, err := e.db.Pool().Exec(e.ctx, `UPDATE nova.auditor_leases SET expires_at = now() WHERE star = 's1'`); err != nil {
		t.Fatal(err)
	}
	// Every record dead: B's settle skips the streams past them, and its
	// next recovery abandons A's intents, which its reap buries.
	wp := writepath.New(e.db)
	for _, st := range e.streams() {
		// A SIGSTOP freezes every goroutine of A: one frozen inside
		// another batch's commit holds its streams' rows, and this update
		// would wait on them for good. Then the schedule shows nothing.
		ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
		err := wp.RaiseLowRecord(ctx, st.ID, st.NextRecord)
		cancel()
		if err != nil && ctx.Err() != nil {
			t.Skipf("leader A froze inside another batch's commit, holding stream %s's row: %v", st.ID, err)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// B keeps the slots A still reads (their reaps wait an hour) and reaps
	// A's abandoned keys at once (their reap intents made due).
	b := func(i int) {
		t.Helper()
		code, out, errs := e.cli("run", "--once", "--reap-grace", "1h", "--stray-guard", "2h")
		if code != 0 && i == 1 && strings.Contains(errs, "acquire lease") {
			// A froze inside a fenced transaction, holding the lease row.
			t.Skipf("leader A froze inside a fenced transaction: %s", errs)
		}
		if code != 0 {
			t.Fatalf("leader B's cycle %d: exit %d: %s%s", i, code, out, errs)
		}
	}
	b(1) // settle skips past the dead records
	b(2) // recovery abandons A's intents
	if _, err := e.db.Pool().Exec(e.ctx, `UPDATE nova.orphan_intents SET reap_after = now() WHERE star = 's1' AND kind = 'reap'`); err != nil {
		t.Fatal(err)
	}
	b(3) // the reap buries their keys (and deletes nothing there)
	if left, err := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); err != nil || len(left) != 0 {
		t.Fatalf("leader B left publish intents: %+v %v", left, err)
	}
	// A goes on: its PUTs land late at the buried keys; its commit fails.
	if err := a.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err == nil {
			t.Fatalf("leader A's cycle succeeded after its lease ran out: %s", aout.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("leader A did not finish after SIGCONT")
	}
	// Where A's assembly checks its fence before its PUT, nothing lands.
	// A PUT already past that check when A froze lands late: a stray at a
	// buried key, which no commit names (A's commit fails its fence) and
	// verify --strays reports; the catalog stays sound.
	landed := 0
	for k := range keys {
		if _, err := e.fs.Head(e.ctx, e.bucket, k); err == nil {
			landed++
		}
	}
	if code, out, errs := e.cli("verify"); code != exitOK {
		t.Fatalf("verify after leader A: exit %d\n%s%s", code, out, errs)
	}
	want := exitOK
	if landed > 0 {
		want = exitFindings
	}
	if code, out, errs := e.cli("verify", "--strays"); code != want {
		t.Fatalf("verify --strays after leader A (%d late PUTs landed): exit %d, want %d\n%s%s", landed, code, want, out, errs)
	}
	if !strings.Contains(aout.String(), "stale fencing token") {
		t.Errorf("leader A did not stop at its fence: %s", aout.String())
	}
	t.Logf("leader A's %d intents were buried while it was paused; %d of its PUTs landed late, as strays; it stopped at its fence", len(keys), landed)
}
