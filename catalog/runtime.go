package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Runtime is a star's row of nova.auditor_runtime: what its leader runs
// with (the due policy, the reap grace) and what its last check of the
// bucket rules found, so status shows the daemon's view rather than the
// flags of whoever runs `auditor status`.
type Runtime struct {
	Star      string
	Holder    string
	Token     int64
	Version   string
	Policy    DuePolicy
	ReapGrace time.Duration
	// BucketRules is the last check's document (JSON, the daemon's own
	// shape); nil before the first check.
	BucketRules     json.RawMessage
	BucketCheckedAt *time.Time
	// BlockedReason is why the leader refuses to work ("" when it works).
	BlockedReason string
	UpdatedAt     time.Time
}

// RecordRuntime writes the leader's policy (fenced): called when it takes
// the lease. The bucket-rules columns are kept.
func (lg *Ledger) RecordRuntime(ctx context.Context, f Fence, version string, p DuePolicy, reapGrace time.Duration) error {
	return lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_runtime (star, holder, token, version, linger_seconds,
			age_cap_seconds, express_linger_seconds, express_age_cap_seconds, reap_grace_seconds, tail_growth, copy_floor_bytes,
			tail_cohorts)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
			ON CONFLICT (star) DO UPDATE SET holder = EXCLUDED.holder, token = EXCLUDED.token, version = EXCLUDED.version,
			linger_seconds = EXCLUDED.linger_seconds, age_cap_seconds = EXCLUDED.age_cap_seconds,
			express_linger_seconds = EXCLUDED.express_linger_seconds, express_age_cap_seconds = EXCLUDED.express_age_cap_seconds,
			reap_grace_seconds = EXCLUDED.reap_grace_seconds, tail_growth = EXCLUDED.tail_growth,
			copy_floor_bytes = EXCLUDED.copy_floor_bytes, tail_cohorts = EXCLUDED.tail_cohorts, updated_at = now()`,
			f.Star, f.Holder, f.Token, version, p.Linger.Seconds(), p.AgeCap.Seconds(), p.ExpressLinger.Seconds(),
			p.ExpressAgeCap.Seconds(), reapGrace.Seconds(), p.TailGrowth, p.CopyFloor, p.Cohorts); err != nil {
			return fmt.Errorf("record the runtime of star %q: %w", f.Star, err)
		}
		return nil
	})
}

// RecordBucketRules writes the leader's last check of the bucket rules and
// the reason it refuses to work ("" none), fenced. RecordRuntime must have
// created the row (a missing row is ErrNotFound).
func (lg *Ledger) RecordBucketRules(ctx context.Context, f Fence, rules json.RawMessage, blocked string) error {
	return lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE nova.auditor_runtime SET bucket_rules = $2, bucket_checked_at = now(),
			blocked_reason = $3, updated_at = now() WHERE star = $1`, f.Star, []byte(rules), blocked)
		if err != nil {
			return fmt.Errorf("record the bucket rules of star %q: %w", f.Star, err)
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("runtime of star %q: %w", f.Star, ErrNotFound)
		}
		return nil
	})
}

// Runtime reads a star's runtime row; ErrNotFound when no leader has
// recorded one.
func (lg *Ledger) Runtime(ctx context.Context, star string) (Runtime, error) {
	r := Runtime{Star: star}
	var lin, cap_, xlin, xcap, grace, growth float64
	var floor int64
	var cohorts int
	var rules []byte
	err := lg.db.reader(ctx).QueryRow(ctx, `SELECT holder, token, version, linger_seconds, age_cap_seconds, express_linger_seconds,
		express_age_cap_seconds, reap_grace_seconds, tail_growth, copy_floor_bytes, tail_cohorts, bucket_rules, bucket_checked_at,
		blocked_reason, updated_at
		FROM nova.auditor_runtime WHERE star = $1`, star).
		Scan(&r.Holder, &r.Token, &r.Version, &lin, &cap_, &xlin, &xcap, &grace, &growth, &floor, &cohorts, &rules, &r.BucketCheckedAt,
			&r.BlockedReason, &r.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return r, fmt.Errorf("runtime of star %q: %w", star, ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("read the runtime of star %q: %w", star, err)
	}
	sec := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	r.Policy = DuePolicy{Linger: sec(lin), AgeCap: sec(cap_), ExpressLinger: sec(xlin), ExpressAgeCap: sec(xcap),
		TailGrowth: growth, CopyFloor: floor, Cohorts: cohorts}
	r.ReapGrace = sec(grace)
	if rules != nil {
		r.BucketRules = rules
	}
	return r, nil
}

// StarExists reports whether the star is in nova.stars.
func (ss *Streams) StarExists(ctx context.Context, star string) (bool, error) {
	var ok bool
	if err := ss.db.reader(ctx).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nova.stars WHERE star = $1)`, star).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up star %q: %w", star, err)
	}
	return ok, nil
}

// StreamOfStar reports whether the stream exists and belongs to the star.
func (ss *Streams) StreamOfStar(ctx context.Context, star string, id StreamID) (bool, error) {
	var ok bool
	if err := ss.db.reader(ctx).QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM nova.streams WHERE stream_id = $1 AND star = $2)`, id, star).Scan(&ok); err != nil {
		return false, fmt.Errorf("look up stream of star %q: %w", star, err)
	}
	return ok, nil
}
