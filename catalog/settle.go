package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// The auditor's settle statements (docs/architecture.md#settling). Every transaction
// that changes anything is fenced.

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

// DueStream is a stream selected for settling.
type DueStream struct {
	Stream   StreamID
	Class    string
	Since    time.Time
	Deadline time.Time // since + age cap of its class
	Forced   bool      // named by --stream or a trigger, regardless of linger
}

// DuePolicy is the linger and age cap of each class, and the tail-growth
// rule (docs/architecture.md#the-tail-growth-rule-and-its-cost-model).
type DuePolicy struct {
	Linger, AgeCap               time.Duration
	ExpressLinger, ExpressAgeCap time.Duration
	// TailGrowth is --denorm-tail-growth, the fraction f of the
	// tail-growth rule: a stream past its linger whose standing tail (its
	// last catalog entry, ending at settled_through) is smaller than
	// CopyFloor waits, unless its unsettled bytes reach f times the
	// tail's or pass CopyFloor, until its age-cap deadline less
	// DeferMargin. A forced stream, or one with a pending erasure, never
	// waits. 0 turns the rule off: every stream past its linger is due.
	TailGrowth float64
	// CopyFloor is the rule's floor (objstore.TailFloor): the smallest
	// standing tail a rewrite copies server side
	// (objstore.Limits.CopyFloor), or the output cap when that is smaller
	// (a tail at the cap is never rewritten), or the output cap on a
	// store that reads back what its assemblies copy (there a rewrite
	// moves the whole tail through the process at any size). Below it a
	// rewrite fetches and uploads, or reads back, the whole tail again:
	// what the rule saves.
	CopyFloor int64
	// Cohorts is --denorm-tail-cohorts, the rule's cohorts: the star's
	// streams in stream-ID order, in that many parts of (nearly) equal
	// count (standard streams only: express streams have no cohorts). A
	// stream the rule held and lets go (its unsettled bytes reached the
	// fraction or the floor) waits for its cohort's turn, at most until
	// its hold ends; one the rule still holds is let go at its
	// cohort's turn once its hold ends within CohortWindow. The star's
	// turn (AdvanceCohortTurn) passes to the next cohort at most once a
	// standard linger. A slot's chunks are in stream-ID order, so the
	// streams one turn lets go lie together in every slot, where they
	// are read in few ranges. 0 or 1: no cohorts (every stream the rule
	// lets go is due at once).
	Cohorts int
}

// MaxCohorts bounds DuePolicy.Cohorts: a cohort's turn comes once in that
// many lingers, and waiting for it is what the rule's cohorts add to a
// stream's time in transit.
const MaxCohorts = 64

// CohortWindow is how long before its hold ends a stream the tail-growth
// rule still holds is let go at its cohort's turn: a turn per standard
// linger for every cohort, or the class's defer margin when that is
// shorter (the hold never ends earlier than a margin before the rule
// would have let it go anyway, and never before its linger).
func (p DuePolicy) CohortWindow(class string) time.Duration {
	return min(time.Duration(p.Cohorts)*p.Linger, p.DeferMargin(class))
}

// HasCohorts reports whether the policy's rule has cohorts (the rule on,
// more than one cohort): only then has the star a turn to advance.
func (p DuePolicy) HasCohorts() bool { return p.TailGrowth > 0 && p.Cohorts > 1 }

// LingerOf is the linger of a chain class: the express class has its own,
// every other class the standard one (DueStreams says the same in SQL).
func (p DuePolicy) LingerOf(class string) time.Duration {
	if class == ClassExpress {
		return p.ExpressLinger
	}
	return p.Linger
}

// AgeCapOf is the age cap of a chain class, as LingerOf.
func (p DuePolicy) AgeCapOf(class string) time.Duration {
	if class == ClassExpress {
		return p.ExpressAgeCap
	}
	return p.AgeCap
}

// DeferMargin is how long before its age-cap deadline a stream the
// tail-growth rule holds back becomes due: the class's linger, or a
// quarter of its age cap when that is longer (dueMarkersSQL says the same).
// A quarter keeps waiting streams out of the last quarter of the cap, the
// headroom NovaAuditorAgeCapHeadroom guards, so that alert still means
// "settling does not keep up"; and a margin of at least one linger leaves
// as many cycles to settle a waiting stream before its deadline as a
// stream due at its linger has before its linger passes again.
func (p DuePolicy) DeferMargin(class string) time.Duration {
	return max(p.LingerOf(class), p.AgeCapOf(class)/4)
}

// HoldFor is how long after its since a stream the tail-growth rule holds
// back becomes due anyway: max(linger, age cap - DeferMargin), as
// dueMarkersSQL.
func (p DuePolicy) HoldFor(class string) time.Duration {
	return max(p.LingerOf(class), p.AgeCapOf(class)-p.DeferMargin(class))
}

// The linger and age cap of a due marker d's class, from the parameters
// $2-$5 every statement over dueMarkersSQL binds (duePolicyArgs).
const (
	markerLinger = `CASE WHEN d.class = 'express' THEN $2::interval ELSE $4::interval END`
	markerAgeCap = `CASE WHEN d.class = 'express' THEN $3::interval ELSE $5::interval END`
	// DeferMargin and HoldFor of the marker's class.
	markerMargin = `greatest(` + markerLinger + `, ` + markerAgeCap + ` / 4)`
	markerHold   = `greatest(` + markerLinger + `, ` + markerAgeCap + ` - ` + markerMargin + `)`
)

// dueMarkersSQL reads the due markers of star $1 under the policy
// duePolicyArgs binds ($2-$8): each marker's stream, class, since, linger,
// age cap, whether the stream is quarantined (held), and when it is due
// (due_at) with est, the unsettled bytes the tail-growth rule estimated
// for it (0 when the rule does not hold it back).
//
// The rule concerns a stream past its linger whose last catalog entry
// (one descent of the catalog's primary key, however long its history)
// ends at settled_through below the copy floor $7, and that has no pending
// erasure (erasures_pending_idx). It holds such a stream while its
// estimated unsettled bytes are below both $6 x the tail's bytes and the
// copy floor: span_refs carry record counts only (the write path's
// contract), so the estimate is the unsettled records times the tail's
// bytes per record. A held stream is due at since + hold, hold = max(linger,
// age cap - DeferMargin); every other stream at since + linger.
//
// With $8 > 1 cohorts (DuePolicy.Cohorts) and a turn recorded for the star
// (nova.auditor_state: cohort_turn, cohort_turn_at and cohort_bounds, which
// AdvanceCohortTurn writes), a standard stream's cohort is 1 + the number
// of bounds at or below its ID, and the turn's cohort is cohort_turn mod
// (bounds + 1) + 1. A stream the rule concerns and lets go is due at since
// + linger in its cohort's turn (from the turn's start on) and at since +
// hold otherwise; one it holds is due in its cohort's turn from since +
// hold - CohortWindow on (never before its linger). Neither waits past
// since + hold, so the age cap is kept as without cohorts. Express
// streams have no cohorts: the turn passes once a standard linger, far
// longer than theirs. The lateral probes run only for streams past their
// linger, with the rule on ($6 > 0): with TailGrowth 0 the statement is
// today's rule.
const dueMarkersSQL = `
	SELECT d.stream_id, d.class, d.since, ` + markerLinger + ` AS linger, ` + markerAgeCap + ` AS cap,
	       EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = d.stream_id) AS held,
	       CASE WHEN w.est IS NULL OR (NOT w.under AND (NOT k.cohorts OR k.turn)) THEN 0 ELSE w.est END::float8 AS est,
	       CASE
	         WHEN w.est IS NULL THEN d.since + ` + markerLinger + `
	         WHEN NOT k.cohorts THEN d.since + CASE WHEN w.under THEN ` + markerHold + ` ELSE ` + markerLinger + ` END
	         WHEN NOT k.turn THEN d.since + ` + markerHold + `
	         WHEN w.under THEN least(d.since + ` + markerHold + `, greatest(t.turn_at,
	              d.since + greatest(` + markerLinger + `, ` + markerHold + ` - least($8::int * $4::interval, ` + markerMargin + `))))
	         ELSE least(d.since + ` + markerHold + `, greatest(t.turn_at, d.since + ` + markerLinger + `)) END AS due_at
	FROM nova.due_markers d JOIN nova.streams s USING (stream_id)
	LEFT JOIN (SELECT a.cohort_turn AS turn, a.cohort_turn_at AS turn_at, coalesce(a.cohort_bounds, '{}') AS bounds
	           FROM nova.auditor_state a WHERE a.star = $1) t ON true
	LEFT JOIN LATERAL (
		SELECT coalesce($8::int > 1 AND t.turn IS NOT NULL AND t.turn_at IS NOT NULL AND d.class <> 'express', false) AS cohorts,
		       coalesce(1 + (SELECT count(*) FROM unnest(t.bounds) b WHERE b <= d.stream_id)
		                = t.turn % (cardinality(t.bounds) + 1) + 1, false) AS turn) k ON true
	LEFT JOIN LATERAL (
		SELECT x.est, x.est < $6::float8 * x.object_bytes AND x.est < $7::bigint AS under FROM (
			SELECT (s.next_record - s.settled_through)::float8 * c.object_bytes / c.record_count AS est,
			       c.first_record + c.record_count AS end_record, c.object_bytes
			FROM nova.catalog c
			WHERE c.stream_id = d.stream_id AND $6::float8 > 0 AND now() >= d.since + ` + markerLinger + `
			ORDER BY c.epoch DESC, c.first_record DESC LIMIT 1) x
		WHERE x.end_record = s.settled_through AND x.object_bytes < $7::bigint
		  AND NOT EXISTS (SELECT 1 FROM nova.erasures e WHERE e.stream_id = d.stream_id AND e.applied_at IS NULL)) w ON true
	WHERE s.star = $1`

// duePolicyArgs are the parameters $1-$8 of dueMarkersSQL.
func duePolicyArgs(star string, p DuePolicy) []any {
	cohorts := p.Cohorts
	if !p.HasCohorts() {
		cohorts = 0
	}
	return []any{star, p.ExpressLinger, p.ExpressAgeCap, p.Linger, p.AgeCap, p.TailGrowth, p.CopyFloor, cohorts}
}

// DueStreams selects the star's due streams by the database clock: due when
// now() >= since + linger(class), or past the tail-growth rule's margin
// for a stream it holds back, or in its cohort's turn for one the rule
// lets go (dueMarkersSQL), or forced; quarantined
// streams skipped; forced streams first, then the earliest deadline since
// + age_cap(class), at most limit.
func (s *Settle) DueStreams(ctx context.Context, star string, p DuePolicy, forced []StreamID, limit int) ([]DueStream, error) {
	if forced == nil {
		forced = []StreamID{}
	}
	rows, err := s.db.reader(ctx).Query(ctx, `
		SELECT m.stream_id, m.class, m.since, m.since + m.cap AS deadline, m.stream_id = ANY($9::uuid[]) AS forced
		FROM (`+dueMarkersSQL+`) m
		WHERE NOT m.held
		  AND (now() >= m.since + m.linger OR m.stream_id = ANY($9::uuid[]))
		  AND (now() >= m.due_at OR m.stream_id = ANY($9::uuid[]))
		ORDER BY forced DESC, deadline, m.stream_id
		LIMIT $10`, append(duePolicyArgs(star, p), forced, limit)...)
	if err != nil {
		return nil, fmt.Errorf("select due streams of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (DueStream, error) {
		var d DueStream
		return d, r.Scan(&d.Stream, &d.Class, &d.Since, &d.Deadline, &d.Forced)
	})
	if err != nil {
		return nil, fmt.Errorf("select due streams of star %q: %w", star, err)
	}
	return out, nil
}

// AdvanceCohortTurn passes the star's cohort turn
// (nova.auditor_state.cohort_turn, DuePolicy.Cohorts) on to the next
// cohort, fenced, when every has passed since the turn began (by the
// database clock), and returns the turn. A star's first turn is 0. A
// cycle calls it before it selects its due streams, with every the
// standard linger: however often cycles run, a turn lasts a linger (its
// start kept on a grid of lingers, so that cycles running late do not
// stretch a rotation; reset to now when the star was left for longer), and
// however seldom, every cohort has its turn in order. A turn that passes in
// a cycle that then fails is not given back: what its cohort let go is due
// at the latest when its hold ends (dueMarkersSQL).
//
// When the turn passes, the cohorts are cut again: cohort_bounds holds
// the first stream ID of each cohort but the first, cohorts of (nearly)
// equal count over the star's streams in ID order. They are cut over the
// streams, not the due markers, so that settling a cohort does not move
// the others' bounds: a stream stays in its cohort while the star's
// streams stay (one scan of the star's streams a linger).
func (s *Settle) AdvanceCohortTurn(ctx context.Context, f Fence, every time.Duration, cohorts int) (int64, error) {
	var turn int64
	err := s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO nova.auditor_state AS a (star, cohort_turn, cohort_turn_at) VALUES ($1, 0, now())
			ON CONFLICT (star) DO UPDATE SET cohort_turn = coalesce(a.cohort_turn + 1, 0),
			cohort_turn_at = CASE WHEN now() < a.cohort_turn_at + 2 * $2::interval THEN a.cohort_turn_at + $2::interval ELSE now() END
			WHERE a.cohort_turn IS NULL OR a.cohort_turn_at IS NULL OR now() >= a.cohort_turn_at + $2::interval
			RETURNING cohort_turn`, f.Star, every)
		if err != nil {
			return fmt.Errorf("advance the cohort turn of star %q: %w", f.Star, err)
		}
		advanced, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("advance the cohort turn of star %q: %w", f.Star, err)
		}
		if len(advanced) == 0 {
			err := tx.QueryRow(ctx, `SELECT cohort_turn FROM nova.auditor_state WHERE star = $1`, f.Star).Scan(&turn)
			if err != nil {
				return fmt.Errorf("read the cohort turn of star %q: %w", f.Star, err)
			}
			return nil
		}
		turn = advanced[0]
		if _, err := tx.Exec(ctx, `UPDATE nova.auditor_state SET cohort_bounds = ARRAY(
				SELECT b.stream_id FROM (
					SELECT DISTINCT ON (x.c) x.c, x.stream_id FROM (
						SELECT stream_id, ntile($2::int) OVER (ORDER BY stream_id) AS c FROM nova.streams WHERE star = $1) x
					WHERE x.c > 1 ORDER BY x.c, x.stream_id) b ORDER BY b.c)
			WHERE star = $1`, f.Star, max(cohorts, 1)); err != nil {
			return fmt.Errorf("cut the cohorts of star %q: %w", f.Star, err)
		}
		return nil
	})
	return turn, err
}

// Intent is a row of nova.orphan_intents.
type Intent struct {
	ID          int64
	Star        string
	Kind        string // publish or reap
	ObjectKey   string
	Class       string
	UploadID    string
	StagedParts []int32
	CreatedAt   time.Time
	ReapAfter   *time.Time
	Due         bool // reap_after <= now() (reap) or created_at <= now() - grace (publish), by the database clock
	// Revision: the revision OpenPublishIntent opened (or took up) the
	// intent at; its ObjectKey is the target's key at that revision.
	Revision int32
	// AbortUnrecorded (reap intents, DueObjectReaps): a publish intent the
	// reap step turned into a reap; every upload of its key, recorded or
	// not, is listed and aborted before the intent is finished.
	AbortUnrecorded bool
	// Reopened: OpenPublishIntent found the intent already open (an
	// earlier attempt crashed or failed); that attempt may have created an
	// upload it could not record.
	Reopened bool
}

// KeyBase names the settled keys of one catalog position: a stream, its
// epoch and a first record. Its revisions are the keys' last coordinate.
type KeyBase struct {
	Stream      StreamID
	Epoch       int64
	FirstRecord int64
}

// PublishTarget is the next object a plan publishes at a key base: the
// revision the plan asks for, and the key of the base at any revision.
type PublishTarget struct {
	Base     KeyBase
	Revision int32
	Key      func(revision int32) string
}

// openPublishIntent commits a publish intent for the target before its
// first byte is written (docs/architecture.md#no-late-delete). Under the
// base's high-water revision (nova.auditor_key_revisions, locked):
//
//   - an intent still open at the base's high-water revision, at or above
//     the planned one, is taken up again as it is, marked Reopened (a
//     crashed or failed earlier attempt of the same object);
//   - otherwise a new intent is opened at the planned revision or, when the
//     base has used that revision already, one above the high-water, and
//     the high-water is raised to it.
//
// So no intent ever names a key that an earlier intent named and gave up,
// or that the reap step classified deletable: a DELETE of such a key, however
// late it lands, cannot remove what the catalog references. The returned
// intent's Revision and ObjectKey are the ones to publish.
func openPublishIntent(ctx context.Context, tx pgx.Tx, f Fence, t PublishTarget, class string, reusePlanned bool) (Intent, error) {
	var in Intent
	err := func() error {
		high, err := lockHighRevision(ctx, tx, t.Base)
		if err != nil {
			return err
		}
		rev := t.Revision
		if high >= rev && !reusePlanned {
			if high < math.MaxInt32 {
				rev = high + 1
			}
			err := scanIntent(tx.QueryRow(ctx, `SELECT `+intentCols+`, false FROM nova.orphan_intents
				WHERE kind = 'publish' AND object_key = $1`, t.Key(high)), &in)
			if err == nil {
				in.Revision, in.Reopened = high, true
				return nil
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("read publish intent of %s: %w", t.Key(high), err)
			}
			if high == math.MaxInt32 {
				return fmt.Errorf("%w: %s: every revision is used", ErrInvariant, t.Key(high))
			}
		}
		// ON CONFLICT: an intent at a revision above the high-water can be
		// open only if a binary from before migration 0007 opened it; it
		// is taken up again as well.
		key := t.Key(rev)
		err = scanIntent(tx.QueryRow(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class) VALUES ($1, 'publish', $2, $3)
			ON CONFLICT (object_key) WHERE kind = 'publish' DO NOTHING
			RETURNING `+intentCols+`, false`, f.Star, key, class), &in)
		if errors.Is(err, pgx.ErrNoRows) {
			in.Reopened = true
			err = scanIntent(tx.QueryRow(ctx, `SELECT `+intentCols+`, false FROM nova.orphan_intents
				WHERE kind = 'publish' AND object_key = $1`, key), &in)
		}
		if err != nil {
			return fmt.Errorf("open publish intent for %s: %w", key, err)
		}
		in.Revision = rev
		return setHighRevision(ctx, tx, t.Base, rev)
	}()
	return in, err
}

// intentCols are the columns scanIntent reads, but Due.
const intentCols = `id, star, kind, object_key, class, coalesce(upload_id, ''), staged_parts, created_at, reap_after`

func scanIntent(r pgx.Row, in *Intent) error {
	return r.Scan(&in.ID, &in.Star, &in.Kind, &in.ObjectKey, &in.Class, &in.UploadID, &in.StagedParts, &in.CreatedAt, &in.ReapAfter, &in.Due)
}

// lockHighRevision locks the base's high-water row and returns its
// revision, or -1 when no revision of the base was used yet: then it
// creates the row at 0, which the caller raises to the revision it opens,
// in the same transaction (every caller does), so a row is never committed
// at a revision no intent named. A new row is told from an existing one by
// which statement found it, not by a system column: the lock reads an
// existing row, and only an insert that wrote a row makes a new one. When
// another transaction creates the row between the two (the insert then
// waits for it and writes nothing) or drops it (ClassifyReaps, for a base
// no plan reaches), the lock is taken again.
func lockHighRevision(ctx context.Context, tx pgx.Tx, b KeyBase) (int32, error) {
	for range lockHighRevisionTries {
		var high int32
		err := tx.QueryRow(ctx, `SELECT high_revision FROM nova.auditor_key_revisions
			WHERE stream_id = $1 AND epoch = $2 AND first_record = $3 FOR UPDATE`, b.Stream, b.Epoch, b.FirstRecord).Scan(&high)
		if err == nil {
			return high, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return 0, fmt.Errorf("lock the revisions of %s/%d/%d: %w", b.Stream, b.Epoch, b.FirstRecord, err)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO nova.auditor_key_revisions (stream_id, epoch, first_record, high_revision)
			VALUES ($1, $2, $3, 0) ON CONFLICT (stream_id, epoch, first_record) DO NOTHING`, b.Stream, b.Epoch, b.FirstRecord)
		if err != nil {
			return 0, fmt.Errorf("create the revisions of %s/%d/%d: %w", b.Stream, b.Epoch, b.FirstRecord, err)
		}
		if tag.RowsAffected() == 1 {
			return -1, nil
		}
	}
	return 0, fmt.Errorf("lock the revisions of %s/%d/%d: the row was created and dropped %d times meanwhile",
		b.Stream, b.Epoch, b.FirstRecord, lockHighRevisionTries)
}

// lockHighRevisionTries bounds lockHighRevision's rounds: another round
// needs another transaction to create or drop the same base's row between
// its two statements, which one leader per star makes rare; the error is
// retried by the next cycle.
const lockHighRevisionTries = 8

// setHighRevision raises the base's high-water revision, whose row
// lockHighRevision locked, to rev. It never lowers it (greatest): a
// high-water that went down would let a buried key be published again
// (docs/architecture.md#no-late-delete).
func setHighRevision(ctx context.Context, tx pgx.Tx, b KeyBase, rev int32) error {
	if _, err := tx.Exec(ctx, `UPDATE nova.auditor_key_revisions SET high_revision = greatest(high_revision, $4)
		WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, b.Stream, b.Epoch, b.FirstRecord, rev); err != nil {
		return fmt.Errorf("raise the revisions of %s/%d/%d to %d: %w", b.Stream, b.Epoch, b.FirstRecord, rev, err)
	}
	return nil
}

// SetIntentUpload records the multipart upload of a publish intent.
func (s *Settle) SetIntentUpload(ctx context.Context, f Fence, id int64, uploadID string) error {
	return s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE nova.orphan_intents SET upload_id = $2 WHERE id = $1 AND kind = 'publish'`, id, uploadID); err != nil {
			return fmt.Errorf("record upload of intent %d: %w", id, err)
		}
		return nil
	})
}

// AddStagedPart records that part of a publish intent is staged locally.
func (s *Settle) AddStagedPart(ctx context.Context, f Fence, id int64, part int) error {
	return s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE nova.orphan_intents SET staged_parts = array_append(staged_parts, $2)
			WHERE id = $1 AND kind = 'publish' AND NOT ($2 = ANY(staged_parts))`, id, part); err != nil {
			return fmt.Errorf("record staged part %d of intent %d: %w", part, id, err)
		}
		return nil
	})
}

// Intents lists a star's intents of one kind (publish or reap), oldest
// first; Due is computed with the database clock and grace.
func (s *Settle) Intents(ctx context.Context, star, kind string, grace time.Duration) ([]Intent, error) {
	rows, err := s.db.reader(ctx).Query(ctx, `SELECT `+intentCols+`,
			CASE WHEN kind = 'reap' THEN reap_after <= now() ELSE created_at <= now() - $3::interval END
		FROM nova.orphan_intents WHERE star = $1 AND kind = $2 ORDER BY id`, star, kind, grace)
	if err != nil {
		return nil, fmt.Errorf("list %s intents of star %q: %w", kind, star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Intent, error) {
		var in Intent
		return in, scanIntent(r, &in)
	})
	if err != nil {
		return nil, fmt.Errorf("list %s intents of star %q: %w", kind, star, err)
	}
	return out, nil
}

// AbandonPublish turns an open publish intent into a reap intent for its key
// (armed after grace; the upload ID is kept so the reap aborts it). The reap
// step drops it without deleting if the catalog references the key.
func (s *Settle) AbandonPublish(ctx context.Context, f Fence, id int64, grace time.Duration) error {
	return s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `UPDATE nova.orphan_intents SET kind = 'reap', reap_after = now() + $2::interval
			WHERE id = $1 AND kind = 'publish'`, id, grace); err != nil {
			return fmt.Errorf("abandon publish intent %d: %w", id, err)
		}
		return nil
	})
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

// Quarantine sets a stream (and optionally the slot at fault) aside with its
// reason; a second quarantine of the stream updates the reason.
func (s *Settle) Quarantine(ctx context.Context, f Fence, id StreamID, slotKey, errClass, reason string) error {
	return s.db.fenced(ctx, f, func(tx pgx.Tx) error { return quarantine(ctx, tx, f, id, slotKey, errClass, reason) })
}

// QuarantineCondemning is Quarantine for a stream whose standing,
// uncataloged object at condemnKey failed its data check: in the same
// transaction the key's open publish intent becomes a reap intent armed
// after grace (or one is armed when no publish intent is open). The reap
// step deletes the object (a reap intent is dead once due) and buries the
// key; once released, the stream publishes the same records again from its
// sources, which trim keeps meanwhile, at a revision above the condemned
// key (docs/architecture.md#no-late-delete).
func (s *Settle) QuarantineCondemning(ctx context.Context, f Fence, id StreamID, slotKey, errClass, reason, condemnKey string, grace time.Duration) error {
	return s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if err := quarantine(ctx, tx, f, id, slotKey, errClass, reason); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE nova.orphan_intents SET kind = 'reap', reap_after = now() + $3::interval
			WHERE star = $1 AND kind = 'publish' AND object_key = $2`, f.Star, condemnKey, grace)
		if err != nil {
			return fmt.Errorf("condemn %s: %w", condemnKey, err)
		}
		if tag.RowsAffected() > 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
			SELECT $1, 'reap', $2, 'standard', now() + $3::interval
			WHERE NOT EXISTS (SELECT 1 FROM nova.orphan_intents WHERE kind = 'reap' AND object_key = $2)`, f.Star, condemnKey, grace); err != nil {
			return fmt.Errorf("condemn %s: %w", condemnKey, err)
		}
		return nil
	})
}

func quarantine(ctx context.Context, tx pgx.Tx, f Fence, id StreamID, slotKey, errClass, reason string) error {
	var slot *string
	if slotKey != "" {
		slot = &slotKey
	}
	if _, err := tx.Exec(ctx, `INSERT INTO nova.quarantine (star, stream_id, slot_key, error_class, reason) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (stream_id) WHERE stream_id IS NOT NULL DO UPDATE SET slot_key = EXCLUDED.slot_key,
		error_class = EXCLUDED.error_class, reason = EXCLUDED.reason`, f.Star, id, slot, errClass, reason); err != nil {
		return fmt.Errorf("quarantine stream %s: %w", id, err)
	}
	return nil
}

// QuarantineRow is a row of nova.quarantine.
type QuarantineRow struct {
	Stream     *StreamID
	SlotKey    string
	ErrorClass string
	Reason     string
	Since      time.Time
}

// Quarantined lists a star's quarantine.
func (s *Settle) Quarantined(ctx context.Context, star string) ([]QuarantineRow, error) {
	rows, err := s.db.reader(ctx).Query(ctx, `SELECT stream_id, coalesce(slot_key, ''), error_class, reason, since
		FROM nova.quarantine WHERE star = $1 ORDER BY since, id`, star)
	if err != nil {
		return nil, fmt.Errorf("list quarantine of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (QuarantineRow, error) {
		var q QuarantineRow
		return q, r.Scan(&q.Stream, &q.SlotKey, &q.ErrorClass, &q.Reason, &q.Since)
	})
	if err != nil {
		return nil, fmt.Errorf("list quarantine of star %q: %w", star, err)
	}
	return out, nil
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
