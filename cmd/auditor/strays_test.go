package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/sim"
	"github.com/nova/auditor/trim"
	"github.com/nova/auditor/verify"
)

// TestStraysFoundAndSwept runs the real binaries on both backends: a
// create-once PUT that lands at a key already buried and reaped (a paused
// leader's, an SDK retry's), one above its base's high-water (what a
// metastore restored from backup leaves) and a slot put back behind the
// trim cursor are reported by `auditor verify --strays` (exit 3); `run
// --once --sweep-strays` arms none of them while they are younger than
// --stray-guard and all once they are older, and the reap of that cycle
// deletes them; the base's high-water is then above both keys, so later
// rewrites publish above them and no key is written twice.
func TestStraysFoundAndSwept(t *testing.T) {
	t.Parallel()
	bin := auditorBinary(t)
	for _, c := range []struct {
		name string
		open crashStore
	}{{"file", fileCrashStore}, {"s3", s3CrashStore}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			straysFoundAndSwept(t, newCrashEnv(t, bin, c.open))
		})
	}
}

// strayFlags: no reap grace (a rewrite's old revision goes in its own
// cycle) and a guard of seconds.
var strayFlags = []string{"--reap-grace", "0s", "--stray-guard", strayGuard.String()}

// strayGuard is long enough that the late PUTs, verify and the first
// sweep fit in it on a loaded machine (the test checks they did).
const strayGuard = 15 * time.Second

// cli runs a command of the binary with the env's flags and extra ones.
func (e *crashEnv) cli(cmd string, extra ...string) (int, string, string) {
	e.t.Helper()
	c := exec.Command(e.bin, append(append(append([]string{cmd}, e.common...), strayFlags...), extra...)...)
	c.Env = append(os.Environ(), e.env...)
	var out, errb bytes.Buffer
	c.Stdout, c.Stderr = &out, &errb
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), out.String(), errb.String()
	case err != nil:
		e.t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func (e *crashEnv) runOnce(extra ...string) {
	e.t.Helper()
	if code, out, errs := e.cli("run", append([]string{"--once"}, extra...)...); code != 0 {
		e.t.Fatalf("run --once %v: exit %d: %s %s", extra, code, out, errs)
	}
	e.snapshot()
	e.checkReferenced()
}

// verifyStrays runs `auditor verify --strays --json` and returns the
// strays by key, and the exit code.
func (e *crashEnv) verifyStrays() (map[string]trim.Stray, int) {
	e.t.Helper()
	code, out, errs := e.cli("verify", "--strays", "--json")
	var rep struct {
		Findings []verify.Finding `json:"findings"`
		Strays   *struct {
			Objects []trim.Stray `json:"objects"`
			Settled int          `json:"settled"`
			Slots   int          `json:"slots"`
		} `json:"strays"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Strays == nil {
		e.t.Fatalf("verify --strays --json: exit %d, %v: %s %s", code, err, out, errs)
	}
	if len(rep.Findings) != 0 {
		e.t.Fatalf("verify found the catalog unsound: %+v", rep.Findings)
	}
	got := map[string]trim.Stray{}
	for _, s := range rep.Strays.Objects {
		got[s.Key] = s
	}
	if rep.Strays.Settled+rep.Strays.Slots != len(got) {
		e.t.Fatalf("verify counts %d settled and %d slot strays, lists %d", rep.Strays.Settled, rep.Strays.Slots, len(got))
	}
	return got, code
}

func straysFoundAndSwept(t *testing.T, e *crashEnv) {
	e.write(1, sim.Faults{})
	e.runOnce()
	// What each settled key holds now: a late PUT of a key carries the
	// bytes its first attempt was made of.
	held := map[string][]byte{}
	for k := range e.catalogKeys() {
		a, err := e.fs.Head(e.ctx, e.bucket, k)
		if err != nil {
			t.Fatal(err)
		}
		if held[k], _, err = e.fs.GetRange(e.ctx, e.bucket, k, 0, a.Size); err != nil {
			t.Fatal(err)
		}
	}
	e.write(2, sim.Faults{})
	e.runOnce() // tails rewritten: their old revisions reaped at once, buried
	// A rewritten entry whose revision below it held (now buried and
	// gone) is known.
	var (
		st  catalog.Stream
		en  catalog.Entry
		hit bool
	)
	key := func(rev int32) string {
		return bundlefmt.SettledKey(st.Bucket, st.ID, uint64(en.Epoch), uint64(en.FirstRecord), uint32(rev))
	}
	for _, s := range e.streams() {
		ents, err := e.db.Streams().EntriesOfStream(e.ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range ents {
			if !hit && x.Revision >= 1 {
				st, en = s, x
				_, hit = held[key(x.Revision-1)]
			}
		}
	}
	if !hit {
		t.Fatal("no entry was rewritten: the traffic made no tail rewrite")
	}
	obj, _, err := e.fs.GetRange(e.ctx, e.bucket, key(en.Revision), 0, en.ObjectBytes)
	if err != nil {
		t.Fatal(err)
	}
	buried, restored := key(en.Revision-1), key(en.Revision+5)
	if _, err := e.fs.Head(e.ctx, e.bucket, buried); err == nil {
		t.Fatalf("%s was not reaped", buried)
	}
	ts, err := e.db.Trim().TrimState(e.ctx, "s1")
	if err != nil || !ts.HasCursor || (ts.Cursor == catalog.SlotPos{Epoch: ts.Epochs[0].Epoch}) {
		t.Fatalf("the trim cursor did not move: %+v %v", ts.Cursor, err)
	}
	slot := bundlefmt.SlotKey("s1", uint64(ts.Epochs[0].Epoch), 0) // behind the cursor, reaped
	putAt := time.Now()
	for k, data := range map[string][]byte{buried: held[buried], restored: obj,
		slot: bundlefmt.EncodePoison(uint64(ts.Epochs[0].Epoch), 0, 99)} {
		if err := e.fs.PutIfAbsent(e.ctx, e.bucket, k, data); err != nil {
			t.Fatalf("late PUT of %s: %v", k, err)
		}
	}
	e.snapshot()

	got, code := e.verifyStrays()
	if code != exitFindings || len(got) != 3 {
		t.Fatalf("verify --strays: exit %d, strays %v; want exit 3 and the three", code, got)
	}
	for k, kind := range map[string]string{buried: trim.StraySettled, restored: trim.StraySettled, slot: trim.StraySlot} {
		s, ok := got[k]
		if !ok || s.Kind != kind || !s.Parses || s.Bucket != e.bucket || s.Unswept != "" || s.AgeSeconds > strayGuard.Seconds() {
			t.Errorf("stray %s: %+v (listed %v)", k, s, ok)
		}
	}
	if s := got[restored]; s.Size != en.ObjectBytes || s.Stream != st.ID.String() {
		t.Errorf("stray %s: %+v, want %d bytes of stream %s", restored, s, en.ObjectBytes, st.ID)
	}

	// Younger than the guard: swept, nothing armed, nothing deleted.
	e.runOnce("--sweep-strays")
	for _, k := range []string{buried, restored, slot} {
		if _, err := e.fs.Head(e.ctx, e.bucket, k); err != nil {
			t.Fatalf("%s gone before the guard: %v", k, err)
		}
	}
	if in, err := e.db.Settle().Intents(e.ctx, "s1", "reap", 0); err != nil || len(in) != 0 {
		t.Fatalf("reaps armed before the guard: %+v %v", in, err)
	}
	if took := time.Since(putAt); took >= strayGuard {
		t.Fatalf("the PUTs, verify and the first sweep took %s, not under the guard (%s): nothing was shown", took, strayGuard)
	}
	// Past the guard by more than a listing's time resolution.
	time.Sleep(time.Until(putAt.Add(strayGuard + objstore.ListedTimeResolution + 1500*time.Millisecond)))
	// Older: armed, and the cycle's reap deletes them.
	e.runOnce("--sweep-strays")
	for _, k := range []string{buried, restored, slot} {
		if _, err := e.fs.Head(e.ctx, e.bucket, k); err == nil {
			t.Errorf("stray %s left after the sweep and the reap", k)
		}
	}
	var high int32
	if err := e.db.Pool().QueryRow(e.ctx, `SELECT high_revision FROM nova.auditor_key_revisions
		WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, st.ID, en.Epoch, en.FirstRecord).Scan(&high); err != nil || high < en.Revision+5 {
		t.Fatalf("high-water of the strays' base: %d, %v; want at least %d", high, err, en.Revision+5)
	}
	if got, code := e.verifyStrays(); code != 0 || len(got) != 0 {
		t.Fatalf("verify --strays after the sweep: exit %d, %v", code, got)
	}
	// Later rewrites publish above the strays' keys: never one of them
	// again (snapshot: no key holds two contents).
	e.write(3, sim.Faults{})
	e.runOnce()
	e.runOnce()
	after, err := e.db.Streams().EntriesOfStream(e.ctx, st.ID)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range after {
		if x.FirstRecord == en.FirstRecord && x.Revision != en.Revision && x.Revision <= en.Revision+5 {
			t.Errorf("the base of the strays published again at revision %d, not above %d", x.Revision, en.Revision+5)
		}
	}
	e.checkSettled()
	if got, code := e.verifyStrays(); code != 0 || len(got) != 0 {
		t.Fatalf("verify --strays at the end: exit %d, %v", code, got)
	}
}
