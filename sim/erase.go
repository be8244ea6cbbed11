package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/catalog/writepath"
)

// Erasures as the write path's users request them
// (docs/architecture.md#erasure): novasim records them through
// catalog.Erasures.RecordErasure, as `auditor erase` does, either on request (Erase)
// or while writing (Faults.Erase), and Check expects tombstones exactly
// where they are applied.

// EraseOptions says what Erase records.
type EraseOptions struct {
	Star string
	// Random records this many erasures of random ranges of the star's
	// live records, alternating between settled records (below
	// settled_through, which the erasure step rewrites) and unsettled
	// ones (which settle writes as tombstones), as far as each exists.
	Random int
	// MaxRecords bounds a random erasure's length (default 4).
	MaxRecords int64
	// Seed of the random draws (0: random).
	Seed uint64
}

// EraseStats counts what Erase recorded.
type EraseStats struct {
	Recorded  int64 // erasures recorded
	Settled   int64 // of which over settled records
	Unsettled int64 // of which over records not settled yet
	Records   int64 // records they erase
	Skipped   int64 // draws that met a standing erasure of another length at the same first record
	Erasures  []catalog.Erasure
}

// EraseRange records the erasure of [first, first+count) of a stream of
// the star, refusing (ErrUsage) a stream of another star, an empty or
// negative range, a range past the stream's next_record (those records do
// not exist yet) and another range at the same first record; the same
// range again is a no-op returning the standing row.
func EraseRange(ctx context.Context, db *catalog.DB, star string, id catalog.StreamID, first, count int64) (catalog.Erasure, error) {
	e := catalog.Erasure{Stream: id, FirstRecord: first, RecordCount: count}
	if why := e.Valid(); why != "" {
		return e, fmt.Errorf("%w: not an erasure: %s", ErrUsage, why)
	}
	s, err := db.Streams().Stream(ctx, id)
	if errors.Is(err, catalog.ErrNotFound) {
		return e, fmt.Errorf("%w: no stream %s", ErrUsage, id)
	}
	if err != nil {
		return e, err
	}
	if s.Star != star {
		return e, fmt.Errorf("%w: stream %s is in star %q, not %q", ErrUsage, id, s.Star, star)
	}
	if e.EndRecord() > s.NextRecord {
		return e, fmt.Errorf("%w: records [%d, %d) reach past stream %s's next_record %d: they do not exist yet",
			ErrUsage, first, e.EndRecord(), id, s.NextRecord)
	}
	got, err := db.Erasures().RecordErasure(ctx, id, first, count)
	if errors.Is(err, catalog.ErrBadErasure) {
		return got, fmt.Errorf("%w: %w", ErrUsage, err)
	}
	return got, err
}

// Erase records random erasures of a star's records (EraseOptions.Random).
// A draw whose first record already starts an erasure of another length is
// skipped (the metastore keys erasures by their first record).
func Erase(ctx context.Context, db *catalog.DB, o EraseOptions) (EraseStats, error) {
	var st EraseStats
	if o.Random <= 0 {
		return st, fmt.Errorf("%w: erase: --random must be positive", ErrUsage)
	}
	if o.MaxRecords <= 0 {
		o.MaxRecords = 4
	}
	seed := o.Seed
	if seed == 0 {
		seed = newNonce()
	}
	rnd := rand.New(rand.NewPCG(seed, mix64(seed^0x6572617365))) // "erase"
	streams, err := db.Streams().StreamsOfStar(ctx, o.Star)
	if err != nil {
		return st, err
	}
	var live []catalog.Stream
	for _, s := range streams {
		if s.NextRecord > s.LowRecord {
			live = append(live, s)
		}
	}
	if len(live) == 0 {
		return st, fmt.Errorf("%w: star %q has no live records to erase", ErrUsage, o.Star)
	}
	for i := 0; i < o.Random; i++ {
		s := live[rnd.IntN(len(live))]
		lo, hi := s.LowRecord, s.SettledThrough // settled records
		if i%2 == 1 || hi <= lo {
			lo, hi = max(s.SettledThrough, s.LowRecord), s.NextRecord // unsettled records
		}
		if hi <= lo {
			lo, hi = s.LowRecord, s.NextRecord
		}
		first := lo + rnd.Int64N(hi-lo)
		count := 1 + rnd.Int64N(min(o.MaxRecords, hi-first))
		e, err := db.Erasures().RecordErasure(ctx, s.ID, first, count)
		if errors.Is(err, catalog.ErrBadErasure) {
			st.Skipped++
			continue
		}
		if err != nil {
			return st, err
		}
		st.Recorded++
		st.Records += count
		if e.EndRecord() <= s.SettledThrough {
			st.Settled++
		} else {
			st.Unsettled++
		}
		st.Erasures = append(st.Erasures, e)
	}
	return st, nil
}

// eraser records the write-time erasures of Faults.Erase: after an absorb,
// each absorbed flight erases, with that probability, a random range of
// one of its batches (records that exist now, not settled yet). It has its
// own random source, as the absorber runs beside the builder.
type eraser struct {
	w   *writer
	mu  sync.Mutex
	rnd *rand.Rand
}

func newEraser(w *writer) *eraser {
	return &eraser{w: w, rnd: rand.New(rand.NewPCG(w.gen.Seed^0x6572617365, mix64(w.opts.Session)))}
}

// afterAbsorb plays the erasure fault on the flights of one absorb batch.
// A failure to record one is returned (the writer logs it and goes on: the
// absorb it follows is done).
func (e *eraser) afterAbsorb(ctx context.Context, flights []writepath.AbsorbFlight) error {
	p := e.w.opts.Faults.Erase
	if p <= 0 {
		return nil
	}
	for _, f := range flights {
		e.mu.Lock()
		hit := e.rnd.Float64() < p && len(f.Batches) > 0
		var b writepath.AbsorbBatch
		var first, count int64
		if hit {
			b = f.Batches[e.rnd.IntN(len(f.Batches))]
			if b.Count <= 0 {
				hit = false
			} else {
				first = b.FirstRecord + e.rnd.Int64N(b.Count)
				count = 1 + e.rnd.Int64N(min(4, b.FirstRecord+b.Count-first))
			}
		}
		e.mu.Unlock()
		if !hit {
			continue
		}
		_, err := e.w.db.Erasures().RecordErasure(ctx, b.Stream, first, count)
		switch {
		case errors.Is(err, catalog.ErrBadErasure):
			continue // another erasure starts there (novasim erase beside the writer)
		case err != nil:
			return fmt.Errorf("erasure fault on stream %s [%d, +%d): %w", b.Stream, first, count, err)
		}
		e.w.c.erasures.Add(1)
		e.w.c.erased.Add(count)
	}
	return nil
}
