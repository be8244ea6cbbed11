package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/crashpoint"
	"github.com/nova/auditor/internal/cycle"
)

// Config is what the daemon is told (the serve and run flags).
type Config struct {
	Star            string
	Holder          string
	Schedule        cron.Schedule // parsed --schedule (config.ParseSchedule)
	LeaseTTL        time.Duration
	LeaseRenew      time.Duration
	ShutdownTimeout time.Duration
	HTTPAddr        string // "" serves no HTTP
	WebConfigFile   string // TLS and basic auth of HTTPAddr (ServeHTTP); "" plain HTTP
	Pprof           bool   // serve /debug/pprof/ on HTTPAddr
	RunNow          bool   // run one cycle as soon as the lease is first held
	Policy          catalog.DuePolicy
	ReapGrace       time.Duration // for the reap backlog of status and gauges
	// ErasureAlertAfter is the bound of a pending erasure's age that the
	// alert compares against (exported as erasure_pending_bound_seconds).
	ErasureAlertAfter time.Duration
	Version           string
	// HistoryKeep is the window of the run ledger and the admin requests:
	// each cycle prunes what is older (at most PruneBatch rows of each).
	// Zero keeps everything.
	HistoryKeep time.Duration
	// IdleRecord: the ledger records idle cycles as one row per this
	// (and at the first of a quiet spell); 0, one row per idle cycle.
	IdleRecord time.Duration

	// Buckets are the buckets whose lifecycle rules, encryption,
	// versioning and Object Lock the daemon checks (RunOnce: versioning
	// and Object Lock, for the erasure hold); KeyPrefixes, the full key
	// prefixes it writes under in them (an expiration rule reaching one
	// stops all work).
	Buckets     []string
	KeyPrefixes []string

	// Required (validated, not defaulted): the Default* constants.
	AdminPoll        time.Duration // fallback poll of admin requests when a NOTIFY is missed (5s)
	GaugeInterval    time.Duration // refresh of the metastore gauges and the schema check (15s)
	RetryMax         time.Duration // longest backoff before retrying a failed cycle (5m)
	RulesInterval    time.Duration // check of the bucket rules (24h; every minute while they block)
	DBRetryMax       time.Duration // longest wait between tries of an unreachable database at start (30s)
	PruneBatch       int           // most rows of each history table pruned per cycle (1000)
	LeaseCallTimeout time.Duration // bound of one lease acquisition or renewal attempt (LeaseTTL/3)
}

// Deps are what the daemon works with.
type Deps struct {
	DB       Metastore    // the ledger and status reads in Postgres (metastore.go, *catalog.Ledger)
	Leases   Leases       // the star's lease (*catalog.Leases)
	Requests Requests     // the operator's admin requests (*catalog.Requests)
	Steps    []cycle.Step // run in order (docs/architecture.md#the-cycle)
	Log      *slog.Logger
	Metrics  *Metrics               // nil: metrics kept on a private registry
	Gatherer prometheus.Gatherer    // what /metrics serves (nil: the daemon's own metrics only)
	Crash    func(crashpoint.Point) // CrashAfterLeaseRenew (nil: none)
	Rules    BucketRulesReader      // the bucket rules (nil: unknown)
	Trim     TrimReader             // trim's view for the gauges and /status (nil: none shown)
	Slots    Slots                  // the process's cycle slots, shared by a fleet member's stars (nil: no bound)
	Idle     Idle                   // tells a scheduled cycle with nothing to do (nil: every cycle runs its steps)
}

// Idle tells, before a scheduled cycle, whether any step has work
// (docs/architecture.md#idle-cycles): in one read of the metastore.
type Idle interface {
	// Work names the work a cycle of star would find ("" when none) and
	// returns the database clock of the reading.
	Work(ctx context.Context, star string) (string, time.Time, error)
}

// Defaults of the daemon's intervals and bounds, which have no
// configuration key (cmd/auditor maps them; tests set their own).
const (
	DefaultAdminPoll     = 5 * time.Second
	DefaultGaugeInterval = 15 * time.Second
	DefaultRetryMax      = 5 * time.Minute
	DefaultRulesInterval = 24 * time.Hour
	DefaultDBRetryMax    = 30 * time.Second
	DefaultPruneBatch    = 1000

	// A fleet member's stars refresh their gauges, and poll their admin
	// requests, less often: a member leads many, its LISTEN connection
	// wakes each on a request, and an idle star should cost the
	// metastore almost nothing (docs/architecture.md#idle-cycles).
	DefaultFleetGaugeInterval = time.Minute
	DefaultFleetAdminPoll     = 30 * time.Second
)

// DefaultLeaseCallTimeout bounds one lease acquisition or renewal attempt:
// a third of the ttl, so a renewal stuck on a dead connection gives up in
// time for the next ones (on fresh connections) to save the lease, and a
// standby retries its takeover as often.
func DefaultLeaseCallTimeout(ttl time.Duration) time.Duration { return ttl / 3 }

func (c Config) validate(needSchedule bool) error {
	var errs []error
	if c.Star == "" {
		errs = append(errs, errors.New("daemon: no star"))
	}
	if c.Holder == "" {
		errs = append(errs, errors.New("daemon: no holder"))
	}
	if c.LeaseTTL <= 0 || c.LeaseRenew <= 0 || c.LeaseRenew >= c.LeaseTTL {
		errs = append(errs, fmt.Errorf("daemon: lease renew %s must be positive and below the ttl %s", c.LeaseRenew, c.LeaseTTL))
	}
	if needSchedule && c.Schedule == nil {
		errs = append(errs, errors.New("daemon: no schedule"))
	}
	for name, d := range map[string]time.Duration{"AdminPoll": c.AdminPoll, "GaugeInterval": c.GaugeInterval,
		"RetryMax": c.RetryMax, "RulesInterval": c.RulesInterval, "DBRetryMax": c.DBRetryMax, "LeaseCallTimeout": c.LeaseCallTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("daemon: %s: %s must be positive", name, d))
		}
	}
	if c.PruneBatch < 1 {
		errs = append(errs, fmt.Errorf("daemon: PruneBatch: %d must be at least 1", c.PruneBatch))
	}
	return errors.Join(errs...)
}

func (d *Deps) defaults(version string) error {
	if d.DB == nil || d.Leases == nil || d.Requests == nil {
		return errors.New("daemon: no database")
	}
	if d.Log == nil {
		d.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if d.Metrics == nil {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg, version)
		if err != nil {
			return err
		}
		d.Metrics = m
		if d.Gatherer == nil {
			d.Gatherer = reg
		}
	}
	if d.Gatherer == nil {
		d.Gatherer = prometheus.NewRegistry()
	}
	return nil
}
