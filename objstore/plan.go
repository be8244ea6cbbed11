package objstore

import (
	"errors"
	"fmt"
	"sort"
)

// The part planner: the multipart Limits it obeys, the Plan it returns,
// and PlanParts's search for the plan that fetches the fewest bytes in the
// fewest requests (cutting a gathered stretch into parts: plan_cuts.go).

// PieceSpec is what the part planner knows of a piece: its length and
// whether it can be copied server side (a range of an existing object) or
// must be uploaded (local bytes).
type PieceSpec struct {
	Len  int64
	Copy bool
}

// Limits are the multipart rules the planner obeys, parametrised so that
// property tests can brute-force small instances.
type Limits struct {
	MinPart     int64 // smallest part except the last (S3: 5 MiB)
	MaxPart     int64 // largest part (S3: 5 GiB)
	MaxParts    int   // most parts in one upload (S3: 10,000)
	CopyMin     int64 // smallest range copied server side (copy threshold)
	MaxGathered int64 // largest gathered part: bounds memory and each staged part
}

// DefaultLimits are S3's rules, with gathered parts of 16 MiB.
var DefaultLimits = Limits{
	MinPart:     5 << 20,
	MaxPart:     5 << 30,
	MaxParts:    10000,
	CopyMin:     5 << 20,
	MaxGathered: 16 << 20,
}

// copyMin is the smallest copy part that is not the object's last part.
func (l Limits) copyMin() int64 { return max(l.MinPart, l.CopyMin) }

// CopyFloor is the smallest standing object a rewrite can copy server side
// as the first part of its successor: below it the object's bytes are
// fetched and uploaded again (settle's tail rewrites; the due rule's
// catalog.DuePolicy.CopyFloor).
func (l Limits) CopyFloor() int64 { return l.copyMin() }

// TailFloor is the largest standing tail whose rewrite moves every one of
// its bytes through the process, plus one: the tail-growth rule's floor
// (catalog.DuePolicy.CopyFloor), for outputs of at most capBytes. Below
// the copy floor a rewrite fetches the tail and uploads it again. When
// the store reads back what an assembly copied (readsBack: an S3 server
// whose copied parts cannot be checksummed, S3Config.ReadsBackCopies) a
// rewrite copies the tail server side and then reads it back whole, at
// any size: then every tail below the output cap counts. A tail at the
// cap is never rewritten.
func TailFloor(l Limits, readsBack bool, capBytes int64) int64 {
	if readsBack {
		return capBytes
	}
	return min(l.CopyFloor(), capBytes)
}

// Validate checks the limits. Gathered parts may reach twice the minimum and
// any part twice the smallest copy: then every run of at least the minimum
// splits into valid parts, which makes the planner's arithmetic exact.
func (l Limits) Validate() error {
	switch {
	case l.MinPart < 1 || l.CopyMin < 1 || l.MaxParts < 1:
		return fmt.Errorf("limits: MinPart, CopyMin and MaxParts must be positive: %+v", l)
	case l.MaxGathered < 2*l.MinPart:
		return fmt.Errorf("limits: MaxGathered %d is below twice MinPart %d", l.MaxGathered, l.MinPart)
	case l.MaxPart < l.MaxGathered:
		return fmt.Errorf("limits: MaxPart %d is below MaxGathered %d", l.MaxPart, l.MaxGathered)
	case l.MaxPart < 2*l.copyMin():
		return fmt.Errorf("limits: MaxPart %d is below twice the copy minimum %d", l.MaxPart, l.copyMin())
	}
	return nil
}

// ErrTooManyParts means no plan fits the object in Limits.MaxParts parts.
var ErrTooManyParts = errors.New("objstore: object needs more parts than allowed")

// Segment is a byte range of one input piece inside a part.
type Segment struct {
	Piece    int   // index into the planner's input
	Off, Len int64 // within the piece
	// Fetch: the bytes come through the process by ranged GET (a source
	// range in a gathered part). False for local bytes and copy parts.
	Fetch bool
}

// Part is one upload part (or the single PutObject body).
type Part struct {
	Number    int // 1-based
	Copy      bool
	Off, Size int64     // within the object
	Segments  []Segment // a copy part has exactly one
}

// Plan is how an object is built: one PutObject when !Multipart (at most
// one gathered part), else a multipart upload of Parts.
type Plan struct {
	Parts     []Part
	Multipart bool
	Size      int64
}

// Fetched is the number of bytes the plan moves through the process by GET.
func (p Plan) Fetched() int64 {
	var n int64
	for _, part := range p.Parts {
		for _, s := range part.Segments {
			if s.Fetch {
				n += s.Len
			}
		}
	}
	return n
}

// Copied is the number of bytes copied server side.
func (p Plan) Copied() int64 {
	var n int64
	for _, part := range p.Parts {
		if part.Copy {
			n += part.Size
		}
	}
	return n
}

// Uploaded is the number of bytes uploaded from the process.
func (p Plan) Uploaded() int64 { return p.Size - p.Copied() }

// Requests is the number of S3 requests the plan takes on a clean run:
// one GET per fetched segment, one request per part, and create plus
// complete for a multipart upload (a PutObject is the only request besides
// its GETs).
func (p Plan) Requests() int {
	n := 1
	if p.Multipart {
		n = 2 + len(p.Parts)
	}
	for _, part := range p.Parts {
		for _, s := range part.Segments {
			if s.Fetch {
				n++
			}
		}
	}
	return n
}

// Check verifies that the plan is valid under lim for pieces: its parts
// tile the object, every part respects the size rules, copy parts lie in one
// copyable piece, and segments tile each part.
func (p Plan) Check(pieces []PieceSpec, lim Limits) error {
	starts := make([]int64, len(pieces)+1)
	for i, pc := range pieces {
		starts[i+1] = starts[i] + pc.Len
	}
	total := starts[len(pieces)]
	if p.Size != total {
		return fmt.Errorf("plan size %d, pieces %d", p.Size, total)
	}
	if !p.Multipart && len(p.Parts) > 1 {
		return fmt.Errorf("single PUT plan with %d parts", len(p.Parts))
	}
	if p.Multipart && (len(p.Parts) == 0 || len(p.Parts) > lim.MaxParts) {
		return fmt.Errorf("multipart plan with %d parts (max %d)", len(p.Parts), lim.MaxParts)
	}
	var off int64
	for i, part := range p.Parts {
		last := i == len(p.Parts)-1
		switch {
		case part.Number != i+1:
			return fmt.Errorf("part %d numbered %d", i+1, part.Number)
		case part.Off != off:
			return fmt.Errorf("part %d at %d, want %d", part.Number, part.Off, off)
		case part.Size < 1 || (!last && part.Size < lim.MinPart):
			return fmt.Errorf("part %d of %d bytes is below the minimum", part.Number, part.Size)
		case part.Size > lim.MaxPart || (!part.Copy && part.Size > lim.MaxGathered):
			return fmt.Errorf("part %d of %d bytes is above the maximum", part.Number, part.Size)
		case !p.Multipart && part.Copy:
			return fmt.Errorf("single PUT plan copies")
		}
		if part.Copy {
			if len(part.Segments) != 1 || part.Size < lim.CopyMin || (!last && part.Size < lim.copyMin()) {
				return fmt.Errorf("copy part %d: %d segments, %d bytes", part.Number, len(part.Segments), part.Size)
			}
		}
		pos := part.Off
		for _, s := range part.Segments {
			if s.Piece < 0 || s.Piece >= len(pieces) || s.Len < 1 || s.Off < 0 || s.Off+s.Len > pieces[s.Piece].Len {
				return fmt.Errorf("part %d: bad segment %+v", part.Number, s)
			}
			if starts[s.Piece]+s.Off != pos {
				return fmt.Errorf("part %d: segment %+v at %d, want %d", part.Number, s, starts[s.Piece]+s.Off, pos)
			}
			if part.Copy && !pieces[s.Piece].Copy {
				return fmt.Errorf("part %d copies local piece %d", part.Number, s.Piece)
			}
			if s.Fetch != (!part.Copy && pieces[s.Piece].Copy) {
				return fmt.Errorf("part %d: segment %+v has the wrong fetch flag", part.Number, s)
			}
			pos += s.Len
		}
		if pos != part.Off+part.Size {
			return fmt.Errorf("part %d: segments cover %d bytes of %d", part.Number, pos-part.Off, part.Size)
		}
		off += part.Size
	}
	if off != total {
		return fmt.Errorf("parts cover %d bytes of %d", off, total)
	}
	return nil
}

// PlanParts plans how to build the concatenation of pieces under lim. Among
// valid plans it returns one that fetches the fewest bytes through the
// process and, among those, takes the fewest requests.
//
// Model: the object alternates gathered stretches and copy runs, each run a
// sub-range of one copyable piece. A copy run is cut into ceil(len/MaxPart)
// copy parts and a gathered stretch into ceil(len/MaxGathered) parts (with
// the limits Validate demands, any stretch of at least MinPart, and any run
// of at least the copy minimum, splits validly). The stretch before a run
// must be empty or at least MinPart long, so short stretches borrow the
// head or tail of a neighbouring range: exactly the shortfall, from
// whichever side is cheaper. A shortest-path search over run boundaries
// (piece edges, and positions a minimum part away from them) finds the best
// combination; cut points inside a stretch are placed to split as few
// source ranges, hence GETs, as possible.
//
// Fetched bytes are minimal in every case; requests are minimal whenever
// the cheapest plan fits in MaxParts (with S3's 10,000, any object under
// 50 GB), and may exceed the minimum slightly when parts are scarce.
func PlanParts(pieces []PieceSpec, lim Limits) (Plan, error) {
	plan, _, err := planParts(pieces, lim)
	return plan, err
}

// planParts also reports whether the part count constrained the search.
func planParts(pieces []PieceSpec, lim Limits) (Plan, bool, error) {
	if err := lim.Validate(); err != nil {
		return Plan{}, false, err
	}
	pl := newPlanner(pieces, lim)
	if pl.total == 0 {
		return Plan{Size: 0}, false, nil
	}
	if (pl.total+lim.MaxPart-1)/lim.MaxPart > int64(lim.MaxParts) {
		return Plan{}, true, fmt.Errorf("plan %d bytes: %w", pl.total, ErrTooManyParts)
	}
	// The cheapest plan usually fits in MaxParts; only when it does not is
	// the slower search over parts needed.
	best := pl.search(false)
	if best != nil && best.parts <= lim.MaxParts {
		return pl.build(best), false, nil
	}
	if best = pl.search(true); best == nil {
		return Plan{}, true, fmt.Errorf("plan %d bytes in %d pieces: %w", pl.total, len(pieces), ErrTooManyParts)
	}
	return pl.build(best), true, nil
}

type planner struct {
	lim        Limits
	cmin       int64   // smallest copy run that is not last
	idx        []int   // input index of each non-empty piece
	start, end []int64 // object offsets of each non-empty piece
	copyable   []bool
	cbytes     []int64 // copyable bytes before piece i
	ccount     []int   // copyable pieces before piece i
	runnable   []int   // pieces that can hold a copy run, ascending
	total      int64
	gaps       map[gapKey][]gapOpt
}

func newPlanner(pieces []PieceSpec, lim Limits) *planner {
	pl := &planner{lim: lim, cmin: lim.copyMin(), gaps: map[gapKey][]gapOpt{}}
	var pos, cb int64
	cc := 0
	for i, p := range pieces {
		if p.Len <= 0 {
			continue
		}
		pl.idx = append(pl.idx, i)
		pl.start = append(pl.start, pos)
		pos += p.Len
		pl.end = append(pl.end, pos)
		pl.copyable = append(pl.copyable, p.Copy)
		pl.cbytes = append(pl.cbytes, cb)
		pl.ccount = append(pl.ccount, cc)
		if p.Copy {
			cb += p.Len
			cc++
		}
	}
	pl.cbytes = append(pl.cbytes, cb)
	pl.ccount = append(pl.ccount, cc)
	pl.total = pos
	n := len(pl.start)
	for i := 0; i < n; i++ {
		l := pl.end[i] - pl.start[i]
		if pl.copyable[i] && (l >= pl.cmin || (i == n-1 && l >= lim.CopyMin)) {
			pl.runnable = append(pl.runnable, i)
		}
	}
	return pl
}

// pieceAt returns the piece holding offset x (x < total).
func (pl *planner) pieceAt(x int64) int {
	return sort.Search(len(pl.end), func(i int) bool { return pl.end[i] > x })
}

// cumCopy is the number of copyable bytes before offset x.
func (pl *planner) cumCopy(x int64) int64 {
	if x >= pl.total {
		return pl.cbytes[len(pl.start)]
	}
	i := pl.pieceAt(x)
	n := pl.cbytes[i]
	if pl.copyable[i] {
		n += x - pl.start[i]
	}
	return n
}

// fetchIn is the number of copyable bytes in [x, y): what gathering it costs.
func (pl *planner) fetchIn(x, y int64) int64 { return pl.cumCopy(y) - pl.cumCopy(x) }

// rangesIn is the number of copyable pieces meeting [x, y).
func (pl *planner) rangesIn(x, y int64) int {
	if y <= x {
		return 0
	}
	return pl.ccount[pl.pieceAt(y-1)+1] - pl.ccount[pl.pieceAt(x)]
}

// label is the cost of the best known way to reach a run boundary.
type label struct {
	parts   int
	fetched int64
	reqs    int // parts plus GETs
	prev    *label
	// the step that reached this label: stretch [from, runA) gathered in
	// gapParts parts, then run [runA, runB) in piece runPiece (-1: none,
	// the stretch ends the object).
	from, runA, runB int64
	gapParts         int
	runPiece         int
}

// better orders complete costs: fetched bytes, then requests.
func better(f1 int64, r1 int, f2 int64, r2 int) bool {
	return f1 < f2 || (f1 == f2 && r1 < r2)
}

// dominates: a is at least as good as b on parts and on (fetched, reqs).
func (a *label) dominates(b *label) bool {
	return a.parts <= b.parts && !better(b.fetched, b.reqs, a.fetched, a.reqs)
}

// search runs the shortest-path search. Without pressure each position
// keeps its single cheapest label and long skips are pruned; with pressure
// (the cheapest plan has too many parts) each position keeps its Pareto set
// over parts, and run lengths that are whole multiples of MaxPart are tried
// too, so that fewer parts can be bought with more fetched bytes.
//
// Ending the object with a gathered stretch is possible from every
// boundary; those endings are costed lazily, cheapest bound first, because
// placing the cuts of a long stretch is the expensive step.
func (pl *planner) search(pressure bool) *label {
	nodes := map[int64][]*label{0: {{runPiece: -1}}}
	queue := []int64{0}
	var best *label
	var bestF int64
	var bestR int
	total := func(l *label) (int64, int) {
		if l.prev != nil && l.prev.prev == nil && l.runPiece < 0 && l.gapParts == 1 {
			return l.fetched, l.reqs // one PutObject
		}
		return l.fetched, l.reqs + 2
	}
	finish := func(l *label) {
		if pressure && l.parts > pl.lim.MaxParts {
			return
		}
		if f, r := total(l); best == nil || better(f, r, bestF, bestR) {
			best, bestF, bestR = l, f, r
		}
	}
	// ub is the fetched bytes of some complete plan: nothing costlier can win.
	ub := pl.cbytes[len(pl.start)]
	type ending struct {
		l       *label
		p       int64
		fetched int64
		minReqs int
	}
	var endings []ending
	add := func(pos int64, l *label) {
		// every remaining part holds at most MaxPart bytes
		if pressure && l.parts+int((pl.total-pos+pl.lim.MaxPart-1)/pl.lim.MaxPart) > pl.lim.MaxParts {
			return
		}
		if !pressure && l.fetched > ub {
			return
		}
		cur, seen := nodes[pos]
		if !seen {
			queue = pushPos(queue, pos)
		}
		if !pressure {
			if len(cur) == 0 || better(l.fetched, l.reqs, cur[0].fetched, cur[0].reqs) {
				nodes[pos] = []*label{l}
			}
			return
		}
		kept := cur[:0:0]
		for _, c := range cur {
			if c.dominates(l) {
				return
			}
			if !l.dominates(c) {
				kept = append(kept, c)
			}
		}
		nodes[pos] = append(kept, l)
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		labels := nodes[p]
		delete(nodes, p)
		for _, l := range labels {
			if !pressure && l.fetched > ub {
				continue
			}
			if p == pl.total {
				finish(l)
				ub = min(ub, l.fetched)
				continue
			}
			f := l.fetched + pl.fetchIn(p, pl.total)
			ub = min(ub, f)
			kmin := int((pl.total - p + pl.lim.MaxGathered - 1) / pl.lim.MaxGathered)
			endings = append(endings, ending{l, p, f, l.reqs + kmin + pl.rangesIn(p, pl.total)})
			pl.expand(p, l, pressure, ub, add)
		}
	}
	sort.SliceStable(endings, func(i, j int) bool {
		return better(endings[i].fetched, endings[i].minReqs, endings[j].fetched, endings[j].minReqs)
	})
	for _, e := range endings {
		// minReqs bounds even a PutObject's total, the cheapest ending
		if !pressure && best != nil && !better(e.fetched, e.minReqs, bestF, bestR) {
			break
		}
		for _, g := range pl.gapOpts(e.p, pl.total, true, pressure) {
			finish(&label{parts: e.l.parts + g.parts, fetched: e.fetched,
				reqs: e.l.reqs + g.parts + g.gets, prev: e.l, from: e.p, runA: pl.total, runB: pl.total,
				gapParts: g.parts, runPiece: -1})
		}
	}
	return best
}

// pushPos inserts pos into the ascending queue.
func pushPos(q []int64, pos int64) []int64 {
	i := sort.Search(len(q), func(i int) bool { return q[i] >= pos })
	q = append(q, 0)
	copy(q[i+1:], q[i:])
	q[i] = pos
	return q
}

// expand adds every run that can follow a boundary at p with label l.
func (pl *planner) expand(p int64, l *label, pressure bool, ub int64, add func(int64, *label)) {
	lim := pl.lim
	first := sort.Search(len(pl.runnable), func(i int) bool { return pl.start[pl.runnable[i]] >= p })
	for _, j := range pl.runnable[first:] {
		sj, ej := pl.start[j], pl.end[j]
		skipped := pl.fetchIn(p, sj)
		if !pressure && l.fetched+skipped > ub {
			break // every later run skips even more
		}
		a0 := sj
		if d := sj - p; d > 0 && d < lim.MinPart {
			a0 = p + lim.MinPart // borrow the shortfall from this range's head
		}
		if a0 < ej {
			ends := pl.runEnds(j, a0, pressure)
			starts := []int64{a0}
			if pressure {
				// a run a whole number of MaxPart long, or a stretch before
				// it a whole number of MaxGathered long, saves a part
				for _, b := range ends {
					for a := b - lim.MaxPart; a > a0; a -= lim.MaxPart {
						starts = append(starts, a)
					}
				}
				for a := p + lim.MaxGathered; a < ej; a += lim.MaxGathered {
					if a > a0 {
						starts = append(starts, a)
					}
				}
			}
			for _, a := range starts {
				if g := a - p; g > 0 && g < lim.MinPart {
					continue
				}
				if a != a0 {
					ends = pl.runEnds(j, a, pressure)
				}
				for _, gap := range pl.gapOpts(p, a, false, pressure) {
					for _, b := range ends {
						r := b - a
						if r < 1 || (r < pl.cmin && !(b == pl.total && r >= lim.CopyMin)) {
							continue
						}
						rp := int((r + lim.MaxPart - 1) / lim.MaxPart)
						add(b, &label{
							parts:   l.parts + gap.parts + rp,
							fetched: l.fetched + pl.fetchIn(p, a),
							reqs:    l.reqs + gap.parts + gap.gets + rp,
							prev:    l, from: p, runA: a, runB: b, gapParts: gap.parts, runPiece: j,
						})
					}
				}
			}
		}
		// Gathering a range at least a copy minimum plus two minimum parts
		// long never beats copying it (its head and tail can cover both
		// neighbouring shortfalls), so runs beyond it need not be tried.
		if !pressure && ej-sj >= pl.cmin+2*lim.MinPart {
			break
		}
	}
}

// runEnds lists where a run starting at a in piece j may end: the piece's
// end, the shortest run, just early enough for a following run to start at
// the head of a nearby range, and, under pressure, whole multiples of
// MaxPart.
func (pl *planner) runEnds(j int, a int64, pressure bool) []int64 {
	ej := pl.end[j]
	ends := []int64{ej}
	if b := a + pl.cmin; b < ej {
		ends = append(ends, b)
	}
	for _, k := range pl.runnable {
		if k <= j {
			continue
		}
		sk := pl.start[k]
		if sk >= ej+pl.lim.MinPart {
			break
		}
		if b := sk - pl.lim.MinPart; b > a && b < ej {
			ends = append(ends, b)
		}
	}
	if pressure {
		for b := a + pl.lim.MaxPart; b < ej; b += pl.lim.MaxPart {
			ends = append(ends, b)
		}
		// the stretch after the run a whole number of MaxGathered long
		nexts := []int64{pl.total}
		for _, k := range pl.runnable {
			if k > j {
				nexts = append(nexts, pl.start[k])
			}
		}
		for _, n := range nexts {
			for b := n - pl.lim.MaxGathered; b > a; b -= pl.lim.MaxGathered {
				if b < ej {
					ends = append(ends, b)
				}
			}
		}
	}
	return ends
}

// build turns the winning label chain into parts.
func (pl *planner) build(l *label) Plan {
	var steps []*label
	for ; l.prev != nil; l = l.prev {
		steps = append(steps, l)
	}
	plan := Plan{Size: pl.total, Multipart: true}
	add := func(copyPart bool, x, y int64) {
		part := Part{Number: len(plan.Parts) + 1, Copy: copyPart, Off: x, Size: y - x}
		for i := pl.pieceAt(x); i < len(pl.start) && pl.start[i] < y; i++ {
			lo, hi := max(x, pl.start[i]), min(y, pl.end[i])
			part.Segments = append(part.Segments, Segment{
				Piece: pl.idx[i], Off: lo - pl.start[i], Len: hi - lo,
				Fetch: !copyPart && pl.copyable[i],
			})
		}
		plan.Parts = append(plan.Parts, part)
	}
	for i := len(steps) - 1; i >= 0; i-- {
		s := steps[i]
		if s.runA > s.from {
			cuts := pl.cuts(s.from, s.runA, s.runPiece < 0, s.gapParts)
			prev := s.from
			for _, c := range append(cuts, s.runA) {
				add(false, prev, c)
				prev = c
			}
		}
		if s.runPiece >= 0 {
			r := s.runB - s.runA
			k := (r + pl.lim.MaxPart - 1) / pl.lim.MaxPart
			pos := s.runA
			for m := int64(0); m < k; m++ {
				size := r / k
				if m < r%k {
					size++
				}
				add(true, pos, pos+size)
				pos += size
			}
		}
	}
	if len(plan.Parts) == 1 && !plan.Parts[0].Copy {
		plan.Multipart = false
	}
	return plan
}
