package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nova/auditor/catalog/writepath"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/sim"
)

// TestAbsorbCommittingDuringTheStreamRead holds an absorb of the stream
// open while a settle cycle reads the stream, with retention set so the
// settle's retention step waits behind the absorb's row lock; the absorb
// then commits, so the refs it added land between the settle's reads. The
// settle must not mistake the newer stream for a broken one: no quarantine,
// and every record settled by the next cycle.
func TestAbsorbCommittingDuringTheStreamRead(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newEnv(t, b, 1, 0)
			e.write("s1", 2, sim.Faults{}, 1)
			if _, err := e.cycle("s1", e.settler(nil)); err != nil {
				t.Fatal(err)
			}
			e.write("s1", 3, sim.Faults{}, 2) // unsettled refs behind the tail
			streams, err := e.db.Streams().StreamsOfStar(e.ctx, "s1")
			if err != nil || len(streams) != 1 {
				t.Fatalf("streams: %v %v", streams, err)
			}
			st := streams[0]
			if st.SettledThrough >= st.NextRecord {
				t.Fatalf("nothing unsettled: %+v", st)
			}
			// Retention inside the unsettled range: the cycle's retention
			// step locks the stream row (and waits behind the held absorb).
			if err := writepath.New(e.db).RaiseLowRecord(e.ctx, st.ID, st.SettledThrough+1); err != nil {
				t.Fatal(err)
			}

			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			hold := func(ctx context.Context) error {
				once.Do(func() {
					close(entered)
					<-release
				})
				return nil
			}
			wrote := make(chan error, 1)
			go func() {
				_, err := sim.Write(e.ctx, e.db, e.storage(), sim.WriteOptions{Star: "s1", Flights: 1, FlightBytes: 64 << 10,
					FlightInterval: time.Minute, AbsorbFlights: 1, Session: 3, BeforeAbsorbCommit: hold})
				wrote <- err
			}()
			select {
			case <-entered:
			case err := <-wrote:
				t.Fatalf("the write ended before its absorb was held: %v", err)
			}
			type res struct {
				c   cycle.Counts
				err error
			}
			settled := make(chan res, 1)
			go func() {
				c, err := e.cycleNoFatal("s1")
				settled <- res{c, err}
			}()
			// Let the absorb commit only once the cycle waits behind it.
			deadline := time.Now().Add(30 * time.Second)
			for {
				n, err := writepath.New(e.db).LockWaiters(e.ctx)
				if err != nil {
					t.Fatal(err)
				}
				if n > 0 {
					break
				}
				if time.Now().After(deadline) {
					close(release)
					t.Fatal("the settle cycle never waited behind the held absorb")
				}
				time.Sleep(10 * time.Millisecond)
			}
			close(release)
			if err := <-wrote; err != nil {
				t.Fatal(err)
			}
			r := <-settled
			if r.err != nil {
				t.Fatalf("cycle: %v", r.err)
			}
			q, err := e.db.Settle().Quarantined(e.ctx, "s1")
			if err != nil {
				t.Fatal(err)
			}
			if r.c.StreamsQuarantined != 0 || len(q) != 0 {
				t.Fatalf("a concurrent absorb quarantined the stream: %+v %+v", r.c, q)
			}
			if _, err := e.cycle("s1", e.settler(nil)); err != nil {
				t.Fatal(err)
			}
			if q, _ := e.db.Settle().Quarantined(e.ctx, "s1"); len(q) != 0 {
				t.Fatalf("quarantine after the next cycle: %+v", q)
			}
			e.checkSettled("s1")
		})
	}
}
