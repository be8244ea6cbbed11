// Package cli is what the auditor's and novasim's command lines share, and
// the one place they are parsed: subcommand routing with a usage list, and
// each subcommand's Flags, which bind the configuration keys (internal/config)
// as flags beside the command's own and load the configuration with its
// precedence and required keys. The flag values of more than one command
// (sizes, shares, size ranges) are here too, with config's one size syntax.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/nova/auditor/internal/config"
)

// Exit codes both binaries share (docs/operations.md#operator-surface).
// ExitUsage and ExitUnreachable are kept apart so automation can tell
// "fix the configuration" from "retry when the dependency answers".
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitUnreachable: a dependency could not be reached (a database that
	// does not answer, a store that could not be read): nothing was done.
	// A database that answers and refuses the URL is ExitUsage.
	ExitUnreachable = 5
)

// ErrHelp is returned by Load after -h printed the flags (exit 0).
var ErrHelp = errors.New("help requested")

// Route picks the subcommand named by args[0] among summaries (name ->
// one-line summary). It returns the name, or, when no command is to run
// (none given, help, unknown), ok false and the exit code, having printed
// the usage: to stdout when help was asked for (exit 0), else to stderr
// (exit 2).
func Route(prog string, stdout, stderr io.Writer, summaries map[string]string, args []string) (name string, code int, ok bool) {
	if len(args) == 0 {
		Usage(prog, stderr, summaries)
		return "", ExitUsage, false
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		Usage(prog, stdout, summaries)
		return "", ExitOK, false
	}
	if _, found := summaries[args[0]]; !found {
		fmt.Fprintf(stderr, "%s: unknown command %q\n", prog, args[0])
		Usage(prog, stderr, summaries)
		return "", ExitUsage, false
	}
	return args[0], ExitOK, true
}

// Usage prints the command list, sorted.
func Usage(prog string, w io.Writer, summaries map[string]string) {
	names := make([]string, 0, len(summaries))
	width := 0
	for n := range summaries {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	fmt.Fprintf(w, "usage: %s <command> [flags]   (%s <command> -h lists its flags)\ncommands:\n", prog, prog)
	for _, n := range names {
		fmt.Fprintf(w, "  %-*s  %s\n", width, n, summaries[n])
	}
}

// Flags is one subcommand's flags: --config and the configuration keys it
// takes, bound as flags, beside the command's own (define them on the
// embedded FlagSet, or with SizeVar, ShareVar and SizeRangeVar). The
// FlagSet's own messages are discarded: Load reports an error once, and -h
// prints the flag list.
type Flags struct {
	*flag.FlagSet
	// Footer is printed by -h after the flags (a command's exit codes).
	Footer string
	stdout io.Writer
	src    config.Sources
	file   *string
}

// NewFlags returns the flags of the subcommand name ("auditor run") with
// every configuration key bound, or only the named ones (novasim takes the
// database and storage keys). getenv reads the keys' environment
// variables; -h prints the flags to stdout.
func NewFlags(stdout io.Writer, getenv func(string) string, name string, only ...string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f := &Flags{FlagSet: fs, stdout: stdout,
		src: config.Sources{Getenv: getenv, Flags: map[string]string{}, Only: only}}
	f.file = fs.String("config", "", "YAML configuration file (keys are the flag names). In every source, durations take Go's units and days and weeks (30s, 5m, 24h, 30d, 1d12h, 2w) and sizes binary units (K/KiB, M/MiB, G/GiB, T/TiB: 1G = 2^30 bytes), converted to the unit a key's name says")
	taken := map[string]bool{}
	for _, n := range only {
		taken[n] = true
	}
	for _, k := range config.Keys() {
		if len(only) > 0 && !taken[k.Name] {
			continue
		}
		usage := fmt.Sprintf("%s (env %s)", k.Usage, config.EnvName(k.Name))
		if k.Default != "" {
			usage = fmt.Sprintf("%s (default %q, env %s)", k.Usage, k.Default, config.EnvName(k.Name))
		}
		set := func(v string) error {
			if err := config.CheckValue(k.Name, v); err != nil {
				return err
			}
			f.src.Flags[k.Name] = v
			return nil
		}
		if k.Bool {
			// A boolean takes no value (--flag) or an attached one
			// (--flag=false): a following argument is never its value.
			fs.BoolFunc(k.Name, usage, set)
			continue
		}
		fs.Func(k.Name, usage, set)
	}
	return f
}

// Load parses the command line, loads and validates the configuration
// (flag > environment > --config file > default) and checks the required
// keys. Its errors are configuration errors (exit 2), or ErrHelp after -h
// printed the flags to stdout (help asked for is output, not an error).
func (f *Flags) Load(args []string, require ...string) (config.Config, error) {
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintFlags(f.stdout, f.FlagSet)
			fmt.Fprint(f.stdout, f.Footer)
			return config.Config{}, ErrHelp
		}
		return config.Config{}, &config.Error{Field: "flags", Msg: err.Error()}
	}
	if f.NArg() > 0 {
		return config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("unexpected argument %q", f.Arg(0))}
	}
	src := f.src
	src.File = *f.file
	cfg, err := config.Load(src)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Require(require...)
}

// PrintFlags prints a FlagSet's usage line and flags to w.
func PrintFlags(w io.Writer, fs *flag.FlagSet) {
	fs.SetOutput(w)
	defer fs.SetOutput(io.Discard)
	fmt.Fprintf(w, "usage of %s:\n", fs.Name())
	fs.PrintDefaults()
}

// ParseInterspersed parses flags that may appear before and after the
// positional arguments, which it returns; everything after "--" is
// positional.
func ParseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if used := len(args) - len(rest); used > 0 && args[used-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
