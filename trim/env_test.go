package trim_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/trim"
)

// P is a position, shorter.
func P(e, s int64) trim.Pos { return trim.Pos{Epoch: e, Seq: s} }

func sid(b byte) catalog.StreamID { return catalog.StreamID{0: 0xab, 15: b} }

// env is one star on a fresh database and a store, driven the way the
// write path and settle drive them (catalog's write-path statements,
// CommitSettle), with trim's three steps under a real lease.
type env struct {
	t       testing.TB
	ctx     context.Context
	db      *catalog.DB
	store   *faultStore
	std     string
	express []string
	star    string
	class   string
	window  int
	fence   catalog.Fence
	next    map[catalog.StreamID]int64 // next record per stream (the writer's view)
	settled map[catalog.StreamID]int64 // settled_through
	reg     *prometheus.Registry
	metrics *trim.Metrics
	crash   func(crashpoint.Point)
	plan    bytes.Buffer
	cfg     trim.Config
	nonce   uint64
	health  *objstore.Health // shared across cycles when set (nil: each step its own)
	guard   time.Duration    // the strays step's guard (0: strayGuard, or above a longer reap grace)
	// sweepEvery is the strays step's schedule: 0 (no scheduled sweep)
	// unless a test sets it, so other tests' cycles list nothing.
	sweepEvery time.Duration
}

func openDB(t testing.TB) (*catalog.DB, context.Context) {
	t.Helper()
	db, _ := testenv.MigratedDB(t)
	return db, context.Background()
}

// newEnv is newEnvOn the file backend.
func newEnv(t testing.TB, class string, window int, streams ...catalog.StreamID) *env {
	t.Helper()
	return newEnvOn(t, fileStore(t), class, window, streams...)
}

func newEnvOn(t testing.TB, ns namedStore, class string, window int, streams ...catalog.StreamID) *env {
	t.Helper()
	db, ctx := openDB(t)
	e := &env{t: t, ctx: ctx, db: db, store: newFaultStore(ns.store), std: ns.buckets[0], express: ns.buckets[1:4],
		star: "s1", class: class, window: window, next: map[catalog.StreamID]int64{}, settled: map[catalog.StreamID]int64{},
		reg: prometheus.NewRegistry(), cfg: trim.Config{ReapGrace: 0, BatchSize: 1000, Concurrency: trim.DefaultConcurrency}}
	var err error
	if e.metrics, err = trim.NewMetrics(e.reg); err != nil {
		t.Fatal(err)
	}
	if err := writepath.New(db).CreateStar(ctx, e.star, class, window); err != nil {
		t.Fatal(err)
	}
	for _, id := range streams {
		if err := writepath.New(db).CreateStream(ctx, id, e.star, "b1"); err != nil {
			t.Fatal(err)
		}
	}
	lease, err := db.Leases().AcquireLeaseInstance(ctx, e.star, "trim-test", "", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	e.fence = lease.Fence
	return e
}

func (e *env) buckets() []string {
	if e.class == catalog.ClassExpress {
		return e.express
	}
	return []string{e.std}
}

func (e *env) deps() trim.Deps {
	var log *slog.Logger
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return trim.Deps{DB: e.db.Trim(), Topology: teststore.Topology(e.t, e.store, e.std, e.express, e.health), Log: log,
		Metrics: e.metrics, Crash: e.crash}
}

// steps returns retention, strays, trim and reap, in cycle order.
func (e *env) steps() []cycle.Step {
	e.t.Helper()
	r, err := trim.NewRetention(e.deps(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	sw, err := trim.NewStrays(e.deps(), e.cfg, e.strayConfig())
	if err != nil {
		e.t.Fatal(err)
	}
	tr, err := trim.NewTrim(e.deps(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	rp, err := trim.NewReap(e.deps(), e.cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	return []cycle.Step{r, sw, tr, rp}
}

// cycle runs retention, strays, trim and reap once, as the daemon would.
func (e *env) cycle(dry bool) (cycle.Counts, error) {
	var total cycle.Counts
	for _, s := range e.steps() {
		c, err := s.Run(e.ctx, e.fence, cycle.Options{Trigger: "once", DryRun: dry, Plan: &e.plan})
		total.Add(c)
		if err != nil {
			return total, fmt.Errorf("%s: %w", s.Name(), err)
		}
	}
	return total, nil
}

func (e *env) mustCycle() cycle.Counts {
	e.t.Helper()
	c, err := e.cycle(false)
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

type batch struct {
	stream catalog.StreamID
	count  int64
}

// slotBytes renders a real flight holding the batches (records numbered
// from each stream's next record), or a poison slot.
func (e *env) slotBytes(epoch, seq int64, batches []batch) []byte {
	e.t.Helper()
	e.nonce++
	if batches == nil {
		return bundlefmt.EncodePoison(uint64(epoch), uint64(seq), e.nonce)
	}
	sort.Slice(batches, func(i, j int) bool { return bytes.Compare(batches[i].stream[:], batches[j].stream[:]) < 0 })
	var chunks []bundlefmt.Chunk
	for _, b := range batches {
		cb := bundlefmt.NewChunkBuilder(b.stream, uint64(e.next[b.stream]))
		for r := int64(0); r < b.count; r++ {
			body := fmt.Appendf(nil, "%s/%d", b.stream, e.next[b.stream]+r)
			if err := cb.Add(bundlefmt.Record{Body: body}, 1000+r, r == b.count-1); err != nil {
				e.t.Fatal(err)
			}
		}
		chunks = append(chunks, cb.Chunk())
	}
	data, err := bundlefmt.EncodeFlight(uint64(epoch), uint64(seq), e.nonce, chunks)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

// put writes a slot in every bucket of the star's class; false when the seq
// was taken (412).
func (e *env) put(epoch, seq int64, data []byte) bool {
	e.t.Helper()
	taken := false
	for _, b := range e.buckets() {
		err := e.store.PutIfAbsent(e.ctx, b, bundlefmt.SlotKey(e.star, uint64(epoch), uint64(seq)), data)
		if errors.Is(err, objstore.ErrExists) {
			taken = true
		} else if err != nil {
			e.t.Fatal(err)
		}
	}
	return !taken
}

// flight writes a flight and absorbs it.
func (e *env) flight(epoch, seq int64, batches ...batch) {
	e.t.Helper()
	data := e.slotBytes(epoch, seq, batches)
	if !e.put(epoch, seq, data) {
		e.t.Fatalf("slot %d/%d taken", epoch, seq)
	}
	env, err := bundlefmt.DecodeEnvelope("", data[:bundlefmt.EnvelopeSize])
	if err != nil {
		e.t.Fatal(err)
	}
	fl := writepath.AbsorbFlight{Epoch: epoch, Seq: seq, FooterOffset: int64(env.FooterOffset), FooterLength: int64(env.FooterLength)}
	for _, b := range batches {
		fl.Batches = append(fl.Batches, writepath.AbsorbBatch{Stream: b.stream, FirstRecord: e.next[b.stream], Count: b.count})
	}
	if err := writepath.New(e.db).Absorb(e.ctx, e.star, []writepath.AbsorbFlight{fl}); err != nil {
		e.t.Fatal(err)
	}
	for _, b := range batches {
		e.next[b.stream] += b.count
	}
}

// lost writes a flight that is never absorbed (its records go again).
func (e *env) lost(epoch, seq int64, batches ...batch) {
	e.t.Helper()
	if !e.put(epoch, seq, e.slotBytes(epoch, seq, batches)) {
		e.t.Fatalf("slot %d/%d taken", epoch, seq)
	}
}

// failover fences the current epoch as docs/metastore.md says: open the next
// epoch, poison fence_window seqs from the first free one at or past the
// head (a taken seq is a lost flight), set end_seq. With finish false the
// fence stays in progress (no end_seq). It returns the old epoch and
// end_seq.
func (e *env) failover(finish bool) (int64, int64) {
	e.t.Helper()
	old, h, err := writepath.New(e.db).BeginFence(e.ctx, e.star)
	if err != nil {
		e.t.Fatal(err)
	}
	k := h
	for !e.put(old, k, e.slotBytes(old, k, nil)) {
		k++
	}
	for s := k + 1; s < k+int64(e.window); s++ {
		e.put(old, s, e.slotBytes(old, s, nil))
	}
	if finish {
		if err := writepath.New(e.db).EndFence(e.ctx, e.star, old, k+int64(e.window)); err != nil {
			e.t.Fatal(err)
		}
	}
	return old, k + int64(e.window)
}

// settle commits one catalog entry per stream covering all its absorbed,
// unsettled records (what a settle would do, minus the bytes), with its
// object in the standard bucket. It returns the keys it published.
func (e *env) settle(ids ...catalog.StreamID) []string {
	e.t.Helper()
	var keys []string
	for _, id := range ids {
		st, err := e.db.Streams().Stream(e.ctx, id)
		if err != nil {
			e.t.Fatal(err)
		}
		if st.NextRecord == st.SettledThrough {
			continue
		}
		first := max(st.SettledThrough, st.LowRecord)
		key := bundlefmt.SettledKey(st.Bucket, id, uint64(st.Epoch), uint64(first), 0)
		ent := catalog.Entry{Stream: id, Epoch: st.Epoch, FirstRecord: first, RecordCount: st.NextRecord - first,
			ObjectBytes: 1, FooterOffset: 1, FooterLength: 1}
		if err := e.store.PutIfAbsent(e.ctx, e.std, key, []byte("settled")); err != nil {
			e.t.Fatal(err)
		}
		if err := writepath.CommitSettle(e.ctx, e.db, e.fence, catalog.SettleCommit{Entry: ent, PrevRevision: -1, IntentID: publishIntent(e.t, e.db, e.fence.Star, key), ObjectKey: key}); err != nil {
			e.t.Fatal(err)
		}
		keys = append(keys, key)
	}
	return keys
}

// present reports, for each slot position of the star, in how many buckets
// of its class it exists (listing: the test's view, not trim's).
func (e *env) present() map[trim.Pos]int {
	e.t.Helper()
	out := map[trim.Pos]int{}
	for _, b := range e.buckets() {
		keys, err := keysUnder(e.ctx, e.store, b, "stars/"+e.star+"/chain/")
		if err != nil {
			e.t.Fatal(err)
		}
		for _, k := range keys {
			_, ep, seq, err := bundlefmt.ParseSlotKey(k)
			if err != nil {
				e.t.Fatal(err)
			}
			out[P(int64(ep), int64(seq))]++
		}
	}
	return out
}

func (e *env) cursor() (trim.Pos, bool) {
	e.t.Helper()
	st, err := e.db.Trim().TrimState(e.ctx, e.star)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.Cursor, st.HasCursor
}

// checkChain asserts that every slot before the cursor is gone from every
// bucket and every slot at or past it is in every bucket (want lists the
// slots that must remain).
func (e *env) checkChain(cursor trim.Pos, want ...trim.Pos) {
	e.t.Helper()
	got, ok := e.cursor()
	if !ok || got != cursor {
		e.t.Fatalf("cursor %s (row %v), want %s", got, ok, cursor)
	}
	have := e.present()
	for p, n := range have {
		if p.Less(cursor) {
			e.t.Errorf("slot %s is behind the cursor %s but still in %d bucket(s)", p, cursor, n)
		}
	}
	for _, p := range want {
		if have[p] != len(e.buckets()) {
			e.t.Errorf("slot %s at or past the cursor is in %d of %d buckets", p, have[p], len(e.buckets()))
		}
	}
	if len(have) != len(want) {
		e.t.Errorf("slots present: %v, want %v", have, want)
	}
}

// target is the publish target of a settled key.
func target(t testing.TB, key string) catalog.PublishTarget {
	t.Helper()
	tg, err := settle.Target(key)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

// publishIntent opens a publish intent on key for a test's own commit.
func publishIntent(t testing.TB, db *catalog.DB, star, key string) int64 {
	t.Helper()
	id, err := writepath.New(db).PublishIntent(context.Background(), star, key)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
