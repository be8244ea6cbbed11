package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrMarkMoved is a mark commit that found the star's mark no longer where
// its caller read it: another writer moved it (a reconcile, or a leader the
// caller did not know of). Nothing was written.
var ErrMarkMoved = errors.New("the star's mark moved")

// Mark is a star's mark (nova.auditor_state.mark, mark_at): the number of
// the last marker object a leader committed (docs/architecture.md#rewind-detection).
type Mark struct {
	N  int64      // 0: none yet
	At *time.Time // when N was committed (database clock); nil when none
}

// Mark reads the star's mark (zero when the star has no state row).
func (rs *Restore) Mark(ctx context.Context, star string) (Mark, error) {
	var m Mark
	err := rs.db.reader(ctx).QueryRow(ctx, `SELECT mark, mark_at FROM nova.auditor_state WHERE star = $1`, star).Scan(&m.N, &m.At)
	if errors.Is(err, pgx.ErrNoRows) {
		return Mark{}, nil
	}
	if err != nil {
		return m, fmt.Errorf("read mark of star %q: %w", star, err)
	}
	return m, nil
}

// MarkFenced reads the star's mark in a fenced transaction: under a
// live lease of f's token (ErrStaleToken otherwise).
func (rs *Restore) MarkFenced(ctx context.Context, f Fence) (Mark, error) {
	var m Mark
	err := rs.db.fenced(ctx, f, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT mark, mark_at FROM nova.auditor_state WHERE star = $1`, f.Star).Scan(&m.N, &m.At)
		if errors.Is(err, pgx.ErrNoRows) {
			m = Mark{}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read mark of star %q: %w", f.Star, err)
		}
		return nil
	})
	return m, err
}

// CommitMark moves the star's mark from prev to next (> prev), fenced.
// ErrMarkMoved, and nothing written, when the mark is no longer prev.
func (rs *Restore) CommitMark(ctx context.Context, f Fence, prev, next int64) error {
	if next <= prev {
		return fmt.Errorf("commit mark of star %q: %d is not above %d", f.Star, next, prev)
	}
	return rs.db.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE nova.auditor_state SET mark = $3, mark_at = now() WHERE star = $1 AND mark = $2`,
			f.Star, prev, next)
		if err == nil && tag.RowsAffected() == 0 && prev == 0 {
			// A star without a state row yet (a pause or a halt makes one).
			tag, err = tx.Exec(ctx, `INSERT INTO nova.auditor_state (star, mark, mark_at) VALUES ($1, $2, now())
				ON CONFLICT (star) DO NOTHING`, f.Star, next)
		}
		if err != nil {
			return fmt.Errorf("commit mark %d of star %q: %w", next, f.Star, err)
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("commit mark %d of star %q over %d: %w", next, f.Star, prev, ErrMarkMoved)
		}
		return nil
	})
}

// RaiseMark raises the star's mark to at least n, fenced (reconcile: past
// every marker the store holds). It never lowers it.
func (rs *Restore) RaiseMark(ctx context.Context, f Fence, n int64) error {
	return rs.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_state AS a (star, mark, mark_at) VALUES ($1, $2, now())
			ON CONFLICT (star) DO UPDATE SET mark = EXCLUDED.mark, mark_at = now() WHERE a.mark < EXCLUDED.mark`, f.Star, n); err != nil {
			return fmt.Errorf("raise mark of star %q to %d: %w", f.Star, n, err)
		}
		return nil
	})
}
