package settle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

// An erasure is applied only when no object holds its records' bytes
// (docs/architecture.md#erasure), strays included: an object under the
// stream's settled prefix that no metadata names, which the catalog
// cannot show (docs/architecture.md#strays). So before the erase step
// applies a stream's erasures it lists the stream's settled prefix once;
// a stray whose records meet an erasure about to be applied holds it
// pending: one older than Config.StrayGuard gets its reap armed (the
// erasure applies after the reap deleted it, as ApplyErasure refuses
// while a reap intent lies below the erasure's end), a younger one just
// waits.

// settledStray is an object under a stream's settled prefix that no
// metadata names, with the records it may hold.
type settledStray struct {
	key      catalog.ListedKey
	parses   bool
	age      time.Duration
	from, to uint64 // the records it may hold: [from, to)
}

// dbClock reads the database clock once, on first use, for every stream
// of one erase run.
type dbClock struct {
	once sync.Once
	now  time.Time
	err  error
}

func (c *dbClock) get(ctx context.Context, db Metastore) (time.Time, error) {
	c.once.Do(func() { c.now, c.err = db.Now(ctx) })
	return c.now, c.err
}

// streamStrays lists the stream's settled prefix and returns the objects
// no metadata names, each with the records its footer says it holds
// (from its key's first record on when the footer cannot be read). A
// stray that vanished before its footer was read is gone: left out.
func (e *Eraser) streamStrays(ctx context.Context, st catalog.Stream, clock *dbClock) ([]settledStray, error) {
	s := e.s
	now, err := clock.get(ctx, s.d.DB)
	if err != nil {
		return nil, err
	}
	var out []settledStray
	add := func(key catalog.ListedKey, parses bool, info objstore.ObjectInfo) error {
		ss := settledStray{key: key, parses: parses, age: info.MinAge(now), from: uint64(max(key.Coords.FirstRecord, 0)), to: math.MaxUint64}
		f, err := s.read.StandingFooter(ctx, key.Key)
		switch {
		case errors.Is(err, objstore.ErrNotFound):
			return nil
		case err != nil && ctx.Err() != nil:
			return err
		case err != nil:
			s.d.Log.Warn("stray's footer unreadable: taken to hold every record from its first on", "key", key.Key, "err", err)
		default:
			if entries, err := f.Entries(); err == nil && len(entries) > 0 {
				ss.from = min(ss.from, entries[0].FirstRecord)
				ss.to = entries[len(entries)-1].EndRecord()
			}
		}
		out = append(out, ss)
		return nil
	}
	unnamed := bundle.NewUnnamed(s.d.DB.NamedSettledKeys, func(o bundle.SettledObject) error {
		return add(catalog.ListedKey{Key: o.Key, Coords: o.Coords}, true, o.ObjectInfo)
	})
	err = s.read.ListSettled(ctx, st, func(o bundle.SettledObject) error {
		return unnamed.Add(ctx, o)
	}, func(_ string, o objstore.ObjectInfo, _ error) error {
		// Not a settled key: the sweep never deletes it; whatever bytes it
		// holds hold the erasures they meet until an operator removes it.
		return add(catalog.ListedKey{Key: o.Key}, false, o)
	})
	if err == nil {
		err = unnamed.Flush(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("list the strays of stream %s: %w", st.ID, err)
	}
	return out, nil
}

// strayHolds reports whether a stray holds records of er, arming the reap
// of every such stray older than the guard (arm collects them).
func (e *Eraser) strayHolds(st catalog.Stream, er catalog.Erasure, strays []settledStray, arm map[string]catalog.ListedKey) bool {
	s := e.s
	held := false
	for _, ss := range strays {
		if ss.from >= uint64(er.EndRecord()) || uint64(er.FirstRecord) >= ss.to {
			continue
		}
		held = true
		switch {
		case ss.parses && s.c.StrayGuard > 0 && ss.age > s.c.StrayGuard:
			arm[ss.key.Key] = ss.key
		case !ss.parses:
			s.d.Log.Warn("erasure held by an object under the stream's prefix that is not a settled key: remove it",
				"stream", st.ID, "first_record", er.FirstRecord, "key", ss.key.Key)
		default:
			s.d.Metrics.erasureStray("waiting")
			s.d.Log.Info("erasure waits for a stray younger than the stray guard",
				"stream", st.ID, "first_record", er.FirstRecord, "key", ss.key.Key, "age", ss.age, "guard", s.c.StrayGuard)
		}
	}
	return held
}
