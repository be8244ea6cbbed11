package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// A trigger request is consumed only by a cycle that ran: the leader reads
// the open requests into the cycle's options, runs the cycle, and only then
// records what came of each (catalog.Requests.FinishTriggers). A crash in between
// leaves them open, so the next leader runs them again, which is harmless;
// nothing is lost. A cycle that fails or halts notes its error on the
// requests, which stay open for the retry (or the cycle after a resume); a
// lost lease or a canceled cycle leaves them for the next leader.
//
// Which requests wait for a cycle is read from nova.admin_requests each
// time the leader looks (on a NOTIFY, on the poll, after every cycle): an
// open request on which no attempt is recorded is new, whatever its id.
// Ids are drawn at insert, and transactions commit in any order, so a
// request may commit after a higher id was run; it is still consumed by the
// first cycle that starts after it commits.

// pending is the trigger requests a cycle runs.
type pending struct {
	reqs   []catalog.AdminRequest // in request order
	before map[catalog.StreamID]catalog.StreamProgress
	read   bool // the open requests were read: reqs is all of them
}

func (p pending) ids() []int64 {
	out := make([]int64, len(p.reqs))
	for i, r := range p.reqs {
		out[i] = r.ID
	}
	return out
}

// openTriggers reads the open trigger requests into the options of the
// cycle about to start, with the progress of their streams. It returns
// false when there is nothing to run after all.
func (d *Daemon) openTriggers(t *term, want string) (cycle.Options, pending, bool) {
	opts := cycle.Options{Trigger: want}
	var p pending
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	open, err := d.reqs.AdminRequests(ctx, d.cfg.Star, true, 1000)
	if err != nil {
		d.log.Warn("reading trigger requests failed", "err", err)
		return opts, p, want != ""
	}
	p.read = true
	for _, r := range open {
		if r.Kind == catalog.AdminTrigger {
			p.reqs = append(p.reqs, r)
		}
	}
	slices.SortFunc(p.reqs, func(a, b catalog.AdminRequest) int { return cmp.Compare(a.ID, b.ID) })
	for _, r := range p.reqs {
		if r.Stream != nil && !containsStream(opts.Streams, *r.Stream) {
			opts.Streams = append(opts.Streams, *r.Stream)
		}
		opts.Trigger = TriggerManual
	}
	if len(opts.Streams) > 0 {
		opts.Trigger = TriggerStream
		opts.Deferred = &cycle.Deferred{}
		p.before, err = d.reqs.ForcedProgress(ctx, d.cfg.Star, opts.Streams)
		if err != nil {
			// Run without the streams' starting point: finishTriggers then
			// leaves the requests open for the next cycle.
			d.log.Warn("reading forced streams failed", "err", err)
		}
	}
	return opts, p, opts.Trigger != ""
}

// takeTriggers marks the requests taken by the cycle about to start, for
// `auditor trigger --wait` and the log. A failure only delays those.
func (d *Daemon) takeTriggers(t *term, p pending) {
	if len(p.reqs) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	err := d.reqs.TakeTriggers(ctx, t.lease.Fence, p.ids())
	d.m.tx(err)
	if errors.Is(err, catalog.ErrStaleToken) {
		t.lose(err)
		return
	}
	if err != nil {
		d.log.Warn("marking trigger requests taken failed", "err", err)
	}
	for _, r := range p.reqs {
		d.log.Info("admin request taken", "id", r.ID, "kind", r.Kind, "stream", streamAttr(r.Stream), "by", r.RequestedBy,
			"attempt", r.Attempts+1)
	}
}

// finishTriggers records what the cycle res made of the trigger requests it
// ran. recorded reports that every request got its outcome or its note (so
// the leader need not run them again at once); again, that a forced stream
// was partly settled, or not reached because the cycle's budget ran out,
// and the next cycle should follow now.
func (d *Daemon) finishTriggers(t *term, res result, opts cycle.Options, p pending) (recorded, again bool) {
	if len(p.reqs) == 0 {
		return true, false
	}
	ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
	defer cancel()
	switch res.outcome {
	case catalog.RunOK:
	case catalog.RunFailed, catalog.RunHalted:
		why := res.outcome
		if res.err != nil {
			why = fmt.Sprintf("%s: %v", res.outcome, res.err)
		}
		err := d.reqs.NoteTriggerAttempt(ctx, t.lease.Fence, res.run.ID, p.ids(), why)
		return d.triggerWrite(t, err), false
	default:
		// Lost lease or canceled: the next leader (or this one, once it
		// leads again) runs them; the run ledger says why this one did not.
		d.log.Info("trigger requests stay open", "requests", len(p.reqs), "outcome", res.outcome)
		return false, false
	}
	var after map[catalog.StreamID]catalog.StreamProgress
	if streams := streamsOf(p.reqs); len(streams) > 0 {
		if p.before == nil {
			return false, false // no starting point was read: run them again
		}
		var err error
		if after, err = d.reqs.ForcedProgress(ctx, d.cfg.Star, streams); err != nil {
			d.log.Warn("reading forced streams failed; the trigger requests stay open", "err", err)
			return false, false
		}
	}
	results, open := triggerResults(p.reqs, p.before, after, opts.Deferred)
	done, err := d.reqs.FinishTriggers(ctx, t.lease.Fence, res.run.ID, results)
	if !d.triggerWrite(t, err) {
		return false, false
	}
	for _, r := range done {
		d.m.AdminRequests.WithLabelValues(r.Kind).Inc()
		attrs := []any{"id", r.ID, "kind", r.Kind, "stream", streamAttr(r.Stream), "run", res.run.ID, "outcome", r.Outcome}
		if r.Outcome == catalog.TriggerFailed {
			d.log.Warn("admin request failed", append(attrs, "reason", r.Reason)...)
		} else {
			d.log.Info("admin request done", attrs...)
		}
	}
	if len(open) == 0 {
		return true, false
	}
	// One write per reason: the requests a budget left share one.
	var whys []string
	ids := map[string][]int64{}
	for _, o := range open {
		if ids[o.why] == nil {
			whys = append(whys, o.why)
		}
		ids[o.why] = append(ids[o.why], o.id)
	}
	for _, why := range whys {
		d.log.Info("trigger request stays open", "ids", ids[why], "run", res.run.ID, "why", why)
		if err := d.reqs.NoteTriggerAttempt(ctx, t.lease.Fence, res.run.ID, ids[why], why); !d.triggerWrite(t, err) {
			return false, true
		}
	}
	return true, true
}

// triggerWrite handles the error of recording a trigger outcome.
func (d *Daemon) triggerWrite(t *term, err error) bool {
	d.m.tx(err)
	switch {
	case err == nil:
		return true
	case errors.Is(err, catalog.ErrStaleToken):
		t.lose(err)
	default:
		d.log.Warn("recording trigger outcomes failed; they stay open", "err", err)
	}
	return false
}

func streamsOf(reqs []catalog.AdminRequest) []catalog.StreamID {
	var out []catalog.StreamID
	for _, r := range reqs {
		if r.Stream != nil && !containsStream(out, *r.Stream) {
			out = append(out, *r.Stream)
		}
	}
	return out
}

// stillOpen is a trigger request that a cycle which ran OK leaves open for
// the next cycle, and why.
type stillOpen struct {
	id  int64
	why string
}

// triggerResults decides, after a cycle that ran OK, each request's
// outcome: a plain trigger is done; a trigger --stream is done once its
// stream is settled through the next_record it was asked at, and failed
// (with the reason) when the stream is unknown or quarantined. It is left
// open, for the next cycle to go on, when the cycle settled part of it, or
// none of it because the cycle's budget ran out before the stream was
// reached (deferred: settle's --settle-max-bytes or --settle-max-streams).
// A stream the cycle settled nothing of for no such reason fails.
func triggerResults(reqs []catalog.AdminRequest, before, after map[catalog.StreamID]catalog.StreamProgress,
	deferred *cycle.Deferred) (results []catalog.TriggerResult, open []stillOpen) {
	for _, r := range reqs {
		if r.Stream == nil {
			results = append(results, catalog.TriggerResult{ID: r.ID, Outcome: catalog.TriggerDone})
			continue
		}
		b, a := before[*r.Stream], after[*r.Stream]
		target := b.NextRecord
		if r.TargetRecord != nil {
			target = *r.TargetRecord
		}
		fail := func(format string, args ...any) {
			results = append(results, catalog.TriggerResult{ID: r.ID, Outcome: catalog.TriggerFailed,
				Reason: fmt.Sprintf(format, args...)})
		}
		switch {
		case !a.Found:
			fail("stream %s is not a stream of this star", r.Stream.String())
		case a.Quarantine != "":
			fail("stream %s is quarantined (%s); auditor release lifts it", r.Stream.String(), a.Quarantine)
		case a.SettledThrough >= target:
			results = append(results, catalog.TriggerResult{ID: r.ID, Outcome: catalog.TriggerDone})
		case a.SettledThrough > b.SettledThrough:
			open = append(open, stillOpen{r.ID, fmt.Sprintf("partly settled: stream %s settled through %d of %d; the next cycle goes on",
				r.Stream.String(), a.SettledThrough, target)})
		case deferred.Has(*r.Stream):
			open = append(open, stillOpen{r.ID,
				"not reached: the cycle's settle budget (--settle-max-bytes, --settle-max-streams) ran out first; the next cycle goes on"})
		default:
			fail("the cycle settled nothing of stream %s: settled through %d, asked through %d",
				r.Stream.String(), a.SettledThrough, target)
		}
	}
	return results, open
}
