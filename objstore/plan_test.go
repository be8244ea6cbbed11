package objstore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// refCost is the exhaustive optimum: a DP over every byte position and part
// count, trying every part that S3's rules allow. ok is false when no valid
// plan exists.
func refCost(pieces []PieceSpec, lim Limits) (fetched int64, reqs int, ok bool) {
	var starts []int64
	var copyable []bool
	var total int64
	for _, p := range pieces {
		if p.Len > 0 {
			starts = append(starts, total)
			copyable = append(copyable, p.Copy)
			total += p.Len
		}
	}
	if total == 0 {
		return 0, 1, true
	}
	ends := append(append([]int64{}, starts[1:]...), total)
	pieceAt := func(x int64) int {
		i := 0
		for ends[i] <= x {
			i++
		}
		return i
	}
	gather := func(p, q int64) (int64, int) {
		var f int64
		gets := 0
		for i := range starts {
			lo, hi := max(p, starts[i]), min(q, ends[i])
			if lo < hi && copyable[i] {
				f += hi - lo
				gets++
			}
		}
		return f, gets
	}
	type cost struct {
		f  int64
		r  int
		ok bool
	}
	lt := func(a, b cost) bool { return !b.ok || (a.ok && better(a.f, a.r, b.f, b.r)) }
	// best[c][p]: reach offset p with c parts, all non-last so far.
	best := make([][]cost, lim.MaxParts+1)
	for c := range best {
		best[c] = make([]cost, total+1)
	}
	best[0][0] = cost{ok: true}
	var out cost
	for c := 0; c < lim.MaxParts; c++ {
		for p := int64(0); p < total; p++ {
			cur := best[c][p]
			if !cur.ok {
				continue
			}
			for q := p + 1; q <= total; q++ {
				n := q - p
				last := q == total
				var cands []cost
				if n <= lim.MaxGathered && (n >= lim.MinPart || last) {
					f, g := gather(p, q)
					cands = append(cands, cost{cur.f + f, cur.r + 1 + g, true})
					if last && c == 0 {
						o := cost{f, 1 + g, true} // one PutObject
						if lt(o, out) {
							out = o
						}
					}
				}
				i := pieceAt(p)
				if copyable[i] && q <= ends[i] && n <= lim.MaxPart && (n >= lim.copyMin() || (last && n >= lim.CopyMin)) {
					cands = append(cands, cost{cur.f, cur.r + 1, true})
				}
				for _, cd := range cands {
					if last {
						if o := (cost{cd.f, cd.r + 2, true}); lt(o, out) {
							out = o
						}
					} else if lt(cd, best[c+1][q]) {
						best[c+1][q] = cd
					}
				}
			}
		}
	}
	return out.f, out.r, out.ok
}

// enumCost enumerates every plan outright; for tiny objects, to check refCost.
func enumCost(pieces []PieceSpec, lim Limits) (int64, int, bool) {
	var specs []PieceSpec
	var total int64
	for _, p := range pieces {
		if p.Len > 0 {
			specs = append(specs, p)
			total += p.Len
		}
	}
	if total == 0 {
		return 0, 1, true
	}
	var bestF int64
	bestR, found := 0, false
	var parts []Part
	var rec func(off int64)
	rec = func(off int64) {
		if off == total {
			plan := Plan{Parts: parts, Multipart: !(len(parts) == 1 && !parts[0].Copy), Size: total}
			plan = segmentPlan(plan, specs)
			if plan.Check(specs, lim) != nil {
				return
			}
			f, r := plan.Fetched(), plan.Requests()
			if !found || better(f, r, bestF, bestR) {
				bestF, bestR, found = f, r, true
			}
			return
		}
		if len(parts) == lim.MaxParts {
			return
		}
		for q := off + 1; q <= total; q++ {
			for _, cp := range []bool{false, true} {
				parts = append(parts, Part{Number: len(parts) + 1, Copy: cp, Off: off, Size: q - off})
				rec(q)
				parts = parts[:len(parts)-1]
			}
		}
	}
	rec(0)
	return bestF, bestR, found
}

// segmentPlan fills in the segments of hand-made parts.
func segmentPlan(plan Plan, pieces []PieceSpec) Plan {
	out := plan
	out.Parts = make([]Part, len(plan.Parts))
	for k, part := range plan.Parts {
		var pos int64
		part.Segments = nil
		for i, pc := range pieces {
			lo, hi := max(part.Off, pos), min(part.Off+part.Size, pos+pc.Len)
			if lo < hi {
				part.Segments = append(part.Segments, Segment{Piece: i, Off: lo - pos, Len: hi - lo, Fetch: !part.Copy && pc.Copy})
			}
			pos += pc.Len
		}
		out.Parts[k] = part
	}
	return out
}

func randLimits(r *rand.Rand) Limits {
	minPart := 1 + r.Int64N(4)
	copyMin := 1 + r.Int64N(6)
	maxG := 2*minPart + r.Int64N(5)
	cmin := max(minPart, copyMin)
	return Limits{
		MinPart: minPart, CopyMin: copyMin, MaxGathered: maxG,
		MaxPart:  max(maxG, 2*cmin) + r.Int64N(5),
		MaxParts: 1 + r.IntN(9),
	}
}

func randPieces(r *rand.Rand, lim Limits, n int, maxLen int64) []PieceSpec {
	pieces := make([]PieceSpec, n)
	for i := range pieces {
		l := r.Int64N(maxLen + 1)
		if r.IntN(3) == 0 {
			l = r.Int64N(lim.MinPart + 1) // many small pieces
		}
		pieces[i] = PieceSpec{Len: l, Copy: r.IntN(5) < 3}
	}
	return pieces
}

func TestRefCostMatchesEnumeration(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 1500; iter++ {
		lim := randLimits(r)
		pieces := randPieces(r, lim, r.IntN(4), 4)
		f1, r1, ok1 := refCost(pieces, lim)
		f2, r2, ok2 := enumCost(pieces, lim)
		if ok1 != ok2 || (ok1 && (f1 != f2 || r1 != r2)) {
			t.Fatalf("pieces %+v limits %+v: ref (%d, %d, %v), enumeration (%d, %d, %v)", pieces, lim, f1, r1, ok1, f2, r2, ok2)
		}
	}
}

// TestPlanPartsOptimal: every plan is valid, its parts tile the request,
// its fetched bytes equal the exhaustive optimum, and so do its requests
// unless the part count constrained the search.
func TestPlanPartsOptimal(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	iters := 40000
	if testing.Short() {
		iters = 4000
	}
	pressured, worseReqs := 0, 0
	for iter := 0; iter < iters; iter++ {
		lim := randLimits(r)
		pieces := randPieces(r, lim, r.IntN(10), 4*lim.MaxGathered)
		wantF, wantR, ok := refCost(pieces, lim)
		plan, pressure, err := planParts(pieces, lim)
		if !ok {
			if !errors.Is(err, ErrTooManyParts) {
				t.Fatalf("pieces %+v limits %+v: no valid plan exists, planner says %v / %+v", pieces, lim, err, plan)
			}
			continue
		}
		if err != nil {
			t.Fatalf("pieces %+v limits %+v: %v (optimum fetches %d)", pieces, lim, err, wantF)
		}
		if err := plan.Check(pieces, lim); err != nil {
			t.Fatalf("pieces %+v limits %+v: invalid plan %s: %v", pieces, lim, describe(plan), err)
		}
		if plan.Fetched() != wantF {
			t.Fatalf("pieces %+v limits %+v: plan fetches %d, optimum %d\nplan %s", pieces, lim, plan.Fetched(), wantF, describe(plan))
		}
		if pressure {
			pressured++
		}
		switch {
		case plan.Requests() < wantR:
			t.Fatalf("pieces %+v limits %+v: plan claims %d requests, below the optimum %d", pieces, lim, plan.Requests(), wantR)
		case plan.Requests() > wantR && !pressure:
			t.Fatalf("pieces %+v limits %+v: %d requests, optimum %d\nplan %s", pieces, lim, plan.Requests(), wantR, describe(plan))
		case plan.Requests() > wantR:
			worseReqs++
		}
	}
	t.Logf("%d cases, %d constrained by MaxParts, %d of those above the fewest requests", iters, pressured, worseReqs)
}

func describe(p Plan) string {
	s := fmt.Sprintf("multipart=%v", p.Multipart)
	for _, part := range p.Parts {
		s += fmt.Sprintf("\n  #%d copy=%v [%d,+%d) %+v", part.Number, part.Copy, part.Off, part.Size, part.Segments)
	}
	return s
}

func TestEncodeDecodeCRC32C(t *testing.T) {
	if c, err := DecodeCRC32C(EncodeCRC32C(0xdeadbeef)); err != nil || c != 0xdeadbeef {
		t.Fatalf("encode/decode: %08x, %v", c, err)
	}
}

// TestPlanExamples pins the planner's choices on S3's limits.
func TestPlanExamples(t *testing.T) {
	const mib = 1 << 20
	rep := func(n int, p PieceSpec) []PieceSpec {
		out := make([]PieceSpec, n)
		for i := range out {
			out[i] = p
		}
		return out
	}
	cases := []struct {
		name     string
		pieces   []PieceSpec
		fetched  int64
		parts    int
		requests int
	}{
		{"32 ranges of 8 MiB: all copied", rep(32, PieceSpec{8 * mib, true}), 0, 32, 34},
		{"4096 ranges of 64 KiB: all fetched, 16 MiB parts", rep(4096, PieceSpec{64 << 10, true}), 256 * mib, 16, 4096 + 16 + 2},
		{"small object: one PUT", []PieceSpec{{100, true}, {200, false}, {300, true}}, 400, 1, 3},
		{"empty object", nil, 0, 0, 1},
		// 100 local bytes between two 6 MiB ranges: borrow the shortfall
		// from one neighbour's tail instead of fetching a whole range
		{"borrow a tail", []PieceSpec{{12 * mib, true}, {100, false}, {12 * mib, true}}, 5*mib - 100, 3, 6},
		// 6 MiB ranges cannot spare 5 MiB: gather the last one whole
		{"no tail to spare", []PieceSpec{{6 * mib, true}, {100, false}, {6 * mib, true}}, 6 * mib, 2, 5},
		{"footer after a big range", []PieceSpec{{300 * mib, true}, {4096, false}}, 0, 2, 4},
		{"small range then big", []PieceSpec{{3 * mib, true}, {20 * mib, true}, {50, false}}, 5 * mib, 3, 7},
	}
	for _, c := range cases {
		plan, err := PlanParts(c.pieces, DefaultLimits)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := plan.Check(c.pieces, DefaultLimits); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if plan.Fetched() != c.fetched || len(plan.Parts) != c.parts || plan.Requests() != c.requests {
			t.Errorf("%s: fetched %d, %d parts, %d requests; want %d, %d, %d\n%s", c.name,
				plan.Fetched(), len(plan.Parts), plan.Requests(), c.fetched, c.parts, c.requests, describe(plan))
		}
	}
}

// TestPlanLargeSkew: a realistic skewed mix of thousands of pieces plans
// quickly and validly.
var skewTotal int64 = 4 << 30

func TestPlanLargeSkew(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var pieces []PieceSpec
	var total int64
	for total < skewTotal {
		var n int64
		switch x := r.IntN(100); {
		case x < 70:
			n = 1 + r.Int64N(64<<10)
		case x < 90:
			n = 1 + r.Int64N(4<<20)
		default:
			n = 1 + r.Int64N(64<<20)
		}
		pieces = append(pieces, PieceSpec{n, r.IntN(10) != 0})
		total += n
	}
	plan, err := PlanParts(pieces, DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Check(pieces, DefaultLimits); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d pieces, %d bytes: %d parts, %d copied, %d fetched, %d requests",
		len(pieces), total, len(plan.Parts), plan.Copied(), plan.Fetched(), plan.Requests())
}

func BenchmarkPlanParts(b *testing.B) {
	r := rand.New(rand.NewPCG(9, 10))
	var pieces []PieceSpec
	for i := 0; i < 4096; i++ {
		n := 1 + r.Int64N(128<<10)
		if r.IntN(20) == 0 {
			n = 4<<20 + r.Int64N(16<<20)
		}
		pieces = append(pieces, PieceSpec{n, true})
	}
	for b.Loop() {
		if _, err := PlanParts(pieces, DefaultLimits); err != nil {
			b.Fatal(err)
		}
	}
}
