// Package config is the one configuration of the auditor (and of novasim,
// which shares its database and storage keys): one struct, one table of
// defaults, one load with the precedence flag > environment
// (NOVA_AUDITOR_<FLAG>) > YAML file (--config) > default, and one Validate
// whose errors name the field. Secrets (the database URL's password, S3 keys)
// never appear in its errors or its log value. It parses no command line:
// internal/cli binds the keys as flags and hands Load what was set.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/nova/auditor/objstore"
)

// Config is everything the auditor can be told. Keys are the flag names.
type Config struct {
	Star        string
	DatabaseURL string
	Holder      string
	// Stars selects the stars of a fleet member (serve --stars): all, a
	// list, or a pattern; empty: serve leads Star alone.
	Stars string

	FleetGrace         time.Duration
	FleetStableFor     time.Duration
	FleetCooldown      time.Duration
	FleetMoveBudget    int64
	FleetMoveBudgetPct int64
	FleetBudgetWindow  time.Duration
	FleetProgressBound time.Duration
	FleetCycles        int64
	FleetMaxConns      int64

	Bucket      string
	KeyPrefix   string
	S3Endpoint  string
	S3Region    string
	S3PathStyle bool
	S3CAFile    string
	// S3AttemptTimeout, when set (not 0), is the deadline of every class
	// of S3AttemptTimeouts whose own key is not set (Load applies it).
	S3AttemptTimeout  time.Duration
	S3AttemptTimeouts objstore.AttemptTimeouts
	S3MaxAttempts     int64
	S3ExpressBuckets  []objstore.ZoneBucket
	Location          string
	FSRoot            string
	DataDir           string

	Schedule string
	HTTPAddr string
	// WebConfigFile is the Prometheus exporter-toolkit web configuration
	// (TLS, basic auth) of the http-addr endpoint; empty: plain HTTP.
	WebConfigFile string
	Pprof         bool
	// StartChecks: serve runs auditor doctor's checks before it takes any
	// work, and refuses to start when one fails.
	StartChecks     bool
	LeaseTTL        time.Duration
	LeaseRenew      time.Duration
	ShutdownTimeout time.Duration

	DenormLinger         time.Duration
	DenormAgeCap         time.Duration
	ExpressDenormLinger  time.Duration
	ExpressDenormAgeCap  time.Duration
	DenormTailGrowth     float64 // the tail-growth rule's fraction (catalog.DuePolicy.TailGrowth); 0: off
	DenormTailCohorts    int64   // the tail-growth rule's cohorts (catalog.DuePolicy.Cohorts); 0 or 1: none
	DenormOutputCapMiB   int64
	DenormChunkTargetKiB int64
	SettleMaxStreams     int64
	SettleMaxBytes       int64
	SettleConcurrency    int64
	SettleBatchStreams   int64
	SettleFooterCacheMiB int64
	SettleSlotReadMiB    int64
	SettleTailCacheMiB   int64
	SettleTailSpillMiB   int64
	CopyConcurrency      int64
	Verify               string
	ReapGrace            time.Duration
	ReapBatchSize        int64
	StrayGuard           time.Duration
	StraySweepEvery      time.Duration
	HistoryRetention     time.Duration
	IdleRecordInterval   time.Duration
	ErasureAlertAfter    time.Duration
	LogFormat            string
	LogLevel             string
}

// Error is a configuration error naming the field (the flag name).
type Error struct {
	Field string
	Msg   string
}

func (e *Error) Error() string { return e.Field + ": " + e.Msg }

// ErrConfig marks every configuration error (errors.Is), so commands exit 2.
var ErrConfig = errors.New("configuration error")

func (e *Error) Unwrap() error { return ErrConfig }

func fieldErr(field, format string, args ...any) error {
	return &Error{Field: field, Msg: fmt.Sprintf(format, args...)}
}

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

// Unit is the unit a size is kept in: Bytes, KiB or MiB.
type Unit int64

// The units of size keys, by their names' suffix (none, -kib, -mib).
const (
	Bytes Unit = 1
	KiB   Unit = 1 << 10
	MiB   Unit = 1 << 20
)

func (u Unit) plural() string {
	switch u {
	case KiB:
		return "KiB"
	case MiB:
		return "MiB"
	}
	return "bytes"
}

// sizeUnits are the units a size may carry. They are all binary: K, M, G
// and T are KiB, MiB, GiB and TiB (1G = 2^30 bytes, as in the -mib and
// -kib keys), not the decimal 10^9 of SI; the decimal spellings (KB, MB,
// GB) are refused as ambiguous.
var sizeUnits = map[string]int64{
	"K": 1 << 10, "KiB": 1 << 10,
	"M": 1 << 20, "MiB": 1 << 20,
	"G": 1 << 30, "GiB": 1 << 30,
	"T": 1 << 40, "TiB": 1 << 40,
}

// maxSize bounds every size, in bytes, and every plain integer.
const maxSize = 1 << 62

// ParseSize is the one syntax of sizes and counts, in configuration keys
// and command-line flags alike: a plain integer, or one with a binary unit
// (K or KiB, M or MiB, G or GiB, T or TiB: G is 2^30), at least 0 and at
// most 2^62.
func ParseSize(v string) (int64, error) { return ParseSizeIn(v, Bytes) }

// ParseSizeIn parses a size kept in unit: a plain integer is already in
// unit; an integer with a unit (see ParseSize) is converted to unit and
// must be a whole number of it.
func ParseSizeIn(v string, unit Unit) (int64, error) {
	s := strings.TrimSpace(v)
	i := 0
	if i < len(s) && (s[i] == '-' || s[i] == '+') {
		i++
	}
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	num, suffix := s[:i], strings.TrimSpace(s[i:])
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(num, "-") {
			return 0, fmt.Errorf("%s is too large", v)
		}
		return 0, fmt.Errorf("%q is not an integer (like 512, 64KiB or 8M)", v)
	}
	if n < 0 {
		return 0, fmt.Errorf("%s is negative", v)
	}
	if suffix == "" {
		if n > maxSize {
			return 0, fmt.Errorf("%s is too large", v)
		}
		return n, nil
	}
	mult, ok := sizeUnits[suffix]
	if !ok && strings.Trim(suffix, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ") != "" {
		return 0, fmt.Errorf("%q is not an integer (like 512, 64KiB or 8M)", v)
	}
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (K or KiB, M or MiB, G or GiB, T or TiB; all binary)", v, suffix)
	}
	if n > maxSize/mult {
		return 0, fmt.Errorf("%s is too large", v)
	}
	b := n * mult
	if b%int64(unit) != 0 {
		return 0, fmt.Errorf("%s is not a whole number of %s", v, unit.plural())
	}
	return b / int64(unit), nil
}

// durationUnits are the units of ParseDuration, in nanoseconds: Go's,
// and days and weeks.
var durationUnits = map[string]float64{
	"ns": 1, "us": 1e3, "µs": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "m": 60e9, "h": 3600e9,
	"d": 24 * 3600e9, "w": 7 * 24 * 3600e9,
}

// ParseDuration is the one syntax of durations in configuration keys and
// command-line flags: Go's (300ms, 30s, 5m, 1h30m) with days (d, 24h) and
// weeks (w, 7d) besides, alone or combined (30d, 1d12h, 2w, 1.5d). A day
// is 24 hours exactly: durations here are spans of elapsed time, not
// calendar days.
func ParseDuration(v string) (time.Duration, error) {
	bad := fmt.Errorf("%q is not a duration (like 30s, 5m, 24h, 30d or 1d12h)", v)
	s := strings.TrimSpace(v)
	neg := false
	if s != "" && (s[0] == '-' || s[0] == '+') {
		neg, s = s[0] == '-', s[1:]
	}
	if s == "0" {
		return 0, nil
	}
	if s == "" {
		return 0, bad
	}
	isNum := func(c byte) bool { return c >= '0' && c <= '9' || c == '.' }
	var total time.Duration
	for s != "" {
		i := 0
		for i < len(s) && isNum(s[i]) {
			i++
		}
		j := i
		for j < len(s) && !isNum(s[j]) {
			j++
		}
		num, unit := s[:i], s[i:j]
		s = s[j:]
		f, err := strconv.ParseFloat(num, 64)
		mult, ok := durationUnits[unit]
		if err != nil || !ok {
			return 0, bad
		}
		if f*mult >= math.MaxInt64 {
			return 0, fmt.Errorf("%s is too long", v)
		}
		var d time.Duration
		switch unit {
		case "d", "w":
			per := time.Duration(24)
			if unit == "w" {
				per *= 7
			}
			d, err = time.ParseDuration(num + "h")
			if d > math.MaxInt64/per {
				return 0, fmt.Errorf("%s is too long", v)
			}
			d *= per
		default:
			d, err = time.ParseDuration(num + unit)
		}
		if err != nil {
			return 0, bad
		}
		if total > math.MaxInt64-d {
			return 0, fmt.Errorf("%s is too long", v)
		}
		total += d
	}
	if neg {
		total = -total
	}
	return total, nil
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
	intKey("settle-batch-streams", "small streams whose snapshot, publish intents and commits share metastore transactions (0: each stream its own, as before batching)", "64", func(c *Config) *int64 { return &c.SettleBatchStreams }),
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

// Defaults returns the configuration with every default applied.
func Defaults() Config {
	var c Config
	for _, k := range keys {
		if err := k.set(&c, k.def); err != nil {
			panic("config: bad default for " + k.name + ": " + err.Error()) // a programming error caught by tests
		}
	}
	return c
}

// EnvName is the environment variable of a key: NOVA_AUDITOR_<FLAG>.
func EnvName(name string) string {
	return "NOVA_AUDITOR_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// Sources are where a configuration comes from: the YAML file (--config),
// the environment (Getenv of EnvName) and the keys set on the command line.
// Only, when not empty, is the keys a command takes (novasim takes the
// database and storage ones); a file naming another is refused.
type Sources struct {
	File   string
	Getenv func(string) string
	Flags  map[string]string // key name -> value, each checked by CheckValue when it was set
	Only   []string
}

// CheckValue reports whether v is a valid value of the key name, so a
// command line can refuse a bad flag as it parses it.
func CheckValue(name, v string) error {
	k, ok := findKey(name)
	if !ok {
		return fieldErr(name, "not a configuration key")
	}
	var probe Config
	return k.set(&probe, v)
}

// Load applies the defaults, then the file, then the environment, then the
// flags, and validates the result.
func Load(src Sources) (Config, error) {
	var only map[string]bool
	if len(src.Only) > 0 {
		only = map[string]bool{}
		for _, n := range src.Only {
			only[n] = true
		}
	}
	c := Defaults()
	set := map[string]bool{} // keys some source gave a value
	if src.File != "" {
		if err := applyFile(&c, src.File, only, set); err != nil {
			return c, err
		}
	}
	for _, k := range keys {
		if only != nil && !only[k.name] || src.Getenv == nil {
			continue
		}
		if v := src.Getenv(EnvName(k.name)); v != "" {
			if err := k.set(&c, v); err != nil {
				return c, fmt.Errorf("%s: %w", EnvName(k.name), err)
			}
			set[k.name] = true
		}
	}
	for _, k := range keys {
		if v, ok := src.Flags[k.name]; ok {
			if err := k.set(&c, v); err != nil {
				return c, err
			}
			set[k.name] = true
		}
	}
	if c.S3AttemptTimeout > 0 {
		for _, class := range objstore.OpClasses() {
			if !set[attemptTimeoutPrefix+string(class)] {
				*c.S3AttemptTimeouts.Field(class) = c.S3AttemptTimeout
			}
		}
	}
	if !set["denorm-chunk-target-kib"] && c.DenormOutputCapMiB >= 1 {
		c.DenormChunkTargetKiB = min(c.DenormChunkTargetKiB, c.DenormOutputCapMiB*1024)
	}
	if c.Holder == "" {
		host, _ := os.Hostname()
		c.Holder = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	return c, c.Validate()
}

func applyFile(c *Config, path string, only map[string]bool, set map[string]bool) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fieldErr("config", "read %s: %v", path, err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fieldErr("config", "parse %s: %v", path, err)
	}
	names := make([]string, 0, len(doc))
	for n := range doc {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		k, ok := findKey(n)
		if !ok || (only != nil && !only[n]) {
			if s := Suggest(n, keyNames()); s != "" && s != n {
				return fieldErr(n, "unknown key in %s (did you mean %q?)", path, s)
			}
			return fieldErr(n, "unknown key in %s", path)
		}
		v, err := scalar(doc[n])
		if err != nil {
			return fieldErr(n, "%v", err)
		}
		if err := k.set(c, v); err != nil {
			return err
		}
		set[n] = true
	}
	return nil
}

// scalar turns a YAML value into the flag string of its key. A mapping is
// accepted for s3-express-buckets (zone: bucket).
func scalar(v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", nil
	case string:
		return x, nil
	case bool, int, int64, uint64, float64:
		return fmt.Sprint(x), nil
	case map[string]any:
		zones := make([]string, 0, len(x))
		for z := range x {
			zones = append(zones, z)
		}
		sort.Strings(zones)
		parts := make([]string, 0, len(zones))
		for _, z := range zones {
			b, ok := x[z].(string)
			if !ok {
				return "", fmt.Errorf("zone %q: bucket must be a string", z)
			}
			parts = append(parts, z+"="+b)
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("unsupported value %v", v)
	}
}

// ParseExpressBuckets parses zone=bucket,zone=bucket.
func ParseExpressBuckets(v string) ([]objstore.ZoneBucket, error) {
	if strings.TrimSpace(v) == "" {
		return nil, nil
	}
	var out []objstore.ZoneBucket
	seen := map[string]bool{}
	for _, part := range strings.Split(v, ",") {
		z, b, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fieldErr("s3-express-buckets", "%q is not zone=bucket", part)
		}
		if z == "" || b == "" {
			return nil, fieldErr("s3-express-buckets", "%q has an empty zone or bucket", part)
		}
		if seen[z] {
			return nil, fieldErr("s3-express-buckets", "zone %q given twice", z)
		}
		seen[z] = true
		out = append(out, objstore.ZoneBucket{Zone: z, Bucket: b})
	}
	return out, nil
}

// FormatExpressBuckets is the inverse of ParseExpressBuckets.
func FormatExpressBuckets(zb []objstore.ZoneBucket) string {
	parts := make([]string, len(zb))
	for i, x := range zb {
		parts[i] = x.Zone + "=" + x.Bucket
	}
	return strings.Join(parts, ",")
}

// LogValue logs the configuration without secrets.
func (c Config) LogValue() slog.Value {
	attrs := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		v := k.get(&c)
		if k.name == "database-url" {
			v = RedactURL(v)
		}
		attrs = append(attrs, slog.String(k.name, v))
	}
	return slog.GroupValue(attrs...)
}

// Get returns the string form of a key's value (for docs and tests).
func (c Config) Get(name string) (string, bool) {
	k, ok := findKey(name)
	if !ok {
		return "", false
	}
	return k.get(&c), true
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
