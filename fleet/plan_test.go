package fleet

import (
	"fmt"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
)

var testRules = Rules{Grace: 10 * time.Second, HandoffWindow: 3 * time.Second, StableFor: 30 * time.Second,
	Cooldown: 10 * time.Minute, MoveBudget: 10}

func members(names ...string) []catalog.Member {
	var out []catalog.Member
	for _, n := range names {
		out = append(out, catalog.Member{Member: n, Alive: true, Stars: "all"})
	}
	return out
}

func stars(n int) []catalog.FleetStar {
	var out []catalog.FleetStar
	for i := range n {
		out = append(out, catalog.FleetStar{Star: fmt.Sprintf("s%02d", i), LastMove: -1})
	}
	return out
}

func testView(me string, fv catalog.FleetView) view {
	sel, _ := ParseSelector("all")
	v := view{me: me, fleet: fv, sel: sel, held: map[string]bool{}, cooling: map[string]bool{}, stableOK: true,
		settled: true, settledFor: 24 * time.Hour}
	for _, s := range fv.Stars {
		if s.Live && s.Holder == me {
			v.held[s.Star] = true
		}
	}
	return v
}

// Fresh stars: each member claims at once exactly the ones it is the
// favourite of (up to its cap), and the others' only after the grace.
func TestClaimsPreferFavouritesThenGrace(t *testing.T) {
	fv := catalog.FleetView{Members: members("a", "b", "c"), Stars: stars(30)}
	claimed := map[string]string{}
	for _, me := range []string{"a", "b", "c"} {
		p := planClaims(testView(me, fv), testRules)
		for _, c := range p.claims {
			if c.OverCap {
				t.Fatalf("%s claims %s beyond its cap before any grace", me, c.Star)
			}
			if other, ok := claimed[c.Star]; ok {
				t.Fatalf("%s and %s both ask for %s at once", me, other, c.Star)
			}
			claimed[c.Star] = me
		}
		if len(p.claims) > 10 {
			t.Fatalf("%s claims %d stars, above the cap of 10", me, len(p.claims))
		}
	}
	// Past the grace, a member under its cap takes others' favourites too;
	// past twice the grace, anyone takes any, beyond its cap.
	for i := range fv.Stars {
		fv.Stars[i].Unowned = 15 * time.Second
	}
	if p := planClaims(testView("a", fv), testRules); len(p.claims) != 10 {
		t.Fatalf("a under its cap after the grace: %d claims, want its cap of 10", len(p.claims))
	}
	for i := range fv.Stars {
		fv.Stars[i].Unowned = 25 * time.Second
	}
	if p := planClaims(testView("a", fv), testRules); len(p.claims) != 30 || !p.claims[29].OverCap {
		t.Fatalf("the liveness rule: %d claims, want all 30 beyond the cap", len(p.claims))
	}
	// A star handed to a member: it alone claims it, at once, beyond its cap.
	fv = catalog.FleetView{Members: members("a", "b"), Stars: stars(2)}
	fv.Stars[0].HandoffTo, fv.Stars[0].HandoffAge = "b", time.Second
	for _, me := range []string{"a", "b"} {
		v := testView(me, fv)
		v.held = map[string]bool{"x": true, "y": true} // at its cap
		p := planClaims(v, testRules)
		got := len(p.claims) == 1 && p.claims[0].Star == "s00" && p.claims[0].OverCap
		if (me == "b") != got {
			t.Fatalf("%s's claims of a star handed to b: %+v", me, p.claims)
		}
	}
	// A draining member claims nothing.
	v := testView("a", catalog.FleetView{Members: members("a"), Stars: stars(3)})
	v.draining = true
	if p := planClaims(v, testRules); p.n != 0 {
		t.Fatalf("a draining member claims %+v", p.claims)
	}
}

// planOne is planBalance's first move.
func planOne(v view, r Rules, candidates []string) (move, bool) {
	ms := planBalance(v, r, candidates)
	if len(ms) == 0 {
		return move{}, false
	}
	return ms[0], true
}

func owned(fv *catalog.FleetView, counts map[string]int) {
	i := 0
	for m, n := range counts {
		for range n {
			fv.Stars[i].Live, fv.Stars[i].Holder = true, m
			i++
		}
	}
}

// The balance: only with a difference of two, toward the least loaded,
// one star at a time, never unstable, over budget or within a cooldown;
// a drained star goes home first.
func TestBalanceHysteresis(t *testing.T) {
	mine := func(fv catalog.FleetView, me string) []string {
		var out []string
		for _, s := range fv.Stars {
			if s.Live && s.Holder == me {
				out = append(out, s.Star)
			}
		}
		return out
	}
	cases := []struct {
		counts map[string]int
		me     string
		to     string // "" no move
	}{
		{map[string]int{"a": 5, "b": 4, "c": 3}, "a", "c"},
		{map[string]int{"a": 5, "b": 4, "c": 3}, "b", ""}, // b is at floor(12/3)
		{map[string]int{"a": 4, "b": 4, "c": 4}, "a", ""},
		{map[string]int{"a": 5, "b": 4, "c": 4}, "a", ""}, // 13 stars: 5/4/4 is floor..ceil already
		{map[string]int{"a": 6, "b": 3, "c": 3}, "a", "b"},
	}
	for _, c := range cases {
		fv := catalog.FleetView{Members: members("a", "b", "c"), Stars: stars(12)}
		if c.counts["a"]+c.counts["b"]+c.counts["c"] != 12 {
			fv.Stars = stars(c.counts["a"] + c.counts["b"] + c.counts["c"])
		}
		owned(&fv, c.counts)
		mv, ok := planOne(testView(c.me, fv), testRules, mine(fv, c.me))
		if ok != (c.to != "") || (ok && mv.to != c.to) {
			t.Errorf("%v as %s: move %+v %v, want to %q", c.counts, c.me, mv, ok, c.to)
		}
	}

	base := func() catalog.FleetView {
		fv := catalog.FleetView{Members: members("a", "b", "c"), Stars: stars(12)}
		owned(&fv, map[string]int{"a": 6, "b": 3, "c": 3})
		return fv
	}
	fv := base()
	v := testView("a", fv)
	v.stableOK = false
	if _, ok := planOne(v, testRules, mine(fv, "a")); ok {
		t.Error("a move while the membership is not stable")
	}
	// Over the budget: a member above the cap still gives stars back (a
	// transient to undo); one within the cap waits.
	fv.BalanceMoves = testRules.MoveBudget
	if _, ok := planOne(testView("a", fv), testRules, mine(fv, "a")); !ok {
		t.Error("a member above the cap waits for the budget")
	}
	within := catalog.FleetView{Members: members("a", "b", "c"), Stars: stars(13), BalanceMoves: testRules.MoveBudget}
	owned(&within, map[string]int{"a": 5, "b": 5, "c": 3})
	if _, ok := planOne(testView("a", within), testRules, mine(within, "a")); ok {
		t.Error("a move over the budget by a member within its cap")
	}
	within.BalanceMoves = 0
	if mv, ok := planOne(testView("a", within), testRules, mine(within, "a")); !ok || mv.to != "c" {
		t.Errorf("5/5/3 under budget: %+v %v, want a move to c", mv, ok)
	}
	fv = base()
	v = testView("a", fv)
	v.leaving = 1
	if _, ok := planOne(v, testRules, mine(fv, "a")); ok {
		t.Error("a second move while one star is leaving")
	}
	fv.Stars[11].Live = false
	if _, ok := planOne(testView("a", fv), testRules, mine(fv, "a")); ok {
		t.Error("a balance move while a star is unowned")
	}
	// Every star of a moved within the cooldown: none moves, except one
	// that b drained, which goes home first.
	fv = base()
	for i := range fv.Stars {
		fv.Stars[i].LastMove, fv.Stars[i].LastReason = time.Minute, "new"
	}
	if _, ok := planOne(testView("a", fv), testRules, mine(fv, "a")); !ok {
		t.Error("no move of stars claimed new a minute ago: a first claim must not start the cooldown")
	}
	for i := range fv.Stars {
		fv.Stars[i].LastReason = "balance"
	}
	if _, ok := planOne(testView("a", fv), testRules, mine(fv, "a")); ok {
		t.Error("a move of a star within its cooldown")
	}
	var home string
	for i, s := range fv.Stars {
		if s.Holder == "a" {
			fv.Stars[i].LastReason, fv.Stars[i].LastFrom, home = "drain", "b", s.Star
			break
		}
	}
	if mv, ok := planOne(testView("a", fv), testRules, mine(fv, "a")); !ok || mv.star != home || mv.to != "b" {
		t.Errorf("the drained star does not go home: %+v %v, want %s to b", mv, ok, home)
	}
}

// A drain hands each star to its favourite among the others; a member
// that leaves and comes back is the favourite of the same stars.
func TestSuccessorIsTheFavouriteAmongTheOthers(t *testing.T) {
	live := []string{"a", "b", "c", "d"}
	moved := 0
	for i := range 200 {
		star := fmt.Sprintf("s%03d", i)
		fav := favourite(star, live)
		next := successor(star, fav, live)
		if next == fav || next == "" {
			t.Fatalf("%s: successor of %s is %q", star, fav, next)
		}
		if other := successor(star, "x", live); other != fav {
			t.Fatalf("%s: the successor for a non-member is %s, want the favourite %s", star, other, fav)
		}
		// removing a member moves only its own stars
		if favourite(star, []string{"a", "b", "c"}) != fav {
			moved++
			if fav != "d" {
				t.Fatalf("%s moved from %s when d left", star, fav)
			}
		}
	}
	if moved < 25 || moved > 75 {
		t.Errorf("d was the favourite of %d of 200 stars, want about 50", moved)
	}
}

func TestSelector(t *testing.T) {
	for _, c := range []struct {
		spec string
		in   []string
		out  []string
		bad  bool
	}{
		{spec: "all", in: []string{"a", "zz"}},
		{spec: "s1, s2", in: []string{"s1", "s2"}, out: []string{"s3", "s"}},
		{spec: "eu-*,us-1", in: []string{"eu-1", "eu-west", "us-1"}, out: []string{"us-2", "ap-1"}},
		{spec: "", bad: true},
		{spec: "a,,b", bad: true},
		{spec: "[a", bad: true},
	} {
		sel, err := ParseSelector(c.spec)
		if (err != nil) != c.bad {
			t.Fatalf("%q: %v", c.spec, err)
		}
		for _, s := range c.in {
			if !sel.Match(s) {
				t.Errorf("%q does not select %s", c.spec, s)
			}
		}
		for _, s := range c.out {
			if sel.Match(s) {
				t.Errorf("%q selects %s", c.spec, s)
			}
		}
	}
}

// Members that select different stars: a star's favourite, successor and
// balance target are only members that select it; a hand-off to a member
// gone or draining binds no one.
func TestSelectorsAndDeadSuccessors(t *testing.T) {
	fv := catalog.FleetView{Members: []catalog.Member{
		{Member: "eu", Alive: true, Stars: "eu-*"}, {Member: "us", Alive: true, Stars: "us-*"}},
		Stars: []catalog.FleetStar{{Star: "eu-1", LastMove: -1}, {Star: "us-1", LastMove: -1}}}
	for _, me := range []string{"eu", "us"} {
		v := testView(me, fv)
		v.sel, _ = ParseSelector(me + "-*")
		p := planClaims(v, testRules)
		if len(p.claims) != 1 || p.claims[0].Star != me+"-1" {
			t.Errorf("%s claims %+v, want its own star at once", me, p.claims)
		}
	}
	if got := successor("eu-1", "eu", eligible("eu-1", fv.Members)); got != "" {
		t.Errorf("successor of eu-1 among members selecting it: %q, want none", got)
	}
	// b drained and gone: the hand-off to it does not hold a off.
	fv = catalog.FleetView{Members: members("a"), Stars: stars(1)}
	fv.Stars[0].HandoffTo, fv.Stars[0].HandoffAge, fv.Stars[0].Holder = "b", time.Second, "b"
	if p := planClaims(testView("a", fv), testRules); len(p.claims) != 1 {
		t.Errorf("a hand-off to a gone member kept a from claiming: %+v", p.claims)
	}
	// A star a gave up as stuck: left to others, unless none took it
	// within three graces.
	v := testView("a", fv)
	fv.Stars[0].HandoffTo = ""
	v.fleet = fv
	v.cooling["s00"] = true
	if p := planClaims(v, testRules); len(p.claims) != 0 {
		t.Errorf("a claims a star it is cooling: %+v", p.claims)
	}
	v.fleet.Stars[0].Unowned = 4 * testRules.Grace
	if p := planClaims(v, testRules); len(p.claims) != 1 {
		t.Errorf("a star cooling and unowned for 4 graces: %+v, want a to take it", p.claims)
	}
}

// Until a member has settled it claims only stars handed to it; settled,
// it counts a star's unowned time from then, so stars an earlier fleet
// left unowned long ago go first to their favourites, each up to its cap.
func TestClaimsWaitForTheMembershipToSettle(t *testing.T) {
	fv := catalog.FleetView{Members: members("a", "b"), Stars: stars(40)}
	for i := range fv.Stars {
		fv.Stars[i].Unowned = time.Hour
	}
	fv.Stars[0].HandoffTo, fv.Stars[0].HandoffAge = "a", time.Second
	v := testView("a", fv)
	v.settled, v.settledFor = false, 0
	if p := planClaims(v, testRules); p.n != 1 || p.claims[0].Star != "s00" {
		t.Fatalf("an unsettled member claims %+v, want only the star handed to it", p.claims)
	}
	v.settled = true
	p := planClaims(v, testRules)
	if p.n > 20 {
		t.Fatalf("just settled: %d claims, above the cap of 20", p.n)
	}
	sh := v.shape()
	for _, c := range p.claims[1:] {
		if c.OverCap || sh.favourite(c.Star) != "a" {
			t.Fatalf("just settled, a claims %+v: want only its favourites within its cap", c)
		}
	}
	v.settledFor = 2*testRules.Grace + time.Second
	if p := planClaims(v, testRules); p.n != 40 {
		t.Fatalf("settled two graces ago: %d claims, want all 40 by the liveness rule", p.n)
	}
}

// The budget is a share of the stars, at least the configured floor; a
// member above its cap in a large fleet gives several stars at once, and
// no target is given more in a round than its share of what it lacks.
func TestBalanceScalesWithTheStars(t *testing.T) {
	r := Rules{MoveBudget: 10, MoveBudgetPct: 20}
	if r.Budget(20) != 10 || r.Budget(1000) != 200 || r.Budget(101) != 21 {
		t.Fatalf("budgets %d %d %d, want 10 200 21", r.Budget(20), r.Budget(1000), r.Budget(101))
	}
	fv := catalog.FleetView{Members: members("a", "b", "c", "d", "e"), Stars: stars(1000)}
	for i := range fv.Stars {
		fv.Stars[i].Star = fmt.Sprintf("s%04d", i)
	}
	owned(&fv, map[string]int{"a": 250, "b": 250, "c": 250, "d": 250})
	mine := func(me string) []string {
		var out []string
		for _, s := range fv.Stars {
			if s.Holder == me {
				out = append(out, s.Star)
			}
		}
		return out
	}
	ms := planBalance(testView("a", fv), r, mine("a"))
	if len(ms) != r.inFlight(1000, 5) || len(ms) != 5 {
		t.Fatalf("a joining member in a fleet of 1000: %d moves in a round, want 5", len(ms))
	}
	for _, mv := range ms {
		if mv.to != "e" || mv.kind != "spread" {
			t.Errorf("move %+v: want a spread to e", mv)
		}
	}
	v := testView("a", fv)
	v.leaving = 5
	if ms := planBalance(v, r, mine("a")); len(ms) != 0 {
		t.Errorf("moves %+v with five stars leaving already", ms)
	}
	// Two givers, one target: each gives half of what it lacks, so that
	// together they fill it to the floor, not past the cap.
	fv = catalog.FleetView{Members: members("a", "b", "c"), Stars: stars(20)}
	owned(&fv, map[string]int{"a": 10, "b": 10})
	wide := Rules{MoveBudget: 100}
	for _, me := range []string{"a", "b"} {
		if ms := planBalance(testView(me, fv), wide, mine(me)); len(ms) != 3 {
			t.Errorf("%s gives %d stars to c, want 3 (c lacks 6, two members give)", me, len(ms))
		}
	}
}
