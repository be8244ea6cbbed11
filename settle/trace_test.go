package settle_test

import (
	"os"
	"testing"

	"github.com/nova/auditor/sim"
)

// TestTraceOneSettle is the newcomer's trace of one settle of one stream
// (scripts/trace-settle.sh): one stream, settled once, then written to and
// settled again (a tail rewrite and new objects). The script runs it twice
// under -coverprofile, with NOVA_TRACE_SETTLE=without (stopping before the
// second settle) and =with; the blocks whose counts grew are the code that
// second settle ran, and the script prints their files and packages.
func TestTraceOneSettle(t *testing.T) {
	mode := os.Getenv("NOVA_TRACE_SETTLE")
	if mode != "with" && mode != "without" {
		t.Skip("NOVA_TRACE_SETTLE=with|without (scripts/trace-settle.sh)")
	}
	e, _ := newEnv(t, backends()[1], 1, 0)
	e.write("s1", 6, sim.Faults{}, 1)
	s := e.settler(nil)
	if _, err := e.cycle("s1", s); err != nil {
		t.Fatal(err)
	}
	e.write("s1", 3, sim.Faults{}, 2)
	if mode == "without" {
		return
	}
	c, err := e.cycle("s1", s)
	if err != nil {
		t.Fatal(err)
	}
	if c.ObjectsPublished == 0 {
		t.Fatalf("the traced settle wrote nothing: %+v", c)
	}
}
