package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
)

// The restore drill: the metastore is restored from a backup (pg_dump -Fc,
// pg_restore into a fresh database) while the object store keeps
// everything that happened after the backup was taken (the "forgotten
// future": slots written and absorbed, tails rewritten, slots and
// superseded revisions reaped). The auditor must notice that its
// metastore is behind the store before it deletes or publishes anything,
// halt, and be brought back by `auditor reconcile`:
//
//   - the first `run --once` after the restore exits exitRewound, halts
//     the star with a halted_reason starting with drillHaltReason and
//     leaves the store's listing as it was;
//   - `reconcile` (a dry run) exits 0, prints what it would change and
//     changes no catalog row nor any stream's settled_through;
//   - `reconcile --apply --json` exits 0, its report counts the changes
//     (reconcileChanges) and the halt is lifted; a second apply changes
//     nothing;
//   - then two `run --once` cycles exit 0, every stream is settled
//     through its next_record and none is quarantined, `novasim check
//     --settled-only` finds every record the restored metastore knows,
//     and `auditor verify` exits 0;
//   - the write path goes on (writePastTheFuture), the auditor settles
//     what it wrote, and the paused-leader late-delete scenario of
//     TestPausedLeaderLateDelete passes on the reconciled metastore.
//
// What novasim (the write path) does against the restored metastore, as
// observed with this drill: its takeover fences the restored epoch E
// (the poison run passes every slot the forgotten future left in E, a
// 412 there being a lost flight) and writes at E+1 from seq 0. Where the
// forgotten future's slots of E+1 were reaped, the keys are free again
// and its PUTs succeed: slot keys are reused (the rule that a fenced
// writer never reuses a slot key does not survive a restore), and the
// run may exit 0. At the first slot the forgotten future left standing,
// the create-once PUT answers 412 with another writer's nonce, and the
// session stops: ErrFenced ("fenced by another writer"), exit 1, with
// the flights it absorbed before kept. It does not crash, overwrites
// nothing and breaks no row; the next run fences one epoch further, so
// after at most as many runs as the forgotten future had epochs it
// writes above them all (writePastTheFuture). It also hands out record
// numbers again from the restored next_record, numbers the forgotten
// future had absorbed and settled; novasim's records are a pure function
// of (seed, stream, record number), so the reused numbers carry the same
// bytes and novasim check cannot tell them apart (a real writer's would
// differ).

const (
	// drillHaltReason starts auditor_state.halted_reason of the halt of a
	// cycle that found its metastore behind the store (exit exitRewound).
	drillHaltReason = cycle.ReasonRewound
	// reconcileChangesField is the top-level integer of `auditor
	// reconcile --json` that counts the changes made (--apply) or that
	// would be made (a dry run).
	reconcileChangesField = "changes"

	drillStreams = 12
	drillGrace   = 2 * time.Second // --reap-grace
	// drillPastGrace is how long the drill waits for what a cycle armed
	// to fall due.
	drillPastGrace = drillGrace + 300*time.Millisecond
)

// drillBackend is the store of one drill and the size of its traffic.
type drillBackend struct {
	name        string
	open        func(t *testing.T) teststore.Backend
	flightBytes int64  // novasim --flight-bytes
	capMiB      string // --denorm-output-cap-mib
}

var drillBackends = []drillBackend{
	{"file", func(t *testing.T) teststore.Backend { return teststore.File(t, teststore.Options{}) }, 64 << 10, "1"},
	{"s3", func(t *testing.T) teststore.Backend { return teststore.S3(t, teststore.Options{Prefix: "drill"}) }, 256 << 10, "8"},
}

// drillCase is how far behind the store the backup is.
type drillCase struct {
	name string
	// before runs the traffic and cycles around the backup and returns the
	// dump.
	before func(d *drill) string
	// reaped: the store no longer holds some object or slot the backup's
	// catalog or refs name.
	reaped bool
}

var drillCases = []drillCase{
	{"older-than-grace", backupOlderThanGrace, true},
	{"async-failover", backupOneCycleBack, false},
}

// TestRestoreDrill restores the metastore from a backup on both backends,
// in the two shapes of drillCases, and holds the auditor to the contract
// above.
func TestRestoreDrill(t *testing.T) {
	t.Parallel()
	bin, simBin := auditorBinary(t), novasimBinary(t)
	for _, be := range drillBackends {
		for _, c := range drillCases {
			t.Run(be.name+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				d := newDrill(t, bin, simBin, be)
				dump := c.before(d)
				d.restore(dump)
				d.checkBehind(c.reaped)
				d.afterRestore()
			})
		}
	}
}

// backupOlderThanGrace: a first settle, more traffic left in the slots,
// the backup taken while novasim writes, then three rounds of traffic and
// a cycle past the grace each: the tails are rewritten to new revisions,
// the old ones reaped, and the slots the backup's refs name trimmed and
// reaped.
func backupOlderThanGrace(d *drill) string {
	d.write(6)
	d.cycle("first settle")
	d.write(6)
	dump := d.dumpWhileWriting()
	for round := 1; round <= 3; round++ {
		time.Sleep(drillPastGrace)
		d.write(4)
		d.cycle(fmt.Sprintf("round %d after the backup", round))
	}
	return dump
}

// backupOneCycleBack: an asynchronous replica promoted after a failover,
// one cycle behind: settled history with one round of reaps, the backup
// taken while novasim writes, then one more write and one cycle past the
// grace.
func backupOneCycleBack(d *drill) string {
	d.write(6)
	d.cycle("first settle")
	time.Sleep(drillPastGrace)
	d.write(6)
	d.cycle("second settle")
	dump := d.dumpWhileWriting()
	time.Sleep(drillPastGrace)
	d.write(4)
	d.cycle("the cycle the backup does not have")
	return dump
}

// drill is one restore drill: a store, the metastore the auditor and
// novasim run against (the original, then the restored one), and the
// crash env's flags and checks over it.
type drill struct {
	t      *testing.T
	ctx    context.Context
	bin    string // auditor
	simBin string // novasim
	be     drillBackend
	b      teststore.Backend
	root   string
	e      *crashEnv // over the current metastore
	// dumpHead is the absorbed head of the backup; finalHead the head of
	// the original metastore when it was left.
	dumpHead, finalHead pos
}

func newDrill(t *testing.T, bin, simBin string, be drillBackend) *drill {
	db, url := testenv.MigratedDB(t)
	b := be.open(t)
	d := &drill{t: t, ctx: context.Background(), bin: bin, simBin: simBin, be: be, b: b, root: t.TempDir()}
	d.point(db, url)
	if _, err := sim.Setup(d.ctx, db, sim.SetupOptions{Star: "s1", Streams: drillStreams, FenceWindow: 2, Content: sim.DefaultContent(11)}); err != nil {
		t.Fatal(err)
	}
	return d
}

// point makes the drill's processes and checks use the metastore at url.
func (d *drill) point(db *catalog.DB, url string) {
	d.e = crashEnvOn(d.t, d.bin, db, url, d.root, d.b.Store, d.b.Flags(), d.b.Env(), d.be.flightBytes, d.be.capMiB)
	// Reaps fall due within the drill (the last flag wins).
	d.e.common = append(d.e.common, "--reap-grace", drillGrace.String())
}

// simArgs are novasim's flags for the current metastore and the store.
func (d *drill) simArgs(cmd string, extra ...string) []string {
	return append(append([]string{cmd, "--star", "s1", "--database-url", d.e.url}, extra...), d.b.Flags()...)
}

// novasim runs novasim to its end and returns its exit code and output.
func (d *drill) novasim(args ...string) (int, string) {
	cmd := exec.Command(d.simBin, args...)
	cmd.Env = append(os.Environ(), d.b.Env()...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		d.t.Fatalf("novasim %s: %v", args[0], err)
	}
	return 0, string(out)
}

// writeArgs are novasim write's flags for n flights, each absorbed on its
// own; paced, about five flights a second (so that a dump runs while it
// writes), else as fast as they are written.
func (d *drill) writeArgs(n int, paced bool) []string {
	rate := int64(0)
	if paced {
		rate = 5 * d.be.flightBytes
	}
	return d.simArgs("write", "--flights", strconv.Itoa(n), "--flight-bytes", strconv.FormatInt(d.be.flightBytes, 10),
		"--flight-interval", "200ms", "--rate", strconv.FormatInt(rate, 10), "--absorb-flights", "1",
		"--progress", "none", "--log-format", "json", "--log-level", "warn")
}

// write runs novasim write for n flights; it must exit 0.
func (d *drill) write(n int) {
	d.t.Helper()
	code, out := d.novasim(d.writeArgs(n, false)...)
	if code != 0 {
		d.t.Fatalf("novasim write: exit %d\n%s", code, out)
	}
	d.t.Logf("novasim write: %s", writeLine(out))
}

// writeLine is novasim write's summary line of star s1.
func writeLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "star s1: ") {
			return l
		}
	}
	return strings.TrimSpace(out)
}

// cycle runs `auditor run --once`; it must exit 0.
func (d *drill) cycle(what string) {
	d.t.Helper()
	code, out := d.e.run("")
	if code != 0 {
		d.t.Fatalf("run --once (%s): exit %d\n%s", what, code, out)
	}
	d.t.Logf("run --once (%s): %s", what, strings.TrimSpace(out))
}

// head is the star's absorbed head.
func (d *drill) head() pos {
	st, err := d.e.db.Streams().Star(d.ctx, "s1")
	if err != nil {
		d.t.Fatal(err)
	}
	return pos{st.Epoch, st.NextSeq}
}

// dumpWhileWriting takes `pg_dump -Fc` of the metastore while novasim
// writes: the dump starts once the writer has absorbed a flight of its
// own, and the writer absorbs more after it. It returns the dump's path.
func (d *drill) dumpWhileWriting() string {
	t := d.t
	before := d.head()
	cmd := exec.Command(d.simBin, d.writeArgs(16, true)...)
	cmd.Env = append(os.Environ(), d.b.Env()...)
	var wout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &wout, &wout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	// The writer fences (a new epoch, from seq 0) and absorbs one flight at a
	// time.
	eventually(t, time.Minute, "novasim absorbed a flight before the dump", func() bool {
		select {
		case err := <-done:
			t.Fatalf("novasim write ended before the dump: %v\n%s", err, wout.String())
		default:
		}
		h := d.head()
		return h.epoch > before.epoch && h.seq >= 1
	})
	path := filepath.Join(d.root, "metastore.dump")
	start := time.Now()
	dump := exec.Command("pg_dump", "-Fc", "-f", path, d.e.url)
	if out, err := dump.CombinedOutput(); err != nil {
		t.Fatalf("pg_dump: %v\n%s", err, out)
	}
	took := time.Since(start)
	if err := <-done; err != nil {
		t.Fatalf("novasim write during the dump: %v\n%s", err, wout.String())
	}
	d.finalHead = d.head()
	t.Logf("pg_dump -Fc in %s while novasim wrote (%s); head before the writer %v, after it %v",
		took.Round(time.Millisecond), writeLine(wout.String()), before, d.finalHead)
	return path
}

// restore restores the dump into a fresh database and points the auditor
// and novasim at it; the original metastore is left alone.
func (d *drill) restore(dump string) {
	t := d.t
	url := testenv.FreshDatabase(t) // CREATE DATABASE, dropped when the test ends
	start := time.Now()
	if out, err := exec.Command("pg_restore", "--exit-on-error", "--no-owner", "-d", url, dump).CombinedOutput(); err != nil {
		t.Fatalf("pg_restore: %v\n%s", err, out)
	}
	db, err := catalog.Open(d.ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if err := db.CheckSchema(d.ctx); err != nil {
		t.Fatalf("the restored metastore: %v", err)
	}
	d.point(db, url)
	d.dumpHead = d.head()
	t.Logf("restored into a fresh database in %s: the backup's head %v, the original's %v", time.Since(start).Round(time.Millisecond), d.dumpHead, d.finalHead)
	if !d.dumpHead.less(d.finalHead) {
		t.Fatalf("the dump was not taken mid-traffic: its head %v, the writer's last %v", d.dumpHead, d.finalHead)
	}
}

// checkBehind asserts that the store is ahead of the restored metastore:
// slots past the backup's head, settled objects it does not know and,
// when reaped, objects and slots its catalog and refs name that the store
// no longer holds.
func (d *drill) checkBehind(reaped bool) {
	t, e := d.t, d.e
	known := e.catalogKeys()
	for _, kind := range []string{"publish", "reap"} {
		in, err := e.db.Settle().Intents(d.ctx, "s1", kind, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, i := range in {
			known[i.ObjectKey] = true
		}
	}
	var slotsAhead, unknownObjects int
	for key := range d.listing() {
		if _, ep, seq, err := bundlefmt.ParseSlotKey(key); err == nil {
			if !(pos{int64(ep), int64(seq)}).less(d.dumpHead) {
				slotsAhead++
			}
		} else if strings.HasPrefix(key, "buckets/") && !known[key] {
			unknownObjects++
		}
	}
	var entries, gone int
	for key := range e.catalogKeys() {
		entries++
		if d.gone(key) {
			gone++
		}
	}
	var named, slotsGone int
	for _, st := range e.streams() {
		refs, err := writepath.New(e.db).RefsOfStream(d.ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			for _, sl := range r.Slots {
				named++
				if d.gone(bundlefmt.SlotKey("s1", uint64(sl.Epoch), uint64(sl.Seq))) {
					slotsGone++
				}
			}
		}
	}
	t.Logf("the store against the backup: %d slots at or past its head, %d settled objects it does not know; "+
		"%d of its %d catalog entries' objects and %d of the %d slots its refs name are gone", slotsAhead, unknownObjects, gone, entries, slotsGone, named)
	if slotsAhead == 0 || unknownObjects == 0 {
		t.Fatal("the store is not ahead of the backup: the drill tests nothing")
	}
	if reaped && (gone == 0 || slotsGone == 0) {
		t.Fatal("the traffic after the backup did not reap what the backup names (a tail revision and a slot)")
	}
}

// gone reports whether the standard bucket does not hold key.
func (d *drill) gone(key string) bool {
	_, err := d.b.Store.Head(d.ctx, d.b.Std, key)
	if err != nil && !errors.Is(err, objstore.ErrNotFound) {
		d.t.Fatal(err)
	}
	return err != nil
}

// listing is every key of the store's standard bucket with its size.
func (d *drill) listing() map[string]int64 {
	keys := map[string]int64{}
	if err := d.b.Store.List(d.ctx, d.b.Std, "", func(o objstore.ObjectInfo) error {
		keys[o.Key] = o.Size
		return nil
	}); err != nil {
		d.t.Fatal(err)
	}
	return keys
}

// sameListing fails the test when after differs from before.
func (d *drill) sameListing(what string, before, after map[string]int64) {
	d.t.Helper()
	var diff []string
	for k, n := range before {
		if m, ok := after[k]; !ok {
			diff = append(diff, "deleted "+k)
		} else if m != n {
			diff = append(diff, fmt.Sprintf("%s: %d bytes, then %d", k, n, m))
		}
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			diff = append(diff, "created "+k)
		}
	}
	if len(diff) > 0 {
		slices.Sort(diff)
		d.t.Errorf("%s changed the store (%d keys): %s", what, len(diff), strings.Join(diff[:min(len(diff), 20)], "; "))
	}
}

// logListingChange logs how many keys of the store were created and
// deleted meanwhile (not judged).
func (d *drill) logListingChange(what string, before, after map[string]int64) {
	var created, deleted int
	for k := range after {
		if _, ok := before[k]; !ok {
			created++
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			deleted++
		}
	}
	d.t.Logf("%s: %d keys created and %d deleted in the store", what, created, deleted)
}

// fingerprint is a cheap digest of the star's catalog rows and each
// stream's settled_through.
func (d *drill) fingerprint() string {
	var rows int64
	var entries, settled string
	err := d.e.db.Pool().QueryRow(d.ctx, `SELECT
		(SELECT count(*) FROM nova.catalog c JOIN nova.streams s USING (stream_id) WHERE s.star = $1),
		(SELECT coalesce(md5(string_agg(concat_ws('/', c.stream_id, c.epoch, c.first_record, c.revision, c.record_count, c.object_bytes), ','
			ORDER BY c.stream_id, c.epoch, c.first_record)), '') FROM nova.catalog c JOIN nova.streams s USING (stream_id) WHERE s.star = $1),
		(SELECT coalesce(md5(string_agg(concat_ws('/', stream_id, settled_through), ',' ORDER BY stream_id)), '') FROM nova.streams WHERE star = $1)`,
		"s1").Scan(&rows, &entries, &settled)
	if err != nil {
		d.t.Fatal(err)
	}
	return fmt.Sprintf("%d catalog rows (md5 %s), settled_through md5 %s", rows, entries, settled)
}

// halted is the star's halted_reason ("" when not halted).
func (d *drill) halted() string {
	st, err := d.e.db.Ledger().DaemonState(d.ctx, "s1")
	if err != nil {
		d.t.Fatal(err)
	}
	return st.HaltedReason
}

// auditor runs the auditor binary with the drill's flags after args.
func (d *drill) auditor(args ...string) (code int, stdout, stderr string) {
	cmd := exec.Command(d.bin, append(args, d.e.common...)...)
	cmd.Env = append(os.Environ(), d.b.Env()...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		d.t.Fatalf("auditor %s: %v", args[0], err)
	}
	return 0, out.String(), errb.String()
}

// reconcile runs `auditor reconcile` with args; it must exit 0. It
// returns its output and how long it took.
func (d *drill) reconcile(args ...string) (string, time.Duration) {
	d.t.Helper()
	start := time.Now()
	code, out, errs := d.auditor(append([]string{"reconcile"}, args...)...)
	took := time.Since(start)
	if code != 0 {
		d.t.Fatalf("auditor reconcile %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, out, errs)
	}
	return out, took
}

// reconcileChanges reads the report of `auditor reconcile --json`: the
// whole report, and the count of changes (reconcileChangesField).
func reconcileChanges(out string) (map[string]any, int64, error) {
	var rep map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	if err := dec.Decode(&rep); err != nil {
		return nil, 0, fmt.Errorf("the report is not a JSON object: %w", err)
	}
	v, ok := rep[reconcileChangesField].(json.Number)
	if !ok {
		return rep, 0, fmt.Errorf("the report has no integer %q: %v", reconcileChangesField, rep[reconcileChangesField])
	}
	n, err := v.Int64()
	if err != nil {
		return rep, 0, fmt.Errorf("%q: %w", reconcileChangesField, err)
	}
	return rep, n, nil
}

// applyReconcile runs `reconcile --apply --json`, logs its report and
// returns the count of changes and how long it took.
func (d *drill) applyReconcile(what string) (int64, time.Duration) {
	d.t.Helper()
	out, took := d.reconcile("--apply", "--json")
	rep, n, err := reconcileChanges(out)
	if err != nil {
		d.t.Fatalf("reconcile --apply --json (%s): %v\n%s", what, err, out)
	}
	delete(rep, "streams") // per stream: too long for the log
	b, _ := json.Marshal(rep)
	d.t.Logf("reconcile --apply (%s) in %s: %d changes; report %s", what, took.Round(time.Millisecond), n, b)
	return n, took
}

var checkLine = regexp.MustCompile(`records (\d+): checked (\d+) .*missing (\d+), duplicated (\d+), wrong (\d+)`)

// checkKnown asserts that nothing the restored metastore knows is lost:
// every stream is settled through its next_record, none is quarantined,
// and `novasim check --settled-only` finds every record once, with the
// right bytes, in the settled objects. It returns how many records it
// checked. (The full check is logged, not judged: see fullCheck.)
func (d *drill) checkKnown(what string) int64 {
	t := d.t
	t.Helper()
	for _, st := range d.e.streams() {
		if st.SettledThrough != st.NextRecord {
			t.Errorf("%s: stream %s settled through %d of %d", what, st.ID, st.SettledThrough, st.NextRecord)
		}
	}
	if q, err := d.e.db.Settle().Quarantined(d.ctx, "s1"); err != nil || len(q) != 0 {
		t.Errorf("%s: quarantined: %+v %v", what, q, err)
	}
	code, out := d.novasim(d.simArgs("check", "--settled-only")...)
	m := checkLine.FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("novasim check --settled-only (%s): exit %d\n%s", what, code, out)
	}
	checked, _ := strconv.ParseInt(m[2], 10, 64)
	t.Logf("novasim check --settled-only (%s): %s", what, strings.Join(strings.Fields(out), " "))
	return checked
}

// fullCheck logs what the full `novasim check` (refs, slots, the chain)
// finds. It is not judged: the chain of the restored metastore's star
// still holds the forgotten future's slots, which its star_epochs and
// trim cursor do not account for ("slot of epoch N, which star_epochs
// does not have", a fence run slot reaped there); those are the write
// path's rows, which reconcile does not rebuild.
func (d *drill) fullCheck(what string) {
	code, out := d.novasim(d.simArgs("check", "--max-findings", "10")...)
	d.t.Logf("novasim check (%s, not judged): exit %d\n%s", what, code, out)
}

// verify runs `auditor verify`; it must exit 0.
func (d *drill) verify(what string) {
	d.t.Helper()
	code, out, errs := d.auditor("verify")
	if code != 0 {
		d.t.Fatalf("auditor verify (%s): exit %d\n%s%s", what, code, out, errs)
	}
	d.t.Logf("auditor verify (%s): %s", what, strings.TrimSpace(out))
}

// afterRestore holds the auditor to the contract, in order.
func (d *drill) afterRestore() {
	t := d.t
	// 1. The first cycle halts and changes nothing in the store (no writer
	// runs meanwhile).
	before := d.listing()
	t.Logf("the store lists %d objects before the first cycle on the restored metastore", len(before))
	start := time.Now()
	code, out := d.e.run("")
	haltTook := time.Since(start)
	if code != exitRewound {
		t.Fatalf("run --once on the restored metastore: exit %d, want %d (the metastore is behind the store: halt)\n%s", code, exitRewound, out)
	}
	if r := d.halted(); !strings.HasPrefix(r, drillHaltReason) {
		t.Fatalf("run --once exited %d and left halted_reason %q, want one starting with %q", code, r, drillHaltReason)
	}
	t.Logf("run --once on the restored metastore halted in %s: %s", haltTook.Round(time.Millisecond), d.halted())
	d.sameListing("the halted cycle", before, d.listing())

	// 2. A dry run changes nothing.
	fp := d.fingerprint()
	out, dryTook := d.reconcile()
	if strings.TrimSpace(out) == "" {
		t.Error("reconcile (dry run) printed nothing: it must say what it would change")
	}
	t.Logf("reconcile (dry run) in %s:\n%s", dryTook.Round(time.Millisecond), out)
	if after := d.fingerprint(); after != fp {
		t.Fatalf("reconcile without --apply changed the metastore: %s, then %s", fp, after)
	}
	if d.halted() == "" {
		t.Error("reconcile without --apply lifted the halt")
	}

	// 3. The apply rebuilds the catalog and lifts the halt; a second one
	// changes nothing.
	listed := d.listing()
	changes, took := d.applyReconcile("first")
	d.logListingChange("reconcile --apply", listed, d.listing())
	if changes == 0 {
		t.Error("reconcile --apply changed nothing on a metastore behind its store")
	}
	if r := d.halted(); r != "" {
		t.Fatalf("the halt is still set after reconcile --apply: %q", r)
	}
	fp, listed = d.fingerprint(), d.listing()
	if n, _ := d.applyReconcile("second"); n != 0 {
		t.Errorf("a second reconcile --apply reports %d changes, want 0", n)
	}
	if after := d.fingerprint(); after != fp {
		t.Fatalf("a second reconcile --apply changed the metastore: %s, then %s", fp, after)
	}
	d.sameListing("a second reconcile --apply", listed, d.listing())

	// 4. The auditor runs on, and nothing the restored metastore knows is
	// lost.
	d.cycle("first after the reconcile")
	d.cycle("second after the reconcile")
	checked := d.checkKnown("after the reconcile")
	d.fullCheck("after the reconcile")
	d.verify("after the reconcile")
	t.Logf("figures: the store listed %d objects before the halted cycle, which took %s; reconcile --apply took %s (%d changes), "+
		"the dry run %s; novasim checked %d records after it", len(before), haltTook.Round(time.Millisecond), took.Round(time.Millisecond),
		changes, dryTook.Round(time.Millisecond), checked)

	// 5. The write path goes on: novasim writes past the forgotten
	// future, the auditor settles what it wrote.
	d.writePastTheFuture()
	d.cycle("after the write")
	d.cycle("after the write, again")
	d.checkKnown("after the write")
	d.verify("after the write")
	d.e.checkReferenced()

	// 6. No late delete still holds on the reconciled metastore.
	pausedLeaderLateDeleteOn(t, d.e.db, d.e.url, d.b, d.be.flightBytes, d.be.capMiB)
}

// writePastTheFuture runs novasim write until a run exits 0 with the
// star's epoch at or past every slot's in the store. Against the restored
// metastore each run fences one epoch further (novasim's takeover) and
// stops, exit 1 with ErrFenced, at its first PUT on a slot the forgotten
// future left in that epoch; a slot the future wrote and reaped is free
// again and written (the slot key is reused). Any other failure fails
// the test.
func (d *drill) writePastTheFuture() {
	t := d.t
	fenced := 0
	for attempt := 1; attempt <= 10; attempt++ {
		before := d.head()
		code, out := d.novasim(d.writeArgs(4, false)...)
		t.Logf("novasim write after the restore, attempt %d from head %v: exit %d, head %v: %s", attempt, before, code, d.head(), writeLine(out))
		switch {
		case code == 0:
			if top := d.topSlotEpoch(); top <= d.head().epoch {
				t.Logf("novasim wrote past the forgotten future after %d fenced runs", fenced)
				return
			}
			continue
		case code != 1 || !strings.Contains(out, sim.ErrFenced.Error()):
			t.Fatalf("novasim write after the restore: exit %d\n%s", code, out)
		case !before.less(d.head()):
			t.Fatalf("novasim write was fenced without fencing an epoch itself: head %v\n%s", before, out)
		}
		fenced++
	}
	t.Fatal("novasim write did not get past the forgotten future's epochs in 10 runs")
}

// topSlotEpoch is the highest epoch of a slot in the store.
func (d *drill) topSlotEpoch() int64 {
	var top int64
	for key := range d.listing() {
		if _, ep, _, err := bundlefmt.ParseSlotKey(key); err == nil {
			top = max(top, int64(ep))
		}
	}
	return top
}
