package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
)

func TestRunOnceRecordsTheRunAndReleasesTheLease(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	rec := newRecorder()
	rec.counts = cycle.Counts{ObjectsPublished: 2, BytesCopied: 100}
	second := step{"second", func(ctx context.Context, f catalog.Fence, o cycle.Options) (cycle.Counts, error) {
		// A step's fenced statement works under the run's fence.
		if err := db.Settle().AbandonPublish(ctx, f, -1, 0); err != nil {
			return cycle.Counts{}, err
		}
		return cycle.Counts{ObjectsAdopted: 1, BytesFetched: 7}, nil
	}}
	id := catalog.StreamID{15: 9}
	counts, err := daemon.RunOnce(ctx, testConfig(t, "once"), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec, second}},
		cycle.Options{Streams: []catalog.StreamID{id}})
	if err != nil {
		t.Fatal(err)
	}
	want := cycle.Counts{ObjectsPublished: 2, ObjectsAdopted: 1, BytesCopied: 100, BytesFetched: 7}
	if counts != want {
		t.Fatalf("counts %+v, want %+v", counts, want)
	}
	calls := rec.snapshot()
	if len(calls) != 1 || calls[0].Trigger != daemon.TriggerOnce || len(calls[0].Streams) != 1 || calls[0].Streams[0] != id {
		t.Fatalf("step saw %+v", calls)
	}
	runs := lastRuns(t, db, 10)
	if len(runs) != 1 || runs[0].Outcome != catalog.RunOK || runs[0].Trigger != "once" || runs[0].EndedAt == nil ||
		runs[0].Counts.ObjectsPublished != 2 || runs[0].Counts.ObjectsAdopted != 1 || runs[0].Counts.BytesFetched != 7 ||
		runs[0].Holder != "once" || runs[0].Token != rec.fences[0].Token {
		t.Fatalf("ledger %+v", runs)
	}
	if _, live, err := db.Leases().CurrentLease(ctx, "s1"); err != nil || live {
		t.Fatalf("lease still live after RunOnce (%v)", err)
	}
}

func TestRunOnceRefusesAHeldLease(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	if _, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "other", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	_, err := daemon.RunOnce(ctx, testConfig(t, "once"), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec}}, cycle.Options{})
	var held *catalog.LeaseHeldError
	if !errors.As(err, &held) || held.Holder != "other" {
		t.Fatalf("RunOnce beside a live lease: %v", err)
	}
	if len(rec.snapshot()) != 0 || len(lastRuns(t, db, 10)) != 0 {
		t.Fatal("a cycle ran without the lease")
	}

	// A dry run changes nothing, so it runs beside the holder: it takes
	// no lease, records no run, and its fence can write nothing.
	before, _ := lease(t, db)
	wrote := step{"write", func(ctx context.Context, f catalog.Fence, opts cycle.Options) (cycle.Counts, error) {
		if !opts.DryRun {
			t.Error("not a dry run")
		}
		return cycle.Counts{}, db.Ledger().SetHalted(ctx, f, "a dry run must not write")
	}}
	if _, err := daemon.RunOnce(ctx, testConfig(t, "once"), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec}}, cycle.Options{DryRun: true}); err != nil {
		t.Fatalf("dry run beside a live lease: %v", err)
	}
	if len(rec.snapshot()) != 1 || len(lastRuns(t, db, 10)) != 0 {
		t.Fatalf("dry run: %d calls, %d runs recorded", len(rec.snapshot()), len(lastRuns(t, db, 10)))
	}
	if after, _ := lease(t, db); after.Token != before.Token || after.Holder != "other" {
		t.Fatalf("the dry run touched the lease: %+v then %+v", before, after)
	}
	if _, err := daemon.RunOnce(ctx, testConfig(t, "once"), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{wrote}}, cycle.Options{DryRun: true}); !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("a write from a dry run: %v, want a stale token", err)
	}
	if st, _ := db.Ledger().DaemonState(ctx, "s1"); st.Halted() {
		t.Fatal("a dry run wrote")
	}
}

func TestRunOnceHaltPersistsAndBlocksUntilResume(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	cfg := testConfig(t, "once")
	halting := step{"check", func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		return cycle.Counts{}, fmt.Errorf("stream 01: entries [0,10) and [5,20) overlap: %w", cycle.ErrHalt)
	}}
	_, err := daemon.RunOnce(ctx, cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{halting}}, cycle.Options{})
	if !cycle.IsHalt(err) {
		t.Fatalf("want a halt, got %v", err)
	}
	st, err := db.Ledger().DaemonState(ctx, "s1")
	if err != nil || !st.Halted() || !strings.Contains(st.HaltedReason, "overlap") {
		t.Fatalf("state %+v %v", st, err)
	}
	if r := lastRuns(t, db, 1); r[0].Outcome != catalog.RunHalted {
		t.Fatalf("outcome %q", r[0].Outcome)
	}

	rec := newRecorder()
	deps := daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec}}
	if _, err := daemon.RunOnce(ctx, cfg, deps, cycle.Options{}); !errors.Is(err, daemon.ErrHalted) || !strings.Contains(err.Error(), "overlap") {
		t.Fatalf("RunOnce while halted: %v", err)
	}
	// A dry run changes nothing, so it may look.
	if _, err := daemon.RunOnce(ctx, cfg, deps, cycle.Options{DryRun: true}); err != nil {
		t.Fatalf("dry run while halted: %v", err)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminResume, nil, "test"); err != nil {
		t.Fatal(err)
	}
	if _, err := daemon.RunOnce(ctx, cfg, deps, cycle.Options{}); err != nil {
		t.Fatalf("after resume: %v", err)
	}
	if n := len(rec.snapshot()); n != 2 {
		t.Fatalf("recorder ran %d times, want 2 (dry run, then after resume)", n)
	}
}

func TestRunOncePausedAndPanics(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	cfg := testConfig(t, "once")
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminPause, nil, "test"); err != nil {
		t.Fatal(err)
	}
	rec := newRecorder()
	if _, err := daemon.RunOnce(ctx, cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{rec}}, cycle.Options{}); !errors.Is(err, daemon.ErrPaused) {
		t.Fatalf("RunOnce while paused: %v", err)
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminResume, nil, "test"); err != nil {
		t.Fatal(err)
	}
	boom := step{"boom", func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		var m map[string]int
		m["x"]++ //nolint:staticcheck // SA5000: a nil map write, the runtime panic this test wants
		return cycle.Counts{}, nil
	}}
	_, err := daemon.RunOnce(ctx, cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{boom, rec}}, cycle.Options{})
	if err == nil || !strings.Contains(err.Error(), "panic") || cycle.IsHalt(err) {
		t.Fatalf("panicking step: %v", err)
	}
	r := lastRuns(t, db, 1)[0]
	if r.Outcome != catalog.RunFailed || !strings.Contains(r.Error, "step boom: panic") {
		t.Fatalf("ledger after a panic: %+v", r)
	}
	if len(rec.snapshot()) != 0 {
		t.Fatal("the step after a failed one ran")
	}
}

// TestAStepFailedInPartLetsTheLaterStepsRun: a settle step whose failure
// is partial (one stream failed transiently, the others settled) must not
// stop retention, trim and reap for the whole star: the later steps run,
// and the cycle ends failed, to be retried.
func TestAStepFailedInPartLetsTheLaterStepsRun(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	rec := newRecorder()
	partial := step{"settle", func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		return cycle.Counts{ObjectsPublished: 3}, &cycle.PartialError{Err: errors.New("stream 0a: S3 503 after 6 attempts")}
	}}
	counts, err := daemon.RunOnce(ctx, testConfig(t, "once"), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{partial, rec}}, cycle.Options{})
	if err == nil || !strings.Contains(err.Error(), "stream 0a") {
		t.Fatalf("a partial failure must fail the cycle: %v", err)
	}
	if len(rec.snapshot()) != 1 {
		t.Fatal("the step after a partly failed one did not run")
	}
	if counts.ObjectsPublished != 3 {
		t.Fatalf("counts %+v", counts)
	}
	if r := lastRuns(t, db, 1)[0]; r.Outcome != catalog.RunFailed || !strings.Contains(r.Error, "step settle") {
		t.Fatalf("ledger: %+v", r)
	}
}

// tidy is a cycle.Finally step that counts its runs.
type tidy struct{ runs int }

func (t *tidy) Name() string { return "sidecars" }
func (t *tidy) Run(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
	t.runs++
	return cycle.Counts{}, nil
}
func (t *tidy) Finally() {}

// TestAFailedStepSkipsAllButTheFinallySteps: a step that ends the cycle
// (a plain error, or a halt) skips the later steps but a cycle.Finally
// one (the sidecar step's local tidying), which runs once; the cycle ends
// with the first step's error, failed or halted.
func TestAFailedStepSkipsAllButTheFinallySteps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, outcome string
		err           error
	}{
		{"error", catalog.RunFailed, errors.New("retention: connection reset")},
		{"halt", catalog.RunHalted, cycle.Haltf("two entries cover record 7")},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, _ := newDB(t)
			rec, td := newRecorder(), &tidy{}
			failing := step{"retention", func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
				return cycle.Counts{}, c.err
			}}
			_, err := daemon.RunOnce(context.Background(), testConfig(t, "once"), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(),
				Requests: db.Requests(), Steps: []cycle.Step{failing, rec, td}}, cycle.Options{})
			if err == nil || !strings.Contains(err.Error(), "step retention") {
				t.Fatalf("the cycle must end with the failed step's error: %v", err)
			}
			if len(rec.snapshot()) != 0 {
				t.Fatal("a step after the one that ended the cycle ran")
			}
			if td.runs != 1 {
				t.Fatalf("the Finally step ran %d times, want 1", td.runs)
			}
			if r := lastRuns(t, db, 1)[0]; r.Outcome != c.outcome || !strings.Contains(r.Error, "step retention") {
				t.Fatalf("ledger: %+v", r)
			}
		})
	}
}

// TestCyclePrunesHistory: a cycle prunes the ledger and the consumed admin
// requests older than HistoryKeep, at most PruneBatch rows of each, and a
// dry run prunes (and records) nothing.
func TestCyclePrunesHistory(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	c := testenv.Conn(t, url)
	// 5 finished runs and 5 consumed requests from 40 days ago.
	if _, err := c.Exec(ctx, `INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome)
		SELECT 's1', 'old', 1, 'schedule', now() - interval '40 days', now() - interval '40 days', 'ok' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `INSERT INTO nova.admin_requests (star, kind, requested_at, consumed_at, consumed_by)
		SELECT 's1', 'trigger', now() - interval '41 days', now() - interval '40 days', 'old' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	count := func() (runs, reqs int) {
		t.Helper()
		if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM nova.auditor_runs), (SELECT count(*) FROM nova.admin_requests)`).Scan(&runs, &reqs); err != nil {
			t.Fatal(err)
		}
		return runs, reqs
	}
	cfg := testConfig(t, "once")
	cfg.HistoryKeep = 30 * 24 * time.Hour
	cfg.PruneBatch = 3
	if _, err := daemon.RunOnce(ctx, cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{newRecorder()}}, cycle.Options{DryRun: true}); err != nil {
		t.Fatal(err)
	}
	if runs, reqs := count(); runs != 5 || reqs != 5 {
		t.Fatalf("after a dry run: %d runs, %d requests (nothing pruned or recorded: 5 and 5)", runs, reqs)
	}
	if _, err := daemon.RunOnce(ctx, cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{newRecorder()}}, cycle.Options{}); err != nil {
		t.Fatal(err)
	}
	// 3 of the old runs went (the latest of them is not the latest success:
	// this cycle's run is), 3 of the requests.
	if runs, reqs := count(); runs != 3 || reqs != 2 {
		t.Fatalf("after one cycle: %d runs, %d requests, want 3 and 2", runs, reqs)
	}
	if _, err := daemon.RunOnce(ctx, cfg, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: []cycle.Step{newRecorder()}}, cycle.Options{}); err != nil {
		t.Fatal(err)
	}
	if runs, reqs := count(); runs != 2 || reqs != 0 {
		t.Fatalf("after two cycles: %d runs (the two cycles'), %d requests", runs, reqs)
	}
}
