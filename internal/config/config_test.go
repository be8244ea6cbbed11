package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/objstore"
)

// load is config.Load of flags (key -> value, as a command line sets
// them), an environment and a file's text.
func load(t *testing.T, flags map[string]string, env map[string]string, file string) (config.Config, error) {
	t.Helper()
	src := config.Sources{Flags: flags, Getenv: func(k string) string { return env[k] }}
	if file != "" {
		src.File = filepath.Join(t.TempDir(), "c.yaml")
		if err := os.WriteFile(src.File, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return config.Load(src)
}

func TestDefaultsAreValidAndMatchTheSeed(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if c.DenormLinger != 5*time.Minute || c.DenormAgeCap != 24*time.Hour || c.ExpressDenormLinger != 5*time.Minute ||
		c.ExpressDenormAgeCap != time.Hour || c.DenormOutputCapMiB != 256 || c.DenormChunkTargetKiB != 4096 ||
		c.Schedule != "@every 30s" || c.HTTPAddr != "127.0.0.1:9479" || c.ReapGrace != 5*time.Minute {
		t.Fatalf("defaults: %+v", c)
	}
	// the defaults written with units (4MiB, 1GiB, 3d, 30d) are the values
	// they were as plain numbers and hours
	if c.DenormChunkTargetKiB != 4096 || c.SettleTailSpillMiB != 1024 || c.SettleMaxBytes != 64<<30 ||
		c.StrayGuard != 72*time.Hour || c.HistoryRetention != 720*time.Hour {
		t.Fatalf("defaults with units: %+v", c)
	}
}

func TestPrecedenceFlagEnvFileDefault(t *testing.T) {
	file := "denorm-linger: 1m\nreap-grace: 2m\nschedule: '@every 1h'\ns3-express-buckets:\n  use1-az4: b-az4\n  use1-az5: b-az5\nlocation: use1-az4\n"
	env := map[string]string{"NOVA_AUDITOR_REAP_GRACE": "3m", "NOVA_AUDITOR_SCHEDULE": "@every 2h"}
	c, err := load(t, map[string]string{"schedule": "@every 3h"}, env, file)
	if err != nil {
		t.Fatal(err)
	}
	if c.DenormLinger != time.Minute { // file beats default
		t.Errorf("denorm-linger = %v, want the file's 1m", c.DenormLinger)
	}
	if c.ReapGrace != 3*time.Minute { // env beats file
		t.Errorf("reap-grace = %v, want the env's 3m", c.ReapGrace)
	}
	if c.Schedule != "@every 3h" { // flag beats env
		t.Errorf("schedule = %q, want the flag's", c.Schedule)
	}
	if got := config.FormatExpressBuckets(c.S3ExpressBuckets); got != "use1-az4=b-az4,use1-az5=b-az5" {
		t.Errorf("express buckets from a YAML mapping: %q", got)
	}
}

func TestBadConfigurationNamesTheField(t *testing.T) {
	cases := []struct {
		name  string
		flags map[string]string
		env   map[string]string
		file  string
		field string
	}{
		{"unknown key in file", nil, nil, "denorm-lingr: 5m\n", "denorm-lingr"},
		{"negative duration", map[string]string{"reap-grace": "-1s"}, nil, "", "reap-grace"},
		{"negative duration in env", nil, map[string]string{"NOVA_AUDITOR_DENORM_LINGER": "-5m"}, "", "denorm-linger"},
		{"not a duration", map[string]string{"lease-ttl": "soon"}, nil, "", "lease-ttl"},
		{"express without =", map[string]string{"s3-express-buckets": "use1-az4"}, nil, "", "s3-express-buckets"},
		{"express zone twice", map[string]string{"s3-express-buckets": "a=b1x,a=b2x", "location": "a"}, nil, "", "s3-express-buckets"},
		{"location outside the set", map[string]string{"s3-express-buckets": "a=bucket-a", "location": "z"}, nil, "", "location"},
		{"bad star", map[string]string{"star": "Star_1"}, nil, "", "star"},
		{"star too long", map[string]string{"star": strings.Repeat("a", 64)}, nil, "", "star"},
		{"bad schedule", map[string]string{"schedule": "every now and then"}, nil, "", "schedule"},
		{"renew not below ttl", map[string]string{"lease-ttl": "10s", "lease-renew": "10s"}, nil, "", "lease-renew"},
		{"cap zero", map[string]string{"denorm-output-cap-mib": "0"}, nil, "", "denorm-output-cap-mib"},
		{"bad verify", map[string]string{"verify": "hope"}, nil, "", "verify"},
		{"zero attempt timeout", map[string]string{"s3-attempt-timeout": "0s"}, nil, "", "s3-attempt-timeout"},
		{"no attempts", nil, map[string]string{"NOVA_AUDITOR_S3_MAX_ATTEMPTS": "0"}, "", "s3-max-attempts"},
		{"reap batch over the S3 limit", map[string]string{"reap-batch-size": "1001"}, nil, "", "reap-batch-size"},
		{"stray guard not above the reap grace", map[string]string{"stray-guard": "5m"}, nil, "", "stray-guard"},
		{"stray guard below a grace from the file", nil, nil, "reap-grace: 100h\n", "stray-guard"},
		{"negative sweep interval", nil, map[string]string{"NOVA_AUDITOR_STRAY_SWEEP_EVERY": "-1h"}, "", "stray-sweep-every"},
		{"zero erasure alert bound", map[string]string{"erasure-alert-after": "0s"}, nil, "", "erasure-alert-after"},
		{"malformed erasure alert bound", nil, map[string]string{"NOVA_AUDITOR_ERASURE_ALERT_AFTER": "a day"}, "", "erasure-alert-after"},
		{"bad log format", map[string]string{"log-format": "xml"}, nil, "", "log-format"},
		{"bad key prefix", map[string]string{"key-prefix": "nova"}, nil, "", "key-prefix"},
		{"both stores", map[string]string{"fs-root": "/tmp/x", "s3-endpoint": "http://127.0.0.1:1"}, nil, "", "fs-root"},
		{"unparsable database url", map[string]string{"database-url": "postgres://u:pw@[::1"}, nil, "", "database-url"},
		{"database CA file missing", map[string]string{"database-url": "postgres://u:pw@db/nova?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem"}, nil, "", "database-url"},
		{"zero read attempt deadline", map[string]string{"s3-attempt-timeout-read": "0s"}, nil, "", "s3-attempt-timeout-read"},
		{"zero copy attempt deadline in a file", nil, nil, "s3-attempt-timeout-copy: 0s\n", "s3-attempt-timeout-copy"},
		{"negative control attempt deadline", nil, map[string]string{"NOVA_AUDITOR_S3_ATTEMPT_TIMEOUT_CONTROL": "-1m"}, "", "s3-attempt-timeout-control"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.flags, tc.env, tc.file)
			if err == nil {
				t.Fatal("accepted")
			}
			if !errors.Is(err, config.ErrConfig) {
				t.Fatalf("%v is not a configuration error", err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name %s", err, tc.field)
			}
		})
	}
}

func TestSecretsNeverShown(t *testing.T) {
	c, err := load(t, map[string]string{"database-url": "postgres://nova:hunter2secret@db:5432/nova"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range c.LogValue().Group() {
		b.WriteString(a.String())
	}
	if strings.Contains(b.String(), "hunter2secret") || !strings.Contains(b.String(), "nova:xxxxx@db") {
		t.Fatalf("log value: %s", b.String())
	}
	if got := c.Scrub("pq: password hunter2secret rejected"); strings.Contains(got, "hunter2secret") {
		t.Fatalf("Scrub left the password: %s", got)
	}
	if got := config.RedactURL("host=db user=nova password=hunter2secret"); strings.Contains(got, "hunter2secret") {
		t.Fatalf("RedactURL of a DSN: %s", got)
	}
}

// TestSecretsOfOtherSchemesNeverShown: a database URL of a scheme other
// than postgres or postgresql is refused (a configuration error naming
// database-url), and neither the refusal, RedactURL, Scrub nor the log
// value shows its password.
func TestSecretsOfOtherSchemesNeverShown(t *testing.T) {
	for _, u := range []string{
		"mysql://nova:hunter2secret@db/nova",
		"mysql://nova@db/nova?password=hunter2secret",
		"redis://:hunter2secret@db:6379/0",
		"pg+ssl://nova:hunter2secret@db/nova",
	} {
		_, err := load(t, map[string]string{"database-url": u}, nil, "")
		if err == nil || !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "database-url") {
			t.Errorf("database-url %s: %v, want a configuration error naming database-url", u, err)
			continue
		}
		c := config.Config{DatabaseURL: u}
		var logged strings.Builder
		for _, a := range c.LogValue().Group() {
			logged.WriteString(a.String())
		}
		for what, got := range map[string]string{
			"the refusal": err.Error(),
			"RedactURL":   config.RedactURL(u),
			"Scrub":       c.Scrub("connect " + u + " rejected"),
			"LogValue":    logged.String(),
		} {
			if strings.Contains(got, "hunter2secret") || !strings.Contains(got, "db") {
				t.Errorf("%s of %s: %s, want the host shown and the password hidden", what, u, got)
			}
		}
	}
}

// TestSecretsOfTLSURLsNeverShown: a metastore URL with TLS parameters
// (sslmode, sslrootcert, sslcert, sslkey shown; sslpassword, the client
// key's passphrase, hidden like the password), a password given as a
// parameter, a key=value DSN with quoted values, and a URL that does not
// parse: RedactURL, Scrub and the log value show none of the secrets and
// keep the rest.
func TestSecretsOfTLSURLsNeverShown(t *testing.T) {
	for _, u := range []string{
		"postgres://nova:hunter2secret@db:5432/nova?sslmode=verify-full&sslrootcert=/etc/nova/ca.pem&sslcert=/etc/nova/client.crt&sslkey=/etc/nova/client.key&sslpassword=keyphrase9",
		"postgresql://nova@db/nova?password=hunter2secret&sslmode=verify-full&sslrootcert=/etc/nova/ca.pem&sslpassword=keyphrase9",
		"host=db user=nova password='hunter2secret x' sslmode=verify-full sslrootcert=/etc/nova/ca.pem sslpassword = keyphrase9",
		"postgres://nova:hunter2secret%zz@db/nova?sslmode=verify-full&sslrootcert=/etc/nova/ca.pem&sslpassword=keyphrase9",
	} {
		c := config.Config{DatabaseURL: u}
		var logged strings.Builder
		for _, a := range c.LogValue().Group() {
			logged.WriteString(a.String())
		}
		for what, got := range map[string]string{
			"RedactURL": config.RedactURL(u),
			"Scrub":     c.Scrub("connect " + u + " rejected"),
			"LogValue":  logged.String(),
		} {
			if strings.Contains(got, "hunter2secret") || strings.Contains(got, "keyphrase9") {
				t.Errorf("%s of %s shows a secret: %s", what, u, got)
			}
			if !strings.Contains(got, "db") || !strings.Contains(got, "xxxxx") {
				t.Errorf("%s of %s: %s, want the host and the secrets hidden", what, u, got)
			}
			if what == "RedactURL" && !strings.Contains(u, "%zz") &&
				(!strings.Contains(got, "sslmode=verify-full") || !strings.Contains(got, "sslrootcert=")) {
				t.Errorf("RedactURL of %s: %s, want the TLS settings shown", u, got)
			}
		}
	}
	// such a URL loads, its CA file read where the server's certificate is
	// checked (pgx at parse)
	ca := testenv.NewCA(t).File(t)
	u := "postgres://nova:hunter2secret@db:5432/nova?sslmode=verify-full&sslrootcert=" + ca
	if _, err := load(t, map[string]string{"database-url": u}, nil, ""); err != nil {
		t.Fatalf("a verify-full URL with a CA file: %v", err)
	}
}

// TestAttemptTimeouts: each class's deadline defaults to the backend's
// default; s3-attempt-timeout, when set, is the deadline of every class
// whose own key is not set, from whatever source; a class's key wins over
// it whatever their sources.
func TestAttemptTimeouts(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil || c.S3AttemptTimeouts != objstore.DefaultAttemptTimeouts() || c.S3AttemptTimeout != 0 {
		t.Fatalf("defaults: %+v (s3-attempt-timeout %v), %v", c.S3AttemptTimeouts, c.S3AttemptTimeout, err)
	}
	c, err = load(t, nil, map[string]string{"NOVA_AUDITOR_S3_ATTEMPT_TIMEOUT": "30s"}, "")
	if err != nil || c.S3AttemptTimeouts != objstore.UniformAttemptTimeouts(30*time.Second) {
		t.Fatalf("s3-attempt-timeout alone: %+v, %v", c.S3AttemptTimeouts, err)
	}
	c, err = load(t, map[string]string{"s3-attempt-timeout-list": "5s"}, map[string]string{"NOVA_AUDITOR_S3_ATTEMPT_TIMEOUT": "30s"},
		"s3-attempt-timeout: 1m\ns3-attempt-timeout-copy: 20m\n")
	want := objstore.UniformAttemptTimeouts(30 * time.Second)
	want.Copy, want.List = 20*time.Minute, 5*time.Second
	if err != nil || c.S3AttemptTimeouts != want {
		t.Fatalf("class keys over s3-attempt-timeout: %+v, want %+v (%v)", c.S3AttemptTimeouts, want, err)
	}
	if v, _ := c.Get("s3-attempt-timeout-read"); v != "30s" {
		t.Fatalf("s3-attempt-timeout-read shows %q", v)
	}
}

func TestRequire(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	err = c.Require("star", "database-url")
	if err == nil || !strings.Contains(err.Error(), "star") || !strings.Contains(err.Error(), "database-url") {
		t.Fatalf("Require: %v", err)
	}
}

// TestExampleDocumentsEveryKey keeps config.example.yaml complete: every key
// appears with its default.
func TestExampleDocumentsEveryKey(t *testing.T) {
	b, err := os.ReadFile("../../config.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, k := range config.Keys() {
		re := regexp.MustCompile(`(?m)^#? ?` + regexp.QuoteMeta(k.Name) + `: ?(.*)$`)
		m := re.FindStringSubmatch(doc)
		if m == nil {
			t.Errorf("config.example.yaml does not document %s", k.Name)
			continue
		}
		if got := strings.Trim(m[1], `"' `); got != k.Default {
			t.Errorf("config.example.yaml: %s: %q, default is %q", k.Name, got, k.Default)
		}
	}
	// And the example itself loads.
	_, err = load(t, nil, nil, doc)
	if err != nil {
		t.Fatalf("config.example.yaml does not load: %v", err)
	}
}

// TestDeployReadmeListsTheAttemptDeadlines: deploy/README.md's table of
// attempt deadlines has a row for each class's key, with its default.
func TestDeployReadmeListsTheAttemptDeadlines(t *testing.T) {
	b, err := os.ReadFile("../../deploy/README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range config.Keys() {
		if !strings.HasPrefix(k.Name, "s3-attempt-timeout-") {
			continue
		}
		n++
		m := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(k.Name) + "` \\|.*\\| ([^|]+) \\|$").FindSubmatch(b)
		if m == nil || string(m[1]) != k.Default {
			t.Errorf("deploy/README.md: the row of %s is %q, want its default %s", k.Name, m, k.Default)
		}
	}
	if n != len(objstore.OpClasses()) {
		t.Fatalf("%d attempt deadline keys for %d classes", n, len(objstore.OpClasses()))
	}
}

// TestChunkTargetFollowsTheOutputCap: --denorm-output-cap-mib 1 alone is
// valid (the chunk target's default follows the cap down); an explicit
// conflicting target, from any source, is still an error naming that flag.
func TestChunkTargetFollowsTheOutputCap(t *testing.T) {
	c, err := load(t, map[string]string{"denorm-output-cap-mib": "1"}, nil, "")
	if err != nil || c.DenormChunkTargetKiB != 1024 {
		t.Fatalf("cap 1 MiB alone: target %d KiB, %v", c.DenormChunkTargetKiB, err)
	}
	if c, err := load(t, nil, nil, ""); err != nil || c.DenormChunkTargetKiB != 4096 {
		t.Fatalf("defaults: target %d KiB, %v", c.DenormChunkTargetKiB, err)
	}
	for name, tc := range map[string]struct {
		flags map[string]string
		env   map[string]string
		file  string
	}{
		"flag": {flags: map[string]string{"denorm-output-cap-mib": "1", "denorm-chunk-target-kib": "4096"}},
		"env":  {flags: map[string]string{"denorm-output-cap-mib": "1"}, env: map[string]string{"NOVA_AUDITOR_DENORM_CHUNK_TARGET_KIB": "4096"}},
		"file": {flags: map[string]string{"denorm-output-cap-mib": "1"}, file: "denorm-chunk-target-kib: 4096\n"},
	} {
		_, err := load(t, tc.flags, tc.env, tc.file)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Field != "denorm-chunk-target-kib" {
			t.Errorf("%s: an explicit conflicting target: %v", name, err)
		}
	}
}

// TestErasureAlertAfter: the erasure alert bound defaults to 24h and is
// set like every key.
func TestErasureAlertAfter(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil || c.ErasureAlertAfter != 24*time.Hour {
		t.Fatalf("default erasure-alert-after: %s %v", c.ErasureAlertAfter, err)
	}
	c, err = load(t, nil, map[string]string{"NOVA_AUDITOR_ERASURE_ALERT_AFTER": "2h"}, "erasure-alert-after: 96h\n")
	if err != nil || c.ErasureAlertAfter != 2*time.Hour {
		t.Fatalf("env over file: %s %v", c.ErasureAlertAfter, err)
	}
}

// TestHistoryRetention: the ledger window defaults to 30 days, is set like
// every key (file < env < flag), and refuses less than an hour.
func TestHistoryRetention(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil || c.HistoryRetention != 30*24*time.Hour {
		t.Fatalf("default history-retention: %s %v", c.HistoryRetention, err)
	}
	c, err = load(t, map[string]string{"history-retention": "48h"}, map[string]string{"NOVA_AUDITOR_HISTORY_RETENTION": "72h"}, "history-retention: 96h\n")
	if err != nil || c.HistoryRetention != 48*time.Hour {
		t.Fatalf("flag over env over file: %s %v", c.HistoryRetention, err)
	}
	c, err = load(t, nil, map[string]string{"NOVA_AUDITOR_HISTORY_RETENTION": "72h"}, "history-retention: 96h\n")
	if err != nil || c.HistoryRetention != 72*time.Hour {
		t.Fatalf("env over file: %s %v", c.HistoryRetention, err)
	}
	var ce *config.Error
	if _, err := load(t, map[string]string{"history-retention": "30m"}, nil, ""); !errors.As(err, &ce) || ce.Field != "history-retention" {
		t.Fatalf("30m: %v", err)
	}
}

// TestDenormTailGrowth: the tail-growth fraction defaults to 1, is set
// like every key (file < env < flag; 0 turns the rule off), and refuses
// what is not a finite fraction of at least 0.
func TestDenormTailGrowth(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil || c.DenormTailGrowth != 1 {
		t.Fatalf("default denorm-tail-growth: %v %v", c.DenormTailGrowth, err)
	}
	c, err = load(t, nil, nil, "denorm-tail-growth: 0.25\n")
	if err != nil || c.DenormTailGrowth != 0.25 {
		t.Fatalf("file: %v %v", c.DenormTailGrowth, err)
	}
	c, err = load(t, nil, map[string]string{"NOVA_AUDITOR_DENORM_TAIL_GROWTH": "2.5"}, "denorm-tail-growth: 0.25\n")
	if err != nil || c.DenormTailGrowth != 2.5 {
		t.Fatalf("env over file: %v %v", c.DenormTailGrowth, err)
	}
	c, err = load(t, map[string]string{"denorm-tail-growth": "0"}, map[string]string{"NOVA_AUDITOR_DENORM_TAIL_GROWTH": "2.5"}, "")
	if err != nil || c.DenormTailGrowth != 0 {
		t.Fatalf("flag over env: %v %v", c.DenormTailGrowth, err)
	}
	for _, bad := range []string{"-0.5", "NaN", "+Inf", "half", ""} {
		var ce *config.Error
		if _, err := load(t, map[string]string{"denorm-tail-growth": bad}, nil, ""); !errors.As(err, &ce) || ce.Field != "denorm-tail-growth" {
			t.Errorf("%q: %v, want an error naming denorm-tail-growth", bad, err)
		}
	}
}

// TestDenormTailCohorts: the rule's cohorts default to 8, are set like
// every key, and refuse what is below 0 or above catalog.MaxCohorts.
func TestDenormTailCohorts(t *testing.T) {
	c, err := load(t, nil, nil, "")
	if err != nil || c.DenormTailCohorts != 8 {
		t.Fatalf("default denorm-tail-cohorts: %v %v", c.DenormTailCohorts, err)
	}
	c, err = load(t, map[string]string{"denorm-tail-cohorts": "1"}, map[string]string{"NOVA_AUDITOR_DENORM_TAIL_COHORTS": "16"}, "")
	if err != nil || c.DenormTailCohorts != 1 {
		t.Fatalf("flag over env: %v %v", c.DenormTailCohorts, err)
	}
	for _, bad := range []string{"-1", "65", "eight"} {
		var ce *config.Error
		if _, err := load(t, map[string]string{"denorm-tail-cohorts": bad}, nil, ""); !errors.As(err, &ce) || ce.Field != "denorm-tail-cohorts" {
			t.Errorf("%q: %v, want an error naming denorm-tail-cohorts", bad, err)
		}
	}
}

func TestParseExpressBucketsSpaces(t *testing.T) {
	got, err := config.ParseExpressBuckets("use1-az1=ex-a, use1-az2=ex-b,use1-az4=ex-c")
	if err != nil {
		t.Fatal(err)
	}
	if s := config.FormatExpressBuckets(got); s != "use1-az1=ex-a,use1-az2=ex-b,use1-az4=ex-c" {
		t.Fatalf("parsed %q", s)
	}
}

// TestParseSize: the one size syntax, of keys and of flags alike.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "05": 5, "64KiB": 64 << 10, "8 MiB": 8 << 20, "2GiB": 2 << 30, "1TiB": 1 << 40, "4194304TiB": 1 << 62,
		"4K": 4 << 10, "512M": 512 << 20, "64G": 64 << 30, "2T": 2 << 40} {
		if got, err := config.ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "lots", "-1", "1.5MiB", "1KB", "4194305TiB", "MiB", "1GB", "1g", "1Gi", "1P"} {
		if got, err := config.ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d, accepted", in, got)
		}
	}
}

// via is the three sources a key's value can come from: a flag, the
// environment and the YAML file (as written: unquoted), each alone.
var via = map[string]func(t *testing.T, key, v string) (config.Config, error){
	"flag": func(t *testing.T, key, v string) (config.Config, error) {
		return load(t, map[string]string{key: v}, nil, "")
	},
	"env": func(t *testing.T, key, v string) (config.Config, error) {
		return load(t, nil, map[string]string{config.EnvName(key): v}, "")
	},
	"yaml": func(t *testing.T, key, v string) (config.Config, error) {
		return load(t, nil, nil, key+": "+v+"\n")
	},
}

// TestSizeUnits: a size key keeps the unit its name says (a plain number is
// in it) and converts a value with a unit to it, through a flag, the
// environment and the YAML file alike. Units are binary: G is GiB (2^30),
// M is MiB, K is KiB. A value that is not a whole number of the key's unit,
// one too large, one with an unknown (or decimal: GB) unit, or a negative
// one is a configuration error naming the key.
func TestSizeUnits(t *testing.T) {
	good := []struct {
		key, v string
		want   int64
		get    func(config.Config) int64
	}{
		{"denorm-output-cap-mib", "300", 300, nil},
		{"denorm-output-cap-mib", "512M", 512, nil},
		{"denorm-output-cap-mib", "512MiB", 512, nil},
		{"denorm-output-cap-mib", "1G", 1024, nil},
		{"denorm-output-cap-mib", "1GiB", 1024, nil},
		{"denorm-output-cap-mib", "2048K", 2, nil},
		{"denorm-chunk-target-kib", "64", 64, nil},
		{"denorm-chunk-target-kib", "4KiB", 4, nil},
		{"denorm-chunk-target-kib", "1M", 1024, nil},
		{"settle-tail-spill-mib", "2G", 2048, nil},
		{"settle-tail-spill-mib", "1T", 1 << 20, nil},
		{"settle-max-bytes", "512", 512, nil},
		{"settle-max-bytes", "4KiB", 4096, nil},
		{"settle-max-bytes", "64G", 64 << 30, nil},
		{"settle-max-bytes", "64GiB", 64 << 30, nil},
		{"settle-max-bytes", "1000M", 1000 << 20, nil},
	}
	field := map[string]func(config.Config) int64{
		"denorm-output-cap-mib":   func(c config.Config) int64 { return c.DenormOutputCapMiB },
		"denorm-chunk-target-kib": func(c config.Config) int64 { return c.DenormChunkTargetKiB },
		"settle-tail-spill-mib":   func(c config.Config) int64 { return c.SettleTailSpillMiB },
		"settle-max-bytes":        func(c config.Config) int64 { return c.SettleMaxBytes },
	}
	for src, load := range via {
		for _, tc := range good {
			c, err := load(t, tc.key, tc.v)
			if err != nil {
				t.Errorf("%s %s=%s: %v", src, tc.key, tc.v, err)
				continue
			}
			if got := field[tc.key](c); got != tc.want {
				t.Errorf("%s %s=%s: %d, want %d", src, tc.key, tc.v, got, tc.want)
			}
		}
	}
	bad := []struct{ key, v, msg string }{
		{"denorm-output-cap-mib", "1536K", "whole number of MiB"},
		{"denorm-output-cap-mib", "1000KiB", "whole number of MiB"},
		{"denorm-output-cap-mib", "1GB", "unknown unit"},
		{"denorm-output-cap-mib", "1g", "unknown unit"},
		{"denorm-output-cap-mib", "1.5G", "not an integer"},
		{"denorm-output-cap-mib", "-1M", "negative"},
		{"settle-max-bytes", "9999999T", "too large"},
		{"settle-max-bytes", "4611686018427387905", "too large"},
		{"settle-max-bytes", "64 gigs", "unknown unit"},
		{"settle-tail-spill-mib", "1P", "unknown unit"},
		{"denorm-chunk-target-kib", "100B", "unknown unit"},
	}
	for src, load := range via {
		for _, tc := range bad {
			if tc.msg == "" {
				continue
			}
			_, err := load(t, tc.key, tc.v)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Field != tc.key || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("%s %s=%s: %v, want a configuration error of %s saying %q", src, tc.key, tc.v, err, tc.key, tc.msg)
			}
		}
	}
}

// TestDurationDays: a duration key takes days and weeks besides Go's units
// (30d, 1d12h, 2w, 1.5d), through a flag, the environment and the YAML
// file alike; a malformed one or one too long is a configuration error
// naming the key.
func TestDurationDays(t *testing.T) {
	good := map[string]time.Duration{
		"30d":    30 * 24 * time.Hour,
		"1d12h":  36 * time.Hour,
		"1.5d":   36 * time.Hour,
		"2w":     14 * 24 * time.Hour,
		"1w2d3h": 9*24*time.Hour + 3*time.Hour,
		"48h":    48 * time.Hour,
		"90m":    90 * time.Minute,
	}
	for src, load := range via {
		for v, want := range good {
			c, err := load(t, "history-retention", v)
			if err != nil || c.HistoryRetention != want {
				t.Errorf("%s history-retention=%s: %v, %v; want %v", src, v, c.HistoryRetention, err, want)
			}
			// and an optional duration key
			c, err = load(t, "s3-attempt-timeout", v)
			if err != nil || c.S3AttemptTimeout != want || c.S3AttemptTimeouts.Of(objstore.OpRead) != want {
				t.Errorf("%s s3-attempt-timeout=%s: %v, %v; want %v", src, v, c.S3AttemptTimeout, err, want)
			}
		}
		for _, v := range []string{"30 days", "d", "1d-2h", "1x", "3D", "100000000w", "1d 12h"} {
			_, err := load(t, "history-retention", v)
			var ce *config.Error
			if !errors.As(err, &ce) || ce.Field != "history-retention" {
				t.Errorf("%s history-retention=%s: %v, want a configuration error naming the key", src, v, err)
			}
		}
	}
	if d, err := config.ParseDuration("-1d"); err != nil || d != -24*time.Hour {
		t.Fatalf("-1d: %v %v", d, err)
	}
	if d, err := config.ParseDuration("106751d"); err != nil || d != 106751*24*time.Hour {
		t.Fatalf("106751d, just below the longest duration: %v %v", d, err)
	}
	for _, v := range []string{"106752d", "15251w", "106751d24h", "9999999999h"} {
		if d, err := config.ParseDuration(v); err == nil || !strings.Contains(err.Error(), "too long") {
			t.Errorf("%s: %v %v, want too long", v, d, err)
		}
	}
	var ce *config.Error
	if _, err := load(t, nil, map[string]string{"NOVA_AUDITOR_STRAY_GUARD": "-1d"}, ""); !errors.As(err, &ce) || ce.Field != "stray-guard" {
		t.Fatalf("a negative day: %v", err)
	}
}
