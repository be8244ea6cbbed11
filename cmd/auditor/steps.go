package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nova/auditor/bundle"
	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/cmd/internal/wire"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
	"github.com/nova/auditor/objstore"
	"github.com/nova/auditor/objstore/s3store"
	"github.com/nova/auditor/pendingobj"
	"github.com/nova/auditor/rewind"
	"github.com/nova/auditor/settle"
	"github.com/nova/auditor/trim"
)

// buildCycle wires the cycle's steps in the order of docs/architecture.md#the-cycle:
// the rewind check, recover and settle, retention, erase, strays, trim, reap, and sidecars (which runs even after a step that ended the cycle); and returns the due
// policy they settle by (storePolicy), which the daemon's gauges and
// status must share. The returned close function releases what the steps
// hold. For a dry run the server's checksum support is not probed: the
// probe writes an object, and a plan assembles nothing (its policy takes
// the rule's floor the leader recorded, else the store's as configured,
// which --verify readback makes a read-back one).
func buildCycle(ctx context.Context, cfg config.Config, db *catalog.DB, log *slog.Logger, reg prometheus.Registerer, dryRun bool) ([]cycle.Step, catalog.DuePolicy, func(), error) {
	crash, err := envCrash()
	if err != nil {
		return nil, catalog.DuePolicy{}, nil, err
	}
	return buildCycleWith(ctx, cfg, db, log, reg, dryRun, shared{crash: crash, footers: footerCache(cfg)})
}

// footerCache is the process's slot footer cache (--settle-footer-cache-mib).
func footerCache(cfg config.Config) *bundle.FooterCache {
	return bundle.NewFooterCache(cfg.SettleFooterCacheMiB << 20)
}

// fleetTailCache is a fleet member's tail cache, shared by its stars: one
// --settle-tail-cache-mib of memory and one --settle-tail-spill-mib of disk
// (under --data-dir, tails/fleet) for the process, not for each star.
func fleetTailCache(cfg config.Config) (*settle.TailCache, error) {
	return settle.NewTailCache(cfg.SettleTailCacheMiB<<20, filepath.Join(cfg.DataDir, "tails", "fleet"), cfg.SettleTailSpillMiB<<20)
}

// shared is what the cycles of every star a process leads share: the crash
// points (a point's n-th hit is counted over all its stars), the slot
// footer cache (one --settle-footer-cache-mib budget for the process) and,
// in a fleet, the tail cache (nil: each star's settle makes its own).
type shared struct {
	crash   *crashpoint.Set
	footers *bundle.FooterCache
	tails   *settle.TailCache

	// The fault explorer's (docs/architecture.md#the-fault-explorer), nil
	// and zero in production: a crash hook in place of crash's, a wrapper
	// of the store (its faults), settle rules switched off, and an output
	// cap finer than --denorm-output-cap-mib's MiB.
	crashHook func(crashpoint.Point)
	wrapStore func(objstore.Store) objstore.Store
	mutations settle.Mutations
	capBytes  int64
}

// hook is the crash hook the steps are given.
func (sh shared) hook() func(crashpoint.Point) {
	if sh.crashHook != nil {
		return sh.crashHook
	}
	return sh.crash.Func()
}

// envCrash is the crash, pause and stall points the environment arms.
func envCrash() (*crashpoint.Set, error) {
	crash, err := crashpoint.FromEnv(os.Getenv, crashPoints())
	if err != nil {
		return nil, &config.Error{Field: crashpoint.EnvVar, Msg: err.Error()}
	}
	return crash, nil
}

// faultPoints warns, naming them, when the environment armed crash, pause
// or stall points (for tests only: the process will kill, stop or block
// itself there), and exports them on the process's registry reg
// (nova_auditor_fault_points_armed, 0 for each kind when none is armed).
func faultPoints(log *slog.Logger, reg prometheus.Registerer, crash *crashpoint.Set) error {
	armed := crash.Armed()
	if len(armed) > 0 {
		names := make([]string, len(armed))
		for i, a := range armed {
			names[i] = a.String()
		}
		log.Warn("fault-injection points armed (for tests only): this process will crash, pause or stall itself there",
			"points", names, "variables", []string{crashpoint.EnvVar, crashpoint.PauseVar, crashpoint.StallVar})
	}
	if err := daemon.RegisterFaultPoints(reg, armed); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}

// buildCycleWith is buildCycle with what the process's stars share given:
// a fleet member builds it once for all the stars it leads.
func buildCycleWith(ctx context.Context, cfg config.Config, db *catalog.DB, log *slog.Logger, reg prometheus.Registerer, dryRun bool, sh shared) ([]cycle.Step, catalog.DuePolicy, func(), error) {
	p, err := buildParts(ctx, cfg, db, log, reg, dryRun, sh)
	if err != nil {
		return nil, catalog.DuePolicy{}, nil, err
	}
	return p.steps, p.policy, p.settler.Close, nil
}

// parts are the cycle's steps and what they are built on: the (instrumented)
// store, its topology and the settler, which auditor reconcile uses
// outside a cycle.
type parts struct {
	steps   []cycle.Step
	policy  catalog.DuePolicy
	store   objstore.Store
	top     *objstore.Topology
	settler *settle.Settler
}

// buildParts builds the cycle's parts (buildCycleWith).
func buildParts(ctx context.Context, cfg config.Config, db *catalog.DB, log *slog.Logger, reg prometheus.Registerer, dryRun bool, sh shared) (parts, error) {
	crash := sh.hook()
	store, err := openStore(ctx, cfg)
	if err != nil {
		return parts{}, err
	}
	if !dryRun {
		if store, err = probeChecksums(ctx, cfg, store, log); err != nil {
			return parts{}, err
		}
	}
	policy := storePolicy(cfg, store, log)
	if dryRun {
		// A dry run does not probe the server (the probe writes): it plans
		// with the rule's floor the leader found, when one recorded it.
		rt, err := db.Ledger().Runtime(ctx, cfg.Star)
		switch {
		case err == nil && rt.Policy.CopyFloor > 0:
			policy.CopyFloor = rt.Policy.CopyFloor
		case err != nil && !errors.Is(err, catalog.ErrNotFound):
			log.Warn("the dry run plans with the configured store's floor for the tail-growth rule", "err", err)
		}
	}
	sm, err := objstore.NewMetrics(reg)
	if err != nil {
		return parts{}, err
	}
	_, isS3 := store.(*s3store.Store)
	var zones []string
	for _, zb := range cfg.S3ExpressBuckets {
		zones = append(zones, zb.Zone)
	}
	sm.InitSeries(isS3, zones)
	if sh.wrapStore != nil {
		store = sh.wrapStore(store)
	}
	store = objstore.Instrument(store, sm)
	pending, err := openPending(cfg)
	if err != nil {
		return parts{}, err
	}
	// One storage topology, with one record of zone health shared by slot
	// reads, copy sources and deletes for as long as the process runs.
	top, err := wire.Topology(cfg, store, objstore.NewHealth(objstore.HoldOffMin, objstore.HoldOffMax))
	if err != nil {
		return parts{}, err
	}
	sem, err := settle.NewMetrics(reg)
	if err != nil {
		return parts{}, err
	}
	settler, err := settle.New(settle.Deps{
		DB: db.Settle(), Topology: top, Pending: pending,
		Log: log.With("step", "settle"), Metrics: sem, Crash: crash, Footers: sh.footers, Tails: sh.tails, Mutations: sh.mutations,
	}, settle.Config{
		Policy:       policy,
		CapBytes:     cmp.Or(sh.capBytes, cfg.DenormOutputCapMiB<<20),
		TargetBytes:  cfg.DenormChunkTargetKiB << 10,
		MaxStreams:   int(cfg.SettleMaxStreams),
		MaxBytes:     cfg.SettleMaxBytes,
		Concurrency:  int(cfg.SettleConcurrency),
		ReapGrace:    cfg.ReapGrace,
		BatchStreams: int(cfg.SettleBatchStreams),

		FooterCacheBytes: cfg.SettleFooterCacheMiB << 20,
		SlotReadBytes:    cfg.SettleSlotReadMiB << 20,
		TailCacheBytes:   cfg.SettleTailCacheMiB << 20,
		TailSpillDir:     filepath.Join(cfg.DataDir, "tails", cfg.Star),
		TailSpillBytes:   cfg.SettleTailSpillMiB << 20,
		WindowRefs:       settle.DefaultWindowRefs,
		WindowRecords:    settle.DefaultWindowRecords,
		HotStreams:       settle.DefaultHotStreams,

		MaxPendingErasures: settle.DefaultMaxPendingErasures,
		StrayGuard:         cfg.StrayGuard,
	})
	if err != nil {
		return parts{}, err
	}
	marks, err := rewind.NewMarksCounter(reg)
	if err != nil {
		return parts{}, err
	}
	guard, err := rewind.New(rewind.Deps{DB: db.Restore(), Store: store, Bucket: top.Standard(), Log: log.With("step", "rewind"), Marks: marks},
		rewind.Config{Star: cfg.Star, Holder: cfg.Holder, MaxAge: rewind.MaxAgeFor(cfg.ReapGrace)})
	if err != nil {
		return parts{}, err
	}
	tm, err := trim.NewMetrics(reg)
	if err != nil {
		return parts{}, err
	}
	td := trim.Deps{DB: db.Trim(), Topology: top,
		Log: log.With("step", "trim"), Metrics: tm, Crash: crash, Marks: guard}
	tc := trim.Config{ReapGrace: cfg.ReapGrace, BatchSize: int(cfg.ReapBatchSize), Concurrency: trim.DefaultConcurrency}
	retention, err := trim.NewRetention(td, tc)
	if err != nil {
		return parts{}, err
	}
	trimmer, err := trim.NewTrim(td, tc)
	if err != nil {
		return parts{}, err
	}
	reaper, err := trim.NewReap(td, tc)
	if err != nil {
		return parts{}, err
	}
	strays, err := trim.NewStrays(td, tc, strayConfig(cfg))
	if err != nil {
		return parts{}, err
	}
	return parts{steps: []cycle.Step{guard, settler, retention, settler.Eraser(), strays, trimmer, reaper, settler.Sidecars()}, policy: policy,
		store: store, top: top, settler: settler}, nil
}

// strayConfig is the strays step's policy (--stray-guard,
// --stray-sweep-every), which `auditor verify --strays` shares.
func strayConfig(cfg config.Config) trim.StrayConfig {
	return trim.StrayConfig{Guard: cfg.StrayGuard, Every: cfg.StraySweepEvery,
		ListConcurrency: trim.DefaultStrayListConcurrency, MaxArmed: trim.DefaultMaxArmedStrays}
}

// storePolicy is duePolicy for the store the cycles write to: when it
// reads back assemblies that copy from the auditor's own objects
// (objstore.S3Config.ReadsBackCopies), a tail rewrite moves the whole tail
// through the process at any size, and the tail-growth rule covers every
// tail below the output cap (objstore.TailFloor).
func storePolicy(cfg config.Config, store objstore.Store, log *slog.Logger) catalog.DuePolicy {
	p := duePolicy(cfg)
	s3, ok := store.(*s3store.Store)
	if !ok || !s3.Config().ReadsBackCopies() {
		return p
	}
	p.CopyFloor = objstore.TailFloor(s3.Limits(), true, cfg.DenormOutputCapMiB<<20)
	if p.TailGrowth > 0 {
		log.Info("tail rewrites are read back on this server: the tail-growth rule covers every tail below the output cap",
			"floor_bytes", p.CopyFloor, "tail_growth", p.TailGrowth)
	}
	return p
}

// openStore builds the object store and, for the file backend, its buckets.
func openStore(ctx context.Context, cfg config.Config) (objstore.Store, error) {
	store, err := wire.Store(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := wire.CreateLocalBuckets(cfg, store); err != nil {
		return nil, err
	}
	return store, nil
}

// probeChecksums asks an S3 server, under --verify checksum, where it can
// check a whole assembled object's CRC-32C (s3store.ProbeChecksum) and
// returns the store configured for the answer: full-object checksums
// everywhere (AWS S3); by source where ranged copies from some sources
// misreport (versitygw 1.8.0, sources stored with CRC-32C), those
// assemblies read back; or per-part checksums and read-back throughout.
// No wrong assembly is ever published unverified.
func probeChecksums(ctx context.Context, cfg config.Config, store objstore.Store, log *slog.Logger) (objstore.Store, error) {
	s3, ok := store.(*s3store.Store)
	if !ok || cfg.Verify != "checksum" {
		return store, nil
	}
	probe, err := s3.ProbeChecksum(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("probe the server's checksum support in bucket %s: %w", cfg.Bucket, err)
	}
	ns, err := s3.WithProbe(probe)
	if err != nil {
		return nil, err
	}
	switch c := ns.Config(); c.Checksum {
	case objstore.ChecksumFullObject:
	case objstore.ChecksumBySource:
		log.Warn("the S3 server checks full-object CRC-32C only of copies from some sources; assemblies copying from others are verified by read-back",
			"bucket", cfg.Bucket, "server_checked", fmt.Sprint(c.ServerChecked))
	default:
		log.Warn("the S3 server cannot check full-object CRC-32C of copied parts; verifying assemblies by read-back",
			"bucket", cfg.Bucket, "mode", string(c.Checksum))
	}
	return ns, nil
}

// openPending opens the pending-part sidecar store under --data-dir
// (docs/architecture.md#local-pending-sidecars: namespace = the star).
func openPending(cfg config.Config) (*pendingobj.Store, error) {
	dir := filepath.Join(cfg.DataDir, "pending")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, &config.Error{Field: "data-dir", Msg: err.Error()}
	}
	p, err := pendingobj.New(dir, cfg.Star, settle.PartFormatID)
	if err != nil {
		return nil, &config.Error{Field: "data-dir", Msg: err.Error()}
	}
	return p, nil
}

// leaseCrash is the crash hook of the daemon's lease renewal (the armed
// point was validated by buildCycle).
func leaseCrash() func(crashpoint.Point) {
	crash, _ := crashpoint.FromEnv(os.Getenv, crashPoints())
	return crash.Func()
}
