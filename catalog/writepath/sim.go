package writepath

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nova/auditor/catalog"
)

// novasim's own table, nova.sim_stars: the content profile of every star
// novasim set up. It is outside the contract
// (docs/metastore.md#tables-outside-the-contract; the contract allows added
// tables), so the project's migrations, which are the contract's, do not
// create it: Setup does, and novasim's setup (sim.Setup) calls it
// before SetupStar. The auditor never touches it.

// SimStar is novasim's record of a star it set up: the content profile that
// regenerates every record of the star's streams (sim.Content).
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

// simLock serialises concurrent creations of nova.sim_stars ("nova-sim").
const simLock int64 = 0x6e6f76612d73696d

// Setup creates novasim's table nova.sim_stars when it is missing (over a
// migrated database: it references nova.stars). SetupStar needs it; Star
// and Stars read a database without it as one where novasim set up nothing.
func (db *DB) Setup(ctx context.Context) error {
	return db.tx(ctx, func(tx pgx.Tx) error {
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
	ID     catalog.StreamID
	Bucket string
}

// SetupStar creates, in one transaction, a star with its epoch-1 row (as
// CreateStar does), its novasim content profile, and its streams (whose
// class is the star's chain class). ErrExists when the star exists. Setup
// must have run.
func (db *DB) SetupStar(ctx context.Context, chainClass string, fenceWindow int, prof SimStar, streams []NewStream) error {
	return db.tx(ctx, func(tx pgx.Tx) error {
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

// Star reads the content profile of a star set up by novasim
// (catalog.ErrNotFound when novasim did not set it up).
func (db *DB) Star(ctx context.Context, star string) (SimStar, error) {
	p, err := scanSimStar(db.pool.QueryRow(ctx, `SELECT `+simStarCols+` FROM nova.sim_stars WHERE star = $1`, star))
	if errors.Is(err, pgx.ErrNoRows) || simMissing(err) {
		return p, fmt.Errorf("novasim profile of star %q: %w", star, catalog.ErrNotFound)
	}
	if err != nil {
		return p, fmt.Errorf("read novasim profile of star %q: %w", star, err)
	}
	return p, nil
}

// Stars lists the content profiles of every star novasim set up, by name.
func (db *DB) Stars(ctx context.Context) ([]SimStar, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+simStarCols+` FROM nova.sim_stars ORDER BY star`)
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
