package sim

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// CheckOptions says what Check looks at.
type CheckOptions struct {
	// Stars to check (default: every star novasim set up).
	Stars []string
	// SettledOnly checks only records below settled_through, from the
	// catalog and the settled objects; refs, slots and the chain are not
	// read, and the records at or past settled_through are reported as
	// Unsettled. Settle tests use it to assert that everything below
	// settled_through comes from settled objects.
	SettledOnly bool
	// Concurrency is the number of objects read at once (default 8).
	Concurrency int
	// MaxFindings is how many findings are kept in detail (default 100);
	// the counts are always complete.
	MaxFindings int
}

// CheckReport is what Check found. A report is clean (OK) when nothing is
// missing, duplicated or wrong and no invariant is broken.
type CheckReport struct {
	Stars   int64
	Streams int64
	// Records is how many live records the metastore says exist: over every
	// stream, [low_record, next_record) ([low_record, settled_through) with
	// SettledOnly).
	Records int64
	// Checked: records found with the right bytes and timestamp (each once).
	Checked int64
	// Missing: records found nowhere (or only in unreadable objects).
	Missing int64
	// Duplicated: extra copies of records (overlapping entries or refs).
	Duplicated int64
	// Wrong: record copies whose bytes or timestamp differ from the generator,
	// or that sit in damaged chunks.
	Wrong int64
	// Unsettled: with SettledOnly, records at or past settled_through.
	Unsettled int64
	// FromSettled and FromSlots split Checked by where the records were read.
	FromSettled, FromSlots int64
	// Objects and Slots are the settled objects and slots read.
	Objects, SlotsRead int64
	// Violations counts broken contract invariants (docs/metastore.md, docs/format.md).
	Violations int64
	// Chain describes the chains (not with SettledOnly).
	Chain ChainReport
	// Findings are the first MaxFindings problems; Dropped counts the rest.
	Findings []Finding
	Dropped  int64
}

// ChainReport describes the slots of the checked stars' chains.
type ChainReport struct {
	Slots    int64 // slot keys found (an express slot once, whatever its copies)
	Flights  int64
	Poisons  int64
	Released int64 // slot positions behind a trim cursor (absent or not)
	// Referenced: flights named by a span ref.
	Referenced int64
	// Unreferenced lists the flights named by no ref: lost flights, or
	// flights whose refs the auditor deleted once they were settled.
	Unreferenced []SlotID
}

// SlotID names a slot.
type SlotID struct {
	Star       string
	Epoch, Seq int64
}

func (s SlotID) String() string { return fmt.Sprintf("%s/%d/%d", s.Star, s.Epoch, s.Seq) }

// less orders slots by (star, epoch, seq).
func (s SlotID) less(o SlotID) bool {
	if s.Star != o.Star {
		return s.Star < o.Star
	}
	return s.Epoch < o.Epoch || s.Epoch == o.Epoch && s.Seq < o.Seq
}

// OK reports whether the check found nothing wrong.
func (r CheckReport) OK() bool {
	return r.Missing == 0 && r.Duplicated == 0 && r.Wrong == 0 && r.Violations == 0
}

// Finding is one problem.
type Finding struct {
	Kind   string // missing, duplicated, wrong, invariant, unreadable
	Star   string
	Stream string // 32 hex digits, or empty
	Record int64  // -1 when not about one record
	Key    string // the object, or empty
	Detail string
}

func (f Finding) String() string {
	var b strings.Builder
	b.WriteString(f.Kind)
	if f.Star != "" {
		b.WriteString(" star=" + f.Star)
	}
	if f.Stream != "" {
		b.WriteString(" stream=" + f.Stream)
	}
	if f.Record >= 0 {
		fmt.Fprintf(&b, " record=%d", f.Record)
	}
	if f.Key != "" {
		b.WriteString(" key=" + f.Key)
	}
	b.WriteString(": " + f.Detail)
	return b.String()
}

// checker is one Check call.
type checker struct {
	db   *catalog.DB
	wp   *writepath.DB // novasim's content profiles
	st   Storage
	opts CheckOptions
	mu   sync.Mutex
	rep  CheckReport
}

// finding records a problem. Missing, duplicated and wrong records are
// counted by the caller; invariant findings count a violation.
func (c *checker) finding(f Finding) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.Kind == "invariant" {
		c.rep.Violations++
	}
	if len(c.rep.Findings) < c.opts.MaxFindings {
		c.rep.Findings = append(c.rep.Findings, f)
	} else {
		c.rep.Dropped++
	}
}

func (c *checker) invariant(star string, stream *streamState, key, format string, args ...any) {
	f := Finding{Kind: "invariant", Star: star, Record: -1, Key: key, Detail: fmt.Sprintf(format, args...)}
	if stream != nil {
		f.Stream = stream.id.String()
	}
	c.finding(f)
}

// Check verifies every record of the checked stars' streams against the
// generator, and the contract's invariants over the metastore and the
// chains (see CheckOptions and CheckReport). It reads only the contract's
// tables (and novasim's content profiles), and objects through bundlefmt,
// so it checks any settler's output. An error means the check could not run;
// findings are in the report.
func Check(ctx context.Context, db *catalog.DB, st Storage, opts CheckOptions) (CheckReport, error) {
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	if opts.MaxFindings <= 0 {
		opts.MaxFindings = 100
	}
	c := &checker{db: db, wp: writepath.New(db), st: st, opts: opts}
	stars := opts.Stars
	if len(stars) == 0 {
		profs, err := c.wp.Stars(ctx)
		if err != nil {
			return c.rep, err
		}
		for _, p := range profs {
			stars = append(stars, p.Star)
		}
		if len(stars) == 0 {
			return c.rep, fmt.Errorf("%w: no star was set up by novasim setup (nova.sim_stars is empty)", ErrUsage)
		}
	}
	for _, star := range stars {
		if err := c.checkStar(ctx, star); err != nil {
			return c.rep, err
		}
	}
	sort.Slice(c.rep.Chain.Unreferenced, func(i, j int) bool { return c.rep.Chain.Unreferenced[i].less(c.rep.Chain.Unreferenced[j]) })
	return c.rep, nil
}

// streamState is one stream under check: its metastore rows and the copy
// count of every live record.
type streamState struct {
	catalog.Stream
	id      bundlefmt.StreamID
	prof    StreamProfile
	refs    []catalog.SpanRef
	entries []catalog.Entry
	// erased holds the records of the stream's well-formed erasures,
	// applied the records of its applied ones (a malformed row is never
	// applied by the auditor, so it erases nothing).
	erased, applied spanSet
	// extents[i][j] is the chunk (first, count) that ref i's entry j names,
	// filled by the slot pass; count 0 when it could not be found.
	extents [][]extent

	mu sync.Mutex
	// copies[i] counts the copies of record low_record+i found (low seven
	// bits, saturating) and has badCopy set when one of them was wrong: one
	// byte per live record is all check holds per record.
	copies []uint8
	wrong  int64
}

type extent struct{ first, count int64 }

// badCopy marks a record with a wrong copy in streamState.copies.
const badCopy = 0x80

// live reports whether record r is counted: in [low_record, next_record).
func (s *streamState) live(r int64) bool { return r >= s.LowRecord && r < s.NextRecord }

// counted reports whether a copy of record r read from a settled object
// (settled) or from a slot counts: settled copies below settled_through,
// slot copies at or past it.
func (s *streamState) counted(r int64, settled bool) bool {
	if !s.live(r) {
		return false
	}
	return settled == (r < s.SettledThrough)
}

// note records one verified copy of record r; a copy outside the range its
// ref or entry names (inRange false) is verified but not counted.
func (s *streamState) note(r int64, ok, settled, inRange bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !ok {
		s.wrong++
	}
	if !inRange || !s.counted(r, settled) {
		return
	}
	i := r - s.LowRecord
	if s.copies[i]&^badCopy < badCopy-1 {
		s.copies[i]++
	}
	if !ok {
		s.copies[i] |= badCopy
	}
}

// erasedAt reports whether record r is in an erasure, and whether it is in
// an applied one (erasures may overlap: applied wins). What a settled
// copy of it may be (docs/architecture.md#erasure): a tombstone, and only
// a tombstone, once an erasure of it is applied; a tombstone or its bytes
// while one is pending (settle may have written it as a tombstone, and a
// rewrite may be under way); its bytes otherwise. A slot copy always holds
// its bytes: the write path never writes tombstones.
func (s *streamState) erasedAt(r int64) (erased, applied bool) {
	return s.erased.has(r), s.applied.has(r)
}

// spanSet is a set of record numbers as sorted, disjoint, non-adjacent
// spans [from, to).
type spanSet [][2]int64

// newSpanSet merges the ranges of the erasures keep accepts.
func newSpanSet(es []catalog.Erasure, keep func(catalog.Erasure) bool) spanSet {
	var d spanSet
	for _, e := range es {
		if keep(e) {
			d = append(d, [2]int64{e.FirstRecord, e.EndRecord()})
		}
	}
	sort.Slice(d, func(i, j int) bool { return d[i][0] < d[j][0] })
	out := d[:0]
	for _, sp := range d {
		if n := len(out); n > 0 && sp[0] <= out[n-1][1] {
			out[n-1][1] = max(out[n-1][1], sp[1])
			continue
		}
		out = append(out, sp)
	}
	return out
}

// has reports whether r is in the set.
func (d spanSet) has(r int64) bool {
	i := sort.Search(len(d), func(i int) bool { return d[i][1] > r })
	return i < len(d) && d[i][0] <= r
}

func (c *checker) checkStar(ctx context.Context, name string) error {
	prof, err := c.wp.Star(ctx, name)
	if err != nil {
		return fmt.Errorf("check star %q: %w", name, err)
	}
	content := contentOf(prof)
	star, err := c.db.Streams().Star(ctx, name)
	if err != nil {
		return err
	}
	rows, err := c.db.Streams().StreamsOfStar(ctx, name)
	if err != nil {
		return err
	}
	entries, err := c.db.Streams().EntriesOfStar(ctx, name)
	if err != nil {
		return err
	}
	erasures, err := c.db.Streams().ErasuresOfStar(ctx, name)
	if err != nil {
		return err
	}
	var refs map[catalog.StreamID][]catalog.SpanRef
	var marks map[catalog.StreamID]catalog.DueMarker
	if !c.opts.SettledOnly {
		if refs, err = c.db.Streams().RefsOfStar(ctx, name); err != nil {
			return err
		}
		if marks, err = c.db.Streams().DueMarkersOfStar(ctx, name); err != nil {
			return err
		}
	}
	streams := make([]*streamState, len(rows))
	for i, r := range rows {
		es := erasures[r.ID]
		s := &streamState{Stream: r, id: r.ID, entries: entries[r.ID], refs: refs[r.ID],
			erased:  newSpanSet(es, func(e catalog.Erasure) bool { return e.Valid() == "" }),
			applied: newSpanSet(es, func(e catalog.Erasure) bool { return e.Valid() == "" && e.Applied })}
		s.prof = content.Stream(s.id)
		if !c.opts.SettledOnly {
			s.extents = make([][]extent, len(s.refs))
			for j, ref := range s.refs {
				s.extents[j] = make([]extent, len(ref.Slots))
			}
		}
		if n := r.NextRecord - r.LowRecord; n > 0 {
			s.copies = make([]uint8, n)
		}
		streams[i] = s
	}
	c.mu.Lock()
	c.rep.Stars++
	c.rep.Streams += int64(len(streams))
	c.mu.Unlock()

	// Settled objects, one at a time per worker.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(c.opts.Concurrency)
	for _, s := range streams {
		c.checkEntryRows(name, s)
		for _, e := range s.entries {
			g.Go(func() error { return c.checkSettled(gctx, name, content, s, e) })
		}
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if !c.opts.SettledOnly {
		if err := c.checkChain(ctx, star, content, streams); err != nil {
			return err
		}
	}
	for _, s := range streams {
		c.account(name, s)
		if !c.opts.SettledOnly {
			m, ok := marks[s.ID]
			c.checkMarker(name, s, m, ok)
		}
	}
	return nil
}

// checkEntryRows checks a stream's catalog rows on their own: epochs,
// classes, and the tiling of [.., settled_through).
func (c *checker) checkEntryRows(star string, s *streamState) {
	var end int64 = -1
	for _, e := range s.entries {
		if e.Epoch != s.Epoch {
			c.invariant(star, s, "", "catalog entry at %d has stream epoch %d, the stream's is %d", e.FirstRecord, e.Epoch, s.Epoch)
		}
		if e.Class != catalog.ClassStandard {
			c.invariant(star, s, "", "catalog entry at %d has class %q (settled objects are standard)", e.FirstRecord, e.Class)
		}
		// A gap is allowed only below low_record: retention dropped the
		// records in it (settle starts a new run at the first live chunk,
		// and the retention step removes the dead entries after it).
		if end >= 0 && e.FirstRecord != end && !(e.FirstRecord > end && e.FirstRecord <= s.LowRecord) {
			c.invariant(star, s, "", "catalog entries leave a gap or overlap at %d (previous entry ends at %d)", e.FirstRecord, end)
		}
		end = e.EndRecord()
		if end > s.SettledThrough {
			c.invariant(star, s, "", "catalog entry [%d, %d) runs past settled_through %d", e.FirstRecord, end, s.SettledThrough)
		}
	}
	if len(s.entries) > 0 && end < s.SettledThrough {
		c.invariant(star, s, "", "catalog entries end at %d, settled_through is %d", end, s.SettledThrough)
	}
	if s.SettledThrough > s.NextRecord {
		c.invariant(star, s, "", "settled_through %d is past next_record %d", s.SettledThrough, s.NextRecord)
	}
}

// account turns a stream's copy counts into the report's record counts.
func (c *checker) account(star string, s *streamState) {
	var checked, missing, dup, fromSettled, unsettled, records int64
	firstMissing := int64(-1)
	for i, cp := range s.copies {
		n := cp &^ badCopy
		r := s.LowRecord + int64(i)
		if c.opts.SettledOnly && r >= s.SettledThrough {
			unsettled++
			continue
		}
		records++
		switch {
		case n == 0:
			missing++
			if firstMissing < 0 {
				firstMissing = r
			}
		case n > 1:
			dup += int64(n - 1)
		}
		if n > 0 && cp&badCopy == 0 {
			checked++
			if r < s.SettledThrough {
				fromSettled++
			}
		}
	}
	if missing > 0 {
		c.finding(Finding{Kind: "missing", Star: star, Stream: s.id.String(), Record: firstMissing,
			Detail: fmt.Sprintf("%d records found nowhere (the first is shown)", missing)})
	}
	if dup > 0 {
		c.finding(Finding{Kind: "duplicated", Star: star, Stream: s.id.String(), Record: -1,
			Detail: fmt.Sprintf("%d extra copies of records", dup)})
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rep.Records += records
	c.rep.Checked += checked
	c.rep.Missing += missing
	c.rep.Duplicated += dup
	c.rep.Wrong += s.wrong
	c.rep.Unsettled += unsettled
	c.rep.FromSettled += fromSettled
	c.rep.FromSlots += checked - fromSettled
}

// checkMarker checks docs/metastore.md's due-marker rule: a marker exists exactly
// for a stream with refs, with the stream's class and since = the oldest
// ref's absorbed_at.
func (c *checker) checkMarker(star string, s *streamState, m catalog.DueMarker, ok bool) {
	switch {
	case ok && len(s.refs) == 0:
		c.invariant(star, s, "", "due marker without refs")
	case !ok && len(s.refs) > 0:
		c.invariant(star, s, "", "%d refs and no due marker", len(s.refs))
	case ok:
		oldest := s.refs[0].AbsorbedAt
		for _, r := range s.refs {
			if r.AbsorbedAt.Before(oldest) {
				oldest = r.AbsorbedAt
			}
		}
		if !m.Since.Equal(oldest) {
			c.invariant(star, s, "", "due marker since %s, oldest ref absorbed at %s", m.Since, oldest)
		}
		if m.Class != s.Class {
			c.invariant(star, s, "", "due marker class %q, stream class %q", m.Class, s.Class)
		}
	}
}
