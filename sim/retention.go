package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// retention plays the write path's retention while a Write runs: every
// WriteOptions.RetentionEvery it raises the low_record of one stream of the
// star, drawn at random, to a record drawn at random in [low_record,
// next_record] (so below or past settled_through, up to retiring every live
// record). The auditor then skips the refs below it and removes the catalog
// entries wholly below it, while the writer keeps absorbing into the same
// streams. The returned stop ends it and returns its first error.
func (w *writer) retention(ctx context.Context) (stop func() error) {
	if w.opts.RetentionEvery <= 0 {
		return func() error { return nil }
	}
	ctx, cancel := context.WithCancel(ctx)
	rnd := rand.New(rand.NewPCG(w.gen.Seed^0x726574656e74, mix64(w.opts.Session))) // "retent"
	var (
		wg  sync.WaitGroup
		err error
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(w.opts.RetentionEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err = w.retentionMove(ctx, rnd); err != nil {
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					err = nil
				}
				return
			}
		}
	}()
	return func() error {
		cancel()
		wg.Wait()
		return err
	}
}

// retentionMove raises the low_record of one random stream.
func (w *writer) retentionMove(ctx context.Context, rnd *rand.Rand) error {
	streams, err := w.db.Streams().StreamsOfStar(ctx, w.opts.Star)
	if err != nil {
		return fmt.Errorf("retention on star %q: %w", w.opts.Star, err)
	}
	if len(streams) == 0 {
		return nil
	}
	st := streams[rnd.IntN(len(streams))]
	if st.NextRecord <= st.LowRecord {
		return nil // nothing live to retire
	}
	low := st.LowRecord + 1 + rnd.Int64N(st.NextRecord-st.LowRecord)
	if err := w.wp.RaiseLowRecord(ctx, st.ID, low); err != nil {
		return fmt.Errorf("retention on star %q: %w", w.opts.Star, err)
	}
	w.c.retention.Add(1)
	w.log.Debug("retention", "stream", st.ID, "low_record", low, "next_record", st.NextRecord)
	return nil
}
