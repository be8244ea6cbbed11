package settle_test

import (
	"os"
	"testing"
	"time"

	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/sim"
)

// TestTraceOneSettle is the newcomer's trace of one settle of one stream
// (scripts/trace-settle.sh): one stream, settled once, then written to and
// settled again (a tail rewrite and new objects). The script runs it twice
// under -coverprofile, with NOVA_TRACE_SETTLE=without (stopping before the
// second settle) and =with; the blocks whose counts grew are the code that
// second settle ran, from Settler.Run down, and the script prints their
// files and packages. One lease is held across both settles, so taking and
// releasing it is not in the trace.
func TestTraceOneSettle(t *testing.T) {
	mode := os.Getenv("NOVA_TRACE_SETTLE")
	if mode != "with" && mode != "without" {
		t.Skip("NOVA_TRACE_SETTLE=with|without (scripts/trace-settle.sh)")
	}
	e, _ := newEnv(t, backends()[1], 1, 0)
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "test", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	e.write("s1", 6, sim.Faults{}, 1)
	s := e.settler(nil)
	if _, err := s.Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"}); err != nil {
		t.Fatal(err)
	}
	e.write("s1", 3, sim.Faults{}, 2)
	if mode == "without" {
		return
	}
	c, err := s.Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"})
	if err != nil {
		t.Fatal(err)
	}
	if c.ObjectsPublished == 0 {
		t.Fatalf("the traced settle wrote nothing: %+v", c)
	}
}
