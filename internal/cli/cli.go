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
	"strings"

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
// one-line summary) and returns it with its arguments; `help CMD` is CMD
// with -h. When no command is to run (none given, help, unknown), ok is
// false with the exit code, the usage printed: to stdout when help was
// asked for (exit 0), else to stderr (exit 2), with the closest command
// for a mistyped one.
func Route(prog string, stdout, stderr io.Writer, summaries map[string]string, args []string) (name string, rest []string, code int, ok bool) {
	if len(args) == 0 {
		Usage(prog, stderr, summaries)
		return "", nil, ExitUsage, false
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		if args[0] == "help" && len(args) > 1 {
			if _, found := summaries[args[1]]; found {
				return args[1], []string{"-h"}, ExitOK, true
			}
			unknown(prog, stderr, summaries, args[1])
			return "", nil, ExitUsage, false
		}
		Usage(prog, stdout, summaries)
		return "", nil, ExitOK, false
	}
	if _, found := summaries[args[0]]; !found {
		unknown(prog, stderr, summaries, args[0])
		return "", nil, ExitUsage, false
	}
	return args[0], args[1:], ExitOK, true
}

// unknown reports an unknown command, with the closest one, and the usage.
func unknown(prog string, w io.Writer, summaries map[string]string, name string) {
	names := make([]string, 0, len(summaries))
	for n := range summaries {
		names = append(names, n)
	}
	if s := config.Suggest(name, names); s != "" {
		fmt.Fprintf(w, "%s: unknown command %q (did you mean %q?)\n", prog, name, s)
	} else {
		fmt.Fprintf(w, "%s: unknown command %q\n", prog, name)
	}
	Usage(prog, w, summaries)
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
	fmt.Fprintf(w, "usage: %s <command> [flags]   (%s help <command>, or %s <command> -h, lists its flags)\ncommands:\n", prog, prog, prog)
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
	// Synopsis is printed by -h under the usage line (the command's
	// one-line summary); Footer after the flags (an example, exit codes).
	Synopsis string
	Footer   string
	stdout   io.Writer
	src      config.Sources
	file     *string
	shared   map[string]string // the configuration keys bound as flags, and their placeholders
}

// NewFlags returns the flags of the subcommand name ("auditor run") with
// every configuration key bound, or only the named ones (novasim takes the
// database and storage keys). getenv reads the keys' environment
// variables; -h prints the flags to stdout.
func NewFlags(stdout io.Writer, getenv func(string) string, name string, only ...string) *Flags {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	f := &Flags{FlagSet: fs, stdout: stdout, shared: map[string]string{"config": "FILE"},
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
		f.shared[k.Name] = k.Placeholder
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
			f.PrintHelp(f.stdout)
			fmt.Fprint(f.stdout, f.Footer)
			return config.Config{}, ErrHelp
		}
		return config.Config{}, &config.Error{Field: "flags", Msg: f.suggest(err.Error())}
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

// PrintHelp prints the command's usage line and its own flags, then the
// shared configuration keys it takes, grouped apart, each with its value's
// placeholder (--denorm-linger=DURATION).
func (f *Flags) PrintHelp(w io.Writer) {
	var own, shared []*flag.Flag
	f.VisitAll(func(fl *flag.Flag) {
		if _, ok := f.shared[fl.Name]; ok {
			shared = append(shared, fl)
		} else {
			own = append(own, fl)
		}
	})
	fmt.Fprintf(w, "usage of %s:\n", f.Name())
	if f.Synopsis != "" {
		fmt.Fprintf(w, "  %s\n\n", f.Synopsis)
	}
	for _, fl := range own {
		name, usage := flag.UnquoteUsage(fl)
		printFlag(w, fl.Name, strings.ToUpper(name), usage, fl.DefValue)
	}
	if len(shared) == 0 {
		return
	}
	fmt.Fprintf(w, "\nshared configuration (every command takes these; flag > environment > --config file > default):\n")
	for _, fl := range shared {
		printFlag(w, fl.Name, f.shared[fl.Name], fl.Usage, "")
	}
}

// printFlag prints one flag: --name=PLACEHOLDER, then its usage indented.
func printFlag(w io.Writer, name, placeholder, usage, def string) {
	if placeholder != "" {
		fmt.Fprintf(w, "  --%s=%s\n", name, placeholder)
	} else {
		fmt.Fprintf(w, "  --%s\n", name)
	}
	if def != "" && def != "false" && def != "0" && !strings.Contains(usage, "(default") {
		usage += fmt.Sprintf(" (default %q)", def)
	}
	fmt.Fprintf(w, "    \t%s\n", usage)
}

// suggest adds the closest flag to the flag package's "flag provided but
// not defined: -x" error.
func (f *Flags) suggest(msg string) string {
	const undefined = "flag provided but not defined: "
	name, ok := strings.CutPrefix(msg, undefined)
	if !ok {
		return msg
	}
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	if s := config.Suggest(strings.TrimLeft(name, "-"), names); s != "" {
		return fmt.Sprintf("%s (did you mean --%s?)", msg, s)
	}
	return msg
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
