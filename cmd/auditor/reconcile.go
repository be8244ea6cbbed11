package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/logging"
	"github.com/nova/auditor/reconcile"
)

// cmdReconcile is `auditor reconcile --star S [--apply] [--json] [--stream
// ID]`: rebuild the star's metastore view from its object store after the
// metastore went back in time (docs/architecture.md#reconcile). A dry run
// by default (no lease, nothing written); --apply does it under the
// star's lease. Exit 0 when every stream is reconciled with no record
// lost (records below a stream's low_record are retired by retention,
// never lost), 3 when records are lost or objects unsound (the report
// says which), 5 when the store could not be read whole (nothing of the
// stream it stopped at was applied), 1 on other failures (the lease held
// by another auditor included), 2 on bad input (an unknown stream).
func cmdReconcile(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	apply := fs.Bool("apply", false, "change the metastore (default: a dry run that prints what it would change)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	stream := fs.String("stream", "", "reconcile only the stream `ID` (uuid or 32 hex digits)")
	concurrency := fs.Int("concurrency", reconcile.DefaultConcurrency, "reconcile `N` streams at once")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "star", "database-url")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if *concurrency < 1 {
			return exitCode(e, cfg, &config.Error{Field: "concurrency", Msg: fmt.Sprintf("%d: must be at least 1", *concurrency)})
		}
		var streams []catalog.StreamID
		if *stream != "" {
			id, err := bundlefmt.ParseStreamID(*stream)
			if err != nil {
				return exitCode(e, cfg, &config.Error{Field: "stream", Msg: err.Error()})
			}
			streams = []catalog.StreamID{id}
		}
		log, err := newLogger(e, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		crash, err := envCrash()
		if err != nil {
			return exitCode(e, cfg, err)
		}
		db, err := openCurrentDB(ctx, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		// The star's row is the write path's: reconcile rebuilds the
		// auditor's view of a star the metastore knows, and a star it does
		// not know (a typo, or one created after the backup) is refused.
		if err := checkStar(ctx, db.Streams(), cfg.Star, nil); err != nil {
			return exitCode(e, cfg, err)
		}
		reg := prometheus.NewRegistry()
		if err := faultPoints(log, reg, crash); err != nil {
			return exitCode(e, cfg, err)
		}
		// A dry run builds no probe (it writes) and publishes nothing.
		p, err := buildParts(ctx, cfg, db, log, reg, !*apply, shared{crash: crash, footers: footerCache(cfg)})
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer p.settler.Close()
		r := reconcileRun{cfg: cfg, dc: daemonConfig(cfg), db: db, parts: p, log: log, crash: crash.Func(), leaseCrash: leaseCrash(),
			apply: *apply, concurrency: *concurrency, streams: streams}
		if logging.IsTerminal(e.stderr) && !*asJSON {
			r.progress = func(done, total int, s reconcile.StreamReport) {
				fmt.Fprintf(e.stderr, "\rreconcile: %d/%d streams", done, total)
				if done == total {
					fmt.Fprintln(e.stderr)
				}
			}
		}
		rep, err := r.run(ctx)
		if *asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if jerr := enc.Encode(rep); jerr != nil {
				fmt.Fprintf(e.stderr, "auditor: %v\n", jerr)
			}
		} else {
			rep.Print(e.stdout)
		}
		var held *catalog.LeaseHeldError
		switch {
		case errors.As(err, &held):
			fmt.Fprintf(e.stderr, "auditor: %v\n", held)
			return exitFailure
		case errors.Is(err, reconcile.ErrIncomplete):
			fmt.Fprintf(e.stderr, "auditor: %s\n", cfg.Scrub(err.Error()))
			return exitUnreachable
		case errors.Is(err, catalog.ErrNotFound):
			fmt.Fprintf(e.stderr, "auditor: %s\n", cfg.Scrub(err.Error()))
			return exitUsage
		case err != nil:
			return exitCode(e, cfg, fmt.Errorf("reconcile: %w", err))
		case rep.Findings():
			return exitFindings
		}
		return exitOK
	}
}

// reconcileRun is `auditor reconcile` wired: the metastore, the parts
// buildParts built for the star and the flags. cmdReconcile runs it, and
// so does the fault explorer's rewind episode (with a leader's parts, as
// reconcile --apply on that leader's host), so the explorer judges the
// very wiring the command runs.
type reconcileRun struct {
	cfg         config.Config // the star, the lease holder, the reap grace
	dc          daemon.Config // the lease taken with apply
	db          *catalog.DB
	parts       parts
	log         *slog.Logger
	crash       func(crashpoint.Point) // reconcile's crash points (nil: none)
	leaseCrash  func(crashpoint.Point) // the lease's (nil: none)
	apply       bool                   // change the metastore, under the star's lease
	concurrency int                    // streams reconciled at once
	streams     []catalog.StreamID     // nil: every stream of the star
	progress    func(done, total int, s reconcile.StreamReport)
}

// run reconciles: with apply under the star's lease, cutting with the
// parts' settler; else a dry run, which writes nothing. The report is
// what it did (or would do) however far it got.
func (r reconcileRun) run(ctx context.Context) (reconcile.Report, error) {
	rc := reconcile.Config{Star: r.cfg.Star, Apply: r.apply, ReapGrace: r.cfg.ReapGrace, Concurrency: r.concurrency, Streams: r.streams}
	d := reconcile.Deps{DB: r.db.Restore(), Reader: bundle.NewReader(r.parts.top), Store: r.parts.store, Log: r.log,
		Crash: r.crash, Progress: r.progress}
	if r.apply {
		d.Cutter = r.parts.settler
	}
	var rep reconcile.Report
	run := func(ctx context.Context, f catalog.Fence) error {
		var err error
		rep, err = reconcile.Run(ctx, d, rc, f)
		return err
	}
	if !r.apply {
		// A dry run writes nothing: its fence has token 0, which no lease
		// ever has, so a write by mistake would fail as stale.
		err := run(ctx, catalog.Fence{Star: r.cfg.Star, Holder: r.cfg.Holder})
		return rep, err
	}
	err := daemon.WithLease(ctx, r.dc, daemon.Deps{DB: r.db.Ledger(), Leases: r.db.Leases(), Requests: r.db.Requests(), Log: r.log, Crash: r.leaseCrash}, run)
	return rep, err
}
