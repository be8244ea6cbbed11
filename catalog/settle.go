package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The auditor's settle statements (docs/architecture.md#settling): the
// commits, retention's skip of dead refs and the tiling check here; the due
// streams and their rule in duerule.go, the publish intents in intents.go,
// the quarantine in quarantine.go. Every transaction that changes anything
// is fenced.

// ErrInvariant is a broken metastore invariant found by a settle commit (for
// example a catalog entry that no longer ends where the stream's
// settled_through says): the cycle halts rather than guess.
var ErrInvariant = errors.New("metastore invariant broken")

// ErrIntentGone means a commit's publish intent is no longer open on its key
// (the reap step classified the key deletable, or recovery gave it up):
// the key is never cataloged, and the stream's next settle publishes the
// same records at a higher revision (docs/architecture.md#no-late-delete).
var ErrIntentGone = errors.New("publish intent is no longer open")

// closePublishIntent deletes the publish intent a commit carries out,
// which must still be open on the committed key (ErrIntentGone otherwise,
// and for a commit with no intent: a key whose intent was given up may
// already be deleted, late or not, and is never cataloged), and any reap
// intent on the key.
func closePublishIntent(ctx context.Context, tx pgx.Tx, id int64, key string) error {
	tag, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE id = $1 AND kind = 'publish' AND object_key = $2`, id, key)
	if err != nil {
		return fmt.Errorf("delete publish intent %d: %w", id, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("commit %s: intent %d: %w", key, id, ErrIntentGone)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE kind = 'reap' AND object_key = $1`, key); err != nil {
		return fmt.Errorf("delete reap intents of %s: %w", key, err)
	}
	return nil
}

// SettleCommit is one settled object's commit (docs/architecture.md#commit).
type SettleCommit struct {
	Entry        Entry  // the catalog row to write
	PrevRevision int32  // -1 for a new entry; else the revision being replaced
	IntentID     int64  // the key's publish intent, still open (deleted by the commit)
	ObjectKey    string // the committed key: any reap intent on it is deleted
	OldKey       string // the superseded revision's key: a reap is armed for it
	ReapGrace    time.Duration
}

// commitSettle commits a settled object in the fenced transaction tx, under the
// streams row lock: catalog upsert (or repoint from PrevRevision), advance
// settled_through, delete wholly settled refs, update or delete the due
// marker, delete the publish intent and any reap intent on the key, arm the
// superseded revision's reap. It checks the catalog still ends where the
// stream says (ErrInvariant otherwise).
func commitSettle(ctx context.Context, tx pgx.Tx, f Fence, c SettleCommit) error {
	e := c.Entry
	var settled, next, low int64
	if err := tx.QueryRow(ctx, `SELECT settled_through, next_record, low_record FROM nova.streams WHERE stream_id = $1 FOR UPDATE`, e.Stream).
		Scan(&settled, &next, &low); err != nil {
		return fmt.Errorf("lock stream %s: %w", e.Stream, err)
	}
	if err := checkSettle(c, settled, next, low); err != nil {
		return err
	}
	end := e.EndRecord()
	if c.PrevRevision < 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
			footer_offset, footer_length, min_timestamp, max_timestamp, class)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`,
			e.Stream, e.Epoch, e.FirstRecord, e.Revision, e.RecordCount, e.ObjectBytes, e.FooterOffset, e.FooterLength,
			e.MinTimestamp, e.MaxTimestamp, ClassStandard); err != nil {
			return fmt.Errorf("insert catalog entry %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
	} else {
		var oldEnd int64
		err := tx.QueryRow(ctx, `SELECT first_record + record_count FROM nova.catalog
			WHERE stream_id = $1 AND epoch = $2 AND first_record = $3 AND revision = $4`,
			e.Stream, e.Epoch, e.FirstRecord, c.PrevRevision).Scan(&oldEnd)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("read tail %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
		if err := checkTail(c, oldEnd, err == nil, settled); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nova.catalog SET revision = $5, record_count = $6, object_bytes = $7,
			footer_offset = $8, footer_length = $9, min_timestamp = $10, max_timestamp = $11, settled_at = now()
			WHERE stream_id = $1 AND epoch = $2 AND first_record = $3 AND revision = $4`,
			e.Stream, e.Epoch, e.FirstRecord, c.PrevRevision, e.Revision, e.RecordCount, e.ObjectBytes,
			e.FooterOffset, e.FooterLength, e.MinTimestamp, e.MaxTimestamp); err != nil {
			return fmt.Errorf("repoint catalog entry %s@%d: %w", e.Stream, e.FirstRecord, err)
		}
	}
	// An entry wholly below low_record (a stream whose low_record rose
	// while it was being settled) puts the stream back in retention's
	// index: retained_through drops below low_record.
	if _, err := tx.Exec(ctx, `UPDATE nova.streams SET settled_through = $2,
		retained_through = CASE WHEN $2 <= low_record THEN least(retained_through, $3) ELSE retained_through END
		WHERE stream_id = $1`, e.Stream, end, e.FirstRecord); err != nil {
		return fmt.Errorf("advance settled_through of %s: %w", e.Stream, err)
	}
	if err := refreshRefsAndMarker(ctx, tx, e.Stream, end); err != nil {
		return err
	}
	if err := closePublishIntent(ctx, tx, c.IntentID, c.ObjectKey); err != nil {
		return err
	}
	if c.OldKey != "" {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
			VALUES ($1, 'reap', $2, 'standard', now() + $3::interval)`, f.Star, c.OldKey, c.ReapGrace); err != nil {
			return fmt.Errorf("arm reap of %s: %w", c.OldKey, err)
		}
	}
	return nil
}

// refreshRefsAndMarker deletes the stream's refs wholly below settled and
// sets the due marker's since to the oldest remaining ref (or deletes it).
func refreshRefsAndMarker(ctx context.Context, tx pgx.Tx, id StreamID, settled int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM nova.span_refs WHERE stream_id = $1 AND first_record + record_count <= $2`, id, settled); err != nil {
		return fmt.Errorf("delete settled refs of %s: %w", id, err)
	}
	var since *time.Time
	if err := tx.QueryRow(ctx, `SELECT min(absorbed_at) FROM nova.span_refs WHERE stream_id = $1`, id).Scan(&since); err != nil {
		return fmt.Errorf("oldest ref of %s: %w", id, err)
	}
	if since == nil {
		if _, err := tx.Exec(ctx, `DELETE FROM nova.due_markers WHERE stream_id = $1`, id); err != nil {
			return fmt.Errorf("delete due marker of %s: %w", id, err)
		}
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO nova.due_markers (stream_id, class, since)
		SELECT stream_id, class, $2 FROM nova.streams WHERE stream_id = $1
		ON CONFLICT (stream_id) DO UPDATE SET since = EXCLUDED.since`, id, *since); err != nil {
		return fmt.Errorf("update due marker of %s: %w", id, err)
	}
	return nil
}

// SkipBelowLow applies retention to unsettled refs: refs wholly below the
// stream's low_record are deleted unsettled and settled_through jumps to the
// first remaining ref (or next_record). It returns the new settled_through.
func (s *Settle) SkipBelowLow(ctx context.Context, f Fence, id StreamID) (int64, error) {
	var settled int64
	err := s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var next, low int64
		if err := tx.QueryRow(ctx, `SELECT settled_through, next_record, low_record FROM nova.streams WHERE stream_id = $1 FOR UPDATE`, id).
			Scan(&settled, &next, &low); err != nil {
			return fmt.Errorf("lock stream %s: %w", id, err)
		}
		if settled >= low {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM nova.span_refs WHERE stream_id = $1 AND first_record + record_count <= $2`, id, low); err != nil {
			return fmt.Errorf("delete dead refs of %s: %w", id, err)
		}
		var first *int64
		if err := tx.QueryRow(ctx, `SELECT min(first_record) FROM nova.span_refs WHERE stream_id = $1`, id).Scan(&first); err != nil {
			return fmt.Errorf("first live ref of %s: %w", id, err)
		}
		jump := next
		if first != nil {
			jump = *first
		}
		if jump > settled {
			settled = jump
			if _, err := tx.Exec(ctx, `UPDATE nova.streams SET settled_through = $2 WHERE stream_id = $1`, id, settled); err != nil {
				return fmt.Errorf("advance settled_through of %s: %w", id, err)
			}
		}
		return refreshRefsAndMarker(ctx, tx, id, settled)
	})
	return settled, err
}

// Overlap is two catalog entries of a stream that cover a record twice.
type Overlap struct {
	Stream              StreamID
	PrevFirst, PrevEnd  int64
	First, End, Settled int64
}

func (o *Overlap) String() string {
	return fmt.Sprintf("stream %s: catalog entries [%d, %d) and [%d, %d) overlap (settled_through %d)",
		o.Stream, o.PrevFirst, o.PrevEnd, o.First, o.End, o.Settled)
}

// tailEntries is how many of a stream's last catalog entries FirstOverlap
// checks: a cycle only appends at settled_through or rewrites the last
// entry, so what it can break is the last entry and its neighbour; one more
// catches an earlier cycle's damage next to them.
const tailEntries = 3

// FirstOverlap checks the catalog tiling where a cycle writes, for the
// given streams in one statement: each stream's last tailEntries entries
// (a descending range of the catalog's primary key, so the cost does not
// grow with the stream's history). It returns the first pair of them that
// cover a record twice, or one that ends past its stream's
// settled_through; nil when they tile. docs/architecture.md#singleton-lease-and-fencing: either is a
// broken invariant, and the cycle halts on it. The whole catalog is
// checked by `auditor verify`.
func (s *Settle) FirstOverlap(ctx context.Context, ids []StreamID) (*Overlap, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var o Overlap
	err := s.db.reader(ctx).QueryRow(ctx, `SELECT s.stream_id, coalesce(t.prev_first, -1), coalesce(t.prev_end, -1), t.first_record, t.first_record + t.record_count, s.settled_through
		FROM unnest($1::uuid[]) AS d(stream_id) JOIN nova.streams s USING (stream_id) CROSS JOIN LATERAL (
			SELECT first_record, record_count,
				lag(first_record) OVER w AS prev_first, lag(first_record + record_count) OVER w AS prev_end
			FROM (SELECT epoch, first_record, record_count FROM nova.catalog c WHERE c.stream_id = s.stream_id
				ORDER BY epoch DESC, first_record DESC LIMIT $2) last
			WINDOW w AS (PARTITION BY epoch ORDER BY first_record)) t
		WHERE (t.first_record < t.prev_end OR t.first_record + t.record_count > s.settled_through)
		ORDER BY s.stream_id, t.first_record LIMIT 1`, ids, tailEntries).
		Scan(&o.Stream, &o.PrevFirst, &o.PrevEnd, &o.First, &o.End, &o.Settled)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("check the catalog tiling of %d streams: %w", len(ids), err)
	}
	return &o, nil
}
