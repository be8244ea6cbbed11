package fleet_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/fleet"
	"github.com/nova/auditor/internal/testenv"
)

// fakeDaemon leads a term until its member steps it down or the lease is
// lost; stalled, it stops making progress.
type fakeDaemon struct {
	star    string
	stalled atomic.Bool
	since   time.Time
	terms   atomic.Int32
	lost    atomic.Int32
}

func (d *fakeDaemon) LeadTerm(ctx context.Context, g daemon.Grant, renewals <-chan daemon.Renewal) {
	d.terms.Add(1)
	for {
		select {
		case <-ctx.Done():
			select { // a loss sent before the step-down counts
			case r := <-renewals:
				if r.Err != nil && errors.Is(r.Err, catalog.ErrStaleToken) {
					d.lost.Add(1)
				}
			default:
			}
			return
		case r, ok := <-renewals:
			if !ok || (r.Err != nil && errors.Is(r.Err, catalog.ErrStaleToken)) {
				d.lost.Add(1)
				return
			}
		}
	}
}

func (d *fakeDaemon) Wake() {}

func (d *fakeDaemon) ProgressAge() time.Duration {
	if d.stalled.Load() {
		return time.Since(d.since)
	}
	return 0
}

// fakeStars builds fake daemons, one per star per member, slow for the
// stars in slow.
type fakeStars struct {
	mu      sync.Mutex
	daemons map[string]*fakeDaemon
	slow    map[string]time.Duration
}

func (f *fakeStars) build(ctx context.Context, star string) (fleet.Built, error) {
	f.mu.Lock()
	wait := f.slow[star]
	f.mu.Unlock()
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return fleet.Built{}, ctx.Err()
	}
	d := &fakeDaemon{star: star, since: time.Now()}
	f.mu.Lock()
	f.daemons[star] = d
	f.mu.Unlock()
	return fleet.Built{Daemon: d, Metrics: prometheus.NewRegistry()}, nil
}

func (f *fakeStars) get(star string) *fakeDaemon {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.daemons[star]
}

const (
	testTTL  = 1500 * time.Millisecond
	testTick = 250 * time.Millisecond
)

func startMember(t *testing.T, db *catalog.DB, name string, stars *fakeStars, progressBound time.Duration) (*fleet.Member, context.CancelFunc, chan struct{}) {
	t.Helper()
	mb, cancel, done, _ := startMemberRefused(t, db, name, stars, progressBound, nil)
	return mb, cancel, done
}

// startMemberRefused starts a member whose refused connections are
// refusals (nil: none), and returns its metrics too.
func startMemberRefused(t *testing.T, db *catalog.DB, name string, stars *fakeStars, progressBound time.Duration,
	refusals fleet.Refusals) (*fleet.Member, context.CancelFunc, chan struct{}, *fleet.Metrics) {
	t.Helper()
	sel, _ := fleet.ParseSelector("all")
	reg := prometheus.NewRegistry()
	m, err := fleet.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	mb, err := fleet.New(fleet.Config{Member: name, Stars: sel, LeaseTTL: testTTL, Tick: testTick, CallTimeout: time.Second,
		ShutdownTimeout: time.Second, BudgetWindow: time.Minute, ProgressBound: progressBound,
		Rules:    fleet.Rules{Grace: time.Second, HandoffWindow: 3 * testTick, StableFor: time.Second, Cooldown: time.Minute, MoveBudget: 100},
		Interval: func() time.Duration { return time.Second },
		Refusals: refusals,
	}, db.Fleet(), stars.build, slog.New(slog.NewTextHandler(io.Discard, nil)), m, fleet.NewGatherers(reg))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = mb.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return mb, cancel, done, m
}

func fleetDB(t *testing.T, n int) *catalog.DB {
	t.Helper()
	db, _ := testenv.MigratedDB(t)
	for i := range n {
		if err := writepath.New(db).CreateStar(context.Background(), fmt.Sprintf("s%d", i), catalog.ClassStandard, 1); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(within); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%s: not within %s", what, within)
		}
	}
}

func holder(t *testing.T, db *catalog.DB, star string) string {
	t.Helper()
	l, live, err := db.Leases().CurrentLease(context.Background(), star)
	if err != nil || !live {
		return ""
	}
	return l.Holder
}

// A daemon slow to build (its store, its probe) delays no renewal: the
// member's other stars keep their leases through it, and the slow star is
// led once built.
func TestSlowBuildDelaysNoRenewal(t *testing.T) {
	db := fleetDB(t, 3)
	stars := &fakeStars{daemons: map[string]*fakeDaemon{}, slow: map[string]time.Duration{"s1": 3 * testTTL}}
	mb, _, _ := startMember(t, db, "a", stars, 10*time.Second)
	waitFor(t, 10*time.Second, "a leads the three stars", func() bool { return len(mb.Led()) == 3 })
	start := time.Now()
	for time.Since(start) < 3*testTTL {
		for _, s := range []string{"s0", "s1", "s2"} {
			if h := holder(t, db, s); h != "a" {
				t.Fatalf("%s led by %q while s1's daemon is built", s, h)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitFor(t, 5*time.Second, "s1's daemon leads", func() bool { d := stars.get("s1"); return d != nil && d.terms.Load() == 1 })
	for _, s := range []string{"s0", "s2"} {
		if d := stars.get(s); d.lost.Load() != 0 || d.terms.Load() != 1 {
			t.Errorf("%s: %d terms, %d lost", s, d.terms.Load(), d.lost.Load())
		}
	}
}

// A stalled star is handed to the other member at once (not left to the
// liveness rule), and its daemon told the lease is lost; a drain hands
// every star to the member that stays.
func TestStuckAndDrainHandOff(t *testing.T) {
	db := fleetDB(t, 4)
	sa := &fakeStars{daemons: map[string]*fakeDaemon{}}
	sb := &fakeStars{daemons: map[string]*fakeDaemon{}}
	a, stopA, doneA := startMember(t, db, "a", sa, time.Second)
	b, _, _ := startMember(t, db, "b", sb, time.Second)
	waitFor(t, 20*time.Second, "a and b lead two stars each", func() bool { return len(a.Led()) == 2 && len(b.Led()) == 2 })
	star := a.Led()[0]
	d := sa.get(star)
	d.since = time.Now()
	d.stalled.Store(true)
	waitFor(t, 10*time.Second, star+" moves to b", func() bool { return holder(t, db, star) == "b" })
	moves, err := db.Fleet().FleetMoves(context.Background(), time.Minute, 100)
	if err != nil {
		t.Fatal(err)
	}
	if m := moves[0]; m.Star != star || m.Reason != "stuck" || m.From != "a" || m.To != "b" || m.Unowned > 2*testTick+time.Second {
		t.Errorf("the stuck star's move: %+v (want from a to b, unowned a round or so)", m)
	}
	if d.lost.Load() != 1 {
		t.Errorf("the stalled daemon was not told its lease is lost")
	}
	// a drains: b takes every star, each handed over, none expired.
	stopA()
	<-doneA
	waitFor(t, 10*time.Second, "b leads the four stars", func() bool { return len(b.Led()) == 4 })
	moves, _ = db.Fleet().FleetMoves(context.Background(), time.Minute, 100)
	for _, m := range moves {
		if m.From == "a" && m.Reason != "stuck" && m.Reason != "drain" && m.Reason != "balance" {
			t.Errorf("a's star %s left it as %q", m.Star, m.Reason)
		}
	}
	v, err := db.Fleet().FleetView(context.Background(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range v.Members {
		if m.Member == "a" {
			t.Errorf("the drained member's row is still there: %+v", m)
		}
	}
}

// refusing is a member's refused connections, refusing while on.
type refusing struct {
	on atomic.Bool
	n  atomic.Int64
}

func (r *refusing) Count() int64 {
	if r.on.Load() {
		return r.n.Add(1)
	}
	return r.n.Load()
}

func (r *refusing) Last() time.Time {
	if r.on.Load() {
		return time.Now()
	}
	return time.Time{}
}

// A member the server refuses connections claims nothing, says so, and
// claims once the refusals stop; refused again, it keeps the stars it
// leads (its leases' pool renews them) and loses none.
func TestRefusedMemberClaimsNothingAndKeepsItsStars(t *testing.T) {
	db := fleetDB(t, 4)
	ref := &refusing{}
	ref.on.Store(true)
	stars := &fakeStars{daemons: map[string]*fakeDaemon{}}
	mb, _, _, m := startMemberRefused(t, db, "a", stars, 10*time.Second, ref)
	waitFor(t, 10*time.Second, "a says it is starved", func() bool { return testutil.ToFloat64(m.Starved) == 1 })
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if led := mb.Led(); len(led) != 0 {
			t.Fatalf("a starved member claimed %v", led)
		}
	}
	if testutil.ToFloat64(m.ConnsRefused) < 1 {
		t.Errorf("refused connections not counted: %v", testutil.ToFloat64(m.ConnsRefused))
	}
	ref.on.Store(false)
	waitFor(t, 20*time.Second, "a leads the four stars once no longer refused", func() bool { return len(mb.Led()) == 4 })
	if testutil.ToFloat64(m.Starved) != 0 {
		t.Error("a still says it is starved")
	}
	ref.on.Store(true)
	start := time.Now()
	for time.Since(start) < 3*testTTL {
		for _, s := range []string{"s0", "s1", "s2", "s3"} {
			if h := holder(t, db, s); h != "a" {
				t.Fatalf("%s led by %q while a is refused connections", s, h)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range []string{"s0", "s1", "s2", "s3"} {
		if d := stars.get(s); d.lost.Load() != 0 || d.terms.Load() != 1 {
			t.Errorf("%s: %d terms, %d lost", s, d.terms.Load(), d.lost.Load())
		}
	}
}

// Members started together over stars an earlier fleet left unowned long
// ago each claim their share at once: no member takes every star in its
// first round, before it has seen the others, and the fleet is balanced
// without a balance move.
func TestColdStartIsBalanced(t *testing.T) {
	db, url := testenv.MigratedDB(t)
	ctx := context.Background()
	for i := range 40 {
		if err := writepath.New(db).CreateStar(ctx, fmt.Sprintf("s%02d", i), catalog.ClassStandard, 1); err != nil {
			t.Fatal(err)
		}
	}
	old := &fakeStars{daemons: map[string]*fakeDaemon{}}
	mb, stop, done := startMember(t, db, "old", old, 10*time.Second)
	waitFor(t, 20*time.Second, "the earlier fleet leads every star", func() bool { return len(mb.Led()) == 40 })
	stop()
	<-done
	// The earlier fleet's leases, expired an hour ago.
	if _, err := testenv.Conn(t, url).Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now() - interval '1 hour', handoff_to = NULL`); err != nil {
		t.Fatal(err)
	}
	sa := &fakeStars{daemons: map[string]*fakeDaemon{}}
	sb := &fakeStars{daemons: map[string]*fakeDaemon{}}
	a, _, _, ma := startMemberRefused(t, db, "a", sa, 10*time.Second, nil)
	b, _, _, mbm := startMemberRefused(t, db, "b", sb, 10*time.Second, nil)
	waitFor(t, 20*time.Second, "a and b lead every star", func() bool { return len(a.Led())+len(b.Led()) == 40 })
	if len(a.Led()) != 20 || len(b.Led()) != 20 {
		t.Errorf("a leads %d stars, b %d: want 20 each", len(a.Led()), len(b.Led()))
	}
	for name, m := range map[string]*fleet.Metrics{"a": ma, "b": mbm} {
		if n := testutil.ToFloat64(m.Releases.WithLabelValues("spread")) + testutil.ToFloat64(m.Releases.WithLabelValues("balance")); n != 0 {
			t.Errorf("%s gave %v stars up for balance: the cold start was not balanced", name, n)
		}
	}
}
