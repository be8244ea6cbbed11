package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
