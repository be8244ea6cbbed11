package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/nova/auditor/objstore"
)

// key is one configuration key: its flag name, usage, default and setter.
type key struct {
	name   string
	usage  string
	def    string
	set    func(c *Config, v string) error
	get    func(c *Config) string
	isBool bool   // a flag without a value (--flag, or --flag=false)
	kind   string // the value's kind in help (Key.Placeholder); "" for a boolean
}

// placeholder is Key.Placeholder: the key's kind, STRING when unset.
func (k key) placeholder() string {
	switch {
	case k.isBool:
		return ""
	case k.kind != "":
		return k.kind
	}
	return "STRING"
}

func durationKey(name, usage, def string, p func(*Config) *time.Duration) key {
	return key{name: name, usage: usage, def: def, kind: "DURATION",
		set: func(c *Config, v string) error {
			d, err := ParseDuration(v)
			if err != nil {
				return fieldErr(name, "%v", err)
			}
			if d < 0 {
				return fieldErr(name, "%s is negative", v)
			}
			*p(c) = d
			return nil
		},
		get: func(c *Config) string { return p(c).String() }}
}

// optionalDurationKey is a duration that may be left empty (0: not set);
// a value given must be positive.
func optionalDurationKey(name, usage string, p func(*Config) *time.Duration) key {
	return key{name: name, usage: usage, def: "", kind: "DURATION",
		set: func(c *Config, v string) error {
			if v == "" {
				*p(c) = 0
				return nil
			}
			d, err := ParseDuration(v)
			if err != nil {
				return fieldErr(name, "%v", err)
			}
			if d <= 0 {
				return fieldErr(name, "%s must be positive (leave it empty for the defaults)", v)
			}
			*p(c) = d
			return nil
		},
		get: func(c *Config) string {
			if *p(c) == 0 {
				return ""
			}
			return p(c).String()
		}}
}

// attemptTimeoutKey is the key of one class's S3 attempt deadline:
// s3-attempt-timeout-<class>, its default the backend's.
func attemptTimeoutKey(class objstore.OpClass, ops string) key {
	return durationKey(attemptTimeoutPrefix+string(class),
		fmt.Sprintf("deadline of one S3 %s attempt (%s); a stalled attempt is retried", class, ops),
		shortDuration(objstore.DefaultAttemptTimeouts().Of(class)),
		func(c *Config) *time.Duration { return c.S3AttemptTimeouts.Field(class) })
}

// attemptTimeoutPrefix starts the per-class attempt deadline keys.
const attemptTimeoutPrefix = "s3-attempt-timeout-"

func stringKey(name, usage, def string, p func(*Config) *string) key {
	return key{name: name, usage: usage, def: def,
		set: func(c *Config, v string) error { *p(c) = v; return nil },
		get: func(c *Config) string { return *p(c) }}
}

func intKey(name, usage, def string, p func(*Config) *int64) key {
	return key{name: name, usage: usage, def: def, kind: "N",
		set: func(c *Config, v string) error {
			n, err := ParseSize(v)
			if err != nil {
				return fieldErr(name, "%v", err)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return fmt.Sprint(*p(c)) }}
}

// sizeKey is a size kept in the unit its name says (bytes, KiB or MiB): a
// plain integer is in that unit, a value with a unit (512MiB, 64G) is
// converted to it, and one that is not a whole number of it is refused.
func sizeKey(name, usage, def string, unit Unit, p func(*Config) *int64) key {
	usage += fmt.Sprintf("; a plain number is in %s, or give a unit: K/KiB, M/MiB, G/GiB, T/TiB, all binary (1G = 1GiB = 2^30 bytes)", unit.plural())
	return key{name: name, usage: usage, def: def, kind: "SIZE",
		set: func(c *Config, v string) error {
			n, err := ParseSizeIn(v, unit)
			if err != nil {
				return fieldErr(name, "%v", err)
			}
			*p(c) = n
			return nil
		},
		get: func(c *Config) string { return fmt.Sprint(*p(c)) }}
}

// fractionKey is a finite fraction, at least 0 (it may pass 1).
func fractionKey(name, usage, def string, p func(*Config) *float64) key {
	return key{name: name, usage: usage, def: def, kind: "FRACTION",
		set: func(c *Config, v string) error {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return fieldErr(name, "%q is not a number (like 0, 0.5 or 1)", v)
			}
			if f < 0 {
				return fieldErr(name, "%s is negative (0 turns the rule off)", v)
			}
			*p(c) = f
			return nil
		},
		get: func(c *Config) string { return strconv.FormatFloat(*p(c), 'g', -1, 64) }}
}

func boolKey(name, usage, def string, p func(*Config) *bool) key {
	return key{name: name, usage: usage, def: def, isBool: true, set: func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "true", "1", "yes", "on":
			*p(c) = true
		case "false", "0", "no", "off":
			*p(c) = false
		default:
			return fieldErr(name, "%q is not a boolean", v)
		}
		return nil
	},
		get: func(c *Config) string { return fmt.Sprint(*p(c)) }}
}

// chunkTargetDefault is denorm-chunk-target-kib's default. When no source
// sets the key, Load lowers it to the output cap, so a small
// --denorm-output-cap-mib alone is valid.
const chunkTargetDefault = "4MiB"

// shortDuration is d as a flag value: 2m rather than 2m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	s, _ = strings.CutSuffix(s, "m0s")
	if len(s) < len(d.String()) {
		s += "m"
	}
	return s
}

// keys is the single table of configuration keys and their defaults. A
// default that a library also needs (the S3 backend's) is that library's
// Default* constant, named here.
var keys = []key{
	stringKey("star", "the star (write cell) to work on", "", func(c *Config) *string { return &c.Star }),
	stringKey("database-url", "Postgres URL of the metastore (postgres://user:pass@host:5432/db)", "", func(c *Config) *string { return &c.DatabaseURL }),
	stringKey("holder", "lease holder name; empty: the host name and PID", "", func(c *Config) *string { return &c.Holder }),
	stringKey("stars", "serve as a fleet member for these stars: all, a comma-separated list, or a pattern (*, ?, [...]); empty: serve leads --star alone (docs/architecture.md#the-fleet)", "", func(c *Config) *string { return &c.Stars }),
	durationKey("fleet-grace", "a star unowned this long may be claimed by a member that is not its favourite; twice this long, by any member beyond its cap", "10s", func(c *Config) *time.Duration { return &c.FleetGrace }),
	durationKey("fleet-stable-for", "the fleet's live members must not have changed for this long before a star moves for balance", "30s", func(c *Config) *time.Duration { return &c.FleetStableFor }),
	durationKey("fleet-cooldown", "a star that moved is not moved for balance again within this; a star given up as stuck is not claimed again by the same member within this", "10m", func(c *Config) *time.Duration { return &c.FleetCooldown }),
	intKey("fleet-move-budget", "balance moves allowed fleet-wide per fleet-budget-window, at least (fleet-move-budget-pct of the stars when more)", "10", func(c *Config) *int64 { return &c.FleetMoveBudget }),
	intKey("fleet-move-budget-pct", "balance moves allowed fleet-wide per fleet-budget-window, in percent of the stars (at least fleet-move-budget)", "20", func(c *Config) *int64 { return &c.FleetMoveBudgetPct }),
	durationKey("fleet-budget-window", "the window of fleet-move-budget", "5m", func(c *Config) *time.Duration { return &c.FleetBudgetWindow }),
	durationKey("fleet-progress-bound", "a fleet member gives a star up as stuck when its cycle loop made no progress for the cycle interval plus this", "15m", func(c *Config) *time.Duration { return &c.FleetProgressBound }),
	intKey("fleet-cycles", "cycles a fleet member runs at once over all its stars (each with the settle caches and concurrency of one star)", "2", func(c *Config) *int64 { return &c.FleetCycles }),
	intKey("fleet-max-conns", "Postgres connections a fleet member opens at most, over its cycles, its leases and its LISTEN connection (0: derived from fleet-cycles, docs/operations.md#connections)", "0", func(c *Config) *int64 { return &c.FleetMaxConns }),
	stringKey("bucket", "the standard bucket: standard-class slots and every settled object", "nova", func(c *Config) *string { return &c.Bucket }),
	stringKey("key-prefix", "prefix of every object key: empty or ending in /", "", func(c *Config) *string { return &c.KeyPrefix }),
	stringKey("s3-endpoint", "S3 endpoint URL (empty: the SDK default for the region)", "", func(c *Config) *string { return &c.S3Endpoint }),
	stringKey("s3-region", "S3 region", objstore.DefaultRegion, func(c *Config) *string { return &c.S3Region }),
	boolKey("s3-path-style", "path-style S3 addressing", "false", func(c *Config) *bool { return &c.S3PathStyle }),
	stringKey("s3-ca-file", "PEM file of the certificate authorities trusted for the S3 endpoint, instead of the system's (and of AWS_CA_BUNDLE's)", "", func(c *Config) *string { return &c.S3CAFile }),
	optionalDurationKey("s3-attempt-timeout", "when set, the deadline of one S3 request attempt of every class whose s3-attempt-timeout-<class> is not set", func(c *Config) *time.Duration { return &c.S3AttemptTimeout }),
	attemptTimeoutKey(objstore.OpRead, "GetObject, HeadObject"),
	attemptTimeoutKey(objstore.OpWrite, "PutObject, UploadPart"),
	attemptTimeoutKey(objstore.OpCopy, "UploadPartCopy, copied server side before the answer"),
	attemptTimeoutKey(objstore.OpDelete, "DeleteObjects"),
	attemptTimeoutKey(objstore.OpList, "ListObjectsV2, ListParts, ListMultipartUploads"),
	attemptTimeoutKey(objstore.OpControl, "Create, Complete and AbortMultipartUpload, bucket settings; a completion can take minutes on AWS"),
	intKey("s3-max-attempts", "attempts per S3 request before the cycle gives up on it", strconv.Itoa(objstore.DefaultMaxAttempts), func(c *Config) *int64 { return &c.S3MaxAttempts }),
	{name: "s3-express-buckets", usage: "express bucket set: zone=bucket,... (one directory bucket per zone)", def: "",
		set: func(c *Config, v string) error {
			zb, err := ParseExpressBuckets(v)
			if err != nil {
				return err
			}
			c.S3ExpressBuckets = zb
			return nil
		},
		get: func(c *Config) string { return FormatExpressBuckets(c.S3ExpressBuckets) }},
	stringKey("location", "this auditor's zone: reads prefer its express bucket", "", func(c *Config) *string { return &c.Location }),
	stringKey("fs-root", "use the local file-backed store rooted here (each bucket a directory) instead of S3", "", func(c *Config) *string { return &c.FSRoot }),
	stringKey("data-dir", "local state: pending upload-part sidecars, and the tail cache's spill files", "data", func(c *Config) *string { return &c.DataDir }),
	stringKey("schedule", "cycle schedule (robfig/cron v3 spec)", "@every 30s", func(c *Config) *string { return &c.Schedule }),
	stringKey("http-addr", "address of /metrics, /healthz, /readyz, /status", "127.0.0.1:9479", func(c *Config) *string { return &c.HTTPAddr }),
	stringKey("web-config-file", "Prometheus web configuration file (exporter-toolkit: tls_server_config, basic_auth_users) of the http-addr endpoint; empty: plain HTTP without authentication", "", func(c *Config) *string { return &c.WebConfigFile }),
	boolKey("start-checks", "serve runs auditor doctor's checks at start: a failed one refuses to start, a warning is exported (nova_auditor_start_check_warning)", "true", func(c *Config) *bool { return &c.StartChecks }),
	boolKey("pprof", "serve the Go profiler at /debug/pprof/ on the http-addr (off: it exposes internals)", "false", func(c *Config) *bool { return &c.Pprof }),
	durationKey("lease-ttl", "lease duration", "30s", func(c *Config) *time.Duration { return &c.LeaseTTL }),
	durationKey("lease-renew", "lease renewal interval (less than lease-ttl)", "10s", func(c *Config) *time.Duration { return &c.LeaseRenew }),
	durationKey("shutdown-timeout", "how long a running cycle may finish after SIGTERM", "30s", func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
	durationKey("denorm-linger", "standard streams become due this long after their oldest unsettled ref", "5m", func(c *Config) *time.Duration { return &c.DenormLinger }),
	durationKey("denorm-age-cap", "standard streams must be settled within this age", "24h", func(c *Config) *time.Duration { return &c.DenormAgeCap }),
	durationKey("express-denorm-linger", "express streams become due this long after their oldest unsettled ref", "5m", func(c *Config) *time.Duration { return &c.ExpressDenormLinger }),
	durationKey("express-denorm-age-cap", "express streams must be settled within this age", "1h", func(c *Config) *time.Duration { return &c.ExpressDenormAgeCap }),
	fractionKey("denorm-tail-growth", "a stream whose standing tail is below the rule's floor (the server-side copy floor, or the output cap on a server whose assemblies are read back) waits past its linger until its unsettled bytes reach this fraction of the tail or the floor, or its age-cap deadline draws near (the tail-growth rule); 0: every stream settles at its linger", "1", func(c *Config) *float64 { return &c.DenormTailGrowth }),
	intKey("denorm-tail-cohorts", "the tail-growth rule's cohorts: the streams it let go wait for their cohort's turn (a turn a linger, cohorts in stream-ID order), at most until the rule's own deadline, so that the streams of a transit slot settle together and their chunks there are read in few GETs; 0 or 1: no cohorts", "8", func(c *Config) *int64 { return &c.DenormTailCohorts }),
	sizeKey("denorm-output-cap-mib", "settled object cap in MiB of content bytes", "256", MiB, func(c *Config) *int64 { return &c.DenormOutputCapMiB }),
	sizeKey("denorm-chunk-target-kib", "adjacent chunks are merged up to this many KiB of content; unset, the default follows a smaller output cap", chunkTargetDefault, KiB, func(c *Config) *int64 { return &c.DenormChunkTargetKiB }),
	intKey("settle-max-streams", "most streams settled per cycle", "10000", func(c *Config) *int64 { return &c.SettleMaxStreams }),
	sizeKey("settle-max-bytes", "most unsettled bytes taken per cycle", "64GiB", Bytes, func(c *Config) *int64 { return &c.SettleMaxBytes }),
	intKey("settle-concurrency", "streams settled at once (a cycle over many small streams is bound by S3 latency: see the runbook's sizing rule)", "16", func(c *Config) *int64 { return &c.SettleConcurrency }),
	intKey("settle-batch-streams", "small streams whose snapshot, publish intents and commits share metastore transactions (0: each stream a batch of one, with its own transactions)", "64", func(c *Config) *int64 { return &c.SettleBatchStreams }),
	sizeKey("settle-footer-cache-mib", "memory for the slot footers settle reads, in MiB, kept across cycles and shared by all the stars a process leads (a footer evicted and needed again costs two GETs)", "256", MiB, func(c *Config) *int64 { return &c.SettleFooterCacheMiB }),
	sizeKey("settle-slot-read-mib", "memory for the slot bytes a settle cycle reads together for its small streams, in MiB (0 reads every piece alone; a range that does not fit is read piece by piece)", "128", MiB, func(c *Config) *int64 { return &c.SettleSlotReadMiB }),
	sizeKey("settle-tail-cache-mib", "memory for the settled objects below the copy floor kept for their next tail rewrite, in MiB, across cycles (0 disables; a miss reads the tail in one GET)", "64", MiB, func(c *Config) *int64 { return &c.SettleTailCacheMiB }),
	sizeKey("settle-tail-spill-mib", "local disk under --data-dir (tails/<star>) for the tails the tail cache's memory evicts, in MiB (0 disables: what memory evicts is forgotten)", "1GiB", MiB, func(c *Config) *int64 { return &c.SettleTailSpillMiB }),
	intKey("copy-concurrency", "parts copied or uploaded at once per object", strconv.Itoa(objstore.DefaultCopyConcurrency), func(c *Config) *int64 { return &c.CopyConcurrency }),
	stringKey("verify", "assembly verification: checksum (server-side full-object CRC where supported) or readback", "checksum", func(c *Config) *string { return &c.Verify }),
	durationKey("reap-grace", "time between arming a reap and deleting", "5m", func(c *Config) *time.Duration { return &c.ReapGrace }),
	intKey("reap-batch-size", "most keys per DeleteObjects request and rows per retention or reap transaction (1-1000)", "1000", func(c *Config) *int64 { return &c.ReapBatchSize }),
	durationKey("stray-guard", "an object no metadata names (a stray) is swept, through the reap, only once older than this by the database clock; must exceed reap-grace", "3d", func(c *Config) *time.Duration { return &c.StrayGuard }),
	durationKey("stray-sweep-every", "how often the leader lists its streams' settled prefixes and its chain for strays and sweeps those past stray-guard (0: no scheduled sweep; run --once --sweep-strays forces one)", "24h", func(c *Config) *time.Duration { return &c.StraySweepEvery }),
	durationKey("idle-record-interval", "the run ledger records idle cycles (scheduled cycles that found nothing to do and ran no step) as one row per this, and at the first of each quiet spell (0: one row per idle cycle)", "5m", func(c *Config) *time.Duration { return &c.IdleRecordInterval }),
	durationKey("history-retention", "finished cycle runs and consumed admin requests older than this are pruned (the latest successful run is kept)", "30d", func(c *Config) *time.Duration { return &c.HistoryRetention }),
	durationKey("erasure-alert-after", "an erasure pending longer than this fires NovaAuditorErasurePending (exported as nova_auditor_erasure_pending_bound_seconds)", "24h", func(c *Config) *time.Duration { return &c.ErasureAlertAfter }),
	stringKey("log-format", "auto (tint on a terminal, JSON otherwise), text or json", "auto", func(c *Config) *string { return &c.LogFormat }),
	stringKey("log-level", "debug, info, warn or error", "info", func(c *Config) *string { return &c.LogLevel }),
}

func findKey(name string) (key, bool) {
	for _, k := range keys {
		if k.name == name {
			return k, true
		}
	}
	return key{}, false
}

// Key is one configuration key as a command line and config.example.yaml
// show it: its name (the flag's), usage and default; a Bool key is a flag
// that takes no value (--flag, or --flag=false).
type Key struct {
	Name, Usage, Default string
	Bool                 bool
	// Placeholder names the value's kind in help (--denorm-linger=DURATION):
	// DURATION, SIZE, N or STRING; "" for a boolean.
	Placeholder string
}

// Keys lists every key, in the table's order.
func Keys() []Key {
	out := make([]Key, len(keys))
	for i, k := range keys {
		out[i] = Key{Name: k.name, Usage: k.usage, Default: k.def, Bool: k.isBool, Placeholder: k.placeholder()}
	}
	return out
}
