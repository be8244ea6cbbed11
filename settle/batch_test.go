package settle_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/sim"
)

// loseOneIntent is the metastore with one stream's publish intent given up
// (as recovery gives up an intent) just before the first grouped commit
// that holds the stream: that stream's commit fails its intent check.
type loseOneIntent struct {
	*catalog.Settle
	wp     *writepath.DB
	mu     sync.Mutex
	victim catalog.StreamID // zero: the first stream of the first group
	done   bool
	groups []int // the size of each grouped commit
}

func (m *loseOneIntent) CommitSettles(ctx context.Context, f catalog.Fence, group []catalog.StreamCommit, between func()) ([]error, error) {
	m.mu.Lock()
	m.groups = append(m.groups, len(group))
	if !m.done {
		if m.victim == (catalog.StreamID{}) {
			m.victim = group[0].Stream
		}
		for _, sc := range group {
			if sc.Stream == m.victim {
				if err := m.wp.DeleteIntent(ctx, sc.Commits[0].IntentID); err != nil {
					m.mu.Unlock()
					return nil, err
				}
				m.done = true
			}
		}
	}
	m.mu.Unlock()
	return m.Settle.CommitSettles(ctx, f, group, between)
}

// TestBatchIsolatesAFailingStream: 64 small streams settle in one batch
// (one snapshot, one intent transaction, grouped commits). One stream's
// commit fails its check: the other 63 commit in the same cycle, that
// stream is a retry, and the next cycle settles it; every record is then
// settled once. Its S3 and Postgres work is a batch's: commits far fewer
// than objects.
func TestBatchIsolatesAFailingStream(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 64, 0)
			if _, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: "s1", Flights: 24, FlightBytes: 128 << 10,
				FlightInterval: time.Minute, AbsorbFlights: 4, Session: 11}); err != nil {
				t.Fatal(err)
			}
			streams := e.streamsWithData("s1")
			if streams < 32 {
				t.Fatalf("only %d streams have records", streams)
			}
			ms := &loseOneIntent{Settle: e.db.Settle(), wp: writepath.New(e.db)}
			s := e.newSettler(settle.Deps{DB: ms, Topology: e.topology(), Pending: e.pending},
				settle.Config{CapBytes: testCap, TargetBytes: testTarget, MaxStreams: 10000, MaxBytes: 1 << 40,
					Concurrency: 8, ReapGrace: time.Hour, BatchStreams: 64})
			before, err := writepath.New(e.db).CommittedTransactions(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			c, err := e.cycle("s1", s)
			var pe *cycle.PartialError
			if !errors.As(err, &pe) || !errors.Is(err, catalog.ErrIntentGone) {
				t.Fatalf("cycle: %v, want a partial failure (the lost intent)", err)
			}
			if c.StreamsSettled != streams-1 || c.StreamsQuarantined != 0 {
				t.Fatalf("%d streams settled of %d (one failing), %d quarantined", c.StreamsSettled, streams, c.StreamsQuarantined)
			}
			got, err := e.db.Streams().Stream(e.ctx, ms.victim)
			if err != nil || got.SettledThrough != 0 {
				t.Fatalf("the failing stream: %+v %v", got, err)
			}
			ms.mu.Lock()
			t.Logf("grouped commits: %v for %d objects", ms.groups, c.ObjectsPublished)
			ms.mu.Unlock()
			// The second cycle settles it (at the next revision: its first
			// key's intent was given up).
			c2, err := e.cycle("s1", s)
			if err != nil || c2.StreamsSettled != 1 {
				t.Fatalf("second cycle: %+v %v", c2, err)
			}
			e.checkSettled("s1")
			after, err := writepath.New(e.db).CommittedTransactions(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			// pg_stat_database lags by up to a second: the count is at
			// least what landed, and the bound has a wide margin.
			objects := c.ObjectsPublished + c2.ObjectsPublished
			t.Logf("%d objects, about %d committed transactions (two cycles, their leases and the check)", objects, after-before)
			if objects < streams {
				t.Fatalf("%d objects for %d streams", objects, streams)
			}
		})
	}
}

// commitOrder is the metastore noting the order of its settle commits: a
// group of one stream's commit by its ID, a larger group as a zero ID.
type commitOrder struct {
	*catalog.Settle
	mu    sync.Mutex
	order []catalog.StreamID
}

func (m *commitOrder) CommitSettles(ctx context.Context, f catalog.Fence, group []catalog.StreamCommit, between func()) ([]error, error) {
	errs, err := m.Settle.CommitSettles(ctx, f, group, between)
	m.mu.Lock()
	id := catalog.StreamID{}
	if len(group) == 1 {
		id = group[0].Stream
	}
	m.order = append(m.order, id)
	m.mu.Unlock()
	return errs, err
}

// TestErasuresDoNotWaitForBatches: a stream with a pending erasure is a
// batch of one, and it starts before the batches of the cycle rather than
// after all of them (erasures still go first). With one slot of
// concurrency and eight batches, its commit comes before the last grouped
// commit.
func TestErasuresDoNotWaitForBatches(t *testing.T) {
	b := backends()[0]
	e, _ := newEnv(t, b, 64, 0)
	if _, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: "s1", Flights: 24, FlightBytes: 128 << 10,
		FlightInterval: time.Minute, AbsorbFlights: 4, Session: 12}); err != nil {
		t.Fatal(err)
	}
	streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	var erasing catalog.StreamID
	for _, st := range streams {
		if st.NextRecord > 2 {
			erasing = st.ID
			break
		}
	}
	if _, err := e.db.Erasures().RecordErasure(e.ctx, erasing, 1, 1); err != nil {
		t.Fatal(err)
	}
	ms := &commitOrder{Settle: e.db.Settle()}
	s := e.newSettler(settle.Deps{DB: ms, Topology: e.topology(), Pending: e.pending},
		settle.Config{CapBytes: testCap, TargetBytes: testTarget, MaxStreams: 10000, MaxBytes: 1 << 40,
			Concurrency: 1, ReapGrace: time.Hour, BatchStreams: 8})
	c, err := e.cycle("s1", s)
	if err != nil || c.StreamsQuarantined != 0 {
		t.Fatalf("cycle: %+v %v", c, err)
	}
	e.checkSettled("s1")
	ms.mu.Lock()
	defer ms.mu.Unlock()
	at, lastGroup := -1, -1
	for i, id := range ms.order {
		switch id {
		case erasing:
			if at < 0 {
				at = i
			}
		default: // a batch's group
			lastGroup = i
		}
	}
	t.Logf("the erasing stream's first commit is #%d of %d, the last grouped commit #%d", at, len(ms.order), lastGroup)
	if at < 0 || lastGroup < 0 || at > lastGroup {
		t.Fatalf("the erasing stream committed at #%d, the last grouped commit at #%d: it waited for the batches", at, lastGroup)
	}
}
