package catalog_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/testenv"
)

// dueRuleStar is a star of streams in the shapes the tail-growth rule
// tells apart: each stream may have a settled tail (one catalog entry of
// tailRecords records and tailBytes bytes, ending at settled_through) and
// newRecords absorbed behind it.
type dueRuleStar struct {
	t    *testing.T
	ctx  context.Context
	db   *catalog.DB
	conn *pgx.Conn
	f    catalog.Fence
	seq  int64
}

func newDueRuleStar(t *testing.T) *dueRuleStar {
	t.Helper()
	db, url := testenv.MigratedDB(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 1); err != nil {
		t.Fatal(err)
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, "s1", "me", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return &dueRuleStar{t: t, ctx: ctx, db: db, conn: conn, f: lease.Fence}
}

func (s *dueRuleStar) absorb(id catalog.StreamID, first, count int64) {
	s.t.Helper()
	if err := writepath.New(s.db).Absorb(s.ctx, "s1", []writepath.AbsorbFlight{{Epoch: 1, Seq: s.seq, FooterOffset: 61, FooterLength: 100,
		Batches: []writepath.AbsorbBatch{{Stream: id, FirstRecord: first, Count: count}}}}); err != nil {
		s.t.Fatal(err)
	}
	s.seq++
}

// stream creates stream b: tailRecords settled into one object of
// tailBytes (none when 0), then newRecords absorbed.
func (s *dueRuleStar) stream(b byte, tailRecords, tailBytes, newRecords int64) catalog.StreamID {
	s.t.Helper()
	id := sid(b)
	if err := writepath.New(s.db).CreateStream(s.ctx, id, "s1", "b1"); err != nil {
		s.t.Fatal(err)
	}
	if tailRecords > 0 {
		s.absorb(id, 0, tailRecords)
		key := fmt.Sprintf("tail/%d", b)
		in, err := writepath.OpenIntent(s.ctx, s.db, s.f, catalog.ExactTarget(key, 0), catalog.ClassStandard)
		if err != nil {
			s.t.Fatal(err)
		}
		e := catalog.Entry{Stream: id, Epoch: 1, RecordCount: tailRecords, ObjectBytes: tailBytes,
			FooterOffset: tailBytes - 100, FooterLength: 80, MinTimestamp: 1, MaxTimestamp: 2}
		if err := writepath.CommitSettle(s.ctx, s.db, s.f, catalog.SettleCommit{Entry: e, PrevRevision: -1, IntentID: in.ID, ObjectKey: key}); err != nil {
			s.t.Fatal(err)
		}
	}
	if newRecords > 0 {
		s.absorb(id, tailRecords, newRecords)
	}
	return id
}

// age moves the stream's due marker back: it has waited for d.
func (s *dueRuleStar) age(id catalog.StreamID, d time.Duration) {
	s.t.Helper()
	if _, err := s.conn.Exec(s.ctx, `UPDATE nova.due_markers SET since = now() - $2::interval WHERE stream_id = $1`, id, d); err != nil {
		s.t.Fatal(err)
	}
}

func (s *dueRuleStar) due(p catalog.DuePolicy, forced ...catalog.StreamID) []catalog.DueStream {
	s.t.Helper()
	due, err := s.db.Settle().DueStreams(s.ctx, "s1", p, forced, 100)
	if err != nil {
		s.t.Fatal(err)
	}
	return due
}

func dueIDsOf(due []catalog.DueStream) []catalog.StreamID {
	out := make([]catalog.StreamID, len(due))
	for i, d := range due {
		out[i] = d.Stream
	}
	return out
}

// TestTailGrowthRule: which streams past their linger the tail-growth rule
// holds back, against the rule's every clause, and what TransitByClass
// says of them. Tails are 100 bytes a record unless said; the copy floor
// is 5,000 bytes, the age cap an hour (the margin a quarter of it: due
// at since + 45m).
func TestTailGrowthRule(t *testing.T) {
	t.Parallel()
	s := newDueRuleStar(t)
	noTail := s.stream(1, 0, 0, 3)            // never settled: nothing to rewrite
	small := s.stream(2, 10, 1000, 3)         // 300 bytes on a 1,000-byte tail: waits
	grown := s.stream(3, 10, 1000, 10)        // 1,000 on 1,000: grown by the fraction
	overFloor := s.stream(4, 10, 2000, 28)    // 5,600 on 2,000 (200 a record): past the floor
	bigTail := s.stream(5, 10, 6000, 1)       // a tail at the floor is copied server side
	forced := s.stream(6, 10, 1000, 3)        // as small, forced
	erasing := s.stream(7, 10, 1000, 3)       // as small, with a pending erasure
	held := s.stream(8, 10, 1000, 10)         // as grown, quarantined
	nearCap := s.stream(9, 10, 1000, 3)       // as small, 50m old: past its margin
	beforeMargin := s.stream(10, 10, 1000, 3) // as small, 40m old: still waits
	settledOnly := s.stream(11, 10, 1000, 0)  // nothing unsettled: no marker
	if _, err := s.conn.Exec(s.ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ($1, 11, 1)`, erasing); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Settle().Quarantine(s.ctx, s.f, held, "", "format", "test"); err != nil {
		t.Fatal(err)
	}
	s.age(nearCap, 50*time.Minute)
	s.age(beforeMargin, 40*time.Minute)

	base := catalog.DuePolicy{AgeCap: time.Hour, ExpressAgeCap: time.Hour, CopyFloor: 5000}
	rule := base
	rule.TailGrowth = 1

	// The rule off: every unquarantined stream with a marker is due, the
	// forced one first, then by deadline (the aged ones are nearest).
	off := s.due(base, forced)
	wantOff := []catalog.StreamID{forced, nearCap, beforeMargin, noTail, small, grown, overFloor, bigTail, erasing}
	if got := dueIDsOf(off); !slices.Equal(got[:3], wantOff[:3]) || len(got) != len(wantOff) || !off[0].Forced {
		t.Errorf("rule off: due %v, want %v (in settle order for the first three)", got, wantOff)
	}
	for _, id := range wantOff {
		if !slices.Contains(dueIDsOf(off), id) {
			t.Errorf("rule off: %v not due", id)
		}
	}

	// The rule at 1: small and beforeMargin wait; the forced stream (its
	// own shape is small's) and the erasing one never wait; nearCap is past
	// its margin and goes first among the unforced (earliest deadline).
	on := s.due(rule, forced)
	got := dueIDsOf(on)
	want := []catalog.StreamID{forced, nearCap}
	if !slices.Equal(got[:2], want) || !on[0].Forced {
		t.Errorf("rule at 1: due %v, want %v first", got, want)
	}
	for _, id := range []catalog.StreamID{noTail, grown, bigTail, erasing, overFloor} {
		if !slices.Contains(got, id) {
			t.Errorf("rule at 1: stream %v is not due", id)
		}
	}
	for _, id := range []catalog.StreamID{small, beforeMargin, held, settledOnly} {
		if slices.Contains(got, id) {
			t.Errorf("rule at 1: stream %v is due", id)
		}
	}
	if len(got) != 7 {
		t.Errorf("rule at 1: %d due %v, want 7", len(got), got)
	}
	// Unforced, the small shape waits.
	if slices.Contains(dueIDsOf(s.due(rule)), forced) {
		t.Error("rule at 1: the forced stream's shape is due unforced")
	}

	// At 3 the fraction asks for more than the floor: overFloor (5,600 <
	// 3 x 2,000) is due by the floor alone, grown (1,000 < 3,000) waits.
	rule3 := base
	rule3.TailGrowth = 3
	got = dueIDsOf(s.due(rule3))
	if !slices.Contains(got, overFloor) || slices.Contains(got, grown) || slices.Contains(got, small) {
		t.Errorf("rule at 3: due %v, want overFloor and neither grown nor small", got)
	}

	// TransitByClass counts what waits (rule at 1): small, forced (unforced
	// here), beforeMargin; 300 estimated bytes each; the earliest deadline
	// is beforeMargin's. nearCap's lag counts from its margin (5m), not
	// from its linger (50m).
	_, classes, err := s.db.Ledger().TransitByClass(s.ctx, "s1", rule)
	if err != nil {
		t.Fatal(err)
	}
	std := classes[0]
	if std.Class != catalog.ClassStandard || std.Deferred != 3 || std.DeferredBytes != 900 || std.DeferredDeadline == nil {
		t.Fatalf("standard transit: %+v, want 3 deferred holding 900 bytes", std)
	}
	if std.Due != 6 || std.Markers != 10 {
		t.Errorf("standard transit: %d due of %d markers, want 6 of 10", std.Due, std.Markers)
	}
	var since time.Time
	if err := s.conn.QueryRow(s.ctx, `SELECT since FROM nova.due_markers WHERE stream_id = $1`, beforeMargin).Scan(&since); err != nil {
		t.Fatal(err)
	}
	if !std.DeferredDeadline.Equal(since.Add(time.Hour)) {
		t.Errorf("earliest deferred deadline %s, want beforeMargin's since + cap %s", std.DeferredDeadline, since.Add(time.Hour))
	}
	if std.Lag < 5*time.Minute || std.Lag > 6*time.Minute {
		t.Errorf("lag %s, want nearCap's 5m past its margin", std.Lag)
	}
	_, classes, err = s.db.Ledger().TransitByClass(s.ctx, "s1", base)
	if err != nil {
		t.Fatal(err)
	}
	if std := classes[0]; std.Deferred != 0 || std.DeferredBytes != 0 || std.DeferredDeadline != nil || std.Due != 9 || std.Lag < 50*time.Minute {
		t.Errorf("standard transit with the rule off: %+v, want 9 due, none deferred, lag from linger", std)
	}
}

// TestTailGrowthMargin: the margin is the linger when that is longer than a
// quarter of the age cap, and a stream whose cap leaves no room past its
// margin is due at its linger.
func TestTailGrowthMargin(t *testing.T) {
	t.Parallel()
	p := catalog.DuePolicy{Linger: 5 * time.Minute, AgeCap: 24 * time.Hour, ExpressLinger: 20 * time.Minute, ExpressAgeCap: time.Hour}
	if m, h := p.DeferMargin(catalog.ClassStandard), p.HoldFor(catalog.ClassStandard); m != 6*time.Hour || h != 18*time.Hour {
		t.Errorf("standard: margin %s, hold %s; want 6h, 18h", m, h)
	}
	if m, h := p.DeferMargin(catalog.ClassExpress), p.HoldFor(catalog.ClassExpress); m != 20*time.Minute || h != 40*time.Minute {
		t.Errorf("express: margin %s, hold %s; want 20m, 40m", m, h)
	}
	p.ExpressAgeCap = 30 * time.Minute
	if h := p.HoldFor(catalog.ClassExpress); h != 20*time.Minute {
		t.Errorf("express with a cap under two lingers: hold %s, want its linger", h)
	}

	// In SQL: a linger of 20m on a cap of 30m leaves a small stream 25m
	// old due (at its linger), one 15m old not (before its linger).
	s := newDueRuleStar(t)
	old := s.stream(1, 10, 1000, 3)
	young := s.stream(2, 10, 1000, 3)
	s.age(old, 25*time.Minute)
	s.age(young, 15*time.Minute)
	rule := catalog.DuePolicy{Linger: 20 * time.Minute, AgeCap: 30 * time.Minute, TailGrowth: 1, CopyFloor: 5000}
	if got := dueIDsOf(s.due(rule)); !slices.Equal(got, []catalog.StreamID{old}) {
		t.Errorf("due %v, want the old stream only", got)
	}
	// And a cap of 2h puts the margin at 30m: the old one now waits.
	rule.AgeCap = 2 * time.Hour
	if got := s.due(rule); len(got) != 0 {
		t.Errorf("due %v with a 2h cap, want none", dueIDsOf(got))
	}
}

// TestTailGrowthCohorts: with cohorts, a stream the rule lets go waits for
// its cohort's turn (cohorts are the markers in stream-ID order, in equal
// parts), never past its hold; one it holds is let go at its cohort's turn
// within CohortWindow of its hold's end; forced streams never wait; the
// turn passes at most once per interval, fenced; and TransitByClass counts
// what waits for its turn as deferred. Linger 5m, age cap 1h (hold 45m,
// margin 15m), 4 cohorts: CohortWindow is min(4 x 5m, 15m) = 15m.
func TestTailGrowthCohorts(t *testing.T) {
	t.Parallel()
	s := newDueRuleStar(t)
	// Eight streams, two a cohort: the odd ones grown (1,000 unsettled on a
	// 1,000-byte tail: the rule lets them go), the even ones small (300 on
	// 1,000: held).
	ids := make([]catalog.StreamID, 9)
	for b := byte(1); b <= 8; b++ {
		n := int64(10)
		if b%2 == 0 {
			n = 3
		}
		ids[b] = s.stream(b, 10, 1000, n)
		s.age(ids[b], 10*time.Minute)
	}
	p := catalog.DuePolicy{Linger: 5 * time.Minute, AgeCap: time.Hour, ExpressLinger: 5 * time.Minute, ExpressAgeCap: time.Hour,
		TailGrowth: 1, CopyFloor: 5000, Cohorts: 4}
	if w := p.CohortWindow(catalog.ClassStandard); w != 15*time.Minute {
		t.Fatalf("CohortWindow %s, want 15m", w)
	}
	want := func(what string, got []catalog.DueStream, bs ...byte) {
		t.Helper()
		var w []catalog.StreamID
		for _, b := range bs {
			w = append(w, ids[b])
		}
		g := dueIDsOf(got)
		slices.SortFunc(g, func(a, b catalog.StreamID) int { return slices.Compare(a[:], b[:]) })
		if !slices.Equal(g, w) {
			t.Errorf("%s: due %v, want streams %v", what, g, bs)
		}
	}
	// No turn yet: the star has no cohorts, every stream the rule lets go
	// is due.
	want("no turn", s.due(p), 1, 3, 5, 7)

	turn := func(every time.Duration) int64 {
		t.Helper()
		n, err := s.db.Settle().AdvanceCohortTurn(s.ctx, s.f, every, 4)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := turn(0); n != 0 {
		t.Fatalf("first turn %d, want 0", n)
	}
	want("turn 0 (cohort 1)", s.due(p), 1)
	// The forced stream of another cohort does not wait.
	want("turn 0, 5 forced", s.due(p, ids[5]), 1, 5)
	// A turn passes at most once per interval.
	if n := turn(time.Hour); n != 0 {
		t.Fatalf("turn passed within its interval: %d", n)
	}
	if n := turn(0); n != 1 {
		t.Fatalf("second turn %d, want 1", n)
	}
	want("turn 1 (cohort 2)", s.due(p), 3)

	// What waits is deferred, with its estimate: the small ones the rule
	// holds (2, 4, 6, 8) 300 bytes each, the grown ones waiting for their
	// turn (1, 5, 7) 1,000 each.
	_, classes, err := s.db.Ledger().TransitByClass(s.ctx, "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	if std := classes[0]; std.Deferred != 7 || std.DeferredBytes != 4*300+3*1000 || std.Due != 1 {
		t.Errorf("standard transit at turn 1: %+v, want 7 deferred holding 4,200 bytes and 1 due", std)
	}

	// The hold bounds the wait: grown 7 (cohort 4) and small 6 (cohort 3)
	// at 50m are due whatever the turn.
	s.age(ids[7], 50*time.Minute)
	s.age(ids[6], 50*time.Minute)
	want("turn 1, 6 and 7 past their hold", s.due(p), 3, 6, 7)

	// Small 4 (cohort 2) at 35m is within CohortWindow of its hold: its
	// cohort's turn lets it go; small 8 (cohort 4) at 35m waits for its own.
	s.age(ids[4], 35*time.Minute)
	s.age(ids[8], 35*time.Minute)
	want("turn 1, 4 within its window", s.due(p), 3, 4, 6, 7)
	turn(0)
	turn(0) // turn 3: cohort 4
	want("turn 3 (cohort 4)", s.due(p), 6, 7, 8)
	// Small 2 (cohort 1) at 25m is before its window: its cohort's turn
	// (turn 4) does not let it go.
	s.age(ids[2], 25*time.Minute)
	turn(0)
	want("turn 4 (cohort 1)", s.due(p), 1, 6, 7)

	// Cohorts 0 or 1, or the rule off: no waiting for turns.
	p1 := p
	p1.Cohorts = 1
	want("one cohort", s.due(p1), 1, 3, 5, 6, 7)
	p0 := p
	p0.TailGrowth = 0
	want("rule off", s.due(p0), 1, 2, 3, 4, 5, 6, 7, 8)

	// The turn is fenced.
	stale := s.f
	stale.Token++
	if _, err := s.db.Settle().AdvanceCohortTurn(s.ctx, stale, 0, 4); !errors.Is(err, catalog.ErrStaleToken) {
		t.Errorf("advance with a stale fence: %v, want ErrStaleToken", err)
	}
}

// TestTailGrowthCohortsStayPut: the cohorts are cut over the star's
// streams, so a cohort that settles (its markers gone) moves no other
// stream into another cohort; a stream the rule let go counts its lag from
// its turn's start, not its linger; and express streams have no cohorts.
func TestTailGrowthCohortsStayPut(t *testing.T) {
	t.Parallel()
	s := newDueRuleStar(t)
	ids := make([]catalog.StreamID, 9)
	for b := byte(1); b <= 8; b++ { // all grown: the rule lets each go
		ids[b] = s.stream(b, 10, 1000, 10)
		s.age(ids[b], 10*time.Minute)
	}
	p := catalog.DuePolicy{Linger: 5 * time.Minute, AgeCap: time.Hour, ExpressLinger: 5 * time.Minute, ExpressAgeCap: time.Hour,
		TailGrowth: 1, CopyFloor: 5000, Cohorts: 4}
	turn := func() {
		t.Helper()
		if _, err := s.db.Settle().AdvanceCohortTurn(s.ctx, s.f, 0, p.Cohorts); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, bs ...byte) {
		t.Helper()
		var w []catalog.StreamID
		for _, b := range bs {
			w = append(w, ids[b])
		}
		g := dueIDsOf(s.due(p))
		slices.SortFunc(g, func(a, b catalog.StreamID) int { return slices.Compare(a[:], b[:]) })
		if !slices.Equal(g, w) {
			t.Errorf("%s: due %v, want streams %v", what, g, bs)
		}
	}
	settled := func(bs ...byte) { // their markers go, as a settle's commit removes them
		t.Helper()
		for _, b := range bs {
			if _, err := s.conn.Exec(s.ctx, `DELETE FROM nova.due_markers WHERE stream_id = $1`, ids[b]); err != nil {
				t.Fatal(err)
			}
		}
	}
	turn() // turn 0: cohort 1 = {1, 2}
	want("turn 0", 1, 2)
	// Its lag counts from the turn's start (just now), not from its linger
	// (5m ago).
	_, classes, err := s.db.Ledger().TransitByClass(s.ctx, "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	if std := classes[0]; std.Due != 2 || std.Deferred != 6 || std.Lag > time.Minute {
		t.Errorf("transit at turn 0: %+v, want 2 due with a lag under a minute, 6 deferred", std)
	}
	settled(1, 2, 3) // cohort 1, and 3 of cohort 2 (forced, say)
	turn()           // turn 1: cohort 2 = {3, 4}
	want("turn 1", 4)
	settled(4)
	turn() // turn 2: cohort 3 = {5, 6}, as cut before any settled
	want("turn 2", 5, 6)

	// An express stream has no cohorts: 8 (cohort 4) is due now.
	if _, err := s.conn.Exec(s.ctx, `UPDATE nova.due_markers SET class = 'express' WHERE stream_id = $1`, ids[8]); err != nil {
		t.Fatal(err)
	}
	want("turn 2, 8 express", 5, 6, 8)

	// The turn keeps to its grid: passing on an hour's turn early does
	// nothing.
	var before, after int64
	if err := s.conn.QueryRow(s.ctx, `SELECT cohort_turn FROM nova.auditor_state WHERE star = 's1'`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := s.db.Settle().AdvanceCohortTurn(s.ctx, s.f, time.Hour, p.Cohorts); err != nil {
		t.Fatal(err)
	}
	if err := s.conn.QueryRow(s.ctx, `SELECT cohort_turn FROM nova.auditor_state WHERE star = 's1'`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("turn %d passed on to %d within its hour", before, after)
	}
}
