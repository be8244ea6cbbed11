package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The statements of trim and reap (docs/architecture.md#the-cycle): retention,
// the trim cursor and its slot reaps, and the re-check that an object reap
// names a key no future state can reference. Every transaction that changes
// anything is fenced. Package trim holds the decisions; this file holds only
// SQL.

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

// RetiredEntry is a catalog entry wholly below its stream's low_record,
// with the stream's bucket (a key coordinate).
type RetiredEntry struct {
	Entry
	Bucket string
}

// retentionDue selects up to $2 streams of star $1 with catalog entries
// possibly wholly below low_record: those whose low_record is above
// retained_through, served by the partial index streams_retention_due_idx,
// so a cycle reads only the streams with something to retire.
const retentionDue = `SELECT stream_id, bucket, epoch, low_record FROM nova.streams
	WHERE star = $1 AND low_record > retained_through ORDER BY stream_id LIMIT $2`

// retiredOf selects up to $2 entries of the stream d wholly below d.low, in
// record order: a range of the catalog's primary key below (epoch,
// low_record), which reads the retired entries and at most the one
// straddling low_record (every entry is of the stream's epoch: settle
// writes no other).
const retiredOf = `SELECT c.* FROM nova.catalog c
	WHERE c.stream_id = d.stream_id AND (c.epoch, c.first_record) < (d.epoch, d.low_record)
	  AND c.first_record + c.record_count <= d.low_record
	ORDER BY c.epoch, c.first_record LIMIT $2`

// RetentionCandidates lists up to limit catalog entries of the star that
// retention would remove (changing nothing), in stream and record order.
func (t *Trim) RetentionCandidates(ctx context.Context, star string, limit int) ([]RetiredEntry, error) {
	rows, err := t.db.reader(ctx).Query(ctx, `SELECT `+prefixed("c.", entryCols)+`, d.bucket
		FROM (`+retentionDue+`) d CROSS JOIN LATERAL (`+retiredOf+`) c
		ORDER BY c.stream_id, c.epoch, c.first_record LIMIT $2`, star, limit)
	if err != nil {
		return nil, fmt.Errorf("list retention candidates of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, scanRetired)
	if err != nil {
		return nil, fmt.Errorf("list retention candidates of star %q: %w", star, err)
	}
	return out, nil
}

func scanRetired(r pgx.CollectableRow) (RetiredEntry, error) {
	var e RetiredEntry
	err := r.Scan(&e.Stream, &e.Epoch, &e.FirstRecord, &e.Revision, &e.RecordCount, &e.ObjectBytes,
		&e.FooterOffset, &e.FooterLength, &e.MinTimestamp, &e.MaxTimestamp, &e.Class, &e.SettledAt, &e.Bucket)
	return e, err
}

func prefixed(p, cols string) string {
	out := make([]byte, 0, len(cols)*2)
	start := true
	for i := 0; i < len(cols); i++ {
		c := cols[i]
		if start && c != ' ' {
			out = append(out, p...)
			start = false
		}
		out = append(out, c)
		if c == ',' {
			start = true
		}
	}
	return string(out)
}

// ApplyRetention removes up to limit catalog entries of the star wholly
// below their stream's low_record (entries straddling it stay) and arms a
// reap intent for each one's object (key(e), class standard, reap_after =
// now() + grace), in one fenced transaction. It looks at up to limit
// streams whose low_record is above retained_through, and records in
// retained_through the low_record of each one left with no entry below it,
// so the statement's cost is that of the streams and entries it retires,
// never the catalog's size. It returns what it removed, and more when
// another call may find more.
func (t *Trim) ApplyRetention(ctx context.Context, f Fence, grace time.Duration, limit int, key func(RetiredEntry) string) (out []RetiredEntry, more bool, err error) {
	err = t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		// The due streams are found through the partial index, then
		// locked by primary key (a planner that cannot estimate
		// low_record > retained_through may seq-scan the streams for a
		// locking read) and checked again under the lock, in stream_id
		// order as Absorb locks them, so the two never deadlock; a
		// low_record raised after this lock is above the retained_through
		// written below.
		rows, err := tx.Query(ctx, `SELECT stream_id, bucket, epoch, low_record FROM nova.streams
			WHERE stream_id = ANY(ARRAY(SELECT stream_id FROM (`+retentionDue+`) d)) AND low_record > retained_through
			ORDER BY stream_id FOR UPDATE`, f.Star, limit)
		if err != nil {
			return fmt.Errorf("lock streams due for retention of star %q: %w", f.Star, err)
		}
		var (
			ids     []StreamID
			buckets []string
			epochs  []int64
			lows    []int64
		)
		for rows.Next() {
			var (
				id         StreamID
				b          string
				epoch, low int64
			)
			if err := rows.Scan(&id, &b, &epoch, &low); err != nil {
				rows.Close()
				return fmt.Errorf("lock streams due for retention of star %q: %w", f.Star, err)
			}
			ids, buckets, epochs, lows = append(ids, id), append(buckets, b), append(epochs, epoch), append(lows, low)
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("lock streams due for retention of star %q: %w", f.Star, err)
		}
		if len(ids) == 0 {
			return nil
		}
		due := `(SELECT * FROM unnest($1::uuid[], $3::text[], $4::bigint[], $5::bigint[]) AS d(stream_id, bucket, epoch, low_record)) d`
		rows, err = tx.Query(ctx, `WITH dead AS (SELECT c.stream_id, c.epoch, c.first_record, d.bucket
				FROM `+due+` CROSS JOIN LATERAL (`+retiredOf+`) c
				ORDER BY c.stream_id, c.epoch, c.first_record LIMIT $2)
			DELETE FROM nova.catalog c USING dead
			WHERE c.stream_id = dead.stream_id AND c.epoch = dead.epoch AND c.first_record = dead.first_record
			RETURNING `+prefixed("c.", entryCols)+`, dead.bucket`, ids, limit, buckets, epochs, lows)
		if err != nil {
			return fmt.Errorf("remove retired entries of star %q: %w", f.Star, err)
		}
		if out, err = pgx.CollectRows(rows, scanRetired); err != nil {
			return fmt.Errorf("remove retired entries of star %q: %w", f.Star, err)
		}
		// A correlated scalar subquery stays a per-stream probe of the
		// primary key (NOT EXISTS may become an anti-join over the catalog).
		if _, err := tx.Exec(ctx, `UPDATE nova.streams s SET retained_through = d.low_record FROM `+due+`
			WHERE s.stream_id = d.stream_id AND (SELECT c.first_record FROM (`+retiredOf+`) c) IS NULL`, ids, 1, buckets, epochs, lows); err != nil {
			return fmt.Errorf("record retention of %d streams of star %q: %w", len(ids), f.Star, err)
		}
		more = len(ids) == limit || len(out) == limit
		keys := make([]string, len(out))
		for i, e := range out {
			keys[i] = key(e)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
			SELECT $1, 'reap', k, $3, now() + $4::interval FROM unnest($2::text[]) AS k`,
			f.Star, keys, ClassStandard, grace); err != nil {
			return fmt.Errorf("arm reaps of %d retired entries of star %q: %w", len(keys), f.Star, err)
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return out, more, nil
}

// DueObjectReaps lists, in id order from after (exclusive), up to limit
// intents of the star whose object the reap step should consider now
// (database clock): reap intents past reap_after, and publish intents
// created more than grace ago.
func (t *Trim) DueObjectReaps(ctx context.Context, star string, grace time.Duration, after int64, limit int) ([]Intent, error) {
	rows, err := t.db.reader(ctx).Query(ctx, `SELECT id, star, kind, object_key, class, coalesce(upload_id, ''), staged_parts, created_at, reap_after, true,
			abort_unrecorded
		FROM nova.orphan_intents
		WHERE star = $1 AND id > $4 AND (kind = 'reap' AND reap_after <= now() OR kind = 'publish' AND created_at <= now() - $2::interval)
		ORDER BY id LIMIT $3`, star, grace, limit, after)
	if err != nil {
		return nil, fmt.Errorf("list due object reaps of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) {
		var in Intent
		return in, r.Scan(&in.ID, &in.Star, &in.Kind, &in.ObjectKey, &in.Class, &in.UploadID, &in.StagedParts, &in.CreatedAt, &in.ReapAfter, &in.Due,
			&in.AbortUnrecorded)
	})
	if err != nil {
		return nil, fmt.Errorf("list due object reaps of star %q: %w", star, err)
	}
	return out, nil
}

// ReapBacklog counts what is armed for reaping: intents due now and still
// waiting for their grace (publish intents count once older than grace),
// and the slot_reaps rows.
type ReapBacklog struct {
	ObjectsDue, ObjectsWaiting int64
}

// ObjectReapBacklog counts the star's reap intents, due and waiting.
func (t *Trim) ObjectReapBacklog(ctx context.Context, star string, grace time.Duration) (ReapBacklog, error) {
	var b ReapBacklog
	err := t.db.reader(ctx).QueryRow(ctx, `SELECT
			count(*) FILTER (WHERE kind = 'reap' AND reap_after <= now() OR kind = 'publish' AND created_at <= now() - $2::interval),
			count(*) FILTER (WHERE kind = 'reap' AND reap_after > now())
		FROM nova.orphan_intents WHERE star = $1`, star, grace).Scan(&b.ObjectsDue, &b.ObjectsWaiting)
	if err != nil {
		return b, fmt.Errorf("count reap backlog of star %q: %w", star, err)
	}
	return b, nil
}

// KeyCoords are the coordinates a settled key derives from (docs/format.md#keys): (streams.bucket, stream_id, epoch, first_record, revision).
type KeyCoords struct {
	Bucket      string
	Stream      StreamID
	Epoch       int64
	FirstRecord int64
	Revision    int32
}

// ReapCandidate is an intent whose object the reap step may delete.
type ReapCandidate struct {
	ID     int64
	Key    string
	Coords KeyCoords
}

// KeyVerdict is what the metastore says, now, of a candidate's key.
type KeyVerdict int

const (
	// KeyDead means no catalog row has the key's coordinates, no other open
	// publish intent names it, and (for a publish intent) no settle would
	// take the intent up again. ClassifyReaps makes it dead for good in the
	// same transaction: the base's high-water revision is raised to the
	// key's and a publish intent becomes a reap intent, so no intent can
	// name the key again (docs/architecture.md#no-late-delete). Deleting it
	// is safe at any time, late or not.
	KeyDead KeyVerdict = iota
	// KeyReferenced means a catalog row has the key's coordinates (and the
	// stream's bucket is the key's). The reap intent is dropped, never
	// executed.
	KeyReferenced
	// KeyPublishable means a publish intent older than the grace that a settle
	// would still take up (its key is its stream's next object at
	// settled_through, or the next revision of an entry that a tail rewrite
	// or a pending erasure rewrites): held, not deleted.
	KeyPublishable
	// KeyPublishing means another open publish intent names the key: held.
	KeyPublishing
	// KeyGone means the intent is gone or no longer due; nothing to do.
	KeyGone
)

// Deletable reports whether the reap step deletes the object of a candidate
// with this verdict.
func (v KeyVerdict) Deletable() bool { return v == KeyDead }

func (v KeyVerdict) String() string {
	switch v {
	case KeyDead:
		return "dead"
	case KeyReferenced:
		return "referenced"
	case KeyPublishable:
		return "publishable"
	case KeyPublishing:
		return "publishing"
	case KeyGone:
		return "gone"
	}
	return fmt.Sprintf("KeyVerdict(%d)", int(v))
}

// ClassifyReaps decides each candidate's verdict in one fenced transaction
// that first locks the candidates' intent rows still due (database clock;
// publish intents older than grace): the rest are KeyGone. Reap intents
// whose key is referenced are deleted (dropped) in the same transaction.
// Every dead key is buried there too: its base's high-water revision is
// raised to the key's, and a dead publish intent becomes a reap intent, so
// from this commit on no publish intent can name the key
// (docs/architecture.md#no-late-delete). The caller deletes the objects of
// KeyDead candidates, then calls FinishReaps.
func (t *Trim) ClassifyReaps(ctx context.Context, f Fence, grace time.Duration, cands []ReapCandidate) (map[int64]KeyVerdict, error) {
	var out map[int64]KeyVerdict
	err := t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var err error
		var unreachable map[int64]bool
		out, unreachable, err = classify(ctx, tx, f.Star, grace, cands, true)
		if err != nil {
			return err
		}
		var drop, dead []int64
		var streams []StreamID
		var epochs, firsts []int64
		var revs []int32
		var gone []bool
		for _, c := range cands {
			switch out[c.ID] {
			case KeyReferenced:
				drop = append(drop, c.ID)
			case KeyDead:
				dead = append(dead, c.ID)
				streams, epochs = append(streams, c.Coords.Stream), append(epochs, c.Coords.Epoch)
				firsts, revs = append(firsts, c.Coords.FirstRecord), append(revs, c.Coords.Revision)
				gone = append(gone, unreachable[c.ID])
			}
		}
		if len(drop) > 0 {
			if _, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE id = ANY($1) AND kind = 'reap'`, drop); err != nil {
				return fmt.Errorf("drop %d reap intents of referenced keys: %w", len(drop), err)
			}
		}
		if len(dead) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE nova.orphan_intents SET kind = 'reap', reap_after = now(), abort_unrecorded = true
			WHERE id = ANY($1) AND kind = 'publish'`, dead); err != nil {
			return fmt.Errorf("turn %d dead publish intents into reaps: %w", len(dead), err)
		}
		// A base no plan can reach again (below its stream's
		// settled_through, with no catalog entry: new runs start at or past
		// settled_through, rewrites go to cataloged entries, and neither
		// settled_through nor that absence ever changes back) needs no
		// high-water: its row goes, so the table follows the catalog
		// through retention instead of history. Every other base is raised
		// to the key's revision. classify read which bases are unreachable
		// with the rows it probed for the verdict, so this statement
		// touches only auditor_key_revisions.
		if _, err := tx.Exec(ctx, `WITH d AS (SELECT stream_id, epoch, first_record, max(rev) AS rev, bool_and(gone) AS gone
				FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::int[], $5::bool[]) AS d(stream_id, epoch, first_record, rev, gone)
				GROUP BY 1, 2, 3),
			pruned AS (DELETE FROM nova.auditor_key_revisions k USING d
				WHERE d.gone AND k.stream_id = d.stream_id AND k.epoch = d.epoch AND k.first_record = d.first_record)
			INSERT INTO nova.auditor_key_revisions AS k (stream_id, epoch, first_record, high_revision)
			SELECT stream_id, epoch, first_record, rev FROM d WHERE NOT d.gone
			ORDER BY 1, 2, 3
			ON CONFLICT (stream_id, epoch, first_record) DO UPDATE SET high_revision = greatest(k.high_revision, EXCLUDED.high_revision)`,
			streams, epochs, firsts, revs, gone); err != nil {
			return fmt.Errorf("bury %d dead keys: %w", len(dead), err)
		}
		return nil
	})
	return out, err
}

// PreviewReaps is ClassifyReaps for a dry run: it locks and changes nothing.
func (t *Trim) PreviewReaps(ctx context.Context, star string, grace time.Duration, cands []ReapCandidate) (map[int64]KeyVerdict, error) {
	var out map[int64]KeyVerdict
	err := t.db.readTx(ctx, func(tx pgx.Tx) error {
		var err error
		out, _, err = classify(ctx, tx, star, grace, cands, false)
		return err
	})
	return out, err
}

// classify returns each candidate's verdict and whether its key's base
// is unreachable: below its stream's settled_through (of its epoch) with
// no catalog entry, so no plan can target it again (ClassifyReaps).
func classify(ctx context.Context, tx pgx.Tx, star string, grace time.Duration, cands []ReapCandidate, lock bool) (map[int64]KeyVerdict, map[int64]bool, error) {
	out := make(map[int64]KeyVerdict, len(cands))
	unreachable := make(map[int64]bool, len(cands))
	if len(cands) == 0 {
		return out, unreachable, nil
	}
	var (
		ids            = make([]int64, len(cands))
		keys, buckets  = make([]string, len(cands)), make([]string, len(cands))
		streams        = make([]StreamID, len(cands))
		epochs, firsts = make([]int64, len(cands)), make([]int64, len(cands))
		revs           = make([]int32, len(cands))
	)
	for i, c := range cands {
		ids[i], keys[i], buckets[i], streams[i] = c.ID, c.Key, c.Coords.Bucket, c.Coords.Stream
		epochs[i], firsts[i], revs[i] = c.Coords.Epoch, c.Coords.FirstRecord, c.Coords.Revision
		out[c.ID] = KeyGone
	}
	lockClause := ""
	if lock {
		lockClause = " FOR UPDATE OF o"
	}
	// The verdict is one statement over the candidates: referenced (the
	// catalog row exists with the stream's bucket), publishing (another
	// open publish intent on the key), publishable (only a publish intent
	// can be: a settle would take it up again, as recovery's live rule
	// says: the key's stream and bucket, and a first record at or past
	// settled_through, or a higher revision of the stream's last entry,
	// which a tail rewrite may still publish, or of an entry a pending
	// erasure intersects, which the erasure's rewrite may still publish; a
	// higher stream epoch is reserved for a future reset, so it counts as
	// publishable too). Everything else is dead. A reap intent is never
	// publishable: no publish intent can name its key again.
	rows, err := tx.Query(ctx, `
		WITH k AS (SELECT * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::uuid[], $6::bigint[], $7::bigint[], $8::int[])
			AS k(id, key, bucket, stream_id, epoch, first, rev)),
		due AS (SELECT o.id, o.kind FROM nova.orphan_intents o JOIN k ON k.id = o.id
			WHERE o.star = $1 AND o.object_key = k.key
			  AND (o.kind = 'reap' AND o.reap_after <= now() OR o.kind = 'publish' AND o.created_at <= now() - $9::interval)`+lockClause+`)
		SELECT k.id,
			coalesce(b.revision = k.rev AND b.bucket = k.bucket, false),
			EXISTS (SELECT 1 FROM nova.orphan_intents p WHERE p.kind = 'publish' AND p.object_key = k.key AND p.id <> k.id),
			due.kind = 'publish' AND EXISTS (SELECT 1 FROM nova.streams s WHERE s.stream_id = k.stream_id AND s.bucket = k.bucket
				AND (k.epoch > s.epoch OR k.epoch = s.epoch AND (k.first >= s.settled_through
					OR EXISTS (SELECT 1 FROM nova.catalog c WHERE c.stream_id = k.stream_id AND c.epoch = k.epoch
						AND c.first_record = k.first AND c.revision < k.rev
						AND (c.first_record + c.record_count = s.settled_through
							OR EXISTS (SELECT 1 FROM nova.erasures er WHERE er.stream_id = c.stream_id AND er.applied_at IS NULL
								AND er.first_record < c.first_record + c.record_count
								AND er.first_record + er.record_count > c.first_record))))))
			,
			coalesce(b.epoch = k.epoch AND k.first < b.settled_through AND b.revision IS NULL, false)
		FROM k JOIN due ON due.id = k.id
		-- the key's stream row and its base's catalog entry, probed once
		-- per key (OFFSET 0 keeps the lookup per key, never a scan)
		LEFT JOIN LATERAL (SELECT s.bucket, s.epoch, s.settled_through, c.revision FROM nova.streams s
			LEFT JOIN nova.catalog c ON c.stream_id = s.stream_id AND c.epoch = k.epoch AND c.first_record = k.first
			WHERE s.stream_id = k.stream_id OFFSET 0) b ON true`,
		star, ids, keys, buckets, streams, epochs, firsts, revs, grace)
	if err != nil {
		return nil, nil, fmt.Errorf("classify %d reap candidates of star %q: %w", len(cands), star, err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                                        int64
			referenced, publishing, publishable, gone bool
		)
		if err := rows.Scan(&id, &referenced, &publishing, &publishable, &gone); err != nil {
			return nil, nil, fmt.Errorf("classify reap candidates of star %q: %w", star, err)
		}
		unreachable[id] = gone
		switch {
		case referenced:
			out[id] = KeyReferenced
		case publishing:
			out[id] = KeyPublishing
		case publishable:
			out[id] = KeyPublishable
		default:
			out[id] = KeyDead
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("classify reap candidates of star %q: %w", star, err)
	}
	return out, unreachable, nil
}

// FinishReaps deletes intents whose object reap (or upload abort) is done.
func (t *Trim) FinishReaps(ctx context.Context, f Fence, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	return t.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE id = ANY($1) AND star = $2`, ids, f.Star); err != nil {
			return fmt.Errorf("finish %d object reaps: %w", len(ids), err)
		}
		return nil
	})
}
