package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/filestore"
	"github.com/nova/auditor/sim"
)

// TestServeTriggerStreamOutlastsTheBudget: two trigger --stream requests
// wait when the leader starts, so its first cycle forces both streams. The
// cycle's budget (one stream's window of bytes, or one stream) runs out
// before it reaches the second stream. That request is no failure: it
// stays open, forced, and the next cycle (at once, not the hourly
// schedule) settles its stream through the next_record it was asked at.
func TestServeTriggerStreamOutlastsTheBudget(t *testing.T) {
	t.Parallel()
	for name, budget := range map[string][]string{
		"bytes":   {"--settle-max-bytes", "1"},
		"streams": {"--settle-max-streams", "1"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			url, db := migratedDBNoStar(t)
			ctx := context.Background()
			if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 4, Content: sim.DefaultContent(11)}); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			fs, err := filestore.New(objstore.FileConfig{Root: root})
			if err != nil {
				t.Fatal(err)
			}
			if err := fs.CreateBucket("nova"); err != nil { // what serve creates as it starts
				t.Fatal(err)
			}
			if _, err := sim.Write(ctx, db, sim.Storage{Store: fs, Standard: "nova"}, sim.WriteOptions{Star: "s1", Flights: 4,
				FlightBytes: 64 << 10, FlightInterval: time.Minute}); err != nil {
				t.Fatal(err)
			}
			streams, err := db.Streams().StreamsOfStar(ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			var reqs []catalog.AdminRequest
			for _, st := range streams {
				if st.NextRecord == 0 || len(reqs) == 2 {
					continue
				}
				r, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, &st.ID, "op")
				if err != nil {
					t.Fatal(err)
				}
				reqs = append(reqs, r)
			}
			if len(reqs) != 2 {
				t.Fatalf("only %d streams got records", len(reqs))
			}
			// One stream at a time, so the budget runs out in the order
			// the streams are taken.
			startServe(t, "d1", url, append([]string{"--fs-root", root, "--settle-concurrency", "1"}, budget...)...)
			eventually(t, 30*time.Second, "both requests consumed", func() bool {
				for _, r := range reqs {
					got, err := db.Requests().AdminRequest(ctx, r.ID)
					if err != nil {
						t.Fatal(err)
					}
					if got.ConsumedAt == nil {
						return false
					}
				}
				return true
			})
			deferred := 0
			for _, r := range reqs {
				got, err := db.Requests().AdminRequest(ctx, r.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.Outcome != catalog.TriggerDone {
					t.Fatalf("request %d: %s %q", got.ID, got.Outcome, got.Reason)
				}
				st, err := db.Streams().Stream(ctx, *got.Stream)
				if err != nil {
					t.Fatal(err)
				}
				if st.SettledThrough < *got.TargetRecord {
					t.Fatalf("stream %s settled through %d, asked through %d", st.ID, st.SettledThrough, *got.TargetRecord)
				}
				if got.Attempts > 1 {
					deferred++
					if !strings.Contains(got.LastError, "budget") {
						t.Fatalf("request %d left open by its first cycle with %q", got.ID, got.LastError)
					}
				}
				t.Logf("request %d: %s after %d cycles (%s)", got.ID, got.Outcome, got.Attempts, got.LastError)
			}
			if deferred != 1 {
				t.Fatalf("%d requests waited for a second cycle, want 1: the budget did not bind", deferred)
			}
		})
	}
}

// TestTriggerWaitExitsWithTheCycleOutcome: trigger --wait returns once the
// cycle that ran the request has finished, not when it was taken: the
// request is consumed, done, and its run ended ok when the command
// returns. Past --timeout (the star paused, so no cycle runs) it exits 7,
// and on a halted star 1 at once, without waiting out the timeout.
func TestTriggerWaitExitsWithTheCycleOutcome(t *testing.T) {
	t.Parallel()
	url, db := migratedDBNoStar(t)
	ctx := context.Background()
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 2, Content: sim.DefaultContent(12)}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	fs, err := filestore.New(objstore.FileConfig{Root: root})
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.CreateBucket("nova"); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.Write(ctx, db, sim.Storage{Store: fs, Standard: "nova"}, sim.WriteOptions{Star: "s1", Flights: 4,
		FlightBytes: 64 << 10, FlightInterval: time.Minute}); err != nil {
		t.Fatal(err)
	}
	streams, err := db.Streams().StreamsOfStar(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var target catalog.Stream
	for _, st := range streams {
		if st.NextRecord > 0 {
			target = st
		}
	}
	startServe(t, "d1", url, "--fs-root", root)
	eventually(t, 5*time.Second, "leads", func() bool { l, live := currentLease(t, db); return live && l.Holder == "d1" })

	code, out, errs := runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--stream", target.ID.String(),
		"--wait", "--timeout", "30s")
	if code != exitOK || !strings.Contains(out, "taken by d1") || !strings.Contains(out, "done: run") {
		t.Fatalf("trigger --wait: %d %q %q", code, out, errs)
	}
	reqs, err := db.Requests().AdminRequests(ctx, "s1", false, 1)
	if err != nil {
		t.Fatal(err)
	}
	if r := reqs[0]; r.ConsumedAt == nil || r.Outcome != catalog.TriggerDone || r.RunID == nil {
		t.Fatalf("trigger --wait returned before its cycle finished: %+v", r)
	}
	run, err := db.Ledger().Run(ctx, *reqs[0].RunID)
	if err != nil || run.Outcome != catalog.RunOK || run.EndedAt == nil {
		t.Fatalf("the request's run: %+v %v", run, err)
	}
	if got, err := db.Streams().Stream(ctx, target.ID); err != nil || got.SettledThrough != got.NextRecord {
		t.Fatalf("the triggered stream: %+v %v", got, err)
	}

	// Paused: no cycle takes it; --timeout ends the wait with exit 7.
	if code, _, _ := runCLI(t, "pause", "--star", "s1", "--database-url", url); code != exitOK {
		t.Fatal("pause failed")
	}
	code, _, errs = runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "--timeout", "1500ms")
	if code != exitTimeout || !strings.Contains(errs, "not taken") {
		t.Fatalf("trigger --wait while paused: %d %q", code, errs)
	}
	if code, _, _ := runCLI(t, "resume", "--star", "s1", "--database-url", url); code != exitOK {
		t.Fatal("resume failed")
	}

	// Halted: no cycle runs until auditor resume, so the wait ends at once.
	execSQL(t, url, `INSERT INTO nova.auditor_state (star, halted_reason, halted_at) VALUES ('s1', 'a test halt', now())
		ON CONFLICT (star) DO UPDATE SET halted_reason = 'a test halt', halted_at = now()`)
	start := time.Now()
	code, _, errs = runCLI(t, "trigger", "--star", "s1", "--database-url", url, "--wait", "--timeout", "30s")
	if code != exitFailure || !strings.Contains(errs, "a test halt") || time.Since(start) > 10*time.Second {
		t.Fatalf("trigger --wait on a halted star: %d after %s %q", code, time.Since(start), errs)
	}
}
