package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
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
		rc := reconcile.Config{Star: cfg.Star, Apply: *apply, ReapGrace: cfg.ReapGrace, Concurrency: *concurrency}
		if *stream != "" {
			id, err := bundlefmt.ParseStreamID(*stream)
			if err != nil {
				return exitCode(e, cfg, &config.Error{Field: "stream", Msg: err.Error()})
			}
			rc.Streams = []catalog.StreamID{id}
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
		d := reconcile.Deps{DB: db.Restore(), Reader: bundle.NewReader(p.top), Store: p.store, Log: log, Crash: crash.Func()}
		if *apply {
			d.Cutter = p.settler
		}
		if logging.IsTerminal(e.stderr) && !*asJSON {
			d.Progress = func(done, total int, s reconcile.StreamReport) {
				fmt.Fprintf(e.stderr, "\rreconcile: %d/%d streams", done, total)
				if done == total {
					fmt.Fprintln(e.stderr)
				}
			}
		}
		var rep reconcile.Report
		run := func(ctx context.Context, f catalog.Fence) error {
			var err error
			rep, err = reconcile.Run(ctx, d, rc, f)
			return err
		}
		if *apply {
			err = daemon.WithLease(ctx, daemonConfig(cfg), daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Log: log, Crash: leaseCrash()}, run)
		} else {
			// A dry run writes nothing: its fence has token 0, which no lease
			// ever has, so a write by mistake would fail as stale.
			err = run(ctx, catalog.Fence{Star: cfg.Star, Holder: cfg.Holder})
		}
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
