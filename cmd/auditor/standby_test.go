package main

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// TestAStandbyDropsTheSidecarsOfIntentsAnotherLeaderFinished: pod A stages a
// part and is killed; pod B, with its own data directory, leads and
// finishes the intent; A comes back as a standby and must drop its
// sidecar (only a leader's cycle reconciled before).
func TestAStandbyDropsTheSidecarsOfIntentsAnotherLeaderFinished(t *testing.T) {
	e := newCrashEnv(t, auditorBinary(t), s3CrashStore)
	e.write(1, sim.Faults{})
	if code, out := e.run(string(settle.CrashAfterSidecarStaged)); code != -int(syscall.SIGKILL) {
		t.Fatalf("armed run: %d %s", code, out)
	}
	pa := filepath.Join(e.root, "data", "pending")
	ents, _ := os.ReadDir(pa)
	t.Logf("pod A's pending dir after the kill: %d files", len(ents))
	time.Sleep(3 * time.Second) // the killed run's lease expires
	b := startServeWith(t, "b", e.url, serveOptions{env: e.env}, append(append([]string{}, e.common...),
		"--holder", "b", "--data-dir", filepath.Join(e.root, "dataB"), "--schedule", "@every 1s", "--log-level", "info")...)
	_ = b
	a := startServeWith(t, "a", e.url, serveOptions{env: e.env}, append(append([]string{}, e.common...),
		"--holder", "a", "--schedule", "@every 1s", "--log-level", "info")...)
	_ = a
	eventually(t, 30*time.Second, "intent closed", func() bool {
		in, err := e.db.Settle().Intents(e.ctx, "s1", "publish", 0)
		return err == nil && len(in) == 0
	})
	time.Sleep(5 * time.Second)
	ents, _ = os.ReadDir(pa)
	l, _ := currentLease(t, e.db)
	t.Logf("leader %s; pod A's pending dir 5s after the intent closed: %d files", l.Holder, len(ents))
	if len(ents) != 0 {
		t.Errorf("standby kept %d sidecars of a closed intent", len(ents))
	}
}
