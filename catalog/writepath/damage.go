package writepath

import (
	"context"
	"fmt"
	"time"

	"github.com/nova/auditor/catalog"
)

// Statements no writer of the contract runs: they break rows on purpose
// (for tests of the auditor's quarantine and halt paths and for
// fault-injection tools), move clocks, or look at the server's locks.

// ShiftRefWindow moves the footer offset of the first slot entry of a span
// ref by delta: damage that only a broken writer would do, for tests of the
// auditor's quarantine path and for fault-injection tools.
func (db *DB) ShiftRefWindow(ctx context.Context, id catalog.StreamID, firstRecord, delta int64) error {
	tag, err := db.pool.Exec(ctx, `UPDATE nova.span_refs SET footer_offsets[1] = footer_offsets[1] + $3
		WHERE stream_id = $1 AND first_record = $2`, id, firstRecord, delta)
	if err != nil {
		return fmt.Errorf("shift ref window of %s@%d: %w", id, firstRecord, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("shift ref window of %s@%d: %w", id, firstRecord, catalog.ErrNotFound)
	}
	return nil
}

// DuplicateRef inserts a copy of a span ref at another first record (its
// slots and windows unchanged): overlapping refs, damage only a broken writer
// would do, for tests of the auditor's quarantine path.
func (db *DB) DuplicateRef(ctx context.Context, id catalog.StreamID, firstRecord, newFirst int64) error {
	tag, err := db.pool.Exec(ctx, `INSERT INTO nova.span_refs (stream_id, first_record, record_count, star, class,
			slot_epochs, slot_seqs, footer_offsets, footer_lengths, absorbed_at)
		SELECT stream_id, $3, record_count, star, class, slot_epochs, slot_seqs, footer_offsets, footer_lengths, absorbed_at
		FROM nova.span_refs WHERE stream_id = $1 AND first_record = $2`, id, firstRecord, newFirst)
	if err != nil {
		return fmt.Errorf("duplicate ref %s@%d at %d: %w", id, firstRecord, newFirst, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("duplicate ref %s@%d: %w", id, firstRecord, catalog.ErrNotFound)
	}
	return nil
}

// StretchEntry adds delta to a catalog entry's record count, making it
// overlap what follows it: a broken invariant, for tests of the halt path.
func (db *DB) StretchEntry(ctx context.Context, id catalog.StreamID, firstRecord, delta int64) error {
	tag, err := db.pool.Exec(ctx, `UPDATE nova.catalog SET record_count = record_count + $3
		WHERE stream_id = $1 AND first_record = $2`, id, firstRecord, delta)
	if err != nil {
		return fmt.Errorf("stretch catalog entry %s@%d: %w", id, firstRecord, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("stretch catalog entry %s@%d: %w", id, firstRecord, catalog.ErrNotFound)
	}
	return nil
}

// SkipGrace moves a star's reap clocks back by d, as if d had passed: slot
// reaps and reap intents fall due d earlier, and publish intents look d
// older. Tests use it to make the grace end exactly between two cycles,
// whatever the cycles' own speed; the auditor never calls it.
func (db *DB) SkipGrace(ctx context.Context, star string, d time.Duration) error {
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("skip grace of star %q: %w", star, err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	for _, q := range []string{
		`UPDATE nova.slot_reaps SET reap_after = reap_after - $2::interval WHERE star = $1`,
		`UPDATE nova.orphan_intents SET reap_after = reap_after - $2::interval WHERE star = $1 AND reap_after IS NOT NULL`,
		`UPDATE nova.orphan_intents SET created_at = created_at - $2::interval WHERE star = $1`,
	} {
		if _, err := tx.Exec(ctx, q, star, d); err != nil {
			return fmt.Errorf("skip grace of star %q: %w", star, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("skip grace of star %q: %w", star, err)
	}
	return nil
}

// InsertErasureRow inserts an erasure row as another writer of the
// contract may store it, unchecked beyond the table's own constraints
// (tests of a malformed row: a negative first record, say).
func (db *DB) InsertErasureRow(ctx context.Context, id catalog.StreamID, first, count int64) error {
	if _, err := db.pool.Exec(ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ($1, $2, $3)`,
		id, first, count); err != nil {
		return fmt.Errorf("insert erasure row of %s: %w", id, err)
	}
	return nil
}

// LockWaiters counts the backends of this database waiting for a lock that
// another transaction holds (tests use it to see a statement blocked behind
// a held transaction before they let that transaction go).
func (db *DB) LockWaiters(ctx context.Context) (int, error) {
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE NOT l.granted AND a.datname = current_database()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count lock waiters: %w", err)
	}
	return n, nil
}

// PublishIntent opens a publish intent on key as the auditor's publish
// step would before writing it (unfenced; ON CONFLICT takes up the open
// one), so a test can commit a catalog entry of its own making: every
// settle commit requires its key's publish intent open.
func (db *DB) PublishIntent(ctx context.Context, star, key string) (int64, error) {
	var id int64
	err := db.pool.QueryRow(ctx, `WITH ins AS (INSERT INTO nova.orphan_intents (star, kind, object_key, class)
			VALUES ($1, 'publish', $2, 'standard') ON CONFLICT (object_key) WHERE kind = 'publish' DO NOTHING RETURNING id)
		SELECT id FROM ins UNION ALL SELECT id FROM nova.orphan_intents WHERE kind = 'publish' AND object_key = $2 LIMIT 1`,
		star, key).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("open a publish intent on %s: %w", key, err)
	}
	return id, nil
}

// ExpireLease ends a star's lease as its ttl running out would, whoever
// holds it: expires_at an hour back, so that no renewal already on its way
// (its now() taken before this commit) finds it live.
func (db *DB) ExpireLease(ctx context.Context, star string) error {
	if _, err := db.pool.Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now() - interval '1 hour'
		WHERE star = $1 AND expires_at > now() - interval '1 hour'`, star); err != nil {
		return fmt.Errorf("expire lease of star %q: %w", star, err)
	}
	return nil
}

// Sessions counts the backends connected under an application name (a
// test waits for a killed process's sessions to end: until then a commit
// it sent may still land).
func (db *DB) Sessions(ctx context.Context, applicationName string) (int, error) {
	var n int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`,
		applicationName).Scan(&n); err != nil {
		return 0, fmt.Errorf("count sessions of %q: %w", applicationName, err)
	}
	return n, nil
}
