package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fence identifies the lease a transaction runs under (DESIGN.md section 5).
type Fence struct {
	Star   string
	Holder string
	Token  int64
}

// ErrStaleToken means the fencing token is no longer the star's current,
// unexpired lease: the caller lost leadership and must stop at once.
var ErrStaleToken = errors.New("stale fencing token: the lease was lost")

// LeaseHeldError says another holder has the star's lease.
type LeaseHeldError struct {
	Star   string
	Holder string
	Until  time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("another auditor (%s) holds the lease of star %q until %s", e.Holder, e.Star, e.Until.UTC().Format(time.RFC3339))
}

// Lease is a held lease.
type Lease struct {
	Fence
	ExpiresAt time.Time
}

// AcquireLease takes the star's lease for ttl (database clock) when it is
// free, expired or already this holder's; the token rises on every
// acquisition. Otherwise it returns a *LeaseHeldError.
func (db *DB) AcquireLease(ctx context.Context, star, holder string, ttl time.Duration) (Lease, error) {
	l := Lease{Fence: Fence{Star: star, Holder: holder}}
	err := db.pool.QueryRow(ctx, `INSERT INTO nova.auditor_leases AS l (star, holder, token, expires_at)
		VALUES ($1, $2, 1, now() + $3::interval)
		ON CONFLICT (star) DO UPDATE SET holder = EXCLUDED.holder, token = l.token + 1, expires_at = EXCLUDED.expires_at
		WHERE l.expires_at <= now() OR l.holder = EXCLUDED.holder
		RETURNING token, expires_at`, star, holder, ttl).Scan(&l.Token, &l.ExpiresAt)
	if errors.Is(err, pgx.ErrNoRows) {
		held := &LeaseHeldError{Star: star}
		if err := db.pool.QueryRow(ctx, `SELECT holder, expires_at FROM nova.auditor_leases WHERE star = $1`, star).
			Scan(&held.Holder, &held.Until); err != nil {
			return l, fmt.Errorf("read lease of star %q: %w", star, err)
		}
		return l, held
	}
	if err != nil {
		return l, fmt.Errorf("acquire lease of star %q: %w", star, err)
	}
	return l, nil
}

// RenewLease extends a held lease; ErrStaleToken when it was lost.
func (db *DB) RenewLease(ctx context.Context, f Fence, ttl time.Duration) (time.Time, error) {
	var until time.Time
	err := db.pool.QueryRow(ctx, `UPDATE nova.auditor_leases SET expires_at = now() + $4::interval
		WHERE star = $1 AND holder = $2 AND token = $3 AND expires_at > now() RETURNING expires_at`,
		f.Star, f.Holder, f.Token, ttl).Scan(&until)
	if errors.Is(err, pgx.ErrNoRows) {
		return until, fmt.Errorf("renew lease of star %q (token %d): %w", f.Star, f.Token, ErrStaleToken)
	}
	if err != nil {
		return until, fmt.Errorf("renew lease of star %q: %w", f.Star, err)
	}
	return until, nil
}

// ReleaseLease expires a held lease now so a standby takes over at once.
// Releasing a lease already lost is not an error.
func (db *DB) ReleaseLease(ctx context.Context, f Fence) error {
	_, err := db.pool.Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now()
		WHERE star = $1 AND holder = $2 AND token = $3 AND expires_at > now()`, f.Star, f.Holder, f.Token)
	if err != nil {
		return fmt.Errorf("release lease of star %q: %w", f.Star, err)
	}
	return nil
}

// CurrentLease reads the star's lease row (ErrNotFound when never taken).
func (db *DB) CurrentLease(ctx context.Context, star string) (Lease, bool, error) {
	l := Lease{Fence: Fence{Star: star}}
	var live bool
	err := db.pool.QueryRow(ctx, `SELECT holder, token, expires_at, expires_at > now() FROM nova.auditor_leases WHERE star = $1`, star).
		Scan(&l.Holder, &l.Token, &l.ExpiresAt, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, fmt.Errorf("lease of star %q: %w", star, ErrNotFound)
	}
	if err != nil {
		return l, false, fmt.Errorf("read lease of star %q: %w", star, err)
	}
	return l, live, nil
}

// fenced runs fn in a transaction that first checks the fencing token
// (METASTORE.md: "every auditor transaction starts with ... FOR SHARE") and
// aborts with ErrStaleToken when it is stale. The share lock holds off a
// takeover until this transaction ends.
func (db *DB) fenced(ctx context.Context, f Fence, fn func(pgx.Tx) error) error {
	return db.tx(ctx, func(tx pgx.Tx) error {
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM nova.auditor_leases WHERE star = $1 AND holder = $2 AND token = $3
			AND expires_at > now() FOR SHARE`, f.Star, f.Holder, f.Token).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("star %q token %d: %w", f.Star, f.Token, ErrStaleToken)
		}
		if err != nil {
			return fmt.Errorf("check fencing token: %w", err)
		}
		return fn(tx)
	})
}
