package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
)

// Publish intents (docs/architecture.md#no-late-delete): opened before an
// object's first byte is written, under its key base's high-water
// revision, one at a time (openPublishIntent) or a batch's in one
// transaction (OpenPublishIntents, with its set path); closed by the
// commit that catalogs the key (closePublishIntent), or abandoned to the
// reap step (AbandonPublish).

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

// IntentRequest is one publish intent of a batch: what OpenPublishIntent
// takes.
type IntentRequest struct {
	Target PublishTarget
	Class  string
}

// OpenPublishIntents opens the publish intents of a batch in one fenced
// transaction, each as openPublishIntent opens one (under its base's
// high-water revision), each in a savepoint of its own: intents[i] is
// reqs[i]'s when errs[i] is nil; a request whose statements fail is rolled
// back alone. The error is the transaction's (the fence lost, the commit
// failed): then no intent of the batch is open.
func (s *Settle) OpenPublishIntents(ctx context.Context, f Fence, reqs []IntentRequest) (intents []Intent, errs []error, err error) {
	err = s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		errs = make([]error, len(reqs))
		var ok bool
		if intents, ok, err = openIntentsAtOnce(ctx, tx, f, reqs); err != nil || ok {
			return err
		}
		intents = make([]Intent, len(reqs))
		for i, r := range reqs {
			errs[i] = savepoint(ctx, tx, func(tx pgx.Tx) error {
				var err error
				intents[i], err = openPublishIntent(ctx, tx, f, r.Target, r.Class, s.db.mut.ReusePlannedRevision)
				return err
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return intents, errs, nil
}

// openIntentsAtOnce is OpenPublishIntents's set path, in the fenced
// transaction tx: when every request names a base of its own and each
// opens a new intent at its planned revision (no revision of the base
// used at or above it, no intent open on the key), all are opened in
// two statements (and the savepoint's). ok false: some request is not
// that case, nothing is changed, and the caller runs the
// request-by-request path.
func openIntentsAtOnce(ctx context.Context, tx pgx.Tx, f Fence, reqs []IntentRequest) (intents []Intent, ok bool, err error) {
	n := len(reqs)
	byBase := make(map[KeyBase]int, n)
	ids, epochs, firsts, revs := make([]StreamID, n), make([]int64, n), make([]int64, n), make([]int32, n)
	keys, classes := make([]string, n), make([]string, n)
	byKey := make(map[string]int, n)
	for i, r := range reqs {
		if _, dup := byBase[r.Target.Base]; dup {
			return nil, false, nil
		}
		byBase[r.Target.Base] = i
		b := r.Target.Base
		ids[i], epochs[i], firsts[i], revs[i] = b.Stream, b.Epoch, b.FirstRecord, r.Target.Revision
		keys[i], classes[i] = r.Target.Key(r.Target.Revision), r.Class
		if _, dup := byKey[keys[i]]; dup {
			return nil, false, nil
		}
		byKey[keys[i]] = i
	}
	ok, err = trySavepoint(ctx, tx, func(sp pgx.Tx) (bool, error) {
		opened, ok, err := openIntents(ctx, sp, f, reqs, ids, epochs, firsts, revs, keys, classes, byKey)
		intents = opened
		return ok, err
	})
	if err != nil || !ok {
		return nil, false, err
	}
	return intents, true, nil
}

// openIntents is openIntentsAtOnce's statements, in the savepoint tx.
func openIntents(ctx context.Context, tx pgx.Tx, f Fence, reqs []IntentRequest, ids []StreamID, epochs, firsts []int64, revs []int32,
	keys, classes []string, byKey map[string]int) ([]Intent, bool, error) {
	n := len(reqs)
	// lockHighRevision and setHighRevision over arrays, in one statement
	// and in key order: each base's row is created at, or raised to, its
	// planned revision. A base some revision of which was used at or above
	// the planned one is left as it is (the conflict's WHERE), so fewer
	// rows than requests are written: not the set path's (the savepoint
	// undoes the others).
	tag, err := tx.Exec(ctx, `INSERT INTO nova.auditor_key_revisions AS k (stream_id, epoch, first_record, high_revision)
		SELECT u.stream_id, u.epoch, u.first_record, u.revision
		FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::int[]) AS u(stream_id, epoch, first_record, revision)
		ORDER BY 1, 2, 3
		ON CONFLICT (stream_id, epoch, first_record) DO UPDATE SET high_revision = greatest(k.high_revision, EXCLUDED.high_revision)
			WHERE k.high_revision < EXCLUDED.high_revision`, ids, epochs, firsts, revs)
	if err != nil {
		return nil, false, fmt.Errorf("raise the revisions of %d bases: %w", n, err)
	}
	if tag.RowsAffected() != int64(n) {
		return nil, false, nil
	}
	rows, err := tx.Query(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class)
		SELECT $1, 'publish', u.object_key, u.class FROM unnest($2::text[], $3::text[]) AS u(object_key, class)
		ON CONFLICT (object_key) WHERE kind = 'publish' DO NOTHING
		RETURNING `+intentCols+`, false`, f.Star, keys, classes)
	if err != nil {
		return nil, false, fmt.Errorf("open %d publish intents: %w", n, err)
	}
	intents := make([]Intent, n)
	got := 0
	var in Intent
	if _, err := pgx.ForEachRow(rows, []any{&in.ID, &in.Star, &in.Kind, &in.ObjectKey, &in.Class, &in.UploadID, &in.StagedParts,
		&in.CreatedAt, &in.ReapAfter, &in.Due}, func() error {
		i, found := byKey[in.ObjectKey]
		if !found {
			return fmt.Errorf("opened an intent on %s, which no request names", in.ObjectKey)
		}
		intents[i] = in
		intents[i].Revision = revs[i]
		got++
		return nil
	}); err != nil {
		return nil, false, fmt.Errorf("open %d publish intents: %w", n, err)
	}
	if got != n {
		return nil, false, nil // an intent already open on a key: taken up again, request by request
	}
	return intents, true, nil
}

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
