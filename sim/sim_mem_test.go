package sim

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
)

func newTestDB(t testing.TB) *catalog.DB {
	t.Helper()
	db, _ := testenv.MigratedDB(t)
	return db
}

func smallContent(seed uint64) Content {
	return Content{Seed: seed, MinBytes: 0, MaxBytes: 2048, HeaderShare: 0.4, EmptyShare: 0.05}
}

func mustCheck(t *testing.T, db *catalog.DB, st Storage, opts CheckOptions) CheckReport {
	t.Helper()
	rep, err := Check(context.Background(), db, st, opts)
	if err != nil {
		t.Fatalf("check: %v", err)
	}
	if !rep.OK() {
		for _, f := range rep.Findings {
			t.Log(f)
		}
		t.Fatalf("check found problems: %+v", summary(rep))
	}
	return rep
}

func summary(r CheckReport) CheckReport {
	r.Findings = nil
	r.Chain.Unreferenced = nil
	return r
}

// TestWriteCheckMemory is the fast loop: write with every fault on against
// an in-memory store and the real Postgres, then check.
func TestWriteCheckMemory(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	fs := newFaultStore(t)
	st := Storage{Store: fs, Standard: "std", Express: fs.express(2)}
	fx, err := Setup(ctx, db, SetupOptions{Star: "s1", Streams: 40, ExpressShare: 0.25, FenceWindow: 3, Content: smallContent(7)})
	if err != nil {
		t.Fatal(err)
	}
	if len(fx.Stars) != 2 || len(fx.Stars[0].Streams) != 30 || len(fx.Stars[1].Streams) != 10 || fx.Stars[1].Class != "express" {
		t.Fatalf("fixture: %+v", fx)
	}
	for _, star := range []string{"s1", "s1-x"} {
		ws, err := Write(ctx, db, st, WriteOptions{Star: star, Flights: 300, FlightBytes: 16 << 10, AbsorbFlights: 3, RecordSlots: true,
			Faults: Faults{Failover: 0.02, Lost: 0.05, Crash: 0.02, LostReply: 0.05}})
		if err != nil {
			t.Fatalf("write %s: %v", star, err)
		}
		t.Logf("%s: %+v", star, summaryW(ws))
		if ws.Flights < 300 || ws.Failovers == 0 || ws.Crashes == 0 || ws.LostFaults == 0 || ws.LostReplies == 0 {
			t.Errorf("faults not all played: %+v", summaryW(ws))
		}
	}
	rep := mustCheck(t, db, st, CheckOptions{})
	t.Logf("check: %+v", summary(rep))
	if rep.Checked != rep.Records || rep.Records == 0 {
		t.Fatalf("checked %d of %d", rep.Checked, rep.Records)
	}
}

func summaryW(w WriteStats) WriteStats { w.Slots = nil; return w }

// TestCheckFindsDamage corrupts a slot and expects check to say so.
func TestCheckFindsDamage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	ms := newFaultStore(t)
	st := Storage{Store: ms, Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "d1", Streams: 5, Content: smallContent(1)}); err != nil {
		t.Fatal(err)
	}
	if _, err := Write(ctx, db, st, WriteOptions{Star: "d1", Flights: 10, FlightBytes: 8 << 10}); err != nil {
		t.Fatal(err)
	}
	mustCheck(t, db, st, CheckOptions{})
	ms.corrupt("std", bundlefmt.SlotKey("d1", 1, 3), 100)
	rep, err := Check(ctx, db, st, CheckOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Wrong == 0 {
		t.Fatalf("damage not found: %+v", summary(rep))
	}
}

// TestAmbiguousPutRetries fails PUTs before and after they land and expects
// the writer to keep every seq and absorb each flight once.
func TestAmbiguousPutRetries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	ms := newFaultStore(t)
	var n atomic.Int64
	ms.beforePut = func(_, _ string) error {
		if n.Add(1)%5 == 0 {
			return &objstore.TransientError{Op: "put", Err: errors.New("connection reset")}
		}
		return nil
	}
	ms.afterPut = func(_, _ string) error {
		if n.Load()%7 == 0 {
			return &objstore.TransientError{Op: "put", Err: errors.New("timeout after send")}
		}
		return nil
	}
	st := Storage{Store: ms, Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "a1", Streams: 8, Content: smallContent(3)}); err != nil {
		t.Fatal(err)
	}
	ws, err := Write(ctx, db, st, WriteOptions{Star: "a1", Flights: 60, FlightBytes: 4 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if ws.Absorbed != 60 || ws.Unabsorbed != 0 {
		t.Fatalf("stats: %+v", summaryW(ws))
	}
	mustCheck(t, db, st, CheckOptions{})
}

// TestStopDrainsAndCancelAborts: closing Stop ends a run cleanly with every
// written flight absorbed; cancelling the context aborts it, leaving a state
// that still checks clean (written flights not absorbed are lost flights).
func TestStopDrainsAndCancelAborts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	st := Storage{Store: newFaultStore(t), Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "stop", Streams: 10, Content: smallContent(8)}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { close(stop) })
	start := time.Now()
	ws, err := Write(ctx, db, st, WriteOptions{Star: "stop", Duration: time.Minute, FlightBytes: 4 << 10, Stop: stop})
	if err != nil || time.Since(start) > 10*time.Second || ws.Flights == 0 || ws.Unabsorbed != 0 {
		t.Fatalf("stopped write: %v after %s: %+v", err, time.Since(start), summaryW(ws))
	}
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	ws, err = Write(cctx, db, st, WriteOptions{Star: "stop", Duration: time.Minute, FlightBytes: 4 << 10})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled write: %v, %+v", err, summaryW(ws))
	}
	mustCheck(t, db, st, CheckOptions{})
}

// TestRateAndInterval: with a producer rate, flights are cut by the flight
// interval, and the content produced follows the rate.
func TestRateAndInterval(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newTestDB(t)
	st := Storage{Store: newFaultStore(t), Standard: "std"}
	if _, err := Setup(ctx, db, SetupOptions{Star: "rate", Streams: 10, Content: smallContent(4)}); err != nil {
		t.Fatal(err)
	}
	ws, err := Write(ctx, db, st, WriteOptions{Star: "rate", Duration: 2 * time.Second, Rate: 200 << 10,
		FlightInterval: 100 * time.Millisecond, FlightBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rate := float64(ws.ContentBytes) / ws.Elapsed.Seconds()
	if rate < 120<<10 || rate > 260<<10 || ws.Flights < 12 || ws.Flights > 25 {
		t.Fatalf("%.0f content bytes/s in %d flights over %s (want about 200 KiB/s in about 20)", rate, ws.Flights, ws.Elapsed)
	}
}
