package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseHeldError says another process has the star's lease.
type LeaseHeldError struct {
	Star   string
	Holder string
	Until  time.Time
	// SameHolder: the holder is ours but the process is another one (two
	// processes were given the same holder name).
	SameHolder bool
}

func (e *LeaseHeldError) Error() string {
	until := e.Until.UTC().Format(time.RFC3339)
	if e.SameHolder {
		return fmt.Sprintf("another process with the same holder name %q holds the lease of star %q until %s "+
			"(holder names must be unique per process)", e.Holder, e.Star, until)
	}
	return fmt.Sprintf("another auditor (%s) holds the lease of star %q until %s", e.Holder, e.Star, until)
}

// Lease is a held lease.
type Lease struct {
	Fence
	Instance  string // the holding process's nonce
	ExpiresAt time.Time
}

// AcquireLeaseInstance takes the star's lease for ttl (database clock) when
// it is free, expired or already held by this very process (holder and
// instance both equal); the token rises on every acquisition. Otherwise it
// returns a *LeaseHeldError: a live lease of another process is never taken,
// even one with the same holder name, so two processes given one name wait
// their turn instead of fencing each other on every attempt.
//
// The row is locked FOR UPDATE before it is changed. That is what keeps a
// takeover out while a fenced transaction of the old holder is in flight:
// those hold FOR KEY SHARE (see fenced), which FOR UPDATE waits for, while
// the plain UPDATE of an upsert (FOR NO KEY UPDATE) would not. Only rows the
// caller may take are locked, so a standby polling a live lease never queues
// behind the leader's transactions.
//
// The caller's deadline bounds the call on both sides: the context cancels
// the client, and the same remaining time is set as the transaction's
// statement_timeout, so the server drops a lock wait whose client is gone
// (a backend waiting for a lock does not notice a dead connection).
func (ls *Leases) AcquireLeaseInstance(ctx context.Context, star, holder, instance string, ttl time.Duration) (Lease, error) {
	l := Lease{Fence: Fence{Star: star, Holder: holder}, Instance: instance}
	var held *LeaseHeldError
	err := ls.db.tx(ctx, func(tx pgx.Tx) error {
		if err := boundStatements(ctx, tx); err != nil {
			return err
		}
		var token int64
		err := tx.QueryRow(ctx, `SELECT token FROM nova.auditor_leases
			WHERE star = $1 AND (expires_at <= now() OR (holder = $2 AND instance = $3)) FOR UPDATE`,
			star, holder, instance).Scan(&token)
		switch {
		case err == nil:
			return tx.QueryRow(ctx, `UPDATE nova.auditor_leases SET holder = $2, instance = $3, token = token + 1,
				expires_at = now() + $4::interval, handoff_to = NULL WHERE star = $1 RETURNING token, expires_at`,
				star, holder, instance, ttl).Scan(&l.Token, &l.ExpiresAt)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		err = tx.QueryRow(ctx, `INSERT INTO nova.auditor_leases (star, holder, instance, token, expires_at)
			VALUES ($1, $2, $3, 1, now() + $4::interval) ON CONFLICT (star) DO NOTHING RETURNING token, expires_at`,
			star, holder, instance, ttl).Scan(&l.Token, &l.ExpiresAt)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		held = &LeaseHeldError{Star: star}
		var other string
		if err := tx.QueryRow(ctx, `SELECT holder, instance, expires_at FROM nova.auditor_leases WHERE star = $1`, star).
			Scan(&held.Holder, &other, &held.Until); err != nil {
			return fmt.Errorf("read lease: %w", err)
		}
		held.SameHolder = held.Holder == holder && other != instance
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("acquire lease of star %q: %w", star, err)
	}
	if held != nil {
		return l, held
	}
	return l, nil
}

// RenewLease extends a held lease; ErrStaleToken when it was lost. It takes
// FOR NO KEY UPDATE on the row, which the fenced transactions' FOR KEY SHARE
// does not conflict with: a renewal never waits for the leader's own work.
// The caller's deadline is also the statement_timeout, as in
// AcquireLeaseInstance.
func (ls *Leases) RenewLease(ctx context.Context, f Fence, ttl time.Duration) (time.Time, error) {
	var until time.Time
	err := ls.db.tx(ctx, func(tx pgx.Tx) error {
		if err := boundStatements(ctx, tx); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `UPDATE nova.auditor_leases SET expires_at = now() + $4::interval
			WHERE star = $1 AND holder = $2 AND token = $3 AND expires_at > now() RETURNING expires_at`,
			f.Star, f.Holder, f.Token, ttl).Scan(&until)
	})
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
func (ls *Leases) ReleaseLease(ctx context.Context, f Fence) error {
	_, err := ls.db.pool.Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now(), released_at = now(),
		released_why = 'released', handoff_to = NULL
		WHERE star = $1 AND holder = $2 AND token = $3 AND expires_at > now()`, f.Star, f.Holder, f.Token)
	if err != nil {
		return fmt.Errorf("release lease of star %q: %w", f.Star, err)
	}
	return nil
}

// CurrentLease reads the star's lease row (ErrNotFound when never taken).
func (ls *Leases) CurrentLease(ctx context.Context, star string) (Lease, bool, error) {
	l := Lease{Fence: Fence{Star: star}}
	var live bool
	err := ls.db.reader(ctx).QueryRow(ctx, `SELECT holder, instance, token, expires_at, expires_at > now()
		FROM nova.auditor_leases WHERE star = $1`, star).
		Scan(&l.Holder, &l.Instance, &l.Token, &l.ExpiresAt, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return l, false, fmt.Errorf("lease of star %q: %w", star, ErrNotFound)
	}
	if err != nil {
		return l, false, fmt.Errorf("read lease of star %q: %w", star, err)
	}
	return l, live, nil
}
