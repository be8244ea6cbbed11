package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
