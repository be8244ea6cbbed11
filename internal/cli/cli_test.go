package cli_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
)

func newFlags(env map[string]string, only ...string) (*cli.Flags, *strings.Builder) {
	var out strings.Builder
	return cli.NewFlags(&out, func(k string) string { return env[k] }, "auditor t", only...), &out
}

// TestFlagsPrecedenceAndBooleans: a flag beats the environment, which beats
// the --config file; a boolean key never takes the next argument as its
// value, and --flag=false overrides the environment.
func TestFlagsPrecedenceAndBooleans(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("reap-grace: 2m\nlease-ttl: 40s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"NOVA_AUDITOR_S3_PATH_STYLE": "true", "NOVA_AUDITOR_REAP_GRACE": "3m", "NOVA_AUDITOR_SCHEDULE": "@every 2h"}
	fs, _ := newFlags(env)
	asJSON := fs.Bool("json", false, "")
	c, err := fs.Load([]string{"--config", file, "--s3-path-style=false", "--json", "--schedule", "@every 3h"})
	if err != nil {
		t.Fatal(err)
	}
	if c.S3PathStyle || !*asJSON || c.Schedule != "@every 3h" || c.ReapGrace.String() != "3m0s" || c.LeaseTTL.String() != "40s" {
		t.Fatalf("path style %v, json %v, schedule %q, reap grace %s, lease ttl %s", c.S3PathStyle, *asJSON, c.Schedule, c.ReapGrace, c.LeaseTTL)
	}
	fs, _ = newFlags(nil)
	asJSON = fs.Bool("json", false, "")
	if c, err := fs.Load([]string{"--s3-path-style", "--json"}); err != nil || !c.S3PathStyle || !*asJSON {
		t.Fatalf("--s3-path-style --json: path style %v, json %v, %v", c.S3PathStyle, *asJSON, err)
	}
}

// TestFlagsLoadRefusals: every refusal is a configuration error (exit 2)
// naming what is wrong; -h prints the flags and is ErrHelp.
func TestFlagsLoadRefusals(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		require []string
		want    string
	}{
		{[]string{"--reap-grace", "-1s"}, nil, "reap-grace"},
		{[]string{"--no-such-flag"}, nil, "no-such-flag"},
		{[]string{"extra"}, nil, `unexpected argument "extra"`},
		{nil, []string{"star", "database-url"}, "database-url"},
		{[]string{"--star", "Star_1"}, nil, "star"},
	} {
		fs, _ := newFlags(nil)
		_, err := fs.Load(tc.args, tc.require...)
		if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v (require %v): %v, want a configuration error naming %q", tc.args, tc.require, err, tc.want)
		}
	}
	fs, out := newFlags(nil)
	fs.Bool("json", false, "print JSON")
	if _, err := fs.Load([]string{"-h"}); !errors.Is(err, cli.ErrHelp) {
		t.Fatalf("-h: %v", err)
	}
	for _, want := range []string{"usage of auditor t:", "-star", "env NOVA_AUDITOR_STAR", "-json", `default "@every 30s"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFlagsOnly: a command that takes some keys has no flag for the others,
// ignores their environment variables and refuses them in its file.
func TestFlagsOnly(t *testing.T) {
	fs, _ := newFlags(map[string]string{"NOVA_AUDITOR_SCHEDULE": "not a schedule"}, "star")
	if fs.Lookup("schedule") != nil || fs.Lookup("star") == nil || fs.Lookup("config") == nil {
		t.Fatal("only: wrong flags bound")
	}
	if c, err := fs.Load([]string{"--star", "s1"}); err != nil || c.Star != "s1" {
		t.Fatalf("another key's environment variable was read: %v", err)
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("schedule: '@every 1h'\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fs, _ = newFlags(nil, "star")
	if _, err := fs.Load([]string{"--config", file}); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "schedule") {
		t.Fatalf("a key the command does not take, in its file: %v", err)
	}
}

// TestValues: sizes take config's size syntax, shares are in [0, 1], a
// size range is MIN-MAX within its bound; an absent flag keeps its default.
func TestValues(t *testing.T) {
	var (
		size, kept int64
		share      float64
		lo, hi     = 1, 2
	)
	fs, _ := newFlags(nil)
	fs.SizeVar(&size, "bytes", 0, "")
	fs.SizeVar(&kept, "kept", 1<<20, "")
	fs.ShareVar(&share, "share", 0.5, "")
	fs.SizeRangeVar(&lo, &hi, "range", 64<<20, "")
	if _, err := fs.Load([]string{"--bytes", "64KiB", "--share", "0.25", "--range", "0-16KiB"}); err != nil {
		t.Fatal(err)
	}
	if size != 64<<10 || kept != 1<<20 || share != 0.25 || lo != 0 || hi != 16<<10 {
		t.Fatalf("bytes %d, kept %d, share %v, range %d-%d", size, kept, share, lo, hi)
	}
	for _, args := range [][]string{
		{"--bytes", "lots"}, {"--bytes", "-1"}, {"--share", "1.5"}, {"--share", "NaN"},
		{"--range", "16"}, {"--range", "5-1"}, {"--range", "0-65MiB"},
	} {
		fs, _ := newFlags(nil)
		fs.SizeVar(&size, "bytes", 0, "")
		fs.ShareVar(&share, "share", 0, "")
		fs.SizeRangeVar(&lo, &hi, "range", 64<<20, "")
		if _, err := fs.Load(args); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), args[0][2:]) {
			t.Errorf("%v: %v, want a configuration error naming the flag", args, err)
		}
	}
}

// TestDurationFlags: a command's own duration flags take the
// configuration's duration syntax, days and weeks included; an absent one
// keeps its default, a bad one is a configuration error naming it.
func TestDurationFlags(t *testing.T) {
	fs, _ := newFlags(nil)
	timeout := fs.Duration("timeout", 0, "")
	var every time.Duration
	fs.DurationVar(&every, "every", time.Minute, "")
	if _, err := fs.Load([]string{"--timeout", "1d12h"}); err != nil {
		t.Fatal(err)
	}
	if *timeout != 36*time.Hour || every != time.Minute {
		t.Fatalf("timeout %v, every %v", *timeout, every)
	}
	for _, v := range []string{"2w", "30d", "90s"} {
		fs, _ := newFlags(nil)
		timeout := fs.Duration("timeout", 0, "")
		want, _ := config.ParseDuration(v)
		if _, err := fs.Load([]string{"--timeout=" + v}); err != nil || *timeout != want || want == 0 {
			t.Errorf("--timeout=%s: %v %v", v, *timeout, err)
		}
	}
	for _, v := range []string{"a day", "1D", "5"} {
		fs, _ := newFlags(nil)
		fs.Duration("timeout", 0, "")
		if _, err := fs.Load([]string{"--timeout", v}); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "timeout") {
			t.Errorf("--timeout %s: %v, want a configuration error naming the flag", v, err)
		}
	}
}

func TestParseInterspersed(t *testing.T) {
	fs, _ := newFlags(nil)
	asJSON := fs.Bool("json", false, "")
	pos, err := cli.ParseInterspersed(fs.FlagSet, []string{"a", "--json", "b", "--", "--c"})
	if err != nil || !*asJSON || !slices.Equal(pos, []string{"a", "b", "--c"}) {
		t.Fatalf("positional %q, json %v, %v", pos, *asJSON, err)
	}
}
