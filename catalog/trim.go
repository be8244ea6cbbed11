package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of trim and reap (docs/architecture.md#the-cycle): retention
// (retention.go), the trim cursor and its slot reaps (this file), and the
// re-check that an object reap names a key no future state can reference
// (reaps.go). Every transaction that changes anything is fenced. Package
// trim holds the decisions; these files hold only SQL.

// SlotPos is a position in a star's chain. Slot order is (epoch, seq), where
// (e, end_seq(e)) and (e+1, 0) are the same point (docs/metastore.md); package
// trim normalises positions before it compares them.
type SlotPos struct {
	Epoch, Seq int64
}

// Less compares raw (epoch, seq) pairs; meaningful on normalised positions.
func (p SlotPos) Less(q SlotPos) bool {
	return p.Epoch < q.Epoch || p.Epoch == q.Epoch && p.Seq < q.Seq
}

func (p SlotPos) String() string { return fmt.Sprintf("%d/%d", p.Epoch, p.Seq) }

// HeldSlot is the earliest slot named by a set of span refs, with the ref
// that names it.
type HeldSlot struct {
	Slot        SlotPos
	Stream      StreamID
	FirstRecord int64
}

// TrimState is everything the trim bound is computed from, read in one
// snapshot so that a ref not in it names only slots at or past its head
// (an absorb that commits later read a head at least as far).
type TrimState struct {
	Star      Star        // the absorbed head is (Star.Epoch, Star.NextSeq)
	Epochs    []StarEpoch // in epoch order
	Cursor    SlotPos     // the stored cursor, as stored
	HasCursor bool        // false: no trim_cursors row (nothing released yet)
	// RefMin is the earliest first slot of any remaining span ref whose
	// star is this star; nil when the star has none.
	RefMin *HeldSlot
	// QuarantineMin is the same over the refs of quarantined streams.
	QuarantineMin *HeldSlot
	// QuarantinedStreams counts the star's quarantined streams with refs.
	QuarantinedStreams int64
	Now                time.Time // the database clock
}

// TrimState reads a star's trim state in one read-only snapshot.
func (t *Trim) TrimState(ctx context.Context, star string) (TrimState, error) {
	var st TrimState
	err := t.db.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		st, err = readTrimState(ctx, tx, star)
		return err
	})
	return st, err
}

// readTrimState is TrimState within tx: its six reads in one batch
// (one round trip).
func readTrimState(ctx context.Context, tx pgx.Tx, star string) (TrimState, error) {
	var st TrimState
	b := &pgx.Batch{}
	queueTrimState(b, star, &st)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return TrimState{}, err
	}
	return st, nil
}

// queueTrimState queues the reads of star's trim state into st on b: the
// star's head and the clock, its epochs, its cursor, the earliest slot of
// its refs and of its quarantined streams' refs, and the count of its
// quarantined streams with refs.
func queueTrimState(b *pgx.Batch, star string, st *TrimState) {
	s := &st.Star
	b.Queue(`SELECT star, chain_class, epoch, next_seq, fence_window, now() FROM nova.stars WHERE star = $1`, star).
		QueryRow(func(row pgx.Row) error {
			err := row.Scan(&s.Star, &s.ChainClass, &s.Epoch, &s.NextSeq, &s.FenceWindow, &st.Now)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("star %q: %w", star, ErrNotFound)
			}
			if err != nil {
				return fmt.Errorf("read star %q: %w", star, err)
			}
			return nil
		})
	b.Queue(starEpochsSQL, star).Query(func(rows pgx.Rows) error {
		var err error
		st.Epochs, err = collectEpochs(rows, star)
		return err
	})
	b.Queue(`SELECT epoch, seq FROM nova.trim_cursors WHERE star = $1`, star).QueryRow(func(row pgx.Row) error {
		err := row.Scan(&st.Cursor.Epoch, &st.Cursor.Seq)
		switch {
		case err == nil:
			st.HasCursor = true
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("read trim cursor of star %q: %w", star, err)
		}
		return nil
	})
	// span_refs_first_slot_idx serves this: entries are in ascending slot
	// order, so element 1 is a ref's earliest slot.
	queueHeldSlot(b, `SELECT slot_epochs[1], slot_seqs[1], stream_id, first_record FROM nova.span_refs
		WHERE star = $1 ORDER BY slot_epochs[1], slot_seqs[1] LIMIT 1`, star, &st.RefMin, "earliest ref slot")
	queueHeldSlot(b, `SELECT r.slot_epochs[1], r.slot_seqs[1], r.stream_id, r.first_record
		FROM nova.span_refs r JOIN nova.quarantine q ON q.stream_id = r.stream_id
		WHERE r.star = $1 ORDER BY r.slot_epochs[1], r.slot_seqs[1] LIMIT 1`, star, &st.QuarantineMin, "earliest quarantined ref slot")
	b.Queue(`SELECT count(DISTINCT q.stream_id) FROM nova.quarantine q
		WHERE q.star = $1 AND EXISTS (SELECT 1 FROM nova.span_refs r WHERE r.stream_id = q.stream_id)`, star).
		QueryRow(func(row pgx.Row) error {
			if err := row.Scan(&st.QuarantinedStreams); err != nil {
				return fmt.Errorf("count quarantined streams of star %q: %w", star, err)
			}
			return nil
		})
}

// queueHeldSlot queues sql, a read of one held slot of star, into *h (nil
// when it finds none).
func queueHeldSlot(b *pgx.Batch, sql, star string, h **HeldSlot, what string) {
	b.Queue(sql, star).QueryRow(func(row pgx.Row) error {
		var s HeldSlot
		err := row.Scan(&s.Slot.Epoch, &s.Slot.Seq, &s.Stream, &s.FirstRecord)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			*h = nil
		case err != nil:
			return fmt.Errorf("%s of star %q: %w", what, star, err)
		default:
			*h = &s
		}
		return nil
	})
}

const starEpochsSQL = `SELECT epoch, started_at, end_seq FROM nova.star_epochs WHERE star = $1 ORDER BY epoch`

func starEpochs(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, star string) ([]StarEpoch, error) {
	rows, err := q.Query(ctx, starEpochsSQL, star)
	if err != nil {
		return nil, fmt.Errorf("read epochs of star %q: %w", star, err)
	}
	return collectEpochs(rows, star)
}

// collectEpochs reads the rows of starEpochsSQL.
func collectEpochs(rows pgx.Rows, star string) ([]StarEpoch, error) {
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (StarEpoch, error) {
		var e StarEpoch
		return e, r.Scan(&e.Epoch, &e.StartedAt, &e.EndSeq)
	})
	if err != nil {
		return nil, fmt.Errorf("read epochs of star %q: %w", star, err)
	}
	return out, nil
}

// ErrCursorMoved means the trim cursor is no longer where the caller read
// it: another transaction moved it. Nothing was changed.
var ErrCursorMoved = errors.New("trim cursor moved under us")

// SlotReap is a row of nova.slot_reaps: the slots [From, To) of a star,
// released by trim, to be deleted no earlier than ReapAfter.
type SlotReap struct {
	ID        int64
	Star      string
	From, To  SlotPos
	ReapAfter time.Time
	Due       bool // reap_after <= now(), by the database clock
	// DoneBuckets are the buckets that confirmed every slot of the range
	// deleted; the reap is finished when every bucket of the class is.
	DoneBuckets []string
}

// AdvanceTrim moves the star's trim cursor from prev (the row as read; nil
// when there was none) to to, and records the passed range [from, to) in
// slot_reaps with reap_after = now() + grace, in one fenced transaction. It
// fails with ErrCursorMoved when the row is no longer prev, and with
// ErrInvariant when a remaining ref of the star names a slot before to
// (positions are compared raw: from and to must be normalised).
func (t *Trim) AdvanceTrim(ctx context.Context, f Fence, prev *SlotPos, from, to SlotPos, grace time.Duration) (SlotReap, error) {
	r := SlotReap{Star: f.Star, From: from, To: to}
	if !from.Less(to) {
		return r, fmt.Errorf("advance trim of star %q from %s to %s: not forward", f.Star, from, to)
	}
	err := t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var cur SlotPos
		err := tx.QueryRow(ctx, `SELECT epoch, seq FROM nova.trim_cursors WHERE star = $1 FOR UPDATE`, f.Star).Scan(&cur.Epoch, &cur.Seq)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if prev != nil {
				return fmt.Errorf("star %q: cursor row %s vanished: %w", f.Star, prev, ErrCursorMoved)
			}
		case err != nil:
			return fmt.Errorf("lock trim cursor of star %q: %w", f.Star, err)
		case prev == nil || cur != *prev:
			return fmt.Errorf("star %q: cursor is %s: %w", f.Star, cur, ErrCursorMoved)
		}
		var held HeldSlot
		err = tx.QueryRow(ctx, `SELECT slot_epochs[1], slot_seqs[1], stream_id, first_record FROM nova.span_refs
			WHERE star = $1 AND (slot_epochs[1], slot_seqs[1]) < ($2::bigint, $3::bigint)
			ORDER BY slot_epochs[1], slot_seqs[1] LIMIT 1`, f.Star, to.Epoch, to.Seq).
			Scan(&held.Slot.Epoch, &held.Slot.Seq, &held.Stream, &held.FirstRecord)
		if err == nil {
			return fmt.Errorf("%w: star %q: ref %s@%d names slot %s, before the new trim cursor %s",
				ErrInvariant, f.Star, held.Stream, held.FirstRecord, held.Slot, to)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("re-check trim bound of star %q: %w", f.Star, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.trim_cursors (star, epoch, seq) VALUES ($1, $2, $3)
			ON CONFLICT (star) DO UPDATE SET epoch = EXCLUDED.epoch, seq = EXCLUDED.seq, updated_at = now()`,
			f.Star, to.Epoch, to.Seq); err != nil {
			return fmt.Errorf("move trim cursor of star %q to %s: %w", f.Star, to, err)
		}
		if err := tx.QueryRow(ctx, `INSERT INTO nova.slot_reaps (star, from_epoch, from_seq, to_epoch, to_seq, reap_after)
			VALUES ($1, $2, $3, $4, $5, now() + $6::interval) RETURNING id, reap_after`,
			f.Star, from.Epoch, from.Seq, to.Epoch, to.Seq, grace).Scan(&r.ID, &r.ReapAfter); err != nil {
			return fmt.Errorf("record slot reap %s..%s of star %q: %w", from, to, f.Star, err)
		}
		return nil
	})
	return r, err
}

// SlotReaps lists a star's slot reaps in release order, with Due by the
// database clock.
func (t *Trim) SlotReaps(ctx context.Context, star string) ([]SlotReap, error) {
	rows, err := t.db.reader(ctx).Query(ctx, `SELECT id, star, from_epoch, from_seq, to_epoch, to_seq, reap_after, reap_after <= now(), done_buckets
		FROM nova.slot_reaps WHERE star = $1 ORDER BY from_epoch, from_seq, id`, star)
	if err != nil {
		return nil, fmt.Errorf("list slot reaps of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SlotReap, error) {
		var s SlotReap
		return s, r.Scan(&s.ID, &s.Star, &s.From.Epoch, &s.From.Seq, &s.To.Epoch, &s.To.Seq, &s.ReapAfter, &s.Due, &s.DoneBuckets)
	})
	if err != nil {
		return nil, fmt.Errorf("list slot reaps of star %q: %w", star, err)
	}
	return out, nil
}

// FinishSlotReap deletes a slot reap once every bucket of its class
// confirmed every key of its range deleted.
func (t *Trim) FinishSlotReap(ctx context.Context, f Fence, id int64) error {
	return t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM nova.slot_reaps WHERE id = $1 AND star = $2`, id, f.Star); err != nil {
			return fmt.Errorf("finish slot reap %d: %w", id, err)
		}
		return nil
	})
}

// SlotReapBucketsDone records that buckets confirmed every slot of a
// slot reap's range deleted (its later rounds skip them).
func (t *Trim) SlotReapBucketsDone(ctx context.Context, f Fence, id int64, buckets []string) error {
	return t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE nova.slot_reaps SET done_buckets = ARRAY(
				SELECT DISTINCT b FROM unnest(done_buckets || $3::text[]) AS b ORDER BY b)
			WHERE id = $1 AND star = $2`, id, f.Star, buckets); err != nil {
			return fmt.Errorf("record buckets done with slot reap %d: %w", id, err)
		}
		return nil
	})
}

// ShrinkSlotReap records progress on a partly deleted range: its start moves
// from from to next (the first slot not yet confirmed in every bucket). It
// changes nothing unless the row still starts at from.
func (t *Trim) ShrinkSlotReap(ctx context.Context, f Fence, id int64, from, next SlotPos) error {
	return t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE nova.slot_reaps SET from_epoch = $4, from_seq = $5
			WHERE id = $1 AND star = $6 AND from_epoch = $2 AND from_seq = $3`, id, from.Epoch, from.Seq, next.Epoch, next.Seq, f.Star); err != nil {
			return fmt.Errorf("record progress of slot reap %d: %w", id, err)
		}
		return nil
	})
}
