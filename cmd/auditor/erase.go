package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/config"
)

// ErasureReport is what `auditor erase --json` prints: the erasure as the
// metastore holds it after the command.
type ErasureReport struct {
	Star        string     `json:"star"`
	Stream      string     `json:"stream"`
	FirstRecord int64      `json:"first_record"`
	RecordCount int64      `json:"record_count"`
	EndRecord   int64      `json:"end_record"` // one past the last erased record
	RequestedAt time.Time  `json:"requested_at"`
	AppliedAt   *time.Time `json:"applied_at,omitempty"`
	State       string     `json:"state"`   // pending, applied
	Already     bool       `json:"already"` // the same range was recorded before
	Quarantined bool       `json:"quarantined"`
	Warnings    []string   `json:"warnings"`
	// DryRun: nothing was recorded; Rewrites and Unsettled say what the
	// erasure would change (state "not_recorded" when it is new).
	DryRun    bool             `json:"dry_run,omitempty"`
	Rewrites  []ErasureRewrite `json:"rewrites,omitempty"`
	Unsettled *RecordRange     `json:"unsettled,omitempty"`
}

// ErasureRewrite is a catalog entry whose object holds records of the
// erasure: the erase step rewrites it at a higher revision with those
// records as tombstones (unless it reads them as tombstones already).
type ErasureRewrite struct {
	Key         string      `json:"key"`
	Bucket      string      `json:"bucket"` // the stream's key prefix bucket (streams.bucket)
	Class       string      `json:"class"`
	Revision    int32       `json:"revision"`
	FirstRecord int64       `json:"first_record"`
	RecordCount int64       `json:"record_count"`
	ObjectBytes int64       `json:"object_bytes"`
	Erased      RecordRange `json:"erased"` // the records of the erasure it holds
}

// RecordRange is the records [from, to).
type RecordRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

// cmdErase is `auditor erase`: it records an erasure of --count records of
// --stream from --from (docs/architecture.md#erasure). The erasure needs
// no lease and no trigger: the next cycle's erasure step applies it. Bad
// input (an unknown stream, a stream of another star, an empty range, a
// range past the stream's next_record, another range at the same first
// record) exits 2 and records nothing; the same range again is a no-op.
// --dry-run records nothing and prints what the erasure would rewrite
// (planErasure); --wait waits until it is applied (waitErasure).
func cmdErase(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	fs.String("stream", "", "the stream `ID` (uuid or 32 hex digits) whose records are erased")
	from := fs.Int64("from", 0, "the first `RECORD` erased")
	count := fs.Int64("count", 0, "erase `N` records, from --from")
	asJSON := fs.Bool("json", false, "print the erasure as JSON")
	dryRun := fs.Bool("dry-run", false, "record nothing: print the objects (keys, revisions, record ranges) and records the erasure would rewrite")
	wait := fs.Bool("wait", false, "after recording, wait until the erasure is applied (erasures.applied_at: no settled object holds the records any more; cycles after the rewrite reap the old revisions past reap-grace, then mark it applied): exit 0 then, 7 past --timeout")
	timeout := fs.Duration("timeout", 0, "with --wait: wait at most this long (0: no bound)")
	return withAdmin(e, fs, func(a *adminCtx) int {
		set := map[string]bool{"from": fs.Given("from"), "count": fs.Given("count")}
		switch {
		case a.stream == nil:
			return a.refuse("stream", "is required: the stream whose records are erased")
		case !set["from"]:
			return a.refuse("from", "is required: the first record erased")
		case !set["count"]:
			return a.refuse("count", "is required: how many records are erased")
		case *dryRun && *wait:
			return a.refuse("wait", "waits for an erasure recorded: use it without --dry-run")
		case *timeout < 0:
			return a.refuse("timeout", fmt.Sprintf("%s: must be at least 0", *timeout))
		}
		st, err := a.db.Streams().Stream(a.ctx, *a.stream)
		if err != nil {
			return a.fail(err)
		}
		if *dryRun {
			rep, err := planErasure(a.ctx, a.db.Erasures(), st, *from, *count)
			if err != nil {
				return a.fail(err)
			}
			rep.Star = a.cfg.Star
			return printErasure(e, a.cfg, rep, *asJSON, writeErasurePlan)
		}
		rep, err := recordErasure(a.ctx, a.db.Erasures(), st, *from, *count)
		if err != nil {
			return a.fail(err)
		}
		rep.Star = a.cfg.Star
		if !*wait || rep.State == "applied" {
			return printErasure(e, a.cfg, rep, *asJSON, writeErasure)
		}
		if !*asJSON {
			printErasure(e, a.cfg, rep, false, writeErasure)
		}
		code, err := waitErasure(a.ctx, e, a.db.Erasures(), st.ID, &rep, *timeout, *asJSON)
		if err != nil {
			return a.fail(fmt.Errorf("wait for the erasure: %w", err))
		}
		if *asJSON {
			return max(code, printErasure(e, a.cfg, rep, true, nil))
		}
		return code
	})
}

// printErasure prints the report as JSON, or with text, then its
// warnings on stderr.
func printErasure(e env, cfg config.Config, rep ErasureReport, asJSON bool, text func(env, ErasureReport)) int {
	if asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitCode(e, cfg, err)
		}
	} else {
		text(e, rep)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(e.stderr, "auditor: warning: %s\n", w)
	}
	return exitOK
}

// erasureRecorder is what recordErasure reads and writes in the metastore.
type erasureRecorder interface {
	erasureReader
	RecordErasure(ctx context.Context, id catalog.StreamID, first, count int64) (catalog.Erasure, error)
}

// erasureReader is what planErasure reads of the metastore.
type erasureReader interface {
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
	EntriesIntersecting(ctx context.Context, id catalog.StreamID, epoch, from, to int64) ([]catalog.Entry, error)
	Quarantined(ctx context.Context, star string) ([]catalog.QuarantineRow, error)
}

// checkErasure refuses [from, from+count) of the stream as a
// configuration error (exit 2) naming the flag: not a range, or reaching
// past the stream's next_record.
func checkErasure(st catalog.Stream, from, count int64) error {
	if why := (catalog.Erasure{Stream: st.ID, FirstRecord: from, RecordCount: count}).Valid(); why != "" {
		field := "count"
		if from < 0 {
			field = "from"
		}
		return &config.Error{Field: field, Msg: "not an erasure: " + why}
	}
	if end := from + count; end > st.NextRecord {
		return &config.Error{Field: "count", Msg: fmt.Sprintf(
			"records [%d, %d) reach past stream %s's next_record %d: records at or past %d do not exist yet, so nothing can erase them (erase them once they are written)",
			from, end, st.ID.String(), st.NextRecord, st.NextRecord)}
	}
	return nil
}

// recordErasure validates [from, from+count) against the stream and
// records it. Its refusals are configuration errors (exit 2) naming the
// flag.
func recordErasure(ctx context.Context, db erasureRecorder, st catalog.Stream, from, count int64) (ErasureReport, error) {
	rep := ErasureReport{Stream: st.ID.String(), FirstRecord: from, RecordCount: count, Warnings: []string{}}
	if err := checkErasure(st, from, count); err != nil {
		return rep, err
	}
	before, err := db.ErasuresOf(ctx, st.ID, from, from+1)
	if err != nil {
		return rep, err
	}
	got, err := db.RecordErasure(ctx, st.ID, from, count)
	if errors.Is(err, catalog.ErrBadErasure) {
		return rep, &config.Error{Field: "count", Msg: err.Error()}
	}
	if errors.Is(err, catalog.ErrNotFound) {
		return rep, &config.Error{Field: "stream", Msg: err.Error()}
	}
	if err != nil {
		return rep, err
	}
	for _, b := range before {
		if b.FirstRecord == from && b.RecordCount == count {
			rep.Already = true
		}
	}
	rep.setRow(got)
	return rep, rep.warn(ctx, db, st)
}

// planErasure is erase --dry-run: what recording [from, from+count) would
// change, read from the catalog and changing nothing. The erase step
// rewrites each entry holding settled records of it (it reads the object
// first: one holding them as tombstones already is left as it is); the
// records not settled yet are written as tombstones when settled.
func planErasure(ctx context.Context, db erasureReader, st catalog.Stream, from, count int64) (ErasureReport, error) {
	rep := ErasureReport{Stream: st.ID.String(), FirstRecord: from, RecordCount: count, EndRecord: from + count,
		State: "not_recorded", DryRun: true, Warnings: []string{}, Rewrites: []ErasureRewrite{}}
	if err := checkErasure(st, from, count); err != nil {
		return rep, err
	}
	before, err := db.ErasuresOf(ctx, st.ID, from, from+1)
	if err != nil {
		return rep, err
	}
	for _, b := range before {
		switch {
		case b.FirstRecord != from:
		case b.RecordCount != count:
			// What RecordErasure would refuse.
			return rep, &config.Error{Field: "count", Msg: fmt.Sprintf("%v: stream %s already has an erasure at record %d of %d records (requested %s)",
				catalog.ErrBadErasure, rep.Stream, from, b.RecordCount, b.RequestedAt.UTC().Format(time.RFC3339))}
		default:
			rep.Already = true
			rep.setRow(b)
		}
	}
	if rep.State == "applied" {
		return rep, rep.warn(ctx, db, st)
	}
	end := rep.EndRecord
	if settled := min(end, st.SettledThrough); from < settled {
		ens, err := db.EntriesIntersecting(ctx, st.ID, st.Epoch, from, settled)
		if err != nil {
			return rep, err
		}
		for _, en := range ens {
			rep.Rewrites = append(rep.Rewrites, ErasureRewrite{Key: bundle.EntryKey(st.Bucket, en), Bucket: st.Bucket, Class: en.Class,
				Revision: en.Revision, FirstRecord: en.FirstRecord, RecordCount: en.RecordCount, ObjectBytes: en.ObjectBytes,
				Erased: RecordRange{From: max(from, en.FirstRecord), To: min(end, en.EndRecord())}})
		}
	}
	if end > st.SettledThrough {
		rep.Unsettled = &RecordRange{From: max(from, st.SettledThrough), To: end}
	}
	return rep, rep.warn(ctx, db, st)
}

// setRow takes the erasure's row as the metastore holds it.
func (r *ErasureReport) setRow(got catalog.Erasure) {
	r.EndRecord = got.EndRecord()
	r.RequestedAt, r.AppliedAt = got.RequestedAt, got.AppliedAt
	r.State = "pending"
	if got.Applied {
		r.State = "applied"
	}
}

// warn adds what holds the erasure back: a quarantined stream, records
// retention already retired.
func (r *ErasureReport) warn(ctx context.Context, db erasureReader, st catalog.Stream) error {
	q, err := db.Quarantined(ctx, st.Star)
	if err != nil {
		return err
	}
	for _, row := range q {
		if row.Stream != nil && *row.Stream == st.ID {
			r.Quarantined = true
		}
	}
	id := st.ID.String()
	if r.Quarantined && r.State != "applied" {
		r.Warnings = append(r.Warnings, fmt.Sprintf(
			"stream %s is quarantined: no rewrite runs on it, so the erasure stays pending until auditor release --stream %s", id, id))
	}
	if r.FirstRecord < st.LowRecord {
		r.Warnings = append(r.Warnings, fmt.Sprintf(
			"records below %d are already retired by retention (low_record); the erasure is applied once no object holds them", st.LowRecord))
	}
	return nil
}

// writeErasurePlan prints erase --dry-run's report.
func writeErasurePlan(e env, r ErasureReport) {
	what := fmt.Sprintf("dry run: erasure of records [%d, %d) of stream %s (star %s)", r.FirstRecord, r.EndRecord, r.Stream, r.Star)
	switch r.State {
	case "applied":
		fmt.Fprintf(e.stdout, "%s: already recorded and applied at %s; nothing to rewrite\n", what, r.AppliedAt.UTC().Format(time.RFC3339))
		return
	case "pending":
		fmt.Fprintf(e.stdout, "%s: already recorded at %s; pending\n", what, r.RequestedAt.UTC().Format(time.RFC3339))
	default:
		fmt.Fprintf(e.stdout, "%s: not recorded; nothing was changed\n", what)
	}
	if len(r.Rewrites) == 0 {
		fmt.Fprintln(e.stdout, "no settled object holds its records")
	} else {
		fmt.Fprintf(e.stdout, "%d objects rewritten at a higher revision, their records of the erasure as tombstones (one already holding tombstones there is left as it is):\n", len(r.Rewrites))
		fmt.Fprintf(e.stdout, "  %-8s %-22s %-22s %12s  %s\n", "REVISION", "RECORDS", "ERASED", "BYTES", "KEY (CLASS)")
		for _, w := range r.Rewrites {
			fmt.Fprintf(e.stdout, "  %-8d %-22s %-22s %12d  %s (%s)\n", w.Revision,
				fmt.Sprintf("[%d, %d)", w.FirstRecord, w.FirstRecord+w.RecordCount), fmt.Sprintf("[%d, %d)", w.Erased.From, w.Erased.To),
				w.ObjectBytes, w.Key, w.Class)
		}
	}
	if u := r.Unsettled; u != nil {
		fmt.Fprintf(e.stdout, "records [%d, %d) are not settled yet: settle writes them as tombstones\n", u.From, u.To)
	}
}

// erasureWaiter is what waitErasure reads of the metastore.
type erasureWaiter interface {
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
}

// waitErasure is erase --wait: it polls the erasure's row until
// applied_at is set (exit 0, rep updated), or the timeout (exit 7; 5 when
// the database stopped answering until then). quiet: no line on stdout
// (--json prints the report after).
func waitErasure(ctx context.Context, e env, db erasureWaiter, id catalog.StreamID, rep *ErasureReport, timeout time.Duration, quiet bool) (int, error) {
	start := time.Now()
	err := poll(ctx, timeout, func(ctx context.Context) (bool, error) {
		es, err := db.ErasuresOf(ctx, id, rep.FirstRecord, rep.FirstRecord+1)
		if err != nil {
			return false, err
		}
		for _, x := range es {
			if x.FirstRecord == rep.FirstRecord && x.Applied {
				rep.setRow(x)
				return true, nil
			}
		}
		return false, nil
	})
	switch {
	case errors.Is(err, errWaitTimeout):
		fmt.Fprintf(e.stderr, "auditor: erasure of records [%d, %d) of stream %s not applied within %s; it stays recorded (auditor status shows what it waits for)\n",
			rep.FirstRecord, rep.EndRecord, rep.Stream, timeout)
		return exitTimeout, nil
	case err != nil:
		return exitFailure, err
	}
	if !quiet {
		fmt.Fprintf(e.stdout, "applied at %s, %s after the wait began\n", rep.AppliedAt.UTC().Format(time.RFC3339), time.Since(start).Round(time.Millisecond))
	}
	return exitOK, nil
}

func writeErasure(e env, r ErasureReport) {
	what := fmt.Sprintf("erasure of records [%d, %d) of stream %s (star %s)", r.FirstRecord, r.EndRecord, r.Stream, r.Star)
	at := r.RequestedAt.UTC().Format(time.RFC3339)
	switch {
	case r.State == "applied":
		fmt.Fprintf(e.stdout, "%s: already recorded at %s and applied at %s\n", what, at, r.AppliedAt.UTC().Format(time.RFC3339))
		return
	case r.Already:
		fmt.Fprintf(e.stdout, "%s: already recorded at %s; pending\n", what, at)
	default:
		fmt.Fprintf(e.stdout, "%s recorded at %s; pending\n", what, at)
	}
	fmt.Fprintln(e.stdout, "the next cycle's erasure step rewrites its objects; it is applied at a cycle once their old revisions are reaped, past reap-grace (no trigger needed; auditor status shows the pending erasures and what each waits for)")
}
