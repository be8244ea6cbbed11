package config

import (
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/robfig/cron/v3"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/objstore"
)

var (
	starRE     = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)
	s3BucketRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)
	zoneRE     = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
	cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
)

// ParseSchedule parses a --schedule value the way the daemon will.
func ParseSchedule(spec string) (cron.Schedule, error) { return cronParser.Parse(spec) }

// Validate checks every value that is set; Require checks presence.
func (c Config) Validate() error {
	var errs []error
	add := func(field, format string, args ...any) { errs = append(errs, fieldErr(field, format, args...)) }
	if c.Star != "" && !starRE.MatchString(c.Star) {
		add("star", "%q must match [a-z0-9][a-z0-9-]{0,62}", c.Star)
	}
	if c.DatabaseURL != "" {
		// pgconn reads a URL of another scheme as a key=value DSN (one
		// key "mysql://u@h/x?password", the local socket), so it would
		// not refuse every one: the scheme is checked here.
		if scheme, _, _ := strings.Cut(c.DatabaseURL, "://"); isURL(c.DatabaseURL) && scheme != "postgres" && scheme != "postgresql" {
			add("database-url", "%s: the scheme must be postgres:// or postgresql:// (or give a key=value DSN)", RedactURL(c.DatabaseURL))
		} else if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
			add("database-url", "cannot parse %s: %s", RedactURL(c.DatabaseURL), c.Scrub(err.Error()))
		}
	}
	if !s3BucketRE.MatchString(c.Bucket) {
		add("bucket", "%q is not a valid bucket name (3-63 of a-z, 0-9, '.', '-')", c.Bucket)
	}
	if c.KeyPrefix != "" && (!strings.HasSuffix(c.KeyPrefix, "/") || strings.HasPrefix(c.KeyPrefix, "/") || strings.Contains(c.KeyPrefix, "//")) {
		add("key-prefix", "%q must be empty or end in '/' (no leading '/', no empty segment)", c.KeyPrefix)
	}
	if c.FSRoot != "" && c.S3Endpoint != "" {
		add("fs-root", "set either fs-root (file-backed store) or s3-endpoint, not both")
	}
	for _, zb := range c.S3ExpressBuckets {
		if !zoneRE.MatchString(zb.Zone) {
			add("s3-express-buckets", "zone %q is not a valid zone name", zb.Zone)
		}
		if !s3BucketRE.MatchString(zb.Bucket) && !strings.HasSuffix(zb.Bucket, "--x-s3") {
			add("s3-express-buckets", "bucket %q of zone %q is not a valid bucket name", zb.Bucket, zb.Zone)
		}
	}
	if len(c.S3ExpressBuckets) > 0 {
		found := false
		for _, zb := range c.S3ExpressBuckets {
			found = found || zb.Zone == c.Location
		}
		if !found {
			add("location", "%q is not one of the zones of s3-express-buckets (%s)", c.Location, FormatExpressBuckets(c.S3ExpressBuckets))
		}
	}
	if _, err := ParseSchedule(c.Schedule); err != nil {
		add("schedule", "%q: %v", c.Schedule, err)
	}
	if c.LeaseTTL <= 0 {
		add("lease-ttl", "must be positive")
	}
	if c.LeaseRenew <= 0 || c.LeaseRenew >= c.LeaseTTL {
		add("lease-renew", "%s must be positive and less than lease-ttl (%s)", c.LeaseRenew, c.LeaseTTL)
	}
	if c.DenormAgeCap < c.DenormLinger {
		add("denorm-age-cap", "%s is shorter than denorm-linger (%s)", c.DenormAgeCap, c.DenormLinger)
	}
	if c.ExpressDenormAgeCap < c.ExpressDenormLinger {
		add("express-denorm-age-cap", "%s is shorter than express-denorm-linger (%s)", c.ExpressDenormAgeCap, c.ExpressDenormLinger)
	}
	if c.DenormTailCohorts < 0 || c.DenormTailCohorts > catalog.MaxCohorts {
		add("denorm-tail-cohorts", "%d must be between 0 and %d", c.DenormTailCohorts, catalog.MaxCohorts)
	}
	if c.DenormOutputCapMiB < 1 || c.DenormOutputCapMiB > 5*1024 {
		add("denorm-output-cap-mib", "%d must be between 1 and 5120", c.DenormOutputCapMiB)
	}
	if c.DenormChunkTargetKiB < 1 || c.DenormChunkTargetKiB > c.DenormOutputCapMiB*1024 {
		add("denorm-chunk-target-kib", "%d must be between 1 and the output cap (%d KiB)", c.DenormChunkTargetKiB, c.DenormOutputCapMiB*1024)
	}
	for name, v := range map[string]int64{"settle-max-streams": c.SettleMaxStreams, "settle-max-bytes": c.SettleMaxBytes,
		"settle-concurrency": c.SettleConcurrency, "settle-footer-cache-mib": c.SettleFooterCacheMiB,
		"copy-concurrency": c.CopyConcurrency, "s3-max-attempts": c.S3MaxAttempts,
		"fleet-move-budget": c.FleetMoveBudget, "fleet-cycles": c.FleetCycles} {
		if v < 1 {
			add(name, "%d must be at least 1", v)
		}
	}
	for name, d := range map[string]time.Duration{"fleet-grace": c.FleetGrace, "fleet-stable-for": c.FleetStableFor,
		"fleet-cooldown": c.FleetCooldown, "fleet-budget-window": c.FleetBudgetWindow, "fleet-progress-bound": c.FleetProgressBound} {
		if d <= 0 {
			add(name, "%s must be positive", d)
		}
	}
	if c.FleetMoveBudgetPct < 0 || c.FleetMoveBudgetPct > 100 {
		add("fleet-move-budget-pct", "%d must be between 0 and 100", c.FleetMoveBudgetPct)
	}
	if c.IdleRecordInterval < 0 {
		add("idle-record-interval", "%s must be 0 or more", c.IdleRecordInterval)
	}
	if c.FleetMaxConns < 0 {
		add("fleet-max-conns", "%d must be 0 (derived from fleet-cycles) or more", c.FleetMaxConns)
	}
	if c.Stars != "" && c.Star != "" {
		add("stars", "set either stars (a fleet member) or star (one star), not both")
	}
	if c.SettleBatchStreams < 0 || c.SettleBatchStreams > 1000 {
		add("settle-batch-streams", "%d must be between 0 and 1000", c.SettleBatchStreams)
	}
	if c.SettleFooterCacheMiB > 1<<20 {
		add("settle-footer-cache-mib", "%d must be at most 1048576 (1 TiB)", c.SettleFooterCacheMiB)
	}
	for name, v := range map[string]int64{"settle-slot-read-mib": c.SettleSlotReadMiB, "settle-tail-cache-mib": c.SettleTailCacheMiB, "settle-tail-spill-mib": c.SettleTailSpillMiB} {
		if v < 0 || v > 1<<20 {
			add(name, "%d must be between 0 and 1048576 (1 TiB)", v)
		}
	}
	if c.ReapBatchSize < 1 || c.ReapBatchSize > 1000 {
		add("reap-batch-size", "%d must be between 1 and 1000 (the DeleteObjects limit)", c.ReapBatchSize)
	}
	if c.StrayGuard <= c.ReapGrace {
		add("stray-guard", "%s must exceed reap-grace (%s): a stray is armed due at once, so the guard is all the time it stands", c.StrayGuard, c.ReapGrace)
	}
	if c.HistoryRetention < time.Hour {
		add("history-retention", "%s must be at least 1h", c.HistoryRetention)
	}
	if c.ErasureAlertAfter <= 0 {
		add("erasure-alert-after", "%s must be positive", c.ErasureAlertAfter)
	}
	if c.S3AttemptTimeout < 0 {
		add("s3-attempt-timeout", "%s must be positive (or empty)", c.S3AttemptTimeout)
	}
	for _, class := range objstore.OpClasses() {
		if d := c.S3AttemptTimeouts.Of(class); d <= 0 {
			add(attemptTimeoutPrefix+string(class), "%s must be positive", d)
		}
	}
	if c.Verify != "checksum" && c.Verify != "readback" {
		add("verify", "%q must be checksum or readback", c.Verify)
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		add("log-format", "%q must be auto, text or json", c.LogFormat)
	}
	switch strings.ToLower(c.LogLevel) {
	case "debug", "info", "warn", "error":
	default:
		add("log-level", "%q must be debug, info, warn or error", c.LogLevel)
	}
	if c.DataDir == "" {
		add("data-dir", "must not be empty")
	}
	return errors.Join(errs...)
}

// Require checks that the named keys are set.
func (c Config) Require(names ...string) error {
	var errs []error
	for _, n := range names {
		if v, ok := c.Get(n); ok && v == "" {
			errs = append(errs, fieldErr(n, "is required (flag --%s, env %s or the config file)", n, EnvName(n)))
		}
	}
	return errors.Join(errs...)
}
