package sim

import (
	"context"
	"testing"
	"time"
)

// TestWriteWithRetention raises low_record on random streams while the
// writer keeps absorbing into them: every raise lands (low_record rose on
// some streams, never past next_record) and check still finds every live
// record once with the right bytes.
func TestWriteWithRetention(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	st := Storage{Store: newFaultStore(t), Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "r1", Streams: 8, Content: smallContent(3)}); err != nil {
		t.Fatal(err)
	}
	ws, err := Write(ctx, db, st, WriteOptions{Star: "r1", Flights: 200, FlightBytes: 8 << 10, FlightInterval: 5 * time.Millisecond,
		Rate: 2 << 20, RetentionEvery: 10 * time.Millisecond, Faults: Faults{Lost: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Retention == 0 {
		t.Fatalf("no retention move in %s of writing: %+v", ws.Elapsed, summaryW(ws))
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	raised := 0
	for _, s := range streams {
		if s.LowRecord > s.NextRecord {
			t.Fatalf("stream %s: low_record %d past next_record %d", s.ID, s.LowRecord, s.NextRecord)
		}
		if s.LowRecord > 0 {
			raised++
		}
	}
	if raised == 0 {
		t.Fatalf("%d retention moves and no stream's low_record rose", ws.Retention)
	}
	rep := mustCheck(t, db, st, CheckOptions{})
	if rep.Checked != rep.Records {
		t.Fatalf("checked %d of %d live records", rep.Checked, rep.Records)
	}
	t.Logf("%d retention moves over %d streams during %d flights; %d live records checked", ws.Retention, raised, ws.Flights, rep.Checked)
}
