// Package cli is what the auditor's and novasim's command lines share:
// subcommand routing with a usage list, and flag parsing that loads the one
// configuration (internal/config) with its precedence and required keys.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"

	"github.com/nova/auditor/internal/config"
)

// Exit codes (docs/architecture.md#operator-surface).
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// ErrHelp is returned by Parse after -h printed the flags (exit 0).
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

// FlagSet returns a subcommand's FlagSet whose own messages are discarded:
// Parse reports an error once, and -h prints the flag list.
func FlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// Parse parses the flags, loads and validates the configuration and checks
// the required keys. Its errors are configuration errors (exit 2), or
// ErrHelp after -h printed the flags to stdout (help asked for is output,
// not an error).
func Parse(stdout io.Writer, fs *flag.FlagSet, l *config.Loader, args []string, require ...string) (config.Config, error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			PrintFlags(stdout, fs)
			return config.Config{}, ErrHelp
		}
		return config.Config{}, &config.Error{Field: "flags", Msg: err.Error()}
	}
	if fs.NArg() > 0 {
		return config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	cfg, err := l.Load()
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
