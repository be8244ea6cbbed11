package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
