package writepath

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/nova/auditor/catalog"
)

// DB runs the write path's statements over the metastore's pool.
type DB struct {
	pool *pgxpool.Pool
}

// New returns the write path's statements over db's connections.
func New(db *catalog.DB) *DB { return &DB{pool: db.Pool()} }

// tx runs fn in a transaction, committing when fn returns nil.
func (db *DB) tx(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginFunc(ctx, db.pool, fn)
}

// ErrFenced means the writer's epoch is no longer the star's: it was fenced.
var ErrFenced = errors.New("writer epoch fenced")

// ErrOutOfOrder means an absorb broke the contract's ordering (a batch whose
// first record is not the stream's next_record, or seqs behind the head).
var ErrOutOfOrder = errors.New("absorb out of order")

// CreateStar creates a star and its epoch-1 row in one transaction.
func (db *DB) CreateStar(ctx context.Context, star, chainClass string, fenceWindow int) error {
	return db.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.stars (star, chain_class, fence_window) VALUES ($1, $2, $3)`,
			star, chainClass, fenceWindow); err != nil {
			return fmt.Errorf("create star %q: %w", star, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.star_epochs (star, epoch) VALUES ($1, 1)`, star); err != nil {
			return fmt.Errorf("create epoch 1 of star %q: %w", star, err)
		}
		return nil
	})
}

// CreateStream creates a stream on a star; its class is the star's chain class.
func (db *DB) CreateStream(ctx context.Context, id catalog.StreamID, star, bucket string) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO nova.streams (stream_id, star, bucket, class)
		SELECT $1, star, $3, chain_class FROM nova.stars WHERE star = $2`, id, star, bucket)
	if err != nil {
		return fmt.Errorf("create stream %s: %w", id, err)
	}
	return nil
}

// AbsorbBatch is one stream's batch in one flight.
type AbsorbBatch struct {
	Stream      catalog.StreamID
	FirstRecord int64
	Count       int64
}

// AbsorbFlight is one written slot to absorb.
type AbsorbFlight struct {
	Epoch, Seq                 int64
	FooterOffset, FooterLength int64
	Batches                    []AbsorbBatch
}

// Absorb runs the absorb transaction of docs/metastore.md for an absorb batch of
// flights (ascending seq, one epoch): each stream gets one span ref naming
// every slot it appears in, next_record advances, a due marker appears.
func (db *DB) Absorb(ctx context.Context, star string, flights []AbsorbFlight) error {
	return db.AbsorbHeld(ctx, star, flights, nil)
}

// AbsorbHeld is Absorb with a hook called inside the transaction, after
// every statement and before the commit, while the star and stream rows are
// locked (tests hold an absorb open with it; nil: none). A hook error rolls
// the absorb back.
func (db *DB) AbsorbHeld(ctx context.Context, star string, flights []AbsorbFlight, beforeCommit func(context.Context) error) error {
	if len(flights) == 0 {
		return nil
	}
	return db.tx(ctx, func(tx pgx.Tx) error {
		var epoch, nextSeq int64
		var class string
		if err := tx.QueryRow(ctx, `SELECT epoch, next_seq, chain_class FROM nova.stars WHERE star = $1 FOR UPDATE`, star).
			Scan(&epoch, &nextSeq, &class); err != nil {
			return fmt.Errorf("lock star %q: %w", star, err)
		}
		for i, f := range flights {
			if f.Epoch != epoch {
				return fmt.Errorf("absorb slot %d/%d of star %q at epoch %d: %w", f.Epoch, f.Seq, star, epoch, ErrFenced)
			}
			if (i == 0 && f.Seq < nextSeq) || (i > 0 && f.Seq <= flights[i-1].Seq) {
				return fmt.Errorf("absorb slot %d/%d of star %q (head %d): %w", f.Epoch, f.Seq, star, nextSeq, ErrOutOfOrder)
			}
		}
		type part struct {
			slot  catalog.SlotRef
			first int64
			count int64
		}
		byStream := map[catalog.StreamID][]part{}
		for _, f := range flights {
			inFlight := map[catalog.StreamID]bool{}
			for _, b := range f.Batches {
				if inFlight[b.Stream] { // a flight holds at most one chunk per stream
					return fmt.Errorf("slot %d/%d: stream %s twice: %w", f.Epoch, f.Seq, b.Stream, ErrOutOfOrder)
				}
				inFlight[b.Stream] = true
				byStream[b.Stream] = append(byStream[b.Stream], part{
					slot:  catalog.SlotRef{Epoch: f.Epoch, Seq: f.Seq, FooterOffset: f.FooterOffset, FooterLength: f.FooterLength},
					first: b.FirstRecord, count: b.Count})
			}
		}
		ids := make([]catalog.StreamID, 0, len(byStream))
		for id := range byStream {
			ids = append(ids, id)
		}
		sort.Slice(ids, func(i, j int) bool { return bytes.Compare(ids[i][:], ids[j][:]) < 0 })
		for _, id := range ids {
			parts := byStream[id]
			var next int64
			var sclass, sstar string
			if err := tx.QueryRow(ctx, `SELECT next_record, class, star FROM nova.streams WHERE stream_id = $1 FOR UPDATE`, id).
				Scan(&next, &sclass, &sstar); err != nil {
				return fmt.Errorf("lock stream %s: %w", id, err)
			}
			if sstar != star { // a flight holds only streams of its own star
				return fmt.Errorf("stream %s belongs to star %q, not %q: %w", id, sstar, star, ErrOutOfOrder)
			}
			first, total := next, int64(0)
			var epochs, seqs, offs, lens []int64
			for _, p := range parts {
				if p.first != next || p.count <= 0 {
					return fmt.Errorf("stream %s: batch at record %d (count %d), next_record %d: %w", id, p.first, p.count, next, ErrOutOfOrder)
				}
				next += p.count
				total += p.count
				epochs = append(epochs, p.slot.Epoch)
				seqs = append(seqs, p.slot.Seq)
				offs = append(offs, p.slot.FooterOffset)
				lens = append(lens, p.slot.FooterLength)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO nova.span_refs (stream_id, first_record, record_count, star, class,
				slot_epochs, slot_seqs, footer_offsets, footer_lengths) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
				id, first, total, star, class, epochs, seqs, offs, lens); err != nil {
				return fmt.Errorf("insert span ref of stream %s at %d: %w", id, first, err)
			}
			if _, err := tx.Exec(ctx, `UPDATE nova.streams SET next_record = $2 WHERE stream_id = $1`, id, next); err != nil {
				return fmt.Errorf("advance stream %s: %w", id, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO nova.due_markers (stream_id, class, since) VALUES ($1, $2, now())
				ON CONFLICT (stream_id) DO NOTHING`, id, sclass); err != nil {
				return fmt.Errorf("mark stream %s due: %w", id, err)
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE nova.stars SET next_seq = $2 WHERE star = $1`, star, flights[len(flights)-1].Seq+1); err != nil {
			return fmt.Errorf("advance head of star %q: %w", star, err)
		}
		if beforeCommit != nil {
			return beforeCommit(ctx)
		}
		return nil
	})
}

// BeginFence is step 1 of fencing a failed writer (docs/metastore.md): lock the
// star, note the head h of epoch e, open epoch e+1. It returns (e, h).
func (db *DB) BeginFence(ctx context.Context, star string) (oldEpoch, head int64, err error) {
	err = db.tx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT epoch, next_seq FROM nova.stars WHERE star = $1 FOR UPDATE`, star).Scan(&oldEpoch, &head); err != nil {
			return fmt.Errorf("lock star %q: %w", star, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.star_epochs (star, epoch) VALUES ($1, $2)`, star, oldEpoch+1); err != nil {
			return fmt.Errorf("open epoch %d of star %q: %w", oldEpoch+1, star, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE nova.stars SET epoch = $2, next_seq = 0 WHERE star = $1`, star, oldEpoch+1); err != nil {
			return fmt.Errorf("bump epoch of star %q: %w", star, err)
		}
		return nil
	})
	return oldEpoch, head, err
}

// EndFence is step 3 of fencing: every slot of epoch e has seq < endSeq.
func (db *DB) EndFence(ctx context.Context, star string, epoch, endSeq int64) error {
	tag, err := db.pool.Exec(ctx, `UPDATE nova.star_epochs SET end_seq = $3 WHERE star = $1 AND epoch = $2 AND end_seq IS NULL`,
		star, epoch, endSeq)
	if err != nil {
		return fmt.Errorf("end epoch %d of star %q: %w", epoch, star, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("end epoch %d of star %q: already ended or missing: %w", epoch, star, ErrOutOfOrder)
	}
	return nil
}

// RaiseLowRecord is the write path's retention statement: it raises a
// stream's low_record (it never lowers it).
func (db *DB) RaiseLowRecord(ctx context.Context, id catalog.StreamID, low int64) error {
	if _, err := db.pool.Exec(ctx, `UPDATE nova.streams SET low_record = greatest(low_record, $2) WHERE stream_id = $1`, id, low); err != nil {
		return fmt.Errorf("raise low_record of stream %s to %d: %w", id, low, err)
	}
	return nil
}
