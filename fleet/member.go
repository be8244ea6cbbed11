package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
)

// PruneKeep is how long the move log and expired member rows are kept.
const PruneKeep = 24 * time.Hour

// Config is what a member is told.
type Config struct {
	Member          string
	Stars           Selector
	LeaseTTL        time.Duration
	Tick            time.Duration // --lease-renew: heartbeat, renewal, claims and balance
	CallTimeout     time.Duration // bound of one statement of the loop (LeaseTTL/3)
	ShutdownTimeout time.Duration // a star's running cycle may finish this long on drain
	Pprof           bool          // serve the Go profiler on the member's endpoint (--pprof)
	Rules           Rules
	BudgetWindow    time.Duration
	// ProgressBound: a star whose cycle loop made no progress for its
	// cycle interval plus this long is given up as stuck.
	ProgressBound time.Duration
	// Interval is the cycle interval of the schedule now.
	Interval func() time.Duration
	// Refusals are the connections the server refused the member's pools
	// (nil: none watched).
	Refusals Refusals
}

// Refusals count the connections the server refused the member for its
// limit (*catalog.Refusals).
type Refusals interface {
	Count() int64
	Last() time.Time
}

// Metastore is what the member reads and writes (*catalog.Fleet,
// catalog/fleet.go), over a pool of its own, so that busy cycles cannot
// starve the renewals.
type Metastore interface {
	Heartbeat(ctx context.Context, member, instance, stars string, draining bool, ttl time.Duration) (time.Time, error)
	LeaveFleet(ctx context.Context, member, instance string) error
	FleetView(ctx context.Context, budgetWindow time.Duration) (catalog.FleetView, error)
	ClaimStars(ctx context.Context, member, instance string, claims []catalog.Claim, n int, ttl, handoffWindow time.Duration) ([]catalog.Claimed, error)
	RenewLeases(ctx context.Context, member string, held []catalog.Fence, ttl time.Duration) (map[string]time.Time, error)
	HandOff(ctx context.Context, f catalog.Fence, to, why string) error
	PruneFleet(ctx context.Context, keep time.Duration) error
	Listen(ctx context.Context) (*catalog.Listener, error)
}

// StarDaemon is the daemon of one star the member leads (*daemon.Daemon).
type StarDaemon interface {
	LeadTerm(ctx context.Context, g daemon.Grant, renewals <-chan daemon.Renewal)
	Wake()
	ProgressAge() time.Duration
}

// Built is a star's daemon, built when the member claims the star: its
// metrics (served while the member leads it) and what to close after.
type Built struct {
	Daemon  StarDaemon
	Metrics prometheus.Gatherer
	Close   func()
}

// Factory builds the daemon of a star just claimed.
type Factory func(ctx context.Context, star string) (Built, error)

// Member is one fleet member: Run is its loop.
type Member struct {
	cfg      Config
	db       Metastore
	build    Factory
	log      *slog.Logger
	m        *Metrics
	instance string
	gather   *Gatherers

	mu    sync.Mutex
	seats map[string]*seat // the stars this member leads

	cooling     map[string]time.Time // stars given up (stuck, stepped down): not claimed again before then (under mu)
	liveSet     string               // the live membership last seen
	live        []catalog.Member     // its members (under mu)
	liveSince   time.Time            // since when it is that
	firstRead   time.Time            // the member's first read of the fleet
	reads       int                  // its reads of the fleet since the live membership last changed
	settledAt   time.Time            // when it settled (zero: not yet; planClaims)
	readFails   int                  // rounds in a row whose read of the fleet failed
	draining    bool
	ticks       int
	lastHolder  string // the other process holding our member name, logged once
	selectsNone bool   // --stars selected no star of the metastore at the last round (logged once)
	refused     int64  // refusals counted into the metrics so far
	starved     bool   // the last round found connections refused lately
}

// New builds a member. gather is the process's /metrics, to which each
// led star's registry is added.
func New(cfg Config, db Metastore, build Factory, log *slog.Logger, m *Metrics, gather *Gatherers) (*Member, error) {
	if cfg.Member == "" {
		return nil, errors.New("fleet: no member name")
	}
	if cfg.Tick <= 0 || cfg.Tick >= cfg.LeaseTTL {
		return nil, fmt.Errorf("fleet: tick %s must be positive and below the lease ttl %s", cfg.Tick, cfg.LeaseTTL)
	}
	if cfg.Interval == nil {
		return nil, errors.New("fleet: no cycle interval")
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Member{cfg: cfg, db: db, build: build, log: log, m: m, instance: hex.EncodeToString(b), gather: gather,
		seats: map[string]*seat{}, cooling: map[string]time.Time{}}, nil
}

// Run is the member's loop until ctx ends; then it drains: it marks itself
// draining, steps every star down (each running cycle gets
// ShutdownTimeout), hands each to its successor and leaves the fleet.
func (mb *Member) Run(ctx context.Context) error {
	base, stop := context.WithCancel(context.WithoutCancel(ctx))
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { mb.listen(base) })
	wg.Go(func() { mb.renewLoop(base) })
	mb.log.Info("fleet member", "member", mb.cfg.Member, "instance", mb.instance, "stars", mb.cfg.Stars.String())
	tick := time.NewTicker(mb.cfg.Tick)
	defer tick.Stop()
	for ctx.Err() == nil {
		mb.tick(base)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	mb.drain(base, tick)
	stop()
	return nil
}

// tick is one round: hand-offs, heartbeat, read, claims, balance (the
// renewals have their own loop).
func (mb *Member) tick(ctx context.Context) {
	mb.ticks++
	err := mb.round(ctx)
	outcome := "ok"
	if err != nil {
		outcome = "error"
		if ctx.Err() == nil {
			mb.log.Warn("fleet round failed", "err", err)
		}
	}
	mb.m.Ticks.WithLabelValues(outcome).Inc()
	if mb.ticks%1000 == 1 {
		pctx, cancel := context.WithTimeout(ctx, mb.cfg.CallTimeout)
		if err := mb.db.PruneFleet(pctx, PruneKeep); err != nil {
			mb.log.Warn("pruning the fleet tables failed", "err", err)
		}
		cancel()
	}
}

func (mb *Member) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, mb.cfg.CallTimeout)
}

func (mb *Member) round(ctx context.Context) error {
	mb.reap(ctx)
	starved := mb.starving()
	// A member that cannot read the fleet cannot claim: after a few such
	// rounds it stops heartbeating, so that the others stop counting it
	// (in the caps, as a successor, as a balance target).
	if mb.readFails < 3 {
		hctx, cancel := mb.call(ctx)
		_, herr := mb.db.Heartbeat(hctx, mb.cfg.Member, mb.instance, mb.cfg.Stars.String(), mb.draining, mb.cfg.LeaseTTL)
		cancel()
		var held *catalog.MemberHeldError
		if errors.As(herr, &held) && mb.lastHolder != held.Error() {
			mb.log.Error("another process is this fleet member; waiting for its row to expire", "err", held)
			mb.lastHolder = held.Error()
		}
		if herr != nil {
			return herr
		}
	}
	rctx, cancel := mb.call(ctx)
	fv, err := mb.db.FleetView(rctx, mb.cfg.BudgetWindow)
	cancel()
	if err != nil {
		mb.readFails++
		return err
	}
	mb.readFails = 0
	v := mb.view(fv)
	mb.gauges(v)
	if starved {
		return nil // no claim, no balance: it keeps what it holds while it can renew it
	}
	if p := planClaims(v, mb.cfg.Rules); p.n > 0 {
		cctx, cancel := mb.call(ctx)
		sent := time.Now()
		leases, err := mb.db.ClaimStars(cctx, mb.cfg.Member, mb.instance, p.claims, p.n, mb.cfg.LeaseTTL, mb.cfg.Rules.HandoffWindow)
		cancel()
		if err != nil {
			return err
		}
		for _, c := range leases {
			mb.m.Moves.WithLabelValues(c.Reason).Inc()
			mb.seat(ctx, c.Lease, sent)
		}
		return nil
	}
	mb.mu.Lock()
	var mine []string
	for star, s := range mb.seats {
		if s.leaving == "" {
			mine = append(mine, star)
		}
	}
	mb.mu.Unlock()
	slices.Sort(mine)
	for _, mv := range planBalance(v, mb.cfg.Rules, mine) {
		mb.giveUp(mv.star, "balance", mv.kind, mv.to)
	}
	return nil
}

// starving reports whether the server refused the member a connection
// within starvedFor: a member short of connections claims nothing new
// (its cycles could not run) and moves nothing for balance (its stars
// would only move to members as short), and keeps what it holds while
// its leases' pool, held open, renews them. Its cycles fail and retry
// with backoff. The rounds go on: when no connection has been refused
// for starvedFor, it claims again.
func (mb *Member) starving() bool {
	if mb.cfg.Refusals == nil {
		return false
	}
	n := mb.cfg.Refusals.Count()
	mb.m.ConnsRefused.Add(float64(n - mb.refused))
	mb.refused = n
	starved := time.Since(mb.cfg.Refusals.Last()) < mb.starvedFor()
	if starved != mb.starved {
		if starved {
			mb.log.Warn("the database refuses this member connections (too many connections): claiming nothing new until it stops",
				"refused", n, "for", mb.starvedFor())
		} else {
			mb.log.Info("the database no longer refuses this member connections: claiming again")
		}
	}
	mb.starved = starved
	mb.m.Starved.Set(b2f(starved))
	return starved
}

// starvedFor is how long after a refused connection a member claims
// nothing: three rounds, and at least the grace, so that a member refused
// now and then does not claim between refusals.
func (mb *Member) starvedFor() time.Duration { return max(3*mb.cfg.Tick, mb.cfg.Rules.Grace) }

// view assembles the tick's view and tracks the membership's stability.
func (mb *Member) view(fv catalog.FleetView) view {
	v := view{me: mb.cfg.Member, draining: mb.draining, fleet: fv, sel: mb.cfg.Stars,
		held: map[string]bool{}, cooling: map[string]bool{}}
	mb.mu.Lock()
	for star, s := range mb.seats {
		v.held[star] = true
		if s.leaving != "" {
			v.leaving++
		}
	}
	mb.mu.Unlock()
	now := time.Now()
	mb.mu.Lock()
	for star, until := range mb.cooling {
		if now.Before(until) {
			v.cooling[star] = true
		} else {
			delete(mb.cooling, star)
		}
	}
	mb.mu.Unlock()
	var live []string
	for _, m := range fv.Members {
		if m.Alive && !m.Draining {
			live = append(live, m.Member)
		}
	}
	set := strings.Join(live, ",")
	if set != mb.liveSet {
		mb.liveSet, mb.liveSince, mb.reads = set, now, 0
	}
	mb.reads++
	if mb.firstRead.IsZero() {
		mb.firstRead = now
	}
	// Settled: the live membership read twice, a round apart, unchanged
	// (the members started with this one have heartbeated by then), or a
	// grace since the first read, however it changes.
	if mb.settledAt.IsZero() && (mb.reads >= 2 || now.Sub(mb.firstRead) >= mb.cfg.Rules.Grace) {
		mb.settledAt = now
		mb.log.Info("fleet membership settled", "members", set)
	}
	v.settled = !mb.settledAt.IsZero()
	v.settledFor = now.Sub(mb.settledAt)
	mb.mu.Lock()
	mb.live = liveMembers(fv.Members)
	mb.mu.Unlock()
	v.stableOK = now.Sub(mb.liveSince) >= mb.cfg.Rules.StableFor
	return v
}

func (mb *Member) gauges(v view) {
	sh := v.shape()
	mb.m.Members.Set(float64(len(sh.live)))
	mb.m.Stars.Set(float64(len(sh.stars)))
	// A --stars that selects nothing is most likely a typo: say so once
	// (the member stays up, serving nothing, for stars yet to be created).
	if none := len(sh.stars) == 0; none != mb.selectsNone {
		mb.selectsNone = none
		if none {
			mb.log.Warn("--stars selects no star of the metastore: this member leads nothing until one is created", "stars", mb.cfg.Stars.String())
		} else {
			mb.log.Info("--stars selects stars of the metastore", "stars", mb.cfg.Stars.String(), "count", len(sh.stars))
		}
	}
	mb.m.Cap.Set(float64(sh.cap))
	mb.m.Imbalance.Set(float64(sh.spread))
	mb.m.MoveBudget.Set(float64(mb.cfg.Rules.Budget(len(sh.stars))))
	mb.m.Draining.Set(b2f(mb.draining))
	mb.m.Unowned.Reset()
	for _, s := range sh.stars {
		mb.m.Unowned.WithLabelValues(s.Star).Set(s.Unowned.Seconds())
	}
	mb.mu.Lock()
	defer mb.mu.Unlock()
	mb.m.Owned.Set(float64(len(mb.seats)))
	mb.m.Progress.Reset()
	for star, s := range mb.seats {
		mb.m.Progress.WithLabelValues(star).Set(s.progressAge().Seconds())
	}
}

// Led returns the stars the member leads now.
func (mb *Member) Led() []string {
	mb.mu.Lock()
	defer mb.mu.Unlock()
	return slices.Sorted(maps.Keys(mb.seats))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
