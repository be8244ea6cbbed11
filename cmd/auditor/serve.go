package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nova/auditor/daemon"
)

// cmdServe is `auditor serve`: the daemon of one star (DESIGN.md sections
// 2, 5 and 8). The first SIGTERM or SIGINT stops scheduling, lets a running
// cycle finish within --shutdown-timeout, releases the lease and exits 0; a
// second one exits 1 at once.
func cmdServe(ctx context.Context, e env, args []string) int {
	fs, l := newFlags(e, "serve")
	runNow := fs.Bool("run-now", false, "run one cycle as soon as the lease is held")
	cfg, err := parse(e, fs, l, args, "star", "database-url")
	if err != nil {
		return exitCode(e, cfg, err)
	}
	log, err := newLogger(e, cfg)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs, done := make(chan os.Signal, 2), make(chan struct{})
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer func() {
		signal.Stop(sigs)
		close(done)
	}()
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

	db, err := openCurrentDB(ctx, cfg)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	defer db.Close()

	// One registry for the process; every series of the star carries its
	// name, so one Prometheus can watch the auditors of many stars.
	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))); err != nil {
		return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
	}
	starReg := prometheus.WrapRegistererWith(prometheus.Labels{"star": cfg.Star}, reg)
	m, err := daemon.NewMetrics(starReg, buildVersion())
	if err != nil {
		return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
	}
	if err := starReg.Register(daemon.NewPoolCollector(db.PoolStats)); err != nil {
		return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
	}
	steps, closeSteps, err := buildCycle(ctx, cfg, db, log, starReg)
	if err != nil {
		return exitCode(e, cfg, err)
	}
	defer closeSteps()

	dc := daemonConfig(cfg)
	dc.RunNow = *runNow
	dc.ReapGrace = cfg.ReapGrace
	d, err := daemon.New(dc, daemon.Deps{DB: db, Steps: steps, Log: log, Metrics: m, Gatherer: reg, Crash: leaseCrash()})
	if err != nil {
		return exitCode(e, cfg, err)
	}
	log.Info("auditor serve", "version", buildVersion(), "config", cfg, "steps", len(steps), "run_now", *runNow)
	if err := d.Serve(ctx); err != nil {
		return exitCode(e, cfg, fmt.Errorf("serve: %w", err))
	}
	return exitOK
}
