package daemon

import (
	"context"
	"errors"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// adminState is what the leader knows of the persisted state.
type adminState struct {
	loaded bool
	state  catalog.DaemonState
	// rerun: the open trigger requests a cycle already tried run at once
	// too (the term just began, the star is runnable again, or the last
	// cycle did not record what came of its triggers).
	rerun       bool
	newTriggers bool // open trigger requests wait for a cycle now
}

func (s adminState) runnable() bool { return s.loaded && !s.state.Paused && !s.state.Halted() }

// admin consumes the open pause, resume and release requests (their
// effect is already persisted; consuming records that the leader saw
// them), reloads the pause and halt, and notes trigger requests no cycle
// has run yet (they are consumed by the cycle that runs them). Which those
// are is read from the requests themselves each time (open, and no
// attempt recorded), not from the ids seen so far: ids are drawn at insert
// and commit in any order, and a request that commits after a higher id
// was run is as new as any. Triggers a cycle already tried (it failed, or
// the star halted or was paused) wait for the retry, or run at once when
// the star becomes runnable again.
func (d *Daemon) admin(t *term, st *adminState) {
	ctx, cancel := context.WithTimeout(t.ctx, 5*time.Second)
	defer cancel()
	// The open requests and the pause and halt state in one read snapshot
	// (one commit per poll); a consumed pause or resume reads the state again.
	var (
		open  []catalog.AdminRequest
		state catalog.DaemonState
	)
	err := d.reqs.ReadOnly(ctx, func(ctx context.Context) error {
		var err error
		if open, err = d.reqs.AdminRequests(ctx, d.cfg.Star, true, 1000); err != nil {
			return err
		}
		state, err = d.reqs.DaemonState(ctx, d.cfg.Star)
		return err
	})
	if err != nil {
		d.log.Warn("reading admin requests and the pause and halt state failed", "err", err)
		return
	}
	others, untried, triggers := false, false, false
	for _, r := range open {
		if r.Kind == catalog.AdminTrigger {
			triggers = true
			untried = untried || r.Attempts == 0
		} else {
			others = true
		}
	}
	if others {
		reqs, err := d.reqs.ConsumeAdminRequests(ctx, t.lease.Fence, []string{catalog.AdminPause, catalog.AdminResume, catalog.AdminRelease})
		d.m.tx(err)
		if errors.Is(err, catalog.ErrStaleToken) {
			t.lose(err)
			return
		}
		if err != nil {
			d.log.Warn("consuming admin requests failed", "err", err)
		}
		for _, r := range reqs {
			d.m.AdminRequests.WithLabelValues(r.Kind).Inc()
			d.log.Info("admin request", "id", r.ID, "kind", r.Kind, "stream", streamAttr(r.Stream), "by", r.RequestedBy)
		}
		if len(reqs) > 0 {
			d.poke()
			if state, err = d.db.DaemonState(ctx, d.cfg.Star); err != nil {
				d.log.Warn("reading the pause and halt state failed", "err", err)
				return
			}
		}
	}
	if st.loaded && state.Paused != st.state.Paused {
		d.log.Info("pause changed", "paused", state.Paused)
	}
	if state.Halted() && (!st.loaded || !st.state.Halted()) {
		d.log.Error("halted: no cycle runs until auditor resume", "reason", state.HaltedReason, "since", state.HaltedAt)
	}
	if !state.Halted() && st.loaded && st.state.Halted() {
		d.log.Info("halt cleared by resume")
	}
	if st.loaded && !st.runnable() && !state.Paused && !state.Halted() {
		st.rerun = true // runnable again: the triggers a cycle left open run now
	}
	st.loaded, st.state = true, state
	st.newTriggers = untried || (st.rerun && triggers)
	d.m.Paused.Set(b2f(state.Paused))
	d.m.Halted.Set(b2f(state.Halted()))
	d.m.Rewound.Set(b2f(cycle.IsRewoundReason(state.HaltedReason)))
}

func containsStream(ids []catalog.StreamID, id catalog.StreamID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// listen keeps a LISTEN connection open and turns notifications for our
// star into wake-ups. After every (re)connection it wakes once, since
// notifications sent meanwhile were missed; the admin poll covers the rest.
func (d *Daemon) listen(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		l, err := d.reqs.Listen(ctx)
		if err != nil {
			d.log.Debug("listen failed; retrying", "in", wait, "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second)
			continue
		}
		wait = time.Second
		d.signal()
		for {
			payload, err := l.Wait(ctx)
			if err != nil {
				if ctx.Err() == nil {
					d.log.Debug("listen connection lost; reconnecting", "err", err)
				}
				break
			}
			if payload == d.cfg.Star {
				d.signal()
			}
		}
		l.Close()
	}
}

func (d *Daemon) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// streamAttr formats an optional stream for logs.
func streamAttr(id *catalog.StreamID) string {
	if id == nil {
		return ""
	}
	return id.String()
}
