package fleet

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
)

// seat is a star the member leads.
type seat struct {
	star      string
	lease     catalog.Lease
	claimedAt time.Time
	built     Built // set (under Member.mu) once the daemon is built
	renew     chan daemon.Renewal
	stop      context.CancelFunc // steps the daemon down
	done      chan struct{}      // LeadTerm returned
	leaving   string             // why it is being given up ("" while kept)
	leavingAt time.Time
	handTo    string
}

// seat starts leading a star just claimed: its daemon is built (a store
// to open, a checksum probe: S3 requests) and leads the term, in a
// goroutine of its own, so that a slow build delays no renewal. Until it
// is built the star counts as making progress from its claim. A star
// whose daemon cannot be built is given up as stuck.
func (mb *Member) seat(ctx context.Context, l catalog.Lease, sent time.Time) {
	sctx, stop := context.WithCancel(ctx)
	s := &seat{star: l.Star, lease: l, claimedAt: time.Now(), renew: make(chan daemon.Renewal, 1), stop: stop, done: make(chan struct{})}
	mb.mu.Lock()
	mb.seats[l.Star] = s
	mb.mu.Unlock()
	mb.log.Info("leading star", "star", l.Star, "token", l.Token)
	go func() {
		defer close(s.done)
		built, err := mb.build(sctx, l.Star)
		if err != nil {
			mb.log.Error("cannot build the daemon of a claimed star; giving it up", "star", l.Star, "err", err)
			mb.mu.Lock()
			if s.leaving == "" {
				s.leaving = "stuck"
				mb.m.Releases.WithLabelValues("stuck").Inc()
			}
			mb.mu.Unlock()
			return
		}
		mb.mu.Lock()
		s.built = built
		mb.mu.Unlock()
		mb.gather.Add(l.Star, built.Metrics)
		if sctx.Err() != nil {
			return // given up while it was built
		}
		built.Daemon.LeadTerm(sctx, daemon.Grant{Lease: l, Sent: sent}, s.renew)
	}()
}

// progressAge is how long ago the seat's daemon made progress (since the
// claim while it is built). Under Member.mu.
func (s *seat) progressAge() time.Duration {
	if s.built.Daemon == nil {
		return time.Since(s.claimedAt)
	}
	return s.built.Daemon.ProgressAge()
}

// giveUp steps a star's daemon down; reap hands it off once it stopped
// with why (released_why). kind is the release's label in the metrics
// (why, or for a balance move: balance, home or spread).
func (mb *Member) giveUp(star, why, kind, to string) {
	mb.mu.Lock()
	s := mb.seats[star]
	if s == nil || s.leaving != "" {
		mb.mu.Unlock()
		return
	}
	s.leaving, s.handTo, s.leavingAt = why, to, time.Now()
	mb.mu.Unlock()
	mb.log.Info("giving a star up", "star", star, "why", kind, "to", to, "token", s.lease.Token)
	mb.m.Releases.WithLabelValues(kind).Inc()
	s.stop()
}

// reap hands off the stars whose daemon stopped: given up on purpose (to
// the member named), or on its own (a lost lease: a no-op; a schema it
// does not know: released).
func (mb *Member) reap(ctx context.Context) {
	mb.mu.Lock()
	var done []*seat
	for star, s := range mb.seats {
		select {
		case <-s.done:
			done = append(done, s)
			delete(mb.seats, star)
		default:
		}
	}
	mb.mu.Unlock()
	for _, s := range done {
		why := orElse(s.leaving, "released")
		if why == "stuck" || why == "released" {
			// Stuck, or stepped down on its own (a schema this binary does
			// not know): left alone for the cooldown, or this member would
			// claim it again at once, and again.
			mb.mu.Lock()
			if s.handTo == "" {
				s.handTo = successor(s.star, mb.cfg.Member, eligible(s.star, mb.live))
			}
			mb.cooling[s.star] = time.Now().Add(mb.cfg.Rules.Cooldown)
			mb.mu.Unlock()
		}
		hctx, cancel := mb.call(ctx)
		err := mb.db.HandOff(hctx, s.lease.Fence, s.handTo, why)
		cancel()
		if err != nil {
			mb.log.Warn("hand-off failed; the lease expires on its own", "star", s.star, "err", err)
		}
		mb.gather.Remove(s.star)
		mb.mu.Lock()
		closeBuilt := s.built.Close
		mb.mu.Unlock()
		if closeBuilt != nil {
			closeBuilt()
		}
		mb.log.Info("star given up", "star", s.star, "why", why, "to", s.handTo, "token", s.lease.Token)
	}
}

func orElse(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// drain gives every star up to its successor, renewing them while their
// cycles finish, then leaves the fleet.
func (mb *Member) drain(ctx context.Context, tick *time.Ticker) {
	mb.draining = true
	mb.log.Info("draining: handing the stars off", "member", mb.cfg.Member)
	hctx, cancel := mb.call(ctx)
	_, _ = mb.db.Heartbeat(hctx, mb.cfg.Member, mb.instance, mb.cfg.Stars.String(), true, mb.cfg.LeaseTTL)
	cancel()
	mb.mu.Lock()
	live := mb.live
	mb.mu.Unlock()
	rctx, cancel := mb.call(ctx)
	if fv, err := mb.db.FleetView(rctx, mb.cfg.BudgetWindow); err == nil {
		live = liveMembers(fv.Members) // the freshest: a peer draining too is left out
	}
	cancel()
	mb.mu.Lock()
	var stars []string
	for star := range mb.seats {
		stars = append(stars, star)
	}
	mb.mu.Unlock()
	for _, star := range stars {
		mb.giveUp(star, "drain", "drain", successor(star, mb.cfg.Member, eligible(star, live)))
	}
	deadline := time.Now().Add(mb.cfg.ShutdownTimeout + 15*time.Second)
	for time.Now().Before(deadline) {
		mb.reap(ctx)
		mb.mu.Lock()
		left := len(mb.seats)
		mb.mu.Unlock()
		if left == 0 {
			break
		}
		select {
		case <-tick.C:
		case <-time.After(100 * time.Millisecond):
		}
	}
	lctx, cancel := mb.call(ctx)
	if err := mb.db.LeaveFleet(lctx, mb.cfg.Member, mb.instance); err != nil {
		mb.log.Warn("leaving the fleet failed; the member row expires on its own", "err", err)
	}
	cancel()
	mb.m.Owned.Set(0)
	mb.log.Info("drained", "member", mb.cfg.Member)
}
