package objstore

import "sort"

// Cutting a gathered stretch into parts. A cut strictly inside a source
// range costs one more GET (the range is fetched in two pieces); a cut on a
// piece boundary or inside local bytes costs nothing. The search below finds
// the fewest costly cuts for a given part count, exactly for stretches of up
// to exactCutBudget (parts x free positions) and greedily beyond.

const exactCutBudget = 1 << 24

type gapKey struct {
	x, y  int64
	final bool
}

// gapOpt is one way to gather a stretch: parts and GETs.
type gapOpt struct{ parts, gets int }

// gapOpts returns the ways to gather [x, y): without pressure the single
// cheapest in requests, with pressure each part count that buys fewer
// requests. A stretch that ends the object may end in a short part; any
// other must be empty or at least MinPart long (nil: impossible).
func (pl *planner) gapOpts(x, y int64, final, pressure bool) []gapOpt {
	if y <= x {
		return []gapOpt{{}}
	}
	key := gapKey{x, y, final}
	opts, ok := pl.gaps[key]
	if !ok {
		opts = pl.computeGapOpts(x, y, final)
		pl.gaps[key] = opts
	}
	if !pressure && len(opts) > 1 {
		return opts[len(opts)-1:]
	}
	return opts
}

func (pl *planner) computeGapOpts(x, y int64, final bool) []gapOpt {
	lim := pl.lim
	g := y - x
	lastMin := lim.MinPart
	if final {
		lastMin = 1
	}
	if g < lastMin {
		return nil
	}
	base := pl.rangesIn(x, y)
	kmin := int((g + lim.MaxGathered - 1) / lim.MaxGathered)
	var opts []gapOpt
	firstBad := -1
	for k := kmin; int64(k-1)*lim.MinPart+lastMin <= g; k++ {
		if firstBad >= 0 && k-kmin >= firstBad {
			break // more parts cannot pay for themselves
		}
		bad, _ := pl.placeCuts(x, y, k, lastMin, false)
		if bad < 0 {
			continue
		}
		if firstBad < 0 {
			firstBad = bad
		}
		o := gapOpt{parts: k, gets: base + bad}
		if len(opts) == 0 || o.parts+o.gets < opts[len(opts)-1].parts+opts[len(opts)-1].gets {
			opts = append(opts, o)
		}
		if bad == 0 {
			break
		}
	}
	return opts
}

// cuts returns the interior cut points of the stretch [x, y) in parts parts.
func (pl *planner) cuts(x, y int64, final bool, parts int) []int64 {
	lastMin := pl.lim.MinPart
	if final {
		lastMin = 1
	}
	_, c := pl.placeCuts(x, y, parts, lastMin, true)
	return c
}

// iv is a closed interval of offsets; ivs are sorted, disjoint, not adjacent.
type iv struct{ lo, hi int64 }

// normIvs merges overlapping and adjacent intervals of a slice sorted by lo.
func normIvs(a []iv) []iv {
	out := a[:0]
	for _, v := range a {
		if v.lo > v.hi {
			continue
		}
		if n := len(out); n > 0 && v.lo <= out[n-1].hi+1 {
			out[n-1].hi = max(out[n-1].hi, v.hi)
			continue
		}
		out = append(out, v)
	}
	return out
}

func interIvs(a, b []iv) []iv {
	var out []iv
	for i, j := 0, 0; i < len(a) && j < len(b); {
		lo, hi := max(a[i].lo, b[j].lo), min(a[i].hi, b[j].hi)
		if lo <= hi {
			out = append(out, iv{lo, hi})
		}
		if a[i].hi < b[j].hi {
			i++
		} else {
			j++
		}
	}
	return out
}

// freeIvs are the offsets strictly inside (x, y) where a cut splits no
// source range: piece boundaries and the inside of local pieces.
func (pl *planner) freeIvs(x, y int64) []iv {
	var f []iv
	for i := pl.pieceAt(x); i < len(pl.start) && pl.start[i] < y; i++ {
		if s := pl.start[i]; s > x {
			f = append(f, iv{s, s})
		}
		if !pl.copyable[i] {
			f = append(f, iv{max(pl.start[i], x+1), min(pl.end[i], y-1)})
		}
	}
	return normIvs(f)
}

// cv is an interval of offsets that all cost cost; a cost function is a
// sorted list of disjoint cvs (offsets not listed are unreachable).
type cv struct {
	lo, hi int64
	cost   int
}

// windowMin returns g(q) = min f(p) over p in [q-hi, q-lo], clipped to
// [wlo, whi]. f's intervals shifted by [lo, hi] stay sorted by both ends,
// so a monotone deque sweeps their lower envelope in linear time.
func windowMin(f []cv, lo, hi, wlo, whi int64) []cv {
	var out []cv
	emit := func(a, b int64, c int) {
		a, b = max(a, wlo), min(b, whi)
		if a > b {
			return
		}
		if n := len(out); n > 0 && out[n-1].cost == c && out[n-1].hi+1 == a {
			out[n-1].hi = b
			return
		}
		out = append(out, cv{a, b, c})
	}
	var dq []int // indices into f, costs increasing
	next := 0    // next interval to enter
	pos := int64(-1 << 62)
	for next < len(f) || len(dq) > 0 {
		if len(dq) == 0 {
			pos = max(pos, f[next].lo+lo)
		}
		for next < len(f) && f[next].lo+lo <= pos {
			for len(dq) > 0 && f[dq[len(dq)-1]].cost >= f[next].cost {
				dq = dq[:len(dq)-1]
			}
			dq = append(dq, next)
			next++
		}
		for len(dq) > 0 && f[dq[0]].hi+hi < pos {
			dq = dq[1:]
		}
		if len(dq) == 0 {
			continue
		}
		// the minimum holds until the front leaves or a new interval enters
		end := f[dq[0]].hi + hi
		if next < len(f) {
			end = min(end, f[next].lo+lo-1)
		}
		emit(pos, end, f[dq[0]].cost)
		pos = end + 1
	}
	return out
}

// charge adds one to the cost of offsets outside the free set.
func charge(g []cv, free []iv) []cv {
	var out []cv
	add := func(a, b int64, c int) {
		if a > b {
			return
		}
		if n := len(out); n > 0 && out[n-1].cost == c && out[n-1].hi+1 == a {
			out[n-1].hi = b
			return
		}
		out = append(out, cv{a, b, c})
	}
	j := 0
	for _, v := range g {
		pos := v.lo
		for j < len(free) && free[j].hi < pos {
			j++
		}
		for k := j; pos <= v.hi; k++ {
			if k == len(free) || free[k].lo > v.hi {
				add(pos, v.hi, v.cost+1)
				break
			}
			add(pos, free[k].lo-1, v.cost+1)
			add(max(pos, free[k].lo), min(v.hi, free[k].hi), v.cost)
			pos = free[k].hi + 1
		}
	}
	return out
}

// costAt returns f's cost at x (-1: unreachable).
func costAt(f []cv, x int64) int {
	i := sort.Search(len(f), func(i int) bool { return f[i].hi >= x })
	if i < len(f) && f[i].lo <= x {
		return f[i].cost
	}
	return -1
}

func isFree(free []iv, x int64) bool {
	i := sort.Search(len(free), func(i int) bool { return free[i].hi >= x })
	return i < len(free) && free[i].lo <= x
}

// bestIn returns the latest offset of f in [a, b] with the lowest cost.
func bestIn(f []cv, a, b int64) (int64, int) {
	pos, cost := int64(-1), -1
	for _, v := range f {
		lo, hi := max(v.lo, a), min(v.hi, b)
		if lo <= hi && (cost < 0 || v.cost <= cost) {
			pos, cost = hi, v.cost
		}
	}
	return pos, cost
}

// placeCuts finds k-1 cuts for [x, y) with parts of MinPart..MaxGathered
// bytes (the last at least lastMin) that split the fewest source ranges. It
// returns that number (-1: no valid cuts) and, if want, the cuts.
func (pl *planner) placeCuts(x, y int64, k int, lastMin int64, want bool) (int, []int64) {
	lim := pl.lim
	g := y - x
	if g > int64(k)*lim.MaxGathered || int64(k-1)*lim.MinPart+lastMin > g {
		return -1, nil
	}
	if k == 1 {
		return 0, nil
	}
	free := pl.freeIvs(x, y)
	// window of the m-th cut given only x, y and the part count
	window := func(m int) (int64, int64) {
		lo := max(x+int64(m)*lim.MinPart, y-int64(k-m)*lim.MaxGathered)
		hi := min(x+int64(m)*lim.MaxGathered, y-int64(k-m-1)*lim.MinPart-lastMin)
		return lo, hi
	}
	if int64(k)*int64(len(free)+1) > exactCutBudget {
		return pl.greedyCuts(x, y, k, lastMin, free, window, want)
	}
	// f[m]: the fewest costly cuts among the first m with the m-th at each offset
	f := make([][]cv, k)
	f[0] = []cv{{x, x, 0}}
	for m := 1; m < k; m++ {
		lo, hi := window(m)
		f[m] = charge(windowMin(f[m-1], lim.MinPart, lim.MaxGathered, lo, hi), free)
		if len(f[m]) == 0 {
			return -1, nil
		}
	}
	last, bad := bestIn(f[k-1], y-lim.MaxGathered, y-lastMin)
	if bad < 0 {
		return -1, nil
	}
	if !want {
		return bad, nil
	}
	cuts := make([]int64, k-1)
	cuts[k-2] = last
	for m := k - 1; m > 1; m-- {
		c := cuts[m-1]
		need := costAt(f[m], c)
		if !isFree(free, c) { // this cut was charged
			need--
		}
		var prev int64 = -1
		for _, v := range f[m-1] {
			lo, hi := max(v.lo, c-lim.MaxGathered), min(v.hi, c-lim.MinPart)
			if lo <= hi && v.cost == need {
				prev = hi
			}
		}
		cuts[m-2] = prev
	}
	return bad, cuts
}

// greedyCuts places each cut at the latest free position its window allows,
// else at the window's end; for stretches too long for the exact search.
func (pl *planner) greedyCuts(x, y int64, k int, lastMin int64, free []iv, window func(int) (int64, int64), want bool) (int, []int64) {
	lim := pl.lim
	bad := 0
	var cuts []int64
	prev := x
	for m := 1; m < k; m++ {
		lo, hi := window(m)
		lo, hi = max(lo, prev+lim.MinPart), min(hi, prev+lim.MaxGathered)
		if lo > hi {
			return -1, nil
		}
		pos := hi
		cand := interIvs(free, []iv{{lo, hi}})
		if len(cand) > 0 {
			pos = cand[len(cand)-1].hi
		} else {
			bad++
		}
		cuts = append(cuts, pos)
		prev = pos
	}
	if d := y - prev; d < lastMin || d > lim.MaxGathered {
		return -1, nil
	}
	if !want {
		cuts = nil
	}
	return bad, cuts
}
