package main

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/reconcile"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/trim"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// TestCrashMatrix runs the real auditor binary against real Postgres and the
// file backend with novasim traffic (failover, lost flights, a retention
// move), kills it with SIGKILL at every crash point
// (NOVA_AUDITOR_CRASHPOINT) at its 1st, 2nd and 3rd hit, restarts it, and
// checks the invariants of docs/architecture.md#crash-points-and-the-crash-matrix: every record once with the
// right bytes, every catalog entry's object present and valid, no settled
// key written twice with different bytes, nothing referenced missing, no
// publish intent, sidecar or open upload left, no stray settled object
// after the grace, the trim cursor never backwards, convergence within two
// cycles. At n=1 every point the backend can reach must be reached.
func TestCrashMatrix(t *testing.T) {
	crashMatrix(t, "file backend", fileCrashStore, map[crashpoint.Point]string{
		settle.CrashAfterSidecarStaged:      "n/a: the file backend copies every piece locally (nothing is gathered or staged)",
		settle.CrashAfterPartGathered:       "n/a: the file backend copies every piece locally (nothing is gathered or staged)",
		settle.CrashEraseAfterSidecarStaged: "n/a: the file backend copies every piece locally (nothing is gathered or staged)",
		settle.CrashEraseAfterPartGathered:  "n/a: the file backend copies every piece locally (nothing is gathered or staged)",
	})
}

// strayNA: the sweep arms only strays older than --stray-guard (which must
// exceed the matrix's 1 h reap grace), and only the file backend can date
// an object back (its mtime); an S3 object's LastModified is the server's.
const strayNA = "n/a: no stray can be older than the guard on S3 (LastModified is the server's), so none is put"

// TestCrashMatrixS3 runs the same matrix on versitygw with objects big
// enough for multipart assembly: parts copied server side, parts gathered
// and staged as pending sidecars, resumed after the kill; the keys are
// under a key prefix. It also holds deploy/iam's policies to what the
// auditor asks of S3 (iam_test.go): the auditor binaries reach versitygw
// through a recording proxy, the store contract suite and `auditor
// doctor` run through it beside the matrix, and once all have run every
// request must be allowed and every grant used.
func TestCrashMatrixS3(t *testing.T) {
	if testing.Short() {
		t.Skip("crash matrix runs real processes")
	}
	rec := recordForIAM(t)
	crashMatrix(t, "versitygw", recordedS3CrashStore(rec), map[crashpoint.Point]string{trim.CrashStraysArmed: strayNA})
}

// preludes: a point reached only after an earlier crash elsewhere. An
// adoption needs a completed object its commit never recorded.
var preludes = map[crashpoint.Point]crashpoint.Point{settle.CrashAfterAdoptionRead: settle.CrashAfterComplete,
	settle.CrashEraseAfterAdoptionRead: settle.CrashEraseAfterComplete}

// twoRanges: points hit once per released slot range. For them a clean
// cycle runs before the grace is skipped, so the armed cycle has two
// ranges due (the previous round's and that cycle's) and n = 2 is reached.
var twoRanges = map[crashpoint.Point]bool{trim.CrashSlotsBeforeDelete: true, trim.CrashSlotsAfterDelete: true}

func crashMatrix(t *testing.T, backend string, open crashStore, notApplicable map[crashpoint.Point]string) {
	if testing.Short() {
		t.Skip("crash matrix runs real processes")
	}
	bin := auditorBinary(t)
	var mu sync.Mutex
	table := map[string]string{}
	t.Cleanup(func() {
		var b strings.Builder
		fmt.Fprintf(&b, "\n%-28s %-2s %s\n", "crash point ("+backend+")", "n", "outcome")
		for _, p := range cycleCrashPoints() {
			for n := 1; n <= 3; n++ {
				fmt.Fprintf(&b, "%-28s %-2d %s\n", p, n, table[fmt.Sprintf("%s:%d", p, n)])
			}
		}
		t.Log(b.String())
	})
	for _, point := range cycleCrashPoints() {
		for n := 1; n <= 3; n++ {
			armed := fmt.Sprintf("%s:%d", point, n)
			why, na := notApplicable[point]
			t.Run(armed, func(t *testing.T) {
				t.Parallel()
				died := crashRun(t, bin, armed, open, 0)
				for seeds := uint64(100); died == 0 && n == 1 && !na && seeds <= 200; seeds += 100 {
					// The traffic depends on its seeds and on timing (a
					// failover's fence races the PUTs): one run may not make
					// the work a point sits in. A point must be reached in
					// one of three runs of different traffic (a point behind
					// a prelude, as settle.after-adoption-read, is reached in
					// few rounds of a run).
					t.Logf("%s not reached in a run; another with other seeds (%d)", point, seeds)
					died = crashRun(t, bin, armed, open, seeds)
				}
				outcome := fmt.Sprintf("killed in %d of 3 rounds, recovered, invariants hold", died)
				switch {
				case died == 0 && na:
					outcome = why + "; invariants hold"
				case died == 0 && n == 1:
					t.Errorf("%s was never reached: the traffic no longer exercises it", point)
					outcome = "NOT REACHED"
				case died == 0:
					outcome = "fewer than n hits in every armed cycle; invariants hold"
				case na:
					t.Errorf("%s was reached on a backend said not to reach it", point)
				}
				mu.Lock()
				table[armed] = outcome
				mu.Unlock()
			})
		}
	}
}

// crashStore opens the store of a crash run and returns the flags and
// environment that point the auditor at it, and the traffic's size.
type crashStore func(t *testing.T, root string) (store objstore.Store, flags, env []string, flightBytes int64, capMiB string)

func fileCrashStore(t *testing.T, root string) (objstore.Store, []string, []string, int64, string) {
	b := teststore.File(t, teststore.Options{Root: filepath.Join(root, "store")})
	return b.Store, b.Flags(), b.Env(), 256 << 10, "1"
}

func s3CrashStore(t *testing.T, _ string) (objstore.Store, []string, []string, int64, string) {
	b := teststore.S3(t, teststore.Options{Prefix: "crash"})
	return b.Store, b.Flags(), b.Env(), 8 << 20, "16"
}

// recordedS3CrashStore is s3CrashStore under the key prefix iamKeyPrefix,
// with the auditor binaries' requests going through rec; the test makes
// and checks the buckets around it.
func recordedS3CrashStore(rec *testenv.S3Recorder) crashStore {
	return func(t *testing.T, _ string) (objstore.Store, []string, []string, int64, string) {
		b := teststore.S3(t, teststore.Options{Prefix: "crash", Tune: func(c *objstore.S3Config) { c.KeyPrefix = iamKeyPrefix }})
		b.S3 = rec.Env()
		return b.Store, append([]string{"--key-prefix", iamKeyPrefix}, b.Flags()...), b.Env(), 8 << 20, "16"
	}
}

type crashEnv struct {
	t           *testing.T
	ctx         context.Context
	bin         string
	url         string
	root        string
	db          *catalog.DB
	fs          objstore.Store
	bucket      string
	common      []string
	env         []string
	flightBytes int64
	seen        map[string]uint32 // every settled object's CRC as first seen
	stars       []string          // the stars checked (default s1)
	express     []string          // the express bucket set (slots of express chains)
	fsRoot      string            // the file backend's root ("" on S3)
}

// newCrashEnv is a fresh database with a star of streams, a store, and the
// flags that point the auditor binary at both.
func newCrashEnv(t *testing.T, bin string, open crashStore) *crashEnv {
	db, url := testenv.MigratedDB(t)
	root := t.TempDir()
	fs, flags, procEnv, flightBytes, capMiB := open(t, root)
	e := crashEnvOn(t, bin, db, url, root, fs, flags, procEnv, flightBytes, capMiB)
	streams := 6
	if flightBytes > 1<<20 {
		// Big chunks: parts copied server side. The two hottest streams'
		// objects are multipart; the third's share is small enough for one
		// object a round, which settles in a batch (settle/pipeline.go).
		streams = 3
	}
	if _, err := sim.Setup(e.ctx, db, sim.SetupOptions{Star: "s1", Streams: streams, FenceWindow: 2, Content: sim.DefaultContent(5)}); err != nil {
		t.Fatal(err)
	}
	return e
}

// crashEnvOn is a crash env over an existing metastore (migrated, with
// star s1) and store, as a crashStore opens it: flags end with the
// standard bucket's --bucket (teststore.Backend.Flags with no express
// set). Data directories go under root. It sets up nothing.
func crashEnvOn(t *testing.T, bin string, db *catalog.DB, url, root string, fs objstore.Store, flags, procEnv []string, flightBytes int64, capMiB string) *crashEnv {
	ctx := context.Background()
	// The lease's ttl stands only for a process stalled past it: a killed
	// process's lease is expired by run (expireDeadLease), and a cycle that
	// ends releases its own. 3 s was once outlived by a cycle starved of
	// CPU while the test packages ran in parallel (renewals stalled, the
	// lease lost in the middle of an erase): a flake, not a crash.
	e := &crashEnv{t: t, ctx: ctx, bin: bin, url: url, root: root, db: db, fs: fs, seen: map[string]uint32{}, stars: []string{"s1"},
		bucket: flags[len(flags)-1], env: procEnv, flightBytes: flightBytes,
		common: append([]string{"--star", "s1", "--database-url", url,
			"--data-dir", filepath.Join(root, "data"), "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--reap-grace", "1h", "--reap-batch-size", "1",
			"--lease-ttl", "10s", "--lease-renew", "100ms", "--holder", "crash-test", "--denorm-output-cap-mib", capMiB,
			"--denorm-chunk-target-kib", "64", "--log-format", "json", "--log-level", "warn", "--stray-guard", "2h"}, flags...)}
	for i := 0; i+1 < len(flags); i++ {
		if flags[i] == "--fs-root" {
			e.fsRoot = flags[i+1]
		}
	}
	return e
}

// crashRun runs three rounds of traffic, each with its first cycle armed at
// point, restarts after every kill, and checks the invariants; it returns
// how many armed cycles were killed.
func crashRun(t *testing.T, bin, point string, open crashStore, seeds uint64) int {
	e := newCrashEnv(t, bin, open)
	// Round 1 settles new streams (fresh objects, multipart when big);
	// round 2 adds traffic, so tails are rewritten and the first round's
	// slot reaps fall due; round 3 reaps the superseded revisions. Each round's first cycle is armed; a killed
	// cycle is restarted, and two clean cycles must converge.
	var cursors []pos
	died := 0
	for round := uint64(1); round <= 3; round++ {
		if round < 3 { // round 3: no traffic, only the armed reaps of the old revisions and slots
			ws := e.write(seeds+round, sim.Faults{Failover: 0.05, Lost: 0.05})
			// A failover can leave every flight of a round unabsorbed (its
			// fence poisons what the old writer had in flight): top the
			// traffic up without faults until the round absorbed some and
			// some stream has records in transit.
			for extra := uint64(0); (ws.Absorbed < 3 || !e.hasTransit(4)) && extra < 3; extra++ {
				t.Logf("round %d absorbed %d flights: more without faults", round, ws.Absorbed)
				ws.Absorbed += e.write(seeds+10*round+extra+10, sim.Faults{}).Absorbed
			}
		}
		if round == 1 {
			e.eraseInTransit() // settle writes tombstones; the erase step applies them
		}
		if round == 3 {
			e.eraseSettled() // the erase step rewrites settled objects
		}
		if round == 2 {
			e.retentionMove()
		}
		e.putStrays(round)
		base := crashpoint.Point(strings.SplitN(point, ":", 2)[0])
		if round == 2 && twoRanges[base] {
			if code, out := e.run(""); code != 0 {
				t.Fatalf("clean cycle before the armed one, round %d: exit %d: %s", round, code, out)
			}
			e.snapshot()
		}
		if round >= 2 {
			// The grace of everything armed so far ends now: the armed
			// cycle has reaps to do, while the restart cycles (however slow
			// the machine) never reap what the armed cycle just armed.
			e.skipGrace()
		}
		if pre, ok := preludes[base]; ok {
			if code, out := e.run(string(pre)); code != 0 && code != -int(syscall.SIGKILL) {
				t.Fatalf("prelude cycle (%s) of round %d: exit %d: %s", pre, round, code, out)
			}
			e.snapshot()
		}
		code, out := e.run(point)
		if code == -int(syscall.SIGKILL) {
			died++
		} else if code != 0 {
			t.Fatalf("armed cycle of round %d: exit %d: %s", round, code, out)
		}
		e.snapshot()
		e.checkReferenced()
		cursors = append(cursors, e.cursor())
		// Restart (the same holder name, as a restarted pod; the killed
		// process's lease was expired by run, as its ttl would).
		for i := 0; i < 2; i++ {
			if code, out := e.run(""); code != 0 {
				t.Fatalf("restart cycle %d of round %d: exit %d: %s", i+1, round, code, out)
			}
			e.snapshot()
			e.checkReferenced()
			cursors = append(cursors, e.cursor())
		}
		// Converged within the two cycles: everything settled, no publish
		// left open.
		e.checkSettled()
		if in, err := e.db.Settle().Intents(e.ctx, "s1", "publish", 0); err != nil || len(in) != 0 {
			t.Fatalf("round %d: publish intents open after two clean cycles: %+v %v", round, in, err)
		}
	}
	e.skipGrace()
	// The first cycle after the grace reaps the revisions the rewrites
	// superseded; the next applies the erasures nothing holds any more.
	for i := 0; i < 2; i++ {
		if code, out := e.run(""); code != 0 {
			t.Fatalf("cycle %d after the grace: exit %d: %s", i+1, code, out)
		}
		e.snapshot()
		e.checkReferenced()
		cursors = append(cursors, e.cursor())
	}
	e.checkErasuresApplied()
	for i := 1; i < len(cursors); i++ {
		if cursors[i].less(cursors[i-1]) {
			t.Fatalf("trim cursor moved backwards: %v", cursors)
		}
	}
	e.checkSettled()
	e.checkClean()
	return died
}

// retentionMove raises the low_record (the write path's retention) of the
// stream with the most catalog entries into the middle of its unsettled
// records (to its next_record if it has one entry only): settle skips the
// refs wholly below it and starts a new run past the gap, and retention
// removes the entries below it, arming their objects' reaps. The other streams keep their tails (rewritten by the
// next settle, arming the old revisions' reaps).
func (e *crashEnv) retentionMove() {
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		e.t.Fatal(err)
	}
	var hot catalog.Stream
	most := -1
	for _, st := range streams {
		ents, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ents) > most || (len(ents) == most && st.NextRecord > hot.NextRecord) {
			hot, most = st, len(ents)
		}
	}
	low := hot.SettledThrough + (hot.NextRecord-hot.SettledThrough)/2
	if most < 2 {
		// A lone entry is the tail, which the next settle may extend past
		// low: retire the whole stream so that retention surely runs.
		low = hot.NextRecord
	}
	if err := writepath.New(e.db).RaiseLowRecord(e.ctx, hot.ID, low); err != nil {
		e.t.Fatal(err)
	}
}

// hasTransit reports whether some stream has at least n records in
// transit (absorbed, not settled).
func (e *crashEnv) hasTransit(n int64) bool {
	for _, st := range e.streams() {
		if st.NextRecord-st.SettledThrough >= n {
			return true
		}
	}
	return false
}

// eraseInTransit records three erasures of records not yet settled, in
// three streams.
func (e *crashEnv) eraseInTransit() {
	n := 0
	for _, st := range e.streams() {
		if n < 3 && st.NextRecord-st.SettledThrough >= 4 {
			if _, err := e.db.Erasures().RecordErasure(e.ctx, st.ID, st.SettledThrough+1, 2); err != nil {
				e.t.Fatal(err)
			}
			n++
		}
	}
	if n == 0 {
		e.t.Fatal("no stream with records in transit to erase")
	}
}

// eraseSettled records, for every stream, an erasure inside its last
// settled object and one across the boundary of its first two.
func (e *crashEnv) eraseSettled() {
	for _, st := range e.streams() {
		ents, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		if len(ents) == 0 {
			continue
		}
		last := ents[len(ents)-1]
		if last.RecordCount >= 4 {
			if _, err := e.db.Erasures().RecordErasure(e.ctx, st.ID, last.FirstRecord+1, 2); err != nil {
				e.t.Fatal(err)
			}
		}
		if len(ents) >= 2 && ents[1].FirstRecord == ents[0].EndRecord() {
			if _, err := e.db.Erasures().RecordErasure(e.ctx, st.ID, ents[0].EndRecord()-1, 2); err != nil {
				e.t.Fatal(err)
			}
		}
	}
}

// checkErasuresApplied: after the grace, every erasure is applied (and
// novasim check, run by checkSettled, found tombstones exactly there).
func (e *crashEnv) checkErasuresApplied() {
	total := 0
	for _, st := range e.streams() {
		ers, err := e.db.Erasures().ErasuresOf(e.ctx, st.ID, 0, 1<<62)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, er := range ers {
			total++
			if !er.Applied {
				e.t.Errorf("stream %s: erasure [%d, +%d) not applied after the grace", st.ID, er.FirstRecord, er.RecordCount)
			}
		}
	}
	if total == 0 {
		e.t.Error("no erasure was recorded")
	}
}

func (e *crashEnv) skipGrace() {
	if err := writepath.New(e.db).SkipGrace(e.ctx, "s1", time.Hour); err != nil {
		e.t.Fatal(err)
	}
}

func (e *crashEnv) write(session uint64, faults sim.Faults) sim.WriteStats {
	// Flights are filled to flightBytes (never cut by the interval), so
	// the traffic does not depend on the machine's speed.
	flights, interval := int64(10), time.Minute
	if e.flightBytes > 1<<20 {
		flights = 4
	}
	ws, err := sim.Write(e.ctx, e.db, sim.Storage{Store: e.fs, Standard: e.bucket}, sim.WriteOptions{Star: "s1", Flights: flights,
		FlightBytes: e.flightBytes, FlightInterval: interval, Faults: faults, Session: session})
	if err != nil {
		e.t.Fatal(err)
	}
	ws.Slots = nil
	e.t.Logf("traffic of session %d: %+v", session, ws)
	return ws
}

// putStrays puts, on the file backend, three settled objects no metadata
// names, under three streams' prefixes at keys far past any record (no
// erasure waits on them), dated three hours back: past the 2 h guard, so
// the round's first cycle arms their reaps, one transaction each
// (--reap-batch-size 1), reaching strays.after-arm three times.
func (e *crashEnv) putStrays(round uint64) {
	if e.fsRoot == "" {
		return
	}
	old := time.Now().Add(-3 * time.Hour)
	for i, st := range e.streams() {
		if i == 3 {
			break
		}
		key := bundlefmt.SettledKey(st.Bucket, st.ID, uint64(st.Epoch), 1<<40+round, 50)
		if err := e.fs.PutIfAbsent(e.ctx, e.bucket, key, []byte("a stray")); err != nil {
			e.t.Fatal(err)
		}
		if err := os.Chtimes(filepath.Join(e.fsRoot, e.bucket, filepath.FromSlash(key)), old, old); err != nil {
			e.t.Fatal(err)
		}
	}
}

// run runs one cycle of the real binary; with point set, armed to SIGKILL
// itself there. It returns the exit code (minus the signal when killed).
// On the file backend, where putStrays dates strays back, every cycle
// sweeps them; on S3, where none can be older than the guard, the sweep
// runs on its own schedule (the star's first cycle), sparing every cycle
// a listing of every stream.
func (e *crashEnv) run(point string) (int, string) {
	args := []string{"run", "--once"}
	if e.fsRoot != "" {
		args = append(args, "--sweep-strays")
	}
	cmd := exec.Command(e.bin, append(args, e.common...)...)
	cmd.Env = append(os.Environ(), e.env...)
	if point != "" {
		cmd.Env = append(cmd.Env, crashpoint.EnvVar+"="+point)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			e.expireDeadLease()
			return -int(ws.Signal()), string(out)
		}
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return 0, string(out)
}

// expireDeadLease ends the lease a killed process held. A restarted
// process is another process: it may take the lease only once the dead
// one's has run out (a live lease is never taken from a process with the
// same holder name). Expiring it stands for waiting out the ttl.
func (e *crashEnv) expireDeadLease() {
	l, live, err := e.db.Leases().CurrentLease(e.ctx, "s1")
	if err != nil && !errors.Is(err, catalog.ErrNotFound) {
		e.t.Fatal(err)
	}
	if live {
		if err := e.db.Leases().ReleaseLease(e.ctx, l.Fence); err != nil {
			e.t.Fatal(err)
		}
	}
}

// snapshot records every settled object's CRC and fails if a key seen
// before now holds other bytes (create-once: never written twice).
func (e *crashEnv) snapshot() {
	err := e.fs.List(e.ctx, e.bucket, "buckets/", func(o objstore.ObjectInfo) error {
		key, size := o.Key, o.Size
		b, _, err := e.fs.GetRange(e.ctx, e.bucket, key, 0, size)
		if errors.Is(err, objstore.ErrNotFound) {
			return nil // reaped meanwhile
		}
		if err != nil {
			return err
		}
		c := crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli))
		if old, ok := e.seen[key]; ok && old != c {
			e.t.Errorf("%s was written twice with different bytes", key)
		}
		e.seen[key] = c
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

type pos struct{ epoch, seq int64 }

func (p pos) less(q pos) bool { return p.epoch < q.epoch || (p.epoch == q.epoch && p.seq < q.seq) }

func (e *crashEnv) cursor() pos {
	st, err := e.db.Trim().TrimState(e.ctx, "s1")
	if err != nil {
		e.t.Fatal(err)
	}
	if !st.HasCursor {
		return pos{}
	}
	return pos{st.Cursor.Epoch, st.Cursor.Seq}
}

// checkSettled: novasim check finds every record once from settled objects
// (which exist and decode), and every stream is settled to next_record.
func (e *crashEnv) checkSettled() {
	rep, err := sim.Check(e.ctx, e.db, sim.Storage{Store: e.fs, Standard: e.bucket}, sim.CheckOptions{SettledOnly: true})
	if err != nil {
		e.t.Fatal(err)
	}
	if !rep.OK() {
		e.t.Fatalf("novasim check: %+v", rep)
	}
	streams := e.streams()
	if len(streams) == 0 {
		e.t.Fatal("no streams")
	}
	for _, st := range streams {
		if st.SettledThrough != st.NextRecord {
			e.t.Fatalf("stream %s not converged: settled %d of %d", st.ID, st.SettledThrough, st.NextRecord)
		}
	}
}

// checkClean: after the grace, no open intent, no pending sidecar, no
// settled object the catalog does not reference.
func (e *crashEnv) checkClean() {
	for _, star := range e.stars {
		for _, kind := range []string{"publish", "reap"} {
			if in, err := e.db.Settle().Intents(e.ctx, star, kind, 0); err != nil || len(in) != 0 {
				e.t.Errorf("star %s: open %s intents: %+v %v", star, kind, in, err)
			}
		}
	}
	// Every data directory under the root (one per process that ran).
	dirs, err := filepath.Glob(filepath.Join(e.root, "data*", "pending"))
	if err != nil {
		e.t.Fatal(err)
	}
	for _, dir := range dirs {
		ents, _ := os.ReadDir(dir)
		for _, ent := range ents {
			e.t.Errorf("pending sidecar left: %s", filepath.Join(dir, ent.Name()))
		}
	}
	referenced := e.catalogKeys()
	if s3s, ok := e.fs.(*s3store.Store); ok {
		out, err := s3s.Client().ListMultipartUploads(e.ctx, &s3.ListMultipartUploadsInput{Bucket: &e.bucket})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, u := range out.Uploads {
			e.t.Errorf("multipart upload left open: %s (upload %s, initiated %s)", *u.Key, *u.UploadId, u.Initiated)
		}
	}
	err = e.fs.List(e.ctx, e.bucket, "buckets/", func(o objstore.ObjectInfo) error {
		if !referenced[o.Key] {
			e.t.Errorf("stray settled object %s", o.Key)
		}
		return nil
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

// streams lists the streams of every checked star.
func (e *crashEnv) streams() []catalog.Stream {
	var out []catalog.Stream
	for _, star := range e.stars {
		streams, err := e.db.Streams().StreamsOfStar(e.ctx, star)
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, streams...)
	}
	return out
}

// catalogKeys is the key of every catalog entry of the star.
func (e *crashEnv) catalogKeys() map[string]bool {
	keys := map[string]bool{}
	for _, st := range e.streams() {
		entries, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, en := range entries {
			keys[bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(en.Revision))] = true
		}
	}
	return keys
}

// checkReferenced: nothing the catalog or a live ref names is missing, in
// any state (right after a kill too): every catalog entry's object and
// every slot a remaining span ref names exists.
func (e *crashEnv) checkReferenced() {
	for key := range e.catalogKeys() {
		if _, err := e.fs.Head(e.ctx, e.bucket, key); err != nil {
			e.t.Fatalf("cataloged object %s: %v", key, err)
		}
	}
	for _, st := range e.streams() {
		refs, err := writepath.New(e.db).RefsOfStream(e.ctx, st.ID)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, r := range refs {
			buckets := []string{e.bucket}
			if st.Class == catalog.ClassExpress {
				buckets = e.express
			}
			for _, sl := range r.Slots {
				key := bundlefmt.SlotKey(st.Star, uint64(sl.Epoch), uint64(sl.Seq))
				for _, b := range buckets {
					if _, err := e.fs.Head(e.ctx, b, key); err != nil {
						e.t.Fatalf("slot %s/%s named by a live ref of stream %s: %v", b, key, st.ID, err)
					}
				}
			}
		}
	}
}

// cycleCrashPoints are the crash points a cycle passes: every point but
// reconcile's (TestReconcileCrashes kills reconcile at each of those).
func cycleCrashPoints() []crashpoint.Point {
	return slices.DeleteFunc(crashPoints(), func(p crashpoint.Point) bool { return slices.Contains(reconcile.CrashPoints(), p) })
}
