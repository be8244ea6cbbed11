package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// An idle cycle (docs/architecture.md#idle-cycles): before a scheduled
// cycle the daemon reads, in one read-only snapshot, whether any step has
// work; when none has, the cycle is not run, and the ledger records idle
// cycles one row per many (RecordIdleRun).

// IdleState is what decides that a star's cycle has nothing to do.
type IdleState struct {
	// Work names what a step has to do ("" when nothing): due streams,
	// publish intents, object reaps, slot reaps, retention, erasures, a
	// stray sweep or the cohort turn. Trim is decided by package trim from Trim.
	Work string
	Trim TrimState // Trim.Now is the database clock
}

// idleWorkSQL names the first work a step of star $1 has under the due
// policy $2-$8 (dueMarkersSQL) and the stray sweep's interval $9 (0: no
// scheduled sweep), NULL when none: the conditions on which settle (its
// recovery, the cohort turn and DueStreams), retention, the erase step,
// the strays step (StraySweepDue) and reap act, each one probe of an index.
const idleWorkSQL = `
	SELECT CASE
	  WHEN EXISTS (SELECT 1 FROM nova.orphan_intents WHERE star = $1 AND kind = 'publish') THEN 'publish intents'
	  WHEN EXISTS (SELECT 1 FROM nova.orphan_intents WHERE star = $1 AND kind = 'reap' AND reap_after <= now()) THEN 'object reaps'
	  WHEN EXISTS (SELECT 1 FROM nova.slot_reaps WHERE star = $1 AND reap_after <= now()) THEN 'slot reaps'
	  WHEN EXISTS (SELECT 1 FROM nova.streams WHERE star = $1 AND low_record > retained_through) THEN 'retention'
	  WHEN EXISTS (SELECT 1 FROM nova.streams s JOIN nova.erasures e USING (stream_id)
	               WHERE s.star = $1 AND e.applied_at IS NULL) THEN 'erasures'
	  WHEN EXISTS (SELECT 1 FROM (` + dueMarkersSQL + `) m
	               WHERE NOT m.held AND now() >= m.since + m.linger AND now() >= m.due_at) THEN 'due streams'
	  WHEN $9::interval > interval '0' AND NOT EXISTS (SELECT 1 FROM nova.auditor_state a WHERE a.star = $1
	                       AND a.strays_swept_at > now() - $9::interval) THEN 'strays'
	  WHEN $8::int > 1 AND EXISTS (SELECT 1 FROM nova.due_markers d JOIN nova.streams s USING (stream_id) WHERE s.star = $1)
	       AND NOT EXISTS (SELECT 1 FROM nova.auditor_state a WHERE a.star = $1
	                       AND a.cohort_turn_at IS NOT NULL AND now() < a.cohort_turn_at + $4::interval) THEN 'cohort turn'
	  END`

// IdleState reads in one read-only snapshot (one transaction) what
// decides whether a cycle of star has work under policy p, its strays
// swept every strayEvery (0: never on a schedule).
func (t *Trim) IdleState(ctx context.Context, star string, p DuePolicy, strayEvery time.Duration) (IdleState, error) {
	var st IdleState
	var work *string
	b := &pgx.Batch{}
	queueTrimState(b, star, &st.Trim)
	b.Queue(idleWorkSQL, append(duePolicyArgs(star, p), max(strayEvery, 0))...).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&work); err != nil {
			return fmt.Errorf("read the work of star %q: %w", star, err)
		}
		return nil
	})
	// One round trip for the seven reads, in one snapshot.
	err := t.db.readTx(ctx, func(tx pgx.Tx) error { return tx.SendBatch(ctx, b).Close() })
	if err != nil {
		return IdleState{}, err
	}
	if work != nil {
		st.Work = *work
	}
	return st, nil
}

// RecordIdleRun records idle cycles of star in the run ledger as one
// run, fenced: trigger idle, outcome ok, from since (the first of them)
// to now; and, in the same transaction, prunes the ledger and the admin
// requests as a cycle does (PruneHistory; keep 0 prunes nothing).
func (lg *Ledger) RecordIdleRun(ctx context.Context, f Fence, since time.Time, keep time.Duration, limit int) (Run, error) {
	var run Run
	err := lg.db.fenced(ctx, f, func(tx pgx.Tx) error {
		var err error
		run, err = scanRun(tx.QueryRow(ctx, `INSERT INTO nova.auditor_runs (star, holder, token, trigger, started_at, ended_at, outcome)
			VALUES ($1, $2, $3, $4, least($5::timestamptz, now()), now(), $6) RETURNING `+runCols, f.Star, f.Holder, f.Token, TriggerIdle, since, RunOK))
		if err != nil {
			return fmt.Errorf("record idle cycles of star %q: %w", f.Star, err)
		}
		if keep > 0 {
			if _, err := pruneHistory(ctx, tx, f.Star, keep, limit); err != nil {
				return err
			}
		}
		return nil
	})
	return run, err
}
