package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fleet's tables (docs/architecture.md#the-fleet, docs/metastore.md):
// nova.auditor_members, the hand-off columns of nova.auditor_leases and
// nova.auditor_fleet_moves. Nothing here weakens the per-star lease: a
// claim is the same takeover as AcquireLeaseInstance (a live lease is
// never taken, the row is locked FOR UPDATE so no fenced transaction of
// the old holder is in flight, the token rises), and a renewal the same
// fenced UPDATE as RenewLease, for many stars at once.

// Member is a row of nova.auditor_members.
type Member struct {
	Member      string
	Instance    string
	StartedAt   time.Time
	HeartbeatAt time.Time
	ExpiresAt   time.Time
	Draining    bool
	Stars       string // the member's --stars
	Alive       bool   // expires_at is ahead of the database's now()
}

// MemberHeldError says a live member row of the same name belongs to
// another process: two processes were given one identity, or a restarted
// one waits for its predecessor's row to expire.
type MemberHeldError struct {
	Member string
	Until  time.Time
}

func (e *MemberHeldError) Error() string {
	return fmt.Sprintf("another process is fleet member %q until %s (member names must be unique per process)",
		e.Member, e.Until.UTC().Format(time.RFC3339))
}

// Heartbeat writes the member's row, alive for ttl by the database clock,
// with its draining state. A live row of another instance is not taken
// (a *MemberHeldError); an expired one is.
func (fl *Fleet) Heartbeat(ctx context.Context, member, instance, stars string, draining bool, ttl time.Duration) (time.Time, error) {
	var until time.Time
	var held *MemberHeldError
	err := fl.db.tx(ctx, func(tx pgx.Tx) error {
		if err := boundStatements(ctx, tx); err != nil {
			return err
		}
		err := tx.QueryRow(ctx, `INSERT INTO nova.auditor_members AS m (member, instance, expires_at, draining, stars)
			VALUES ($1, $2, now() + $3::interval, $4, $5)
			ON CONFLICT (member) DO UPDATE SET instance = EXCLUDED.instance, heartbeat_at = now(),
				expires_at = EXCLUDED.expires_at, draining = EXCLUDED.draining, stars = EXCLUDED.stars,
				started_at = CASE WHEN m.instance = EXCLUDED.instance THEN m.started_at ELSE now() END
			WHERE m.instance = EXCLUDED.instance OR m.expires_at <= now()
			RETURNING expires_at`, member, instance, ttl, draining, stars).Scan(&until)
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		held = &MemberHeldError{Member: member}
		return tx.QueryRow(ctx, `SELECT expires_at FROM nova.auditor_members WHERE member = $1`, member).Scan(&held.Until)
	})
	if err != nil {
		return until, fmt.Errorf("heartbeat of fleet member %q: %w", member, err)
	}
	if held != nil {
		return until, held
	}
	return until, nil
}

// LeaveFleet deletes the member's row (a graceful exit), so the others
// count one member fewer at once.
func (fl *Fleet) LeaveFleet(ctx context.Context, member, instance string) error {
	if _, err := fl.db.pool.Exec(ctx, `DELETE FROM nova.auditor_members WHERE member = $1 AND instance = $2`, member, instance); err != nil {
		return fmt.Errorf("leave the fleet as %q: %w", member, err)
	}
	return nil
}

// FleetStar is one star's lease as the fleet sees it.
type FleetStar struct {
	Star      string
	Holder    string // "" when never owned
	Instance  string
	Token     int64
	ExpiresAt time.Time
	Live      bool          // the lease is unexpired
	Unowned   time.Duration // how long it has had no live owner (0 when live)
	HandoffTo string        // the member a release named ("" none)
	// HandoffAge is how long ago the star was released (0 when never).
	HandoffAge  time.Duration
	ReleasedWhy string
	// LastMove is how long ago it last changed owner within the fleet
	// (negative: never); LastFrom and LastReason, from whom and why.
	LastMove   time.Duration
	LastFrom   string
	LastReason string
}

// FleetView is one consistent read of the fleet: the database's now, the
// members (alive or not), every star of the metastore with its lease, and
// the number of balance moves within the budget window.
type FleetView struct {
	Now          time.Time
	Members      []Member
	Stars        []FleetStar
	BalanceMoves int // moves for balance within the window asked
}

// FleetView reads the fleet in one repeatable-read transaction, after
// giving every star without a lease row one that is expired since now
// (holder ”, token 0): a star's unowned time is then always its lease's
// age past expiry.
func (fl *Fleet) FleetView(ctx context.Context, budgetWindow time.Duration) (FleetView, error) {
	var v FleetView
	if _, err := fl.db.pool.Exec(ctx, `INSERT INTO nova.auditor_leases (star, holder, instance, token, expires_at)
		SELECT s.star, '', '', 0, now() FROM nova.stars s
		WHERE NOT EXISTS (SELECT 1 FROM nova.auditor_leases l WHERE l.star = s.star)
		ON CONFLICT (star) DO NOTHING`); err != nil {
		return v, fmt.Errorf("read the fleet: lease rows of new stars: %w", err)
	}
	err := fl.db.readTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&v.Now); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT member, instance, started_at, heartbeat_at, expires_at, draining, stars,
			expires_at > now() FROM nova.auditor_members ORDER BY member`)
		if err != nil {
			return err
		}
		v.Members, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Member, error) {
			var m Member
			err := r.Scan(&m.Member, &m.Instance, &m.StartedAt, &m.HeartbeatAt, &m.ExpiresAt, &m.Draining, &m.Stars, &m.Alive)
			return m, err
		})
		if err != nil {
			return err
		}
		rows, err = tx.Query(ctx, `SELECT s.star, l.holder, l.instance, l.token, l.expires_at, l.expires_at > now(),
			greatest(now() - l.expires_at, '0'::interval), coalesce(l.handoff_to, ''),
			coalesce(now() - l.released_at, '0'::interval), coalesce(l.released_why, ''),
			coalesce(now() - mv.at, '-1s'::interval), coalesce(mv.from_member, ''), coalesce(mv.reason, '')
			FROM nova.stars s JOIN nova.auditor_leases l ON l.star = s.star
			LEFT JOIN LATERAL (SELECT m.at, m.from_member, m.reason FROM nova.auditor_fleet_moves m
				WHERE m.star = s.star ORDER BY m.at DESC, m.id DESC LIMIT 1) mv ON true
			ORDER BY s.star`)
		if err != nil {
			return err
		}
		v.Stars, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetStar, error) {
			var s FleetStar
			err := r.Scan(&s.Star, &s.Holder, &s.Instance, &s.Token, &s.ExpiresAt, &s.Live, &s.Unowned,
				&s.HandoffTo, &s.HandoffAge, &s.ReleasedWhy, &s.LastMove, &s.LastFrom, &s.LastReason)
			if s.Live {
				s.Unowned = 0
			}
			return s, err
		})
		if err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT count(*) FROM nova.auditor_fleet_moves
			WHERE reason = 'balance' AND at > now() - $1::interval`, budgetWindow).Scan(&v.BalanceMoves)
	})
	if err != nil {
		return v, fmt.Errorf("read the fleet: %w", err)
	}
	return v, nil
}

// Claimed is a lease a claim took and why the star left its last owner,
// as the move log records it (new, released, drain, balance, stuck, lost).
type Claimed struct {
	Lease
	Reason string
}

// Claim is a star a member asks for, and what its own view said of it.
type Claim struct {
	Star    string
	OverCap bool // the claim goes beyond the member's cap (liveness, hand-off)
}

// ClaimStars takes, in the order given, up to n of the claims whose star
// has no live lease and is not handed to another member (alive and not
// draining) within handoffWindow of its release, for ttl by the database clock; rows
// another transaction holds (a takeover in flight, a fenced transaction
// of the old holder) are skipped, not waited for (FOR UPDATE SKIP
// LOCKED). Each claim is recorded in nova.auditor_fleet_moves. The leases
// come back in the order of the claims, each with the reason recorded.
func (fl *Fleet) ClaimStars(ctx context.Context, member, instance string, claims []Claim, n int, ttl, handoffWindow time.Duration) ([]Claimed, error) {
	if n <= 0 || len(claims) == 0 {
		return nil, nil
	}
	stars, over := make([]string, len(claims)), make([]bool, len(claims))
	for i, c := range claims {
		stars[i], over[i] = c.Star, c.OverCap
	}
	var out []Claimed
	err := fl.db.tx(ctx, func(tx pgx.Tx) error {
		if err := boundStatements(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `WITH cand AS (
				SELECT * FROM unnest($3::text[], $4::boolean[]) WITH ORDINALITY AS c(star, over_cap, ord)),
			taken AS (
				SELECT l.star, c.over_cap, c.ord, l.holder AS from_holder, l.released_why, l.released_at,
					l.expires_at AS was_expiring, l.token AS old_token
				FROM nova.auditor_leases l JOIN cand c ON c.star = l.star
				WHERE l.expires_at <= now()
				  AND (l.handoff_to IS NULL OR l.handoff_to = $1 OR l.released_at IS NULL
				       OR l.released_at <= now() - $6::interval
				       OR NOT EXISTS (SELECT 1 FROM nova.auditor_members m
				                      WHERE m.member = l.handoff_to AND m.expires_at > now() AND NOT m.draining))
				ORDER BY c.ord LIMIT $5
				FOR UPDATE OF l SKIP LOCKED),
			claimed AS (
				UPDATE nova.auditor_leases l SET holder = $1, instance = $2, token = l.token + 1,
					expires_at = now() + $7::interval, handoff_to = NULL
				FROM taken WHERE l.star = taken.star
				RETURNING l.star, l.token, l.expires_at, taken.ord, taken.over_cap, taken.from_holder,
					taken.released_why, taken.released_at, taken.was_expiring),
			moved AS (
				INSERT INTO nova.auditor_fleet_moves (star, from_member, to_member, reason, over_cap, unowned_ms, token)
				SELECT star, nullif(from_holder, ''), $1,
					CASE WHEN from_holder = '' THEN 'new'
					     WHEN released_at IS NOT NULL AND released_at >= was_expiring THEN released_why
					     ELSE 'lost' END,
					over_cap, (extract(epoch FROM now() - was_expiring) * 1000)::bigint, token
				FROM claimed
				RETURNING star, reason)
			SELECT c.star, c.token, c.expires_at, m.reason FROM claimed c JOIN moved m ON m.star = c.star ORDER BY c.ord`,
			member, instance, stars, over, n, handoffWindow, ttl)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Claimed, error) {
			c := Claimed{Lease: Lease{Fence: Fence{Holder: member}, Instance: instance}}
			err := r.Scan(&c.Star, &c.Token, &c.ExpiresAt, &c.Reason)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim stars for fleet member %q: %w", member, err)
	}
	return out, nil
}

// RenewLeases extends, in one statement, every lease of held that is
// still this member's and unexpired (the same fenced UPDATE as
// RenewLease). It returns the new expiry of each star renewed; a star
// of held missing from it is lost (its token is stale).
func (fl *Fleet) RenewLeases(ctx context.Context, member string, held []Fence, ttl time.Duration) (map[string]time.Time, error) {
	out := make(map[string]time.Time, len(held))
	if len(held) == 0 {
		return out, nil
	}
	stars, tokens := make([]string, len(held)), make([]int64, len(held))
	for i, f := range held {
		stars[i], tokens[i] = f.Star, f.Token
	}
	err := fl.db.tx(ctx, func(tx pgx.Tx) error {
		if err := boundStatements(ctx, tx); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `UPDATE nova.auditor_leases l SET expires_at = now() + $4::interval
			FROM unnest($2::text[], $3::bigint[]) AS h(star, token)
			WHERE l.star = h.star AND l.token = h.token AND l.holder = $1 AND l.expires_at > now()
			RETURNING l.star, l.expires_at`, member, stars, tokens, ttl)
		if err != nil {
			return err
		}
		var star string
		var until time.Time
		_, err = pgx.ForEachRow(rows, []any{&star, &until}, func() error {
			out[star] = until
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("renew the leases of fleet member %q: %w", member, err)
	}
	return out, nil
}

// HandOff gives a held lease up now, saying why (drain, balance, stuck)
// and naming the member that should take it next ("" for none). Like
// ReleaseLease it is a no-op on a lease no longer held.
func (fl *Fleet) HandOff(ctx context.Context, f Fence, to, why string) error {
	_, err := fl.db.pool.Exec(ctx, `UPDATE nova.auditor_leases SET expires_at = now(), released_at = now(),
		released_why = $4, handoff_to = nullif($5, '')
		WHERE star = $1 AND holder = $2 AND token = $3 AND expires_at > now()`, f.Star, f.Holder, f.Token, why, to)
	if err != nil {
		return fmt.Errorf("hand off star %q: %w", f.Star, err)
	}
	return nil
}

// FleetMove is a row of nova.auditor_fleet_moves.
type FleetMove struct {
	At      time.Time
	Star    string
	From    string // "" when the star was never owned
	To      string
	Reason  string
	OverCap bool
	Unowned time.Duration
	Token   int64
}

// FleetMoves returns the moves of the last window, newest first, at most
// limit.
func (fl *Fleet) FleetMoves(ctx context.Context, window time.Duration, limit int) ([]FleetMove, error) {
	rows, err := fl.db.reader(ctx).Query(ctx, `SELECT at, star, coalesce(from_member, ''), to_member, reason, over_cap,
		unowned_ms, token FROM nova.auditor_fleet_moves WHERE at > now() - $1::interval ORDER BY at DESC, id DESC LIMIT $2`,
		window, limit)
	if err != nil {
		return nil, fmt.Errorf("read fleet moves: %w", err)
	}
	moves, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (FleetMove, error) {
		var m FleetMove
		var ms int64
		err := r.Scan(&m.At, &m.Star, &m.From, &m.To, &m.Reason, &m.OverCap, &ms, &m.Token)
		m.Unowned = time.Duration(ms) * time.Millisecond
		return m, err
	})
	if err != nil {
		return nil, fmt.Errorf("read fleet moves: %w", err)
	}
	return moves, nil
}

// MoveCount is how many claims of the window had one reason.
type MoveCount struct {
	Reason string
	Count  int
}

// FleetMoveCounts counts the moves of the last window by reason: every
// reason of nova.auditor_fleet_moves (new, released, drain, balance,
// stuck, lost), in that order, zero included.
func (fl *Fleet) FleetMoveCounts(ctx context.Context, window time.Duration) ([]MoveCount, error) {
	rows, err := fl.db.reader(ctx).Query(ctx, `SELECT r.reason, count(m.id)
		FROM unnest(ARRAY['new', 'released', 'drain', 'balance', 'stuck', 'lost']) WITH ORDINALITY AS r(reason, ord)
		LEFT JOIN nova.auditor_fleet_moves m ON m.reason = r.reason AND m.at > now() - $1::interval
		GROUP BY r.reason, r.ord ORDER BY r.ord`, window)
	if err != nil {
		return nil, fmt.Errorf("count fleet moves: %w", err)
	}
	counts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (MoveCount, error) {
		var c MoveCount
		err := r.Scan(&c.Reason, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("count fleet moves: %w", err)
	}
	return counts, nil
}

// PruneFleet deletes moves older than keep and member rows expired for
// longer than keep.
func (fl *Fleet) PruneFleet(ctx context.Context, keep time.Duration) error {
	_, err := fl.db.pool.Exec(ctx, `WITH m AS (DELETE FROM nova.auditor_fleet_moves WHERE at < now() - $1::interval)
		DELETE FROM nova.auditor_members WHERE expires_at < now() - $1::interval`, keep)
	if err != nil {
		return fmt.Errorf("prune the fleet tables: %w", err)
	}
	return nil
}
