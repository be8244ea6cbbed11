package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/cli"
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
}

// cmdErase is `auditor erase`: it records an erasure of --count records of
// --stream from --from (docs/architecture.md#erasure). The erasure needs
// no lease and no trigger: the next cycle's erasure step applies it. Bad
// input (an unknown stream, a stream of another star, an empty range, a
// range past the stream's next_record, another range at the same first
// record) exits 2 and records nothing; the same range again is a no-op.
func cmdErase(ctx context.Context, e env, args []string) int {
	var (
		fs          *flag.FlagSet
		from, count *int64
		asJSON      *bool
	)
	cfg, db, stream, code := adminSetup(ctx, e, "erase", args, func(f *cli.Flags) {
		fs = f.FlagSet
		f.String("stream", "", "the stream (uuid or 32 hex digits) whose records are erased")
		from = f.Int64("from", 0, "the first record erased")
		count = f.Int64("count", 0, "how many records are erased, from --from")
		asJSON = f.Bool("json", false, "print the erasure as JSON")
	})
	if code >= 0 {
		return code
	}
	defer db.Close()
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case stream == nil:
		return exitCode(e, cfg, &config.Error{Field: "stream", Msg: "is required: the stream whose records are erased"})
	case !set["from"]:
		return exitCode(e, cfg, &config.Error{Field: "from", Msg: "is required: the first record erased"})
	case !set["count"]:
		return exitCode(e, cfg, &config.Error{Field: "count", Msg: "is required: how many records are erased"})
	}
	st, err := db.GetStream(ctx, *stream)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	rep, err := recordErasure(ctx, db, st, *from, *count)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	rep.Star = cfg.Star
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return exitCode(e, cfg, err)
		}
	} else {
		writeErasure(e, rep)
	}
	for _, w := range rep.Warnings {
		fmt.Fprintf(e.stderr, "auditor: warning: %s\n", w)
	}
	return exitOK
}

// erasureRecorder is what recordErasure reads and writes in the metastore.
type erasureRecorder interface {
	ErasuresOf(ctx context.Context, id catalog.StreamID, from, to int64) ([]catalog.Erasure, error)
	RecordErasure(ctx context.Context, id catalog.StreamID, first, count int64) (catalog.Erasure, error)
	Quarantined(ctx context.Context, star string) ([]catalog.QuarantineRow, error)
}

// recordErasure validates [from, from+count) against the stream and
// records it. Its refusals are configuration errors (exit 2) naming the
// flag.
func recordErasure(ctx context.Context, db erasureRecorder, st catalog.Stream, from, count int64) (ErasureReport, error) {
	id := st.ID.String()
	rep := ErasureReport{Stream: id, FirstRecord: from, RecordCount: count, Warnings: []string{}}
	if why := (catalog.Erasure{Stream: st.ID, FirstRecord: from, RecordCount: count}).Valid(); why != "" {
		field := "count"
		if from < 0 {
			field = "from"
		}
		return rep, &config.Error{Field: field, Msg: "not an erasure: " + why}
	}
	end := from + count
	if end > st.NextRecord {
		return rep, &config.Error{Field: "count", Msg: fmt.Sprintf(
			"records [%d, %d) reach past stream %s's next_record %d: records at or past %d do not exist yet, so nothing can erase them (erase them once they are written)",
			from, end, id, st.NextRecord, st.NextRecord)}
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
	rep.EndRecord = got.EndRecord()
	rep.RequestedAt, rep.AppliedAt = got.RequestedAt, got.AppliedAt
	rep.State = "pending"
	if got.Applied {
		rep.State = "applied"
	}
	q, err := db.Quarantined(ctx, st.Star)
	if err != nil {
		return rep, err
	}
	for _, r := range q {
		if r.Stream != nil && *r.Stream == st.ID {
			rep.Quarantined = true
		}
	}
	if rep.Quarantined && !got.Applied {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf(
			"stream %s is quarantined: no rewrite runs on it, so the erasure stays pending until auditor release --stream %s", id, id))
	}
	if from < st.LowRecord {
		rep.Warnings = append(rep.Warnings, fmt.Sprintf(
			"records below %d are already retired by retention (low_record); the erasure is applied once no object holds them", st.LowRecord))
	}
	return rep, nil
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
	fmt.Fprintln(e.stdout, "the next cycle's erasure step applies it (no trigger needed; auditor status shows the pending erasures)")
}
