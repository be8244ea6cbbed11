package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/reconcile"
)

// rewindPlan is when an episode's metastore is rewound: a backup taken at
// the start of round backup, restored at the start of round restore
// (docs/architecture.md#the-fault-explorer).
type rewindPlan struct {
	backup, restore int
}

// rewindSource is the source of an episode's rewind draws: one of its own,
// so that an episode without a rewind draws as it did before.
func rewindSource(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x726577696e64)) } // "rewind"

// rewinds reports whether the seed's episode rewinds its metastore: one
// in five. It then runs on a database of its own.
func rewinds(seed uint64) bool { return rewindSource(seed).IntN(5) == 0 }

// planRewind draws the rounds of a rewinding episode's backup and restore
// among its rounds (at least three): the backup at the start of a round
// after the first, the restore at the start of a later one.
func planRewind(seed uint64, rounds int) *rewindPlan {
	r := rewindSource(seed)
	if r.IntN(5) != 0 || rounds < 3 {
		return nil
	}
	b := 1 + r.IntN(rounds-2)
	return &rewindPlan{backup: b, restore: b + 1 + r.IntN(rounds-1-b)}
}

// backup takes pg_dump -Fc of the episode's metastore at a round boundary
// (nothing runs: every cycle of the round before has ended).
func (ep *episode) backup(t testing.TB, round int) bool {
	path := filepath.Join(ep.dir, "metastore.dump")
	if out, err := exec.Command("pg_dump", "-Fc", "-f", path, ep.url).CombinedOutput(); err != nil {
		ep.fail("pg_dump: %v\n%s", err, out)
		return false
	}
	ep.dump = path
	ep.note("round %d: backup of the metastore (pg_dump -Fc)", round)
	return true
}

// restore rewinds the metastore: every leader is killed, the backup is
// restored into a fresh database and the episode (its handle, its URL,
// new leaders of the same names) is pointed at it, while the store keeps
// everything written since the backup. The first cycle must then refuse
// to run (the rewind check) when the store holds a confirmed marker above
// the restored mark, and run otherwise; reconcile --apply then rebuilds
// the metastore from the store and lifts the halt.
func (ep *episode) restore(t testing.TB, ctx context.Context, round int) bool {
	for _, l := range ep.all {
		l.shut()
	}
	url, drop := testenv.FreshDatabaseDroppable(t)
	ep.drops = append(ep.drops, drop)
	if out, err := exec.Command("pg_restore", "--exit-on-error", "--no-owner", "-d", url, ep.dump).CombinedOutput(); err != nil {
		ep.fail("pg_restore: %v\n%s", err, out)
		return false
	}
	db, err := catalog.Open(ctx, url)
	if err != nil {
		ep.fail("open the restored metastore: %v", err)
		return false
	}
	ep.closers = append(ep.closers, db.Close)
	if err := db.CheckSchema(ctx); err != nil {
		ep.fail("the restored metastore: %v", err)
		return false
	}
	ep.db, ep.url, ep.restored = db, url, true
	// The dead leaders' leases run out (a restored lease row names a
	// holder of the backup's time).
	ep.expire(ctx)
	for i, old := range ep.leaders {
		l, err := ep.newLeader(t, old.name)
		if err != nil {
			ep.fail("%v", err)
			return false
		}
		ep.leaders[i], ep.all = l, append(ep.all, l)
	}
	want, why, err := ep.behind(ctx)
	if err != nil {
		ep.fail("%v", err)
		return false
	}
	ep.note("round %d: the metastore restored from the backup into a fresh database; every leader killed and started again on it; %s", round, why)
	l := ep.leaders[ep.rnd.IntN(len(ep.leaders))]
	if want {
		halted := false
		for try := 1; try <= 5 && !halted; try++ {
			ch := l.start(cycle.Options{Trigger: daemon.TriggerOnce})
			var res cycleResult
			select {
			case res = <-ch:
			case <-time.After(ep.x.stuck):
				ep.fail("cycle of %s after the restore did not end within %s", l.name, ep.x.stuck)
				return false
			}
			switch {
			case res.err == nil:
				ep.fail("cycle %d of %s after the restore ran on a metastore behind the store's marks: %s", try, l.name, why)
				return false
			case isRewound(res.err):
				halted = true
				ep.note("round %d: %s's cycle refused to run: %v", round, l.name, res.err)
			default:
				ep.judge(l, res, "cycle after the restore")
				if len(ep.failures) > 0 {
					return false
				}
				ep.note("round %d: %s's cycle after the restore failed (%v): again", round, l.name, res.err)
			}
		}
		if !halted {
			ep.fail("no cycle of %s refused to run after the restore in 5 tries", l.name)
			return false
		}
		ep.refused = true
		st, err := ep.db.Ledger().DaemonState(ctx, ep.star)
		if err != nil || !cycle.IsRewoundReason(st.HaltedReason) {
			ep.fail("after the refused cycle the star's halted_reason is %q (%v), want %s", st.HaltedReason, err, cycle.ReasonRewound)
			return false
		}
		// Every leader refuses while the halt stands.
		m := ep.leaders[(ep.indexOf(l)+1)%len(ep.leaders)]
		res := <-m.start(cycle.Options{Trigger: daemon.TriggerOnce})
		if !isRewound(res.err) {
			ep.fail("cycle of %s on the halted star: %v, want the rewound halt", m.name, res.err)
			return false
		}
	} else {
		// No begin was committed since the backup (a marker written and
		// never confirmed at most): nothing proves the metastore behind,
		// and a cycle runs (judged as any: no halt).
		ep.note("round %d: %s runs a cycle on the restored metastore", round, l.name)
		if !ep.await(l, l.start(cycle.Options{Trigger: daemon.TriggerOnce}), "cycle after the restore") {
			return false
		}
	}
	return ep.reconcile(ctx, l, round)
}

// isRewound reports whether a cycle refused to run because the metastore
// is behind the store (the halt it makes, or the halt it finds).
func isRewound(err error) bool {
	var rw *cycle.RewoundError
	return err != nil && (errors.As(err, &rw) || cycle.IsRewoundReason(cycle.HaltReason(err)))
}

// behind reports whether the store proves the restored metastore behind:
// walking the markers from the restored mark up, as a begin does, a
// confirmed one stands before the first number with no marker.
func (ep *episode) behind(ctx context.Context) (bool, string, error) {
	m, err := ep.db.Restore().Mark(ctx, ep.star)
	if err != nil {
		return false, "", fmt.Errorf("mark: %w", err)
	}
	for n := m.N + 1; ; n++ {
		if _, err := ep.b.Store.Head(ctx, ep.b.Std, bundlefmt.MarkKey(ep.star, uint64(n))); errors.Is(err, objstore.ErrNotFound) {
			return false, fmt.Sprintf("restored mark %d, no confirmed marker above it (no begin committed since the backup)", m.N), nil
		} else if err != nil {
			return false, "", err
		}
		_, err := ep.b.Store.Head(ctx, ep.b.Std, bundlefmt.MarkConfirmKey(ep.star, uint64(n)))
		if err == nil {
			return true, fmt.Sprintf("restored mark %d, confirmed marker %d in the store: the cycles must refuse", m.N, n), nil
		}
		if !errors.Is(err, objstore.ErrNotFound) {
			return false, "", err
		}
	}
}

// reconcile runs auditor reconcile --apply in process, through the
// wiring cmdReconcile runs (reconcileRun), with leader l's parts (its
// store, topology and settler) under the star's lease, through the fault
// store; a run that fails (the store not read whole, most often) is run
// again, with the faults stopped after three. Records lost or unsound
// objects fail the episode (but the objects the script damaged on
// purpose).
func (ep *episode) reconcile(ctx context.Context, l *leader, round int) bool {
	// The leader's lease hook, as its daemon's; reconcile's own crash
	// points are left unarmed (nil), so an arm meant for a cycle does not
	// stop it.
	r := reconcileRun{cfg: l.cfg, dc: l.dc, db: l.db, parts: l.parts, log: l.log, leaseCrash: l.hook, apply: true, concurrency: 4}
	var rep reconcile.Report
	var err error
	defer ep.inj.SetEnabled(true)
	for try := 1; try <= 5; try++ {
		if try == 4 {
			// The store's faults fail most runs of a reconcile (it reads
			// every object); the operator's later reruns find the store
			// recovered.
			ep.inj.SetEnabled(false)
			ep.note("round %d: the store's faults stop for reconcile's reruns", round)
		}
		rep, err = r.run(l.ctx)
		ep.reconciles++
		var held *catalog.LeaseHeldError
		if err == nil || errors.As(err, &held) || errors.Is(err, catalog.ErrNotFound) {
			break
		}
		ep.note("round %d: reconcile --apply by %s failed (%v): again", round, l.name, err)
	}
	if err != nil {
		ep.fail("reconcile --apply: %v", err)
		return false
	}
	var b strings.Builder
	rep.Print(&b)
	ep.note("round %d: reconcile --apply by %s: %s", round, l.name, strings.TrimSpace(lastLine(b.String())))
	// Forgotten records (past a restored next_record, in objects the
	// forgotten future settled) are the write path's loss: its restore
	// hands their numbers out again. Lost ones that the metastore knows
	// live (at or above its low_record) would be the auditor's: the
	// script draws no retention or erasure between the backup and the
	// restore. Below the low_record they are records retention retired
	// before the backup, whose trim the backup had not seen: not a loss,
	// and reconcile reports them retired, not lost (the low_record read
	// here, after it, excuses a lost range too).
	retired := rep.RetiredRecords
	for _, s := range rep.Streams {
		if len(s.Lost) == 0 {
			continue
		}
		id, err := bundlefmt.ParseStreamID(s.Stream)
		if err != nil {
			ep.fail("reconcile's stream %q: %v", s.Stream, err)
			continue
		}
		st, err := ep.db.Streams().Stream(ctx, id)
		if err != nil {
			ep.fail("stream %s: %v", s.Stream, err)
			continue
		}
		for _, r := range s.Lost {
			if r.To <= st.LowRecord {
				retired += r.To - r.From
				continue
			}
			ep.fail("reconcile --apply: records [%d, %d) of stream %s (low_record %d) lost: %s\n%s", r.From, r.To, s.Stream, st.LowRecord, r.Why, b.String())
		}
	}
	if retired > 0 {
		ep.note("round %d: reconcile reports %d records retired, below their stream's low_record (retired before the backup)", round, retired)
	}
	for _, s := range rep.Streams {
		for _, p := range s.Unsound {
			if !ep.damagedKeys[p.Key] {
				ep.fail("reconcile --apply: unsound object %s not damaged on purpose: %s", p.Key, p.Error)
			}
		}
	}
	st, err := ep.db.Ledger().DaemonState(ctx, ep.star)
	switch {
	case err != nil:
		ep.fail("daemon state: %v", err)
	case st.Halted():
		ep.fail("the star is still halted after reconcile --apply: %q", st.HaltedReason)
	}
	return len(ep.failures) == 0
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}
