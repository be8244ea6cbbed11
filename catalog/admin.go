package catalog

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The daemon's statements (docs/architecture.md#singleton-lease-and-fencing): operator
// requests and their NOTIFY channel, and the persisted pause and halt. The
// run ledger is runs.go; the reads behind `auditor status` and the gauges,
// monitor.go.

// AdminChannel is the LISTEN/NOTIFY channel of every auditor; the payload is
// the star. A notification only wakes a daemon: the rows it then reads are
// the truth, so a missed notification delays, never loses, a request.
const AdminChannel = "nova_auditor"

// Admin request kinds (nova.admin_requests.kind).
const (
	AdminTrigger = "trigger"
	AdminPause   = "pause"
	AdminResume  = "resume"
	AdminRelease = "release"
)

// Outcomes of a consumed trigger request (nova.admin_requests.outcome).
const (
	TriggerDone   = "done"   // a cycle ran it (and settled its stream, for trigger --stream)
	TriggerFailed = "failed" // a cycle ran but could not settle its stream; Reason says why
)

// AdminRequest is a row of nova.admin_requests.
type AdminRequest struct {
	ID          int64
	Star        string
	Kind        string
	Stream      *StreamID // trigger --stream, release --stream
	RequestedBy string
	RequestedAt time.Time
	ConsumedAt  *time.Time
	ConsumedBy  string // triggers: the leader that took it (set when taken)
	// Triggers only.
	TakenAt      *time.Time // when a cycle was about to run it (the latest such)
	TargetRecord *int64     // trigger --stream: the stream's next_record when asked (nil: unknown stream)
	Outcome      string     // TriggerDone or TriggerFailed once consumed
	Reason       string     // why it failed
	RunID        *int64     // the run that consumed it, or last tried it
	Attempts     int        // cycles that tried it
	LastError    string     // why the last attempt left it open
}

const adminCols = `id, star, kind, stream_id, requested_by, requested_at, consumed_at, coalesce(consumed_by, ''),
	target_record, coalesce(outcome, ''), coalesce(reason, ''), run_id, attempts, coalesce(last_error, ''), taken_at`

func scanAdmin(r pgx.Row) (AdminRequest, error) {
	var a AdminRequest
	err := r.Scan(&a.ID, &a.Star, &a.Kind, &a.Stream, &a.RequestedBy, &a.RequestedAt, &a.ConsumedAt, &a.ConsumedBy,
		&a.TargetRecord, &a.Outcome, &a.Reason, &a.RunID, &a.Attempts, &a.LastError, &a.TakenAt)
	return a, err
}

// RequestAdmin records an operator request for the star's daemon and
// notifies it, in one transaction. The request's effect on persisted state
// is applied here, so it holds whether or not a daemon runs: pause sets
// auditor_state.paused; resume clears it and any halt; release lifts the
// stream's quarantine (ErrNotFound, and nothing recorded, when the stream
// was not quarantined). A trigger only asks: the leader runs a cycle and
// marks the request consumed once one has run it (FinishTriggers); a
// trigger --stream records the stream's next_record, which that cycle must
// settle through.
func (rq *Requests) RequestAdmin(ctx context.Context, star, kind string, stream *StreamID, by string) (AdminRequest, error) {
	var req AdminRequest
	switch kind {
	case AdminTrigger, AdminPause, AdminResume:
	case AdminRelease:
		if stream == nil {
			return req, fmt.Errorf("release needs a stream")
		}
	default:
		return req, fmt.Errorf("unknown admin request kind %q", kind)
	}
	err := rq.db.tx(ctx, func(tx pgx.Tx) error {
		switch kind {
		case AdminPause:
			if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_state (star, paused, paused_at) VALUES ($1, true, now())
				ON CONFLICT (star) DO UPDATE SET paused = true,
				paused_at = CASE WHEN nova.auditor_state.paused THEN nova.auditor_state.paused_at ELSE now() END`, star); err != nil {
				return fmt.Errorf("pause star %q: %w", star, err)
			}
		case AdminResume:
			if _, err := tx.Exec(ctx, `UPDATE nova.auditor_state SET paused = false, paused_at = NULL,
				halted_reason = NULL, halted_at = NULL WHERE star = $1`, star); err != nil {
				return fmt.Errorf("resume star %q: %w", star, err)
			}
		case AdminRelease:
			tag, err := tx.Exec(ctx, `DELETE FROM nova.quarantine WHERE star = $1 AND stream_id = $2`, star, *stream)
			if err != nil {
				return fmt.Errorf("release stream %s: %w", *stream, err)
			}
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("stream %s of star %q is not quarantined: %w", *stream, star, ErrNotFound)
			}
		}
		var err error
		req, err = scanAdmin(tx.QueryRow(ctx, `INSERT INTO nova.admin_requests (star, kind, stream_id, requested_by, target_record)
			VALUES ($1, $2, $3, $4, CASE WHEN $2 = 'trigger' THEN
				(SELECT next_record FROM nova.streams WHERE stream_id = $3 AND star = $1) END)
			RETURNING `+adminCols, star, kind, stream, by))
		if err != nil {
			return fmt.Errorf("record %s request for star %q: %w", kind, star, err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, AdminChannel, star); err != nil {
			return fmt.Errorf("notify star %q: %w", star, err)
		}
		return nil
	})
	return req, err
}

// ConsumeAdminRequests marks the star's open requests of the given kinds
// consumed by the fence's holder, in one fenced transaction, and returns
// them in request order. Requests of other kinds stay open.
func (rq *Requests) ConsumeAdminRequests(ctx context.Context, f Fence, kinds []string) ([]AdminRequest, error) {
	var out []AdminRequest
	err := rq.db.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE nova.admin_requests SET consumed_at = now(), consumed_by = $2
			WHERE star = $1 AND consumed_at IS NULL AND kind = ANY($3) RETURNING `+adminCols, f.Star, f.Holder, kinds)
		if err != nil {
			return fmt.Errorf("consume admin requests of star %q: %w", f.Star, err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AdminRequest, error) { return scanAdmin(r) })
		if err != nil {
			return fmt.Errorf("consume admin requests of star %q: %w", f.Star, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// UPDATE ... RETURNING has no order.
	slices.SortFunc(out, func(a, b AdminRequest) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// TriggerResult is what a cycle that ran a trigger request made of it.
type TriggerResult struct {
	ID      int64
	Outcome string // TriggerDone or TriggerFailed
	Reason  string // for TriggerFailed
}

// FinishTriggers consumes trigger requests run by the run runID (fenced),
// with their outcomes, and returns those it consumed in request order. One
// consumed already (by an earlier attempt that crashed before it could
// report) is left as it is, so finishing twice is harmless.
func (rq *Requests) FinishTriggers(ctx context.Context, f Fence, runID int64, results []TriggerResult) ([]AdminRequest, error) {
	if len(results) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(results))
	outcomes := make([]string, len(results))
	reasons := make([]*string, len(results))
	for i, r := range results {
		ids[i], outcomes[i] = r.ID, r.Outcome
		if r.Reason != "" {
			reasons[i] = &r.Reason
		}
	}
	var out []AdminRequest
	err := rq.db.fenced(ctx, f, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `UPDATE nova.admin_requests SET consumed_at = now(), consumed_by = $2,
			outcome = r.routcome, reason = r.rreason, run_id = $3, attempts = attempts + 1
			FROM unnest($4::bigint[], $5::text[], $6::text[]) AS r(rid, routcome, rreason)
			WHERE id = r.rid AND star = $1 AND kind = 'trigger' AND consumed_at IS NULL
			RETURNING `+adminCols, f.Star, f.Holder, runID, ids, outcomes, reasons)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (AdminRequest, error) { return scanAdmin(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("finish trigger requests of star %q (run %d): %w", f.Star, runID, err)
	}
	slices.SortFunc(out, func(a, b AdminRequest) int { return cmp.Compare(a.ID, b.ID) })
	return out, nil
}

// TakeTriggers records that a cycle of the fence's holder is starting to
// run the open trigger requests ids (fenced); `auditor trigger --wait`
// reports it. They stay open until FinishTriggers.
func (rq *Requests) TakeTriggers(ctx context.Context, f Fence, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	err := rq.db.fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE nova.admin_requests SET taken_at = now(), consumed_by = $3
			WHERE star = $1 AND id = ANY($2) AND kind = 'trigger' AND consumed_at IS NULL`, f.Star, ids, f.Holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("take trigger requests of star %q: %w", f.Star, err)
	}
	return nil
}

// NoteTriggerAttempt records that the run runID tried the open trigger
// requests ids and why they stay open (fenced). runID 0: the run did not
// start (the request keeps the run of its last attempt).
func (rq *Requests) NoteTriggerAttempt(ctx context.Context, f Fence, runID int64, ids []int64, why string) error {
	if len(ids) == 0 {
		return nil
	}
	err := rq.db.fenced(ctx, f, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE nova.admin_requests SET attempts = attempts + 1, last_error = $3, run_id = coalesce(nullif($4::bigint, 0), run_id)
			WHERE star = $1 AND id = ANY($2) AND kind = 'trigger' AND consumed_at IS NULL`, f.Star, ids, why, runID)
		return err
	})
	if err != nil {
		return fmt.Errorf("note attempt of trigger requests of star %q (run %d): %w", f.Star, runID, err)
	}
	return nil
}

// StreamProgress is how far a stream forced by a trigger is settled.
type StreamProgress struct {
	Found          bool // the stream exists and belongs to the star
	SettledThrough int64
	NextRecord     int64
	Quarantine     string // "class: reason" while quarantined
}

// ForcedProgress reads the progress of the star's streams ids (each one
// absent from the star comes back with Found false).
func (rq *Requests) ForcedProgress(ctx context.Context, star string, ids []StreamID) (map[StreamID]StreamProgress, error) {
	out := make(map[StreamID]StreamProgress, len(ids))
	rows, err := rq.db.reader(ctx).Query(ctx, `SELECT s.stream_id, s.settled_through, s.next_record,
			coalesce((SELECT q.error_class || ': ' || q.reason FROM nova.quarantine q WHERE q.stream_id = s.stream_id), '')
		FROM nova.streams s WHERE s.star = $1 AND s.stream_id = ANY($2::uuid[])`, star, ids)
	if err != nil {
		return nil, fmt.Errorf("read progress of forced streams of star %q: %w", star, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id StreamID
		p := StreamProgress{Found: true}
		if err := rows.Scan(&id, &p.SettledThrough, &p.NextRecord, &p.Quarantine); err != nil {
			return nil, fmt.Errorf("read progress of forced streams of star %q: %w", star, err)
		}
		out[id] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read progress of forced streams of star %q: %w", star, err)
	}
	return out, nil
}

// AdminRequests lists the star's requests, newest first, at most limit;
// only the unconsumed ones when openOnly.
func (rq *Requests) AdminRequests(ctx context.Context, star string, openOnly bool, limit int) ([]AdminRequest, error) {
	rows, err := rq.db.reader(ctx).Query(ctx, `SELECT `+adminCols+` FROM nova.admin_requests
		WHERE star = $1 AND (NOT $2 OR consumed_at IS NULL) ORDER BY id DESC LIMIT $3`, star, openOnly, limit)
	if err != nil {
		return nil, fmt.Errorf("list admin requests of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (AdminRequest, error) { return scanAdmin(r) })
	if err != nil {
		return nil, fmt.Errorf("list admin requests of star %q: %w", star, err)
	}
	return out, nil
}

// AdminRequest reads one request (ErrNotFound when absent).
func (rq *Requests) AdminRequest(ctx context.Context, id int64) (AdminRequest, error) {
	a, err := scanAdmin(rq.db.reader(ctx).QueryRow(ctx, `SELECT `+adminCols+` FROM nova.admin_requests WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("admin request %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return a, fmt.Errorf("read admin request %d: %w", id, err)
	}
	return a, nil
}

// Notify wakes the star's daemons (for example after a lease release, so a
// standby takes over without waiting for its next attempt).
func (rq *Requests) Notify(ctx context.Context, star string) error {
	if _, err := rq.db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, AdminChannel, star); err != nil {
		return fmt.Errorf("notify star %q: %w", star, err)
	}
	return nil
}

// Listener is a connection that LISTENs on AdminChannel. It is taken out
// of the pool for good, so its subscription never leaks to other users.
type Listener struct {
	conn *pgx.Conn
}

// Listen opens a Listener.
func (rq *Requests) Listen(ctx context.Context) (*Listener, error) {
	pc, err := rq.db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", AdminChannel, err)
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, `LISTEN `+AdminChannel); err != nil {
		_ = conn.Close(context.WithoutCancel(ctx)) // the LISTEN's error is the one to return
		return nil, fmt.Errorf("listen on %s: %w", AdminChannel, err)
	}
	return &Listener{conn: conn}, nil
}

// Wait blocks until a notification arrives and returns its payload (the
// star). Any error, the context's included, leaves the Listener unusable:
// close it and open another.
func (l *Listener) Wait(ctx context.Context) (string, error) {
	n, err := l.conn.WaitForNotification(ctx)
	if err != nil {
		return "", fmt.Errorf("wait for %s notification: %w", AdminChannel, err)
	}
	return n.Payload, nil
}

// Close closes the Listener's connection.
func (l *Listener) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = l.conn.Close(ctx)
}

// DaemonState is a star's row of nova.auditor_state (zero when absent).
type DaemonState struct {
	Paused       bool
	PausedAt     *time.Time
	HaltedReason string // "" when not halted
	HaltedAt     *time.Time
}

// Halted reports whether the star is halted.
func (s DaemonState) Halted() bool { return s.HaltedReason != "" }

// DaemonState reads the star's persisted pause and halt.
func (lg *Ledger) DaemonState(ctx context.Context, star string) (DaemonState, error) {
	var s DaemonState
	var reason *string
	err := lg.db.reader(ctx).QueryRow(ctx, `SELECT paused, paused_at, halted_reason, halted_at FROM nova.auditor_state WHERE star = $1`, star).
		Scan(&s.Paused, &s.PausedAt, &reason, &s.HaltedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return DaemonState{}, nil
	}
	if err != nil {
		return s, fmt.Errorf("read state of star %q: %w", star, err)
	}
	if reason != nil {
		s.HaltedReason = *reason
	}
	return s, nil
}

// SetHalted persists a halt (fenced): no leader runs a cycle of the star
// until an operator resumes it. The first reason is kept.
func (lg *Ledger) SetHalted(ctx context.Context, f Fence, reason string) error {
	if reason == "" {
		reason = "halted"
	}
	return lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_state (star, halted_reason, halted_at) VALUES ($1, $2, now())
			ON CONFLICT (star) DO UPDATE SET halted_reason = coalesce(nova.auditor_state.halted_reason, EXCLUDED.halted_reason),
			halted_at = coalesce(nova.auditor_state.halted_at, EXCLUDED.halted_at)`, f.Star, reason); err != nil {
			return fmt.Errorf("halt star %q: %w", f.Star, err)
		}
		return nil
	})
}
