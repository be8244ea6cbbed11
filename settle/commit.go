package settle

import (
	"context"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cycle"
)

// groupCommitWait bounds how long a stream whose object is published waits
// for others to share its commit: a group is committed once it holds
// BatchStreams streams, or this long after its first stream was ready,
// so one slow PUT delays no one else's commit by more.
const groupCommitWait = 50 * time.Millisecond

// groupCommit gathers the commits of a round's streams as their objects
// stand and commits them in groups (catalog.Settle.CommitSettles, each
// stream in a savepoint of its own, so one failing its check is rolled
// back alone): a group is committed once it holds BatchStreams streams,
// or groupCommitWait after its first, or when the round has no more. Each
// stream's outcome is its own: committed (and counted), or its error.
type groupCommit struct {
	p    *pipeline
	in   chan *stream
	done chan struct{}
	stop error // a failure that stops the cycle: later groups are not committed
	// died: the committer's goroutine ended mid-commit (a test's crash
	// hook, standing for a process death): its streams are gone.
	died bool
}

// newGroupCommit starts the committer of a round of up to n objects.
func (p *pipeline) newGroupCommit(ctx context.Context, n int) *groupCommit {
	gc := &groupCommit{p: p, in: make(chan *stream, n), done: make(chan struct{})}
	go gc.run(ctx)
	return gc
}

// submit hands one stream's commit to the committer (never blocks: the
// channel holds the whole round).
func (gc *groupCommit) submit(b *stream) { gc.in <- b }

// close commits what was submitted.
func (gc *groupCommit) close() {
	close(gc.in)
	<-gc.done
	if gc.died {
		for b := range gc.in {
			b.gone = true
		}
	}
}

func (gc *groupCommit) run(ctx context.Context) {
	defer close(gc.done)
	var group []*stream
	returned := false
	defer func() {
		if !returned {
			gc.died = true
			for _, b := range group {
				b.gone = true
			}
		}
	}()
	limit := max(gc.p.s.c.BatchStreams, 1)
	for {
		first, ok := <-gc.in
		if !ok {
			returned = true
			return
		}
		group = []*stream{first}
		timer := time.NewTimer(groupCommitWait)
	gather:
		for len(group) < limit {
			select {
			case b, ok := <-gc.in:
				if !ok {
					break gather
				}
				group = append(group, b)
			case <-timer.C:
				break gather
			}
		}
		timer.Stop()
		gc.flush(ctx, group)
	}
}

// flush commits one group and records each stream's outcome.
func (gc *groupCommit) flush(ctx context.Context, group []*stream) {
	s := gc.p.s
	if gc.stop != nil {
		for _, b := range group {
			b.cerr = gc.stop // the cycle stops: the intents stay open, taken up next cycle
		}
		return
	}
	scs := make([]catalog.StreamCommit, len(group))
	for i, b := range group {
		scs[i] = catalog.StreamCommit{Stream: b.ds.Stream, Commits: []catalog.SettleCommit{b.commit}}
	}
	errs, err := s.d.DB.CommitSettles(ctx, gc.p.f, scs, func() { s.crash(CrashBatchMidCommit) })
	for i, b := range group {
		b.cerr = err
		if b.cerr == nil {
			b.cerr = errs[i]
		}
		switch {
		case b.cerr == nil:
			b.committed = true
			s.committed(b.outs[0], b.p, b.commit, &b.counts)
		case cycle.IsLeaseLost(b.cerr), cycle.IsHalt(b.cerr):
			gc.stop = b.cerr
		}
	}
}
