package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// OpenTraced opens the metastore with tracer on every connection, for the
// tests that look at the statements the catalog runs (their plans, their
// transactions).
func OpenTraced(ctx context.Context, url string, tracer pgx.QueryTracer) (*DB, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database URL: %w", err)
	}
	cfg.MaxConns = 1 // one connection: the tracer's probes run on it in statement order
	cfg.ConnConfig.Tracer = tracer
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	return &DB{pool: pool}, nil
}

// Fenced exposes fenced to the tests: fn runs after the token check, in
// its transaction.
func (db *DB) Fenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	return db.fenced(ctx, f, fn)
}

// LockWaiters counts the backends of this database waiting for a lock.
func (db *DB) LockWaiters(ctx context.Context) (int, error) {
	var n int
	err := db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
	return n, err
}

// ExactTarget is a publish target for a test's own key (not a settled
// key): its base is the key itself, first record first; revisions above
// the planned one append "@rev".
func ExactTarget(key string, first int64) PublishTarget {
	return PublishTarget{
		Base: KeyBase{Stream: fnvStream(key), Epoch: 1, FirstRecord: first},
		Key: func(rev int32) string {
			if rev == 0 {
				return key
			}
			return fmt.Sprintf("%s@%d", key, rev)
		},
	}
}

// fnvStream spreads test keys over stream IDs, one base per key.
func fnvStream(key string) StreamID {
	var id StreamID
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * 1099511628211
	}
	for i := 0; i < 8; i++ {
		id[i], id[15-i] = byte(h>>(8*i)), byte(h>>(8*i))^0x5a
	}
	return id
}

// HighRevision (for tests) is the base's high-water revision, -1 when none was used.
func (db *DB) HighRevision(ctx context.Context, b KeyBase) (int32, error) {
	high := int32(-1)
	err := db.pool.QueryRow(ctx, `SELECT high_revision FROM nova.auditor_key_revisions
		WHERE stream_id = $1 AND epoch = $2 AND first_record = $3`, b.Stream, b.Epoch, b.FirstRecord).Scan(&high)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return 0, fmt.Errorf("read the revisions of %s/%d/%d: %w", b.Stream, b.Epoch, b.FirstRecord, err)
	}
	return high, nil
}

// CommitSettlesAtOnce runs CommitSettles's set path alone, in a fenced
// transaction that commits whatever it did: ok false means it declined
// (or rolled back) and would have left the group to the stream-by-stream
// path.
func (db *DB) CommitSettlesAtOnce(ctx context.Context, f Fence, group []StreamCommit) (ok bool, errs []error, err error) {
	order := make([]int, len(group))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return compareIDs(group[a].Stream, group[b].Stream) })
	errs = make([]error, len(group))
	err = db.fenced(ctx, f, func(tx pgx.Tx) error {
		var err error
		_, ok, err = commitSettlesAtOnce(ctx, tx, f, group, order, errs)
		return err
	})
	return ok, errs, err
}

// OpenIntentsAtOnce runs OpenPublishIntents's set path alone, as
// CommitSettlesAtOnce does.
func (db *DB) OpenIntentsAtOnce(ctx context.Context, f Fence, reqs []IntentRequest) (intents []Intent, ok bool, err error) {
	err = db.fenced(ctx, f, func(tx pgx.Tx) error {
		var err error
		intents, ok, err = openIntentsAtOnce(ctx, tx, f, reqs)
		return err
	})
	return intents, ok, err
}

// LockHighRevision runs lockHighRevision in tx (a transaction of
// Fenced): the base's high-water row locked, -1 when it was created.
func LockHighRevision(ctx context.Context, tx pgx.Tx, b KeyBase) (int32, error) {
	return lockHighRevision(ctx, tx, b)
}

// SetHighRevision runs setHighRevision in a fenced transaction of its own,
// as an opening that took an existing row for a new one would.
func (db *DB) SetHighRevision(ctx context.Context, f Fence, b KeyBase, rev int32) error {
	return db.fenced(ctx, f, func(tx pgx.Tx) error { return setHighRevision(ctx, tx, b, rev) })
}

// DeleteIntent removes an intent in a fenced transaction, as the
// auditor's own writes are.
func (s *Settle) DeleteIntent(ctx context.Context, f Fence, id int64) error {
	return s.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM nova.orphan_intents WHERE id = $1`, id); err != nil {
			return fmt.Errorf("delete intent %d: %w", id, err)
		}
		return nil
	})
}
