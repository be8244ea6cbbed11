package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The settle step's commits (docs/architecture.md#settling): one settled
// object's (commitSettle, with its checks), a batch of streams' in one
// transaction (CommitSettles, with its set path), and retention's skip of
// dead refs (SkipBelowLow). Every transaction that changes anything is
// fenced. The reads are in settlereads.go, the publish intents in
// intents.go, the quarantine in quarantine.go.

// ErrInvariant is a broken metastore invariant found by a settle commit (for
// example a catalog entry that no longer ends where the stream's
// settled_through says): the cycle halts rather than guess.
var ErrInvariant = errors.New("metastore invariant broken")

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

// checkSettle is commitSettle's check of a commit against its stream's
// locked row: the entry ends within the stream's records past
// settled_through, and a new entry starts at settled_through (or above it
// only where retention let settled_through fall below low_record); a
// rewrite raises the revision.
func checkSettle(c SettleCommit, settled, next, low int64) error {
	e := c.Entry
	end := e.EndRecord()
	if end > next || end <= settled {
		return fmt.Errorf("%w: stream %s: entry [%d, %d) against settled_through %d, next_record %d",
			ErrInvariant, e.Stream, e.FirstRecord, end, settled, next)
	}
	if c.PrevRevision < 0 {
		if e.FirstRecord != settled && !(e.FirstRecord > settled && e.FirstRecord <= low) {
			return fmt.Errorf("%w: stream %s: new entry at %d, settled_through %d", ErrInvariant, e.Stream, e.FirstRecord, settled)
		}
		return nil
	}
	if e.Revision <= c.PrevRevision {
		// Revisions only grow: the reap's dead-key argument relies on it.
		return fmt.Errorf("%w: stream %s: rewrite from revision %d to %d", ErrInvariant, e.Stream, c.PrevRevision, e.Revision)
	}
	return nil
}

// checkTail is commitSettle's check of a rewrite against the catalog row
// it replaces (ending at oldEnd; found false: not there at PrevRevision):
// the row ends where the stream's settled records do.
func checkTail(c SettleCommit, oldEnd int64, found bool, settled int64) error {
	e := c.Entry
	if !found {
		return fmt.Errorf("%w: stream %s: tail %d~%d is no longer in the catalog", ErrInvariant, e.Stream, e.FirstRecord, c.PrevRevision)
	}
	if oldEnd != settled {
		return fmt.Errorf("%w: stream %s: tail ends at %d, settled_through %d", ErrInvariant, e.Stream, oldEnd, settled)
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

// The settle step's batched statements (docs/architecture.md#the-settle-pipeline): the
// snapshot (StreamSnapshots, settlereads.go), the publish intents
// (OpenPublishIntents, intents.go) and the commits (here) of many small
// streams share transactions, so the metastore the write path shares pays
// a few transactions per batch instead of three per settled object. Each
// stream keeps every check of its own statements; inside a shared
// transaction a stream whose check fails is rolled back to its savepoint,
// alone.

// StreamCommit is one stream's part of a grouped commit: its settled
// objects, in record order, committed together or not at all.
type StreamCommit struct {
	Stream  StreamID
	Commits []SettleCommit
}

// CommitSettles commits the settled objects of several streams in one
// fenced transaction, each stream's as commitSettle does, with every one
// of its checks, in a savepoint of its own: errs[i] is group[i]'s (nil:
// committed with the transaction). A stream whose check or statement fails
// is rolled back alone and the others commit. The streams' rows are
// locked in ascending stream_id order, the write path's absorb order
// (docs/metastore.md), so a grouped commit and an absorb never deadlock.
// between, if not nil, is called once per committed stream inside the
// transaction (a crash point: nothing of the batch is committed yet):
// after each stream's savepoint is released, or, on the set path, after
// the whole group's changes are made. The error is the transaction's (the fence lost, the
// commit failed): then nothing of the group is committed.
func (s *Settle) CommitSettles(ctx context.Context, f Fence, group []StreamCommit, between func()) (errs []error, err error) {
	order := make([]int, len(group))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareIDs(group[a].Stream, group[b].Stream) })
	err = s.db.commitFenced(ctx, f, func(tx pgx.Tx) error {
		errs = make([]error, len(group))
		committed, ok, err := commitSettlesAtOnce(ctx, tx, f, group, order, errs)
		if err != nil {
			return err
		}
		if ok {
			if between != nil {
				for range committed {
					between()
				}
			}
			return nil
		}
		for _, i := range order {
			errs[i] = savepoint(ctx, tx, func(tx pgx.Tx) error {
				for _, c := range group[i].Commits {
					if c.Entry.Stream != group[i].Stream {
						return fmt.Errorf("commit of stream %s grouped under %s", c.Entry.Stream, group[i].Stream)
					}
					if err := commitSettle(ctx, tx, f, c); err != nil {
						return err
					}
				}
				return nil
			})
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errs[i] == nil && between != nil {
				between()
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// compareIDs orders stream IDs as Postgres orders uuids (bytewise).
func compareIDs(a, b StreamID) int {
	for i := range a {
		if a[i] != b[i] {
			return int(a[i]) - int(b[i])
		}
	}
	return 0
}

// The set paths of the batched statements (docs/architecture.md#the-settle-pipeline):
// commitSettlesAtOnce here, openIntentsAtOnce in intents.go (both run in
// trySavepoint, db.go). Run stream by stream, a grouped commit and the
// intents cost several
// round trips per stream, each a statement for Postgres to parse, plan
// and log. The set paths run the same checks and the same changes over
// arrays, a dozen statements for the whole group:
//
//   - every check that can refuse one stream alone runs first, before any
//     change, and a stream it refuses is left out with the error the
//     stream-by-stream path gives it;
//   - the changes of the streams left run in one savepoint; if any
//     statement fails, or finds what the checks did not foresee (a row
//     count that differs), the savepoint is rolled back and the caller
//     runs the stream-by-stream path, whose savepoints single the stream
//     out. The set path is a fast path, never a second set of rules.
//
// The lock of the group's rows and the read of the rewritten tails run
// before that savepoint: they change nothing, and their failure (a lost
// connection, a cancelled statement) fails the group's transaction, as
// it would fail the stream-by-stream path's.

// commitSettlesAtOnce is CommitSettles's set path, in the fenced
// transaction tx, over the group in lock order. It applies only when every
// stream commits exactly one object (false otherwise, nothing done). A
// stream a check refuses gets its error in errs; the others are committed
// with tx and returned in committed, in lock order. ok false with a nil
// error: the group's changes were rolled back (its rows stay locked) and
// the caller is to run the stream-by-stream path over it.
func commitSettlesAtOnce(ctx context.Context, tx pgx.Tx, f Fence, group []StreamCommit, order []int, errs []error) (committed []int, ok bool, err error) {
	ids := make([]StreamID, 0, len(order))
	for k, i := range order {
		g := group[i]
		if len(g.Commits) != 1 || g.Commits[0].Entry.Stream != g.Stream {
			return nil, false, nil
		}
		if k > 0 && g.Stream == group[order[k-1]].Stream {
			return nil, false, nil
		}
		ids = append(ids, g.Stream)
	}

	// Lock the rows in ascending stream_id order (the write path's absorb
	// order): the locking clause sits above the sort, so rows are locked
	// as they come out of it.
	type row struct{ settled, next, low int64 }
	rows, err := tx.Query(ctx, `SELECT stream_id, settled_through, next_record, low_record FROM nova.streams
		WHERE stream_id = ANY($1::uuid[]) ORDER BY stream_id FOR UPDATE`, ids)
	if err != nil {
		return nil, false, fmt.Errorf("lock %d streams: %w", len(ids), err)
	}
	locked := make(map[StreamID]row, len(ids))
	var id StreamID
	var r row
	_, err = pgx.ForEachRow(rows, []any{&id, &r.settled, &r.next, &r.low}, func() error {
		locked[id] = r
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("lock %d streams: %w", len(ids), err)
	}

	// The checks of commitSettle, stream by stream, before any change.
	var rewrites []int
	pass := make([]int, 0, len(order))
	for _, i := range order {
		c := group[i].Commits[0]
		st, found := locked[c.Entry.Stream]
		if !found {
			errs[i] = fmt.Errorf("lock stream %s: %w", c.Entry.Stream, pgx.ErrNoRows)
			continue
		}
		if errs[i] = checkSettle(c, st.settled, st.next, st.low); errs[i] != nil {
			continue
		}
		if c.PrevRevision >= 0 {
			rewrites = append(rewrites, i)
		}
		pass = append(pass, i)
	}
	if len(rewrites) > 0 {
		tails, err := tailEnds(ctx, tx, group, rewrites)
		if err != nil {
			return nil, false, err
		}
		kept := pass[:0]
		for _, i := range pass {
			c := group[i].Commits[0]
			if c.PrevRevision >= 0 {
				end, found := tails[i]
				if errs[i] = checkTail(c, end, found, locked[c.Entry.Stream].settled); errs[i] != nil {
					continue
				}
			}
			kept = append(kept, i)
		}
		pass = kept
	}
	if len(pass) == 0 {
		return nil, true, nil
	}

	ok, err = trySavepoint(ctx, tx, func(sp pgx.Tx) (bool, error) {
		kept, ok, err := applySettles(ctx, sp, f, group, pass, errs)
		pass = kept
		return ok, err
	})
	if err != nil || ok {
		return pass, ok, err
	}
	// The stream-by-stream path sets every stream's error again.
	for _, i := range order {
		errs[i] = nil
	}
	return nil, false, nil
}

// tailEnds reads where the catalog rows the rewrites at group[rewrites]
// replace end (first_record + record_count), by group index; a row that
// is not there (any more, or at that revision) is absent.
func tailEnds(ctx context.Context, tx pgx.Tx, group []StreamCommit, rewrites []int) (map[int]int64, error) {
	n := len(rewrites)
	ids, epochs, firsts, revs, idx := make([]StreamID, n), make([]int64, n), make([]int64, n), make([]int32, n), make([]int32, n)
	for k, i := range rewrites {
		c := group[i].Commits[0]
		ids[k], epochs[k], firsts[k], revs[k], idx[k] = c.Entry.Stream, c.Entry.Epoch, c.Entry.FirstRecord, c.PrevRevision, int32(i)
	}
	rows, err := tx.Query(ctx, `SELECT u.i, c.first_record + c.record_count
		FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::int[], $5::int[]) AS u(stream_id, epoch, first_record, revision, i)
		JOIN nova.catalog c USING (stream_id, epoch, first_record, revision)`, ids, epochs, firsts, revs, idx)
	if err != nil {
		return nil, fmt.Errorf("read %d tails: %w", n, err)
	}
	out := make(map[int]int64, n)
	var i int32
	var end int64
	if _, err := pgx.ForEachRow(rows, []any{&i, &end}, func() error {
		out[int(i)] = end
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read %d tails: %w", n, err)
	}
	return out, nil
}

// applySettles makes the changes of commitSettle for the checked streams
// group[pass] in tx (a savepoint), as a few statements over arrays. A
// stream whose publish intent is gone gets ErrIntentGone in errs and is
// left out; the others are returned. ok false: a statement changed
// another number of rows than the checks foretell (roll back).
func applySettles(ctx context.Context, tx pgx.Tx, f Fence, group []StreamCommit, pass []int, errs []error) ([]int, bool, error) {
	// Close the publish intents first: a stream whose intent is gone is
	// then left out before anything of it changes.
	intentIDs, keys := make([]int64, len(pass)), make([]string, len(pass))
	byIntent := make(map[int64]int, len(pass))
	for k, i := range pass {
		c := group[i].Commits[0]
		intentIDs[k], keys[k] = c.IntentID, c.ObjectKey
		if _, dup := byIntent[c.IntentID]; dup {
			return nil, false, nil
		}
		byIntent[c.IntentID] = i
	}
	rows, err := tx.Query(ctx, `DELETE FROM nova.orphan_intents o USING unnest($1::bigint[], $2::text[]) AS u(id, object_key)
		WHERE o.id = u.id AND o.kind = 'publish' AND o.object_key = u.object_key RETURNING o.id`, intentIDs, keys)
	if err != nil {
		return nil, false, fmt.Errorf("delete %d publish intents: %w", len(pass), err)
	}
	closed, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, false, fmt.Errorf("delete %d publish intents: %w", len(pass), err)
	}
	if len(closed) != len(pass) {
		done := make(map[int64]bool, len(closed))
		for _, id := range closed {
			done[id] = true
		}
		kept := pass[:0]
		for _, i := range pass {
			c := group[i].Commits[0]
			if !done[c.IntentID] {
				errs[i] = fmt.Errorf("commit %s: intent %d: %w", c.ObjectKey, c.IntentID, ErrIntentGone)
				continue
			}
			kept = append(kept, i)
		}
		pass = kept
		if len(pass) == 0 {
			return nil, true, nil
		}
		keys = keys[:0]
		for _, i := range pass {
			keys = append(keys, group[i].Commits[0].ObjectKey)
		}
	}
	if _, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE kind = 'reap' AND object_key = ANY($1::text[])`, keys); err != nil {
		return nil, false, fmt.Errorf("delete reap intents of %d keys: %w", len(keys), err)
	}

	var fresh, rewritten entryArrays
	var prevs []int32
	n := len(pass)
	ids, ends, firsts := make([]StreamID, 0, n), make([]int64, 0, n), make([]int64, 0, n)
	var oldKeys []string
	var graces []int64
	for _, i := range pass {
		c := group[i].Commits[0]
		if c.PrevRevision < 0 {
			fresh.add(c.Entry)
		} else {
			rewritten.add(c.Entry)
			prevs = append(prevs, c.PrevRevision)
		}
		ids, ends, firsts = append(ids, c.Entry.Stream), append(ends, c.Entry.EndRecord()), append(firsts, c.Entry.FirstRecord)
		if c.OldKey != "" {
			oldKeys, graces = append(oldKeys, c.OldKey), append(graces, c.ReapGrace.Microseconds())
		}
	}
	if len(fresh.ids) > 0 {
		tag, err := tx.Exec(ctx, `INSERT INTO nova.catalog (stream_id, epoch, first_record, revision, record_count, object_bytes,
			footer_offset, footer_length, min_timestamp, max_timestamp, class)
			SELECT u.*, $11 FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[],
				$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[]) AS u`,
			append(fresh.args(), ClassStandard)...)
		if err != nil {
			return nil, false, fmt.Errorf("insert %d catalog entries: %w", len(fresh.ids), err)
		}
		if tag.RowsAffected() != int64(len(fresh.ids)) {
			return nil, false, nil
		}
	}
	if len(rewritten.ids) > 0 {
		tag, err := tx.Exec(ctx, `UPDATE nova.catalog c SET revision = u.revision, record_count = u.record_count,
			object_bytes = u.object_bytes, footer_offset = u.footer_offset, footer_length = u.footer_length,
			min_timestamp = u.min_timestamp, max_timestamp = u.max_timestamp, settled_at = now()
			FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::int[], $5::bigint[], $6::bigint[],
				$7::bigint[], $8::bigint[], $9::bigint[], $10::bigint[], $11::int[])
				AS u(stream_id, epoch, first_record, revision, record_count, object_bytes,
					footer_offset, footer_length, min_timestamp, max_timestamp, prev)
			WHERE c.stream_id = u.stream_id AND c.epoch = u.epoch AND c.first_record = u.first_record AND c.revision = u.prev`,
			append(rewritten.args(), prevs)...)
		if err != nil {
			return nil, false, fmt.Errorf("repoint %d catalog entries: %w", len(rewritten.ids), err)
		}
		if tag.RowsAffected() != int64(len(rewritten.ids)) {
			return nil, false, nil
		}
	}
	// As commitSettle: an entry wholly below low_record puts the stream
	// back in retention's index.
	tag, err := tx.Exec(ctx, `UPDATE nova.streams s SET settled_through = u.end_record,
		retained_through = CASE WHEN u.end_record <= s.low_record THEN least(s.retained_through, u.first_record) ELSE s.retained_through END
		FROM unnest($1::uuid[], $2::bigint[], $3::bigint[]) AS u(stream_id, end_record, first_record)
		WHERE s.stream_id = u.stream_id`, ids, ends, firsts)
	if err != nil {
		return nil, false, fmt.Errorf("advance settled_through of %d streams: %w", n, err)
	}
	if tag.RowsAffected() != int64(n) {
		return nil, false, nil
	}
	if err := refreshRefsAndMarkers(ctx, tx, ids, ends); err != nil {
		return nil, false, err
	}
	if len(oldKeys) > 0 {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.orphan_intents (star, kind, object_key, class, reap_after)
			SELECT $1, 'reap', u.object_key, 'standard', now() + u.grace * interval '1 microsecond'
			FROM unnest($2::text[], $3::bigint[]) AS u(object_key, grace)`, f.Star, oldKeys, graces); err != nil {
			return nil, false, fmt.Errorf("arm reaps of %d superseded keys: %w", len(oldKeys), err)
		}
	}
	return pass, true, nil
}

// refreshRefsAndMarkers is refreshRefsAndMarker over arrays: each stream
// ids[k]'s refs wholly below settled[k] are deleted and its due marker's
// since set to its oldest remaining ref, or the marker deleted.
func refreshRefsAndMarkers(ctx context.Context, tx pgx.Tx, ids []StreamID, settled []int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM nova.span_refs r USING unnest($1::uuid[], $2::bigint[]) AS u(stream_id, settled)
		WHERE r.stream_id = u.stream_id AND r.first_record + r.record_count <= u.settled`, ids, settled); err != nil {
		return fmt.Errorf("delete settled refs of %d streams: %w", len(ids), err)
	}
	// One statement: the CTE's delete and the upsert see the same rows.
	if _, err := tx.Exec(ctx, `WITH oldest AS (
			SELECT u.stream_id, (SELECT min(absorbed_at) FROM nova.span_refs r WHERE r.stream_id = u.stream_id) AS since
			FROM unnest($1::uuid[]) AS u(stream_id)
		), gone AS (
			DELETE FROM nova.due_markers m USING oldest o WHERE m.stream_id = o.stream_id AND o.since IS NULL
		)
		INSERT INTO nova.due_markers (stream_id, class, since)
		SELECT s.stream_id, s.class, o.since FROM oldest o JOIN nova.streams s USING (stream_id) WHERE o.since IS NOT NULL
		ON CONFLICT (stream_id) DO UPDATE SET since = EXCLUDED.since`, ids); err != nil {
		return fmt.Errorf("update due markers of %d streams: %w", len(ids), err)
	}
	return nil
}

// entryArrays holds catalog entries column by column, as unnest takes them.
type entryArrays struct {
	ids                                             []StreamID
	epochs, firsts, counts, bytes, offs, lens, mins []int64
	maxs                                            []int64
	revs                                            []int32
}

func (a *entryArrays) add(e Entry) {
	a.ids, a.epochs, a.firsts, a.revs = append(a.ids, e.Stream), append(a.epochs, e.Epoch), append(a.firsts, e.FirstRecord), append(a.revs, e.Revision)
	a.counts, a.bytes = append(a.counts, e.RecordCount), append(a.bytes, e.ObjectBytes)
	a.offs, a.lens = append(a.offs, e.FooterOffset), append(a.lens, e.FooterLength)
	a.mins, a.maxs = append(a.mins, e.MinTimestamp), append(a.maxs, e.MaxTimestamp)
}

// args are the arrays in the catalog's column order.
func (a *entryArrays) args() []any {
	return []any{a.ids, a.epochs, a.firsts, a.revs, a.counts, a.bytes, a.offs, a.lens, a.mins, a.maxs}
}
