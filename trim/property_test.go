package trim_test

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/trim"
)

// The property: over random interleavings of writes (with lost flights,
// failovers, fences left in progress), settles (new entries, tail rewrites,
// publishes left open, recovered or abandoned), retention moves, quarantines
// and cycles of retention, trim and reap (grace 0, so everything armed is
// due at once; express zones going down), no delete ever names a key that
// may be referenced. "May be referenced" is this file's own model, kept
// beside the metastore as the write path and settle change it, and checked
// against the catalog itself at the moment of each delete:
//
//   - a slot may be referenced when a live ref of the model names it, or when
//     it is at or past the absorbed head (an absorb may still name it);
//   - a settled key may be referenced when the catalog (model or database)
//     holds its coordinates, or an open publish intent names it.
//
// At the end everything is settled and the chain trimmed: storage holds
// exactly what the catalog and the live refs need.

type mref struct {
	first, end int64
	slots      []trim.Pos
}

type mentry struct {
	rev   int32
	count int64
}

type mopen struct {
	id           int64
	key          string
	first, count int64
	rev, prev    int32
	stream       catalog.StreamID
}

type mstream struct {
	id                  catalog.StreamID
	next, settled, low  int64
	refs                []mref
	entries             map[int64]mentry
	quarantined, opened bool
}

type model struct {
	e       *env
	rnd     *rand.Rand
	head    trim.Pos
	streams []*mstream
	open    map[string]*mopen // key -> open publish
	fences  []int64           // epochs whose fence is in progress
	ends    map[int64]int64   // epoch -> end_seq to set
	deletes int
	mu      sync.Mutex
}

func (m *model) stream(id catalog.StreamID) *mstream {
	for _, s := range m.streams {
		if s.id == id {
			return s
		}
	}
	panic("unknown stream")
}

func (s *mstream) dropRefs(below int64) {
	var keep []mref
	for _, r := range s.refs {
		if r.end > below {
			keep = append(keep, r)
		}
	}
	s.refs = keep
}

func (s *mstream) last() (int64, mentry, bool) {
	var firsts []int64
	for f := range s.entries {
		firsts = append(firsts, f)
	}
	if len(firsts) == 0 {
		return 0, mentry{}, false
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i] < firsts[j] })
	f := firsts[len(firsts)-1]
	return f, s.entries[f], true
}

func (m *model) key(s *mstream, first int64, rev int32) string {
	return bundlefmt.SettledKey("b1", s.id, 1, uint64(first), uint32(rev))
}

// write absorbs a flight at the head, sometimes after a lost one.
func (m *model) write() {
	e := m.e
	if m.rnd.Float64() < 0.15 {
		e.lost(m.head.Epoch, m.head.Seq, batch{m.streams[0].id, 1})
		m.head.Seq++
	}
	var bs []batch
	for _, s := range m.streams {
		if m.rnd.Float64() < 0.5 {
			bs = append(bs, batch{s.id, 1 + m.rnd.Int64N(4)})
		}
	}
	if len(bs) == 0 {
		bs = []batch{{m.streams[m.rnd.IntN(len(m.streams))].id, 1}}
	}
	e.flight(m.head.Epoch, m.head.Seq, bs...)
	for _, b := range bs {
		s := m.stream(b.stream)
		s.refs = append(s.refs, mref{first: s.next, end: s.next + b.count, slots: []trim.Pos{m.head}})
		s.next += b.count
	}
	m.head.Seq++
}

// failover fences the writer's epoch, sometimes after a late flight landed
// at the head, sometimes leaving the fence in progress.
func (m *model) failover() {
	if m.rnd.Float64() < 0.3 {
		m.e.lost(m.head.Epoch, m.head.Seq, batch{m.streams[0].id, 1})
	}
	finish := m.rnd.Float64() < 0.6
	old, end := m.e.failover(finish)
	if !finish {
		m.fences = append(m.fences, old)
		m.ends[old] = end
	}
	m.head = P(old+1, 0)
}

func (m *model) endFence() {
	if len(m.fences) == 0 {
		return
	}
	i := m.rnd.IntN(len(m.fences))
	ep := m.fences[i]
	if err := writepath.New(m.e.db).EndFence(m.e.ctx, m.e.star, ep, m.ends[ep]); err != nil {
		m.e.t.Fatal(err)
	}
	m.fences = append(m.fences[:i], m.fences[i+1:]...)
}

// settle publishes one stream's next object: a new entry at settled_through
// or a rewrite of its tail, committed or left open.
func (m *model) settle() { m.settleOne(m.streams[m.rnd.IntN(len(m.streams))]) }

func (m *model) settleOne(s *mstream) {
	e := m.e
	if s.quarantined || s.opened {
		return
	}
	if s.settled < s.low {
		got, err := e.db.Settle().SkipBelowLow(e.ctx, e.fence, s.id)
		if err != nil {
			e.t.Fatal(err)
		}
		s.dropRefs(s.low)
		jump := s.next
		for _, r := range s.refs {
			jump = min(jump, r.first)
		}
		s.settled = max(s.settled, jump)
		if got != s.settled {
			e.t.Fatalf("SkipBelowLow: settled_through %d, model %d", got, s.settled)
		}
	}
	if s.settled >= s.next {
		return
	}
	o := &mopen{stream: s.id, first: s.settled, count: s.next - s.settled, prev: -1}
	if f, last, ok := s.last(); ok && f+last.count == s.settled && m.rnd.Float64() < 0.4 {
		o.first, o.rev, o.prev, o.count = f, last.rev+1, last.rev, s.next-f
	}
	o.key = m.key(s, o.first, o.rev)
	in, err := writepath.OpenIntent(e.ctx, e.db, e.fence, target(e.t, o.key), catalog.ClassStandard)
	if err != nil {
		e.t.Fatal(err)
	}
	o.id = in.ID
	m.mu.Lock()
	m.open[o.key] = o
	m.mu.Unlock()
	_ = e.store.PutIfAbsent(e.ctx, e.std, o.key, []byte("settled")) // a 412 adopts
	s.opened = true
	if m.rnd.Float64() < 0.75 {
		m.commit(o)
	}
}

func (m *model) commit(o *mopen) {
	e := m.e
	s := m.stream(o.stream)
	ent := catalog.Entry{Stream: s.id, Epoch: 1, FirstRecord: o.first, Revision: o.rev, RecordCount: o.count,
		ObjectBytes: 1, FooterOffset: 1, FooterLength: 1}
	c := catalog.SettleCommit{Entry: ent, PrevRevision: o.prev, IntentID: o.id, ObjectKey: o.key}
	if o.prev >= 0 {
		c.OldKey = m.key(s, o.first, o.prev)
	}
	if err := writepath.CommitSettle(e.ctx, e.db, e.fence, c); err != nil {
		e.t.Fatal(err)
	}
	s.entries[o.first] = mentry{rev: o.rev, count: o.count}
	s.settled = o.first + o.count
	s.dropRefs(s.settled)
	s.opened = false
	m.mu.Lock()
	delete(m.open, o.key)
	m.mu.Unlock()
}

// recover resumes a live open publish or abandons a stale one (settle's
// recovery); a live one may also stay open past the grace.
func (m *model) recover() {
	for _, o := range m.openList() {
		s := m.stream(o.stream)
		live := m.live(o)
		switch {
		case live && m.rnd.Float64() < 0.6:
			m.commit(o)
		case live:
		default:
			if err := m.e.db.Settle().AbandonPublish(m.e.ctx, m.e.fence, o.id, 0); err != nil {
				m.e.t.Fatal(err)
			}
			s.opened = false
			m.mu.Lock()
			delete(m.open, o.key)
			m.mu.Unlock()
		}
	}
}

// live reports whether an open publish can still commit (settle's rule: a
// new entry at settled_through, or the rewrite of the tail). One that cannot
// is dead even while its intent is open: its commit would be refused.
func (m *model) live(o *mopen) bool {
	s := m.stream(o.stream)
	if o.rev == 0 {
		return s.settled == o.first
	}
	f, last, ok := s.last()
	return ok && f == o.first && last.rev+1 == o.rev && f+last.count == s.settled
}

func (m *model) openList() []*mopen {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*mopen
	for _, o := range m.open {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

func (m *model) retention() {
	s := m.streams[m.rnd.IntN(len(m.streams))]
	low := s.low + m.rnd.Int64N(s.next-s.low+1)
	if err := writepath.New(m.e.db).RaiseLowRecord(m.e.ctx, s.id, low); err != nil {
		m.e.t.Fatal(err)
	}
	s.low = low
}

func (m *model) quarantine() {
	s := m.streams[m.rnd.IntN(len(m.streams))]
	if s.quarantined {
		if _, err := writepath.New(m.e.db).ReleaseQuarantine(m.e.ctx, m.e.star, s.id); err != nil {
			m.e.t.Fatal(err)
		}
	} else if err := m.e.db.Settle().Quarantine(m.e.ctx, m.e.fence, s.id, "", "corrupt", "property test"); err != nil {
		m.e.t.Fatal(err)
	}
	s.quarantined = !s.quarantined
}

func (m *model) cycle() {
	e := m.e
	var down string
	if e.class == catalog.ClassExpress && m.rnd.Float64() < 0.25 {
		down = e.express[m.rnd.IntN(len(e.express))]
		e.store.setDown(down, true)
	}
	// Retention runs first in the cycle: the model drops what it will drop.
	for _, s := range m.streams {
		for f, en := range s.entries {
			if f+en.count <= s.low {
				delete(s.entries, f)
			}
		}
	}
	if _, err := e.cycle(false); err != nil {
		e.t.Fatalf("cycle: %v", err)
	}
	if down != "" {
		e.store.setDown(down, false)
	}
}

// check is run on every key a delete names, before it is deleted.
func (m *model) check(bucket, key string) {
	e := m.e
	m.mu.Lock()
	m.deletes++
	o := m.open[key]
	m.mu.Unlock()
	if strings.HasPrefix(key, "stars/") {
		_, ep, seq, err := bundlefmt.ParseSlotKey(key)
		if err != nil {
			e.t.Errorf("delete of %s: %v", key, err)
			return
		}
		p := P(int64(ep), int64(seq))
		if !p.Less(m.head) {
			e.t.Errorf("DELETED slot %s at or past the head %s", p, m.head)
		}
		for _, s := range m.streams {
			for _, r := range s.refs {
				for _, rs := range r.slots {
					if rs == p {
						e.t.Errorf("DELETED slot %s named by live ref %s@%d", p, s.id, r.first)
					}
				}
			}
		}
		return
	}
	k, err := bundlefmt.ParseSettledKey(key)
	if err != nil {
		e.t.Errorf("delete of %s: %v", key, err)
		return
	}
	s := m.stream(k.Stream)
	if o != nil && m.live(o) {
		e.t.Errorf("DELETED %s named by an open publish intent that can still commit", key)
	}
	if en, ok := s.entries[int64(k.FirstRecord)]; ok && en.rev == int32(k.Revision) {
		e.t.Errorf("DELETED %s: in the model's catalog", key)
	}
	ents, err := e.db.Streams().EntriesOfStream(e.ctx, s.id)
	if err != nil {
		e.t.Errorf("read catalog: %v", err)
	}
	for _, en := range ents {
		if en.FirstRecord == int64(k.FirstRecord) && en.Revision == int32(k.Revision) {
			e.t.Errorf("DELETED %s: in the catalog", key)
		}
	}
}

func TestNothingReferencedIsDeleted(t *testing.T) {
	t.Parallel()
	seeds := 6
	if testing.Short() {
		seeds = 2
	}
	for seed := 1; seed <= seeds; seed++ {
		class := catalog.ClassStandard
		if seed%2 == 0 {
			class = catalog.ClassExpress
		}
		t.Run(fmt.Sprintf("seed%d-%s", seed, class), func(t *testing.T) {
			t.Parallel()
			ids := []catalog.StreamID{sid(1), sid(2), sid(3), sid(4)}
			e := newEnv(t, class, 2, ids...)
			m := &model{e: e, rnd: rand.New(rand.NewPCG(uint64(seed), 7)), head: P(1, 0), open: map[string]*mopen{}, ends: map[int64]int64{}}
			for _, id := range ids {
				m.streams = append(m.streams, &mstream{id: id, entries: map[int64]mentry{}})
			}
			e.store.check = m.check
			ops := []struct {
				w  float64
				do func()
			}{{30, m.write}, {4, m.failover}, {3, m.endFence}, {25, m.settle}, {6, m.recover}, {6, m.retention},
				{3, m.quarantine}, {15, m.cycle}}
			var total float64
			for _, o := range ops {
				total += o.w
			}
			for step := 0; step < 150; step++ {
				x := m.rnd.Float64() * total
				for _, o := range ops {
					if x -= o.w; x < 0 {
						o.do()
						break
					}
				}
				if t.Failed() {
					t.Fatalf("failed at step %d", step)
				}
			}
			// Wind down: finish every fence, lift quarantines, settle all.
			for len(m.fences) > 0 {
				m.endFence()
			}
			for _, s := range m.streams {
				if s.quarantined {
					m.quarantine2(s)
				}
			}
			for i := 0; i < 60; i++ {
				m.recover()
				m.settle()
			}
			for _, o := range m.openList() {
				m.commit(o)
			}
			for _, s := range m.streams {
				m.settleStream(s)
				if s.settled < s.next {
					t.Fatalf("stream %s: settled_through %d, next %d after the wind-down", s.id, s.settled, s.next)
				}
			}
			m.cycle()
			m.cycle()
			m.final()
		})
	}
}

func (m *model) quarantine2(s *mstream) {
	if _, err := writepath.New(m.e.db).ReleaseQuarantine(m.e.ctx, m.e.star, s.id); err != nil {
		m.e.t.Fatal(err)
	}
	s.quarantined = false
}

func (m *model) settleStream(s *mstream) {
	for i := 0; i < 100 && s.settled < s.next; i++ {
		m.settleOne(s)
		for _, o := range m.openList() {
			m.commit(o)
		}
	}
}

// final: storage holds what the catalog and the live refs need, and only
// that (besides objects held because a settle could still publish them).
func (m *model) final() {
	e := m.e
	t := e.t
	cur, _ := e.cursor()
	have := e.present()
	for p := range have {
		if p.Less(cur) {
			t.Errorf("slot %s behind the cursor %s survived", p, cur)
		}
	}
	need := map[string]bool{}
	for _, s := range m.streams {
		ents, err := e.db.Streams().EntriesOfStream(e.ctx, s.id)
		if err != nil {
			t.Fatal(err)
		}
		for _, en := range ents {
			k := m.key(s, en.FirstRecord, en.Revision)
			need[k] = true
			if ok, _ := exists(e.ctx, e.store, e.std, k); !ok {
				t.Errorf("catalog object %s is gone", k)
			}
		}
	}
	intents, _ := e.db.Trim().DueObjectReaps(e.ctx, e.star, 0, 0, 10000)
	for _, in := range intents {
		need[in.ObjectKey] = true // held: still publishable
	}
	stored, _ := keysUnder(e.ctx, e.store, e.std, "buckets/")
	for _, k := range stored {
		if !need[k] {
			t.Errorf("stray settled object %s", k)
		}
	}
	if m.deletes == 0 {
		t.Error("the run deleted nothing: the property was not exercised")
	}
	t.Logf("deletes checked %d, slots left %d, settled objects %d, held intents %d", m.deletes, len(have), len(stored), len(intents))
}
