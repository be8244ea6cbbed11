package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
)

// The live-traffic test: the real `auditor serve` (a leader and a standby
// per star) settles, trims and reaps while the real `novasim write` keeps
// absorbing into the very streams it settles, and the daemons are killed at
// random moments. make test runs it for liveDefault; make soak sets
// NOVA_LIVE_DURATION (SOAK_DURATION) for a longer run.

const (
	// liveDurationEnv is how long the writer writes (a Go duration).
	liveDurationEnv = "NOVA_LIVE_DURATION"
	// liveSeedEnv fixes the seed of the random draws (which daemon, which
	// signal, which crash point, the content): logged by every run, it
	// replays the draws, though not their timing against the traffic.
	liveSeedEnv = "NOVA_LIVE_SEED"
	liveDefault = 75 * time.Second

	liveGrace = 3 * time.Second // --reap-grace
	// The tail-growth rule runs as it does by default, with 4 cohorts, and
	// both classes' age caps are compressed to liveAgeCap, so that streams
	// are held, wait for their cohort's turn and are let go within the run.
	liveAgeCap     = 6 * time.Second // --denorm-age-cap, --express-denorm-age-cap
	liveTailGrowth = "1"             // --denorm-tail-growth
	liveCohorts    = 4               // --denorm-tail-cohorts
	liveTTL        = 3 * time.Second // --lease-ttl
	liveStop       = 5 * time.Second // --shutdown-timeout
)

// liveStars: a standard star and an express star, each with its own pair of
// daemons.
var liveStars = []string{"s1", "s1-x"}

// TestLiveTraffic runs the live-traffic test on both backends at once. The
// writer plays failovers, lost flights, writer crashes, lost PUT replies
// and retention moves (low_record raised on random streams) on both stars,
// throughout. Every few seconds a daemon (the leader more often than not)
// is killed with SIGKILL, or sometimes SIGTERM, and restarted at once,
// some restarts with a random crash point armed. A watcher hashes every
// settled object as it appears and polls the quarantine, the halt and the
// trim cursors all along. After the writer stops, the run must show: zero
// quarantine rows and no halt at any time, no settled key ever holding
// other bytes, the trim cursors never backwards, the tail-growth rule
// seen holding streams back (it runs with cohorts and a compressed age
// cap: liveAgeCap), convergence within two cycles once the age cap has
// passed, novasim check clean, and after the grace no stray object, open
// intent, sidecar, multipart upload or slot behind the trim cursor.
func TestLiveTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real processes")
	}
	d := liveDefault
	if v := os.Getenv(liveDurationEnv); v != "" {
		var err error
		if d, err = time.ParseDuration(v); err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration (like 10m)", liveDurationEnv, v)
		}
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(liveSeedEnv); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("%s=%q: want an unsigned integer", liveSeedEnv, v)
		}
	}
	t.Logf("seed %d (%s=%d replays the random draws), writing for %s", seed, liveSeedEnv, seed, d)
	for i, b := range []struct {
		name string
		open liveOpener
	}{{"file", liveFileStore}, {"s3", liveS3Store}} {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			liveRun(t, d, seed+uint64(i), b.open)
		})
	}
}

// livePolicy is the due policy the daemons run with (cmd/auditor's
// storePolicy for their flags and store).
func livePolicy(t *testing.T, b liveBackend) catalog.DuePolicy {
	capMiB, err := strconv.ParseInt(b.capMiB, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	g, err := strconv.ParseFloat(liveTailGrowth, 64)
	if err != nil {
		t.Fatal(err)
	}
	return catalog.DuePolicy{AgeCap: liveAgeCap, ExpressAgeCap: liveAgeCap, TailGrowth: g, Cohorts: liveCohorts,
		CopyFloor: objstore.TailFloor(objstore.DefaultLimits, b.readsBack, capMiB<<20)}
}

// liveBackend is the storage of one live run.
type liveBackend struct {
	store   objstore.Store
	flags   []string // storage flags, the same for the auditor and novasim
	env     []string // the processes' extra environment (S3 credentials)
	bucket  string   // the standard bucket: standard slots, every settled object
	express []string // the express bucket set (zones za, zb)
	// traffic: novasim's --flight-bytes and --rate, the auditor's cap
	flightBytes, rate, capMiB string
	// readsBack: the daemons' probe of the server finds copies from their
	// own objects read back (objstore.S3Config.ReadsBackCopies: versitygw)
	readsBack bool
}

type liveOpener func(t *testing.T, root string) liveBackend

func liveFileStore(t *testing.T, root string) liveBackend {
	b := teststore.File(t, teststore.Options{Zones: 2, Root: filepath.Join(root, "store")})
	return liveBackend{store: b.Store, bucket: b.Std, express: b.Express, flags: b.Flags(),
		flightBytes: "64KiB", rate: "1MiB", capMiB: "1"}
}

func liveS3Store(t *testing.T, _ string) liveBackend {
	b := teststore.S3(t, teststore.Options{Zones: 2, Prefix: "live"})
	// Objects of up to 8 MiB: tail rewrites copy the standing object's
	// bytes as server-side parts, the new records are gathered and staged.
	return liveBackend{store: b.Store, bucket: b.Std, express: b.Express, flags: b.Flags(), env: b.Env(),
		flightBytes: "256KiB", rate: "2MiB", capMiB: "8", readsBack: true}
}

// liveDaemon is one daemon's place (a pod): its star, zone and data
// directory survive restarts; each incarnation has its own holder name.
type liveDaemon struct {
	name, star, zone string
	dataDir          string
	inc              int
	armed            string // the crash point this incarnation carries, or ""
	p                *proc
	logs             []*lineLog // every incarnation's output
}

func (d *liveDaemon) holder() string { return fmt.Sprintf("%s.%d", d.name, d.inc) }

// liveFigures are a run's counts.
type liveFigures struct {
	sigkill, sigterm, crashed, restarts int
}

type liveRunEnv struct {
	t       *testing.T
	e       *crashEnv
	b       liveBackend
	rnd     *rand.Rand
	daemons []*liveDaemon
	writer  *liveWriter
	fig     liveFigures
}

func liveRun(t *testing.T, d time.Duration, seed uint64, open liveOpener) {
	ctx := context.Background()
	db, url := testenv.MigratedDB(t)
	root := t.TempDir()
	b := open(t, root)
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: liveStars[0], ExpressStar: liveStars[1], Streams: 10,
		ExpressShare: 0.3, FenceWindow: 3, Content: sim.DefaultContent(seed % 1000)}); err != nil {
		t.Fatal(err)
	}
	r := &liveRunEnv{t: t, b: b, rnd: rand.New(rand.NewPCG(seed, 0x6c697665)),
		e: &crashEnv{t: t, ctx: ctx, url: url, root: root, db: db, fs: b.store, bucket: b.bucket, env: b.env,
			seen: map[string]uint32{}, stars: liveStars, express: b.express}}
	t.Cleanup(r.dumpLogs)
	for _, star := range liveStars {
		for _, zone := range []string{"za", "zb"} {
			name := star + "-" + zone
			dm := &liveDaemon{name: name, star: star, zone: zone, dataDir: filepath.Join(root, "data-"+name)}
			r.daemons = append(r.daemons, dm)
			r.start(dm, "")
		}
	}
	w := newLiveWatcher(ctx, db, b.store, b.bucket, liveStars)
	w.policy = livePolicy(t, b)
	stopWatch := w.start(500 * time.Millisecond)
	defer stopWatch() // when the run fails early

	writer := r.startWriter(d)
	r.writer = writer
	started := time.Now()
	var wrote time.Duration
	defer func() { r.figures(writer, w, wrote) }() // on failure too
	stopErase := r.eraseWhileWriting(250 * time.Millisecond)
	r.chaos(writer)
	wrote = time.Since(started)
	erasures := stopErase()
	writer.finish(t)

	r.quiesce()
	r.converge()
	time.Sleep(liveGrace + time.Second)
	r.cycles(2, "after the grace")
	stopWatch()
	w.final()
	w.report(t)
	if w.deferred[liveStars[0]] == 0 {
		t.Errorf("star %s: the tail-growth rule was never seen holding a stream back or making one wait for its turn", liveStars[0])
	}
	t.Logf("most streams held back or waiting for their cohort's turn at once: %v", w.deferred)

	r.e.checkSettled()
	r.e.checkReferenced()
	r.e.checkClean() // multipart uploads too
	r.checkSlotsReaped()
	r.e.checkErasuresApplied()
	t.Logf("erasures recorded while writing: %d", erasures)
	r.novasimCheck()
}

// eraseWhileWriting records, every period until stopped, an erasure of a
// few records of a random stream: half of them in what is settled (the
// erase step rewrites those objects while the writer absorbs into the
// same streams), half at the head (records in transit: settle writes
// tombstones). The returned function stops it and says how many it
// recorded.
func (r *liveRunEnv) eraseWhileWriting(period time.Duration) func() int {
	stop, done := make(chan struct{}), make(chan int)
	rnd := rand.New(rand.NewPCG(r.rnd.Uint64(), 0x65726173))
	go func() {
		n := 0
		defer func() { done <- n }()
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			streams := r.e.streams()
			st := streams[rnd.IntN(len(streams))]
			lo, hi := st.LowRecord, st.NextRecord
			if rnd.IntN(2) == 0 {
				hi = st.SettledThrough
			} else {
				lo = max(lo, st.SettledThrough)
			}
			if hi-lo < 4 {
				continue
			}
			first := lo + rnd.Int64N(hi-lo-3)
			if _, err := r.e.db.Erasures().RecordErasure(r.e.ctx, st.ID, first, 1+rnd.Int64N(3)); err != nil && !errors.Is(err, catalog.ErrBadErasure) {
				r.t.Errorf("record an erasure: %v", err) // ErrBadErasure: another range at that first record already
				return
			}
			n++
		}
	}()
	return func() int { close(stop); return <-done }
}

// figures logs the run's counts: kills, cycles, settles, the writer's
// flights and faults, what the watcher saw.
func (r *liveRunEnv) figures(writer *liveWriter, w *liveWatcher, wrote time.Duration) {
	t, db, ctx := r.t, r.e.db, r.e.ctx
	fig := r.fig
	var runs, ok, published, adopted, settled, slotsReaped, objectsReaped int64
	outcomes := map[string]int{}
	var tokens []string
	for _, star := range liveStars {
		rs, err := db.Ledger().LastRuns(ctx, star, 1<<20)
		if err != nil {
			t.Errorf("figures: %v", err)
			return
		}
		for _, run := range rs {
			runs++
			outcomes[run.Outcome]++
			switch run.Outcome {
			case catalog.RunOK:
				ok++
			case catalog.RunLostLease, "":
				// a killed leader's cycle, or one cut off by its lost lease
			default:
				t.Logf("%s: cycle %d (%s) %s: %s", star, run.ID, run.Holder, run.Outcome, run.Error)
			}
			published += run.Counts.ObjectsPublished
			adopted += run.Counts.ObjectsAdopted
			settled += run.Counts.StreamsSettled
			slotsReaped += run.Counts.SlotsReaped
			objectsReaped += run.Counts.ObjectsReaped
		}
		l, _, err := db.Leases().CurrentLease(ctx, star)
		if err != nil {
			t.Errorf("figures: %v", err)
			return
		}
		tokens = append(tokens, fmt.Sprintf("%s %d", star, l.Token))
	}
	ws, unplayed := "still running", []string(nil)
	if writer.exited() {
		ws, unplayed = writer.summary(), writer.unplayed()
	}
	w.mu.Lock()
	polls, objects, rewrites, quarantines, halts := w.polls, len(w.objects), len(w.rewrites), len(w.quarantines), len(w.halts)
	w.mu.Unlock()
	t.Logf("live traffic (%s, writer %s): kills %d SIGKILL + %d SIGTERM, %d crash-point self-kills, %d restarts; "+
		"lease tokens %s; cycles %d (%d ok; outcomes %v), %d stream settles, %d objects published, %d adopted, "+
		"%d slots and %d objects reaped; writer: %s; watcher: %d polls, %d settled objects seen, %d rewritten; quarantines %d, halts %d",
		t.Name(), wrote.Round(time.Second), fig.sigkill, fig.sigterm, fig.crashed, fig.restarts,
		strings.Join(tokens, ", "), runs, ok, outcomes, settled, published, adopted, slotsReaped, objectsReaped,
		ws, polls, objects, rewrites, quarantines, halts)
	if fig.sigkill == 0 || ok == 0 || published == 0 || len(unplayed) != 0 {
		t.Errorf("the run exercised too little: %d SIGKILLs, %d ok cycles, %d objects published, writer faults never played: %v",
			fig.sigkill, ok, published, unplayed)
	}
}

// dumpLogs copies into the log of a failed test every warning and error
// the daemons and the writer logged, and the last lines of each, and keeps
// everything they logged in a file under the temporary directory.
func (r *liveRunEnv) dumpLogs() {
	if !r.t.Failed() {
		return
	}
	f, err := os.CreateTemp("", "nova-live-*.log")
	if err != nil {
		r.t.Errorf("keep the logs: %v", err)
		return
	}
	defer f.Close()
	dump := func(name string, lines []string) {
		for i, line := range lines {
			line = strings.TrimSuffix(line, "\n")
			fmt.Fprintf(f, "%s: %s\n", name, line)
			if i >= len(lines)-20 || !strings.Contains(line, `"level":"INFO"`) && !strings.Contains(line, `"level":"DEBUG"`) {
				r.t.Logf("%s: %s", name, line)
			}
		}
	}
	for _, d := range r.daemons {
		for i, l := range d.logs {
			dump(fmt.Sprintf("%s.%d", d.name, i+1), l.lines())
		}
	}
	if r.writer != nil {
		dump("novasim", r.writer.log.lines())
	}
	r.t.Logf("every line the daemons and the writer logged: %s", f.Name())
}

// start starts an incarnation of the daemon, with a crash point armed when
// point is set.
func (r *liveRunEnv) start(d *liveDaemon, point string) {
	d.inc++
	d.armed = point
	env := append([]string(nil), r.b.env...)
	if point != "" {
		env = append(env, crashpoint.EnvVar+"="+point)
	}
	args := append([]string{"--star", d.star, "--data-dir", d.dataDir, "--location", d.zone,
		"--schedule", "@every 1s", "--idle-record-interval", "0s", "--denorm-linger", "0s", "--express-denorm-linger", "0s",
		"--denorm-tail-growth", liveTailGrowth, "--denorm-tail-cohorts", strconv.Itoa(liveCohorts),
		"--denorm-age-cap", liveAgeCap.String(), "--express-denorm-age-cap", liveAgeCap.String(),
		"--denorm-output-cap-mib", r.b.capMiB, "--denorm-chunk-target-kib", "64", "--reap-grace", liveGrace.String(),
		"--lease-ttl", liveTTL.String(), "--lease-renew", "500ms", "--shutdown-timeout", liveStop.String(),
		"--log-level", "debug"}, r.b.flags...)
	if point != "" {
		r.event("start %s armed at %s", d.holder(), point)
	}
	d.p = startServeWith(r.t, d.holder(), r.e.url, serveOptions{env: env, quiet: true}, args...)
	d.logs = append(d.logs, d.p.out)
}

// chaos kills and restarts daemons until the writer exits: every 1-5 s a
// daemon (a star's leader in 60% of the kills) gets SIGKILL (80%) or
// SIGTERM (20%) and restarts at once, with a random crash point armed in a
// quarter of the restarts; a daemon that killed itself at its crash point
// restarts too.
func (r *liveRunEnv) chaos(w *liveWriter) {
	next := time.Now().Add(r.between(time.Second, 5*time.Second))
	for !w.exited() {
		time.Sleep(100 * time.Millisecond)
		for _, d := range r.daemons {
			if d.p.exited() {
				r.selfKilled(d)
				r.restart(d)
			}
		}
		if time.Now().Before(next) {
			continue
		}
		next = time.Now().Add(r.between(time.Second, 5*time.Second))
		d := r.victim()
		if r.rnd.Float64() < 0.8 {
			r.event("SIGKILL %s", d.holder())
			r.send(d, syscall.SIGKILL)
			<-d.p.done
			r.fig.sigkill++
		} else {
			r.term(d)
		}
		r.restart(d)
	}
}

// selfKilled accounts for a daemon that exited on its own: only its armed
// crash point may have killed it.
func (r *liveRunEnv) selfKilled(d *liveDaemon) {
	var ee *exec.ExitError
	if d.armed == "" || !errors.As(d.p.err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		r.t.Fatalf("%s (crash point %q) exited on its own: %v", d.holder(), d.armed, d.p.err)
	}
	r.event("%s killed itself at %s", d.holder(), d.armed)
	r.fig.crashed++
}

func (r *liveRunEnv) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rnd.Int64N(int64(hi-lo)))
}

// victim is a star's current leader in 60% of the draws, else any daemon.
func (r *liveRunEnv) victim() *liveDaemon {
	if r.rnd.Float64() < 0.6 {
		l, live, err := r.e.db.Leases().CurrentLease(r.e.ctx, liveStars[r.rnd.IntN(len(liveStars))])
		if err == nil && live {
			for _, d := range r.daemons {
				if d.holder() == l.Holder && !d.p.exited() {
					return d
				}
			}
		}
	}
	return r.daemons[r.rnd.IntN(len(r.daemons))]
}

// event logs a kill or an armed start with the wall-clock time, to line
// it up with the daemons' logs.
func (r *liveRunEnv) event(format string, args ...any) {
	r.t.Logf("%s %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// send signals the daemon; one that has just exited (at its crash point)
// is no error.
func (r *liveRunEnv) send(d *liveDaemon, sig syscall.Signal) {
	if err := d.p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		r.t.Fatalf("%s %s: %v", sig, d.holder(), err)
	}
}

// term stops the daemon with SIGTERM: it must drain and exit 0, unless
// its armed crash point killed it during the drain.
func (r *liveRunEnv) term(d *liveDaemon) {
	r.event("SIGTERM %s", d.holder())
	r.send(d, syscall.SIGTERM)
	r.fig.sigterm++
	code := d.p.wait(liveStop + 15*time.Second)
	var ee *exec.ExitError
	switch {
	case code == 0:
	case d.armed != "" && errors.As(d.p.err, &ee) && ee.Sys().(syscall.WaitStatus).Signal() == syscall.SIGKILL:
		r.event("%s killed itself at %s while draining", d.holder(), d.armed)
		r.fig.crashed++
	default:
		r.t.Errorf("%s exited %d after SIGTERM: %v", d.holder(), code, d.p.err)
	}
}

// restart starts the next incarnation, armed at a random crash point (its
// 1st to 3rd hit) one time in four.
func (r *liveRunEnv) restart(d *liveDaemon) {
	point := ""
	if r.rnd.Float64() < 0.25 {
		all := crashPoints()
		point = fmt.Sprintf("%s:%d", all[r.rnd.IntN(len(all))], 1+r.rnd.IntN(3))
	}
	r.fig.restarts++
	r.start(d, point)
}

// quiesce ends the chaos: a daemon still carrying a crash point is stopped
// with SIGTERM and restarted unarmed, a dead one restarted, so that every
// daemon runs and no cycle from now on is killed.
func (r *liveRunEnv) quiesce() {
	for _, d := range r.daemons {
		switch {
		case d.p.exited():
			r.selfKilled(d)
		case d.armed != "":
			r.term(d)
		default:
			continue
		}
		r.fig.restarts++
		r.start(d, "")
	}
}

// lastRun is the ID of the star's latest run (0 when none).
func (r *liveRunEnv) lastRun(star string) int64 {
	rs, err := r.e.db.Ledger().LastRuns(r.e.ctx, star, 1)
	if err != nil {
		r.t.Fatal(err)
	}
	if len(rs) == 0 {
		return 0
	}
	return rs[0].ID
}

// cycles waits until n cycles of every star that started after this call
// ended ok, and returns them; a cycle that does not end ok is logged.
func (r *liveRunEnv) cycles(n int, what string) map[string][]catalog.Run {
	base := map[string]int64{}
	for _, star := range liveStars {
		base[star] = r.lastRun(star)
	}
	out := map[string][]catalog.Run{}
	eventually(r.t, 60*time.Second, fmt.Sprintf("%d ok cycles of every star %s", n, what), func() bool {
		done := true
		for _, star := range liveStars {
			rs, err := r.e.db.Ledger().LastRuns(r.e.ctx, star, 50)
			if err != nil {
				r.t.Fatal(err)
			}
			var ok []catalog.Run
			for i := len(rs) - 1; i >= 0; i-- {
				run := rs[i]
				if run.ID <= base[star] || run.EndedAt == nil {
					continue
				}
				if run.Outcome == catalog.RunOK {
					ok = append(ok, run)
				}
			}
			out[star] = ok
			done = done && len(ok) >= n
		}
		return done
	})
	for _, star := range liveStars {
		out[star] = out[star][:n]
	}
	return out
}

// converge: within two cycles after the last holds ended (the age cap
// after the writer stopped: the tail-growth rule holds a stream at most
// that long), every star's due work is settled: no due marker,
// settled_through = next_record.
func (r *liveRunEnv) converge() {
	time.Sleep(liveAgeCap)
	runs := r.cycles(2, "after the writer stopped and the age cap passed")
	for _, star := range liveStars {
		for _, run := range runs[star] {
			r.t.Logf("%s: cycle %d after the writer stopped: %s, %d streams settled, %d objects published",
				star, run.ID, run.Outcome, run.Counts.StreamsSettled, run.Counts.ObjectsPublished)
		}
		due, err := r.e.db.Streams().DueMarkers(r.e.ctx, star)
		if err != nil {
			r.t.Fatal(err)
		}
		if len(due) != 0 {
			r.t.Errorf("star %s: %d due markers left two cycles after the writer stopped and the age cap passed", star, len(due))
		}
	}
	for _, st := range r.e.streams() {
		if st.SettledThrough != st.NextRecord {
			r.t.Errorf("stream %s (%s) not converged within two cycles: settled %d of %d", st.ID, st.Star, st.SettledThrough, st.NextRecord)
		}
	}
}

// checkSlotsReaped: after the grace no slot behind its star's trim cursor
// is left in any bucket.
func (r *liveRunEnv) checkSlotsReaped() {
	cursors := map[string]pos{}
	for _, star := range liveStars {
		st, err := r.e.db.Trim().TrimState(r.e.ctx, star)
		if err != nil {
			r.t.Fatal(err)
		}
		if st.HasCursor {
			cursors[star] = pos{st.Cursor.Epoch, st.Cursor.Seq}
		}
	}
	for _, bucket := range append([]string{r.b.bucket}, r.b.express...) {
		err := r.b.store.List(r.e.ctx, bucket, "", func(o objstore.ObjectInfo) error {
			key := o.Key
			star, ep, seq, err := bundlefmt.ParseSlotKey(key)
			if err != nil {
				return nil // not a slot
			}
			if c, ok := cursors[star]; ok && (pos{int64(ep), int64(seq)}).less(c) {
				r.t.Errorf("slot %s/%s behind the trim cursor %v left after the grace", bucket, key, c)
			}
			return nil
		})
		if err != nil {
			r.t.Fatal(err)
		}
	}
}

// novasimCheck runs `novasim check` (every star, records from the settled
// objects and the slots, the contract's invariants): it must pass.
func (r *liveRunEnv) novasimCheck() {
	cmd := exec.Command(novasimBinary(r.t), append([]string{"check", "--database-url", r.e.url, "--location", "za"}, r.b.flags...)...)
	cmd.Env = append(os.Environ(), r.b.env...)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(string(out), "OK\n") {
		r.t.Errorf("novasim check: %v\n%s", err, out)
		return
	}
	r.t.Logf("novasim check: %s", strings.TrimSpace(string(out)))
}

// liveWriter is a running `novasim write` over every star.
type liveWriter struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
	log    *lineLog
	done   chan struct{}
	err    error
}

// startWriter starts novasim write for d on every star, with every fault of
// the write path and a retention move every 1.5 s.
func (r *liveRunEnv) startWriter(d time.Duration) *liveWriter {
	args := append([]string{"write", "--database-url", r.e.url, "--location", "za",
		"--duration", d.String(), "--flight-interval", "100ms", "--flight-bytes", r.b.flightBytes, "--rate", r.b.rate,
		"--absorb-flights", "2", "--fail-failover", "0.02", "--fail-lost", "0.03", "--fail-crash", "0.02",
		"--fail-lost-reply", "0.03", "--retention-every", "1500ms", "--progress", "line",
		"--log-format", "json", "--log-level", "info"}, r.b.flags...)
	w := &liveWriter{cmd: exec.Command(novasimBinary(r.t), args...), done: make(chan struct{}),
		log: &lineLog{t: r.t, name: "novasim", addr: make(chan string, 1), quiet: true}}
	w.cmd.Env = append(os.Environ(), r.b.env...)
	w.cmd.Stdout, w.cmd.Stderr = &w.stdout, w.log
	if err := w.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.done)
	}()
	r.t.Cleanup(func() {
		if !w.exited() {
			_ = w.cmd.Process.Kill()
			<-w.done
		}
		w.log.close()
	})
	return w
}

func (w *liveWriter) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// finish waits for the writer; it must have exited 0.
func (w *liveWriter) finish(t *testing.T) {
	t.Helper()
	<-w.done
	if w.err != nil {
		t.Fatalf("novasim write: %v\n%s", w.err, w.stdout.String())
	}
}

var writeSummary = regexp.MustCompile(`star (\S+): (\d+) flights \((\d+) absorbed in \d+ transactions, (\d+) never absorbed\), (\d+) records, .*` +
	`faults: (\d+) failovers, (\d+) crashes, (\d+) lost, (\d+) lost replies; (\d+) retention moves`)

// summary is the writer's figures per star, from its report lines.
func (w *liveWriter) summary() string {
	var parts []string
	for _, m := range writeSummary.FindAllStringSubmatch(w.stdout.String(), -1) {
		parts = append(parts, fmt.Sprintf("%s %s flights (%s absorbed, %s never), %s records, %s failovers, %s crashes, %s lost, %s lost replies, %s retention moves",
			m[1], m[2], m[3], m[4], m[5], m[6], m[7], m[8], m[9], m[10]))
	}
	if len(parts) == 0 {
		return strings.TrimSpace(w.stdout.String())
	}
	return strings.Join(parts, "; ")
}

// unplayed names the faults (failovers, crashes, lost flights, lost
// replies, retention moves) the writer played on no star.
func (w *liveWriter) unplayed() []string {
	names := []string{"failovers", "crashes", "lost flights", "lost replies", "retention moves"}
	played := make([]bool, len(names))
	for _, m := range writeSummary.FindAllStringSubmatch(w.stdout.String(), -1) {
		for i := range names {
			played[i] = played[i] || m[6+i] != "0"
		}
	}
	var out []string
	for i, p := range played {
		if !p {
			out = append(out, names[i])
		}
	}
	return out
}
