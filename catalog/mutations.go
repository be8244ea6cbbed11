package catalog

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// Mutations switch off rules of the metastore on purpose, for the fault
// explorer only (docs/architecture.md#the-fault-explorer): it runs with
// each one set to show that its episodes find the break. The zero value,
// the only one production ever has, changes nothing; nothing outside
// tests calls Mutated.
type Mutations struct {
	// ReusePlannedRevision opens a publish intent at the planned revision
	// even when the base's high-water is at or above it: the no-late-delete
	// rule off (docs/architecture.md#no-late-delete).
	ReusePlannedRevision bool
	// UnfencedCommits runs the settle and rewrite commits without the
	// lease fence: a stale leader's commit lands.
	UnfencedCommits bool
}

// Mutated is a handle on the same pool with the mutations m set. Closing
// either closes the pool of both.
func (db *DB) Mutated(m Mutations) *DB {
	c := *db
	c.mut = m
	return &c
}

// commitFenced is fenced for the commits of settled objects, unless the
// UnfencedCommits mutation is set.
func (db *DB) commitFenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	if db.mut.UnfencedCommits {
		return db.tx(ctx, fn)
	}
	return db.fenced(ctx, f, fn)
}
