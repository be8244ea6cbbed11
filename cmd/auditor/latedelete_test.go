package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/trim"
)

// TestPausedLeaderLateDelete reproduces the late delete of a released,
// republished key with the real binaries: a publish dies after its complete and its object is then
// damaged; a cycle condemns the key. Leader A's `run --once` stops itself
// (NOVA_AUDITOR_PAUSEPOINT, SIGSTOP) after its reap classified the key
// dead, before the DELETE. A's lease runs out; leader B reaps the key
// itself, the operator runs `auditor release`, and B publishes the
// stream again. Then A is continued and its DELETE lands. Every cataloged
// key must still exist, and novasim check must read every record back.
func TestPausedLeaderLateDelete(t *testing.T) {
	t.Parallel()
	bin := auditorBinary(t)
	for _, c := range []struct {
		name string
		open crashStore
	}{{"file", fileCrashStore}, {"s3", s3CrashStore}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			pausedLeaderLateDelete(t, newCrashEnv(t, bin, c.open))
		})
	}
}

// pausedLeaderLateDeleteOn runs the scenario of TestPausedLeaderLateDelete
// against an existing metastore and store rather than fresh ones: the
// database at url (migrated; star s1 set up by novasim, with streams; no
// stream quarantined; the star neither paused nor halted; no slot in the
// store at an epoch past the star's, since the scenario's writer fences
// one epoch up and must not meet a 412 there) and the store of b (no
// express set), with
// flights of flightBytes and the auditor's --denorm-output-cap-mib capMiB
// (the crash env's sizes: fileCrashStore's 256 KiB and "1", or
// s3CrashStore's 8 MiB and "16"). It writes, settles, condemns a key,
// pauses a leader before its delete and releases a stream there; every
// cataloged key must still exist and novasim check must pass at the end.
func pausedLeaderLateDeleteOn(t *testing.T, db *catalog.DB, url string, b teststore.Backend, flightBytes int64, capMiB string) {
	t.Helper()
	pausedLeaderLateDelete(t, crashEnvOn(t, auditorBinary(t), db, url, t.TempDir(), b.Store, b.Flags(), b.Env(), flightBytes, capMiB))
}

func pausedLeaderLateDelete(t *testing.T, e *crashEnv) {
	e.write(1, sim.Faults{})
	if code, out := e.run(string(settle.CrashAfterComplete)); code != -int(syscall.SIGKILL) {
		t.Fatalf("the armed cycle was not killed after its complete: exit %d: %s", code, out)
	}
	open, err := e.db.Settle().Intents(e.ctx, "s1", "publish", 0)
	if err != nil || len(open) == 0 {
		t.Fatalf("no publish intent left by the kill: %+v %v", open, err)
	}
	// Streams settle concurrently: the killed cycle may have left intents
	// whose objects were not complete yet. Damage one that stands.
	var key string
	var attrs objstore.Attrs
	for _, in := range open {
		if attrs, err = e.fs.Head(e.ctx, e.bucket, in.ObjectKey); err == nil {
			key = in.ObjectKey
			break
		}
	}
	if key == "" {
		t.Fatalf("no open publish intent has a standing object: %+v (%v)", open, err)
	}
	obj, _, err := e.fs.GetRange(e.ctx, e.bucket, key, 0, attrs.Size)
	if err != nil {
		t.Fatal(err)
	}
	obj[len(obj)/3] ^= 0x40 // a data byte: adoption's data check fails
	if err := e.fs.Delete(e.ctx, e.bucket, []string{key}); err != nil {
		t.Fatal(err)
	}
	if err := e.fs.PutIfAbsent(e.ctx, e.bucket, key, obj); err != nil {
		t.Fatal(err)
	}
	if code, out := e.run(""); code != 0 {
		t.Fatalf("cycle after the damage: exit %d: %s", code, out)
	}
	q, err := e.db.Settle().Quarantined(e.ctx, "s1")
	if err != nil || len(q) != 1 || q[0].Stream == nil {
		t.Fatalf("want the stream quarantined: %+v %v", q, err)
	}
	stream := *q[0].Stream
	e.skipGrace()

	// Leader A stops itself before the DELETE of the condemned key (one
	// batch holds every due reap, so the condemned key is among them). Its
	// renewal timer is far off: when A goes on, the DELETE is sent before
	// A can notice the lost lease, as a request already in flight would
	// be (a renewal that notices first cancels the cycle and only narrows
	// the window; it cannot close it).
	a := exec.Command(e.bin, append(append([]string{"run", "--once"}, e.common...), "--holder", "leader-a",
		"--lease-ttl", "2h", "--lease-renew", "1h", "--reap-batch-size", "1000")...)
	a.Env = append(append(os.Environ(), e.env...), crashpoint.PauseVar+"="+string(trim.CrashObjectBeforeDelete))
	var aout bytes.Buffer
	a.Stdout, a.Stderr = &aout, &aout
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- a.Wait() }()
	t.Cleanup(func() { _ = a.Process.Signal(syscall.SIGCONT); _ = a.Process.Kill() })
	eventually(t, time.Minute, "leader A stopped before its delete", func() bool {
		select {
		case err := <-exited:
			t.Fatalf("leader A exited before its delete: %v: %s", err, aout.String())
		default:
		}
		return processStopped(t, a.Process.Pid)
	})
	// A's lease runs out (its renewals stopped with it).
	if _, err := e.db.Pool().Exec(e.ctx, `UPDATE nova.auditor_leases SET expires_at = now() WHERE star = 's1'`); err != nil {
		t.Fatal(err)
	}

	// Leader B reaps the key, the operator releases the stream, B settles.
	if code, out := e.run(""); code != 0 {
		t.Fatalf("leader B's cycle: exit %d: %s", code, out)
	}
	if _, err := e.fs.Head(e.ctx, e.bucket, key); err == nil {
		t.Fatalf("leader B did not reap the condemned %s", key)
	}
	if code, out, errs := runCLI(t, "release", "--star", "s1", "--database-url", e.url, "--stream", stream.String()); code != 0 {
		t.Fatalf("release: exit %d: %s %s", code, out, errs)
	}
	if code, out := e.run(""); code != 0 {
		t.Fatalf("leader B's cycle after the release: exit %d: %s", code, out)
	}
	e.checkReferenced()

	// A goes on: its DELETE lands late, then its fenced finish fails.
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
	e.checkReferenced()
	e.checkSettled()
}

// processStopped reports whether the process is stopped by a signal (state
// T in /proc/PID/stat).
func processStopped(t *testing.T, pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	// pid (comm) state ...: comm may hold spaces, the state follows its ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}
