package main

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/faultstore"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/settle"
)

// The explorer's environment (docs/architecture.md#the-fault-explorer).
const (
	envExploreDuration = "NOVA_EXPLORE_DURATION" // a long run: episodes from fresh seeds for this long (make explore)
	envExploreBackends = "NOVA_EXPLORE_BACKENDS" // file, s3 or file,s3 (the default)
	envExploreSeed     = "NOVA_EXPLORE_SEED"     // replay one episode
	envExploreSchedule = "NOVA_EXPLORE_SCHEDULE" // with the seed: its recorded faults (a JSON file)
	envExploreMutation = "NOVA_EXPLORE_MUTATION" // a rule switched off: late-delete, unfenced-commit, adoption-bytes
	envExploreOut      = "NOVA_EXPLORE_OUT"      // where schedules are written (default: the temporary directory)
	envExploreStart    = "NOVA_EXPLORE_START"    // the first seed of a long run (default: drawn and printed)
	envExploreParallel = "NOVA_EXPLORE_PARALLEL" // episodes at a time (default 2)
)

// exploreSeeds are the seeds make test runs on each backend: a fixed,
// short set (about a minute on two cores).
var exploreSeeds = map[string][]uint64{"file": {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, "s3": {1, 2, 17}}

// mutation is a rule switched off on purpose.
type mutation struct {
	name    string
	catalog catalog.Mutations
	settle  settle.Mutations
}

var mutations = map[string]mutation{
	"late-delete":     {name: "late-delete", catalog: catalog.Mutations{ReusePlannedRevision: true}},
	"unfenced-commit": {name: "unfenced-commit", catalog: catalog.Mutations{UnfencedCommits: true}},
	"adoption-bytes":  {name: "adoption-bytes", settle: settle.Mutations{SkipAdoptionBytes: true}},
	// The review's false quarantine: the erasure rewrite takes up settle's
	// abandoned tail rewrite of the entry instead of burying it.
	"erase-tail-rewrite": {name: "erase-tail-rewrite", settle: settle.Mutations{EraseTakesUpTailRewrite: true}},
}

// explorer runs episodes against one database and gathers their figures.
type explorer struct {
	t      *testing.T
	db     *catalog.DB
	url    string
	pgAddr string
	tmpl   string // a migrated database with no connection: replays run on clones of it
	mut    mutation
	stuck  time.Duration // a cycle still running after this is stuck
	trace  bool          // log each step of the script as it runs
	tmp    string        // where episodes keep their files
	out    string

	mu               sync.Mutex // the figures below
	wall             time.Duration
	episodes, failed int
	faults           map[faultstore.Kind]int
	requests         int64
	hits             map[crashpoint.Point]int
	crashed, paused  map[crashpoint.Point]int
	busy             time.Duration
	rewinds          int // episodes whose metastore was restored from a backup
	reconciles       int // reconcile --apply runs in them
	refusals         int // rewinds whose cycles refused to run (the store held a confirmed marker above the restored mark)
	began            time.Time
	firstFind        string
	found            []string // seeds that failed
	replays          []string // replay fidelity, one line per measured replay
}

// rate is the seed's fault rate: a share of the episodes run with none.
func (x *explorer) rate(seed uint64) float64 {
	return []float64{0, 0.03, 0.08, 0.15}[rand.New(rand.NewPCG(seed, 0x72617465)).IntN(4)]
}

// TestExplore is the seeded fault explorer: many short episodes, each a
// script drawn from its seed (novasim traffic with failovers, two or three
// in-process leaders built by the production wiring, pauses, crashes,
// lease expiries, retention, erasures, triggers) over a store that injects
// faults, each checked by the oracle once quiesced. By default a fixed
// set of seeds; NOVA_EXPLORE_DURATION runs fresh seeds for that long
// (make explore); NOVA_EXPLORE_SEED (and NOVA_EXPLORE_SCHEDULE) replays
// one; NOVA_EXPLORE_MUTATION switches a rule off, and the test then passes
// only when an episode fails.
func TestExplore(t *testing.T) {
	if testing.Short() {
		t.Skip("the explorer runs episodes against real services")
	}
	x := newExplorer(t)
	backends := strings.Split(envOr(envExploreBackends, "file,s3"), ",")
	if slices.Contains(backends, "s3") {
		b := teststore.S3(t, teststore.Options{Prefix: "xprobe"})
		for _, kv := range b.Env() {
			k, v, _ := strings.Cut(kv, "=")
			t.Setenv(k, v)
		}
	}
	if s := os.Getenv(envExploreSeed); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", envExploreSeed, s, err)
		}
		var sched []faultstore.Decision
		if f := os.Getenv(envExploreSchedule); f != "" {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &sched); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
		began := time.Now()
		ep := x.episode(backends[0], seed, sched, false)
		x.wall = time.Since(began)
		if sched != nil {
			m, n := ep.inj.Matched()
			t.Logf("replayed %d of the schedule's %d faults at their requests", m, n)
		}
		x.verdict(ep, backends[0])
		x.report()
		return
	}
	par, err := strconv.Atoi(envOr(envExploreParallel, "2"))
	if err != nil || par < 1 {
		t.Fatalf("%s: %q is not a positive count", envExploreParallel, os.Getenv(envExploreParallel))
	}
	if d := os.Getenv(envExploreDuration); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("%s=%q: %v", envExploreDuration, d, err)
		}
		start := rand.Uint64() >> 16
		if s := os.Getenv(envExploreStart); s != "" {
			if start, err = strconv.ParseUint(s, 10, 64); err != nil {
				t.Fatalf("%s=%q: %v", envExploreStart, s, err)
			}
		}
		t.Logf("long run: %s over %v from seed %d, %d episodes at a time", dur, backends, start, par)
		var next atomic.Uint64
		next.Store(start)
		for _, b := range backends {
			until := time.Now().Add(dur / time.Duration(len(backends)))
			x.parallel(b, par, func() (uint64, bool) {
				if !time.Now().Before(until) || (x.mut.name != "" && x.foundCount() >= 3) {
					return 0, false
				}
				return next.Add(1) - 1, true
			})
		}
	} else {
		for _, b := range backends {
			var i atomic.Int64
			seeds := exploreSeeds[b]
			x.parallel(b, par, func() (uint64, bool) {
				n := i.Add(1) - 1
				if n >= int64(len(seeds)) {
					return 0, false
				}
				return seeds[n], true
			})
		}
	}
	x.report()
}

// parallel runs episodes of the seeds next gives, par at a time, and
// measures one replay in 25.
func (x *explorer) parallel(backend string, par int, next func() (uint64, bool)) {
	began := time.Now()
	var wg sync.WaitGroup
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed, ok := next()
				if !ok {
					return
				}
				ep := x.episode(backend, seed, nil, false)
				x.verdict(ep, backend)
				if x.mut.name == "" && x.count()%25 == 10 {
					x.measureReplay(ep, backend)
				}
			}
		}()
	}
	wg.Wait()
	x.mu.Lock()
	x.wall += time.Since(began)
	x.mu.Unlock()
}

func (x *explorer) count() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.episodes
}

func (x *explorer) foundCount() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.found)
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func newExplorer(t *testing.T) *explorer {
	db, u := testenv.MigratedDB(t)
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	// The replays' template: migrated once, never connected to.
	tdb, turl := testenv.MigratedDB(t)
	tdb.Close()
	x := &explorer{t: t, began: time.Now(), trace: os.Getenv("NOVA_EXPLORE_TRACE") != "", db: db, url: u, pgAddr: pu.Host, tmpl: turl, stuck: 2 * time.Minute,
		out:    envOr(envExploreOut, filepath.Join(os.TempDir(), "nova-explore")),
		faults: map[faultstore.Kind]int{}, hits: map[crashpoint.Point]int{},
		crashed: map[crashpoint.Point]int{}, paused: map[crashpoint.Point]int{}}
	if m := os.Getenv(envExploreMutation); m != "" {
		mu, ok := mutations[m]
		if !ok {
			t.Fatalf("%s=%q: not one of late-delete, unfenced-commit, adoption-bytes", envExploreMutation, m)
		}
		x.mut = mu
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		x.tmp = "/dev/shm"
	}
	if err := os.MkdirAll(x.out, 0o755); err != nil {
		t.Fatal(err)
	}
	return x
}

// episode runs one episode: the seed's script, with the faults drawn from
// the seed, or exactly those of sched when it is not nil or replay is
// set. A replay (of an episode this process ran) runs on a fresh clone of
// the migrated database, so the star's name, and every key, is the first
// run's, and is left out of the figures.
func (x *explorer) episode(backend string, seed uint64, sched []faultstore.Decision, replay bool) *episode {
	t := x.t
	t.Helper()
	db, u := x.db, x.url
	if replay || rewinds(seed) {
		// A replay, or an episode that rewinds its metastore (its backup
		// must hold its star alone), runs on a database of its own.
		var drop func()
		u, drop = testenv.CloneDatabaseDroppable(t, x.tmpl)
		defer drop()
		rdb, err := catalog.Open(t.Context(), u)
		if err != nil {
			t.Fatal(err)
		}
		defer rdb.Close()
		db = rdb
	}
	// On tmpfs when there is one: the file store and the sidecars fsync
	// every object, which on a shared disk costs more than the episode.
	dir, err := os.MkdirTemp(x.tmp, "nova-explore-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	var b teststore.Backend
	if backend == "file" {
		b = teststore.File(t, teststore.Options{Root: filepath.Join(dir, "store")})
	} else {
		b = teststore.S3(t, teststore.Options{Prefix: "xep"})
	}
	r := rand.New(rand.NewPCG(seed, 0x6570697364)) // "episd"
	ep := &episode{x: x, db: db, url: u, seed: seed, rnd: r, star: fmt.Sprintf("x%x-%s", seed, backend), b: b, dir: dir, mut: x.mut,
		over: make(chan struct{}), began: time.Now(), damaged: map[catalog.StreamID]bool{}, damagedKeys: map[string]bool{}, hits: map[crashpoint.Point]int{}}
	ep.batch = []int64{0, 64}[r.IntN(2)]
	ep.reapBatch = []int64{1, 3, 1000}[r.IntN(3)]
	// Now and then on S3, a round writes objects past S3's 5 MiB part
	// minimum under a cap above it: the assemblies gather and stage parts.
	ep.big = backend != "file" && r.IntN(4) == 0
	if replay || sched != nil {
		ep.inj = faultstore.Replay(sched)
	} else {
		ep.inj = faultstore.New(faultstore.Config{Seed: seed, Rate: x.rate(seed), LatePutPrefix: settledRoot})
	}
	began := time.Now()
	ep.run(t)
	took := time.Since(began)
	if !replay {
		x.mu.Lock()
		defer x.mu.Unlock()
		x.episodes++
		x.busy += took
		if ep.restored {
			x.rewinds++
		}
		x.reconciles += ep.reconciles
		if ep.refused {
			x.refusals++
		}
		for k, n := range ep.inj.Counts() {
			x.faults[k] += n
		}
		x.requests += ep.inj.Requests()
		for p, n := range ep.hits {
			x.hits[p] += n
		}
		for _, p := range ep.crashed {
			x.crashed[p]++
		}
		for _, p := range ep.paused {
			x.paused[p]++
		}
	}
	rw := ""
	if ep.restored {
		rw = fmt.Sprintf(", rewound (refused %v, %d reconciles)", ep.refused, ep.reconciles)
	}
	t.Logf("episode %s seed %d: %s, %d requests, %d faults, crashes %v, pauses %v%s: %s",
		backend, seed, took.Round(time.Millisecond), ep.inj.Requests(), len(ep.inj.Decisions()), ep.crashed, ep.paused, rw, outcome(ep))
	return ep
}

func outcome(ep *episode) string {
	if len(ep.failures) == 0 {
		return "ok"
	}
	return "FAILED"
}

// verdict reports a failed episode: its seed, its script, what failed,
// the command that replays it with its recorded faults, and the smallest
// schedule that still fails.
func (x *explorer) verdict(ep *episode, backend string) {
	t := x.t
	if len(ep.failures) == 0 {
		return
	}
	x.mu.Lock()
	x.failed++
	x.found = append(x.found, fmt.Sprintf("%s:%d", backend, ep.seed))
	first := len(x.found) == 1
	if first {
		x.firstFind = fmt.Sprintf("first failure after %d episodes, %s into the run", x.episodes, time.Since(x.began).Round(time.Second))
	}
	x.mu.Unlock()
	sched := ep.inj.Decisions()
	file := x.writeSchedule(backend, ep.seed, "", sched)
	msg := fmt.Sprintf("episode seed %d on %s failed:\n  %s\nscript:\n  %s\nreplay: %s",
		ep.seed, backend, strings.Join(ep.failures, "\n  "), strings.Join(ep.script, "\n  "), x.command(backend, ep.seed, file))
	if x.mut.name != "" {
		t.Log(msg)
	} else {
		t.Error(msg)
	}
	if os.Getenv(envExploreSeed) != "" || !first {
		return // shrink the first failure of a run only
	}
	small, ok := x.shrink(backend, ep.seed, sched)
	if !ok {
		return
	}
	sf := x.writeSchedule(backend, ep.seed, "-min", small)
	t.Logf("shrunk seed %d on %s from %d faults to %d still failing: %v\nreplay: %s",
		ep.seed, backend, len(sched), len(small), small, x.command(backend, ep.seed, sf))
}

func (x *explorer) command(backend string, seed uint64, schedule string) string {
	mut := ""
	if x.mut.name != "" {
		mut = envExploreMutation + "=" + x.mut.name + " "
	}
	return fmt.Sprintf("%s%s=%d %s=%s %s=%s scripts/test.sh -run '^TestExplore$' -v ./cmd/auditor",
		mut, envExploreSeed, seed, envExploreSchedule, schedule, envExploreBackends, backend)
}

func (x *explorer) writeSchedule(backend string, seed uint64, suffix string, sched []faultstore.Decision) string {
	b, err := json.MarshalIndent(sched, "", " ")
	if err != nil {
		x.t.Fatal(err)
	}
	f := filepath.Join(x.out, fmt.Sprintf("%s-%d%s.json", backend, seed, suffix))
	if err := os.WriteFile(f, b, 0o644); err != nil {
		x.t.Fatal(err)
	}
	return f
}

// shrink replays the seed with its faults removed one by one, keeping each
// removal after which the episode still fails, and returns what is left.
// Replays are capped (each is an episode). False: the failure did not
// come back when replayed with its faults, so nothing was shrunk.
func (x *explorer) shrink(backend string, seed uint64, sched []faultstore.Decision) ([]faultstore.Decision, bool) {
	if ep := x.episode(backend, seed, nil, true); len(ep.failures) > 0 {
		x.t.Logf("seed %d fails with no fault at all", seed)
		return nil, true
	}
	if ep := x.episode(backend, seed, sched, true); len(ep.failures) == 0 {
		x.t.Logf("seed %d did not fail again when replayed with its %d faults: not shrunk", seed, len(sched))
		return sched, false
	}
	for i, tries := 0, 0; i < len(sched) && tries < 12; tries++ {
		less := slices.Delete(slices.Clone(sched), i, i+1)
		if ep := x.episode(backend, seed, less, true); len(ep.failures) > 0 {
			sched = less
			continue
		}
		i++
	}
	return sched, true
}

// measureReplay replays an episode with its recorded faults and notes how
// close the replay came: the share of the schedule's faults that found
// their request, and whether the script and the verdict came out the same.
func (x *explorer) measureReplay(ep *episode, backend string) {
	sched := ep.inj.Decisions()
	re := x.episode(backend, ep.seed, sched, true)
	m, n := re.inj.Matched()
	line := fmt.Sprintf("seed %d: %d of %d faults matched, requests %d vs %d, same script %v, same verdict %v",
		ep.seed, m, n, re.inj.Requests(), ep.inj.Requests(), slices.Equal(re.script, ep.script), outcome(re) == outcome(ep))
	x.mu.Lock()
	x.replays = append(x.replays, line)
	x.mu.Unlock()
	x.t.Log("replay " + line)
}

// report prints the run's figures: episodes, faults by kind, points
// reached of the total, failures; the replays measured.
func (x *explorer) report() {
	t := x.t
	var b strings.Builder
	perMin, mean := 0.0, time.Duration(0)
	if x.wall > 0 {
		perMin = float64(x.episodes) / x.wall.Minutes()
	}
	if x.episodes > 0 {
		mean = x.busy / time.Duration(x.episodes)
	}
	fmt.Fprintf(&b, "\nexplorer: %d episodes in %s (%.1f per minute; %s each on average), %d failed %v, mutation %q\n",
		x.episodes, x.wall.Round(time.Second), perMin, mean.Round(time.Millisecond), x.failed, x.found, x.mut.name)
	fmt.Fprintf(&b, "rewinds: %d episodes restored their metastore from a backup (the cycles refused to run after %d), %d reconcile --apply runs\n",
		x.rewinds, x.refusals, x.reconciles)
	fmt.Fprintf(&b, "requests %d; faults by kind:", x.requests)
	for _, k := range faultstore.Kinds {
		fmt.Fprintf(&b, " %s=%d", k, x.faults[k])
	}
	pts := choosable()
	reached, crashed, paused := 0, 0, 0
	var never, neverActed []string
	for _, p := range pts {
		if x.hits[p] > 0 {
			reached++
		} else {
			never = append(never, string(p))
		}
		if x.crashed[p] > 0 {
			crashed++
		}
		if x.paused[p] > 0 {
			paused++
		}
		if x.crashed[p] == 0 && x.paused[p] == 0 && x.hits[p] > 0 {
			neverActed = append(neverActed, string(p))
		}
	}
	fmt.Fprintf(&b, "\npoints reached %d of %d; crashed at %d of %d; paused at %d of %d\n", reached, len(pts), crashed, len(pts), paused, len(pts))
	fmt.Fprintf(&b, "never reached: %v\nreached, never crashed or paused at: %v\n", never, neverActed)
	for _, p := range pts {
		fmt.Fprintf(&b, "  %-32s hits %-6d crashes %-4d pauses %d\n", p, x.hits[p], x.crashed[p], x.paused[p])
	}
	for _, r := range x.replays {
		fmt.Fprintf(&b, "replay %s\n", r)
	}
	if x.firstFind != "" {
		fmt.Fprintf(&b, "%s\n", x.firstFind)
	}
	t.Log(b.String())
	if x.mut.name != "" && len(x.found) == 0 && os.Getenv(envExploreSeed) == "" {
		t.Errorf("mutation %s: no episode failed", x.mut.name)
	}
}
