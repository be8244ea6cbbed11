package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/sim"
)

func cmdCheck(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	var (
		o       sim.CheckOptions
		asJSON  bool
		listing bool
	)
	fs.BoolVar(&o.SettledOnly, "settled-only", false, "check only records below settled_through, from settled objects (skip refs, slots, chains)")
	fs.IntVar(&o.Concurrency, "concurrency", 8, "read `N` objects at once")
	fs.IntVar(&o.MaxFindings, "max-findings", 100, "report `N` findings in detail (the counts are always complete)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&listing, "list-unreferenced", false, "list the flights no ref names (lost flights, or settled and released)")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "database-url")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if cfg.Star != "" {
			o.Stars = []string{cfg.Star}
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			select {
			case <-e.signals:
				cancel()
			case <-ctx.Done():
			}
		}()
		db, st, err := open(ctx, cfg, false)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		rep, err := sim.Check(ctx, db, st, o)
		if err != nil {
			return exitCode(e, cfg, fmt.Errorf("check: %w", err))
		}
		if asJSON {
			enc := json.NewEncoder(e.stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(rep); err != nil {
				return exitCode(e, cfg, err)
			}
		} else {
			printReport(e, rep, listing)
		}
		if !rep.OK() {
			return exitCode(e, cfg, errors.New("check found differences"))
		}
		return exitOK
	}
}

func printReport(e env, r sim.CheckReport, listing bool) {
	w := e.stdout
	fmt.Fprintf(w, "stars %d, streams %d, records %d: checked %d (%d from settled objects, %d from slots), missing %d, duplicated %d, wrong %d",
		r.Stars, r.Streams, r.Records, r.Checked, r.FromSettled, r.FromSlots, r.Missing, r.Duplicated, r.Wrong)
	if r.Unsettled > 0 {
		fmt.Fprintf(w, ", unsettled (not checked) %d", r.Unsettled)
	}
	fmt.Fprintf(w, "\nobjects read %d, slots read %d, invariant violations %d\n", r.Objects, r.SlotsRead, r.Violations)
	if r.Chain.Slots > 0 {
		fmt.Fprintf(w, "chains: %d slots: %d flights (%d named by refs, %d by none), %d poisons; %d positions behind trim cursors\n",
			r.Chain.Slots, r.Chain.Flights, r.Chain.Referenced, len(r.Chain.Unreferenced), r.Chain.Poisons, r.Chain.Released)
	}
	if listing {
		for _, s := range r.Chain.Unreferenced {
			fmt.Fprintf(w, "unreferenced %s\n", s)
		}
	}
	for _, f := range r.Findings {
		fmt.Fprintln(w, f)
	}
	if r.Dropped > 0 {
		fmt.Fprintf(w, "... and %d more findings\n", r.Dropped)
	}
	if r.OK() {
		fmt.Fprintln(w, "OK")
	}
}
