package settle_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/pendingobj"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// env is one integration environment: a fresh database and a real store
// (the file backend or versitygw) with a standard bucket and an express set.
type env struct {
	t       testing.TB
	ctx     context.Context
	db      *catalog.DB
	url     string
	store   objstore.Store
	std     string
	express []string
	pending *pendingobj.Store
	content sim.Content
}

// backend is one of the stores the tests run on (teststore), each test's
// with a standard bucket and an express set of two zones.
type backend struct {
	name string
	open func(t testing.TB) teststore.Backend
}

func backends() []backend {
	return []backend{
		{"file", func(t testing.TB) teststore.Backend { return teststore.File(t, teststore.Options{Zones: 2}) }},
		s3Backend("s3", "settle", nil, nil),
	}
}

// s3Backend is versitygw with a standard bucket and two zone buckets named
// after prefix, through rt when set (a fault-injecting or counting
// transport), the config tuned by tune when set (teststore.S3: per-part
// checksums and read-back, what the auditor's probe picks on this server).
func s3Backend(name, prefix string, rt http.RoundTripper, tune func(*objstore.S3Config)) backend {
	return backend{name, func(t testing.TB) teststore.Backend {
		return teststore.S3(t, teststore.Options{Zones: 2, Prefix: prefix, Transport: rt, Tune: tune})
	}}
}

func newEnv(t testing.TB, b backend, streams int, expressShare float64) (*env, sim.Fixture) {
	t.Helper()
	return newEnvContent(t, b, streams, expressShare, sim.DefaultContent(7))
}

// newEnvContent is newEnv with the stars' records made to the content
// profile.
func newEnvContent(t testing.TB, b backend, streams int, expressShare float64, content sim.Content) (*env, sim.Fixture) {
	t.Helper()
	return newEnvMigrated(t, b, streams, expressShare, content, func(ctx context.Context, db *catalog.DB) error {
		_, err := db.Migrate(ctx)
		return err
	})
}

// newEnvMigrated is newEnvContent with the database's schema made by
// migrate (the binary's, or an older one's).
func newEnvMigrated(t testing.TB, b backend, streams int, expressShare float64, content sim.Content,
	migrate func(context.Context, *catalog.DB) error) (*env, sim.Fixture) {
	t.Helper()
	ctx := context.Background()
	url := testenv.FreshDatabase(t)
	db, err := catalog.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	be := b.open(t)
	store, std, express := be.Store, be.Std, be.Express
	dir := filepath.Join(t.TempDir(), "pending")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	pending, err := pendingobj.New(dir, "s1", settle.PartFormatID)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: ctx, db: db, url: url, store: store, std: std, express: express, pending: pending, content: content}
	if streams == 0 { // the caller writes its own slots
		if err := writepath.New(db).CreateStar(ctx, "s1", catalog.ClassStandard, 2); err != nil {
			t.Fatal(err)
		}
		return e, sim.Fixture{}
	}
	fx, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", ExpressStar: "s1-x", Streams: streams, ExpressShare: expressShare,
		StreamBuckets: []string{"b0", "b1"}, FenceWindow: 2, Content: e.content})
	if err != nil {
		t.Fatal(err)
	}
	return e, fx
}

func (e *env) storage() sim.Storage {
	return sim.Storage{Store: e.store, Standard: e.std, Express: e.express}
}

func (e *env) write(star string, flights int64, faults sim.Faults, session uint64) {
	e.t.Helper()
	if _, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: star, Flights: flights, FlightBytes: 64 << 10,
		FlightInterval: time.Minute, AbsorbFlights: 3, Faults: faults, Session: session}); err != nil {
		e.t.Fatalf("write %s: %v", star, err)
	}
}

// topology is the storage topology over the env's store and buckets
// (teststore.Topology, what the auditor's wiring builds), with a zone
// health of its own.
func (e *env) topology() *objstore.Topology {
	e.t.Helper()
	return e.topologyOver(e.store)
}

// firstStream is the first stream of star (in ID order): the stream of a
// one-stream env.
func (e *env) firstStream(star string) catalog.Stream {
	e.t.Helper()
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, star)
	if err != nil || len(streams) == 0 {
		e.t.Fatalf("streams of %s: %v %v", star, streams, err)
	}
	return streams[0]
}

// topologyOver is the env's topology over store (a wrapper of e.store that
// counts what the settle step asks of it).
func (e *env) topologyOver(store objstore.Store) *objstore.Topology {
	e.t.Helper()
	return teststore.Topology(e.t, store, e.std, e.express, nil)
}

const (
	testCap    = 96 << 10
	testTarget = 24 << 10
)

// newSettler is settle.New for a test: the tunables that have no
// configuration key (the window bounds, the hot streams, the pending
// erasures a cycle reads) and the footer
// cache are at their defaults unless c sets them; New itself takes only a
// complete configuration.
func (e *env) newSettler(d settle.Deps, c settle.Config) *settle.Settler {
	e.t.Helper()
	if c.FooterCacheBytes == 0 {
		c.FooterCacheBytes = config.Defaults().SettleFooterCacheMiB << 20
	}
	if c.SlotReadBytes == 0 {
		c.SlotReadBytes = config.Defaults().SettleSlotReadMiB << 20
	}
	if c.TailCacheBytes == 0 {
		c.TailCacheBytes = config.Defaults().SettleTailCacheMiB << 20
	}
	if c.TailSpillDir == "" && c.TailSpillBytes == 0 { // spilled as the daemon spills, to a directory of the test's
		c.TailSpillDir, c.TailSpillBytes = e.t.TempDir(), config.Defaults().SettleTailSpillMiB<<20
	}
	if c.WindowRefs == 0 {
		c.WindowRefs = settle.DefaultWindowRefs
	}
	if c.WindowRecords == 0 {
		c.WindowRecords = settle.DefaultWindowRecords
	}
	if c.HotStreams == 0 {
		c.HotStreams = settle.DefaultHotStreams
	}
	if c.MaxPendingErasures == 0 {
		c.MaxPendingErasures = settle.DefaultMaxPendingErasures
	}
	switch {
	case c.BatchStreams == 0: // batched, as the daemon settles by default
		c.BatchStreams = int(config.Defaults().SettleBatchStreams)
	case c.BatchStreams < 0: // each stream alone
		c.BatchStreams = 0
	}
	s, err := settle.New(d, c)
	if err != nil {
		e.t.Fatal(err)
	}
	return s
}

func (e *env) settler(crash func(crashpoint.Point)) *settle.Settler {
	return e.newSettler(settle.Deps{DB: e.db.Settle(), Topology: e.topology(), Pending: e.pending, Crash: crash},
		settle.Config{CapBytes: testCap, TargetBytes: testTarget, MaxStreams: 10000, MaxBytes: 1 << 40, Concurrency: 3,
			ReapGrace: time.Hour})
}

// cycleNoFatal runs the settle step once under a fresh lease, returning
// every error (the lease's included).
func (e *env) cycleNoFatal(star string) (cycle.Counts, error) {
	return e.cycleWith(star, e.settler(nil))
}

// cycleWith runs s once for star under a fresh lease, returning every error.
func (e *env) cycleWith(star string, s *settle.Settler) (cycle.Counts, error) {
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, star, "test", "", time.Minute)
	if err != nil {
		return cycle.Counts{}, err
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	return s.Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"})
}

// cycle runs the settle step once for star under a fresh lease.
func (e *env) cycle(star string, s *settle.Settler) (cycle.Counts, error) {
	e.t.Helper()
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, star, "test", "", time.Minute)
	if err != nil {
		e.t.Fatal(err)
	}
	defer func() { _ = e.db.Leases().ReleaseLease(e.ctx, l.Fence) }()
	return s.Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"})
}

// checkSettled asserts the settle invariants for every stream:
// novasim check finds every record once from settled objects, entries tile
// [0, settled_through) with every entry but the last full, nothing is left
// unsettled and no due marker remains.
func (e *env) checkSettled(stars ...string) {
	e.t.Helper()
	rep, err := sim.Check(e.ctx, e.db, e.storage(), sim.CheckOptions{Stars: stars, SettledOnly: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() || rep.Checked == 0 {
		e.t.Fatalf("novasim check: %+v", rep)
	}
	for _, star := range stars {
		streams, err := e.db.Streams().StreamsOfStar(e.ctx, star)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, st := range streams {
			if st.SettledThrough != st.NextRecord {
				e.t.Errorf("stream %s: settled_through %d, next_record %d", st.ID, st.SettledThrough, st.NextRecord)
			}
			entries, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
			if err != nil {
				e.t.Fatal(err)
			}
			at := int64(0)
			meters := make([]int64, len(entries))
			firsts := make([]int64, len(entries))
			gapAfter := make([]bool, len(entries))
			for i, en := range entries {
				if en.FirstRecord != at {
					// only where retention dropped the records between
					if i == 0 || en.FirstRecord < at || en.FirstRecord > st.LowRecord {
						e.t.Fatalf("stream %s: entry %d starts at %d, want %d (low_record %d)", st.ID, i, en.FirstRecord, at, st.LowRecord)
					}
					gapAfter[i-1] = true
				}
				at = en.EndRecord()
				meters[i], firsts[i] = e.meter(st, en)
			}
			if at != st.SettledThrough {
				e.t.Errorf("stream %s: entries end at %d, settled_through %d", st.ID, at, st.SettledThrough)
			}
			for i := 0; i+1 < len(entries); i++ {
				// An erasure's rewrite keeps an object's record range with
				// less content: full when written, it may meter below the
				// cap now.
				ers, err := e.db.Erasures().ErasuresOf(e.ctx, st.ID, entries[i].FirstRecord, entries[i].EndRecord())
				if err != nil {
					e.t.Fatal(err)
				}
				if !gapAfter[i] && len(ers) == 0 && !settle.IsFull(meters[i], firsts[i+1], testCap) {
					e.t.Errorf("stream %s: entry %d (meter %d, next chunk %d) is not full", st.ID, i, meters[i], firsts[i+1])
				}
			}
		}
		marks, err := e.db.Streams().DueMarkers(e.ctx, star)
		if err != nil || len(marks) != 0 {
			e.t.Errorf("star %s: due markers left: %d %v", star, len(marks), err)
		}
	}
}

// meter reads a settled object's footer: its content meter and its first
// chunk's.
func (e *env) meter(st catalog.Stream, en catalog.Entry) (int64, int64) {
	key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))
	buf, size, err := e.store.GetRange(e.ctx, e.std, key, en.FooterOffset, en.FooterLength+bundlefmt.TrailerSize)
	if err != nil {
		e.t.Fatalf("read footer of %s: %v", key, err)
	}
	f, err := bundlefmt.OpenFooter(key, uint64(en.FooterOffset), buf, uint64(size), bundlefmt.SettledBase)
	if err != nil {
		e.t.Fatalf("open footer of %s: %v", key, err)
	}
	es, err := f.Entries()
	if err != nil {
		e.t.Fatal(err)
	}
	return settle.MeterAll(es), settle.Meter(&es[0])
}

func TestSettleEveryShape(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 24, 0.3)
			faults := sim.Faults{Failover: 0.03, Lost: 0.03, LostReply: 0.03}
			e.write("s1", 40, faults, 1)
			e.write("s1-x", 30, faults, 2)
			var total cycle.Counts
			for _, star := range []string{"s1", "s1-x"} {
				c, err := e.cycle(star, e.settler(nil))
				if err != nil {
					t.Fatalf("settle %s: %v", star, err)
				}
				total.Add(c)
			}
			if n := e.streamsWithData("s1", "s1-x"); total.StreamsSettled != n || total.ObjectsPublished <= n || total.StreamsQuarantined != 0 {
				t.Fatalf("counts: %+v for %d streams with records", total, n)
			}
			e.checkSettled("s1", "s1-x")
			// A second cycle with nothing new changes nothing.
			c, err := e.cycle("s1", e.settler(nil))
			if err != nil || c.ObjectsPublished != 0 {
				t.Fatalf("idle cycle: %+v %v", c, err)
			}
		})
	}
}

func TestSettleGrowsTailsByRevision(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 6, 0)
			for round := uint64(1); round <= 3; round++ {
				e.write("s1", 6, sim.Faults{}, round)
				if _, err := e.cycle("s1", e.settler(nil)); err != nil {
					t.Fatal(err)
				}
				e.checkSettled("s1")
			}
			reaps, err := e.db.Settle().Intents(e.ctx, "s1", "reap", 0)
			if err != nil {
				t.Fatal(err)
			}
			armed := map[string]int{}
			for _, r := range reaps {
				armed[r.ObjectKey]++
				if r.Due {
					t.Errorf("reap of %s due before its grace", r.ObjectKey)
				}
				// The superseded object still stands (reaped only after the grace).
				if _, err := e.store.Head(e.ctx, e.std, r.ObjectKey); err != nil {
					t.Errorf("superseded %s already gone: %v", r.ObjectKey, err)
				}
			}
			// Every revision below an entry's current one has exactly one
			// reap armed; the current revision none.
			streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			superseded := 0
			for _, st := range streams {
				entries, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
				if err != nil {
					t.Fatal(err)
				}
				for _, en := range entries {
					key := func(rev int32) string {
						return bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(rev))
					}
					if armed[key(en.Revision)] != 0 {
						t.Errorf("the current revision %s has a reap armed", key(en.Revision))
					}
					for rev := int32(0); rev < en.Revision; rev++ {
						superseded++
						if armed[key(rev)] != 1 {
							t.Errorf("superseded %s: %d reaps armed, want 1", key(rev), armed[key(rev)])
						}
					}
				}
			}
			if superseded == 0 {
				t.Fatal("no tail was rewritten at a new revision")
			}
			if superseded != len(reaps) {
				t.Errorf("%d reaps armed for %d superseded revisions", len(reaps), superseded)
			}
		})
	}
}

// crashAt makes a crash hook that ends the calling goroutine (as a process
// death ends it) the first time the named point is hit.
func crashAt(name crashpoint.Point, hit *int) func(crashpoint.Point) {
	return func(n crashpoint.Point) {
		if n == name {
			*hit++
			if *hit == 1 {
				runtime.Goexit()
			}
		}
	}
}

// crashedPublish writes a one-stream star, runs a settle cycle that dies at
// the crash point, and returns the one publish intent it left open.
func crashedPublish(t *testing.T, b backend, point crashpoint.Point) (*env, catalog.Intent) {
	t.Helper()
	e, _ := newEnv(t, b, 1, 0)
	e.write("s1", 8, sim.Faults{}, 1)
	hits := 0
	if _, err := e.cycle("s1", e.settler(crashAt(point, &hits))); err != nil {
		t.Fatal(err)
	}
	if hits != 1 {
		t.Fatalf("crash point %s hit %d times", point, hits)
	}
	open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0)
	if len(open) != 1 {
		t.Fatalf("open publish intents after the crash at %s: %+v", point, open)
	}
	return e, open[0]
}

func TestAdoptionAfterCompleteBeforeCommit(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, in := crashedPublish(t, b, settle.CrashAfterComplete)
			key := in.ObjectKey
			standing := readAll(t, e, key)
			// More traffic arrives before the restart: the plan for the
			// same key now covers more, so adoption covers fewer records
			// than planned and the rest goes to revision + 1.
			e.write("s1", 3, sim.Faults{}, 2)
			c, err := e.cycle("s1", e.settler(nil))
			if err != nil {
				t.Fatal(err)
			}
			if c.ObjectsAdopted != 1 {
				t.Fatalf("counts after restart: %+v", c)
			}
			if got := readAll(t, e, key); string(got) != string(standing) {
				t.Fatal("the standing object was replaced")
			}
			// The catalog describes the adopted object (or, when the extra
			// traffic made it the tail, a later revision of it, with the
			// adopted one's reap armed).
			k, err := bundlefmt.ParseSettledKey(key)
			if err != nil {
				t.Fatal(err)
			}
			var entry *catalog.Entry
			entries, _ := e.db.Streams().EntriesOfStream(e.ctx, k.Stream)
			for i := range entries {
				if uint64(entries[i].FirstRecord) == k.FirstRecord {
					entry = &entries[i]
				}
			}
			switch {
			case entry == nil:
				t.Fatalf("no catalog entry at record %d for the adopted %s", k.FirstRecord, key)
			case uint32(entry.Revision) < k.Revision:
				t.Fatalf("catalog entry at revision %d, adopted %s", entry.Revision, key)
			case uint32(entry.Revision) > k.Revision:
				reaps, _ := e.db.Settle().Intents(e.ctx, "s1", "reap", 0)
				armed := false
				for _, r := range reaps {
					armed = armed || r.ObjectKey == key
				}
				if !armed {
					t.Fatalf("adopted %s was superseded without its reap armed", key)
				}
			}
			if open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(open) != 0 {
				t.Fatalf("publish intents left: %+v", open)
			}
			e.checkSettled("s1")
		})
	}
}

// unrecordedUpload leaves an open multipart upload on key as a process
// that died between CreateMultipartUpload and recording its ID would.
func unrecordedUpload(t *testing.T, e *env, key string) string {
	t.Helper()
	const srcKey = "scratch/six-mib"
	src := make([]byte, 6<<20)
	if err := e.store.PutIfAbsent(e.ctx, e.std, srcKey, src); err != nil && !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	var id string
	died := errors.New("died")
	_, err := e.store.Assemble(e.ctx, objstore.AssembleRequest{Bucket: e.std, Key: key,
		Pieces: []objstore.Piece{{SrcBucket: e.std, SrcKey: srcKey, Len: int64(len(src))}, objstore.DataPiece([]byte("tail"))},
		Hooks: objstore.Hooks{
			UploadCreated: func(u string) error { id = u; return nil },
			PartDone:      func(int, bool) error { return died },
		}})
	if !errors.Is(err, died) || id == "" {
		t.Fatalf("leave an upload open on %s: %v (upload %q)", key, err, id)
	}
	return id
}

// TestUnrecordedUploadsAreAborted: a crash between creating an upload and
// recording its ID leaves an upload only a listing can find; the restart
// aborts it, for a live intent (reopened by the next publish) and for a
// stale one (abandoned by recovery).
func TestUnrecordedUploadsAreAborted(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, in := crashedPublish(t, b, settle.CrashAfterIntent)
			if in.UploadID != "" {
				t.Fatalf("an upload recorded before any was created: %+v", in)
			}
			live := in.ObjectKey
			lost := unrecordedUpload(t, e, live)

			// A stale intent (a key no settle can publish again) whose
			// upload was not recorded either.
			st := e.firstStream("s1")
			stale := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), 1<<40, 0)
			l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "test", "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := writepath.OpenIntent(e.ctx, e.db, l.Fence, target(t, stale), catalog.ClassStandard); err != nil {
				t.Fatal(err)
			}
			if err := e.db.Leases().ReleaseLease(e.ctx, l.Fence); err != nil {
				t.Fatal(err)
			}
			lostStale := unrecordedUpload(t, e, stale)

			if _, err := e.cycle("s1", e.settler(nil)); err != nil {
				t.Fatal(err)
			}
			for key, id := range map[string]string{live: lost, stale: lostStale} {
				ids, err := e.store.ListAssemblies(e.ctx, e.std, key)
				if err != nil || len(ids) != 0 {
					t.Errorf("uploads open on %s after the restart: %v %v (the lost one was %s)", key, ids, err, id)
				}
			}
			e.checkSettled("s1")
			if open, _ := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); len(open) != 0 {
				t.Fatalf("publish intents left: %+v", open)
			}
		})
	}
}

// TestRetentionGapBehindTheTail: the write path raises low_record into the
// middle of an unsettled ref, past its first chunk, while the stream's
// standing tail ends at settled_through. The dead chunks are skipped, the
// tail is not extended across the gap (a new run starts at the first live
// chunk), and every live record settles.
func TestRetentionGapBehindTheTail(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 2, sim.Faults{}, 1)
			if _, err := e.cycle("s1", e.settler(nil)); err != nil {
				t.Fatal(err)
			}
			e.write("s1", 6, sim.Faults{}, 2) // absorbed three flights to a ref
			st := e.firstStream("s1")
			if ens, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID); err != nil || len(ens) == 0 {
				t.Fatalf("no standing tail: %v", err)
			}
			refs, err := writepath.New(e.db).RefsOfStream(e.ctx, st.ID)
			if err != nil {
				t.Fatal(err)
			}
			var ref *catalog.SpanRef
			for i := range refs {
				if ref == nil && refs[i].FirstRecord >= st.SettledThrough && len(refs[i].Slots) >= 2 {
					ref = &refs[i]
				}
			}
			if ref == nil {
				t.Fatalf("no unsettled multi-slot ref: %+v", refs)
			}
			// low_record one past the end of the ref's first chunk
			sl := ref.Slots[0]
			key := bundlefmt.SlotKey("s1", uint64(sl.Epoch), uint64(sl.Seq))
			buf, size, err := e.store.GetRange(e.ctx, e.std, key, sl.FooterOffset, sl.FooterLength+bundlefmt.TrailerSize)
			if err != nil {
				t.Fatal(err)
			}
			f, err := bundlefmt.OpenFooter(key, uint64(sl.FooterOffset), buf, uint64(size), bundlefmt.TransitBase)
			if err != nil {
				t.Fatal(err)
			}
			i, ok := f.Find(st.ID, uint64(ref.FirstRecord))
			if !ok {
				t.Fatal("first chunk not found")
			}
			first, err := f.Entry(i)
			if err != nil {
				t.Fatal(err)
			}
			low := int64(first.EndRecord()) + 1
			if err := writepath.New(e.db).RaiseLowRecord(e.ctx, st.ID, low); err != nil {
				t.Fatal(err)
			}
			c, err := e.cycle("s1", e.settler(nil))
			if err != nil {
				t.Fatal(err)
			}
			if c.StreamsQuarantined != 0 || c.ObjectsPublished == 0 {
				t.Fatalf("counts: %+v", c)
			}
			e.checkSettled("s1")
			entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
			gap := false
			for j := 1; j < len(entries); j++ {
				if entries[j].FirstRecord != entries[j-1].EndRecord() {
					gap = entries[j-1].EndRecord() == st.SettledThrough && entries[j].FirstRecord == int64(first.EndRecord())
				}
			}
			if !gap {
				t.Fatalf("want a new run at %d after the old tail ending at %d: %+v", first.EndRecord(), st.SettledThrough, entries)
			}
		})
	}
}

func readAll(t testing.TB, e *env, key string) []byte {
	t.Helper()
	a, err := e.store.Head(e.ctx, e.std, key)
	if err != nil {
		t.Fatalf("head %s: %v", key, err)
	}
	b, _, err := e.store.GetRange(e.ctx, e.std, key, 0, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestStaleTokenStopsTheCycle(t *testing.T) {
	e, _ := newEnv(t, backends()[0], 4, 0)
	e.write("s1", 6, sim.Faults{}, 1)
	l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "old", "", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// Another holder takes the lease (the old one expired, say).
	if err := e.db.Leases().ReleaseLease(e.ctx, l.Fence); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "new", "", time.Minute); err != nil {
		t.Fatal(err)
	}
	before := listKeys(e)
	_, err = e.settler(nil).Run(e.ctx, l.Fence, cycle.Options{})
	if !errors.Is(err, catalog.ErrStaleToken) {
		t.Fatalf("run with a stale token: %v", err)
	}
	if after := listKeys(e); len(after) != len(before) {
		t.Fatalf("a stale leader wrote objects: %d keys before, %d after", len(before), len(after))
	}
	streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	for _, st := range streams {
		if entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID); len(entries) != 0 || st.SettledThrough != 0 {
			t.Fatalf("stream %s changed under a stale token", st.ID)
		}
	}
}

// TestBadInputQuarantinesOnlyTheAffectedStream damages one stream's data in
// each of the ways settle's bad-input contract names and checks that exactly that stream is
// quarantined with the right class while every other stream settles and
// nothing is deleted.
// TestLeaseLostMidCycle: another holder takes the lease while settle is
// between completing objects and committing them. Every commit is refused
// (ErrStaleToken), the catalog and streams are untouched, and the new
// leader adopts the standing objects onto the same keys and converges.
func TestLeaseLostMidCycle(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 6, 0)
			e.write("s1", 8, sim.Faults{}, 1)
			old, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "old", "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			taken := false
			steal := func(point crashpoint.Point) {
				if point != settle.CrashBeforeCommit {
					return
				}
				mu.Lock()
				defer mu.Unlock()
				if taken {
					return
				}
				taken = true
				if err := e.db.Leases().ReleaseLease(e.ctx, old.Fence); err != nil {
					t.Error(err)
				}
				if _, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "new", "", time.Minute); err != nil {
					t.Error(err)
				}
			}
			_, err = e.settler(steal).Run(e.ctx, old.Fence, cycle.Options{})
			if !taken || !errors.Is(err, catalog.ErrStaleToken) {
				t.Fatalf("lease taken %v; run: %v, want ErrStaleToken", taken, err)
			}
			streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			for _, st := range streams {
				if entries, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID); len(entries) != 0 || st.SettledThrough != 0 {
					t.Fatalf("stream %s committed under a stale token: %d entries, settled %d", st.ID, len(entries), st.SettledThrough)
				}
			}
			standing := contents(e)
			// The new leader (its lease is held; release it so the test's
			// cycle helper can take the star) converges onto the same keys.
			newer, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "new", "", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			c, err := e.settler(nil).Run(e.ctx, newer.Fence, cycle.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if c.ObjectsAdopted == 0 {
				t.Fatalf("the new leader adopted nothing: %+v", c)
			}
			after := contents(e)
			for k, crc := range standing {
				if after[k] != crc {
					t.Errorf("%s was replaced or deleted", k)
				}
			}
			e.checkSettled("s1")
		})
	}
}

func TestBadInputQuarantinesOnlyTheAffectedStream(t *testing.T) {
	cases := []struct {
		name   string
		class  string
		damage func(e *env, st catalog.Stream, ref catalog.SpanRef, key string)
	}{
		{"flipped byte in a chunk", cycle.ClassChecksum, func(e *env, st catalog.Stream, ref catalog.SpanRef, key string) {
			obj := readSlot(e, key)
			f, _ := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
			i, _ := f.Find(st.ID, uint64(ref.FirstRecord))
			obj[f.DataOffset(i)] ^= 0x40
			replaceSlot(e, key, obj)
		}},
		{"missing slot", cycle.ClassMissing, func(e *env, _ catalog.Stream, _ catalog.SpanRef, key string) {
			if err := e.store.Delete(e.ctx, e.std, []string{key}); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"slot of version 2", cycle.ClassUnsupported, func(e *env, _ catalog.Stream, _ catalog.SpanRef, key string) {
			obj := readSlot(e, key)
			obj[len(obj)-bundlefmt.TrailerSize+4] = 2 // trailer format version
			replaceSlot(e, key, obj)
		}},
		{"truncated slot", cycle.ClassCorrupt, func(e *env, _ catalog.Stream, _ catalog.SpanRef, key string) {
			obj := readSlot(e, key)
			replaceSlot(e, key, obj[:len(obj)-7])
		}},
		{"wrong entry CRC", cycle.ClassChecksum, func(e *env, st catalog.Stream, ref catalog.SpanRef, key string) {
			obj := readSlot(e, key)
			f, _ := bundlefmt.OpenObjectFooter(key, obj, bundlefmt.EnvelopeSize)
			i, _ := f.Find(st.ID, uint64(ref.FirstRecord))
			obj[f.Row(i).EntryOffset+bundlefmt.EntryFixed] ^= 0x01 // the first stored-record length
			replaceSlot(e, key, obj)
		}},
		{"invalid standing object at the key", cycle.ClassAdoption, func(e *env, st catalog.Stream, _ catalog.SpanRef, _ string) {
			key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), 0, 0)
			if err := e.store.PutIfAbsent(e.ctx, e.std, key, []byte("not a settled bundle of this stream, and never replaced")); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"envelope seq disagrees with the key", cycle.ClassCorrupt, func(e *env, _ catalog.Stream, _ catalog.SpanRef, key string) {
			obj := readSlot(e, key)
			obj[16]++ // envelope seq, then the envelope CRC made right again: a slot written under the wrong key
			binary.LittleEndian.PutUint32(obj[56:], bundlefmt.CRC32C(obj[:56]))
			replaceSlot(e, key, obj)
		}},
		{"envelope epoch disagrees with the key", cycle.ClassCorrupt, func(e *env, _ catalog.Stream, _ catalog.SpanRef, key string) {
			obj := readSlot(e, key)
			obj[8]++ // envelope slot epoch (CRC made right again)
			binary.LittleEndian.PutUint32(obj[56:], bundlefmt.CRC32C(obj[:56]))
			replaceSlot(e, key, obj)
		}},
		{"overlapping refs", cycle.ClassTiling, func(e *env, st catalog.Stream, ref catalog.SpanRef, _ string) {
			if err := writepath.New(e.db).DuplicateRef(e.ctx, st.ID, ref.FirstRecord, ref.FirstRecord+1); err != nil {
				e.t.Fatal(err)
			}
		}},
		{"wrong footer window in a ref", cycle.ClassCorrupt, func(e *env, st catalog.Stream, ref catalog.SpanRef, _ string) {
			if err := writepath.New(e.db).ShiftRefWindow(e.ctx, st.ID, ref.FirstRecord, 8); err != nil {
				e.t.Fatal(err)
			}
		}},
	}
	for _, b := range backends() {
		for _, tc := range cases {
			t.Run(b.name+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				badInputCase(t, b, tc.name, tc.class, tc.damage)
			})
		}
	}
}

// badInputCase damages one slot or ref of a fresh star as the case says,
// runs a settle cycle, and checks the outcome is scoped: exactly the
// affected streams quarantined with the class (the damaged slot named),
// every other stream settled, every pre-existing object kept as it was.
func badInputCase(t *testing.T, b backend, name, class string, damage func(e *env, st catalog.Stream, ref catalog.SpanRef, key string)) {
	tc := struct {
		name, class string
		damage      func(e *env, st catalog.Stream, ref catalog.SpanRef, key string)
	}{name, class, damage}
	e, _ := newEnv(t, b, 8, 0)
	e.write("s1", 10, sim.Faults{}, 1)
	streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	// The victim: a stream with a ref of its own slot.
	var victim catalog.Stream
	var ref catalog.SpanRef
	for _, st := range streams {
		refs, _ := writepath.New(e.db).RefsOfStream(e.ctx, st.ID)
		if len(refs) > 0 {
			victim, ref = st, refs[0]
			break
		}
	}
	key := bundlefmt.SlotKey("s1", uint64(ref.Slots[0].Epoch), uint64(ref.Slots[0].Seq))
	// Other streams in the same slot are damaged by a missing or
	// version-2 slot too; the test expects exactly the streams whose
	// refs name the slot (or, for a flipped chunk or a bad ref, only
	// the victim).
	affected := map[catalog.StreamID]bool{victim.ID: true}
	if tc.class == cycle.ClassMissing || tc.class == cycle.ClassUnsupported || tc.name == "truncated slot" ||
		strings.HasPrefix(tc.name, "envelope") {
		for _, st := range streams {
			refs, _ := writepath.New(e.db).RefsOfStream(e.ctx, st.ID)
			for _, r := range refs {
				for _, s := range r.Slots {
					if s.Epoch == ref.Slots[0].Epoch && s.Seq == ref.Slots[0].Seq {
						affected[st.ID] = true
					}
				}
			}
		}
	}
	tc.damage(e, victim, ref, key)
	before := contents(e)
	c, err := e.cycle("s1", e.settler(nil))
	if err != nil {
		t.Fatal(err)
	}
	q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
	if int64(len(q)) != int64(len(affected)) || c.StreamsQuarantined != int64(len(affected)) {
		t.Fatalf("quarantined %d streams (%+v), want %d", len(q), q, len(affected))
	}
	for _, row := range q {
		if !affected[*row.Stream] || row.ErrorClass != tc.class {
			t.Fatalf("quarantine row %+v, want class %s for an affected stream", row, tc.class)
		}
		if row.Reason == "" {
			t.Errorf("quarantine row %+v has no reason", row)
		}
		// a damaged slot is named by its key (a bad standing object
		// or overlapping refs are not a slot's fault)
		slotFault := tc.name != "overlapping refs" && tc.name != "invalid standing object at the key"
		if slotFault && row.SlotKey != key {
			t.Errorf("quarantine row %+v does not name the slot %s", row, key)
		}
	}
	if want := e.streamsWithData("s1") - int64(len(affected)); c.StreamsSettled != want {
		t.Fatalf("settled %d streams, want %d", c.StreamsSettled, want)
	}
	after := contents(e)
	for k, crc := range before {
		if got, ok := after[k]; !ok || got != crc {
			t.Errorf("%s was deleted or replaced (present %v)", k, ok)
		}
	}
	for _, st := range streams {
		got, _ := e.db.Streams().Stream(e.ctx, st.ID)
		if affected[st.ID] != (got.SettledThrough < got.NextRecord) {
			t.Errorf("stream %s (affected %v): settled %d of %d", st.ID, affected[st.ID], got.SettledThrough, got.NextRecord)
		}
	}
}

// streamsWithData counts the streams of the stars that have records.
func (e *env) streamsWithData(stars ...string) int64 {
	n := int64(0)
	for _, star := range stars {
		streams, err := e.db.Streams().StreamsOfStar(e.ctx, star)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, st := range streams {
			if st.NextRecord > 0 {
				n++
			}
		}
	}
	return n
}

func readSlot(e *env, key string) []byte { return readAll(e.t, e, key) }

// replaceSlot swaps a slot's bytes (test damage only: delete, then put).
func replaceSlot(e *env, key string, obj []byte) {
	if err := e.store.Delete(e.ctx, e.std, []string{key}); err != nil {
		e.t.Fatal(err)
	}
	if err := e.store.PutIfAbsent(e.ctx, e.std, key, obj); err != nil {
		e.t.Fatal(err)
	}
}

// contents maps every key of the standard bucket to its bytes' CRC.
func contents(e *env) map[string]uint32 {
	out := map[string]uint32{}
	for k := range listKeys(e) {
		out[k] = bundlefmt.CRC32C(readAll(e.t, e, k))
	}
	return out
}

func listKeys(e *env) map[string]bool {
	keys := map[string]bool{}
	if err := e.store.List(e.ctx, e.std, "", func(o objstore.ObjectInfo) error { keys[o.Key] = true; return nil }); err != nil {
		e.t.Fatal(fmt.Errorf("list: %w", err))
	}
	return keys
}

// TestOverlappingCatalogHalts: a catalog that covers a record twice where
// settle writes, at the stream's last entry or the one before it, halts the
// cycle before anything is written or deleted. (An overlap further back is
// `auditor verify`'s: the cycle's check reads only the last entries.)
func TestOverlappingCatalogHalts(t *testing.T) {
	for _, where := range []string{"tail", "before-tail"} {
		t.Run(where, func(t *testing.T) {
			e, _ := newEnv(t, backends()[0], 3, 0)
			e.write("s1", 12, sim.Faults{}, 1)
			if _, err := e.cycle("s1", e.settler(nil)); err != nil {
				t.Fatal(err)
			}
			e.write("s1", 6, sim.Faults{}, 2)
			var victim catalog.Stream
			var entries []catalog.Entry
			streams, _ := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			for _, st := range streams {
				ents, _ := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
				if st.NextRecord > st.SettledThrough && len(ents) > len(entries) {
					victim, entries = st, ents
				}
			}
			if len(entries) < 2 {
				t.Fatalf("no due stream with two catalog entries: %+v", streams)
			}
			stretch := entries[len(entries)-1]
			if where == "before-tail" {
				stretch = entries[len(entries)-2]
			}
			if err := writepath.New(e.db).StretchEntry(e.ctx, victim.ID, stretch.FirstRecord, 1); err != nil {
				t.Fatal(err)
			}
			before := listKeys(e)
			settledBefore := victim.SettledThrough
			_, err := e.cycle("s1", e.settler(nil))
			if !cycle.IsHalt(err) {
				t.Fatalf("overlapping catalog: %v, want a halt", err)
			}
			if !strings.Contains(err.Error(), victim.ID.String()) {
				t.Errorf("the halt does not name the stream: %v", err)
			}
			after := listKeys(e)
			for k := range before {
				if !after[k] {
					t.Errorf("%s was deleted", k)
				}
			}
			for k := range after {
				if !before[k] {
					t.Errorf("%s was written by a halted cycle", k)
				}
			}
			streams, _ = e.db.Streams().StreamsOfStar(e.ctx, "s1")
			for _, st := range streams {
				if st.ID == victim.ID && st.SettledThrough != settledBefore {
					t.Errorf("settled_through moved from %d to %d", settledBefore, st.SettledThrough)
				}
			}
		})
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
