package catalog_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

// EnvSQLScaleFull adds the 10^6-row history to TestPerCycleStatementsFlat
// (make bench-sql sets it); without it the test builds 10^4 and 10^5.
const EnvSQLScaleFull = "NOVA_SQL_SCALE_FULL"

// stmtPlan is one statement a catalog call ran, measured by EXPLAIN
// (ANALYZE, BUFFERS) just before it ran, with the same arguments.
type stmtPlan struct {
	Label   string   // call#n: the n-th statement of the call
	SQL     string   //
	Buffers int64    // shared buffers hit or read by the plan (deterministic, unlike time)
	Rows    int64    // rows the plan returned (the work)
	Millis  float64  // execution time
	Scans   []string // "Index Scan catalog_pkey on catalog", "Seq Scan on auditor_runs", ...
	Plan    string   // the plan, as JSON
}

// planProbe is a pgx tracer that, while a label is set, runs every data
// statement first under EXPLAIN (ANALYZE, BUFFERS) on the same connection,
// in a transaction (or a savepoint of the caller's) that it rolls back, so
// the plan is measured on exactly the state and arguments the statement
// then runs with, and changes nothing.
type planProbe struct {
	mu    sync.Mutex
	label string
	n     int
	plans []stmtPlan
	errs  []error
}

func (p *planProbe) start(label string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label, p.n = label, 0
}

func (p *planProbe) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.label = ""
}

func (p *planProbe) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (p *planProbe) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	// The probe's own statements come back through here while it holds the
	// lock: TryLock lets them through unprobed.
	if !p.mu.TryLock() {
		return ctx
	}
	defer p.mu.Unlock()
	if p.label == "" {
		return ctx
	}
	sql := strings.TrimSpace(data.SQL)
	verb := ""
	if w := strings.Fields(sql); len(w) > 0 {
		verb = strings.ToUpper(w[0])
	}
	switch verb {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "WITH":
	default:
		return ctx // BEGIN, COMMIT, ...
	}
	p.n++
	label := fmt.Sprintf("%s#%d", p.label, p.n)
	begin, end := "BEGIN", "ROLLBACK"
	if conn.PgConn().TxStatus() == 'T' {
		begin, end = "SAVEPOINT plan_probe", "ROLLBACK TO SAVEPOINT plan_probe"
	}
	if _, err := conn.Exec(ctx, begin); err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: %s: %w", label, begin, err))
		return ctx
	}
	var js []byte
	err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, data.Args...).Scan(&js)
	if _, rerr := conn.Exec(ctx, end); rerr != nil && err == nil {
		err = rerr
	}
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s: explain %q: %w", label, sql, err))
		return ctx
	}
	var out []struct {
		Plan          planNode `json:"Plan"`
		ExecutionTime float64  `json:"Execution Time"`
	}
	if err := json.Unmarshal(js, &out); err != nil || len(out) != 1 {
		p.errs = append(p.errs, fmt.Errorf("%s: decode plan: %v", label, err))
		return ctx
	}
	sp := stmtPlan{Label: label, SQL: sql, Buffers: out[0].Plan.SharedHit + out[0].Plan.SharedRead, Rows: out[0].Plan.Rows,
		Millis: out[0].ExecutionTime, Plan: string(js)}
	out[0].Plan.scans(&sp.Scans)
	p.plans = append(p.plans, sp)
	return ctx
}

type planNode struct {
	NodeType   string     `json:"Node Type"`
	Relation   string     `json:"Relation Name"`
	Index      string     `json:"Index Name"`
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	Rows       int64      `json:"Actual Rows"`
	Plans      []planNode `json:"Plans"`
}

func (n planNode) scans(out *[]string) {
	if n.Relation != "" {
		s := n.NodeType + " on " + n.Relation
		if n.Index != "" {
			s = n.NodeType + " " + n.Index + " on " + n.Relation
		}
		*out = append(*out, s)
	}
	for _, c := range n.Plans {
		c.scans(out)
	}
}

// The stream the cycle settles (with n catalog entries behind it) and the
// retention-enabled streams (n entries over n/500 of them, the first
// retentionMoved of which have new entries below low_record).
var hot = catalog.StreamID{0: 0xa1, 15: 1}

const (
	entriesPerRetained = 500
	retentionMoved     = 5
	retiredPerMoved    = 20
)

// buildHistory fills a fresh database with n rows of each kind of history,
// with generate_series (seconds for 10^6): n catalog entries of the hot
// stream, n entries spread over retention-enabled streams, n finished runs
// and n consumed admin requests within the last 29 days (plus 10 of each
// past 30 days), two runs an earlier holder left open, three open trigger
// requests, n applied erasures of the hot stream and three pending ones.
func buildHistory(t testing.TB, ctx context.Context, conn *pgx.Conn, n int) {
	t.Helper()
	m := n / entriesPerRetained
	stmts := []string{
		`INSERT INTO nova.stars (star, chain_class, next_seq) VALUES ('s1', 'standard', 2)`,
		`INSERT INTO nova.star_epochs (star, epoch) VALUES ('s1', 1)`,
		`INSERT INTO nova.auditor_leases (star, holder, token, expires_at) VALUES ('s1', 'earlier', 5, now() - interval '1 minute')`,
		fmt.Sprintf(`INSERT INTO nova.streams (stream_id, star, bucket, class, next_record, settled_through)
			VALUES ('%s', 's1', 'b1', 'standard', %d, %d)`, hot, 10*n+10, 10*n),
		fmt.Sprintf(`INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
			footer_offset, footer_length, min_timestamp, max_timestamp)
			SELECT '%s', 1, i * 10, 0, 10, 1000, 900, 80, i, i FROM generate_series(0, %d) i`, hot, n-1),
		fmt.Sprintf(`INSERT INTO nova.span_refs (stream_id, first_record, record_count, star, class, slot_epochs, slot_seqs,
			footer_offsets, footer_lengths, absorbed_at)
			VALUES ('%s', %d, 10, 's1', 'standard', '{1}', '{1}', '{61}', '{100}', now() - interval '1 hour')`, hot, 10*n),
		fmt.Sprintf(`INSERT INTO nova.due_markers (stream_id, class, since) VALUES ('%s', 'standard', now() - interval '1 hour')`, hot),
		// Retention-enabled streams: entries [1000, 6000) in tens, low_record
		// 1000 and already applied, except the first few whose low_record
		// rose by retiredPerMoved entries. Each stream's entries are stored
		// together at every size, so the buffers compare the statements,
		// not the heap's layout.
		fmt.Sprintf(`INSERT INTO nova.streams (stream_id, star, bucket, class, next_record, settled_through, low_record)
			SELECT ('00000000-0000-0000-0001-' || lpad(to_hex(j), 12, '0'))::uuid, 's1', 'b1', 'standard', 6000, 6000,
				CASE WHEN j <= %d THEN %d ELSE 1000 END
			FROM generate_series(1, %d) j`, retentionMoved, 1000+10*retiredPerMoved, m),
		fmt.Sprintf(`INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
			footer_offset, footer_length, min_timestamp, max_timestamp)
			SELECT ('00000000-0000-0000-0001-' || lpad(to_hex(j), 12, '0'))::uuid, 1, 1000 + i * 10, 0, 10, 1000, 900, 80, i, i
			FROM generate_series(1, %d) j, generate_series(0, %d) i ORDER BY j, i`, m, entriesPerRetained-1),
		// The ledger: n runs over the last 29 days (one in ten failed), 10
		// past the window, 2 left open by the earlier holder.
		fmt.Sprintf(`INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome)
			SELECT 's1', 'earlier', 4, 'schedule', t, t + interval '1 second', CASE WHEN i %% 10 = 0 THEN 'failed' ELSE 'ok' END
			FROM (SELECT i, now() - interval '1 minute' - i * interval '29 days' / %d AS t FROM generate_series(1, %d) i) x`, n, n),
		`INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome)
			SELECT 's1', 'earlier', 3, 'schedule', t, t + interval '1 second', 'ok'
			FROM (SELECT now() - interval '31 days' - i * interval '1 minute' AS t FROM generate_series(1, 10) i) x`,
		`INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at) VALUES ('s1', 'earlier', 5, 'schedule', now() - interval '2 minutes'),
			('s1', 'earlier', 5, 'manual', now() - interval '1 minute')`,
		fmt.Sprintf(`INSERT INTO nova.admin_requests (star, kind, requested_by, requested_at, consumed_at, consumed_by)
			SELECT 's1', 'trigger', 'op', t - interval '1 second', t, 'earlier'
			FROM (SELECT now() - interval '1 minute' - i * interval '29 days' / %d AS t FROM generate_series(1, %d) i) x`, n, n),
		`INSERT INTO nova.admin_requests (star, kind, requested_by, requested_at, consumed_at, consumed_by)
			SELECT 's1', 'pause', 'op', t - interval '1 second', t, 'earlier'
			FROM (SELECT now() - interval '31 days' - i * interval '1 minute' AS t FROM generate_series(1, 10) i) x`,
		`INSERT INTO nova.admin_requests (star, kind, requested_by) SELECT 's1', 'trigger', 'op' FROM generate_series(1, 3)`,
		// Erasures: n applied over the hot stream's settled records, and
		// three pending: one in its last entry, one in transit, one of the
		// last retention-enabled stream.
		fmt.Sprintf(`INSERT INTO nova.erasures (stream_id, first_record, record_count, requested_at, applied_at)
			SELECT '%s', i * 10 + 3, 1, now() - interval '2 days', now() - interval '1 day' FROM generate_series(0, %d) i`,
			hot, n-2),
		fmt.Sprintf(`INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ('%s', %d, 2), ('%s', %d, 1)`,
			hot, 10*n-5, hot, 10*n+2),
		fmt.Sprintf(`INSERT INTO nova.erasures (stream_id, first_record, record_count)
			VALUES (('00000000-0000-0000-0001-' || lpad(to_hex(%d), 12, '0'))::uuid, 5000, 3)`, m),
	}
	// Retention already applied up to low_record 1000 (a schema without
	// retained_through has nothing to record it in).
	var retained bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = 'nova' AND table_name = 'streams' AND column_name = 'retained_through')`).Scan(&retained); err != nil {
		t.Fatal(err)
	}
	if retained {
		stmts = append(stmts, `UPDATE nova.streams SET retained_through = 1000 WHERE low_record > 0`)
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			t.Fatalf("build history of %d rows: %s: %v", n, s, err)
		}
	}
	// As autovacuum would have by then: statistics and hint bits.
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE`); err != nil {
		t.Fatal(err)
	}
}

// cycleStatements runs, in cycle order, every catalog call a cycle (and
// the leader's and standbys' periodic reads) makes, with the probe
// labelling each, and returns the plans of their statements.
func cycleStatements(t testing.TB, ctx context.Context, db *catalog.DB, p *planProbe, n int) []stmtPlan {
	t.Helper()
	call := func(label string, fn func() error) {
		t.Helper()
		p.start(label)
		err := fn()
		p.stop()
		if err != nil {
			t.Fatalf("%s at %d rows: %v", label, n, err)
		}
	}
	var (
		lease catalog.Lease
		due   []catalog.DueStream
		in    catalog.Intent
		st    catalog.Stream
		reaps []catalog.SlotReap
	)
	// The tail-growth rule on: DueStreams and TransitByClass probe the last
	// catalog entry of each stream past its linger.
	policy := catalog.DuePolicy{Linger: time.Minute, AgeCap: time.Hour, ExpressLinger: time.Minute, ExpressAgeCap: time.Hour,
		TailGrowth: 1, CopyFloor: 5 << 20}
	call("AcquireLeaseInstance", func() (err error) {
		lease, err = db.Leases().AcquireLeaseInstance(ctx, "s1", "bench", "", time.Minute)
		return err
	})
	f := lease.Fence
	// The idle check, before every scheduled cycle: it finds the work the
	// history holds (intents, erasures, due streams) in one snapshot.
	call("IdleState", func() error {
		st, err := db.Trim().IdleState(ctx, "s1", policy, 24*time.Hour)
		if err == nil && st.Work == "" {
			err = fmt.Errorf("the idle check found no work on a star with pending erasures and due streams")
		}
		return err
	})
	call("DaemonState", func() error { _, err := db.Ledger().DaemonState(ctx, "s1"); return err })
	call("CloseAbandonedRuns", func() error {
		c, err := db.Ledger().CloseAbandonedRuns(ctx, f)
		if err == nil && c != 2 {
			err = fmt.Errorf("closed %d runs, want 2", c)
		}
		return err
	})
	call("AdminRequests", func() error { _, err := db.Requests().AdminRequests(ctx, "s1", true, 1000); return err })
	call("ConsumeAdminRequests", func() error {
		r, err := db.Requests().ConsumeAdminRequests(ctx, f, []string{catalog.AdminTrigger})
		if err == nil && len(r) != 3 {
			err = fmt.Errorf("consumed %d requests, want 3", len(r))
		}
		return err
	})
	var run catalog.Run
	call("StartRun", func() (err error) { run, err = db.Ledger().StartRun(ctx, f, "schedule", false); return err })
	call("Intents", func() error { _, err := db.Settle().Intents(ctx, "s1", "publish", time.Hour); return err })
	call("DueStreams", func() (err error) {
		due, err = db.Settle().DueStreams(ctx, "s1", policy, nil, 10000)
		if err == nil && (len(due) != 1 || due[0].Stream != hot) {
			err = fmt.Errorf("due %+v, want the hot stream", due)
		}
		return err
	})
	call("WithPendingErasures", func() error {
		w, err := db.Settle().WithPendingErasures(ctx, []catalog.StreamID{hot})
		if err == nil && !w[hot] {
			err = fmt.Errorf("pending erasures of %v, want the hot stream's", w)
		}
		return err
	})
	call("FirstOverlap", func() error {
		o, err := db.Settle().FirstOverlap(ctx, []catalog.StreamID{hot})
		if err == nil && o != nil {
			err = fmt.Errorf("overlap %s", o)
		}
		return err
	})
	call("StreamSnapshots/first", func() error {
		snaps, err := db.Settle().StreamSnapshots(ctx, []catalog.StreamID{hot}, 1000)
		snap := snaps[hot]
		if st = snap.Stream; err == nil && (snap.Last == nil || snap.Last.EndRecord() != st.SettledThrough) {
			err = fmt.Errorf("last entry %+v, settled_through %d", snap.Last, st.SettledThrough)
		}
		return err
	})
	call("RefsWindow", func() error {
		_, err := db.Settle().RefsWindow(ctx, hot, st.SettledThrough, st.NextRecord, 1000)
		return err
	})
	// Settle's erasures of the hot stream: its tail's, then its window's.
	pendingIn := func(below, from, to int64, want int64) func() error {
		return func() error {
			ers, err := db.Erasures().PendingErasuresIn(ctx, hot, below, from, to)
			if err == nil && (len(ers) != 1 || ers[0].FirstRecord != want) {
				err = fmt.Errorf("pending erasures in [%d, %d): %+v, want the one at %d", from, to, ers, want)
			}
			return err
		}
	}
	call("PendingErasuresIn/tail", pendingIn(math.MinInt64, st.SettledThrough-10, st.SettledThrough, st.SettledThrough-5))
	call("PendingErasuresIn/window", pendingIn(st.SettledThrough, st.SettledThrough, st.NextRecord, st.SettledThrough+2))
	key := fmt.Sprintf("bench/%d", st.SettledThrough)
	call("OpenPublishIntent", func() (err error) {
		in, err = writepath.OpenIntent(ctx, db, f, catalog.ExactTarget(key, st.SettledThrough), catalog.ClassStandard)
		return err
	})
	call("CommitSettle", func() error {
		e := catalog.Entry{Stream: hot, Epoch: 1, FirstRecord: st.SettledThrough, RecordCount: 5, ObjectBytes: 1000,
			FooterOffset: 900, FooterLength: 80, MinTimestamp: 1, MaxTimestamp: 2}
		return writepath.CommitSettle(ctx, db, f, catalog.SettleCommit{Entry: e, PrevRevision: -1, IntentID: in.ID, ObjectKey: key, ReapGrace: time.Hour})
	})
	// The batched path's statements (a batch of one: each statement's
	// per-stream work is the same index ranges as the single ones').
	next := st.SettledThrough + 5
	if st.NextRecord < next+5 {
		t.Fatalf("the hot stream has %d records past settled_through %d, want 10", st.NextRecord-st.SettledThrough, st.SettledThrough)
	}
	call("StreamSnapshots", func() error {
		snaps, err := db.Settle().StreamSnapshots(ctx, []catalog.StreamID{hot}, 1000)
		if s := snaps[hot]; err == nil && (s.Stream.SettledThrough != next || s.Last == nil || len(s.Refs) == 0) {
			err = fmt.Errorf("snapshot %+v, want settled through %d", s.Stream, next)
		}
		return err
	})
	key2 := fmt.Sprintf("bench/%d", next)
	var ins []catalog.Intent
	call("OpenPublishIntents", func() error {
		var errs []error
		var err error
		ins, errs, err = db.Settle().OpenPublishIntents(ctx, f, []catalog.IntentRequest{{Target: catalog.ExactTarget(key2, next), Class: catalog.ClassStandard}})
		if err == nil {
			err = errs[0]
		}
		return err
	})
	call("CommitSettles", func() error {
		e := catalog.Entry{Stream: hot, Epoch: 1, FirstRecord: next, RecordCount: 5, ObjectBytes: 1000,
			FooterOffset: 900, FooterLength: 80, MinTimestamp: 1, MaxTimestamp: 2}
		errs, err := db.Settle().CommitSettles(ctx, f, []catalog.StreamCommit{{Stream: hot, Commits: []catalog.SettleCommit{
			{Entry: e, PrevRevision: -1, IntentID: ins[0].ID, ObjectKey: key2, ReapGrace: time.Hour}}}}, nil)
		if err == nil {
			err = errs[0]
		}
		return err
	})
	call("Intents", func() error { _, err := db.Settle().Intents(ctx, "s1", "publish", time.Hour); return err })
	coords := map[string]catalog.KeyCoords{}
	retiredKey := func(e catalog.RetiredEntry) string {
		k := fmt.Sprintf("retired/%s/%d", e.Stream, e.FirstRecord)
		coords[k] = catalog.KeyCoords{Bucket: e.Bucket, Stream: e.Stream, Epoch: e.Epoch, FirstRecord: e.FirstRecord, Revision: e.Revision}
		return k
	}
	call("PendingErasureWindows", func() error {
		wins, err := db.Erasures().PendingErasureWindows(ctx, "s1", 100000)
		if err == nil && (len(wins) != 2 || len(wins[0].Erasures)+len(wins[1].Erasures) != 3) {
			err = fmt.Errorf("erasure windows %+v, want the 3 pending erasures of 2 streams", wins)
		}
		return err
	})
	call("RetentionCandidates", func() error {
		c, err := db.Trim().RetentionCandidates(ctx, "s1", 1001)
		if err == nil && len(c) != retentionMoved*retiredPerMoved {
			err = fmt.Errorf("%d candidates, want %d", len(c), retentionMoved*retiredPerMoved)
		}
		return err
	})
	call("ApplyRetention", applyRetention(ctx, db, f, retiredKey))
	// The strays step: its schedule every cycle; when it sweeps, a page of
	// listed keys looked up (the hot stream's cataloged key and a stray),
	// the stray armed, the sweep recorded.
	call("StraySweepDue", func() error { _, err := db.Trim().StraySweepDue(ctx, "s1", 24*time.Hour); return err })
	stray := catalog.ListedKey{Key: "bench/stray", Coords: catalog.KeyCoords{Bucket: st.Bucket, Stream: hot, Epoch: 1, FirstRecord: 1 << 40, Revision: 50}}
	listed := []catalog.ListedKey{{Key: key, Coords: catalog.KeyCoords{Bucket: st.Bucket, Stream: hot, Epoch: 1, FirstRecord: st.SettledThrough}}, stray}
	call("NamedSettledKeys", func() error {
		named, err := db.Trim().NamedSettledKeys(ctx, listed)
		if err == nil && (!named[0] || named[1]) {
			err = fmt.Errorf("named %v, want the cataloged key and not the stray", named)
		}
		return err
	})
	call("ArmStrayReaps", func() error {
		armed, err := db.Trim().ArmStrayReaps(ctx, f, listed)
		if err == nil && (len(armed) != 1 || armed[0] != stray.Key) {
			err = fmt.Errorf("armed %v, want the stray", armed)
		}
		coords[stray.Key] = stray.Coords
		return err
	})
	call("RecordStraySweep", func() error { return db.Trim().RecordStraySweep(ctx, f) })
	call("TrimState", func() error { _, err := db.Trim().TrimState(ctx, "s1"); return err })
	call("AdvanceTrim", func() error {
		_, err := db.Trim().AdvanceTrim(ctx, f, nil, catalog.SlotPos{Epoch: 1}, catalog.SlotPos{Epoch: 1, Seq: 2}, 0)
		return err
	})
	call("SlotReaps", func() (err error) { reaps, err = db.Trim().SlotReaps(ctx, "s1"); return err })
	call("FinishSlotReap", func() error { return db.Trim().FinishSlotReap(ctx, f, reaps[0].ID) })
	var intents []catalog.Intent
	call("DueObjectReaps", func() (err error) { intents, err = db.Trim().DueObjectReaps(ctx, "s1", time.Hour, 0, 1000); return err })
	cands := make([]catalog.ReapCandidate, len(intents))
	ids := make([]int64, len(intents))
	for i, x := range intents {
		cands[i] = catalog.ReapCandidate{ID: x.ID, Key: x.ObjectKey, Coords: coords[x.ObjectKey]}
		ids[i] = x.ID
	}
	call("ClassifyReaps", func() error { _, err := db.Trim().ClassifyReaps(ctx, f, time.Hour, cands); return err })
	call("FinishReaps", func() error { return db.Trim().FinishReaps(ctx, f, ids) })
	call("FinishRun", func() error {
		_, err := db.Ledger().FinishRun(ctx, run.ID, catalog.RunOK, catalog.RunCounts{}, "")
		return err
	})
	call("PruneHistory", pruneHistory(ctx, db, f))
	call("RenewLease", func() error { _, err := db.Leases().RenewLease(ctx, f, time.Minute); return err })
	// The periodic reads of the leader and every standby (GaugeInterval).
	call("TransitByClass", func() error { _, _, err := db.Ledger().TransitByClass(ctx, "s1", policy); return err })
	call("Backlog", func() error { _, err := db.Ledger().Backlog(ctx, "s1"); return err })
	// The window's runs: the transit window of applied erasures is the age
	// cap plus the reap grace and two cycles (here an hour), not the ledger.
	call("ErasuresAppliedWithin", func() error { _, err := db.Erasures().ErasuresAppliedWithin(ctx, "s1", time.Hour); return err })
	call("ObjectReapBacklog", func() error { _, err := db.Trim().ObjectReapBacklog(ctx, "s1", time.Hour); return err })
	call("LastRunWithOutcome", func() error {
		r, ok, err := db.Ledger().LastRunWithOutcome(ctx, "s1", catalog.RunOK)
		if err == nil && (!ok || r.ID != run.ID) {
			err = fmt.Errorf("last success %+v %v, want run %d", r, ok, run.ID)
		}
		return err
	})
	if len(p.errs) > 0 {
		t.Fatalf("probing plans at %d rows: %v", n, p.errs)
	}
	out := p.plans
	p.plans = nil
	return out
}

// TestPerCycleStatementsFlat shows every statement a cycle runs costs the
// same with 10^4, 10^5 (and, with NOVA_SQL_SCALE_FULL=1, 10^6) rows of
// history in each of: one stream's catalog, the retention-enabled streams'
// catalog, the run ledger and the admin requests. Each statement is
// EXPLAIN (ANALYZE, BUFFERS)ed on the state and arguments it runs with;
// buffers (deterministic, unlike time) may grow by an index level per
// lookup from one size to the next, never with the rows; and no history
// table is read by a sequential scan.
// Times are logged as ratios to the smallest size, not asserted.
func TestPerCycleStatementsFlat(t *testing.T) {
	sizes := []int{10_000, 100_000}
	if os.Getenv(EnvSQLScaleFull) != "" {
		sizes = append(sizes, 1_000_000)
	} else if testing.Short() {
		t.Skip("builds 10^5 rows of history")
	}
	ctx := context.Background()
	var runs [][]stmtPlan
	for _, n := range sizes {
		url := testenv.FreshDatabase(t)
		mdb, err := catalog.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mdb.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		mdb.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		buildHistory(t, ctx, conn, n)
		conn.Close(ctx)
		t.Logf("built %d rows of each history in %s", n, time.Since(start).Round(time.Millisecond))
		p := &planProbe{}
		db, err := catalog.OpenTraced(ctx, url, p)
		if err != nil {
			t.Fatal(err)
		}
		runs = append(runs, cycleStatements(t, ctx, db, p, n))
		db.Close()
	}
	base := runs[0]
	var report strings.Builder
	fmt.Fprintf(&report, "\n%-24s", "statement")
	for _, n := range sizes {
		fmt.Fprintf(&report, " %12s", fmt.Sprintf("buf@%.0e", float64(n)))
	}
	for _, n := range sizes[1:] {
		fmt.Fprintf(&report, " %12s", fmt.Sprintf("time x@%.0e", float64(n)))
	}
	fmt.Fprintf(&report, "  %8s  plan\n", "ms@1e4")
	// (streams is left out: a planner may scan the few pages of a small
	// streams table; the buffers bound covers it.)
	history := []string{"catalog", "auditor_runs", "admin_requests", "erasures"}
	for i, b := range base {
		fmt.Fprintf(&report, "%-24s", b.Label)
		for _, r := range runs {
			if len(r) != len(base) || r[i].Label != b.Label {
				t.Fatalf("the cycle ran different statements at different sizes: %s vs %s", b.Label, r[min(i, len(r)-1)].Label)
			}
			fmt.Fprintf(&report, " %12d", r[i].Buffers)
		}
		for _, r := range runs[1:] {
			fmt.Fprintf(&report, " %12.2f", r[i].Millis/max(b.Millis, 0.001))
		}
		last := runs[len(runs)-1][i]
		fmt.Fprintf(&report, "  %8.3f  %s\n", b.Millis, strings.Join(slices.Compact(slices.Clone(last.Scans)), "; "))
		for k := 1; k < len(runs); k++ {
			// Ten times the history may cost an index level more per
			// descent (a few buffers per row looked up), never ten times
			// the buffers. More rows returned is more work, not history:
			// a few buffers each.
			prev, cur := runs[k-1][i], runs[k][i]
			if allowed := prev.Buffers + prev.Buffers/2 + 10 + 4*max(cur.Rows-prev.Rows, 0); cur.Buffers > allowed {
				t.Errorf("%s: %d buffers at %d rows, %d at %d (allowed %d): grows with history\n%s\n%s",
					b.Label, cur.Buffers, sizes[k], prev.Buffers, sizes[k-1], allowed, cur.SQL, cur.Plan)
			}
		}
		for _, s := range last.Scans {
			for _, h := range history {
				if strings.HasPrefix(s, "Seq Scan on "+h) {
					t.Errorf("%s: %s at %d rows\n%s\n%s", b.Label, s, sizes[len(sizes)-1], last.SQL, last.Plan)
				}
			}
		}
	}
	t.Log(report.String())
}

func applyRetention(ctx context.Context, db *catalog.DB, f catalog.Fence, key func(catalog.RetiredEntry) string) func() error {
	return func() error {
		removed, more, err := db.Trim().ApplyRetention(ctx, f, 0, 1000, key)
		if err == nil && (more || len(removed) != retentionMoved*retiredPerMoved) {
			err = fmt.Errorf("retired %d entries (more %v), want %d", len(removed), more, retentionMoved*retiredPerMoved)
		}
		return err
	}
}

func pruneHistory(ctx context.Context, db *catalog.DB, f catalog.Fence) func() error {
	return func() error {
		p, err := db.Ledger().PruneHistory(ctx, f, 30*24*time.Hour, 1000)
		if err == nil && (p.Runs != 10 || p.Requests != 10) {
			err = fmt.Errorf("pruned %+v, want the 10 runs and 10 requests past 30 days", p)
		}
		return err
	}
}
