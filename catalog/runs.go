package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The run ledger (docs/metastore.md#novaauditor_runs): a row per cycle,
// opened fenced and closed even when the lease was lost, and the pruning
// of old history. A row's counters (RunCounts) are with the row types in
// types.go.

// Run outcomes (nova.auditor_runs.outcome).
const (
	RunOK        = "ok"
	RunFailed    = "failed"
	RunHalted    = "halted"
	RunCanceled  = "canceled"
	RunLostLease = "lost_lease"
)

// TriggerIdle is the trigger of a run row that records idle cycles
// (RecordIdleRun): scheduled cycles that found nothing to do and ran no
// step, from its started_at to its ended_at.
const TriggerIdle = "idle"

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
func (lg *Ledger) StartRun(ctx context.Context, f Fence, trigger string, dryRun bool) (Run, error) {
	var run Run
	err := lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
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
func (lg *Ledger) FinishRun(ctx context.Context, id int64, outcome string, c RunCounts, errText string) (Run, error) {
	var e *string
	if errText != "" {
		e = &errText
	}
	run, err := scanRun(lg.db.pool.QueryRow(ctx, `UPDATE nova.auditor_runs SET ended_at = now(), outcome = $2,
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
func (lg *Ledger) CloseAbandonedRuns(ctx context.Context, f Fence) (int64, error) {
	var n int64
	err := lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
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
func (lg *Ledger) LastRuns(ctx context.Context, star string, limit int) ([]Run, error) {
	rows, err := lg.db.reader(ctx).Query(ctx, `SELECT `+runCols+` FROM nova.auditor_runs WHERE star = $1
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

// Run reads one run (ErrNotFound when absent, pruned included).
func (lg *Ledger) Run(ctx context.Context, id int64) (Run, error) {
	run, err := scanRun(lg.db.reader(ctx).QueryRow(ctx, `SELECT `+runCols+` FROM nova.auditor_runs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return run, fmt.Errorf("run %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return run, fmt.Errorf("read run %d: %w", id, err)
	}
	return run, nil
}

// LastRunWithOutcome returns the star's latest run that ended with outcome
// (and was not a dry run); false when there is none. The first row of
// auditor_runs_outcome_idx: it runs every GaugeInterval on the leader and
// on every standby.
func (lg *Ledger) LastRunWithOutcome(ctx context.Context, star, outcome string) (Run, bool, error) {
	run, err := scanRun(lg.db.reader(ctx).QueryRow(ctx, `SELECT `+runCols+` FROM nova.auditor_runs
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
func (lg *Ledger) PruneHistory(ctx context.Context, f Fence, keep time.Duration, limit int) (HistoryPruned, error) {
	var p HistoryPruned
	err := lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var err error
		p, err = pruneHistory(ctx, tx, f.Star, keep, limit)
		return err
	})
	return p, err
}

// pruneHistory is PruneHistory within tx.
func pruneHistory(ctx context.Context, tx pgx.Tx, star string, keep time.Duration, limit int) (HistoryPruned, error) {
	var p HistoryPruned
	err := func() error {
		// id = ANY(ARRAY(...)): the outer delete probes the primary key
		// for each of at most limit ids (IN may become a hash join over
		// the whole table).
		tag, err := tx.Exec(ctx, `DELETE FROM nova.auditor_runs WHERE id = ANY(ARRAY(
			SELECT id FROM nova.auditor_runs WHERE star = $1 AND started_at < now() - $2::interval AND ended_at IS NOT NULL
			  AND id IS DISTINCT FROM (SELECT id FROM nova.auditor_runs WHERE star = $1 AND outcome = $4 AND NOT dry_run
				ORDER BY ended_at DESC, id DESC LIMIT 1)
			ORDER BY started_at LIMIT $3))`, star, keep, limit, RunOK)
		if err != nil {
			return fmt.Errorf("prune runs of star %q: %w", star, err)
		}
		p.Runs = tag.RowsAffected()
		tag, err = tx.Exec(ctx, `DELETE FROM nova.admin_requests WHERE id = ANY(ARRAY(
			SELECT id FROM nova.admin_requests WHERE star = $1 AND consumed_at IS NOT NULL AND consumed_at < now() - $2::interval
			ORDER BY consumed_at LIMIT $3))`, star, keep, limit)
		if err != nil {
			return fmt.Errorf("prune admin requests of star %q: %w", star, err)
		}
		p.Requests = tag.RowsAffected()
		return nil
	}()
	return p, err
}
