package fleet

import (
	"cmp"
	"hash/fnv"
	"maps"
	"slices"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
)

// Selector is the stars a member serves (--stars).
type Selector = daemon.StarSelector

// ParseSelector parses --stars.
func ParseSelector(spec string) (Selector, error) { return daemon.ParseStarSelector(spec) }

// score is the rendezvous hash of (star, member): each star prefers the
// live member with the highest score, so members prefer different stars
// and a member that leaves and comes back is preferred for the same ones.
func score(star, member string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(star))
	h.Write([]byte{0})
	h.Write([]byte(member))
	x := h.Sum64()
	// finalize (splitmix64): fnv's low bits mix poorly for short keys
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// favourite is the live member star prefers ("" when none is live).
func favourite(star string, live []string) string {
	best, bestScore := "", uint64(0)
	for _, m := range live {
		if s := score(star, m); best == "" || s > bestScore || (s == bestScore && m < best) {
			best, bestScore = m, s
		}
	}
	return best
}

// liveMembers are the members alive and not draining.
func liveMembers(ms []catalog.Member) []catalog.Member {
	var out []catalog.Member
	for _, m := range ms {
		if m.Alive && !m.Draining {
			out = append(out, m)
		}
	}
	return out
}

// eligible are the names of the members whose --stars select star: only
// they are its favourite, its successor or a balance target for it (a
// member's selector that does not parse selects nothing).
func eligible(star string, ms []catalog.Member) []string {
	var out []string
	for _, m := range ms {
		if sel, err := ParseSelector(m.Stars); err == nil && sel.Match(star) {
			out = append(out, m.Member)
		}
	}
	return out
}

// Rules are the fleet's knobs the plan follows.
type Rules struct {
	Grace         time.Duration // others' favourites unowned this long may be claimed; twice this, by anyone beyond caps
	HandoffWindow time.Duration // a star handed to a member is left to it this long
	StableFor     time.Duration // the live membership must not have changed this long before a balance move
	Cooldown      time.Duration // a star moved this recently is not moved for balance
	MoveBudget    int           // balance moves fleet-wide per budget window, at least
	MoveBudgetPct int           // balance moves fleet-wide per budget window, in percent of the stars
}

// Budget is the fleet's balance moves per budget window for m stars: a
// share of them (MoveBudgetPct), and at least MoveBudget, so that a member
// joining a large fleet gets its share in minutes, not hours.
func (r Rules) Budget(m int) int {
	return max(r.MoveBudget, (m*r.MoveBudgetPct+99)/100)
}

// inFlight is how many stars a member may be giving up for balance at
// once: an eighth of the budget's share of each member, at least one. The
// budget is read from the move log, where a move enters only when its
// target claims the star, so the fleet can pass it by the moves in flight:
// less than N × inFlight, an eighth of the budget.
func (r Rules) inFlight(m, n int) int { return max(1, r.Budget(m)/(8*max(n, 1))) }

// view is what one tick of the member knows: the metastore's reading and
// its own state.
type view struct {
	me       string
	draining bool
	fleet    catalog.FleetView
	sel      Selector
	held     map[string]bool // stars this member leads (leaving ones too)
	leaving  int             // of which are being given up
	cooling  map[string]bool // stars this member gave up as stuck, left alone for now
	stableOK bool            // the live membership has been unchanged for StableFor
	// settled: the member has seen the live membership unchanged for a
	// round since it started, or it started a grace ago; settledFor is
	// how long it has been.
	settled    bool
	settledFor time.Duration
}

// shape is the fleet as a view sees it.
type shape struct {
	live    []string // live, non-draining members (sorted)
	members []catalog.Member
	stars   []catalog.FleetStar
	owned   map[string]int // live stars per holder
	cap     int            // ceil(M/N)
	floor   int            // floor(M/N)
	spread  int            // most minus fewest owned over live members
}

func (v view) shape() shape {
	sh := shape{owned: map[string]int{}}
	sh.members = liveMembers(v.fleet.Members)
	for _, m := range sh.members {
		sh.live = append(sh.live, m.Member)
	}
	for _, s := range v.fleet.Stars {
		if v.sel.Match(s.Star) {
			sh.stars = append(sh.stars, s)
			if s.Live {
				sh.owned[s.Holder]++
			}
		}
	}
	n, m := max(len(sh.live), 1), len(sh.stars)
	sh.cap, sh.floor = (m+n-1)/n, m/n
	if len(sh.live) > 0 {
		lo, hi := m, 0
		for _, mem := range sh.live {
			lo, hi = min(lo, sh.owned[mem]), max(hi, sh.owned[mem])
		}
		sh.spread = hi - lo
	}
	return sh
}

// favourite is star's favourite among the live members that select it.
func (sh shape) favourite(star string) string { return favourite(star, eligible(star, sh.members)) }

// claimPlan is what a member asks for in one tick: the claims in order and
// how many to take.
type claimPlan struct {
	claims []catalog.Claim
	n      int
}

// planClaims: stars handed to this member first and stars unowned beyond
// twice the grace (both beyond the cap), then, while under the cap, the
// stars this member is the favourite of, then others' favourites unowned
// beyond the grace; each group by rendezvous score. Until the member has
// settled (its first round sees only the members that started before it)
// it claims only the stars handed to it; and a star's unowned time counts
// for it from when it settled, so that members started together first
// claim their favourites, each up to its cap, whatever the stars' leases
// say of an earlier fleet.
func planClaims(v view, r Rules) claimPlan {
	if v.draining {
		return claimPlan{}
	}
	sh := v.shape()
	type cand struct {
		star  string
		prio  int
		score uint64
	}
	var cands []cand
	for _, s := range sh.stars {
		// A star this member gave up lately (stuck, stepped down) is left
		// to the others, unless none of them took it within three graces.
		if s.Live || v.held[s.Star] || (v.cooling[s.Star] && s.Unowned <= 3*r.Grace) {
			continue
		}
		handedHere := s.HandoffTo == v.me && s.HandoffAge < r.HandoffWindow
		// a hand-off to a member that is gone or draining binds no one
		handedElsewhere := s.HandoffTo != "" && s.HandoffTo != v.me && s.HandoffAge < r.HandoffWindow &&
			slices.Contains(sh.live, s.HandoffTo)
		c := cand{star: s.Star, score: score(s.Star, v.me)}
		unowned := min(s.Unowned, v.settledFor)
		switch {
		case handedHere:
			c.prio = 0
		case handedElsewhere, !v.settled:
			continue
		case unowned > 2*r.Grace:
			c.prio = 1
		case sh.favourite(s.Star) == v.me:
			c.prio = 2
		case unowned > r.Grace:
			c.prio = 3
		default:
			continue
		}
		cands = append(cands, c)
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.prio != b.prio {
			return cmp.Compare(a.prio, b.prio)
		}
		return cmp.Compare(b.score, a.score)
	})
	var p claimPlan
	room := max(sh.cap-len(v.held), 0)
	for _, c := range cands {
		over := c.prio <= 1
		if !over {
			if room == 0 {
				continue
			}
			room--
		}
		p.claims = append(p.claims, catalog.Claim{Star: c.star, OverCap: over})
	}
	p.n = len(p.claims)
	return p
}

// move is one balance move: give star up to the member to.
type move struct {
	star, to string
	// kind: balance (within the budget), home (to the member that
	// drained it) or spread (by a member above the cap); the last two
	// are outside the budget
	kind string
}

// planBalance: stars handed from this member toward the least loaded live
// members, only with hysteresis (this member above floor(M/N), the target
// at least two below it, both counted after the moves planned before in
// the round), only when the membership is stable, no star is unowned, the
// star has not moved within the cooldown and the fleet's balance moves are
// under budget. At most Rules.inFlight stars of this member leave at once,
// and each target gets in one round no more than its share of what it
// lacks (what it lacks over the members that may give), so members giving
// at once do not overfill it. Each star is one its target drained (a
// restarted member gets its own stars back), else one the target is the
// favourite of, else the one that scores highest for the target.
func planBalance(v view, r Rules, candidates []string) []move {
	if v.draining || !v.stableOK {
		return nil
	}
	sh := v.shape()
	for _, s := range sh.stars {
		if !s.Live {
			return nil // claims first
		}
	}
	if !slices.Contains(sh.live, v.me) {
		return nil
	}
	room := r.inFlight(len(sh.stars), len(sh.live)) - v.leaving
	budget := r.Budget(len(sh.stars)) - v.fleet.BalanceMoves
	owned := maps.Clone(sh.owned)
	givers := 0
	for _, m := range sh.live {
		if owned[m] > sh.floor {
			givers++
		}
	}
	// what each target may get in this round from this member
	share := map[string]int{}
	for _, m := range sh.live {
		share[m] = max(1, (sh.floor-owned[m]+givers-1)/max(givers, 1))
	}
	byStar := map[string]catalog.FleetStar{}
	for _, s := range sh.stars {
		byStar[s.Star] = s
	}
	left := slices.Clone(candidates)
	var moves []move
	for ; room > 0; room-- {
		mv, ok := nextMove(v, r, sh, byStar, owned, share, left, budget <= 0)
		if !ok {
			break
		}
		if mv.kind == "balance" {
			budget--
		}
		owned[v.me]--
		owned[mv.to]++
		share[mv.to]--
		left = slices.DeleteFunc(left, func(s string) bool { return s == mv.star })
		moves = append(moves, mv)
	}
	return moves
}

// nextMove is planBalance's next move given the counts after the moves
// planned before it (owned) and what is left of the targets' shares.
func nextMove(v view, r Rules, sh shape, byStar map[string]catalog.FleetStar, owned, share map[string]int,
	candidates []string, spent bool) (move, bool) {
	mine := owned[v.me]
	if mine <= sh.floor {
		return move{}, false
	}
	// Above the cap is a transient to undo (a lone first member took every
	// star; a drain piled stars on the others): not budgeted. Nor is a
	// star going home to the member that drained it. The rest is.
	budgeted := mine <= sh.cap && spent
	to := ""
	for _, m := range sh.live {
		if m != v.me && owned[m] <= mine-2 && share[m] > 0 && (to == "" || owned[m] < owned[to]) {
			to = m
		}
	}
	if to == "" {
		return move{}, false
	}
	// rank: 2 for a star the target drained (it gets its own back), 1 for
	// one it is the favourite of, 0 otherwise; ties by its score.
	best, bestRank, bestScore := "", -1, uint64(0)
	for _, star := range candidates {
		s := byStar[star]
		if !slices.Contains(eligible(star, sh.members), to) {
			continue // the target does not serve it
		}
		rank := 0
		switch {
		case s.LastReason == "drain" && s.LastFrom == to:
			rank = 2 // going home is not churn: no cooldown, no budget
		case budgeted:
			continue
		case s.LastReason == "balance" && s.LastMove >= 0 && s.LastMove < r.Cooldown:
			continue // moved for balance lately: no ping-pong
		case sh.favourite(star) == to:
			rank = 1
		}
		sc := score(star, to)
		if rank > bestRank || (rank == bestRank && sc > bestScore) {
			best, bestRank, bestScore = star, rank, sc
		}
	}
	if best == "" {
		return move{}, false
	}
	kind := "balance"
	switch {
	case bestRank == 2:
		kind = "home"
	case mine > sh.cap:
		kind = "spread"
	}
	return move{star: best, to: to, kind: kind}, true
}

// successor is the member a draining member hands star to: its favourite
// among the other live, non-draining members ("" when there is none).
func successor(star, me string, live []string) string {
	var others []string
	for _, m := range live {
		if m != me {
			others = append(others, m)
		}
	}
	return favourite(star, others)
}
