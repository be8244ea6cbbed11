package daemon_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/trim"
)

// TestErasureGaugesCountersAndStatus: the pending erasures (one waiting
// for settle, one for release of its quarantined stream, one for its
// rewrite) are the erasure gauges and the status section, with the oldest
// one's age by the database clock and the configured bound; the cycles'
// tombstone, rewrite and applied counts become counters, and the rewrite
// bytes are the erase step's only (not settle's).
func TestErasureGaugesCountersAndStatus(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	c := testenv.Conn(t, url)
	ids := []catalog.StreamID{{15: 1}, {15: 2}, {15: 3}}
	for i, id := range ids {
		if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
			t.Fatal(err)
		}
		if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: int64(i), FooterOffset: 1, FooterLength: 1,
			Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: 0, Count: 10}}}}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.Erasures().RecordErasure(ctx, id, 2, 3); err != nil {
			t.Fatal(err)
		}
	}
	// Stream 3's records are settled (as far as status cares): its erasure
	// waits for its rewrite. Stream 1's is the oldest, by 30 hours.
	if _, err := c.Exec(ctx, `UPDATE nova.streams SET settled_through = 10 WHERE stream_id = $1`, ids[2]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `UPDATE nova.erasures SET requested_at = now() - interval '30 hours' WHERE stream_id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	// A malformed row another writer stored (the contract checks only
	// record_count > 0): pending for ever, and said so.
	if _, err := c.Exec(ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ($1, -5, 2)`, ids[2]); err != nil {
		t.Fatal(err)
	}
	erase := step{name: daemon.EraseStep, run: func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		return cycle.Counts{RecordsTombstoned: 3, ObjectsRewritten: 1, ErasuresApplied: 1,
			BytesCopied: 100, BytesFetched: 10, BytesUploaded: 12}, nil
	}}
	settle := step{name: "settle", run: func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		return cycle.Counts{RecordsTombstoned: 2, BytesCopied: 1000, BytesFetched: 1000, BytesUploaded: 1000}, nil
	}}
	cfg := withHolder(every(t, "@every 1h"), "d1")
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.RunNow = true
	cfg.ErasureAlertAfter = 24 * time.Hour
	s := serve(t, cfg, db, settle, erase)
	eventually(t, 5*time.Second, "leads", s.leader)
	l, _ := lease(t, db)
	if err := db.Settle().Quarantine(ctx, l.Fence, ids[1], "", "checksum", "bad DataCRC"); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "erasure gauges and the cycle's counters", func() bool {
		return testutil.ToFloat64(s.m.ErasuresPending) == 4 && testutil.ToFloat64(s.m.ErasuresQuarantined) == 1 &&
			testutil.ToFloat64(s.m.RecordsTombstoned) == 5
	})
	if age := testutil.ToFloat64(s.m.ErasureOldestAge); age < 30*3600-60 || age > 30*3600+60 {
		t.Fatalf("oldest pending erasure age %v, want 30h", age)
	}
	if b := testutil.ToFloat64(s.m.ErasureBound); b != 24*3600 {
		t.Fatalf("bound %v", b)
	}
	for kind, want := range map[string]float64{"copied": 100, "fetched": 10, "uploaded": 12} {
		if got := testutil.ToFloat64(s.m.ErasureRewriteBytes.WithLabelValues(kind)); got != want {
			t.Errorf("rewrite bytes %s = %v, want %v (the erase step's only)", kind, got, want)
		}
	}
	if testutil.ToFloat64(s.m.ObjectsRewritten) != 1 || testutil.ToFloat64(s.m.ErasuresApplied) != 1 {
		t.Fatalf("rewritten %v applied %v", testutil.ToFloat64(s.m.ObjectsRewritten), testutil.ToFloat64(s.m.ErasuresApplied))
	}
	base := "http://" + s.d.Addr()
	body := metrics(t, base)
	for _, want := range []string{`nova_auditor_erasures_pending 4`, `nova_auditor_erasures_pending_quarantined 1`,
		`nova_auditor_erasure_pending_bound_seconds 86400`, `nova_auditor_records_tombstoned_total 5`,
		`nova_auditor_objects_rewritten_total 1`, `nova_auditor_erasures_applied_total 1`,
		`nova_auditor_erasure_rewrite_bytes_total{kind="fetched"} 10`, `nova_auditor_erasure_oldest_pending_age_seconds 108`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	_, js := get(t, base+"/status")
	var st daemon.Status
	if err := json.Unmarshal([]byte(js), &st); err != nil {
		t.Fatal(err)
	}
	e := st.Erasures
	if e.Pending != 4 || e.Quarantined != 1 || e.AlertAfter != 24*3600 || e.OldestRequestedAt == nil ||
		e.OldestAge < 30*3600-60 || len(e.Oldest) != 4 {
		t.Fatalf("status erasures %+v", e)
	}
	want := []struct {
		id   catalog.StreamID
		wait string
	}{{ids[0], daemon.ErasureWaitsSettle}, {ids[1], daemon.ErasureWaitsRelease}, {ids[2], daemon.ErasureWaitsRewrite}, {ids[2], daemon.ErasureWaitsMalformed}}
	for i, w := range want {
		o := e.Oldest[i]
		first, count := int64(2), int64(3)
		if w.wait == daemon.ErasureWaitsMalformed {
			first, count = -5, 2
		}
		if o.Stream != w.id.String() || o.WaitingFor != w.wait || o.FirstRecord != first || o.RecordCount != count ||
			o.Quarantined != (w.wait == daemon.ErasureWaitsRelease) {
			t.Errorf("pending erasure %d: %+v, want stream %s waiting for %s", i, o, w.id.String(), w.wait)
		}
	}
	if e.Oldest[0].Age < 30*3600-60 || e.Oldest[1].Age > 60 {
		t.Errorf("ages %v %v", e.Oldest[0].Age, e.Oldest[1].Age)
	}
	var text strings.Builder
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"4 pending, 1 on quarantined streams; oldest 30h0m", "a malformed row is never applied", "(alert after 24h0m)", "PAST THE ALERT BOUND",
		"PENDING ERASURE (4)", "[2, 5)", "release: the stream is quarantined", "settle: records still in transit", "rewrite:"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("text status lacks %q:\n%s", w, text.String())
		}
	}
	t.Logf("status:\n%s", text.String())

	// Applied erasures leave the gauges: none pending, age 0.
	if _, err := c.Exec(ctx, `UPDATE nova.erasures SET applied_at = now()`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "no pending erasure", func() bool {
		return testutil.ToFloat64(s.m.ErasuresPending) == 0 && testutil.ToFloat64(s.m.ErasureOldestAge) == 0
	})
	st, err := daemon.BuildStatus(ctx, db.Ledger(), daemon.StatusOptions{Star: "s1", Policy: cfg.Policy, Trim: trim.Viewer{DB: db.Trim()}})
	if err != nil {
		t.Fatal(err)
	}
	text.Reset()
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if st.Erasures.Pending != 0 || len(st.Erasures.Oldest) != 0 || st.Erasures.OldestRequestedAt != nil ||
		!strings.Contains(text.String(), "none pending") {
		t.Fatalf("status with nothing pending: %+v\n%s", st.Erasures, text.String())
	}
}

// TestTransitWindowOfAppliedErasures: applied erasures may keep copies of
// their records in transit slots until trim reaps them; the gauges and
// status give the window (age cap + reap grace + two cycle intervals, or
// back to the oldest transit data still referenced when that is older)
// and how many erasures the ledger says were applied within it.
func TestTransitWindowOfAppliedErasures(t *testing.T) {
	t.Parallel()
	db, url := newDB(t)
	ctx := context.Background()
	c := testenv.Conn(t, url)
	id := catalog.StreamID{15: 7}
	if err := writepath.New(db).CreateStream(ctx, id, "s1", "b1"); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).Absorb(ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: 0, FooterOffset: 1, FooterLength: 1,
		Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: 0, Count: 10}}}}); err != nil {
		t.Fatal(err)
	}
	// An earlier leader's runs: one applied 5 erasures 30 hours ago, the
	// next one, 27 hours ago, none (it starts before the window and may
	// have run into it, so it counts).
	if _, err := c.Exec(ctx, `INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome, erasures_applied)
		VALUES ('s1', 'earlier', 1, 'schedule', now() - interval '30 hours', now() - interval '30 hours' + interval '1 second', 'ok', 5),
		('s1', 'earlier', 1, 'schedule', now() - interval '27 hours', now() - interval '27 hours' + interval '1 second', 'ok', 0)`); err != nil {
		t.Fatal(err)
	}
	erase := step{name: daemon.EraseStep, run: func(context.Context, catalog.Fence, cycle.Options) (cycle.Counts, error) {
		return cycle.Counts{ErasuresApplied: 2}, nil
	}}
	cfg := withHolder(every(t, "@every 1h"), "t1")
	cfg.RunNow = true
	cfg.ReapGrace = 10 * time.Minute
	s := serve(t, cfg, db, erase)
	// 24h age cap + 10m grace + two 1h cycles.
	const bound = 26*3600 + 600
	eventually(t, 5*time.Second, "the cycle's 2 erasures in a window of the bound", func() bool {
		return testutil.ToFloat64(s.m.ErasureTransitWindow) == bound && testutil.ToFloat64(s.m.ErasuresInTransit) == 2
	})

	// The stream's data is 40 hours old (a quarantine held it, or the age
	// cap was breached): trim cannot pass its slot, so the window reaches
	// back to it, and the earlier run's erasures are in it.
	if _, err := c.Exec(ctx, `UPDATE nova.due_markers SET since = now() - interval '40 hours'`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "a window of 40 hours with 7 erasures", func() bool {
		w := testutil.ToFloat64(s.m.ErasureTransitWindow)
		return w >= 40*3600 && w < 40*3600+60 && testutil.ToFloat64(s.m.ErasuresInTransit) == 7
	})
	st, err := daemon.BuildStatus(ctx, db.Ledger(), daemon.StatusOptions{Star: "s1", Policy: cfg.Policy, ReapGrace: cfg.ReapGrace, CycleInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	e := st.Erasures
	if e.TransitBound != bound || e.TransitWindow < 40*3600 || e.AppliedInTransitWindow != 7 {
		t.Fatalf("status erasures: %+v", e)
	}
	var text strings.Builder
	if err := st.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"erasures in transit", "7 applied in the last 40h0m", "may still have copies in transit slots until trim reaps them",
		"at most age cap + reap grace + two cycles after the slot's absorb: 26h10m", "now 40h0m: transit data that old is still referenced"} {
		if !strings.Contains(text.String(), w) {
			t.Errorf("status text lacks %q:\n%s", w, text.String())
		}
	}
}
