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
	"os"
	"sort"
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
