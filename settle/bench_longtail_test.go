package settle_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"golang.org/x/sync/errgroup"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/settle"
)

// tailZipfS is the Zipf exponent of the long-tail star's traffic: each of
// a round's records goes to stream k (0 the hottest) with probability
// proportional to (1+k)^-1.1. At 10,000 streams and 20,000 records a round
// the hottest stream gets some 3,000 records (3 MiB) a round and crosses
// the 5 MiB copy floor in its second round, while the coldest get a record
// every few rounds: a few hot streams and a long trickle tail.
const tailZipfS = 1.1

// tailCap is the run's output cap (--denorm-output-cap-mib's default).
func tailCap() int64 { return config.Defaults().DenormOutputCapMiB << 20 }

// tailParams is one long-tail run.
type tailParams struct {
	streams, rounds, conc int
	records, recBytes     int // records a round (over all streams), body bytes of each
	ageCap                time.Duration
	capRounds             int     // the age cap in first rounds, when ageCap is not set
	fraction              float64 // the cost-aware due rule's fraction (0: today's rule)
	cohorts               int     // the rule's cohorts (catalog.DuePolicy.Cohorts)
}

// tailRound is what one round of write-then-cycle measured.
type tailRound struct {
	round            int
	due, settled     int64 // streams with unsettled data before the cycle; settled by it
	objects          int64 // published and adopted
	secs, rawSecs    float64
	ops              map[string]int64 // S3 requests of the settle by operation
	commits          int64            // xact_commit delta of the test database around the settle
	wal              int64            // WAL bytes the cluster wrote during the settle (walPosition)
	cpu              time.Duration    // this process's user + system CPU during the settle
	newBytes         int64            // record bytes written this round
	uploaded         int64
	fetched, copied  int64
	transit          int64         // unsettled record bytes after the cycle
	oldest           time.Duration // oldest unsettled age before the cycle (the round's highest)
	overCap          int64         // streams past the age cap before the cycle
	oldestAfter      time.Duration // oldest unsettled age after the cycle
	overCapAfter     int64
	rawObjects, rawB int64
	// the CPU of the S3 server and Postgres during the settle, and of this
	// process and both servers during the raw loop (serverCPU)
	vgwCPU, pgCPU               time.Duration
	rawCPU, rawVgwCPU, rawPgCPU time.Duration
	// where the settle's GETs and fetched bytes went, by the settle
	// metrics: slot footers (an envelope and a footer GET each), the slot
	// reads' ranges, and standing tails read by a GET (tail cache misses);
	// the rest of the GETs read a piece alone
	footers, slotGets, slotBytes, tailMisses int64
	readBack                                 int64 // bytes of published objects read back to check them
}

// opCounter counts requests by S3 operation (testenv.S3OpName; "other"
// for one the table does not name).
type opCounter struct {
	next http.RoundTripper
	mu   sync.Mutex
	ops  map[string]int64
}

func (o *opCounter) RoundTrip(req *http.Request) (*http.Response, error) {
	op := testenv.S3OpName(req)
	if op == "" {
		op = "other"
	}
	o.mu.Lock()
	o.ops[op]++
	o.mu.Unlock()
	return o.next.RoundTrip(req)
}

func (o *opCounter) snapshot() map[string]int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return maps.Clone(o.ops)
}

// TestLongTailStar is the long-tail benchmark, the long tail at the copy
// floor (make bench-tail): a star of NOVA_BENCH_TAIL_STREAMS streams (10,000) with
// Zipf-skewed traffic (tailZipfS), NOVA_BENCH_TAIL_ROUNDS rounds (50) of
// write-then-cycle at settle concurrency NOVA_BENCH_TAIL_CONCURRENCY (16),
// on versitygw behind 30 ms of injected latency per request
// (NOVA_BENCH_S3_LATENCY_MS, the latency transport of
// BenchmarkManySmallStreamsAtS3Latency). A round writes one flight of
// NOVA_BENCH_TAIL_RECORDS records (2 per stream) of
// NOVA_BENCH_TAIL_RECORD_BYTES (1 KiB) each, drawn over the streams, then
// runs one settle cycle, then a raw loop that PUTs objects of the sizes the
// cycle published, as many, at the same concurrency through the same
// transport: the ceiling of objects/s.
//
// Per round it logs objects/s and its ratio to the raw loop, S3 requests
// per object by operation (counted at the transport), Postgres commits per
// object (pg_stat_database xact_commit of the test database around the
// cycle, read once it has stopped moving: counted where they cross the
// database, the readings' own few commits included), this process's CPU per object (getrusage around the cycle;
// versitygw and Postgres are other processes), uploaded and fetched bytes
// per new record byte, bytes in transit after the cycle, and the oldest
// unsettled age before the cycle against the age cap. The run's summary
// gives uploaded bytes per new byte at round 5 and at the last round, and
// over the first and the last turn of the rule's cohorts (as many rounds
// as cohorts, each cohort's turn once): one round's figure swings with
// whose turn it is.
//
// Linger is 0 (every stream with new data is due at once: the due rule
// reads the database clock, so rounds are real time) and the age cap is
// NOVA_BENCH_TAIL_AGE_CAP (a duration) or else NOVA_BENCH_TAIL_CAP_ROUNDS
// times the first run's first round (write and cycle). A round stands for
// one linger (one new flight per stream's linger, as the long-tail
// targets count them), so that default is the defaults' ratio of age cap to linger,
// 24h / 5m = 288 rounds: production's shape, where a trickle stream's
// settles are paced by the tail-growth rule and its age cap is days of
// rounds away. NOVA_BENCH_TAIL_CAP_ROUNDS=5 compresses the cap so that
// deferral meets it within a run: the regime where the cap, not the
// rule, paces a trickle stream's settles (docs/architecture.md, the cost
// model's hold-paced regime). The run is made at fraction 0 and at
// --denorm-tail-growth's default, side by side on fresh databases with the
// same traffic. Then a short comparison with the raw loop at settle
// concurrencies 4, 16 and 64 (NOVA_BENCH_TAIL_CMP_ROUNDS rounds each, 3,
// fraction 0; 50 rounds at three concurrencies would take hours at the
// issue's scale), with where the CPU went (this process, versitygw and
// Postgres, per object) and the WAL the cluster wrote per object during
// the cycles (writepath.WALPosition; NOVA_BENCH_TAIL_CMP_CONCURRENCIES, say "64", picks
// the concurrencies); NOVA_BENCH_TAIL_CMP_ONLY=1 runs that alone,
// NOVA_BENCH_TAIL_CMP=0 leaves it out. NOVA_BENCH_TAIL_FRACTIONS (say "1")
// picks the fractions instead, and NOVA_BENCH_TAIL_COHORTS the rule's
// cohorts (--denorm-tail-cohorts' default; 1: none);
// NOVA_BENCH_TAIL_GAP_KIB sets the slot reads' gap (settle.Config.SlotReadGap);
// NOVA_BENCH_TAIL_LOG_STATEMENTS=1 has Postgres log every statement of the
// settle's pool with its duration (log_min_duration_statement 0);
// NOVA_BENCH_TAIL_CPUPROFILE names a file for a CPU profile of each
// run's last cycle (the last run's is kept; with
// NOVA_BENCH_TAIL_CPUPROFILE_FROM, of every round from that one on). The streams' Zipf
// ranks are shuffled over their IDs, as a production star's UUIDs say
// nothing of a stream's rate. Off by default: set NOVA_BENCH_TAIL=1.
func TestLongTailStar(t *testing.T) {
	if os.Getenv("NOVA_BENCH_TAIL") == "" {
		t.Skip("set NOVA_BENCH_TAIL=1 to run (make bench-tail)")
	}
	p := tailParams{
		streams:  envInt("NOVA_BENCH_TAIL_STREAMS", 10000),
		rounds:   envInt("NOVA_BENCH_TAIL_ROUNDS", 50),
		conc:     envInt("NOVA_BENCH_TAIL_CONCURRENCY", 16),
		recBytes: envInt("NOVA_BENCH_TAIL_RECORD_BYTES", 1<<10),
	}
	p.records = envInt("NOVA_BENCH_TAIL_RECORDS", 2*p.streams)
	def := config.Defaults()
	p.cohorts = envInt("NOVA_BENCH_TAIL_COHORTS", int(def.DenormTailCohorts))
	p.capRounds = envInt("NOVA_BENCH_TAIL_CAP_ROUNDS", int(def.DenormAgeCap/def.DenormLinger))
	if p.streams > 1<<16 {
		t.Fatalf("NOVA_BENCH_TAIL_STREAMS %d: at most %d (two bytes of the stream ID)", p.streams, 1<<16)
	}
	if v := os.Getenv("NOVA_BENCH_TAIL_AGE_CAP"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("NOVA_BENCH_TAIL_AGE_CAP: %v", err)
		}
		p.ageCap = d
	}
	fractions := []float64{0}
	if f := config.Defaults().DenormTailGrowth; f != 0 {
		fractions = append(fractions, f)
	}
	if v := os.Getenv("NOVA_BENCH_TAIL_FRACTIONS"); v != "" {
		fractions = nil
		for _, f := range strings.Split(v, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
			if err != nil || x < 0 {
				t.Fatalf("NOVA_BENCH_TAIL_FRACTIONS: %q is not a fraction", f)
			}
			fractions = append(fractions, x)
		}
	}
	if os.Getenv("NOVA_BENCH_TAIL_CMP_ONLY") != "" {
		fractions = nil // the comparison with the raw loop alone
	}
	t.Logf("long-tail star: %d streams, Zipf s=%.1f, %d records of %d bytes a round, %d rounds, concurrency %d, %v S3 latency, %d cohorts",
		p.streams, tailZipfS, p.records, p.recBytes, p.rounds, p.conc, tailLatency(), p.cohorts)
	var runs [][]tailRound
	for _, f := range fractions {
		q := p
		q.fraction = f
		var rs []tailRound
		t.Run(fmt.Sprintf("fraction-%g", f), func(t *testing.T) {
			rs = runTail(t, &q)
			t.Logf("fraction %g, age cap %v, concurrency %d:\n%s", f, q.ageCap, q.conc, tailTable(rs, q))
			t.Logf("fraction %g, where the GETs and fetched bytes went:\n%s", f, tailSources(rs))
		})
		if p.ageCap == 0 {
			p.ageCap = q.ageCap // the first run's, for every run
		}
		runs = append(runs, rs)
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "summary over %d rounds (age cap %v):\n", p.rounds, p.ageCap)
	fmt.Fprintf(&sum, "%s\n", tailSummaryHeader)
	for i, rs := range runs {
		fmt.Fprintf(&sum, "%s\n", tailSummary(fmt.Sprintf("fraction %g", fractions[i]), rs, p))
	}
	if len(runs) > 0 {
		t.Log(sum.String())
	}

	if os.Getenv("NOVA_BENCH_TAIL_CMP") == "0" {
		return // the runs alone
	}
	cmpRounds := envInt("NOVA_BENCH_TAIL_CMP_ROUNDS", 3)
	var cmp, cpu strings.Builder
	fmt.Fprintf(&cmp, "settle against the raw PUT loop, fraction 0, first %d rounds:\n%s\n", cmpRounds, tailSummaryHeader)
	fmt.Fprintf(&cpu, "where the CPU went in the same rounds, per object (Postgres: every postgres process, its background workers included), and the WAL written during the cycles:\n%s\n", tailCPUHeader)
	concs := []int{4, 16, 64}
	if v := os.Getenv("NOVA_BENCH_TAIL_CMP_CONCURRENCIES"); v != "" {
		concs = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				t.Fatalf("NOVA_BENCH_TAIL_CMP_CONCURRENCIES: %q is not a concurrency", f)
			}
			concs = append(concs, n)
		}
	}
	for _, conc := range concs {
		q := p
		q.rounds, q.conc = cmpRounds, conc
		t.Run(fmt.Sprintf("concurrency-%d", conc), func(t *testing.T) {
			rs := runTail(t, &q)
			fmt.Fprintf(&cmp, "%s\n", tailSummary(fmt.Sprintf("concurrency %d", conc), rs, q))
			fmt.Fprintf(&cpu, "%s\n", tailCPU(fmt.Sprintf("concurrency %d", conc), rs))
		})
	}
	t.Log(cmp.String())
	t.Log(cpu.String())
}

func tailLatency() time.Duration {
	return time.Duration(envInt("NOVA_BENCH_S3_LATENCY_MS", 30)) * time.Millisecond
}

// tailTraffic is round k's records per stream (the same for every run).
func tailTraffic(p tailParams, k int) []int {
	r := rand.New(rand.NewPCG(25, uint64(k)))
	z := rand.NewZipf(r, tailZipfS, 1, uint64(p.streams-1))
	counts := make([]int, p.streams)
	for range p.records {
		counts[z.Uint64()]++
	}
	return counts
}

// runTail runs p's rounds on a fresh database and versitygw buckets. It
// sets p.ageCap from the first round when it is 0.
func runTail(t *testing.T, p *tailParams) []tailRound {
	ops := &opCounter{next: latency{next: &http.Transport{MaxIdleConnsPerHost: 256}, delay: tailLatency()}, ops: map[string]int64{}}
	e, _ := newEnv(t, s3Backend("s3-longtail", "longtail", ops, nil), 0, 0)
	ids, next := writeFairSlots(t, e, fairShape{cold: p.streams}) // the streams, no flights yet
	index := make(map[catalog.StreamID]int, len(ids))
	for i, id := range ids {
		index[id] = i
	}
	var out []tailRound
	// One settler for the run, as the daemon keeps one across cycles (its
	// tail cache lives as long as it does); each round's metastore is a
	// fresh pool, so that the server's commit count of the round is read
	// once its backends have exited.
	rdb := &roundDB{}
	// The settle's store is instrumented as the daemon's is, for the bytes
	// it read back (path read_back of nova_auditor_bytes_total).
	oreg := prometheus.NewRegistry()
	om, err := objstore.NewMetrics(oreg)
	if err != nil {
		t.Fatal(err)
	}
	top := e.topologyOver(objstore.Instrument(e.store, om))
	s3, ok := e.store.(*s3store.Store)
	readsBack := ok && s3.Config().ReadsBackCopies()
	t.Logf("fraction %g: the rule's floor %d bytes (the store reads back copies: %v)", p.fraction,
		objstore.TailFloor(objstore.DefaultLimits, readsBack, tailCap()), readsBack)
	var (
		s   *settle.Settler
		sp  catalog.DuePolicy    // s's
		reg *prometheus.Registry // s's metrics
	)
	// A stream's ID says nothing of its rate in production (UUIDs): the
	// Zipf rank k writes to the stream at rank[k], a fixed shuffle, so that
	// the hot streams lie anywhere in a slot's stream-ID order rather than
	// all at its start.
	rank := rand.New(rand.NewPCG(25, 25)).Perm(p.streams)
	for k := 0; k < p.rounds; k++ {
		start := time.Now()
		counts := make([]int, p.streams)
		for r, n := range tailTraffic(*p, k) {
			counts[rank[r]] = n
		}
		var sub []bundlefmt.StreamID
		var subNext []uint64
		var subCount []int
		var newBytes int64
		for i, n := range counts {
			if n > 0 {
				sub, subNext, subCount = append(sub, ids[i]), append(subNext, next[i]), append(subCount, n)
				newBytes += int64(n * p.recBytes)
			}
		}
		writeFairFlight(t, e, k, sub, subNext, func(j int) (int, int) { return subCount[j], p.recBytes })
		for j, id := range sub {
			next[index[id]] = subNext[j]
		}

		policy := catalog.DuePolicy{AgeCap: p.ageCap, ExpressAgeCap: p.ageCap}
		if p.ageCap == 0 {
			policy.AgeCap, policy.ExpressAgeCap = time.Hour, time.Hour // round 1 of the first run: all is due at linger 0 anyway
		}
		// the rule's floor the daemon plans with on this store (cmd/auditor's
		// storePolicy): the output cap on versitygw, which reads back copies
		policy.TailGrowth, policy.CopyFloor = p.fraction, objstore.TailFloor(objstore.DefaultLimits, readsBack, tailCap())
		policy.Cohorts = p.cohorts
		sdb := settleDB(t, e, p.conc)
		rdb.Settle = sdb.Settle()
		if s != nil && policy != sp {
			// round 1 of a run has a provisional age cap (above): the
			// settler keeps its caches, as a daemon's does across cycles
			sp = policy
			s.SetPolicy(policy)
		}
		if s == nil {
			sp = policy
			reg = prometheus.NewRegistry()
			m, err := settle.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			s = e.newSettler(settle.Deps{DB: rdb, Topology: top, Pending: e.pending, Metrics: m},
				settle.Config{Policy: policy, CapBytes: tailCap(), TargetBytes: 4 << 20, MaxStreams: 100000, MaxBytes: 1 << 50,
					Concurrency: p.conc, ReapGrace: time.Hour, SlotReadGap: int64(envInt("NOVA_BENCH_TAIL_GAP_KIB", 0)) << 10})
		}
		rd := tailRound{round: k + 1, newBytes: newBytes}
		rd.due, rd.oldest, rd.overCap = tailTransit(t, e, policy)
		before, err := e.db.Streams().EntriesOfStar(e.ctx, "s1")
		if err != nil {
			t.Fatal(err)
		}
		l, err := e.db.Leases().AcquireLeaseInstance(e.ctx, "s1", "bench", "", 30*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		tx0 := quietCommits(t, e)
		ops0 := ops.snapshot()
		m0 := readSources(reg)
		rb0 := testutil.ToFloat64(om.Bytes().WithLabelValues("read_back"))
		runtime.GC() // the setup's garbage (the write path's: another process in production) is not the cycle's
		wal0 := walPosition(t, e)
		srv0 := serverCPU(t)
		cpu0 := processCPU()
		stopProfile := tailProfile(t, k+1, p.rounds)
		t0 := time.Now()
		c, err := s.Run(e.ctx, l.Fence, cycle.Options{Trigger: "once"})
		rd.secs = time.Since(t0).Seconds()
		stopProfile()
		rd.cpu = processCPU() - cpu0
		srv1 := serverCPU(t) // before the pool closes: its backends are still counted
		rd.vgwCPU, rd.pgCPU = srv1.vgw-srv0.vgw, srv1.pg-srv0.pg
		rd.wal = walPosition(t, e) - wal0
		ops1 := ops.snapshot()
		m1 := readSources(reg)
		rd.readBack = int64(testutil.ToFloat64(om.Bytes().WithLabelValues("read_back")) - rb0)
		rd.footers, rd.slotGets, rd.slotBytes, rd.tailMisses = m1[0]-m0[0], m1[1]-m0[1], m1[2]-m0[2], m1[3]-m0[3]
		sdb.Close() // its backends exit and publish their counts
		rd.commits = settledCommits(t, e) - tx0
		_ = e.db.Leases().ReleaseLease(e.ctx, l.Fence)
		if err != nil || c.StreamsQuarantined != 0 {
			q, _ := e.db.Settle().Quarantined(e.ctx, "s1")
			t.Fatalf("round %d: %+v %v, quarantine %+v", k+1, c, err, q)
		}
		if p.ageCap == 0 {
			p.ageCap = time.Duration(p.capRounds) * time.Since(start)
		}
		rd.ops = map[string]int64{}
		for op, n := range ops1 {
			if d := n - ops0[op]; d > 0 {
				rd.ops[op] = d
			}
		}
		rd.settled, rd.objects = c.StreamsSettled, c.ObjectsPublished+c.ObjectsAdopted
		rd.uploaded, rd.fetched, rd.copied = c.BytesUploaded, c.BytesFetched, c.BytesCopied
		_, rd.oldestAfter, rd.overCapAfter = tailTransit(t, e, policy)
		rd.transit = tailUnsettled(t, e, index, next, p.recBytes)

		sizes := publishedSizes(t, e, before)
		rd.rawObjects = int64(len(sizes))
		for _, n := range sizes {
			rd.rawB += n
		}
		srv0, cpu0 = serverCPU(t), processCPU()
		rd.rawSecs = rawPuts(t, e, k, sizes, p.conc)
		srv1 = serverCPU(t)
		rd.rawCPU, rd.rawVgwCPU, rd.rawPgCPU = processCPU()-cpu0, srv1.vgw-srv0.vgw, srv1.pg-srv0.pg
		out = append(out, rd)
		t.Logf("round %d of %d: %d streams settled, %d objects in %.1f s (raw loop %.1f s); round took %v",
			k+1, p.rounds, rd.settled, rd.objects, rd.secs, rd.rawSecs, time.Since(start).Round(time.Second))
	}
	return out
}

// tailProfile starts a CPU profile of round's cycle into the file
// NOVA_BENCH_TAIL_CPUPROFILE names, when round is the run's last (the
// longest-held streams), and returns what stops it. With
// NOVA_BENCH_TAIL_CPUPROFILE_FROM=n every round from n on is profiled, each
// into the named file with ".<round>" appended (go tool pprof merges them:
// one round's cycle holds too few samples to rank its costs).
func tailProfile(t *testing.T, round, rounds int) func() {
	path := os.Getenv("NOVA_BENCH_TAIL_CPUPROFILE")
	from := envInt("NOVA_BENCH_TAIL_CPUPROFILE_FROM", 0)
	switch {
	case path == "":
		return func() {}
	case from > 0 && round >= from:
		path = fmt.Sprintf("%s.%d", path, round)
	case round != rounds:
		return func() {}
	}
	stop := startProfile(t, path)
	return func() {
		stop()
		t.Logf("CPU profile of round %d's cycle: %s", round, path)
	}
}

// settleDB is a metastore pool of the settle's own, its connections open
// (conc of them, so that the cycle does not pay for connecting). Closed
// after the cycle, its backends exit, and a backend publishes its
// transaction counts when it exits: Postgres 15 otherwise holds back the
// counts of a backend that went idle within a second of its last report
// for 10 s, which shifted commits into the next round.
// roundDB is the settler's metastore: the round's pool (settleDB).
type roundDB struct{ *catalog.Settle }

func settleDB(t *testing.T, e *env, conc int) *catalog.DB {
	u := e.url
	if os.Getenv("NOVA_BENCH_TAIL_LOG_STATEMENTS") != "" {
		// every statement of the settle's pool, with its duration, in the
		// server's log (where the metastore's time goes, statement by
		// statement; pg_stat_statements needs a server restart)
		if strings.Contains(u, "?") {
			u += "&"
		} else {
			u += "?"
		}
		u += "options=-c%20log_min_duration_statement%3D0"
	}
	db, err := catalog.Open(e.ctx, u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	conns := make([]*pgxpool.Conn, 0, conc)
	for range min(conc, int(db.Pool().Config().MaxConns)) {
		c, err := db.Pool().Acquire(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	return db
}

// quietCommits is the test database's xact_commit once every commit made
// so far is counted: Postgres 15 holds back the counts of a backend that
// went idle within a second of its last report for 10 s (the round's
// absorb, the benchmark's reads, the settle pool's connection setup).
func quietCommits(t *testing.T, e *env) int64 {
	time.Sleep(10 * time.Second)
	return xactCommits(t, e)
}

// walPosition is the cluster's WAL insert position (writepath.WALPosition).
// Its moves around the settle are the cycle's writes, plus whatever else
// the cluster writes meanwhile: another test package's databases, a
// checkpoint's full-page images, autovacuum, page pruning by reads. Read
// it on a quiet machine, and over rounds rather than one.
func walPosition(t *testing.T, e *env) int64 {
	n, err := writepath.New(e.db).WALPosition(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// settledCommits is the test database's xact_commit once it has stopped
// moving: each backend publishes its counts when it goes idle, at most
// once a second, so one reading a second after a burst can miss a
// backend's last commits and shift them into the next round. It reads
// until two readings a second apart differ by at most the first reading's
// own commit (at most 10 readings).
func settledCommits(t *testing.T, e *env) int64 {
	n := xactCommits(t, e)
	for range 9 {
		m := xactCommits(t, e)
		if m-n <= 1 {
			return m
		}
		n = m
	}
	return n
}

// tailTransit is the standard class's streams with unsettled data, the
// oldest unsettled age and the streams past the age cap, by the database
// clock.
func tailTransit(t *testing.T, e *env, p catalog.DuePolicy) (markers int64, oldest time.Duration, over int64) {
	_, cls, err := e.db.Ledger().TransitByClass(e.ctx, "s1", p)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cls {
		if c.Class == catalog.ClassStandard {
			return c.Markers, c.OldestAge, c.OverAgeCap
		}
	}
	return 0, 0, 0
}

// tailUnsettled is the record bytes written and not settled (every record
// of the benchmark has recBytes).
func tailUnsettled(t *testing.T, e *env, index map[catalog.StreamID]int, next []uint64, recBytes int) int64 {
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, st := range streams {
		if i, ok := index[st.ID]; ok {
			n += (int64(next[i]) - st.SettledThrough) * int64(recBytes)
		}
	}
	return n
}

// publishedSizes is the object bytes of every catalog entry that is not in
// before (at the same revision): what the cycle published.
func publishedSizes(t *testing.T, e *env, before map[catalog.StreamID][]catalog.Entry) []int64 {
	after, err := e.db.Streams().EntriesOfStar(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	type key struct {
		epoch, first int64
		rev          int32
	}
	var out []int64
	for id, ens := range after {
		old := map[key]bool{}
		for _, en := range before[id] {
			old[key{en.Epoch, en.FirstRecord, en.Revision}] = true
		}
		for _, en := range ens {
			if !old[key{en.Epoch, en.FirstRecord, en.Revision}] {
				out = append(out, en.ObjectBytes)
			}
		}
	}
	return out
}

// rawPuts PUTs one object of each size (keys of round k's own) at conc at
// once through the env's store, and returns the seconds it took.
func rawPuts(t *testing.T, e *env, k int, sizes []int64, conc int) float64 {
	if len(sizes) == 0 {
		return 0
	}
	var largest int64
	for _, n := range sizes {
		largest = max(largest, n)
	}
	body := make([]byte, largest)
	r := rand.New(rand.NewPCG(uint64(k), 9))
	for i := range body {
		body[i] = byte(r.Uint32())
	}
	var g errgroup.Group
	g.SetLimit(conc)
	start := time.Now()
	for i, n := range sizes {
		g.Go(func() error {
			return e.store.PutIfAbsent(e.ctx, e.std, fmt.Sprintf("raw/%d/%d", k, i), body[:n])
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	return time.Since(start).Seconds()
}

// readSources reads the settle metrics the table's sources columns show:
// footer fetches, slot range GETs and bytes, tail cache misses.
func readSources(reg *prometheus.Registry) [4]int64 {
	var out [4]int64
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := int64(m.GetCounter().GetValue())
			switch mf.GetName() {
			case "nova_auditor_slot_footer_gets_total":
				out[0] += v
			case "nova_auditor_slot_range_gets_total":
				out[1] += v
			case "nova_auditor_slot_range_bytes_total":
				out[2] += v
			case "nova_auditor_tail_reads_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "miss" {
						out[3] += v
					}
				}
			}
		}
	}
	return out
}

// tailSources is the per-round table of where a run's GETs and fetched
// bytes went, per object and per new byte. alone+rb is every other GET: a
// piece read alone, or a window of a read-back.
func tailSources(rs []tailRound) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round  objects  get/obj: footer  slot-range  tail-miss  alone+rb  slots-read  fetch/new: slot-range  read-back  other\n")
	for _, rd := range rs {
		gets := rd.ops["GetObject"]
		alone := gets - 2*rd.footers - rd.slotGets - rd.tailMisses
		fmt.Fprintf(&b, "%5d  %7d  %15.2f  %10.2f  %9.2f  %8.2f  %10d  %21.2f  %9.2f  %5.2f\n", rd.round, rd.objects,
			per(2*rd.footers, rd.objects), per(rd.slotGets, rd.objects), per(rd.tailMisses, rd.objects), per(alone, rd.objects),
			rd.footers, per(rd.slotBytes, rd.newBytes), per(rd.readBack, rd.newBytes), per(rd.fetched-rd.slotBytes-rd.readBack, rd.newBytes))
	}
	return b.String()
}

// tailOps are the table's request columns: S3 operations by short name.
var tailOps = []struct{ col, op string }{
	{"put", "PutObject"}, {"get", "GetObject"}, {"head", "HeadObject"}, {"mpu", "CreateMultipartUpload"},
	{"part", "UploadPart"}, {"copy", "UploadPartCopy"}, {"done", "CompleteMultipartUpload"},
}

// tailOther is the requests of rd that no column of tailOps shows.
func tailOther(ops map[string]int64) int64 {
	var n int64
	for op, v := range ops {
		shown := false
		for _, c := range tailOps {
			shown = shown || c.op == op
		}
		if !shown {
			n += v
		}
	}
	return n
}

func per(n, d int64) float64 {
	if d == 0 {
		return 0
	}
	return float64(n) / float64(d)
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func perSec(n int64, s float64) float64 {
	if s == 0 {
		return 0
	}
	return float64(n) / s
}

// perMiB is the CPU in ms per MiB of newB: what settling costs per new
// byte, which the rule's fewer, larger objects do not inflate the way they
// inflate the CPU per object.
func perMiB(cpu time.Duration, newB int64) float64 {
	if newB == 0 {
		return 0
	}
	return float64(cpu.Microseconds()) / 1000 / (float64(newB) / (1 << 20))
}

// tailTable is the per-round table of a run.
func tailTable(rs []tailRound, p tailParams) string {
	var b strings.Builder
	fmt.Fprintf(&b, "round  due  settled  objects  obj/s  raw/s  ratio")
	for _, c := range tailOps {
		fmt.Fprintf(&b, "  %5s", c.col)
	}
	fmt.Fprintf(&b, "  other  s3/obj  pgc/obj  cpu-ms/obj  cpu-ms/new-MiB  new-KiB  up/new  fetch/new  transit-KiB  oldest/cap  over-cap\n")
	for _, rd := range rs {
		objs := perSec(rd.objects, rd.secs)
		raw := perSec(rd.rawObjects, rd.rawSecs)
		fmt.Fprintf(&b, "%5d  %3d  %7d  %7d  %5.0f  %5.0f  %5.2f", rd.round, rd.due, rd.settled, rd.objects, objs, raw, ratio(objs, raw))
		var all int64
		for _, c := range tailOps {
			fmt.Fprintf(&b, "  %5.2f", per(rd.ops[c.op], rd.objects))
		}
		for _, v := range rd.ops {
			all += v
		}
		fmt.Fprintf(&b, "  %5.2f  %6.2f  %7.2f  %10.2f  %14.1f  %7d  %6.2f  %9.2f  %11d  %5.1f/%-5.0f  %8d\n",
			per(tailOther(rd.ops), rd.objects), per(all, rd.objects), per(rd.commits, rd.objects),
			per(rd.cpu.Microseconds(), rd.objects)/1000, perMiB(rd.cpu, rd.newBytes), rd.newBytes>>10, per(rd.uploaded, rd.newBytes), per(rd.fetched, rd.newBytes),
			rd.transit>>10, rd.oldest.Seconds(), p.ageCap.Seconds(), rd.overCap)
	}
	// the rare operations (a hot stream's multipart copy) round to 0.00 per
	// object: their counts
	total := map[string]int64{}
	for _, rd := range rs {
		for op, v := range rd.ops {
			total[op] += v
		}
	}
	ops := make([]string, 0, len(total))
	for op := range total {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	fmt.Fprintf(&b, "S3 requests of the settle over the run:")
	for _, op := range ops {
		fmt.Fprintf(&b, " %s %d", op, total[op])
	}
	fmt.Fprintf(&b, "\n")
	return b.String()
}

const tailSummaryHeader = "run                 objects  obj/s  raw/s  ratio  s3/obj  put/obj  get/obj  pgc/obj  cpu-ms/obj  cpu-ms/new-MiB  up/new  fetch/new  up/new@5  up/new@last  up/new@first-turns  up/new@last-turns  up/settled@5  up/settled@last  max-oldest/cap  over-cap"

// settledBytes is the record bytes round k (1-based) settled: what it
// wrote and what was unsettled before it, less what is unsettled after.
func settledBytes(rs []tailRound, k int) int64 {
	var before int64
	if k > 1 {
		before = rs[k-2].transit
	}
	return before + rs[k-1].newBytes - rs[k-1].transit
}

// tailSummary is one line over a run's rounds.
func tailSummary(name string, rs []tailRound, p tailParams) string {
	var objects, rawObjects, commits, reqs, puts, gets, newB, up, fetched, over int64
	var secs, rawSecs float64
	var cpu, oldest time.Duration
	for _, rd := range rs {
		objects += rd.objects
		rawObjects += rd.rawObjects
		secs += rd.secs
		rawSecs += rd.rawSecs
		commits += rd.commits
		cpu += rd.cpu
		for _, v := range rd.ops {
			reqs += v
		}
		puts += rd.ops["PutObject"]
		gets += rd.ops["GetObject"]
		newB += rd.newBytes
		up += rd.uploaded
		fetched += rd.fetched
		oldest = max(oldest, rd.oldest)
		over += rd.overCap
	}
	at := func(k int) float64 {
		if k < 1 || k > len(rs) {
			return 0
		}
		return per(rs[k-1].uploaded, rs[k-1].newBytes)
	}
	// uploaded per byte settled: the rewrite amplification, which holding
	// streams back does not lower the way it lowers uploaded per new byte
	// while the holds build up
	amp := func(k int) float64 {
		if k < 1 || k > len(rs) {
			return 0
		}
		return per(rs[k-1].uploaded, settledBytes(rs, k))
	}
	// uploaded per new byte over one turn of the rule's cohorts (as many
	// rounds as cohorts: every cohort's turn once), the first and the
	// last: a single round's figure depends on whose turn it is
	turns := func(from int) float64 {
		var u, n int64
		for k := max(from, 0); k < min(from+max(p.cohorts, 1), len(rs)); k++ {
			u, n = u+rs[k].uploaded, n+rs[k].newBytes
		}
		return per(u, n)
	}
	objs, raw := perSec(objects, secs), perSec(rawObjects, rawSecs)
	return fmt.Sprintf("%-18s  %7d  %5.0f  %5.0f  %5.2f  %6.2f  %7.2f  %7.2f  %7.2f  %10.2f  %14.1f  %6.2f  %9.2f  %8.2f  %11.2f  %18.2f  %17.2f  %12.2f  %15.2f  %7.0f/%-6.0f  %8d",
		name, objects, objs, raw, ratio(objs, raw), per(reqs, objects), per(puts, objects), per(gets, objects),
		per(commits, objects), per(cpu.Microseconds(), objects)/1000, perMiB(cpu, newB), per(up, newB), per(fetched, newB), at(5), at(len(rs)),
		turns(0), turns(len(rs)-max(p.cohorts, 1)), amp(5), amp(len(rs)), oldest.Seconds(), p.ageCap.Seconds(), over)
}

// cpuOfServers is the CPU the test's S3 server and Postgres have used.
type cpuOfServers struct{ vgw, pg time.Duration }

// serverCPU reads from /proc the CPU of versitygw (the services' process,
// NOVA_TEST_VERSITYGW_PID) and of Postgres: the postmaster's own, its
// exited children's (cutime, cstime: a closed pool's backends) and its
// live children's. Zero for a server this machine does not run.
func serverCPU(t *testing.T) cpuOfServers {
	var out cpuOfServers
	if pid, err := strconv.Atoi(os.Getenv(testenv.EnvVersitygwPID)); err == nil {
		if st, ok := procStat(pid); ok {
			out.vgw = st.self
		}
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("read /proc: %v", err)
	}
	stats := map[int]procCPU{}
	for _, d := range dirs {
		if pid, err := strconv.Atoi(d.Name()); err == nil {
			if st, ok := procStat(pid); ok && st.comm == "postgres" {
				stats[pid] = st
			}
		}
	}
	for _, st := range stats {
		out.pg += st.self
		if _, child := stats[st.ppid]; !child {
			out.pg += st.children // the postmaster
		}
	}
	return out
}

// procCPU is what serverCPU reads of a process.
type procCPU struct {
	comm           string
	ppid           int
	self, children time.Duration
}

// procStat parses /proc/pid/stat (proc(5)): the command in parentheses,
// then state, ppid, ... utime (14), stime, cutime, cstime, in clock ticks
// of 10 ms (USER_HZ on Linux).
func procStat(pid int) (procCPU, bool) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procCPU{}, false
	}
	open, end := strings.IndexByte(string(raw), '('), strings.LastIndexByte(string(raw), ')')
	if open < 0 || end < open {
		return procCPU{}, false
	}
	f := strings.Fields(string(raw[end+1:]))
	if len(f) < 15 {
		return procCPU{}, false
	}
	tick := func(i int) time.Duration {
		n, _ := strconv.ParseInt(f[i], 10, 64)
		return time.Duration(n) * 10 * time.Millisecond
	}
	ppid, _ := strconv.Atoi(f[1])
	return procCPU{comm: string(raw[open+1 : end]), ppid: ppid, self: tick(11) + tick(12), children: tick(13) + tick(14)}, true
}

const tailCPUHeader = "run                 objects  raw-objects  ms/obj: auditor  versitygw  postgres  total | raw: client  versitygw  total | total raw/settle | WAL B/obj"

// tailCPU is one line of where a run's CPU went per object: the settle's
// (this process, versitygw, Postgres) against the raw loop's.
func tailCPU(name string, rs []tailRound) string {
	var objects, rawObjects int64
	var self, vgw, pg, rawSelf, rawVgw, rawPg time.Duration
	var wal int64
	for _, rd := range rs {
		objects, rawObjects, wal = objects+rd.objects, rawObjects+rd.rawObjects, wal+rd.wal
		self, vgw, pg = self+rd.cpu, vgw+rd.vgwCPU, pg+rd.pgCPU
		rawSelf, rawVgw, rawPg = rawSelf+rd.rawCPU, rawVgw+rd.rawVgwCPU, rawPg+rd.rawPgCPU
	}
	ms := func(d time.Duration, n int64) float64 { return per(d.Microseconds(), n) / 1000 }
	settleMs := ms(self+vgw+pg, objects)
	rawMs := ms(rawSelf+rawVgw+rawPg, rawObjects)
	return fmt.Sprintf("%-18s  %7d  %11d  %15.2f  %9.2f  %8.2f  %5.2f | %11.2f  %9.2f  %5.2f | %16.2f | %9.0f",
		name, objects, rawObjects, ms(self, objects), ms(vgw, objects), ms(pg, objects), settleMs,
		ms(rawSelf, rawObjects), ms(rawVgw, rawObjects), rawMs, ratio(rawMs, settleMs), per(wal, objects))
}
