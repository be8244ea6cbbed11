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
	"github.com/nova/auditor/trim"
)

// serveFleet is `auditor serve --stars`: a fleet member
// (docs/architecture.md#the-fleet). The first SIGTERM or SIGINT drains it:
// each star's running cycle gets --shutdown-timeout, its lease is handed
// to the next member, and the process exits 0.
func serveFleet(ctx context.Context, e env, cfg config.Config, log *slog.Logger) int {
	sel, err := fleet.ParseSelector(cfg.Stars)
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "stars", Msg: err.Error()})
	}
	// One bound over the member's connections (fleet.Pools): the leases'
	// pool, held open, its LISTEN connection and the cycles' pool.
	maxConns := int(cfg.FleetMaxConns)
	if maxConns == 0 {
		maxConns = fleet.DefaultMaxConns(int(cfg.FleetCycles))
	}
	leaseConns, cycleConns, err := fleet.Pools(maxConns, int(cfg.FleetCycles))
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "fleet-max-conns", Msg: err.Error()})
	}
	if catalog.URLSetsPoolSize(cfg.DatabaseURL) {
		log.Warn("a fleet member sizes its pools by --fleet-max-conns: the database URL's pool_max_conns does not apply", "fleet_max_conns", maxConns)
	}
	refusals := &catalog.Refusals{}
	db, err := catalog.OpenBudgeted(cfg.DatabaseURL, catalog.PoolOptions{MaxConns: cycleConns, IdleTx: cfg.LeaseTTL,
		AppName: catalog.FleetAppName, Refusals: refusals})
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "database-url", Msg: err.Error()})
	}
	defer db.Close()
	leases, err := catalog.OpenBudgeted(cfg.DatabaseURL, catalog.PoolOptions{MaxConns: leaseConns, Hold: true, IdleTx: cfg.LeaseTTL,
		AppName: catalog.FleetAppName, Refusals: refusals})
	if err != nil {
		return exitCode(e, cfg, &config.Error{Field: "database-url", Msg: err.Error()})
	}
	defer leases.Close()
	if err := firstSchemaCheck(ctx, db); err != nil {
		return exitCode(e, cfg, err)
	}
	if cfg.StartChecks {
		if code := fleetStartCheck(ctx, cfg, db, maxConns, log); code != exitOK {
			return code
		}
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
	fm.MaxConns.Set(float64(maxConns))
	slots := fleet.NewSlots(int(cfg.FleetCycles), fm)
	gather := fleet.NewGatherers(reg)
	sched, _ := config.ParseSchedule(cfg.Schedule) // validated by config.Load
	crash, err := envCrash()
	if err != nil {
		return exitCode(e, cfg, err)
	}
	if err := faultPoints(log, reg, crash); err != nil {
		return exitCode(e, cfg, err)
	}

	// One slot footer cache and one tail cache for the member: their
	// budgets are the process's, however many stars it leads.
	tails, err := fleetTailCache(cfg)
	if err != nil {
		return exitCode(e, cfg, fmt.Errorf("settle: %w", err))
	}
	defer tails.Close()
	sh := shared{crash: crash, footers: footerCache(cfg), tails: tails}
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
		dc.GaugeInterval, dc.AdminPoll = daemon.DefaultFleetGaugeInterval, daemon.DefaultFleetAdminPoll
		dc.Buckets, dc.KeyPrefixes = checkedBuckets(scfg)
		d, err := daemon.New(dc, daemon.Deps{DB: db.Ledger(), Leases: db.Leases(), Requests: db.Requests(), Steps: steps, Log: slg, Metrics: m, Gatherer: sreg,
			Crash: leaseCrash(), Rules: rules, Trim: trimReader(db.Trim()), Slots: slots, Idle: trim.IdleCheck{DB: db.Trim(), Policy: policy, StrayEvery: cfg.StraySweepEvery}})
		if err != nil {
			closeSteps()
			return fleet.Built{}, err
		}
		return fleet.Built{Daemon: d, Metrics: sreg, Close: closeSteps}, nil
	}
	mb, err := fleet.New(fleet.Config{
		Member: cfg.Holder, Stars: sel, LeaseTTL: cfg.LeaseTTL, Tick: cfg.LeaseRenew,
		CallTimeout: daemon.DefaultLeaseCallTimeout(cfg.LeaseTTL), ShutdownTimeout: cfg.ShutdownTimeout, Pprof: cfg.Pprof,
		Rules: fleet.Rules{Grace: cfg.FleetGrace, HandoffWindow: fleetHandoffWindow(cfg), StableFor: cfg.FleetStableFor,
			Cooldown: cfg.FleetCooldown, MoveBudget: int(cfg.FleetMoveBudget), MoveBudgetPct: int(cfg.FleetMoveBudgetPct)},
		BudgetWindow: cfg.FleetBudgetWindow, ProgressBound: cfg.FleetProgressBound,
		Interval: func() time.Duration { return daemon.CycleInterval(sched, time.Now()) },
		Refusals: refusals,
	}, leases.Fleet(), build, log, fm, gather)
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
			if err := daemon.ServeHTTP(ln, srv, cfg.WebConfigFile, log); err != nil && !errors.Is(err, http.ErrServerClosed) {
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
		// doctor's other checks are per star and some write to the
		// buckets: not run for every star a member may come to lead. Each
		// star's daemon checks its bucket rules when claimed (the guard).
		log.Info("a fleet member runs only the connections start check: run auditor doctor --star S for each star before deploying")
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

// fleetStartCheck is a member's start check (--start-checks): the fleet's
// connections against the server's (connectionsRow), for the live
// members the metastore lists and this one. A failure refuses to start
// (exit 3); a database that does not answer only warns, as serve's.
func fleetStartCheck(ctx context.Context, cfg config.Config, db *catalog.DB, maxConns int, log *slog.Logger) int {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	members := 1
	fv, err := db.Fleet().FleetView(cctx, cfg.FleetBudgetWindow)
	if err == nil {
		for _, m := range fv.Members {
			if m.Alive && m.Member != cfg.Holder {
				members++
			}
		}
	}
	var sc catalog.ServerConns
	if err == nil {
		sc, err = db.ServerConns(cctx, catalog.FleetAppName)
	}
	if err != nil {
		log.Warn("start check", "status", statusWarn, "scope", "postgres", "check", "connections", "seen", cfg.Scrub(err.Error()),
			"do", "the member starts and waits for the database")
		return exitOK
	}
	r := connectionsRow(sc, members, maxConns, "--fleet-max-conns")
	levels := map[string]slog.Level{statusOK: slog.LevelInfo, statusWarn: slog.LevelWarn, statusFail: slog.LevelError}
	log.Log(ctx, levels[r.Status], "start check", "status", r.Status, "scope", r.Scope, "check", r.Check, "seen", r.Seen, "do", r.Do)
	if r.Status == statusFail {
		log.Error("a start check failed: serve refuses to start (--start-checks=false skips it)", "exit", exitFindings)
		return exitFindings
	}
	return exitOK
}
