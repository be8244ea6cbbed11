package sim

import (
	"context"
	"testing"
	"time"
)

// TestCrashFaultsUnderDurationBound: a writer bound by a duration carries
// on after a crash fault (a new session fences and writes on), instead of
// stalling until the deadline: several crashes are played in a short run.
func TestCrashFaultsUnderDurationBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	st := Storage{Store: newFaultStore(t), Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "c1", Streams: 4, Content: smallContent(5)}); err != nil {
		t.Fatal(err)
	}
	ws, err := Write(ctx, db, st, WriteOptions{Star: "c1", Duration: 3 * time.Second, FlightBytes: 4 << 10,
		FlightInterval: 5 * time.Millisecond, Faults: Faults{Crash: 0.1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", summaryW(ws))
	if ws.Crashes < 3 || ws.Fences < 3 {
		t.Fatalf("%d crashes and %d fences in %s of writing with a crash fault every 10 flights: the writer stalls after a crash",
			ws.Crashes, ws.Fences, ws.Elapsed)
	}
	mustCheck(t, db, st, CheckOptions{})
}
