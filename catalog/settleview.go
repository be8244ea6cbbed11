package catalog

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// SettleView is what settling a stream starts from, read in one snapshot:
// the stream row, its span refs in record order, and its last catalog
// entry (nil when it has none).
type SettleView struct {
	Stream Stream
	Refs   []SpanRef
	Last   *Entry
}

// ReadSettleView reads a stream's SettleView in one read-only repeatable
// read transaction: one transaction per stream instead of one per read, and
// refs that agree with the stream row (a concurrent absorb lands wholly in
// or wholly out of it).
func (db *DB) ReadSettleView(ctx context.Context, id StreamID) (SettleView, error) {
	var v SettleView
	err := pgx.BeginTxFunc(ctx, db.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		v.Stream, err = scanStream(tx.QueryRow(ctx, `SELECT `+streamCols+` FROM nova.streams WHERE stream_id = $1`, id))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("stream %x: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("read stream %x: %w", id, err)
		}
		rows, err := tx.Query(ctx, `SELECT `+refCols+` FROM nova.span_refs WHERE stream_id = $1 ORDER BY first_record`, id)
		if err != nil {
			return fmt.Errorf("read refs of stream %x: %w", id, err)
		}
		if v.Refs, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return scanRef(r) }); err != nil {
			return fmt.Errorf("read refs of stream %x: %w", id, err)
		}
		last, err := scanEntry(tx.QueryRow(ctx, `SELECT `+entryCols+` FROM nova.catalog WHERE stream_id = $1
			ORDER BY epoch DESC, first_record DESC LIMIT 1`, id))
		switch {
		case err == nil:
			v.Last = &last
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("read last catalog entry of stream %x: %w", id, err)
		}
		return nil
	})
	return v, err
}
