package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Erasures (docs/architecture.md#erasure). A row of nova.erasures declares
// the records [first_record, first_record + record_count) of a stream dead;
// the auditor makes every settled object that holds them hold tombstones
// instead, and sets applied_at once no settled object holds their bytes.

// ErrBadErasure is an erasure that cannot be recorded or applied as given:
// an empty or negative range, or one that overflows the record numbers.
var ErrBadErasure = errors.New("invalid erasure")

// Erasure is a row of nova.erasures.
type Erasure struct {
	Stream      StreamID
	FirstRecord int64
	RecordCount int64
	RequestedAt time.Time
	AppliedAt   *time.Time
	Applied     bool
}

// EndRecord is one past the erasure's last record.
func (e Erasure) EndRecord() int64 { return e.FirstRecord + e.RecordCount }

// Valid reports why an erasure row cannot be applied ("" when it can).
// The contract checks only record_count > 0; a row another writer stored
// with a negative first record, or whose end overflows, is malformed: it
// is reported and never applied, and nothing else is held up by it.
func (e Erasure) Valid() string {
	switch {
	case e.RecordCount <= 0:
		return fmt.Sprintf("record_count %d is not positive", e.RecordCount)
	case e.FirstRecord < 0:
		return fmt.Sprintf("first_record %d is negative", e.FirstRecord)
	case e.FirstRecord > math.MaxInt64-e.RecordCount:
		return fmt.Sprintf("first_record %d + record_count %d overflows", e.FirstRecord, e.RecordCount)
	}
	return ""
}

const erasureCols = `e.stream_id, e.first_record, e.record_count, e.requested_at, e.applied_at`

func scanErasure(r pgx.Row) (Erasure, error) {
	var e Erasure
	err := r.Scan(&e.Stream, &e.FirstRecord, &e.RecordCount, &e.RequestedAt, &e.AppliedAt)
	e.Applied = e.AppliedAt != nil
	return e, err
}

// PendingErasure is an erasure not yet applied, with its stream's row and
// whether the stream is quarantined (no rewrite runs on it until released).
type PendingErasure struct {
	Erasure
	Stream      Stream
	Quarantined bool
}

// PendingErasures reads the star's erasures whose applied_at is null,
// oldest request first, at most limit (the partial indexes on the pending
// erasures: the cost follows the pending erasures, not the applied ones):
// what `auditor status` lists. The erasure step reads
// PendingErasureWindows instead.
func (es *Erasures) PendingErasures(ctx context.Context, star string, limit int) ([]PendingErasure, error) {
	rows, err := es.db.reader(ctx).Query(ctx, `SELECT `+erasureCols+`, `+prefixed("s.", streamCols)+`,
			EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = e.stream_id)
		FROM nova.erasures e JOIN nova.streams s USING (stream_id)
		WHERE e.applied_at IS NULL AND s.star = $1
		ORDER BY e.requested_at, e.stream_id, e.first_record LIMIT $2`, star, limit)
	if err != nil {
		return nil, fmt.Errorf("read pending erasures of star %q: %w", star, err)
	}
	defer rows.Close()
	var out []PendingErasure
	for rows.Next() {
		var p PendingErasure
		s := &p.Stream
		if err := rows.Scan(&p.Erasure.Stream, &p.FirstRecord, &p.RecordCount, &p.RequestedAt, &p.AppliedAt,
			&s.ID, &s.Star, &s.Bucket, &s.Epoch, &s.Class, &s.NextRecord, &s.LowRecord, &s.SettledThrough, &p.Quarantined); err != nil {
			return nil, fmt.Errorf("read pending erasures of star %q: %w", star, err)
		}
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pending erasures of star %q: %w", star, err)
	}
	return out, nil
}

// ErasureWindow is one stream's turn in a cycle's erasure step: its lowest
// pending erasures in record order (PendingErasureWindows).
type ErasureWindow struct {
	Stream   StreamID
	Erasures []Erasure // in record order: every pending erasure below ExactBelow
	Pending  int64     // the stream's pending erasures, read or not
}

// Complete reports whether the window holds every pending erasure of its
// stream.
func (w ErasureWindow) Complete() bool { return int64(len(w.Erasures)) >= w.Pending }

// ExactBelow is a record number below which the window holds every pending
// erasure of its stream that starts there (the first records are unique
// per stream): one past its last erasure's first record, or
// math.MaxInt64 when the window is complete.
func (w ErasureWindow) ExactBelow() int64 {
	if w.Complete() || len(w.Erasures) == 0 {
		return math.MaxInt64
	}
	last := w.Erasures[len(w.Erasures)-1].FirstRecord
	if last == math.MaxInt64 {
		return last
	}
	return last + 1
}

// PendingErasureWindows reads at most limit pending erasures of the star's
// streams that are not quarantined, dealt round-robin: every stream's
// lowest pending erasure (in record order) before any stream's second, and
// so on, the streams in order of their oldest pending request. So each
// stream with pending erasures gets its turn while the total stays
// bounded: a stream with a flood of erasures takes what the others leave,
// and the others are never hidden behind it (until more than limit
// streams have pending erasures: then the limit oldest get one each). The
// windows come in that stream order. The cost follows the star's pending
// erasures (erasures_pending_idx: all of them are ranked), never the
// applied ones; what comes back is at most limit.
func (es *Erasures) PendingErasureWindows(ctx context.Context, star string, limit int) ([]ErasureWindow, error) {
	rows, err := es.db.reader(ctx).Query(ctx, `SELECT stream_id, first_record, record_count, requested_at, applied_at, pending FROM (
			SELECT `+erasureCols+`,
				row_number() OVER (PARTITION BY e.stream_id ORDER BY e.first_record) AS turn,
				count(*) OVER (PARTITION BY e.stream_id) AS pending,
				min(e.requested_at) OVER (PARTITION BY e.stream_id) AS oldest
			FROM nova.erasures e JOIN nova.streams s USING (stream_id)
			WHERE e.applied_at IS NULL AND s.star = $1
			  AND NOT EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = e.stream_id)) p
		ORDER BY turn, oldest, stream_id LIMIT $2`, star, limit)
	if err != nil {
		return nil, fmt.Errorf("read pending erasure windows of star %q: %w", star, err)
	}
	defer rows.Close()
	var out []ErasureWindow
	at := map[StreamID]int{}
	for rows.Next() {
		var e Erasure
		var pending int64
		if err := rows.Scan(&e.Stream, &e.FirstRecord, &e.RecordCount, &e.RequestedAt, &e.AppliedAt, &pending); err != nil {
			return nil, fmt.Errorf("read pending erasure windows of star %q: %w", star, err)
		}
		i, ok := at[e.Stream]
		if !ok {
			i = len(out)
			at[e.Stream] = i
			out = append(out, ErasureWindow{Stream: e.Stream, Pending: pending})
		}
		out[i].Erasures = append(out[i].Erasures, e) // in turn order: by first record
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read pending erasure windows of star %q: %w", star, err)
	}
	return out, nil
}

// PendingErasuresIn reads the stream's pending erasures that hold a record
// of [from, to) and start at or after below (below <= from): every one
// that starts inside the range and, of those that start below from, the
// one that reaches farthest past it (the others' records in the range are
// among its). So, with below at math.MinInt64, the records of [from, to)
// they name are exactly those every pending erasure names there; a caller
// that read the ranges below already passes the end of the last one. The
// cost follows the range (its erasures, at most one a record, through the
// primary key) and, for the part below from, the stream's pending erasures
// there (through the partial indexes on the pending erasures), never the
// applied ones below. Malformed rows come back too (Valid).
func (es *Erasures) PendingErasuresIn(ctx context.Context, id StreamID, below, from, to int64) ([]Erasure, error) {
	if from < 0 || below > from || to < from {
		return nil, fmt.Errorf("%w: pending erasures of %s from %d in [%d, %d)", ErrInvariant, id, below, from, to)
	}
	rows, err := es.db.reader(ctx).Query(ctx, `SELECT `+erasureCols+` FROM nova.erasures e
			WHERE e.stream_id = $1 AND e.applied_at IS NULL AND e.first_record >= $3 AND e.first_record < $4
		UNION ALL
		(SELECT `+erasureCols+` FROM nova.erasures e
			WHERE e.stream_id = $1 AND e.applied_at IS NULL AND e.first_record >= $2 AND e.first_record < $3
			  AND e.first_record > $3 - e.record_count
			ORDER BY e.first_record::numeric + e.record_count DESC LIMIT 1)`,
		id, below, from, to)
	if err != nil {
		return nil, fmt.Errorf("read pending erasures of %s in [%d, %d): %w", id, from, to, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Erasure, error) { return scanErasure(r) })
	if err != nil {
		return nil, fmt.Errorf("read pending erasures of %s in [%d, %d): %w", id, from, to, err)
	}
	return out, nil
}

// ErasureBacklog is what waits: the star's pending erasures and when the
// oldest was requested (zero when none).
type ErasureBacklog struct {
	Pending      int64
	OldestAt     time.Time
	OldestAge    time.Duration // by the database's clock
	Quarantined  int64         // pending erasures of quarantined streams
	OldestStream StreamID
	OldestFirst  int64
}

// ErasureBacklog counts the star's pending erasures (status, metrics).
func (es *Erasures) ErasureBacklog(ctx context.Context, star string) (ErasureBacklog, error) {
	var b ErasureBacklog
	var oldest *time.Time
	var age *float64
	err := es.db.reader(ctx).QueryRow(ctx, `SELECT count(*), min(e.requested_at),
			extract(epoch FROM now() - min(e.requested_at))::float8,
			count(*) FILTER (WHERE EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = e.stream_id))
		FROM nova.erasures e JOIN nova.streams s USING (stream_id)
		WHERE e.applied_at IS NULL AND s.star = $1`, star).Scan(&b.Pending, &oldest, &age, &b.Quarantined)
	if err != nil {
		return b, fmt.Errorf("read erasure backlog of star %q: %w", star, err)
	}
	if oldest != nil {
		b.OldestAt = *oldest
	}
	if age != nil {
		b.OldestAge = time.Duration(*age * float64(time.Second))
	}
	return b, nil
}

// ErasuresAppliedWithin is how many erasures the star's cycles applied in
// the last window (by the database's clock), as the run ledger counted
// them: the runs from the last one started before the window on (that
// one may have applied some inside it). A run still going has not
// recorded its counts yet, and one killed before it did never will; runs
// pruned by --history-retention are gone. It reads the runs of the window
// through auditor_runs_star_idx: its cost follows the window, never the
// erasures applied before it (there is no index on applied_at to scan
// them by).
func (es *Erasures) ErasuresAppliedWithin(ctx context.Context, star string, window time.Duration) (int64, error) {
	var n int64
	err := es.db.reader(ctx).QueryRow(ctx, `SELECT coalesce(sum(erasures_applied), 0)::bigint FROM nova.auditor_runs
		WHERE star = $1 AND started_at >= coalesce(
			(SELECT max(started_at) FROM nova.auditor_runs WHERE star = $1 AND started_at < now() - $2::interval),
			'-infinity')`, star, window).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count erasures applied by star %q in the last %s: %w", star, window, err)
	}
	return n, nil
}

// RecordErasure records an erasure of count records of a stream from
// first (what `auditor erase` does; the write path may insert rows
// itself). It is not fenced: anyone may declare records dead. An empty or
// negative range is ErrBadErasure; an unknown stream ErrNotFound. Recording
// the same range again is a no-op that returns the standing row; another
// range starting at the same record is refused (the primary key is the
// first record), naming the standing one.
func (es *Erasures) RecordErasure(ctx context.Context, id StreamID, first, count int64) (Erasure, error) {
	e := Erasure{Stream: id, FirstRecord: first, RecordCount: count}
	if why := e.Valid(); why != "" {
		return e, fmt.Errorf("%w: %s", ErrBadErasure, why)
	}
	err := es.db.tx(ctx, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM nova.streams WHERE stream_id = $1`, id).Scan(&one); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("stream %s: %w", id, ErrNotFound)
			}
			return fmt.Errorf("read stream %s: %w", id, err)
		}
		// DO NOTHING, then the standing row: the auditor's role may insert
		// erasures and set applied_at, never change a row's range
		// (deploy/postgres-roles.sql). Rows are never deleted, so the
		// standing row is there to read.
		got, err := scanErasure(tx.QueryRow(ctx, `INSERT INTO nova.erasures AS e (stream_id, first_record, record_count)
			VALUES ($1, $2, $3) ON CONFLICT (stream_id, first_record) DO NOTHING
			RETURNING `+erasureCols, id, first, count))
		if errors.Is(err, pgx.ErrNoRows) {
			got, err = scanErasure(tx.QueryRow(ctx, `SELECT `+erasureCols+` FROM nova.erasures e
				WHERE e.stream_id = $1 AND e.first_record = $2`, id, first))
		}
		if err != nil {
			return fmt.Errorf("record erasure of %s [%d, +%d): %w", id, first, count, err)
		}
		if got.RecordCount != count {
			return fmt.Errorf("%w: stream %s already has an erasure at record %d of %d records (requested %s)",
				ErrBadErasure, id, first, got.RecordCount, got.RequestedAt.UTC().Format(time.RFC3339))
		}
		e = got
		return nil
	})
	return e, err
}

// ErasuresOf reads a stream's erasures that intersect [from, to), pending
// and applied, in record order.
func (es *Erasures) ErasuresOf(ctx context.Context, id StreamID, from, to int64) ([]Erasure, error) {
	rows, err := es.db.reader(ctx).Query(ctx, `SELECT `+erasureCols+` FROM nova.erasures e
		WHERE e.stream_id = $1 AND e.first_record < $3 AND e.first_record + e.record_count > $2
		ORDER BY e.first_record`, id, from, to)
	if err != nil {
		return nil, fmt.Errorf("read erasures of %s: %w", id, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Erasure, error) { return scanErasure(r) })
	if err != nil {
		return nil, fmt.Errorf("read erasures of %s: %w", id, err)
	}
	return out, nil
}

// EntriesIntersecting reads the stream's catalog entries (of its epoch)
// that hold any record of [from, to), in record order: the one that
// starts at or below from (through the primary key, backwards) and those
// starting inside the range.
func (es *Erasures) EntriesIntersecting(ctx context.Context, id StreamID, epoch, from, to int64) ([]Entry, error) {
	rows, err := es.db.reader(ctx).Query(ctx, `SELECT `+entryCols+` FROM nova.catalog
		WHERE stream_id = $1 AND epoch = $2 AND first_record < $4 AND first_record >= coalesce(
			(SELECT max(first_record) FROM nova.catalog WHERE stream_id = $1 AND epoch = $2 AND first_record <= $3), $3)
		ORDER BY first_record`, id, epoch, from, to)
	if err != nil {
		return nil, fmt.Errorf("read catalog entries of %s in [%d, %d): %w", id, from, to, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	if err != nil {
		return nil, fmt.Errorf("read catalog entries of %s in [%d, %d): %w", id, from, to, err)
	}
	var live []Entry
	for _, e := range out {
		if e.EndRecord() > from {
			live = append(live, e)
		}
	}
	return live, nil
}

// ErrRevisionMoved is a rewrite's commit that found its entry at another
// revision than the one it rewrote (or gone): nothing was changed, and the
// rewrite is planned again from what the catalog holds now.
var ErrRevisionMoved = errors.New("catalog entry moved on")

// RewriteCommit is the repoint of one catalog entry to its erasure rewrite.
type RewriteCommit struct {
	Entry        Entry // the new revision: same stream, epoch, first record and record count
	PrevRevision int32
	IntentID     int64
	ObjectKey    string // the new key: any reap intent on it is deleted
	OldKey       string // the superseded revision: its reap is armed
	ReapGrace    time.Duration
}

// CommitRewrite repoints a catalog entry from PrevRevision to a rewrite of
// the same records, in one fenced transaction under the streams row lock
// (so it orders with settle's commits and the write path's absorbs): the
// row must still be at PrevRevision with the same record range
// (ErrRevisionMoved otherwise), revisions only grow (ErrInvariant), the
// publish intent and any reap intent on the new key go, and the old
// revision's reap is armed after the grace. settled_through, the refs and
// the due marker are not touched: a rewrite covers nothing new.
func (es *Erasures) CommitRewrite(ctx context.Context, f Fence, c RewriteCommit) error {
	e := c.Entry
	if e.Revision <= c.PrevRevision {
		return fmt.Errorf("%w: stream %s: rewrite from revision %d to %d", ErrInvariant, e.Stream, c.PrevRevision, e.Revision)
	}
	return es.db.commitFenced(ctx, f, func(tx pgx.Tx) error {
		var one int
		if err := tx.QueryRow(ctx, `SELECT 1 FROM nova.streams WHERE stream_id = $1 FOR UPDATE`, e.Stream).Scan(&one); err != nil {
			return fmt.Errorf("lock stream %s: %w", e.Stream, err)
		}
		var rev int32
		var count int64
		err := tx.QueryRow(ctx, `SELECT revision, record_count FROM nova.catalog
			WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, e.Stream, e.Epoch, e.FirstRecord).Scan(&rev, &count)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: stream %s: entry at %d is gone (retention)", ErrRevisionMoved, e.Stream, e.FirstRecord)
		}
		if err != nil {
			return fmt.Errorf("read entry %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		if rev != c.PrevRevision {
			return fmt.Errorf("%w: stream %s: entry at %d is at revision %d, the rewrite read %d",
				ErrRevisionMoved, e.Stream, e.FirstRecord, rev, c.PrevRevision)
		}
		if count != e.RecordCount {
			return fmt.Errorf("%w: stream %s: a rewrite of entry %d~%d covers %d records, the entry %d",
				ErrInvariant, e.Stream, e.FirstRecord, rev, e.RecordCount, count)
		}
		if _, err := tx.Exec(ctx, `UPDATE nova.catalog SET revision = $5, object_bytes = $6,
			footer_offset = $7, footer_length = $8, min_timestamp = $9, max_timestamp = $10, settled_at = now()
			WHERE stream_id = $1 AND epoch = $2 AND first_record = $3 AND revision = $4`,
			e.Stream, e.Epoch, e.FirstRecord, c.PrevRevision, e.Revision, e.ObjectBytes,
			e.FooterOffset, e.FooterLength, e.MinTimestamp, e.MaxTimestamp); err != nil {
			return fmt.Errorf("repoint catalog entry %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		if err := closePublishIntent(ctx, tx, c.IntentID, c.ObjectKey); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
			VALUES ($1, 'reap', $2, 'standard', now() + $3::interval)`, f.Star, c.OldKey, c.ReapGrace); err != nil {
			return fmt.Errorf("arm reap of %s: %w", c.OldKey, err)
		}
		return nil
	})
}

// EntryRevision names a catalog entry at a revision.
type EntryRevision struct {
	FirstRecord int64
	Revision    int32
}

// ApplyErasure sets applied_at of the erasure at (stream, first) when, in
// one fenced transaction under the streams row lock, nothing can hold its
// records' bytes any more (docs/architecture.md#erasure):
//   - every record of it is settled (settled_through reaches its end: records
//     still in transit, or not yet written, keep it pending);
//   - the catalog entries that intersect it are exactly clean, the ones
//     the caller read and found holding tombstones there;
//   - no reap or publish intent of the stream's settled keys below its end
//     remains (a superseded revision, an abandoned rewrite, an entry
//     dropped by retention: objects that may still hold the bytes until
//     the reap deletes them). keyLow and keyEnd bound those keys: the
//     stream's key prefix, and the key of its end record at revision 0.
//
// It reports whether the erasure is now applied; false with no error means
// some condition does not hold yet (a later cycle tries again). A malformed
// erasure (Valid) is never applied: ErrBadErasure.
func (es *Erasures) ApplyErasure(ctx context.Context, f Fence, e Erasure, clean []EntryRevision, keyLow, keyEnd string) (bool, error) {
	if why := e.Valid(); why != "" {
		return false, fmt.Errorf("%w: stream %s at %d: %s", ErrBadErasure, e.Stream, e.FirstRecord, why)
	}
	applied := false
	err := es.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var settled int64
		var epoch int64
		if err := tx.QueryRow(ctx, `SELECT settled_through, epoch FROM nova.streams WHERE stream_id = $1 FOR UPDATE`, e.Stream).
			Scan(&settled, &epoch); err != nil {
			return fmt.Errorf("lock stream %s: %w", e.Stream, err)
		}
		if settled < e.EndRecord() {
			return nil
		}
		rows, err := tx.Query(ctx, `SELECT `+entryCols+` FROM nova.catalog
			WHERE stream_id = $1 AND epoch = $2 AND first_record < $4 AND first_record >= coalesce(
				(SELECT max(first_record) FROM nova.catalog WHERE stream_id = $1 AND epoch = $2 AND first_record <= $3), $3)
			ORDER BY first_record`, e.Stream, epoch, e.FirstRecord, e.EndRecord())
		if err != nil {
			return fmt.Errorf("read entries of erasure %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
		if err != nil {
			return fmt.Errorf("read entries of erasure %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		want := map[EntryRevision]bool{}
		for _, c := range clean {
			want[c] = true
		}
		for _, en := range entries {
			if en.EndRecord() <= e.FirstRecord {
				continue
			}
			if !want[EntryRevision{en.FirstRecord, en.Revision}] {
				return nil // an entry the caller did not check (or checked at another revision)
			}
		}
		var held bool
		// Either kind of intent, each through its own key index (both are
		// partial: publish and reap are the only kinds).
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nova.orphan_intents
				WHERE kind = 'publish' AND object_key >= $1 AND object_key < $2)
			OR EXISTS (SELECT 1 FROM nova.orphan_intents
				WHERE kind = 'reap' AND object_key >= $1 AND object_key < $2)`, keyLow, keyEnd).Scan(&held); err != nil {
			return fmt.Errorf("read intents of erasure %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		if held {
			return nil
		}
		tag, err := tx.Exec(ctx, `UPDATE nova.erasures SET applied_at = now()
			WHERE stream_id = $1 AND first_record = $2 AND record_count = $3 AND applied_at IS NULL`,
			e.Stream, e.FirstRecord, e.RecordCount)
		if err != nil {
			return fmt.Errorf("apply erasure %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		applied = tag.RowsAffected() == 1
		return nil
	})
	return applied, err
}
