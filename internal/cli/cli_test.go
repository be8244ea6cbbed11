package cli_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/nova/auditor/internal/cli"
	"github.com/nova/auditor/internal/config"
)

// testCommand is `auditor t` in a root built by cli.NewRoot, its flags
// bound by cli.NewFlags: what a binary's command is.
type testCommand struct {
	*cli.Flags
	root, cmd *cobra.Command
	out       *strings.Builder
}

func newFlags(env map[string]string, only ...string) (*testCommand, *strings.Builder) {
	var out strings.Builder
	root := cli.NewRoot("auditor", "test root", "")
	root.SetOut(&out)
	root.SetErr(&out)
	cmd := &cobra.Command{Use: "t [flags]", Short: "the test command", Example: "  auditor t --json",
		Annotations: map[string]string{cli.FooterAnnotation: "exit codes:\n  0  fine\n"}}
	root.AddCommand(cmd)
	return &testCommand{Flags: cli.NewFlags(cmd, func(k string) string { return env[k] }, only...), root: root, cmd: cmd, out: &out}, &out
}

// Load runs `auditor t args` through cobra: the flags are parsed, then
// Load loads the configuration with the positional arguments left. The
// error is cobra's (a flag refused) or Load's.
func (c *testCommand) Load(args []string, require ...string) (config.Config, error) {
	var cfg config.Config
	c.cmd.RunE = func(_ *cobra.Command, pos []string) error {
		var err error
		cfg, err = c.Flags.Load(pos, require...)
		return err
	}
	c.root.SetArgs(append([]string{"t"}, args...))
	return cfg, c.root.Execute()
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
// naming what is wrong; -h prints the command's own flags, then the
// shared configuration with each key's environment variable and default.
func TestFlagsLoadRefusals(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		require []string
		want    string
	}{
		{[]string{"--reap-grace", "-1s"}, nil, "reap-grace"},
		{[]string{"--no-such-flag"}, nil, "no-such-flag"},
		{[]string{"--stra", "s1"}, nil, "did you mean --star?"},
		{[]string{"--lease-ttl"}, nil, "lease-ttl"},
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
	if _, err := fs.Load([]string{"-h"}); err != nil {
		t.Fatalf("-h: %v", err)
	}
	own, shared, ok := strings.Cut(out.String(), "\nShared configuration")
	if !ok {
		t.Fatalf("-h output has no shared configuration heading:\n%s", out.String())
	}
	for _, want := range []string{"Usage:\n  auditor t [flags]", "--json", "Examples:\n  auditor t --json\n", "exit codes:\n  0  fine\n"} {
		if !strings.Contains(own+shared, want) {
			t.Errorf("-h output lacks %q:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"--star STRING", "env NOVA_AUDITOR_STAR", "--lease-ttl DURATION", "--config FILE", `default "@every 30s"`} {
		if !strings.Contains(shared, want) || strings.Contains(own, want) {
			t.Errorf("-h output does not list %q under the shared configuration only:\n%s", want, out.String())
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

// TestExecute: a command's exit code passes through; a usage error (an
// unknown command or flag, a bad value) is exit 2 on stderr, with the
// closest command; help is exit 0 on stdout; a bare binary prints its
// usage on stderr and exits 2.
func TestExecute(t *testing.T) {
	for _, c := range []struct {
		args         []string
		code         int
		stdout, errs string
	}{
		{[]string{"t"}, 3, "", ""},
		{[]string{"t", "--json", "a", "b"}, 3, "", ""},
		{[]string{"x"}, cli.ExitUsage, "", "Did you mean this?\n\tt\n"},
		{[]string{"help", "x"}, cli.ExitUsage, "", `unknown command "x"`},
		// cobra leaves the help command out of its suggestions.
		{[]string{"hlep"}, cli.ExitUsage, "", "Did you mean this?\n\thelp\n"},
		{[]string{"help", "hlep"}, cli.ExitUsage, "", "Did you mean this?\n\thelp\n"},
		{[]string{"zzz"}, cli.ExitUsage, "", "unknown command \"zzz\" for \"auditor\"\nRun 'auditor --help'"},
		{[]string{"t", "--jsn"}, cli.ExitUsage, "", "did you mean --json?"},
		{[]string{"t", "--json=maybe"}, cli.ExitUsage, "", "json"},
		{[]string{"help", "t"}, cli.ExitOK, "the test command\n\nUsage:\n  auditor t [flags]", ""},
		{[]string{"--help"}, cli.ExitOK, "  t           the test command", ""},
		{nil, cli.ExitUsage, "", "  t           the test command"},
	} {
		var stdout, stderr strings.Builder
		root := cli.NewRoot("auditor", "test root", "")
		root.SetOut(&stdout)
		root.SetErr(&stderr)
		cmd := &cobra.Command{Use: "t [flags]", Short: "the test command",
			RunE: func(*cobra.Command, []string) error { return cli.Exit(3) }}
		cmd.Flags().Bool("json", false, "print JSON")
		root.AddCommand(cmd)
		code := cli.Execute(root, c.args, &stderr, func(s string) string { return s })
		if code != c.code || !strings.Contains(stdout.String(), c.stdout) || !strings.Contains(stderr.String(), c.errs) {
			t.Errorf("auditor %q: exit %d, stdout %q, stderr %q; want %d, %q, %q", c.args, code, stdout.String(), stderr.String(), c.code, c.stdout, c.errs)
		}
	}
}

// TestHelpFlagRendering: help shows a boolean flag, cobra's -h, --help
// and a boolean configuration key as a plain --name (not
// --name[=true|false], which pflag v1.1.0 prints), a duration with a zero
// default with no "(default 0s)", and a duration with another default with
// it; --name=false is still taken.
func TestHelpFlagRendering(t *testing.T) {
	fs, out := newFlags(nil)
	fs.Bool("dry-run", false, "record nothing")
	fs.Bool("on", true, "on by default")
	fs.Duration("timeout", 0, "wait at most this long")
	fs.Duration("every", time.Minute, "how often")
	if _, err := fs.Load([]string{"-h"}); err != nil {
		t.Fatal(err)
	}
	help := out.String()
	for _, want := range []string{
		"      --dry-run            record nothing\n",
		"  -h, --help               help for t\n",
		"      --on                 on by default (default true)\n",
		"      --timeout DURATION   wait at most this long\n",
		"      --every DURATION     how often (default 1m0s)\n",
		"      --s3-path-style ",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	if strings.Contains(help, "[=") || strings.Contains(help, "default 0s") {
		t.Errorf("help shows [=...] or default 0s:\n%s", help)
	}
	fs, _ = newFlags(nil)
	dry := fs.Bool("dry-run", true, "")
	if c, err := fs.Load([]string{"--dry-run=false", "--s3-path-style=false"}); err != nil || *dry || c.S3PathStyle {
		t.Fatalf("--dry-run=false --s3-path-style=false: dry-run %v, path style %v, %v", *dry, c.S3PathStyle, err)
	}
}
