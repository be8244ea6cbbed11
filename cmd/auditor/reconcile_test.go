package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/internal/testenv/teststore"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/reconcile"
)

// restoredFile is a file-backed drill taken once to the backup older than
// the grace; fork gives each subtest its own copy of the store and a
// fresh restore of the dump, halted by its first cycle.
type restoredFile struct {
	d    *drill
	dump string
}

func newRestoredFile(t *testing.T) *restoredFile {
	d := newDrill(t, auditorBinary(t), novasimBinary(t), drillBackends[0])
	return &restoredFile{d: d, dump: backupOlderThanGrace(d)}
}

// fork is a drill over a copy of the store, pointed at a fresh restore of
// the dump, after the cycle that halts it.
func (r *restoredFile) fork(t *testing.T) *drill {
	t.Helper()
	root := filepath.Join(t.TempDir(), "store")
	if out, err := exec.Command("cp", "-a", r.d.b.Root, root).CombinedOutput(); err != nil {
		t.Fatalf("copy the store: %v\n%s", err, out)
	}
	b := teststore.File(t, teststore.Options{Root: root})
	d := &drill{t: t, ctx: context.Background(), bin: r.d.bin, simBin: r.d.simBin, be: r.d.be, b: b, root: t.TempDir(),
		finalHead: r.d.finalHead}
	d.restore(r.dump)
	if code, out := d.e.run(""); code != exitRewound {
		t.Fatalf("the restored metastore's first cycle: exit %d, want %d\n%s", code, exitRewound, out)
	}
	return d
}

// tiles checks that every stream's catalog entries run contiguously to
// its settled_through, within next_record: a stream half reconciled
// would not.
func tiles(t *testing.T, d *drill, what string) {
	t.Helper()
	for _, st := range d.e.streams() {
		v, err := d.e.db.Restore().ReconcileView(d.ctx, st.ID, "", "")
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range v.Entries {
			if i > 0 && e.FirstRecord != v.Entries[i-1].EndRecord() {
				t.Errorf("%s: stream %s: entry at %d does not follow the one ending at %d", what, st.ID, e.FirstRecord, v.Entries[i-1].EndRecord())
			}
		}
		if n := len(v.Entries); n > 0 && v.Entries[n-1].EndRecord() != st.SettledThrough || st.SettledThrough > st.NextRecord {
			t.Errorf("%s: stream %s: entries end at %d, settled_through %d, next_record %d", what, st.ID,
				v.Entries[len(v.Entries)-1].EndRecord(), st.SettledThrough, st.NextRecord)
		}
	}
}

// finish reconciles to the end and holds the star to the drill's
// contract: nothing the metastore knows is lost.
func finish(t *testing.T, d *drill, what string) {
	t.Helper()
	d.applyReconcile(what)
	if n, _ := d.applyReconcile(what + ", again"); n != 0 {
		t.Errorf("%s: a second reconcile --apply made %d changes", what, n)
	}
	for i := 0; i < 2; i++ {
		if code, out := d.e.run(""); code != 0 {
			t.Fatalf("%s: run --once after the reconcile: exit %d\n%s", what, code, out)
		}
		time.Sleep(drillPastGrace)
	}
	d.checkKnown(what)
	d.verify(what)
}

// TestReconcileCrashes kills `reconcile --apply` at each of its crash
// points on a restored metastore: the star stays halted, no stream is
// half applied, and a rerun finishes with nothing the metastore knows
// lost.
func TestReconcileCrashes(t *testing.T) {
	t.Parallel()
	r := newRestoredFile(t)
	for _, p := range reconcile.CrashPoints() {
		t.Run(string(p), func(t *testing.T) {
			t.Parallel()
			d := r.fork(t)
			cmd := exec.Command(d.bin, append([]string{"reconcile", "--apply"}, d.e.common...)...)
			cmd.Env = append(os.Environ(), crashpoint.EnvVar+"="+string(p)+":1")
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			ws, _ := func() (syscall.WaitStatus, bool) {
				if errors.As(err, &ee) {
					w, ok := ee.Sys().(syscall.WaitStatus)
					return w, ok
				}
				return 0, false
			}()
			if !ws.Signaled() {
				t.Fatalf("reconcile --apply armed at %s was not killed: %v\n%s", p, err, out)
			}
			d.e.expireDeadLease()
			if r := d.halted(); !strings.HasPrefix(r, drillHaltReason) {
				t.Errorf("after a crash at %s the halt is %q, want the rewind's", p, r)
			}
			if code, out := d.e.run(""); code != exitRewound {
				t.Errorf("run --once after a crash at %s: exit %d, want %d\n%s", p, code, exitRewound, out)
			}
			tiles(t, d, "after the crash at "+string(p))
			finish(t, d, "after the crash at "+string(p))
		})
	}
}

// failingList fails the n-th listing of a settled prefix (counting from
// 1) after handing over one key: a store that lists partially.
type failingList struct {
	objstore.Store
	n, calls int
}

func (f *failingList) List(ctx context.Context, bucket, prefix string, fn func(objstore.ObjectInfo) error) error {
	if strings.Contains(prefix, "/streams/") {
		f.calls++
		if f.calls == f.n {
			stop := errors.New("injected: the listing broke off")
			seen := 0
			err := f.Store.List(ctx, bucket, prefix, func(o objstore.ObjectInfo) error {
				if seen++; seen > 1 {
					return stop
				}
				return fn(o)
			})
			if err == nil {
				err = stop
			}
			return err
		}
	}
	return f.Store.List(ctx, bucket, prefix, fn)
}

// TestReconcileBadInput: a stream the metastore does not know, a store
// that lists partially, and a settled object that fails its checksum.
// Each ends with a clear error or a correct report, never a stream half
// applied, and the star recovers after.
func TestReconcileBadInput(t *testing.T) {
	t.Parallel()
	r := newRestoredFile(t)

	t.Run("unknown stream", func(t *testing.T) {
		t.Parallel()
		d := r.fork(t)
		code, out, errs := d.auditor("reconcile", "--apply", "--stream", "0123456789abcdef0123456789abcdef")
		if code != exitUsage || !strings.Contains(errs, "0123456789abcdef0123456789abcdef") && !strings.Contains(errs, "01234567-89ab") {
			t.Fatalf("reconcile of an unknown stream: exit %d, want %d naming it\n%s%s", code, exitUsage, out, errs)
		}
		if r := d.halted(); !strings.HasPrefix(r, drillHaltReason) {
			t.Errorf("the halt was lifted: %q", r)
		}
	})

	t.Run("unknown star", func(t *testing.T) {
		t.Parallel()
		d := r.fork(t)
		args := []string{"reconcile", "--apply"}
		for i := 0; i < len(d.e.common); i++ {
			switch a := d.e.common[i]; {
			case a == "--star":
				i++
			case strings.HasPrefix(a, "--star="):
			default:
				args = append(args, a)
			}
		}
		cmd := exec.Command(d.bin, append(args, "--star", "nosuch")...)
		cmd.Env = append(os.Environ(), d.b.Env()...)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != exitUsage || !strings.Contains(string(out), `no star "nosuch"`) {
			t.Fatalf("reconcile of an unknown star: %v, want exit %d naming it\n%s", err, exitUsage, out)
		}
		if r := d.halted(); !strings.HasPrefix(r, drillHaltReason) {
			t.Errorf("the halt was lifted: %q", r)
		}
	})

	t.Run("listing breaks off", func(t *testing.T) {
		t.Parallel()
		d := r.fork(t)
		before := map[catalog.StreamID]string{}
		for _, st := range d.e.streams() {
			before[st.ID] = streamPrint(t, d, st.ID)
		}
		cfg, err := loadFlags(d.e.common, "star", "database-url")
		if err != nil {
			t.Fatal(err)
		}
		crash, err := envCrash()
		if err != nil {
			t.Fatal(err)
		}
		p, err := buildParts(d.ctx, cfg, d.e.db, slog.New(slog.DiscardHandler), prometheus.NewRegistry(), false, shared{crash: crash, footers: footerCache(cfg)})
		if err != nil {
			t.Fatal(err)
		}
		defer p.settler.Close()
		fl := &failingList{Store: p.store, n: 3}
		top, err := wire.Topology(cfg, fl, objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax))
		if err != nil {
			t.Fatal(err)
		}
		deps := reconcile.Deps{DB: d.e.db.Restore(), Reader: bundle.NewReader(top), Store: fl, Cutter: p.settler}
		var rep reconcile.Report
		err = daemon.WithLease(d.ctx, daemonConfig(cfg), daemon.Deps{DB: d.e.db.Ledger(), Leases: d.e.db.Leases(), Requests: d.e.db.Requests()}, func(ctx context.Context, f catalog.Fence) error {
			var err error
			rep, err = reconcile.Run(ctx, deps, reconcile.Config{Star: "s1", Apply: true, ReapGrace: cfg.ReapGrace}, f)
			return err
		})
		if !errors.Is(err, reconcile.ErrIncomplete) {
			t.Fatalf("a listing that broke off: %v, want ErrIncomplete", err)
		}
		failed := ""
		for id := range before {
			if strings.Contains(err.Error(), "stream "+id.String()+":") {
				failed = id.String()
			}
		}
		if failed == "" || len(rep.Streams) == 0 {
			t.Fatalf("the error names no stream of the star (%v), or the report has none (%d)", err, len(rep.Streams))
		}
		for id, was := range before {
			if id.String() == failed && streamPrint(t, d, id) != was {
				t.Errorf("the stream whose listing failed changed:\n%s\nwas\n%s", streamPrint(t, d, id), was)
			}
		}
		if r := d.halted(); !strings.HasPrefix(r, drillHaltReason) {
			t.Errorf("the halt was lifted after a failed reconcile: %q", r)
		}
		tiles(t, d, "after the broken listing")
		finish(t, d, "after the broken listing")
	})

	t.Run("an object fails its checksum", func(t *testing.T) {
		t.Parallel()
		d := r.fork(t)
		// An object the dry run would cut: the only one that holds its
		// stream's records (their slots and older revisions are reaped).
		out, _ := d.reconcile("--json")
		var plan reconcile.Report
		if err := json.Unmarshal([]byte(out), &plan); err != nil {
			t.Fatal(err)
		}
		var key string
		for _, s := range plan.Streams {
			if s.Cut.From != "" {
				key = s.Cut.From
				break
			}
		}
		if key == "" {
			t.Fatalf("the dry run cuts nothing: %s", out)
		}
		path := filepath.Join(d.b.Root, d.b.Std, key)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0xff // the first data byte: its chunk's DataCRC no longer holds
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, errs := d.auditor("reconcile", "--apply", "--json")
		var rep reconcile.Report
		if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitFindings {
			t.Fatalf("reconcile over a corrupt object: exit %d (want %d), %v\n%s%s", code, exitFindings, err, out, errs)
		}
		unsound := false
		for _, s := range rep.Streams {
			for _, p := range s.Unsound {
				unsound = unsound || p.Key == key
			}
		}
		if !unsound {
			t.Errorf("the corrupt object %s is not reported unsound\n%s", key, out)
		}
		// Records lost only in the corrupt object's stream, when nothing
		// else holds them; otherwise the chain went around it and nothing
		// the metastore knows is lost.
		for _, s := range rep.Streams {
			if len(s.Lost) > 0 && !strings.Contains(key, strings.ReplaceAll(s.Stream, "-", "")) {
				t.Errorf("stream %s lost records %v; only the corrupt object's stream may", s.Stream, s.Lost)
			}
		}
		t.Logf("a corrupt object: %d records reported lost, %d objects unsound", rep.LostRecords, rep.Unsound)
		for _, st := range d.e.streams() {
			v, err := d.e.db.Restore().ReconcileView(d.ctx, st.ID, "", "")
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range v.Entries {
				if bundle.EntryKey(st.Bucket, e) == key {
					t.Fatalf("the corrupt object %s was cataloged", key)
				}
			}
		}
		tiles(t, d, "after a corrupt object")
		d.verify("after a corrupt object")
	})
}

// streamPrint is a stream's row and catalog entries, to compare.
func streamPrint(t *testing.T, d *drill, id catalog.StreamID) string {
	t.Helper()
	v, err := d.e.db.Restore().ReconcileView(d.ctx, id, "", "")
	if err != nil {
		t.Fatal(err)
	}
	s := fmt.Sprintf("settled %d next %d refs %d:", v.Stream.SettledThrough, v.Stream.NextRecord, len(v.Refs))
	for _, e := range v.Entries {
		s += fmt.Sprintf(" %d+%d~%d", e.FirstRecord, e.RecordCount, e.Revision)
	}
	return s
}

// TestReconcileRecordsGivenAgain: after the restore the write path goes on
// and gives the forgotten records' numbers to other records (novasim with
// another seed: other bytes at the same numbers). Reconcile must not take
// the store's old bytes for them: where a ref's slot stands and disagrees,
// the chain ends, the refs keep the new records, and the next cycles
// settle them from their slots.
func TestReconcileRecordsGivenAgain(t *testing.T) {
	t.Parallel()
	r := newRestoredFile(t)
	d := r.fork(t)
	restored := map[catalog.StreamID]int64{}
	for _, st := range d.e.streams() {
		restored[st.ID] = st.NextRecord
	}
	conn := testenv.Conn(t, d.e.url)
	if _, err := conn.Exec(d.ctx, `UPDATE nova.sim_stars SET seed = seed + 1000 WHERE star = 's1'`); err != nil {
		t.Fatal(err)
	}
	d.writePastTheFuture()

	cfg, err := loadFlags(d.e.common, "star", "database-url")
	if err != nil {
		t.Fatal(err)
	}
	top, err := wire.Topology(cfg, d.b.Store, objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax))
	if err != nil {
		t.Fatal(err)
	}
	rd := bundle.NewReader(top)
	// The new records' bytes, from the slots their refs name.
	want := map[catalog.StreamID][]byte{}
	for _, st := range d.e.streams() {
		refs, err := writepath.New(d.e.db).RefsOfStream(d.ctx, st.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ref := range refs {
			if ref.FirstRecord < restored[st.ID] {
				continue
			}
			for _, sl := range ref.Slots {
				key := bundlefmt.SlotKey(ref.Star, uint64(sl.Epoch), uint64(sl.Seq))
				foot, err := rd.SlotFooter(d.ctx, ref.Class, key, sl.FooterOffset, sl.FooterLength)
				if err != nil {
					t.Fatal(err)
				}
				lo, _ := foot.FindStream(st.ID)
				e, err := foot.Entry(lo)
				if err != nil {
					t.Fatal(err)
				}
				data, err := rd.Chunk(d.ctx, bundle.Source{Key: key, Class: ref.Class}, e)
				if err != nil {
					t.Fatal(err)
				}
				want[st.ID] = append(want[st.ID], data...)
			}
		}
	}
	if len(want) == 0 {
		t.Fatal("novasim gave no record again after the restore")
	}

	code, out, errs := d.auditor("reconcile", "--apply", "--json")
	var rep reconcile.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != exitOK {
		t.Fatalf("reconcile --apply: exit %d, %v\n%s%s", code, err, out, errs)
	}
	differ := 0
	for _, s := range rep.Streams {
		differ += len(s.Differ)
	}
	if differ == 0 {
		t.Fatalf("no stream's records were found given again: %s", out)
	}
	for i := 0; i < 2; i++ {
		if code, out := d.e.run(""); code != 0 {
			t.Fatalf("run --once after the reconcile: exit %d\n%s", code, out)
		}
		time.Sleep(drillPastGrace)
	}
	// The catalog serves the new bytes at the numbers given again.
	for _, st := range d.e.streams() {
		if st.SettledThrough != st.NextRecord {
			t.Errorf("stream %s settled through %d of %d", st.ID, st.SettledThrough, st.NextRecord)
			continue
		}
		got := cataloged(t, d, rd, st, restored[st.ID], st.NextRecord)
		if !bytes.Equal(got, want[st.ID]) {
			t.Errorf("stream %s: records [%d, %d) read %d bytes from the catalog, the slots hold %d other ones",
				st.ID, restored[st.ID], st.NextRecord, len(got), len(want[st.ID]))
		}
	}
	d.verify("after the records given again")
	t.Logf("%d ranges of records given again since the restore were left to their refs", differ)
}

// cataloged reads the bytes of records [from, to) of a stream through its
// catalog entries.
func cataloged(t *testing.T, d *drill, rd *bundle.Reader, st catalog.Stream, from, to int64) []byte {
	t.Helper()
	v, err := d.e.db.Restore().ReconcileView(d.ctx, st.ID, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, en := range v.Entries {
		if en.EndRecord() <= from || en.FirstRecord >= to {
			continue
		}
		key := bundle.EntryKey(st.Bucket, en)
		foot, err := rd.StandingFooter(d.ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		chunks, err := foot.Entries()
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			if c.EndRecord() <= uint64(from) || c.FirstRecord >= uint64(to) {
				continue
			}
			data, err := rd.Chunk(d.ctx, bundle.Settled(key), c)
			if err != nil {
				t.Fatal(err)
			}
			off := uint64(0)
			for i, l := range c.Lengths {
				if r := c.FirstRecord + uint64(i); r >= uint64(from) && r < uint64(to) {
					out = append(out, data[off:off+uint64(l)]...)
				}
				off += uint64(l)
			}
		}
	}
	return out
}
