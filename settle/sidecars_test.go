package settle_test

import (
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// TestSidecarStepKeepsTheOpenIntentsParts: the sidecar step keeps exactly
// the staged parts of the open publish intents. A dry run removes
// nothing; a run removes the sidecar no open intent names and keeps the
// one an open intent recorded; a standby's Idle does the same.
func TestSidecarStepKeepsTheOpenIntentsParts(t *testing.T) {
	e, _ := newEnv(t, backends()[0], 1, 0)
	e.write("s1", 2, sim.Faults{}, 1)
	st := e.firstStream("s1")
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "test", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), uint64(st.SettledThrough), 0)
	in, err := writepath.OpenIntent(e.ctx, e.db, l.Fence, target(t, key), catalog.ClassStandard)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.Settle().AddStagedPart(e.ctx, l.Fence, in.ID, 1); err != nil {
		t.Fatal(err)
	}
	kept, stray := settle.PartPosition(in.ID, 1), settle.PartPosition(in.ID+1000, 1)
	install := func(pos uint64) {
		t.Helper()
		if err := e.pending.Install(pos, "part", "application/octet-stream", []byte("staged bytes")); err != nil {
			t.Fatal(err)
		}
	}
	held := func(pos uint64) bool {
		_, err := e.pending.Read(pos)
		return err == nil
	}
	install(kept)
	install(stray)
	step := e.settler(nil).Sidecars()
	if _, err := step.Run(e.ctx, l.Fence, cycle.Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if !held(kept) || !held(stray) {
		t.Fatalf("a dry run removed a sidecar: kept %v, stray %v", held(kept), held(stray))
	}
	if _, err := step.Run(e.ctx, l.Fence, cycle.Options{}); err != nil {
		t.Fatal(err)
	}
	if !held(kept) || held(stray) {
		t.Fatalf("after the step: the open intent's part held %v (want true), the stray %v (want false)", held(kept), held(stray))
	}
	install(stray)
	if err := step.Idle(e.ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if !held(kept) || held(stray) {
		t.Fatalf("after Idle: the open intent's part held %v (want true), the stray %v (want false)", held(kept), held(stray))
	}
}
