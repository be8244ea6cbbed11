package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/nova/auditor/bundlefmt"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/migrations"
	"github.com/nova/auditor/trim"
)

// cmdServe is `auditor serve`: the daemon of one star (docs/architecture.md#the-cycle,
// #singleton-lease-and-fencing and #operator-surface). The first SIGTERM or SIGINT stops scheduling, lets a running
// cycle finish within --shutdown-timeout, releases the lease and exits 0; a
// second one exits 1 at once.
func cmdServe(e env, c *cobra.Command) runFunc {
	fs := newFlags(e, c)
	runNow := fs.Bool("run-now", false, "run one cycle as soon as the lease is held")
	return func(ctx context.Context, args []string) int {
		cfg, err := fs.Load(args)
		if err == nil {
			if cfg.Stars != "" {
				err = cfg.Require("database-url")
			} else {
				err = cfg.Require("star", "database-url")
			}
		}
		if err == nil {
			err = checkWebConfig(cfg)
		}
		if err != nil {
			return exitCode(e, cfg, err)
		}
		log, err := newLogger(e, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		ctx, stopSignals := onSignals(ctx, log, cfg)
		defer stopSignals()
		if cfg.Stars != "" {
			if *runNow {
				return exitCode(e, cfg, &config.Error{Field: "run-now", Msg: "a fleet member (--stars) runs each star's cycles on its schedule; trigger one with auditor trigger --star"})
			}
			return serveFleet(ctx, e, cfg, log)
		}

		// The database is not needed to come up: the daemon waits for it
		// with backoff, not ready meanwhile (a crash loop would page no one
		// more usefully and restart the wait).
		db, err := catalog.OpenLazy(cfg.DatabaseURL)
		if err != nil {
			return exitCode(e, cfg, &config.Error{Field: "database-url", Msg: err.Error()})
		}
		defer db.Close()
		// A database that answers with the wrong schema, or refuses the URL,
		// is a configuration problem to report now (exit 2), before the store
		// is set up; one that does not answer is waited for by the daemon.
		if err := firstSchemaCheck(ctx, db); err != nil {
			return exitCode(e, cfg, err)
		}

		// One registry for the process; every series of the star carries its
		// name, so one Prometheus can watch the auditors of many stars.
		reg := prometheus.NewRegistry()
		if err := errors.Join(reg.Register(collectors.NewGoCollector()),
			reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
			return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
		}
		crash, err := envCrash()
		if err != nil {
			return exitCode(e, cfg, err)
		}
		if err := faultPoints(log, reg, crash); err != nil {
			return exitCode(e, cfg, err)
		}
		starReg := prometheus.WrapRegistererWith(prometheus.Labels{"star": cfg.Star}, reg)
		m, err := daemon.NewMetrics(starReg, buildVersion())
		if err != nil {
			return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
		}
		if err := starReg.Register(daemon.NewPoolCollector(db.PoolStats)); err != nil {
			return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
		}
		if cfg.StartChecks {
			if code, err := startChecks(ctx, cfg, db.Ledger(), log, m); err != nil || code != exitOK {
				if err != nil {
					return exitCode(e, cfg, err)
				}
				return code
			}
		}
		steps, policy, closeSteps, err := buildCycle(ctx, cfg, db, log, starReg, false)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		defer closeSteps()

		rules, err := bucketRules(ctx, cfg)
		if err != nil {
			return exitCode(e, cfg, err)
		}
		dc := daemonConfig(cfg)
		dc.Policy = policy
		dc.RunNow = *runNow
		dc.Buckets, dc.KeyPrefixes = checkedBuckets(cfg)
		d, err := daemon.New(dc, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: steps, Log: log, Metrics: m, Gatherer: reg, Crash: leaseCrash(), Rules: rules, Trim: trimReader(db.Trim()),
			Idle: trim.IdleCheck{DB: db.Trim(), Policy: policy, StrayEvery: cfg.StraySweepEvery}})
		if err != nil {
			return exitCode(e, cfg, err)
		}
		log.Info("auditor serve", "version", buildVersion(), "config", cfg, "steps", len(steps), "run_now", *runNow)
		if err := d.Serve(ctx); err != nil {
			return exitCode(e, cfg, fmt.Errorf("serve: %w", err))
		}
		return exitOK
	}
}

// checkWebConfig is serve's start check of --web-config-file (for one
// star and for a fleet member): a file that does not parse, or whose
// certificate or key does not load, is a configuration error (exit 2).
func checkWebConfig(cfg config.Config) error {
	if err := daemon.CheckWebConfig(cfg.WebConfigFile); err != nil {
		return &config.Error{Field: "web-config-file", Msg: fmt.Sprintf("%s: %v", cfg.WebConfigFile, err)}
	}
	return nil
}

// onSignals: the first SIGTERM or SIGINT cancels the returned context (a
// clean stop: the daemon or member winds down within --shutdown-timeout),
// a second one exits 1 at once. The returned function stops listening.
func onSignals(ctx context.Context, log *slog.Logger, cfg config.Config) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	sigs, done := make(chan os.Signal, 2), make(chan struct{})
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case s := <-sigs:
			log.Info("signal: shutting down", "signal", s.String(), "shutdown_timeout", cfg.ShutdownTimeout)
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			log.Error("second signal: exiting at once", "signal", s.String())
			os.Exit(exitFailure)
		case <-done:
		}
	}()
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

// bucketRules is the store's reader of lifecycle rules, encryption,
// versioning and Object Lock (every backend has one; the file backend's
// answers "unknown" for the first two, "none" for the others).
func bucketRules(ctx context.Context, cfg config.Config) (daemon.BucketRulesReader, error) {
	store, err := openStore(ctx, cfg)
	if err != nil {
		return nil, err
	}
	r, ok := store.(daemon.BucketRulesReader)
	if !ok {
		return nil, fmt.Errorf("the %T store cannot read bucket rules", store)
	}
	return r, nil
}

// checkedBuckets are the buckets the auditor writes to and the key
// prefixes it writes under there (its star's chain and the settled
// objects), which no expiration rule may reach.
func checkedBuckets(cfg config.Config) (buckets, prefixes []string) {
	// buildCycle refused a configuration that is not a topology.
	buckets, _ = wire.Buckets(cfg)
	slot := bundlefmt.SlotKey(cfg.Star, 1, 0)
	chain := slot[:strings.Index(slot, "/chain/")+len("/chain/")]
	settled := bundlefmt.SettledKey("b", bundlefmt.StreamID{}, 1, 0, 0)
	return buckets, []string{cfg.KeyPrefix + chain, cfg.KeyPrefix + settled[:strings.Index(settled, "/")+1]}
}

// firstSchemaCheck is the start-up check of the schema: an error only for
// an answer waiting cannot change.
func firstSchemaCheck(ctx context.Context, db interface{ CheckSchema(context.Context) error }) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := db.CheckSchema(cctx)
	switch {
	case errors.Is(err, migrations.ErrDatabaseBehind), errors.Is(err, migrations.ErrDatabaseNewer):
		return err
	case catalog.IsRefused(err):
		return fmt.Errorf("%w: %w", catalog.ErrRefused, err)
	}
	return nil
}

// startChecks runs auditor doctor's checks before serve takes any work
// (--start-checks): each row is logged; a warning is exported as
// nova_auditor_start_check_warning; a failure refuses to start (exit 3),
// with the table in the log. What waiting may cure does not keep serve
// down: a database that does not answer (the daemon waits for it, not
// ready meanwhile) and a bucket that times out or answers 5xx (its cycles
// retry, an express zone is held off) only warn. A wrong answer (a PUT
// that overwrites, a ranged copy of other bytes, versioning, an expiry
// rule, refused credentials, a missing star) fails. The error is a store
// that cannot be built from the configuration.
func startChecks(ctx context.Context, cfg config.Config, db doctorMetastore, log *slog.Logger, m *daemon.Metrics) (int, error) {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	_, err := db.Now(pctx)
	cancel()
	var pg []checkRow
	if err != nil {
		pg = []checkRow{{Status: statusWarn, Scope: "postgres", Check: "reachable", Seen: cfg.Scrub(err.Error()),
			Do: "serve waits for the database, not ready meanwhile; its other checks were not run"}}
	} else {
		pg = postgresChecks(ctx, cfg, db)
	}
	rep, err := runDoctor(ctx, cfg, pg)
	if err != nil {
		return 0, err
	}
	for i, r := range rep.Checks {
		if r.Status == statusFail && r.Check == "credentials" && slices.Contains(rep.waiting, r.Scope) {
			rep.Checks[i].Status = statusWarn
			rep.Checks[i].Do = "serve starts and its cycles retry (an express zone is held off); if it lasts: " + r.Do
		}
	}
	rep.ExitCode = doctorExitCode(rep.Checks, false)
	levels := map[string]slog.Level{statusOK: slog.LevelInfo, statusWarn: slog.LevelWarn, statusFail: slog.LevelError}
	for _, r := range rep.Checks {
		log.Log(ctx, levels[r.Status], "start check", "status", r.Status, "scope", r.Scope, "check", r.Check, "seen", r.Seen, "do", r.Do)
		if r.Status == statusWarn {
			m.StartCheckWarnings.WithLabelValues(r.Scope, r.Check).Set(1)
		}
	}
	if rep.ExitCode != exitOK {
		var table strings.Builder
		writeDoctorTable(&table, rep)
		log.Error("a start check failed: serve refuses to start (auditor doctor runs the same checks; --start-checks=false skips them)",
			"exit", rep.ExitCode, "table", table.String())
	}
	return rep.ExitCode, nil
}
