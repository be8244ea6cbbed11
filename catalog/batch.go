package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// The settle step's batched statements (docs/architecture.md#the-settle-pipeline): the
// snapshot, the publish intents and the commits of many small streams share
// transactions, so the metastore the write path shares pays a few
// transactions per batch instead of three per settled object. Each stream
// keeps every check of its own statements; inside a shared transaction a
// stream whose check fails is rolled back to its savepoint, alone.

// Snapshot is one stream's settle snapshot: its row, its first window of
// span refs (those ending past settled_through and starting before
// next_record, in record order) and its last catalog entry (nil: none).
type Snapshot struct {
	Stream Stream
	Refs   []SpanRef
	Last   *Entry
}

// StreamSnapshots reads the snapshots of the streams ids (a batch of one
// included) in one read-only repeatable-read transaction, at most refLimit
// refs each, consistent across all of them: each stream's refs tile
// exactly [settled_through, next_record) (read at READ COMMITTED, an absorb
// committing between the statements would add a ref past the next_record
// read first: a false tiling break). A stream that no longer exists is
// left out of the map.
func (s *Settle) StreamSnapshots(ctx context.Context, ids []StreamID, refLimit int) (map[StreamID]Snapshot, error) {
	out := make(map[StreamID]Snapshot, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	err := s.db.readTx(ctx, func(tx pgx.Tx) error {
		clear(out)
		rows, err := tx.Query(ctx, `SELECT `+streamCols+` FROM nova.streams WHERE stream_id = ANY($1::uuid[])`, ids)
		if err != nil {
			return fmt.Errorf("read %d streams: %w", len(ids), err)
		}
		streams, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Stream, error) { return scanStream(r) })
		if err != nil {
			return fmt.Errorf("read %d streams: %w", len(ids), err)
		}
		for _, st := range streams {
			out[st.ID] = Snapshot{Stream: st}
		}
		// Each stream's refs are an index range of its own (as
		// RefsWindow's), however many refs the star holds.
		rows, err = tx.Query(ctx, `SELECT r.* FROM nova.streams s CROSS JOIN LATERAL (
				SELECT `+SpanRefColumns+` FROM nova.span_refs
				WHERE stream_id = s.stream_id AND first_record < s.next_record AND first_record + record_count > s.settled_through
				ORDER BY first_record LIMIT $2) r
			WHERE s.stream_id = ANY($1::uuid[])
			ORDER BY r.stream_id, r.first_record`, ids, refLimit)
		if err != nil {
			return fmt.Errorf("read refs of %d streams: %w", len(ids), err)
		}
		refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return ScanSpanRef(r) })
		if err != nil {
			return fmt.Errorf("read refs of %d streams: %w", len(ids), err)
		}
		for _, r := range refs {
			s := out[r.Stream]
			s.Refs = append(s.Refs, r)
			out[r.Stream] = s
		}
		rows, err = tx.Query(ctx, `SELECT e.* FROM unnest($1::uuid[]) AS u(id) CROSS JOIN LATERAL (
				SELECT `+entryCols+` FROM nova.catalog WHERE stream_id = u.id
				ORDER BY epoch DESC, first_record DESC LIMIT 1) e`, ids)
		if err != nil {
			return fmt.Errorf("read last catalog entries of %d streams: %w", len(ids), err)
		}
		lasts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
		if err != nil {
			return fmt.Errorf("read last catalog entries of %d streams: %w", len(ids), err)
		}
		for _, e := range lasts {
			if s, ok := out[e.Stream]; ok {
				s.Last = &e
				out[e.Stream] = s
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
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

// savepoint runs fn in a savepoint of tx: released when fn succeeds,
// rolled back (fn's changes undone, tx usable again) when it fails.
func savepoint(ctx context.Context, tx pgx.Tx, fn func(pgx.Tx) error) error {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if err := fn(sp); err != nil {
		if rerr := sp.Rollback(ctx); rerr != nil && !errors.Is(rerr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("roll back to savepoint: %w", rerr))
		}
		return err
	}
	if err := sp.Commit(ctx); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
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
