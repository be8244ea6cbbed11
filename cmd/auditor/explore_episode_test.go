package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv/faultstore"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
)

// exploreGrace is the episodes' --reap-grace; the stray guard is twice it.
// Quiescing skips the metastore's clock past both.
const exploreGrace = time.Hour

// episode is one seeded run: a star of its own on the shared database, a
// store of its own, two or three leaders, a script drawn from the seed.
type episode struct {
	x     *explorer
	db    *catalog.DB // the episode's database (a replay's is a clone of its own)
	url   string
	seed  uint64
	rnd   *rand.Rand
	star  string
	b     teststore.Backend
	dir   string
	inj   *faultstore.Injector
	mut   mutation
	over  chan struct{} // closed when the episode ends: blocked leaders go
	batch int64         // --settle-batch-streams
	// reapBatch is --reap-batch-size.
	reapBatch int64
	big       bool // S3: a round may write objects above the part minimum (bigFlight)

	began   time.Time
	leaders []*leader
	all     []*leader // every incarnation, for shut
	streams []bundlefmt.StreamID
	damaged map[catalog.StreamID]bool // streams whose standing object the script damaged on purpose
	// damagedKeys are the objects damaged.
	damagedKeys map[string]bool
	script      []string
	failures    []string

	// A rewind (explore_rewind_test.go): the plan drawn from the seed, the
	// backup's dump, whether the metastore was restored, the reconciles
	// run, and the restored databases to close and drop at the end.
	rewind     *rewindPlan
	dump       string
	restored   bool
	reconciles int
	refused    bool // the cycles refused to run after the restore
	closers    []func()
	drops      []func()

	mu      sync.Mutex
	hits    map[crashpoint.Point]int
	crashed []crashpoint.Point // crash points that acted
	paused  []crashpoint.Point // pause points that acted
}

// note records one step of the script (printed with a failure).
func (ep *episode) note(format string, args ...any) {
	ep.script = append(ep.script, fmt.Sprintf(format, args...))
	if ep.x.trace {
		ep.x.t.Logf("%s %s", time.Since(ep.began).Round(time.Millisecond), ep.script[len(ep.script)-1])
	}
}

func (ep *episode) fail(format string, args ...any) {
	ep.failures = append(ep.failures, fmt.Sprintf(format, args...))
}

func (ep *episode) hit(p crashpoint.Point) {
	ep.mu.Lock()
	ep.hits[p]++
	ep.mu.Unlock()
}

// choosable are the points an episode arms: every cycle point (the
// lease renewal's is reached by the leaders that renew: leaderLease).
func choosable() []crashpoint.Point { return cycleCrashPoints() }

// choosePoint draws the point to arm and its hit: mostly among the
// points this episode's cycles already passed (so the work they sit in is
// there), now and then among all; n at most the hits a point had.
func (ep *episode) choosePoint() (crashpoint.Point, int) {
	pts := choosable()
	var seen []crashpoint.Point
	ep.mu.Lock()
	for _, p := range pts {
		if ep.hits[p] > 0 {
			seen = append(seen, p)
		}
	}
	ep.mu.Unlock()
	if len(seen) > 0 && ep.rnd.IntN(4) != 0 {
		pts = seen
	}
	return pts[ep.rnd.IntN(len(pts))], 1 + ep.rnd.IntN(2)
}

// run plays the episode's script and then the oracle.
func (ep *episode) run(t testing.TB) {
	ctx := context.Background()
	defer ep.end()
	r := ep.rnd
	nStreams := 2 + r.IntN(4)
	fx, err := sim.Setup(ctx, ep.db, sim.SetupOptions{Star: ep.star, Streams: nStreams, FenceWindow: 2,
		Content: sim.Content{Seed: ep.seed, MinBytes: 1, MaxBytes: 2 << 10, HeaderShare: 0.2, EmptyShare: 0.05}})
	if err != nil {
		ep.fail("setup: %v", err)
		return
	}
	ep.streams = fx.Stars[0].Streams
	ep.note("set up")
	nLeaders := 2 + r.IntN(2)
	for i := range nLeaders {
		l, err := ep.newLeader(t, fmt.Sprintf("leader-%d", i))
		if err != nil {
			ep.fail("%v", err)
			return
		}
		ep.leaders, ep.all = append(ep.leaders, l), append(ep.all, l)
	}
	rounds := 3 + r.IntN(3)
	ep.note("star %s: %d streams, %d leaders, %d rounds, settle batch %d, reap batch %d, fault rate %.2f",
		ep.star, nStreams, nLeaders, rounds, ep.batch, ep.reapBatch, ep.x.rate(ep.seed))
	if ep.rewind = planRewind(ep.seed, rounds); ep.rewind != nil {
		ep.note("rewind: a backup at the start of round %d, restored at the start of round %d", ep.rewind.backup, ep.rewind.restore)
	}
	for round := range rounds {
		if !ep.round(t, ctx, round) {
			return
		}
	}
	ep.quiesce(t, ctx)
	ep.note("quiesced")
	if len(ep.failures) == 0 {
		ep.oracle(ctx)
	}
	ep.note("checked")
}

// end lets every blocked leader go and releases them all, then the
// restored databases.
func (ep *episode) end() {
	close(ep.over)
	for _, l := range ep.all {
		l.shut()
	}
	for _, c := range ep.closers {
		c()
	}
	for _, d := range ep.drops {
		d()
	}
}

// forgetting reports whether the episode is between its backup and its
// restore: what the metastore records then (but the traffic and the
// leaders' work) is not drawn (retention, erasures, damage).
func (ep *episode) forgetting() bool { return ep.dump != "" && !ep.restored }

// round is one round of the script: traffic, the write path's and the
// operator's moves, and one leader's action. False ends the episode.
func (ep *episode) round(t testing.TB, ctx context.Context, round int) bool {
	// Each round draws from a source of its own: an outcome that differs
	// in a replay (a point reached or not, a race of the traffic) changes
	// the draws of its round only.
	ep.rnd = rand.New(rand.NewPCG(ep.seed, uint64(round+1)))
	r := ep.rnd
	if ep.rewind != nil && round == ep.rewind.backup && !ep.backup(t, round) {
		return false
	}
	if ep.rewind != nil && round == ep.rewind.restore && !ep.restore(t, ctx, round) {
		return false
	}
	// Traffic, alone or beside a leader's clean cycle.
	faults := sim.Faults{Failover: 0.15 * r.Float64(), Lost: 0.1 * r.Float64(), LostReply: 0.1 * r.Float64()}
	flights := int64(2 + r.IntN(5))
	flightBytes := int64(8<<10 + r.IntN(24<<10))
	if ep.big && r.IntN(3) == 0 {
		flights, flightBytes = 2, bigFlight+int64(r.IntN(6<<20))
	}
	beside := r.IntN(3) == 0
	var side <-chan cycleResult
	var sideL *leader
	if beside {
		sideL = ep.pick(t, -1)
		if sideL == nil {
			return false
		}
		side = sideL.start(ep.opts(false))
	}
	ep.note("round %d: write %d flights %+v (beside a cycle of %s: %v)", round, flights, faults, nameOf(sideL), beside)
	ws, err := sim.Write(ctx, ep.db, sim.Storage{Store: ep.b.Store, Standard: ep.b.Std}, sim.WriteOptions{
		Star: ep.star, Flights: flights, FlightBytes: flightBytes, FlightInterval: time.Minute,
		Faults: faults, Session: ep.seed*64 + uint64(round)})
	if err != nil && !errors.Is(err, sim.ErrFenced) {
		ep.fail("write: %v", err)
		return false
	}
	ep.note("written: %d flights, %d absorbed", ws.Flights, ws.Absorbed)
	if side != nil {
		if !ep.await(sideL, side, "cycle beside the traffic") {
			return false
		}
	}
	// The write path's retention, users' erasures, an operator's trigger.
	if r.IntN(10) < 3 {
		ep.retention(ctx)
	}
	if r.IntN(10) < 4 {
		ep.erase(ctx)
	}
	if r.IntN(2) == 0 {
		ep.skipGrace(ctx)
	}
	if r.IntN(4) == 0 && !ep.forgetting() {
		// What a lost reply or an earlier crash left standing uncommitted.
		ep.note("round %d: damage what stands uncommitted", round)
		ep.damage(ctx)
	}
	if r.IntN(2) == 0 && len(ep.damaged) > 0 {
		ep.note("round %d: the operator releases the streams damaged on purpose", round)
		ep.releaseDamaged(ctx)
	}
	// A leader's action: a clean cycle, a pause, or a crash.
	switch k := r.IntN(10); {
	case k < 4:
		l := ep.pick(t, -1)
		if l == nil {
			return false
		}
		expire := r.IntN(5) == 0
		ep.note("round %d: %s runs a cycle (its lease expired part way: %v)", round, l.name, expire)
		ch := l.start(ep.opts(r.IntN(3) == 0))
		if expire {
			time.Sleep(time.Duration(r.IntN(30)) * time.Millisecond)
			ep.expire(ctx)
		}
		if !ep.await(l, ch, "clean cycle") {
			return false
		}
	case k < 7:
		if !ep.pause(t, ctx, round) {
			return false
		}
	default:
		if !ep.crash(t, ctx, round) {
			return false
		}
	}
	ep.checkQuarantine(ctx)
	return len(ep.failures) == 0
}

func nameOf(l *leader) string {
	if l == nil {
		return "-"
	}
	return l.name
}

// opts are a cycle's options: a trigger of one stream now and then, and
// a sweep of strays when asked.
func (ep *episode) opts(sweep bool) cycle.Options {
	o := cycle.Options{Trigger: daemon.TriggerOnce, SweepStrays: sweep}
	if ep.rnd.IntN(5) == 0 {
		o.Trigger, o.Streams = daemon.TriggerStream, []catalog.StreamID{ep.streams[ep.rnd.IntN(len(ep.streams))]}
	}
	return o
}

// pick returns a live leader other than the one at index not, restarting
// a dead one in its place (a new process of the same name and data
// directory).
func (ep *episode) pick(t testing.TB, not int) *leader {
	i := ep.rnd.IntN(len(ep.leaders))
	if i == not {
		i = (i + 1) % len(ep.leaders)
	}
	if l := ep.leaders[i]; !l.isDead() {
		return l
	}
	l, err := ep.newLeader(t, ep.leaders[i].name)
	if err != nil {
		ep.fail("restart: %v", err)
		return nil
	}
	ep.note("%s restarts", l.name)
	ep.leaders[i], ep.all = l, append(ep.all, l)
	return l
}

func (ep *episode) indexOf(l *leader) int { return slices.Index(ep.leaders, l) }

// await waits for a cycle: its outcome may be any the daemon copes with
// (a lost lease, a retryable failure), but not a halt, and not forever.
func (ep *episode) await(l *leader, ch <-chan cycleResult, what string) bool {
	select {
	case res := <-ch:
		ep.judge(l, res, what)
		return len(ep.failures) == 0
	case <-time.After(ep.x.stuck):
		ep.fail("%s of %s did not end within %s", what, l.name, ep.x.stuck)
		return false
	}
}

// judge fails the episode on a cycle outcome that no fault explains: a
// halt (a broken invariant).
func (ep *episode) judge(l *leader, res cycleResult, what string) {
	if res.err == nil {
		return
	}
	if cycle.IsHalt(res.err) || errors.Is(res.err, daemon.ErrHalted) {
		ep.fail("%s of %s halted: %v", what, l.name, res.err)
		return
	}
	var held *catalog.LeaseHeldError
	if errors.As(res.err, &held) {
		ep.fail("%s of %s found the lease held: %v", what, l.name, res.err)
	}
}

// expire ends the star's lease, whoever holds it: the ttl running out
// while its holder is paused, dead or slow (a renewal on its way finds it
// gone, as a renewal of an expired lease does).
func (ep *episode) expire(ctx context.Context) {
	if err := writepath.New(ep.db).ExpireLease(ctx, ep.star); err != nil {
		ep.fail("expire lease: %v", err)
	}
}

// pause freezes a leader at a point drawn from the seed; while it is
// frozen its lease runs out, another leader runs a cycle, and then it
// resumes (its requests on the wire land late).
func (ep *episode) pause(t testing.TB, ctx context.Context, round int) bool {
	r := ep.rnd
	l := ep.pick(t, -1)
	if l == nil {
		return false
	}
	p, n := ep.choosePoint()
	a := l.armPoint(p, n, false)
	ch := l.start(ep.opts(r.IntN(3) == 0))
	select {
	case res := <-ch:
		l.disarm()
		ep.note("round %d: %s armed to pause at %s:%d, not reached", round, l.name, p, n)
		ep.judge(l, res, "cycle armed to pause")
		return len(ep.failures) == 0
	case <-a.reached:
	case <-time.After(ep.x.stuck):
		ep.fail("cycle of %s armed to pause at %s:%d did not end", l.name, p, n)
		return false
	}
	ep.mu.Lock()
	ep.paused = append(ep.paused, p)
	ep.mu.Unlock()
	ep.expire(ctx)
	m := ep.pick(t, ep.indexOf(l))
	if m == nil {
		return false
	}
	ep.note("round %d: %s paused at %s:%d; lease expired; %s runs a cycle; %s resumes", round, l.name, p, n, m.name, l.name)
	mch := m.start(ep.opts(r.IntN(3) == 0))
	var mres *cycleResult
	select {
	case res := <-mch:
		mres = &res
	case <-time.After(2 * time.Second):
		// The paused leader may hold row locks (paused inside a
		// transaction): the other waits for them, as it would for a
		// frozen process until its connection drops.
	}
	l.disarm()
	close(a.release)
	if !ep.await(l, ch, "paused cycle") {
		return false
	}
	if mres != nil {
		ep.judge(m, *mres, "cycle beside a paused leader")
		return len(ep.failures) == 0
	}
	return ep.await(m, mch, "cycle beside a paused leader")
}

// crash kills a leader at a point drawn from the seed; its lease runs
// out. Now and then an object a publish left standing uncommitted (one
// that completed and died before its commit) is damaged on purpose.
func (ep *episode) crash(t testing.TB, ctx context.Context, round int) bool {
	r := ep.rnd
	l := ep.pick(t, -1)
	if l == nil {
		return false
	}
	p, n := ep.choosePoint()
	a := l.armPoint(p, n, true)
	ch := l.start(ep.opts(r.IntN(3) == 0))
	select {
	case res := <-ch:
		l.disarm()
		ep.note("round %d: %s armed to crash at %s:%d, not reached", round, l.name, p, n)
		ep.judge(l, res, "cycle armed to crash")
		return len(ep.failures) == 0
	case <-a.reached:
	case <-time.After(ep.x.stuck):
		ep.fail("cycle of %s armed to crash at %s:%d did not end", l.name, p, n)
		return false
	}
	ep.mu.Lock()
	ep.crashed = append(ep.crashed, p)
	ep.mu.Unlock()
	ep.expire(ctx)
	damage := r.IntN(2) == 0 && !ep.forgetting()
	ep.note("round %d: %s crashed at %s:%d; lease expired; damage what stands uncommitted: %v", round, l.name, p, n, damage)
	if damage {
		ep.damage(ctx)
	}
	return true
}

// damage flips a data byte of every standing object an open publish
// intent names (a publish that completed and died before its commit):
// adoption must refuse it (a quarantine that condemns the key), and after
// a release the stream publishes again above it.
func (ep *episode) damage(ctx context.Context) {
	// A killed leader's COMMIT may still land until Postgres has ended its
	// sessions: an intent read open before that may be cataloged after,
	// and damage to a cataloged object is loss, not what this models.
	for _, l := range ep.all {
		if l.isDead() && !ep.gone(ctx, l) {
			return
		}
	}
	in, err := ep.db.Settle().Intents(ctx, ep.star, "publish", 0)
	if err != nil {
		ep.fail("intents: %v", err)
		return
	}
	for _, it := range in {
		if cataloged, err := ep.cataloged(ctx, it.ObjectKey); err != nil || cataloged {
			// After a reconcile, an intent that records an upload stays
			// open on a key the catalog references, for recovery to abort
			// the upload: that object is committed, not what this models.
			if err != nil {
				ep.fail("%v", err)
			}
			continue
		}
		a, err := ep.b.Store.Head(ctx, ep.b.Std, it.ObjectKey)
		if err != nil || a.Size < 100 {
			continue
		}
		b, _, err := ep.b.Store.GetRange(ctx, ep.b.Std, it.ObjectKey, 0, a.Size)
		if err != nil {
			ep.fail("read %s to damage it: %v", it.ObjectKey, err)
			return
		}
		if ep.damagedKeys[it.ObjectKey] {
			continue // a second flip would restore it
		}
		ep.damagedKeys[it.ObjectKey] = true
		b[len(b)/4] ^= 0x40 // a data byte: the footer is at the end
		if err := ep.b.Store.Delete(ctx, ep.b.Std, []string{it.ObjectKey}); err != nil {
			ep.fail("damage %s: %v", it.ObjectKey, err)
			return
		}
		if err := ep.b.Store.PutIfAbsent(ctx, ep.b.Std, it.ObjectKey, b); err != nil {
			ep.fail("damage %s: %v", it.ObjectKey, err)
			return
		}
		ep.inj.Forget(ep.b.Std, it.ObjectKey)
		k, _ := bundlefmt.ParseSettledKey(it.ObjectKey)
		ep.damaged[k.Stream] = true
		ep.note("damaged %s", it.ObjectKey)
	}
}

// cataloged reports whether the catalog references the settled key.
func (ep *episode) cataloged(ctx context.Context, key string) (bool, error) {
	k, err := bundlefmt.ParseSettledKey(key)
	if err != nil {
		return false, nil
	}
	ens, err := ep.db.Settle().EntriesIntersecting(ctx, k.Stream, int64(k.StreamEpoch), int64(k.FirstRecord), int64(k.FirstRecord)+1)
	if err != nil {
		return false, fmt.Errorf("the catalog at %s: %w", key, err)
	}
	for _, e := range ens {
		if uint64(e.FirstRecord) == k.FirstRecord && uint32(e.Revision) == k.Revision {
			return true, nil
		}
	}
	return false, nil
}

// gone waits for a dead leader's database sessions to end.
func (ep *episode) gone(ctx context.Context, l *leader) bool {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n, err := writepath.New(ep.db).Sessions(ctx, l.app)
		if err != nil {
			ep.fail("%v", err)
			return false
		}
		if n == 0 {
			return true
		}
		if time.Now().After(deadline) {
			ep.fail("%s's %d database sessions outlived it by 10s", l.name, n)
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// retention raises the low_record of a stream drawn from the seed.
func (ep *episode) retention(ctx context.Context) {
	if ep.forgetting() {
		ep.note("retention: none between the backup and the restore")
		return
	}
	st := ep.stream(ctx)
	if st == nil || st.NextRecord <= st.LowRecord {
		return
	}
	low := st.LowRecord + 1 + ep.rnd.Int64N(st.NextRecord-st.LowRecord)
	ep.note("retention: stream %s low_record %d", st.ID, low)
	if err := writepath.New(ep.db).RaiseLowRecord(ctx, st.ID, low); err != nil {
		ep.fail("retention: %v", err)
	}
}

// erase records an erasure of one to three live records of a stream (on
// a big episode, mostly of the longest: an erasure rewrite of an object
// above the part minimum gathers parts).
func (ep *episode) erase(ctx context.Context) {
	if ep.forgetting() {
		ep.note("erasure: none between the backup and the restore")
		return
	}
	st := ep.stream(ctx)
	if ep.big && ep.rnd.IntN(3) != 0 {
		st = ep.longest(ctx)
	}
	if st == nil || st.NextRecord <= st.LowRecord {
		return
	}
	first := st.LowRecord + ep.rnd.Int64N(st.NextRecord-st.LowRecord)
	count := min(1+ep.rnd.Int64N(3), st.NextRecord-first)
	ep.note("erasure: stream %s [%d, +%d)", st.ID, first, count)
	_, err := ep.db.Erasures().RecordErasure(ctx, st.ID, first, count)
	switch {
	case errors.Is(err, catalog.ErrBadErasure):
		ep.note("erasure refused: %v", err) // another count at a first record already erased: the user's mistake, refused
	case err != nil:
		ep.fail("erasure: %v", err)
	}
}

// longest is the star's stream with the most live records.
func (ep *episode) longest(ctx context.Context) *catalog.Stream {
	streams, err := ep.db.Streams().StreamsOfStar(ctx, ep.star)
	if err != nil {
		ep.fail("streams: %v", err)
		return nil
	}
	var best *catalog.Stream
	for i := range streams {
		if best == nil || streams[i].NextRecord-streams[i].LowRecord > best.NextRecord-best.LowRecord {
			best = &streams[i]
		}
	}
	return best
}

// stream is a stream of the star drawn from the seed.
func (ep *episode) stream(ctx context.Context) *catalog.Stream {
	streams, err := ep.db.Streams().StreamsOfStar(ctx, ep.star)
	if err != nil {
		ep.fail("streams: %v", err)
		return nil
	}
	if len(streams) == 0 {
		return nil
	}
	st := streams[ep.rnd.IntN(len(streams))]
	return &st
}

// skipGrace moves every armed reap's time past the grace, and the
// store's clock with it: what stands now lists that much older, so a
// stray ages past the guard.
func (ep *episode) skipGrace(ctx context.Context) {
	if err := writepath.New(ep.db).SkipGrace(ctx, ep.star, 3*exploreGrace); err != nil {
		ep.fail("skip the grace: %v", err)
	}
	ep.inj.Age(3 * exploreGrace)
}

// checkQuarantine: a stream is quarantined only when the script damaged
// its bytes on purpose.
func (ep *episode) checkQuarantine(ctx context.Context) {
	q, err := ep.db.Settle().Quarantined(ctx, ep.star)
	if err != nil {
		ep.fail("quarantine: %v", err)
		return
	}
	for _, row := range q {
		if row.Stream == nil || !ep.damaged[*row.Stream] {
			ep.fail("quarantined with no damage done: %s %s %s", streamOf(row.Stream), row.ErrorClass, row.Reason)
		}
	}
}

func streamOf(id *catalog.StreamID) string {
	if id == nil {
		return "(a slot)"
	}
	return id.String()
}

// quiesce: the faults stop but the late DELETEs (an SDK retry's may come
// any time), and one clean leader (a fresh process) runs cycles past every
// grace until the star settles, releasing the streams damaged on purpose;
// then the late DELETEs still held land.
func (ep *episode) quiesce(t testing.TB, ctx context.Context) {
	ep.inj.SetKinds(faultstore.LateDelete)
	defer func() {
		// The DELETEs still held land last: after everything, the
		// quiescing cycles' republishes included (one of a key they name
		// lands as soon as that key is written).
		if err := ep.inj.Flush(ctx); err != nil {
			ep.note("flush of the late deletes: %v", err)
		}
	}()
	ep.expire(ctx)
	q, err := ep.newLeader(t, "quiesce")
	if err != nil {
		ep.fail("%v", err)
		return
	}
	ep.all = append(ep.all, q)
	var last error
	for i := range 10 {
		ep.skipGrace(ctx)
		res := <-q.start(cycle.Options{Trigger: daemon.TriggerOnce, SweepStrays: true})
		last = res.err
		ep.judge(q, res, fmt.Sprintf("quiescing cycle %d", i+1))
		if len(ep.failures) > 0 {
			return
		}
		ep.checkQuarantine(ctx)
		ep.releaseDamaged(ctx)
		rest := ep.strays(ctx)
		if res.err == nil && ep.settled(ctx) == "" && rest == "" {
			return
		}
		if rest != "" {
			// A stray (a late PUT's) ages past the guard only by a skip
			// made surely after it was written; an erasure whose records
			// it holds waits for its sweep.
			time.Sleep(objstore.ListedTimeResolution + 100*time.Millisecond)
		}
	}
	ep.fail("not settled after 10 quiescing cycles (the last: %v): %s", last, strings.Join([]string{ep.settled(ctx), ep.strays(ctx)}, "; "))
}

// releaseDamaged lifts the quarantine of the streams damaged on purpose
// (auditor release), once their condemned key is reaped.
func (ep *episode) releaseDamaged(ctx context.Context) {
	q, err := ep.db.Settle().Quarantined(ctx, ep.star)
	if err != nil {
		ep.fail("quarantine: %v", err)
		return
	}
	for _, row := range q {
		if row.Stream != nil && ep.damaged[*row.Stream] {
			ep.note("release %s, quarantined %s: %s", row.Stream, row.ErrorClass, row.Reason)
			if _, err := writepath.New(ep.db).ReleaseQuarantine(ctx, ep.star, *row.Stream); err != nil {
				ep.fail("release: %v", err)
			}
		}
	}
}

// strays are the settled objects no catalog entry names (a late PUT's,
// until the strays step sweeps them), or "".
func (ep *episode) strays(ctx context.Context) string {
	keys, err := ep.catalogKeys(ctx)
	if err != nil {
		return err.Error()
	}
	var out []string
	if err := ep.b.Store.List(ctx, ep.b.Std, settledRoot, func(o objstore.ObjectInfo) error {
		if !keys[o.Key] {
			out = append(out, "stray "+o.Key)
		}
		return nil
	}); err != nil {
		return err.Error()
	}
	return strings.Join(out, "; ")
}

// entries are a stream's catalog entries as [first, end)~revision, for a
// failure's message.
func (ep *episode) entries(ctx context.Context, st catalog.Stream) string {
	ens, err := ep.db.Settle().EntriesIntersecting(ctx, st.ID, st.Epoch, 0, 1<<62)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, en := range ens {
		out = append(out, fmt.Sprintf("[%d, %d)~%d", en.FirstRecord, en.EndRecord(), en.Revision))
	}
	return strings.Join(out, " ")
}

// settled is "" when the star is at rest: every stream settled to its
// next record, no intent open, every erasure applied, no slot reap due;
// else what is not.
func (ep *episode) settled(ctx context.Context) string {
	var not []string
	streams, err := ep.db.Streams().StreamsOfStar(ctx, ep.star)
	if err != nil {
		return err.Error()
	}
	for _, st := range streams {
		if st.SettledThrough != st.NextRecord {
			not = append(not, fmt.Sprintf("stream %s settled %d of %d", st.ID, st.SettledThrough, st.NextRecord))
		}
		ers, err := ep.db.Settle().ErasuresOf(ctx, st.ID, 0, 1<<62)
		if err != nil {
			return err.Error()
		}
		for _, e := range ers {
			if !e.Applied {
				not = append(not, fmt.Sprintf("stream %s erasure [%d, +%d) not applied (low %d, settled %d, next %d; entries %s)",
					st.ID, e.FirstRecord, e.RecordCount, st.LowRecord, st.SettledThrough, st.NextRecord, ep.entries(ctx, st)))
			}
		}
	}
	for _, kind := range []string{"publish", "reap"} {
		in, err := ep.db.Settle().Intents(ctx, ep.star, kind, 0)
		if err != nil {
			return err.Error()
		}
		for _, i := range in {
			not = append(not, fmt.Sprintf("%s intent %s", kind, i.ObjectKey))
		}
	}
	return strings.Join(not, "; ")
}
