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
// requests and their NOTIFY channel, the persisted pause and halt, the run
// ledger, and the read-only queries behind `auditor status` and the gauges.

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
func (db *DB) RequestAdmin(ctx context.Context, star, kind string, stream *StreamID, by string) (AdminRequest, error) {
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
	err := db.tx(ctx, func(tx pgx.Tx) error {
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
func (db *DB) ConsumeAdminRequests(ctx context.Context, f Fence, kinds []string) ([]AdminRequest, error) {
	var out []AdminRequest
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
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
func (db *DB) FinishTriggers(ctx context.Context, f Fence, runID int64, results []TriggerResult) ([]AdminRequest, error) {
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
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
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
// returns then. They stay open until FinishTriggers.
func (db *DB) TakeTriggers(ctx context.Context, f Fence, ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
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
func (db *DB) NoteTriggerAttempt(ctx context.Context, f Fence, runID int64, ids []int64, why string) error {
	if len(ids) == 0 {
		return nil
	}
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
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
func (db *DB) ForcedProgress(ctx context.Context, star string, ids []StreamID) (map[StreamID]StreamProgress, error) {
	out := make(map[StreamID]StreamProgress, len(ids))
	rows, err := db.pool.Query(ctx, `SELECT s.stream_id, s.settled_through, s.next_record,
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
func (db *DB) AdminRequests(ctx context.Context, star string, openOnly bool, limit int) ([]AdminRequest, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+adminCols+` FROM nova.admin_requests
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

// GetAdminRequest reads one request (ErrNotFound when absent).
func (db *DB) GetAdminRequest(ctx context.Context, id int64) (AdminRequest, error) {
	a, err := scanAdmin(db.pool.QueryRow(ctx, `SELECT `+adminCols+` FROM nova.admin_requests WHERE id = $1`, id))
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
func (db *DB) Notify(ctx context.Context, star string) error {
	if _, err := db.pool.Exec(ctx, `SELECT pg_notify($1, $2)`, AdminChannel, star); err != nil {
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
func (db *DB) Listen(ctx context.Context) (*Listener, error) {
	pc, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", AdminChannel, err)
	}
	conn := pc.Hijack()
	if _, err := conn.Exec(ctx, `LISTEN `+AdminChannel); err != nil {
		conn.Close(context.WithoutCancel(ctx))
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

// GetDaemonState reads the star's persisted pause and halt.
func (db *DB) GetDaemonState(ctx context.Context, star string) (DaemonState, error) {
	var s DaemonState
	var reason *string
	err := db.pool.QueryRow(ctx, `SELECT paused, paused_at, halted_reason, halted_at FROM nova.auditor_state WHERE star = $1`, star).
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
func (db *DB) SetHalted(ctx context.Context, f Fence, reason string) error {
	if reason == "" {
		reason = "halted"
	}
	return db.fenced(ctx, f, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO nova.auditor_state (star, halted_reason, halted_at) VALUES ($1, $2, now())
			ON CONFLICT (star) DO UPDATE SET halted_reason = coalesce(nova.auditor_state.halted_reason, EXCLUDED.halted_reason),
			halted_at = coalesce(nova.auditor_state.halted_at, EXCLUDED.halted_at)`, f.Star, reason); err != nil {
			return fmt.Errorf("halt star %q: %w", f.Star, err)
		}
		return nil
	})
}

// Run outcomes (nova.auditor_runs.outcome).
const (
	RunOK        = "ok"
	RunFailed    = "failed"
	RunHalted    = "halted"
	RunCanceled  = "canceled"
	RunLostLease = "lost_lease"
)

// RunCounts are the counters of a run row.
type RunCounts struct {
	StreamsSettled     int64 `json:"streams_settled"`
	StreamsQuarantined int64 `json:"streams_quarantined"`
	ObjectsPublished   int64 `json:"objects_published"`
	ObjectsAdopted     int64 `json:"objects_adopted"`
	BytesCopied        int64 `json:"bytes_copied"`
	BytesFetched       int64 `json:"bytes_fetched"`
	BytesUploaded      int64 `json:"bytes_uploaded"`
	S3Requests         int64 `json:"s3_requests"`
	SlotsReaped        int64 `json:"slots_reaped"`
	ObjectsReaped      int64 `json:"objects_reaped"`
	ObjectsRewritten   int64 `json:"objects_rewritten"`
	RecordsTombstoned  int64 `json:"records_tombstoned"`
	ErasuresApplied    int64 `json:"erasures_applied"`
}

// Add accumulates o into c.
func (c *RunCounts) Add(o RunCounts) {
	c.StreamsSettled += o.StreamsSettled
	c.StreamsQuarantined += o.StreamsQuarantined
	c.ObjectsPublished += o.ObjectsPublished
	c.ObjectsAdopted += o.ObjectsAdopted
	c.BytesCopied += o.BytesCopied
	c.BytesFetched += o.BytesFetched
	c.BytesUploaded += o.BytesUploaded
	c.S3Requests += o.S3Requests
	c.SlotsReaped += o.SlotsReaped
	c.ObjectsReaped += o.ObjectsReaped
	c.ObjectsRewritten += o.ObjectsRewritten
	c.RecordsTombstoned += o.RecordsTombstoned
	c.ErasuresApplied += o.ErasuresApplied
}

// Run is a row of nova.auditor_runs.
type Run struct {
	ID        int64
	Star      string
	Holder    string
	Token     int64
	Trigger   string
	DryRun    bool
	StartedAt time.Time
	EndedAt   *time.Time // nil while running (or abandoned by a crash)
	Outcome   string     // "" while running
	Counts    RunCounts
	Error     string
}

const runCols = `id, star, holder, token, trigger, dry_run, started_at, ended_at, coalesce(outcome, ''),
	streams_settled, streams_quarantined, objects_published, objects_adopted, bytes_copied, bytes_fetched,
	bytes_uploaded, s3_requests, slots_reaped, objects_reaped, coalesce(error, ''),
	objects_rewritten, records_tombstoned, erasures_applied`

func scanRun(r pgx.Row) (Run, error) {
	var x Run
	c := &x.Counts
	err := r.Scan(&x.ID, &x.Star, &x.Holder, &x.Token, &x.Trigger, &x.DryRun, &x.StartedAt, &x.EndedAt, &x.Outcome,
		&c.StreamsSettled, &c.StreamsQuarantined, &c.ObjectsPublished, &c.ObjectsAdopted, &c.BytesCopied, &c.BytesFetched,
		&c.BytesUploaded, &c.S3Requests, &c.SlotsReaped, &c.ObjectsReaped, &x.Error,
		&c.ObjectsRewritten, &c.RecordsTombstoned, &c.ErasuresApplied)
	return x, err
}

// StartRun opens a run row (fenced): a cycle starts only under a live lease.
func (db *DB) StartRun(ctx context.Context, f Fence, trigger string, dryRun bool) (Run, error) {
	var run Run
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		var err error
		run, err = scanRun(tx.QueryRow(ctx, `INSERT INTO nova.auditor_runs (star, holder, token, trigger, dry_run)
			VALUES ($1, $2, $3, $4, $5) RETURNING `+runCols, f.Star, f.Holder, f.Token, trigger, dryRun))
		if err != nil {
			return fmt.Errorf("start run of star %q: %w", f.Star, err)
		}
		return nil
	})
	return run, err
}

// FinishRun closes a run row with its outcome, counts and error. It is not
// fenced: a cycle that lost its lease still records that it did. A row
// already closed (by a successor's CloseAbandonedRuns) is left alone.
func (db *DB) FinishRun(ctx context.Context, id int64, outcome string, c RunCounts, errText string) (Run, error) {
	var e *string
	if errText != "" {
		e = &errText
	}
	run, err := scanRun(db.pool.QueryRow(ctx, `UPDATE nova.auditor_runs SET ended_at = now(), outcome = $2,
		streams_settled = $3, streams_quarantined = $4, objects_published = $5, objects_adopted = $6, bytes_copied = $7,
		bytes_fetched = $8, bytes_uploaded = $9, s3_requests = $10, slots_reaped = $11, objects_reaped = $12, error = $13,
		objects_rewritten = $14, records_tombstoned = $15, erasures_applied = $16
		WHERE id = $1 AND ended_at IS NULL RETURNING `+runCols, id, outcome,
		c.StreamsSettled, c.StreamsQuarantined, c.ObjectsPublished, c.ObjectsAdopted, c.BytesCopied, c.BytesFetched,
		c.BytesUploaded, c.S3Requests, c.SlotsReaped, c.ObjectsReaped, e, c.ObjectsRewritten, c.RecordsTombstoned, c.ErasuresApplied))
	if errors.Is(err, pgx.ErrNoRows) {
		return run, fmt.Errorf("finish run %d: %w (already closed)", id, ErrNotFound)
	}
	if err != nil {
		return run, fmt.Errorf("finish run %d: %w", id, err)
	}
	return run, nil
}

// CloseAbandonedRuns closes the star's run rows left open by earlier
// holders (a crash or a lost lease), as lost_lease; fenced, so only the
// current leader does it. It returns how many it closed. The open runs
// are the partial index auditor_runs_open_idx, so it reads only them.
func (db *DB) CloseAbandonedRuns(ctx context.Context, f Fence) (int64, error) {
	var n int64
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE nova.auditor_runs SET ended_at = now(), outcome = $3,
			error = coalesce(error, 'abandoned: its holder lost the lease before finishing')
			WHERE star = $1 AND ended_at IS NULL AND token < $2`, f.Star, f.Token, RunLostLease)
		if err != nil {
			return fmt.Errorf("close abandoned runs of star %q: %w", f.Star, err)
		}
		n = tag.RowsAffected()
		return nil
	})
	return n, err
}

// LastRuns lists the star's latest runs, newest first.
func (db *DB) LastRuns(ctx context.Context, star string, limit int) ([]Run, error) {
	rows, err := db.pool.Query(ctx, `SELECT `+runCols+` FROM nova.auditor_runs WHERE star = $1
		ORDER BY started_at DESC, id DESC LIMIT $2`, star, limit)
	if err != nil {
		return nil, fmt.Errorf("list runs of star %q: %w", star, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Run, error) { return scanRun(r) })
	if err != nil {
		return nil, fmt.Errorf("list runs of star %q: %w", star, err)
	}
	return out, nil
}

// LastRunWithOutcome returns the star's latest run that ended with outcome
// (and was not a dry run); false when there is none. The first row of
// auditor_runs_outcome_idx: it runs every GaugeInterval on the leader and
// on every standby.
func (db *DB) LastRunWithOutcome(ctx context.Context, star, outcome string) (Run, bool, error) {
	run, err := scanRun(db.pool.QueryRow(ctx, `SELECT `+runCols+` FROM nova.auditor_runs
		WHERE star = $1 AND outcome = $2 AND NOT dry_run ORDER BY ended_at DESC, id DESC LIMIT 1`, star, outcome))
	if errors.Is(err, pgx.ErrNoRows) {
		return run, false, nil
	}
	if err != nil {
		return run, false, fmt.Errorf("last %s run of star %q: %w", outcome, star, err)
	}
	return run, true, nil
}

// HistoryPruned counts what PruneHistory deleted.
type HistoryPruned struct {
	Runs, Requests int64
}

// PruneHistory deletes, in one fenced transaction, up to limit run rows
// and up to limit admin requests of the star older than keep (database
// clock): finished runs that started before now() - keep, except the
// latest successful one (the last-success gauge reads it), and requests
// consumed before now() - keep. An open run or an unconsumed request is
// never deleted. Both deletes are index ranges below the cut, so the
// statement costs what it deletes, not the history's length.
func (db *DB) PruneHistory(ctx context.Context, f Fence, keep time.Duration, limit int) (HistoryPruned, error) {
	var p HistoryPruned
	err := db.fenced(ctx, f, func(tx pgx.Tx) error {
		// id = ANY(ARRAY(...)): the outer delete probes the primary key
		// for each of at most limit ids (IN may become a hash join over
		// the whole table).
		tag, err := tx.Exec(ctx, `DELETE FROM nova.auditor_runs WHERE id = ANY(ARRAY(
			SELECT id FROM nova.auditor_runs WHERE star = $1 AND started_at < now() - $2::interval AND ended_at IS NOT NULL
			  AND id IS DISTINCT FROM (SELECT id FROM nova.auditor_runs WHERE star = $1 AND outcome = $4 AND NOT dry_run
				ORDER BY ended_at DESC, id DESC LIMIT 1)
			ORDER BY started_at LIMIT $3))`, f.Star, keep, limit, RunOK)
		if err != nil {
			return fmt.Errorf("prune runs of star %q: %w", f.Star, err)
		}
		p.Runs = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM nova.admin_requests WHERE id = ANY(ARRAY(
			SELECT id FROM nova.admin_requests WHERE star = $1 AND consumed_at IS NOT NULL AND consumed_at < now() - $2::interval
			ORDER BY consumed_at LIMIT $3))`, f.Star, keep, limit)
		if err != nil {
			return fmt.Errorf("prune admin requests of star %q: %w", f.Star, err)
		}
		p.Requests = tag.RowsAffected()
		return nil
	})
	return p, err
}

// ClassTransit summarises a class's unsettled data by the database clock.
// Quarantined streams count in Markers, OldestAge and OverAgeCap (their data
// is still in transit) but not in Due or Lag (settling skips them).
type ClassTransit struct {
	Class       string
	Markers     int64         // streams with unsettled refs
	Due         int64         // of them, past linger and not quarantined
	OverAgeCap  int64         // of them, older than the age cap
	OldestSince *time.Time    // the oldest unsettled ref's absorb time
	OldestAge   time.Duration // now() - OldestSince
	Lag         time.Duration // the most overdue stream's time past linger (0: none due)
}

// TransitByClass summarises both classes (always both, in the order
// standard, express) and returns the database clock it used.
func (db *DB) TransitByClass(ctx context.Context, star string, p DuePolicy) (time.Time, []ClassTransit, error) {
	rows, err := db.pool.Query(ctx, `
		WITH m AS (
			SELECT d.class, d.since,
			       CASE WHEN d.class = 'express' THEN $2::interval ELSE $4::interval END AS linger,
			       CASE WHEN d.class = 'express' THEN $3::interval ELSE $5::interval END AS cap,
			       EXISTS (SELECT 1 FROM nova.quarantine q WHERE q.stream_id = d.stream_id) AS held
			FROM nova.due_markers d JOIN nova.streams s USING (stream_id) WHERE s.star = $1)
		SELECT c.class, count(m.since),
		       count(*) FILTER (WHERE NOT m.held AND now() >= m.since + m.linger),
		       count(*) FILTER (WHERE now() > m.since + m.cap),
		       min(m.since),
		       coalesce(extract(epoch FROM now() - min(m.since)), 0)::float8,
		       coalesce(extract(epoch FROM max(now() - m.since - m.linger) FILTER (WHERE NOT m.held AND now() >= m.since + m.linger)), 0)::float8,
		       now()
		FROM unnest(ARRAY['standard', 'express']) WITH ORDINALITY AS c(class, ord)
		LEFT JOIN m ON m.class = c.class
		GROUP BY c.class, c.ord ORDER BY c.ord`, star, p.ExpressLinger, p.ExpressAgeCap, p.Linger, p.AgeCap)
	if err != nil {
		return time.Time{}, nil, fmt.Errorf("summarise transit of star %q: %w", star, err)
	}
	var now time.Time
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ClassTransit, error) {
		var c ClassTransit
		var age, lag float64
		err := r.Scan(&c.Class, &c.Markers, &c.Due, &c.OverAgeCap, &c.OldestSince, &age, &lag, &now)
		c.OldestAge = time.Duration(age * float64(time.Second))
		c.Lag = time.Duration(lag * float64(time.Second))
		return c, err
	})
	if err != nil {
		return now, nil, fmt.Errorf("summarise transit of star %q: %w", star, err)
	}
	return now, out, nil
}

// Backlog counts the open intents and the quarantine (package trim counts
// the reap backlog in slots and objects).
type Backlog struct {
	PublishIntents int64      // open publishes (resumed by the next recover)
	OldestPublish  *time.Time // created_at of the oldest
	ReapIntents    int64      // armed object reaps
	Quarantined    int64      // quarantine rows (streams and slots)
}

// GetBacklog counts the star's open intents and quarantine.
func (db *DB) GetBacklog(ctx context.Context, star string) (Backlog, error) {
	var b Backlog
	err := db.pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM nova.orphan_intents WHERE star = $1 AND kind = 'publish'),
		(SELECT min(created_at) FROM nova.orphan_intents WHERE star = $1 AND kind = 'publish'),
		(SELECT count(*) FROM nova.orphan_intents WHERE star = $1 AND kind = 'reap'),
		(SELECT count(*) FROM nova.quarantine WHERE star = $1)`, star).
		Scan(&b.PublishIntents, &b.OldestPublish, &b.ReapIntents, &b.Quarantined)
	if err != nil {
		return b, fmt.Errorf("count backlog of star %q: %w", star, err)
	}
	return b, nil
}
