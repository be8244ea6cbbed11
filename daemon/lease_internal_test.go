package daemon

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
)

// TestLocalDeadlineCountsFromBeforeTheAcquisition: over a slow network
// the acquisition's reply comes long after the database stamped the
// expiry. The term's local deadline must count from before the statement
// was sent, so it is never later than the database's expiry.
func TestLocalDeadlineCountsFromBeforeTheAcquisition(t *testing.T) {
	t.Parallel()
	db, rawURL := testenv.MigratedDB(t)
	ctx := context.Background()
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	slow, err := catalog.Open(ctx, p.URL(t, rawURL))
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	cfg := Config{Star: "s1", Holder: "h", LeaseTTL: 10 * time.Second, LeaseRenew: 2 * time.Second,
		LeaseCallTimeout: DefaultLeaseCallTimeout(10 * time.Second)}
	deps := Deps{DB: slow.Ledger(), Leases: slow.Leases(), Requests: slow.Requests()}
	if err := deps.defaults("test"); err != nil {
		t.Fatal(err)
	}
	r := newRunner(cfg, deps)
	const delay = 150 * time.Millisecond
	p.Delay(delay)
	before := time.Now()
	l, sent, err := r.acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	replied := time.Now()
	p.Delay(0)
	term := r.hold(ctx, heldLease{Lease: l, sent: sent})
	defer func() {
		term.cancel(errTermEnded)
		<-term.renewed
	}()
	ttl := cfg.LeaseTTL - cfg.LeaseRenew/2
	t.Logf("acquisition took %s over the slow proxy; local deadline %s after the call began (bound %s)",
		replied.Sub(before).Round(time.Millisecond), term.deadline.Sub(before).Round(time.Millisecond), ttl)
	if replied.Sub(before) < 2*delay {
		t.Fatalf("the proxy did not slow the acquisition (%s)", replied.Sub(before))
	}
	// The deadline counts from some instant S. The statement cannot have
	// reached the database before the proxy's first delay passed, so S
	// must lie between the call's start and then.
	from := term.deadline.Add(-ttl)
	if from.Before(before) || !from.Before(before.Add(delay)) {
		t.Fatalf("local deadline counted from %s after the call began: not from before the statement was sent "+
			"(the reply came after %s)", from.Sub(before), replied.Sub(before))
	}
}

// TestTriggerResults: what an OK cycle makes of each trigger request. A
// stream it settled nothing of fails, unless the cycle's budget ran out
// before it reached the stream (deferred): then the request stays open.
func TestTriggerResults(t *testing.T) {
	s := func(b byte) *catalog.StreamID { id := catalog.StreamID{15: b}; return &id }
	target := func(n int64) *int64 { return &n }
	reqs := []catalog.AdminRequest{
		{ID: 1}, // plain trigger
		{ID: 2, Stream: s(1), TargetRecord: target(10)}, // settled through its target
		{ID: 3, Stream: s(2), TargetRecord: target(10)}, // partly settled
		{ID: 4, Stream: s(3), TargetRecord: target(10)}, // nothing settled
		{ID: 5, Stream: s(4), TargetRecord: target(10)}, // quarantined
		{ID: 6, Stream: s(5)},                           // unknown
		{ID: 7, Stream: s(6)},                           // created after the request: target from the cycle's start
		{ID: 8, Stream: s(7), TargetRecord: target(10)}, // not reached: the budget ran out
	}
	before := map[catalog.StreamID]catalog.StreamProgress{
		*s(1): {Found: true, SettledThrough: 0, NextRecord: 12},
		*s(2): {Found: true, SettledThrough: 0, NextRecord: 12},
		*s(3): {Found: true, SettledThrough: 4, NextRecord: 12},
		*s(4): {Found: true, NextRecord: 12},
		*s(6): {Found: true, NextRecord: 3},
		*s(7): {Found: true, SettledThrough: 4, NextRecord: 12},
	}
	after := map[catalog.StreamID]catalog.StreamProgress{
		*s(1): {Found: true, SettledThrough: 10, NextRecord: 15}, // absorbs since do not matter
		*s(2): {Found: true, SettledThrough: 6, NextRecord: 12},
		*s(3): {Found: true, SettledThrough: 4, NextRecord: 12},
		*s(4): {Found: true, NextRecord: 12, Quarantine: "corrupt: bad crc"},
		*s(6): {Found: true, SettledThrough: 3, NextRecord: 3},
		*s(7): {Found: true, SettledThrough: 4, NextRecord: 12},
	}
	var deferred cycle.Deferred
	deferred.Add(*s(7))
	results, open := triggerResults(reqs, before, after, &deferred)
	got := map[int64]catalog.TriggerResult{}
	for _, r := range results {
		got[r.ID] = r
	}
	want := map[int64]string{1: catalog.TriggerDone, 2: catalog.TriggerDone, 4: catalog.TriggerFailed,
		5: catalog.TriggerFailed, 6: catalog.TriggerFailed, 7: catalog.TriggerDone}
	if len(got) != len(want) {
		t.Fatalf("results %+v", results)
	}
	for id, o := range want {
		if got[id].Outcome != o || (o == catalog.TriggerFailed) != (got[id].Reason != "") {
			t.Errorf("request %d: %+v, want %s", id, got[id], o)
		}
	}
	for id, sub := range map[int64]string{4: "settled nothing", 5: "quarantined (corrupt: bad crc)", 6: "not a stream of this star"} {
		if !strings.Contains(got[id].Reason, sub) {
			t.Errorf("request %d reason %q, want %q", id, got[id].Reason, sub)
		}
	}
	if len(open) != 2 || open[0].id != 3 || !strings.Contains(open[0].why, "settled through 6 of 10") ||
		open[1].id != 8 || !strings.Contains(open[1].why, "budget") {
		t.Fatalf("open %+v", open)
	}
}
