package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
)

func every(t *testing.T, spec string) daemon.Config {
	t.Helper()
	cfg := testConfig(t, "")
	s, err := config.ParseSchedule(spec)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Schedule = s
	return cfg
}

func withHolder(cfg daemon.Config, holder string) daemon.Config {
	cfg.Holder = holder
	return cfg
}

func TestOneLeaderAndAHandOverOnShutdown(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	cfg := every(t, "@every 1s")
	ra, rb := newRecorder(), newRecorder()
	a := serve(t, withHolder(cfg, "a"), db, ra)
	eventually(t, 5*time.Second, "a leads", a.leader)
	b := serve(t, withHolder(cfg, "b"), db, rb)
	ra.wait(t, 3*time.Second)
	time.Sleep(1500 * time.Millisecond)
	if b.leader() || len(rb.snapshot()) != 0 {
		t.Fatal("the standby leads or ran a cycle beside the leader")
	}
	first, _ := lease(t, db)

	// SIGTERM the leader: it releases, and the standby leads within a second.
	stopped := time.Now()
	a.stop(t, 10*time.Second)
	eventually(t, 2*time.Second, "b leads after a's release", b.leader)
	t.Logf("hand-over took %s", time.Since(stopped))
	second, live := lease(t, db)
	if !live || second.Holder != "b" || second.Token <= first.Token {
		t.Fatalf("lease after hand-over: %+v (before %+v)", second, first)
	}
	rb.wait(t, 3*time.Second)
	if testutil.ToFloat64(a.m.Leader) != 0 || testutil.ToFloat64(a.m.LeaseAcquisitions) != 1 {
		t.Fatal("a's metrics after stopping")
	}
}

func TestTriggerWakesTheLeaderAndForcesStreams(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	rec := newRecorder()
	s := serve(t, withHolder(every(t, "@every 1h"), "d1"), db, rec)
	eventually(t, 5*time.Second, "leads", s.leader)

	id := catalog.StreamID{0: 0xab, 15: 1}
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	req, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, &id, "op")
	if err != nil {
		t.Fatal(err)
	}
	asked := time.Now()
	rec.wait(t, 2*time.Second)
	t.Logf("trigger to cycle: %s", time.Since(asked))
	calls := rec.snapshot()
	if len(calls) != 1 || calls[0].Trigger != daemon.TriggerStream || len(calls[0].Streams) != 1 || calls[0].Streams[0] != id {
		t.Fatalf("cycle options %+v", calls)
	}
	// Consumed once the cycle has run (its stream, with nothing absorbed,
	// is settled through the next_record it was asked at).
	var got catalog.AdminRequest
	eventually(t, 2*time.Second, "the request consumed", func() bool {
		got, err = db.Requests().AdminRequest(ctx, req.ID)
		return err == nil && got.ConsumedAt != nil
	})
	if got.ConsumedBy != "d1" || got.Outcome != catalog.TriggerDone || got.RunID == nil || got.Attempts != 1 {
		t.Fatalf("request after the cycle: %+v", got)
	}
	// A plain trigger: a manual cycle with no forced streams.
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "op"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 2*time.Second)
	if c := rec.snapshot()[1]; c.Trigger != daemon.TriggerManual || len(c.Streams) != 0 {
		t.Fatalf("second cycle %+v", c)
	}
	eventually(t, 2*time.Second, "ledger rows", func() bool {
		runs := lastRuns(t, db, 5)
		return len(runs) == 2 && runs[0].Trigger == "manual" && runs[1].Trigger == "stream" && runs[0].Outcome == "ok"
	})
	eventually(t, 2*time.Second, "admin_requests_total{kind=trigger} = 2", func() bool {
		return testutil.ToFloat64(s.m.AdminRequests.WithLabelValues("trigger")) == 2
	})
}

func TestPauseStopsCyclesAndResumeRestartsThem(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	rec := newRecorder()
	s := serve(t, withHolder(every(t, "@every 1s"), "d1"), db, rec)
	rec.wait(t, 5*time.Second)

	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminPause, nil, "op"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "paused gauge", func() bool { return testutil.ToFloat64(s.m.Paused) == 1 })
	time.Sleep(300 * time.Millisecond) // a cycle already started may finish
	n := len(rec.snapshot())
	trig, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "op")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if m := len(rec.snapshot()); m != n {
		t.Fatalf("%d cycles ran while paused", m-n)
	}
	if !s.leader() {
		t.Fatal("a paused leader gave up its lease")
	}
	if r, _ := db.Requests().AdminRequest(ctx, trig.ID); r.ConsumedAt != nil {
		t.Fatal("a trigger was consumed while paused")
	}
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminResume, nil, "op"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 2*time.Second)
	eventually(t, 2*time.Second, "the waiting trigger ran", func() bool {
		r, _ := db.Requests().AdminRequest(ctx, trig.ID)
		return r.ConsumedAt != nil
	})
	rec.wait(t, 3*time.Second) // and the schedule goes on
	if testutil.ToFloat64(s.m.Paused) != 0 {
		t.Fatal("paused gauge after resume")
	}
}

// fencedLoop is a step that does fenced work until its context ends or a
// fenced statement fails, like a long settle would.
func fencedLoop(db *catalog.DB, started chan<- struct{}) cycle.Step {
	return step{"loop", func(ctx context.Context, f catalog.Fence, _ cycle.Options) (cycle.Counts, error) {
		started <- struct{}{}
		for {
			if err := db.Settle().AbandonPublish(ctx, f, -1, 0); err != nil {
				return cycle.Counts{}, err
			}
			select {
			case <-ctx.Done():
				return cycle.Counts{}, ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}}
}

func TestALostLeaseStopsTheCycleAndReturnsToStandby(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	c := testenv.Conn(t, url)
	started := make(chan struct{}, 10)
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.RunNow = true
	s := serve(t, cfg, db, fencedLoop(db, started))
	<-started
	before, _ := lease(t, db)

	// Another holder takes the lease behind the daemon's back (as after a
	// long pause of this process): the next fenced statement fails.
	if _, err := c.Exec(context.Background(), `UPDATE nova.auditor_leases SET holder = 'thief', token = token + 1,
		expires_at = now() + interval '1500 milliseconds' WHERE star = 's1'`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "steps down", func() bool { return !s.leader() })
	eventually(t, 2*time.Second, "ledger row", func() bool {
		r := lastRuns(t, db, 1)
		return len(r) == 1 && r[0].Outcome == catalog.RunLostLease
	})
	if v := testutil.ToFloat64(s.m.LeaseLosses); v != 1 {
		t.Fatalf("lease_losses_total = %v", v)
	}
	// When the thief's lease expires, the daemon leads again with a higher token.
	eventually(t, 4*time.Second, "leads again", s.leader)
	after, _ := lease(t, db)
	if after.Holder != "d1" || after.Token != before.Token+2 {
		t.Fatalf("lease %+v after %+v", after, before)
	}
}

func TestHaltStopsCyclesKeepsHTTPAndResumeClearsIt(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	ctx := context.Background()
	var calls, halting atomic.Int32
	halting.Store(1)
	check := step{"check", func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		calls.Add(1)
		if halting.Load() == 1 {
			return cycle.Counts{}, fmt.Errorf("stream 07: catalog entries [0, 10) and [5, 20) overlap: %w", catalog.ErrInvariant)
		}
		return cycle.Counts{}, nil
	}}
	cfg := withHolder(every(t, "@every 1s"), "d1")
	cfg.HTTPAddr = "127.0.0.1:0"
	s := serve(t, cfg, db, check)
	eventually(t, 5*time.Second, "halted", func() bool { return testutil.ToFloat64(s.m.Halted) == 1 })
	n := calls.Load()
	time.Sleep(2500 * time.Millisecond)
	if calls.Load() != n {
		t.Fatal("cycles ran while halted")
	}
	base := "http://" + s.d.Addr()
	if code, _ := get(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz while halted: %d", code)
	}
	code, body := get(t, base+"/status")
	var st daemon.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil || code != 200 {
		t.Fatalf("/status: %d %v", code, err)
	}
	if !st.Halted || !strings.Contains(st.HaltedReason, "overlap") || !st.Leader.Live || st.Leader.Holder != "d1" ||
		len(st.LastRuns) == 0 || st.LastRuns[0].Outcome != "halted" {
		t.Fatalf("status while halted: %+v", st)
	}
	if !strings.Contains(metrics(t, base), "nova_auditor_halted 1") {
		t.Fatal("/metrics does not show the halt")
	}

	halting.Store(0)
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminResume, nil, "op"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 4*time.Second, "cycles again", func() bool { return calls.Load() > n })
	eventually(t, 2*time.Second, "halted gauge cleared", func() bool { return testutil.ToFloat64(s.m.Halted) == 0 })
}

func TestShutdownLetsTheCycleFinishOrCancelsIt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		work    time.Duration
		outcome string
	}{
		{"finishes", 3 * time.Second, time.Second, catalog.RunOK},
		{"canceled", 300 * time.Millisecond, time.Minute, catalog.RunCanceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			db, _ := newDB(t)
			started := make(chan struct{}, 1)
			slow := step{"slow", func(ctx context.Context, _ catalog.Fence, _ cycle.Options) (cycle.Counts, error) {
				started <- struct{}{}
				select {
				case <-time.After(tc.work):
					return cycle.Counts{StreamsSettled: 1}, nil
				case <-ctx.Done():
					return cycle.Counts{}, ctx.Err()
				}
			}}
			cfg := withHolder(every(t, "@every 1h"), "d1")
			cfg.RunNow = true
			cfg.ShutdownTimeout = tc.timeout
			s := serve(t, cfg, db, slow)
			<-started
			begin := time.Now()
			s.stop(t, 10*time.Second)
			took := time.Since(begin)
			if took > tc.work+time.Second || took > tc.timeout+time.Second {
				t.Fatalf("shutdown took %s", took)
			}
			r := lastRuns(t, db, 1)
			if len(r) != 1 || r[0].Outcome != tc.outcome {
				t.Fatalf("run after shutdown: %+v", r)
			}
			if _, live := lease(t, db); live {
				t.Fatal("the lease is still live after shutdown")
			}
		})
	}
}

func TestFailedCyclesRetryWithBackoffAndScheduleSkipsWhileRunning(t *testing.T) {
	t.Parallel()
	db, _ := newDB(t)
	var n, concurrent, overlap atomic.Int32
	flaky := step{"flaky", func(ctx context.Context, _ catalog.Fence, _ cycle.Options) (cycle.Counts, error) {
		if concurrent.Add(1) > 1 {
			overlap.Store(1)
		}
		defer concurrent.Add(-1)
		switch n.Add(1) {
		case 1:
			return cycle.Counts{}, errors.New("s3: 503 SlowDown")
		case 2:
			panic("a bug in a step")
		case 3:
			time.Sleep(2500 * time.Millisecond) // the 1s schedule fires meanwhile
		}
		return cycle.Counts{}, nil
	}}
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.RunNow = true
	s := serve(t, cfg, db, flaky)
	eventually(t, 10*time.Second, "three runs", func() bool { return len(lastRuns(t, db, 5)) >= 3 })
	eventually(t, 5*time.Second, "the third finished", func() bool { return lastRuns(t, db, 1)[0].Outcome != "" })
	runs := lastRuns(t, db, 5)
	got := fmt.Sprintf("%s/%s %s/%s %s/%s", runs[2].Trigger, runs[2].Outcome, runs[1].Trigger, runs[1].Outcome, runs[0].Trigger, runs[0].Outcome)
	if got != "manual/failed retry/failed retry/ok" {
		t.Fatalf("runs: %s", got)
	}
	if !strings.Contains(runs[1].Error, "panic: a bug in a step") {
		t.Fatalf("panic not recorded: %q", runs[1].Error)
	}
	if v := testutil.ToFloat64(s.m.CycleRetries); v != 2 {
		t.Fatalf("cycle_retries_total = %v", v)
	}
	if v := testutil.ToFloat64(s.m.Cycles.WithLabelValues("retry", "failed")); v != 1 {
		t.Fatalf("cycles_total{retry,failed} = %v", v)
	}

	// A fast schedule with a slow cycle: ticks are skipped, never overlapped.
	db2, _ := newDB(t)
	n.Store(2)
	s2 := serve(t, withHolder(every(t, "@every 1s"), "d2"), db2, flaky)
	eventually(t, 8*time.Second, "a skipped tick", func() bool { return testutil.ToFloat64(s2.m.CyclesSkipped) >= 1 })
	if overlap.Load() != 0 {
		t.Fatal("two cycles ran at once")
	}
}

func TestMetastoreGaugesAndStatus(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	c := testenv.Conn(t, url)
	for i := byte(1); i <= 3; i++ {
		if err := writepath.New(db).CreateStream(ctx, catalog.StreamID{15: i}, "s1", "b1"); err != nil {
			t.Fatal(err)
		}
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(i), FooterOffset: 1, FooterLength: 1,
			Batches: []writepath.AbsorbBatch{{Stream: catalog.StreamID{15: i}, FirstRecord: 0, Count: 5}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Exec(ctx, `UPDATE nova.due_markers SET since = now() - interval '25 hours' WHERE stream_id = $1`, catalog.StreamID{15: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `UPDATE nova.due_markers SET since = now() - interval '10 minutes' WHERE stream_id = $1`, catalog.StreamID{15: 2}); err != nil {
		t.Fatal(err)
	}
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.HTTPAddr = "127.0.0.1:0"
	s := serve(t, cfg, db)
	eventually(t, 5*time.Second, "leads", s.leader)
	l, _ := lease(t, db)
	if err := db.Settle().Quarantine(ctx, l.Fence, catalog.StreamID{15: 2}, "", "checksum", "slot 1/2: bad DataCRC"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Second, "gauges", func() bool {
		return testutil.ToFloat64(s.m.DueStreams.WithLabelValues("standard")) == 1 &&
			testutil.ToFloat64(s.m.AgeCapBreached.WithLabelValues("standard")) == 1 &&
			testutil.ToFloat64(s.m.Quarantined) == 1 && testutil.ToFloat64(s.m.HeadSeq) == 4
	})
	if age := testutil.ToFloat64(s.m.OldestTransitAge.WithLabelValues("standard")); age < 25*3600-60 || age > 25*3600+60 {
		t.Fatalf("oldest transit age %v", age)
	}
	if lag := testutil.ToFloat64(s.m.SettleLag.WithLabelValues("standard")); lag < 25*3600-5*60-60 || lag > 25*3600 {
		t.Fatalf("settle lag %v", lag)
	}
	if capv := testutil.ToFloat64(s.m.AgeCap.WithLabelValues("standard")); capv != 24*3600 {
		t.Fatalf("standard age cap %v", capv)
	}
	if v := testutil.ToFloat64(s.m.HeadSeq); v != 4 || testutil.ToFloat64(s.m.TrimReleasable) != 1 {
		t.Fatalf("head seq %v", v)
	}

	base := "http://" + s.d.Addr()
	body := metrics(t, base)
	for _, want := range []string{`nova_auditor_leader 1`, `nova_auditor_build_info{go_version=`, `nova_auditor_due_streams{class="standard"} 1`,
		`nova_auditor_pg_transactions_total{outcome="ok"}`, `nova_auditor_quarantined 1`} {
		if !strings.Contains(body, want) {
			t.Fatalf("/metrics lacks %q", want)
		}
	}
	_, js := get(t, base+"/status")
	var st daemon.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	std := st.Classes[0]
	if st.DueTotal != 1 || len(st.DueStreams) != 1 || st.DueStreams[0].Stream != "00000000-0000-0000-0000-000000000001" ||
		std.OverAgeCap != 1 || std.AgeCapHeadroom > -3500 || len(st.Quarantine) != 1 || st.Quarantine[0].ErrorClass != "checksum" ||
		st.Trim.HeadSeq != 4 || st.Trim.Error != "" || st.Leader.Holder != "d1" {
		t.Fatalf("status %s", js)
	}
	var text strings.Builder
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"leader", "d1", "standard", "00000000-0000-0000-0000-000000000001", "bad DataCRC", "QUARANTINED (1)"} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("text status lacks %q:\n%s", want, text.String())
		}
	}
	t.Logf("status:\n%s", text.String())
	if code, body := get(t, base+"/readyz"); code != 200 || !strings.Contains(body, "leader") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// metrics fetches /metrics and checks it parses as the Prometheus text format.
func metrics(t *testing.T, base string) string {
	t.Helper()
	code, body := get(t, base+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	if _, err := p.TextToMetricFamilies(strings.NewReader(body)); err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return body
}

// TestDeferredStreamGaugesAndStatus: a stream the tail-growth rule holds
// back (a 1,000-byte tail, 300 bytes estimated behind it, 10 minutes old)
// is counted in the deferred gauges and /status, not in the due ones; the
// leader records no fraction, so both use the daemon's own.
func TestDeferredStreamGaugesAndStatus(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	c := testenv.Conn(t, url)
	id := catalog.StreamID{15: 1}
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	absorb := func(seq, first, count int64) {
		t.Helper()
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: seq, FooterOffset: 1, FooterLength: 1,
			Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: first, Count: count}}}}); err != nil {
			t.Fatal(err)
		}
	}
	absorb(1, 0, 10)
	l, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "setup", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	key := "tail/1"
	target := catalog.PublishTarget{Base: catalog.KeyBase{Stream: id, Epoch: 1}, Key: func(int32) string { return key }}
	in, err := writepath.OpenIntent(ctx, db, l.Fence, target, catalog.ClassStandard)
	if err != nil {
		t.Fatal(err)
	}
	e := catalog.Entry{Stream: id, Epoch: 1, RecordCount: 10, ObjectBytes: 1000, FooterOffset: 900, FooterLength: 80, MinTimestamp: 1, MaxTimestamp: 2}
	if err := writepath.CommitSettle(ctx, db, l.Fence, catalog.SettleCommit{Entry: e, PrevRevision: -1, IntentID: in.ID, ObjectKey: key}); err != nil {
		t.Fatal(err)
	}
	if err := db.Leases().ReleaseLease(ctx, l.Fence); err != nil {
		t.Fatal(err)
	}
	absorb(2, 10, 3)
	var since time.Time
	if err := c.QueryRow(ctx, `UPDATE nova.due_markers SET since = now() - interval '10 minutes' WHERE stream_id = $1 RETURNING since`, id).Scan(&since); err != nil {
		t.Fatal(err)
	}

	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.Policy.TailGrowth, cfg.Policy.CopyFloor = 1, 5000
	s := serve(t, cfg, db)
	eventually(t, 5*time.Second, "leads", s.leader)
	eventually(t, 2*time.Second, "deferred gauges", func() bool {
		return testutil.ToFloat64(s.m.DeferredStreams.WithLabelValues("standard")) == 1
	})
	if v := testutil.ToFloat64(s.m.DeferredTransitBytes.WithLabelValues("standard")); v != 300 {
		t.Errorf("deferred transit bytes %v, want 300", v)
	}
	if v, want := testutil.ToFloat64(s.m.DeferredDeadline.WithLabelValues("standard")), float64(since.Add(24*time.Hour).UnixNano())/1e9; v != want {
		t.Errorf("deferred deadline %v, want since + 24h = %v", v, want)
	}
	if due, lag := testutil.ToFloat64(s.m.DueStreams.WithLabelValues("standard")), testutil.ToFloat64(s.m.SettleLag.WithLabelValues("standard")); due != 0 || lag != 0 {
		t.Errorf("due streams %v, settle lag %v: want none", due, lag)
	}
	_, js := get(t, "http://"+s.d.Addr()+"/status")
	var st daemon.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	std := st.Classes[0]
	if st.Policy.Source != "leader" || st.Policy.TailGrowth != 1 || std.Deferred != 1 || std.DeferredBytes != 300 ||
		std.DeferredDeadline == nil || !std.DeferredDeadline.Equal(since.Add(24*time.Hour)) ||
		std.DeferredDueAt == nil || !std.DeferredDueAt.Equal(since.Add(18*time.Hour)) || st.DueTotal != 0 || len(st.DueStreams) != 0 {
		t.Fatalf("status %s", js)
	}
}
