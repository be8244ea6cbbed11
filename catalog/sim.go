package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The statements of novasim (internal/sim), the write-path simulator: its own
// table nova.sim_stars (docs/metastore.md allows added tables), created on demand
// so the project's migrations stay the contract's, plus the read-only
// queries of `novasim check` over contract tables that the auditor's own
// accessors do not cover. They hang off DB.Sim() so they never collide with
// the auditor's accessors.

// Sim is novasim's view of the metastore.
type Sim struct{ db *DB }

// Sim returns novasim's statements.
func (db *DB) Sim() Sim { return Sim{db: db} }

// SimStar is novasim's record of a star it set up: the content profile that
// regenerates every record of the star's streams (internal/sim.Content).
type SimStar struct {
	Star        string
	Seed        int64 // the uint64 seed, bit for bit
	MinBytes    int64
	MaxBytes    int64
	HeaderShare float64
	EmptyShare  float64
	CreatedAt   time.Time
}

// ErrExists means a row to be created exists already.
var ErrExists = errors.New("already exists")

// simLock serialises the on-demand creation of nova.sim_stars ("nova-sim").
const simLock int64 = 0x6e6f76612d73696d

// Ensure creates nova.sim_stars when it is missing.
func (s Sim) Ensure(ctx context.Context) error {
	return s.db.tx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, simLock); err != nil {
			return fmt.Errorf("lock novasim schema: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS nova.sim_stars (
			star          text   PRIMARY KEY REFERENCES nova.stars,
			seed          bigint NOT NULL,
			min_bytes     bigint NOT NULL CHECK (min_bytes >= 0),
			max_bytes     bigint NOT NULL CHECK (max_bytes >= min_bytes),
			header_share  double precision NOT NULL CHECK (header_share BETWEEN 0 AND 1),
			empty_share   double precision NOT NULL CHECK (empty_share BETWEEN 0 AND 1),
			created_at    timestamptz NOT NULL DEFAULT now())`); err != nil {
			return fmt.Errorf("create nova.sim_stars: %w", err)
		}
		return nil
	})
}

// NewStream is a stream to create.
type NewStream struct {
	ID     StreamID
	Bucket string
}

// SetupStar creates, in one transaction, a star with its epoch-1 row (as
// CreateStar does), its novasim content profile, and its streams (whose
// class is the star's chain class). ErrExists when the star exists.
func (s Sim) SetupStar(ctx context.Context, chainClass string, fenceWindow int, prof SimStar, streams []NewStream) error {
	if err := s.Ensure(ctx); err != nil {
		return err
	}
	return s.db.tx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO nova.stars (star, chain_class, fence_window) VALUES ($1, $2, $3)
			ON CONFLICT (star) DO NOTHING`, prof.Star, chainClass, fenceWindow)
		if err != nil {
			return fmt.Errorf("create star %q: %w", prof.Star, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("star %q: %w", prof.Star, ErrExists)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.star_epochs (star, epoch) VALUES ($1, 1)`, prof.Star); err != nil {
			return fmt.Errorf("create epoch 1 of star %q: %w", prof.Star, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO nova.sim_stars (star, seed, min_bytes, max_bytes, header_share, empty_share)
			VALUES ($1, $2, $3, $4, $5, $6)`, prof.Star, prof.Seed, prof.MinBytes, prof.MaxBytes, prof.HeaderShare, prof.EmptyShare); err != nil {
			return fmt.Errorf("record the content profile of star %q: %w", prof.Star, err)
		}
		rows := make([][]any, len(streams))
		for i, st := range streams {
			rows[i] = []any{st.ID, prof.Star, st.Bucket, chainClass}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"nova", "streams"}, []string{"stream_id", "star", "bucket", "class"},
			pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("create %d streams of star %q: %w", len(streams), prof.Star, err)
		}
		return nil
	})
}

const simStarCols = `star, seed, min_bytes, max_bytes, header_share, empty_share, created_at`

func scanSimStar(r pgx.Row) (SimStar, error) {
	var p SimStar
	err := r.Scan(&p.Star, &p.Seed, &p.MinBytes, &p.MaxBytes, &p.HeaderShare, &p.EmptyShare, &p.CreatedAt)
	return p, err
}

// simMissing reports whether err says nova.sim_stars does not exist.
func simMissing(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01" // undefined_table
}

// Star reads the content profile of a star set up by novasim (ErrNotFound
// when novasim did not set it up).
func (s Sim) Star(ctx context.Context, star string) (SimStar, error) {
	p, err := scanSimStar(s.db.pool.QueryRow(ctx, `SELECT `+simStarCols+` FROM nova.sim_stars WHERE star = $1`, star))
	if errors.Is(err, pgx.ErrNoRows) || simMissing(err) {
		return p, fmt.Errorf("novasim profile of star %q: %w", star, ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read novasim profile of star %q: %w", star, err)
	}
	return p, nil
}

// Stars lists the content profiles of every star novasim set up, by name.
func (s Sim) Stars(ctx context.Context) ([]SimStar, error) {
	rows, err := s.db.pool.Query(ctx, `SELECT `+simStarCols+` FROM nova.sim_stars ORDER BY star`)
	if simMissing(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list novasim stars: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SimStar, error) { return scanSimStar(r) })
	if simMissing(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list novasim stars: %w", err)
	}
	return out, nil
}

// TrimCursor reads a star's trim cursor: the first slot trim has not yet
// released. ok is false when trim has released nothing yet.
func (s Sim) TrimCursor(ctx context.Context, star string) (epoch, seq int64, ok bool, err error) {
	err = s.db.pool.QueryRow(ctx, `SELECT epoch, seq FROM nova.trim_cursors WHERE star = $1`, star).Scan(&epoch, &seq)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, 0, false, nil
	}
	if err != nil {
		return 0, 0, false, fmt.Errorf("read trim cursor of star %q: %w", star, err)
	}
	return epoch, seq, true, nil
}

// RefsOfStar reads the span refs of every stream of a star (by the streams'
// star, whatever the refs say), each stream's in record order.
func (s Sim) RefsOfStar(ctx context.Context, star string) (map[StreamID][]SpanRef, error) {
	rows, err := s.db.pool.Query(ctx, `SELECT `+refCols+` FROM nova.span_refs
		WHERE stream_id IN (SELECT stream_id FROM nova.streams WHERE star = $1) ORDER BY stream_id, first_record`, star)
	if err != nil {
		return nil, fmt.Errorf("read refs of star %q: %w", star, err)
	}
	refs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (SpanRef, error) { return scanRef(r) })
	if err != nil {
		return nil, fmt.Errorf("read refs of star %q: %w", star, err)
	}
	out := map[StreamID][]SpanRef{}
	for _, r := range refs {
		out[r.Stream] = append(out[r.Stream], r)
	}
	return out, nil
}

// EntriesOfStar reads the catalog entries of every stream of a star, each
// stream's in (epoch, first record) order.
func (s Sim) EntriesOfStar(ctx context.Context, star string) (map[StreamID][]Entry, error) {
	rows, err := s.db.pool.Query(ctx, `SELECT `+entryCols+` FROM nova.catalog
		WHERE stream_id IN (SELECT stream_id FROM nova.streams WHERE star = $1) ORDER BY stream_id, epoch, first_record`, star)
	if err != nil {
		return nil, fmt.Errorf("read catalog of star %q: %w", star, err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Entry, error) { return scanEntry(r) })
	if err != nil {
		return nil, fmt.Errorf("read catalog of star %q: %w", star, err)
	}
	out := map[StreamID][]Entry{}
	for _, e := range entries {
		out[e.Stream] = append(out[e.Stream], e)
	}
	return out, nil
}

// ErasuresOfStar reads the erasures of every stream of a star.
func (s Sim) ErasuresOfStar(ctx context.Context, star string) (map[StreamID][]Erasure, error) {
	rows, err := s.db.pool.Query(ctx, `SELECT `+erasureCols+` FROM nova.erasures e
		WHERE e.stream_id IN (SELECT stream_id FROM nova.streams WHERE star = $1) ORDER BY e.stream_id, e.first_record`, star)
	if err != nil {
		return nil, fmt.Errorf("read erasures of star %q: %w", star, err)
	}
	all, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Erasure, error) { return scanErasure(r) })
	if err != nil {
		return nil, fmt.Errorf("read erasures of star %q: %w", star, err)
	}
	out := map[StreamID][]Erasure{}
	for _, e := range all {
		out[e.Stream] = append(out[e.Stream], e)
	}
	return out, nil
}

// InsertErasureRow inserts an erasure row as another writer of the
// contract may store it, unchecked beyond the table's own constraints
// (tests of a malformed row: a negative first record, say).
func (s Sim) InsertErasureRow(ctx context.Context, id StreamID, first, count int64) error {
	if _, err := s.db.pool.Exec(ctx, `INSERT INTO nova.erasures (stream_id, first_record, record_count) VALUES ($1, $2, $3)`,
		id, first, count); err != nil {
		return fmt.Errorf("insert erasure row of %x: %w", id, err)
	}
	return nil
}

// DueMarkersOfStar reads the due markers of every stream of a star.
func (s Sim) DueMarkersOfStar(ctx context.Context, star string) (map[StreamID]DueMarker, error) {
	marks, err := s.db.DueMarkers(ctx, star)
	if err != nil {
		return nil, err
	}
	out := make(map[StreamID]DueMarker, len(marks))
	for _, m := range marks {
		out[m.Stream] = m
	}
	return out, nil
}

// LockWaiters counts the backends of this database waiting for a lock that
// another transaction holds (tests use it to see a statement blocked behind
// a held transaction before they let that transaction go).
func (s Sim) LockWaiters(ctx context.Context) (int, error) {
	var n int
	if err := s.db.pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a USING (pid)
		WHERE NOT l.granted AND a.datname = current_database()`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count lock waiters: %w", err)
	}
	return n, nil
}
