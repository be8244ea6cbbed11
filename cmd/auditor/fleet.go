package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/fleet"
	"github.com/nova/auditor/internal/config"
)

// fleetLeasePoolConns is the size of a fleet member's own pool for its
// heartbeat, renewals, claims and hand-offs, apart from its cycles' pool:
// busy cycles cannot starve the renewal of every star at once.
const fleetLeasePoolConns = 3

// serveFleet is `auditor serve --stars`: a fleet member
// (docs/architecture.md#the-fleet). The first SIGTERM or SIGINT drains it:
// each star's running cycle gets --shutdown-timeout, its lease is handed
// to the next member, and the process exits 0.
func serveFleet(ctx context.Context, e env, cfg config.Config, log *slog.Logger) int {
	sel, err := fleet.ParseSelector(cfg.Stars)
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "stars", Msg: err.Error()})
	}
	// The cycles' pool: one star's worth of connections per cycle slot.
	db, err := catalog.OpenLazySized(cfg.DatabaseURL, int32(catalog.DefaultMaxConns*cfg.FleetCycles), cfg.LeaseTTL)
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "database-url", Msg: err.Error()})
	}
	defer db.Close()
	leases, err := catalog.OpenLazySized(cfg.DatabaseURL, fleetLeasePoolConns, cfg.LeaseTTL)
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "database-url", Msg: err.Error()})
	}
	defer leases.Close()
	if err := firstSchemaCheck(ctx, db); err != nil {
		return exitCode(e, cfg, err)
	}

	reg := prometheus.NewRegistry()
	if err := errors.Join(reg.Register(collectors.NewGoCollector()),
		reg.Register(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})),
		reg.Register(daemon.NewPoolCollector(db.PoolStats))); err != nil {
		return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
	}
	fm, err := fleet.NewMetrics(reg)
	if err != nil {
		return exitCode(e, cfg, fmt.Errorf("metrics: %w", err))
	}
	slots := fleet.NewSlots(int(cfg.FleetCycles), fm)
	gather := fleet.NewGatherers(reg)
	sched, _ := config.ParseSchedule(cfg.Schedule) // validated by config.Load
	crash, err := envCrash()
	if err != nil {
		return exitCode(e, cfg, err)
	}

	// One slot footer cache for the member: its budget is the process's,
	// however many stars it leads.
	sh := shared{crash: crash, footers: footerCache(cfg)}
	build := func(ctx context.Context, star string) (fleet.Built, error) {
		scfg := cfg
		scfg.Star, scfg.Stars = star, ""
		slg := log.With("star", star)
		sreg := prometheus.NewRegistry()
		starReg := prometheus.WrapRegistererWith(prometheus.Labels{"star": star}, sreg)
		m, err := daemon.NewMetrics(starReg, buildVersion())
		if err != nil {
			return fleet.Built{}, fmt.Errorf("metrics of star %q: %w", star, err)
		}
		steps, policy, closeSteps, err := buildCycleWith(ctx, scfg, db, slg, starReg, false, sh)
		if err != nil {
			return fleet.Built{}, err
		}
		rules, err := bucketRules(ctx, scfg)
		if err != nil {
			closeSteps()
			return fleet.Built{}, err
		}
		dc := daemonConfig(scfg)
		dc.Policy = policy
		dc.HTTPAddr = "" // the member serves HTTP for all its stars
		dc.Buckets, dc.KeyPrefixes = checkedBuckets(scfg)
		d, err := daemon.New(dc, daemon.Deps{DB: db, Steps: steps, Log: slg, Metrics: m, Gatherer: sreg,
			Crash: leaseCrash(), Rules: rules, Trim: trimReader(db), Slots: slots})
		if err != nil {
			closeSteps()
			return fleet.Built{}, err
		}
		return fleet.Built{Daemon: d, Metrics: sreg, Close: closeSteps}, nil
	}
	mb, err := fleet.New(fleet.Config{
		Member: cfg.Holder, Stars: sel, LeaseTTL: cfg.LeaseTTL, Tick: cfg.LeaseRenew,
		CallTimeout: daemon.DefaultLeaseCallTimeout(cfg.LeaseTTL), ShutdownTimeout: cfg.ShutdownTimeout,
		Rules: fleet.Rules{Grace: cfg.FleetGrace, HandoffWindow: fleetHandoffWindow(cfg), StableFor: cfg.FleetStableFor,
			Cooldown: cfg.FleetCooldown, MoveBudget: int(cfg.FleetMoveBudget)},
		BudgetWindow: cfg.FleetBudgetWindow, ProgressBound: cfg.FleetProgressBound,
		Interval: func() time.Duration { return daemon.CycleInterval(sched, time.Now()) },
	}, leases, build, log, fm, gather)
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "stars", Msg: err.Error()})
	}
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return exitCode(e, cfg, &config.Error{Field: "http-addr", Msg: err.Error()})
		}
		log.Info("http listening", "addr", ln.Addr().String())
		srv := &http.Server{Handler: mb.Handler(db), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http server stopped", "err", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
		}()
	}
	log.Info("auditor serve (fleet member)", "version", buildVersion(), "member", cfg.Holder, "config", cfg)
	if cfg.StartChecks {
		// doctor's checks are per star and some write to the buckets:
		// not run for every star a member may come to lead. Each star's
		// daemon checks its bucket rules when claimed (the guard).
		log.Info("a fleet member does not run the start checks: run auditor doctor --star S for each star before deploying")
	}
	if err := mb.Run(ctx); err != nil {
		return exitCode(e, cfg, fmt.Errorf("serve: %w", err))
	}
	return exitOK
}

// fleetHandoffWindow is how long a star handed to a member is left to it:
// three of its rounds, so a member slow by a round or two still takes it,
// but never longer than the grace; after that anyone may.
func fleetHandoffWindow(cfg config.Config) time.Duration {
	return min(3*cfg.LeaseRenew, cfg.FleetGrace)
}
