package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of strays (docs/architecture.md#strays): objects a
// listing found that no metadata names. Which keys something names, the
// fenced arming of their reaps (through the reap step, which buries and
// deletes them), and when a star's leader last swept.

// ListedKey is a settled key a listing found, with the coordinates it
// parses to.
type ListedKey struct {
	Key    string
	Coords KeyCoords
}

// named is true for a row k(key, bucket, stream_id, epoch, first, rev)
// of a settled key that metadata names: a catalog row has its coordinates
// (with the stream's bucket), or an intent, publish or reap, of any star,
// has it as its key. Each intent kind is read through its own partial key
// index (orphan_intents_publish_key_idx, orphan_intents_reap_key_idx).
const named = `(EXISTS (SELECT 1 FROM nova.catalog c JOIN nova.streams s ON s.stream_id = c.stream_id
		WHERE c.stream_id = k.stream_id AND c.epoch = k.epoch AND c.first_record = k.first AND c.revision = k.rev AND s.bucket = k.bucket)
	OR EXISTS (SELECT 1 FROM nova.orphan_intents o WHERE o.kind = 'publish' AND o.object_key = k.key)
	OR EXISTS (SELECT 1 FROM nova.orphan_intents o WHERE o.kind = 'reap' AND o.object_key = k.key))`

// listedKeys unnests $n.. as k(key, bucket, stream_id, epoch, first, rev, ord).
func listedKeys(first int) string {
	return fmt.Sprintf(`unnest($%d::text[], $%d::text[], $%d::uuid[], $%d::bigint[], $%d::bigint[], $%d::int[])
		WITH ORDINALITY AS k(key, bucket, stream_id, epoch, first, rev, ord)`, first, first+1, first+2, first+3, first+4, first+5)
}

func listedArgs(keys []ListedKey) []any {
	var (
		ks, buckets    = make([]string, len(keys)), make([]string, len(keys))
		streams        = make([]StreamID, len(keys))
		epochs, firsts = make([]int64, len(keys)), make([]int64, len(keys))
		revs           = make([]int32, len(keys))
	)
	for i, k := range keys {
		ks[i], buckets[i], streams[i] = k.Key, k.Coords.Bucket, k.Coords.Stream
		epochs[i], firsts[i], revs[i] = k.Coords.Epoch, k.Coords.FirstRecord, k.Coords.Revision
	}
	return []any{ks, buckets, streams, epochs, firsts, revs}
}

// NamedKeysPage is how many listed keys a caller hands NamedSettledKeys at
// once: a page of a listing (S3 lists 1000 keys a request).
const NamedKeysPage = 1000

// NamedSettledKeys reports, for each key in order, whether metadata names
// it: a catalog row has its coordinates with its stream's bucket, or an
// intent (publish or reap) has it as its object key. One statement for
// the lot: the caller pages a listing through it (NamedKeysPage).
func (t *Trim) NamedSettledKeys(ctx context.Context, keys []ListedKey) ([]bool, error) {
	out := make([]bool, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	rows, err := t.db.reader(ctx).Query(ctx, `SELECT k.ord, `+named+` FROM `+listedKeys(1), listedArgs(keys)...)
	if err != nil {
		return nil, fmt.Errorf("look up %d listed settled keys: %w", len(keys), err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ord int64
			is  bool
		)
		if err := rows.Scan(&ord, &is); err != nil {
			return nil, fmt.Errorf("look up %d listed settled keys: %w", len(keys), err)
		}
		out[ord-1] = is
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("look up %d listed settled keys: %w", len(keys), err)
	}
	return out, nil
}

// ArmStrayReaps arms a reap intent, due now, for each key that nothing
// names (NamedSettledKeys, checked again here), in one fenced
// transaction, and returns the keys it armed. The reap step then
// classifies each like any reap intent (ClassifyReaps buries the key:
// its base's high-water revision raised, so it is never published again)
// and deletes it (docs/architecture.md#strays). A key named meanwhile is
// left alone.
func (t *Trim) ArmStrayReaps(ctx context.Context, f Fence, keys []ListedKey) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var armed []string
	err := t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
			SELECT $1, 'reap', k.key, $2, now() FROM `+listedKeys(3)+`
			WHERE NOT `+named+`
			ORDER BY k.ord
			RETURNING object_key`, append([]any{f.Star, ClassStandard}, listedArgs(keys)...)...)
		if err != nil {
			return fmt.Errorf("arm the reaps of %d strays of star %q: %w", len(keys), f.Star, err)
		}
		armed, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("arm the reaps of %d strays of star %q: %w", len(keys), f.Star, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return armed, nil
}

// SlotRange is the slots [From, To) of a star's chain, in normalised slot
// order (docs/metastore.md#slot-order).
type SlotRange struct {
	From, To SlotPos
}

// ArmSlotStrays records each range of stray slots in slot_reaps, due now,
// in one fenced transaction, and returns the ranges it recorded. A range
// is recorded only while the trim cursor, as stored, is at or past its
// end and no slot_reaps row of the star meets it (raw (epoch, seq) order:
// positions must be normalised, as trim stores them): slots behind the
// cursor are never named again, and the reap step deletes a range's slots
// from every bucket of the star's class.
func (t *Trim) ArmSlotStrays(ctx context.Context, f Fence, ranges []SlotRange) ([]SlotRange, error) {
	if len(ranges) == 0 {
		return nil, nil
	}
	fe, fs := make([]int64, len(ranges)), make([]int64, len(ranges))
	te, ts := make([]int64, len(ranges)), make([]int64, len(ranges))
	for i, r := range ranges {
		if !r.From.Less(r.To) {
			return nil, fmt.Errorf("arm stray slots %s..%s of star %q: not forward", r.From, r.To, f.Star)
		}
		fe[i], fs[i], te[i], ts[i] = r.From.Epoch, r.From.Seq, r.To.Epoch, r.To.Seq
	}
	var out []SlotRange
	err := t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO nova.slot_reaps (star, from_epoch, from_seq, to_epoch, to_seq, reap_after)
			SELECT $1, r.fe, r.fs, r.te, r.ts, now()
			FROM unnest($2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[]) WITH ORDINALITY AS r(fe, fs, te, ts, ord)
			WHERE EXISTS (SELECT 1 FROM nova.trim_cursors c WHERE c.star = $1 AND (r.te, r.ts) <= (c.epoch, c.seq))
			  AND NOT EXISTS (SELECT 1 FROM nova.slot_reaps x WHERE x.star = $1
				AND (x.from_epoch, x.from_seq) < (r.te, r.ts) AND (r.fe, r.fs) < (x.to_epoch, x.to_seq))
			ORDER BY r.ord
			RETURNING from_epoch, from_seq, to_epoch, to_seq`, f.Star, fe, fs, te, ts)
		if err != nil {
			return fmt.Errorf("arm %d ranges of stray slots of star %q: %w", len(ranges), f.Star, err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotRange, error) {
			var s SlotRange
			return s, r.Scan(&s.From.Epoch, &s.From.Seq, &s.To.Epoch, &s.To.Seq)
		})
		if err != nil {
			return fmt.Errorf("arm %d ranges of stray slots of star %q: %w", len(ranges), f.Star, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// StraySweepDue reports whether the star's last stray sweep
// (auditor_state.strays_swept_at) is every or longer ago by the database
// clock, or never happened. every 0 turns the scheduled sweep off: never
// due.
func (t *Trim) StraySweepDue(ctx context.Context, star string, every time.Duration) (bool, error) {
	if every <= 0 {
		return false, nil
	}
	var due bool
	err := t.db.reader(ctx).QueryRow(ctx, `SELECT strays_swept_at IS NULL OR strays_swept_at <= now() - $2::interval
		FROM nova.auditor_state WHERE star = $1`, star, every).Scan(&due)
	if errors.Is(err, pgx.ErrNoRows) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("read the last stray sweep of star %q: %w", star, err)
	}
	return due, nil
}

// RecordStraySweep records, fenced, that the star's strays were swept now
// (database clock).
func (t *Trim) RecordStraySweep(ctx context.Context, f Fence) error {
	return t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_state (star, strays_swept_at) VALUES ($1, now())
			ON CONFLICT (star) DO UPDATE SET strays_swept_at = EXCLUDED.strays_swept_at`, f.Star); err != nil {
			return fmt.Errorf("record the stray sweep of star %q: %w", f.Star, err)
		}
		return nil
	})
}
