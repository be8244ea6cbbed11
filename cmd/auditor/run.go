package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/trim"
)

// cmdRun is `auditor run --once`: take the lease, run one cycle, release it.
// Exit 0 when the cycle succeeded, 1 when it failed (the lease held by
// another auditor included), 2 on configuration errors.
func cmdRun(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	once := fs.Bool("once", true, "run one cycle and exit (the only mode of run; serve runs on a schedule)")
	dryRun := fs.Bool("dry-run", false, "print the plan and the reaps; change nothing. It plans with the policy the star's leader recorded; a policy flag given here overrides it")
	stream := fs.String("stream", "", "force the stream `ID` (uuid or 32 hex digits) due regardless of linger")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run (pprof format) to this `FILE`")
	sweepStrays := fs.Bool("sweep-strays", false, "sweep the strays in this cycle whatever --stray-sweep-every says (docs/architecture.md#strays)")
	asJSON := fs.Bool("json", false, "with --dry-run: print the policy, the plan and the counts as JSON")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args, "star", "database-url")
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if !*once {
			return exitCode(e, cfg, &config.Error{Field: "once", Msg: "run only runs one cycle; use serve for the daemon"})
		}
		if *asJSON && !*dryRun {
			return exitCode(e, cfg, &config.Error{Field: "json", Msg: "prints a dry run's plan: use it with --dry-run"})
		}
		opts := cycle.Options{Trigger: daemon.TriggerOnce, DryRun: *dryRun, SweepStrays: *sweepStrays}
		var plan strings.Builder
		if *dryRun {
			opts.Plan = e.stdout
			if *asJSON {
				opts.Plan = &plan
			}
		}
		if *stream != "" {
			id, err := bundlefmt.ParseStreamID(*stream)
			if err != nil {
				return exitCode(e, cfg, &config.Error{Field: "stream", Msg: err.Error()})
			}
			opts.Streams = []catalog.StreamID{id}
			opts.Trigger = daemon.TriggerStream
		}
		log, err := newLogger(e, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if *cpuProfile != "" {
			stop, err := startCPUProfile(*cpuProfile)
			if err != nil {
				return exitCode(e, cfg, &config.Error{Field: "cpuprofile", Msg: err.Error()})
			}
			defer func() {
				if err := stop(); err != nil {
					fmt.Fprintf(e.stderr, "auditor: %v\n", err)
				}
			}()
		}
		db, err := openCurrentDB(ctx, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer db.Close()
		// An unknown star or stream is a configuration error (exit 2),
		// found before the cycle takes the lease and marks the store: here,
		// or, for a run that checks whether it is idle, by that check's
		// read (an idle run --once costs one read).
		idleCheck := !*dryRun && *stream == "" && !*sweepStrays
		if !idleCheck {
			if err := checkStar(ctx, db.Streams(), cfg.Star, streamID(opts.Streams)); err != nil {
				return exitCode(e, cfg, err)
			}
		}
		var dryPolicy DryRunPolicy
		if *dryRun {
			// Before the cycle is built: its steps take the policy from cfg.
			if dryPolicy, err = leaderPolicy(ctx, db.Ledger(), &cfg, fs.FlagSet); err != nil {
				return exitCode(e, cfg, err)
			}
			if !*asJSON {
				dryPolicy.write(e.stdout, cfg.Star)
			}
		}
		crash, err := envCrash()
		if err != nil {
			return exitCode(e, cfg, err)
		}
		// run serves no metrics: the warning is what tells of an armed point.
		reg := prometheus.NewRegistry()
		if err := faultPoints(log, reg, crash); err != nil {
			return exitCode(e, cfg, err)
		}
		steps, policy, closeSteps, err := buildCycleWith(ctx, cfg, db, log, reg, *dryRun, shared{crash: crash, footers: footerCache(cfg)})
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer closeSteps()
		dc := daemonConfig(cfg)
		dc.Policy = policy
		deps := daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: steps, Log: log, Crash: leaseCrash()}
		if !*dryRun {
			// The erase step marks no erasure applied while a bucket keeps
			// what a DELETE removes (versioning, Object Lock).
			dc.Buckets, dc.KeyPrefixes = checkedBuckets(cfg)
			if deps.Rules, err = bucketRules(ctx, cfg); err != nil {
				return exitCode(e, cfg, err)
			}
		}
		if idleCheck {
			// A star with nothing to do costs one read (daemon.OnceIdle).
			deps.Idle = trim.IdleCheck{DB: db.Trim(), Policy: policy, StrayEvery: cfg.StraySweepEvery}
			idle, err := daemon.OnceIdle(ctx, dc, deps)
			if errors.Is(err, catalog.ErrNotFound) {
				if err := checkStar(ctx, db.Streams(), cfg.Star, nil); err != nil {
					return exitCode(e, cfg, err)
				}
			}
			if err != nil {
				log.Warn("the idle check failed; the cycle runs", "err", err)
			}
			if idle {
				fmt.Fprintln(e.stdout, "cycle idle: nothing to do")
				return exitOK
			}
		}
		counts, err := daemon.RunOnce(ctx, dc, deps, opts)
		var held *catalog.LeaseHeldError
		if errors.As(err, &held) {
			fmt.Fprintf(e.stderr, "auditor: %v\n", held)
			return exitFailure
		}
		if err != nil {
			return exitCode(e, cfg, fmt.Errorf("cycle: %w", err))
		}
		if *asJSON {
			return exitCode(e, cfg, writeDryRunJSON(e.stdout, DryRunReport{Star: cfg.Star, Policy: dryPolicy, Plan: planLines(plan.String()), Counts: counts}))
		}
		fmt.Fprintf(e.stdout, "cycle ok: %d streams settled (%d quarantined), %d objects published, %d adopted; "+
			"%d bytes copied server side, %d fetched (%d of them read back to verify), %d uploaded; %d slots and %d objects reaped; "+
			"%d records tombstoned, %d objects rewritten, %d erasures applied\n",
			counts.StreamsSettled, counts.StreamsQuarantined, counts.ObjectsPublished, counts.ObjectsAdopted,
			counts.BytesCopied, counts.BytesFetched, counts.BytesReadBack, counts.BytesUploaded, counts.SlotsReaped, counts.ObjectsReaped,
			counts.RecordsTombstoned, counts.ObjectsRewritten, counts.ErasuresApplied)
		return exitOK
	}
}

// duePolicy is the due policy of the configuration, for the settle step,
// the gauges and status alike, before the store is known. The tail-growth
// rule's floor is objstore.TailFloor: the store's copy floor
// (objstore.Limits.CopyFloor: every store plans with S3's part minimum),
// or the output cap when that is smaller (a tail at the cap is never
// rewritten). storePolicy raises it to the cap for a store that reads
// back its copies.
func duePolicy(cfg config.Config) catalog.DuePolicy {
	return catalog.DuePolicy{Linger: cfg.DenormLinger, AgeCap: cfg.DenormAgeCap,
		ExpressLinger: cfg.ExpressDenormLinger, ExpressAgeCap: cfg.ExpressDenormAgeCap,
		TailGrowth: cfg.DenormTailGrowth, Cohorts: int(cfg.DenormTailCohorts),
		CopyFloor: objstore.TailFloor(objstore.DefaultLimits, false, cfg.DenormOutputCapMiB<<20)}
}

// daemonConfig is the daemon's part of the configuration.
func daemonConfig(cfg config.Config) daemon.Config {
	sched, _ := config.ParseSchedule(cfg.Schedule) // validated by config.Load
	return daemon.Config{
		Star: cfg.Star, Holder: cfg.Holder, Schedule: sched,
		LeaseTTL: cfg.LeaseTTL, LeaseRenew: cfg.LeaseRenew, ShutdownTimeout: cfg.ShutdownTimeout,
		HTTPAddr: cfg.HTTPAddr, WebConfigFile: cfg.WebConfigFile, Pprof: cfg.Pprof, Version: buildVersion(), ReapGrace: cfg.ReapGrace, HistoryKeep: cfg.HistoryRetention,
		ErasureAlertAfter: cfg.ErasureAlertAfter, IdleRecord: cfg.IdleRecordInterval,
		Policy: duePolicy(cfg),

		AdminPoll: daemon.DefaultAdminPoll, GaugeInterval: daemon.DefaultGaugeInterval, RetryMax: daemon.DefaultRetryMax,
		RulesInterval: daemon.DefaultRulesInterval, DBRetryMax: daemon.DefaultDBRetryMax, PruneBatch: daemon.DefaultPruneBatch,
		LeaseCallTimeout: daemon.DefaultLeaseCallTimeout(cfg.LeaseTTL),
	}
}

// streamID is the one stream of a run --stream, nil without.
func streamID(ids []catalog.StreamID) *catalog.StreamID {
	if len(ids) == 0 {
		return nil
	}
	return &ids[0]
}
