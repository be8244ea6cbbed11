package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/bundlefmt"
)

// ReconcileView is one stream as the metastore holds it, read from one
// snapshot, for `auditor reconcile` (docs/architecture.md#reconcile).
type ReconcileView struct {
	Stream  Stream
	Entries []Entry   // the catalog entries of the stream's epoch, in record order
	Refs    []SpanRef // its span refs, in record order
	// Intents are the open intents (publish and reap) on the stream's
	// settled keys (its key prefix: keyLow <= key < keyHigh).
	Intents []Intent
	// High is the high-water revision of each key base of the stream's
	// epoch, by first record.
	High map[int64]int32
	// Erasures are the stream's erasures, pending and applied, that reach
	// past its settled_through, in record order (malformed rows left
	// out): the records whose bytes a settled object may hold as
	// tombstones where their slots hold the originals.
	Erasures []Erasure
}

// ReconcileView reads a stream's row, catalog entries, refs, intents
// and high-water revisions from one repeatable-read snapshot. keyLow and
// keyHigh bound the stream's settled keys. An unknown stream is
// ErrNotFound.
func (rs *Restore) ReconcileView(ctx context.Context, id StreamID, keyLow, keyHigh string) (ReconcileView, error) {
	var v ReconcileView
	err := rs.db.readTx(ctx, func(tx pgx.Tx) error {
		st, err := scanStream(tx.QueryRow(ctx, `SELECT `+streamCols+` FROM nova.streams WHERE stream_id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("stream %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read stream %s: %w", id, err)
		}
		v.Stream = st
		rows, err := tx.Query(ctx, `SELECT `+entryCols+` FROM nova.catalog WHERE stream_id = $1 AND epoch = $2 ORDER BY first_record`, id, st.Epoch)
		if err != nil {
			return fmt.Errorf("read catalog of %s: %w", id, err)
		}
		if v.Entries, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) }); err != nil {
			return fmt.Errorf("read catalog of %s: %w", id, err)
		}
		rows, err = tx.Query(ctx, `SELECT `+SpanRefColumns+` FROM nova.span_refs WHERE stream_id = $1 ORDER BY first_record`, id)
		if err != nil {
			return fmt.Errorf("read refs of %s: %w", id, err)
		}
		if v.Refs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return ScanSpanRef(r) }); err != nil {
			return fmt.Errorf("read refs of %s: %w", id, err)
		}
		// Each partial key index serves its kind's range.
		rows, err = tx.Query(ctx, `SELECT `+intentCols+`, false FROM nova.orphan_intents
			WHERE kind = 'publish' AND object_key >= $1 AND object_key < $2
			UNION ALL SELECT `+intentCols+`, false FROM nova.orphan_intents
			WHERE kind = 'reap' AND object_key >= $1 AND object_key < $2 ORDER BY 1`, keyLow, keyHigh)
		if err != nil {
			return fmt.Errorf("read intents of %s: %w", id, err)
		}
		if v.Intents, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) {
			var in Intent
			err := scanIntent(r, &in)
			return in, err
		}); err != nil {
			return fmt.Errorf("read intents of %s: %w", id, err)
		}
		v.High = map[int64]int32{}
		rows, err = tx.Query(ctx, `SELECT first_record, high_revision FROM nova.auditor_key_revisions WHERE stream_id = $1 AND epoch = $2`, id, st.Epoch)
		if err != nil {
			return fmt.Errorf("read key revisions of %s: %w", id, err)
		}
		var first int64
		var high int32
		_, err = pgx.ForEachRow(rows, []any{&first, &high}, func() error { v.High[first] = high; return nil })
		if err != nil {
			return fmt.Errorf("read key revisions of %s: %w", id, err)
		}
		// first_record > settled - record_count: the end, without the sum
		// a malformed row could overflow (record_count is positive).
		rows, err = tx.Query(ctx, `SELECT `+erasureCols+` FROM nova.erasures e
			WHERE e.stream_id = $1 AND e.first_record > $2 - e.record_count ORDER BY e.first_record`, id, st.SettledThrough)
		if err != nil {
			return fmt.Errorf("read erasures of %s: %w", id, err)
		}
		es, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Erasure, error) { return scanErasure(r) })
		if err != nil {
			return fmt.Errorf("read erasures of %s: %w", id, err)
		}
		for _, e := range es {
			if e.Valid() == "" {
				v.Erasures = append(v.Erasures, e)
			}
		}
		return nil
	})
	return v, err
}

// ClaimForReconcile prepares, fenced and in one transaction, the objects
// `auditor reconcile` is about to catalog (or cut) in one stream: a
// publish intent is opened on each of the keys that has none (the
// reconcile's adoption of standing objects the metastore does not know;
// its commit closes them), and the high-water revision of each key base
// found (first records of the stream's epoch) is raised to at least the
// revision given, never lowered. The intents come first so that a rerun
// after a crash still tells the claimed keys (an open intent names them)
// from keys given up below the raised high-water. It returns the intents
// it opened (a key with a publish intent open already keeps it: a rerun's
// own claim, or an intent of the restored metastore, which recovery
// finishes, aborting its upload, once the key is cataloged).
func (rs *Restore) ClaimForReconcile(ctx context.Context, f Fence, id StreamID, epoch int64, keys []string,
	firsts []int64, revs []int32) ([]int64, error) {
	var out []int64
	err := rs.db.fenced(ctx, f, func(tx pgx.Tx) error {
		out = out[:0]
		if len(keys) > 0 {
			rows, err := tx.Query(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class)
				SELECT $1, 'publish', k, 'standard' FROM unnest($2::text[]) AS k ORDER BY k
				ON CONFLICT (object_key) WHERE kind = 'publish' DO NOTHING
				RETURNING id`, f.Star, keys)
			if err != nil {
				return fmt.Errorf("claim %d keys of %s: %w", len(keys), id, err)
			}
			if out, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
				return fmt.Errorf("claim %d keys of %s: %w", len(keys), id, err)
			}
		}
		if len(firsts) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_key_revisions AS k (stream_id, epoch, first_record, high_revision)
			SELECT $1, $2, first, max(rev) FROM unnest($3::bigint[], $4::int[]) AS u(first, rev) GROUP BY first ORDER BY first
			ON CONFLICT (stream_id, epoch, first_record) DO UPDATE SET high_revision = greatest(k.high_revision, EXCLUDED.high_revision)
			WHERE k.high_revision < EXCLUDED.high_revision`, id, epoch, firsts, revs); err != nil {
			return fmt.Errorf("raise %d high-water revisions of %s: %w", len(firsts), id, err)
		}
		return nil
	})
	return out, err
}

// ReconcileCommit is what `auditor reconcile --apply` changes in one
// stream, in one fenced transaction.
type ReconcileCommit struct {
	Stream StreamID
	Bucket string // the stream's bucket (a key coordinate)
	// ExpectSettled is the stream's settled_through as the reconcile read
	// it: anything else and nothing is written (ErrInvariant: the
	// metastore moved under it). next_record may have grown meanwhile (the
	// write path goes on); Settled must not pass it.
	ExpectSettled int64
	// Remove are the catalog entries (first record, revision) that go;
	// Add, the entries that come (each a new row: Remove frees its first
	// record first).
	Remove []EntryRevision
	Add    []Entry
	// Settled is the new settled_through (refs wholly below it are
	// deleted, the due marker follows the rest).
	Settled int64
	// Close are publish intents the reconcile opened (its claims, its
	// cut's): deleted, with any reap intent on their keys. Every key Add
	// catalogs must have an open publish intent (ErrIntentGone otherwise).
	Close []int64
	// Reap are keys no state references that the stream's chain
	// supersedes: a reap intent is armed for each (unless one is).
	Reap      []string
	ReapGrace time.Duration
}

// CommitReconcile applies c under the streams row lock, fenced. Nothing is
// written unless the stream still has the settled_through and next_record
// the reconcile planned with.
func (rs *Restore) CommitReconcile(ctx context.Context, f Fence, c ReconcileCommit) error {
	return rs.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var settled, next, low int64
		if err := tx.QueryRow(ctx, `SELECT settled_through, next_record, low_record FROM nova.streams WHERE stream_id = $1 FOR UPDATE`, c.Stream).
			Scan(&settled, &next, &low); err != nil {
			return fmt.Errorf("lock stream %s: %w", c.Stream, err)
		}
		if settled != c.ExpectSettled {
			return fmt.Errorf("%w: stream %s moved under reconcile: settled_through %d (planned with %d)",
				ErrInvariant, c.Stream, settled, c.ExpectSettled)
		}
		if c.Settled > next {
			return fmt.Errorf("%w: stream %s: settled_through %d past next_record %d", ErrInvariant, c.Stream, c.Settled, next)
		}
		for _, r := range c.Remove {
			tag, err := tx.Exec(ctx, `DELETE FROM nova.catalog WHERE stream_id = $1 AND first_record = $2 AND revision = $3`,
				c.Stream, r.FirstRecord, r.Revision)
			if err != nil {
				return fmt.Errorf("remove catalog entry %s@%d~%d: %w", c.Stream, r.FirstRecord, r.Revision, err)
			}
			if tag.RowsAffected() != 1 {
				return fmt.Errorf("%w: catalog entry %s@%d~%d moved under reconcile", ErrInvariant, c.Stream, r.FirstRecord, r.Revision)
			}
		}
		minFirst := c.Settled
		for _, e := range c.Add {
			if _, err := tx.Exec(ctx, `INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
				footer_offset, footer_length, min_timestamp, max_timestamp, class)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
				e.Stream, e.Epoch, e.FirstRecord, e.Revision, e.RecordCount, e.ObjectBytes, e.FooterOffset, e.FooterLength,
				e.MinTimestamp, e.MaxTimestamp, ClassStandard); err != nil {
				return fmt.Errorf("insert catalog entry %s@%d~%d: %w", e.Stream, e.FirstRecord, e.Revision, err)
			}
			minFirst = min(minFirst, e.FirstRecord)
		}
		// Entries wholly below low_record put the stream back in
		// retention's index, as a settle commit's do.
		if _, err := tx.Exec(ctx, `UPDATE nova.streams SET settled_through = $2,
			retained_through = CASE WHEN $3 < low_record THEN least(retained_through, $3) ELSE retained_through END
			WHERE stream_id = $1`, c.Stream, c.Settled, minFirst); err != nil {
			return fmt.Errorf("set settled_through of %s: %w", c.Stream, err)
		}
		if err := refreshRefsAndMarker(ctx, tx, c.Stream, c.Settled); err != nil {
			return err
		}
		if len(c.Add) > 0 {
			// As a settle commit: the catalog only comes to reference a key
			// whose publish intent is open at that moment.
			keys := make([]string, len(c.Add))
			for i, e := range c.Add {
				keys[i] = bundlefmt.SettledKey(c.Bucket, e.Stream, uint64(e.Epoch), uint64(e.FirstRecord), uint32(e.Revision))
			}
			var open int
			if err := tx.QueryRow(ctx, `SELECT count(DISTINCT object_key) FROM nova.orphan_intents
				WHERE kind = 'publish' AND object_key = ANY($1)`, keys).Scan(&open); err != nil {
				return fmt.Errorf("read the publish intents of %s: %w", c.Stream, err)
			}
			if open != len(keys) {
				return fmt.Errorf("%w: %d of the %d keys reconcile catalogs in %s", ErrIntentGone, len(keys)-open, len(keys), c.Stream)
			}
		}
		if len(c.Close) > 0 {
			// Each kind through its own key index.
			rows, err := tx.Query(ctx, `DELETE FROM nova.orphan_intents WHERE id = ANY($1) AND kind = 'publish' RETURNING object_key`, c.Close)
			if err != nil {
				return fmt.Errorf("close %d publish intents of %s: %w", len(c.Close), c.Stream, err)
			}
			keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("close %d publish intents of %s: %w", len(c.Close), c.Stream, err)
			}
			if _, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE kind = 'reap' AND object_key = ANY($1)`, keys); err != nil {
				return fmt.Errorf("drop the reap intents of %d keys of %s: %w", len(keys), c.Stream, err)
			}
		}
		if len(c.Reap) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
				SELECT $1, 'reap', k, 'standard', now() + $3::interval FROM unnest($2::text[]) AS k
				WHERE NOT EXISTS (SELECT 1 FROM nova.orphan_intents r WHERE r.kind = 'reap' AND r.object_key = k)`,
				f.Star, c.Reap, c.ReapGrace); err != nil {
				return fmt.Errorf("arm %d reaps of %s: %w", len(c.Reap), c.Stream, err)
			}
		}
		return nil
	})
}

// ClearRewoundHalt lifts the star's halt when, and only when, its reason
// is the metastore's rewind (a reason beginning with prefix), fenced: the
// end of `auditor reconcile --apply`. It reports whether it lifted one.
func (rs *Restore) ClearRewoundHalt(ctx context.Context, f Fence, prefix string) (bool, error) {
	var cleared bool
	err := rs.db.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE nova.auditor_state SET halted_reason = NULL, halted_at = NULL
			WHERE star = $1 AND starts_with(halted_reason, $2)`, f.Star, prefix)
		if err != nil {
			return fmt.Errorf("lift the rewind halt of star %q: %w", f.Star, err)
		}
		cleared = tag.RowsAffected() == 1
		return nil
	})
	return cleared, err
}
