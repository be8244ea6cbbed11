// Package cli is what the auditor's and novasim's command lines share on
// top of cobra and pflag: the root command's help and usage layout (a
// command's own flags first, the shared configuration grouped below, its
// example and exit codes last), `help CMD` with the closest command for a
// mistyped one, the closest flag for a mistyped flag, the mapping of every
// usage error to exit 2, and each command's Flags, which bind the
// configuration keys (internal/config) beside the command's own and load
// the configuration with its precedence and required keys. The flag values
// of more than one command (sizes, durations, shares, size ranges) are
// here too, with config's one size and duration syntax. It does not
// define commands: each binary builds its own tree.
package cli

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// FooterAnnotation is the cobra annotation whose text ends a command's
// help, after its example: its exit codes, and any table of its own.
const FooterAnnotation = "footer"

// usageTemplate lays a command's help out: its own flags (the command's
// local, non-persistent flags), then the shared configuration (its
// persistent flags: on a leaf command they are the configuration keys),
// the example, and the footer. pflag prints each flag with its value's
// placeholder (--denorm-linger DURATION), through FlagUsages.
const usageTemplate = `Usage:{{if .Runnable}}
  {{.UseLine}}{{end}}{{if .HasAvailableSubCommands}}
  {{.CommandPath}} [command]

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{rpad .Name .NamePadding }} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{flagUsages .LocalNonPersistentFlags | trimTrailingWhitespaces}}{{end}}{{if .HasAvailablePersistentFlags}}

Shared configuration (every command takes these; flag > environment > --config file > default):
{{flagUsages .PersistentFlags | trimTrailingWhitespaces}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Use "{{.CommandPath}} help [command]" for more information about a command.{{end}}{{with index .Annotations "footer"}}

{{.}}{{else}}
{{end}}`

// helpTemplate is the synopsis, the description, then the usage.
const helpTemplate = `{{with .Short}}{{.}}

{{end}}{{with .Long}}{{. | trimTrailingWhitespaces}}

{{end}}{{.UsageString}}`

// NewRoot returns the root command of the binary prog, with the shared
// help layout, `help CMD`, flag did-you-mean and silenced errors
// (Execute reports them). Add the commands to it, then Execute it.
func NewRoot(prog, short, long string) *cobra.Command {
	root := &cobra.Command{
		Use:           prog,
		Short:         short,
		Long:          long,
		SilenceErrors: true,
		SilenceUsage:  true,
		// Execute suggests the closest commands for a mistyped one
		// (suggest): cobra's own suggestions leave the help command out.
		DisableSuggestions:         true,
		SuggestionsMinimumDistance: 2,
		// Completion is each binary's own command (completion bash|zsh|fish).
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
	}
	root.SetUsageTemplate(usageTemplate)
	root.SetHelpTemplate(helpTemplate)
	root.SetFlagErrorFunc(flagError)
	root.SetHelpCommand(helpCommand(prog))
	// A bare prog is a usage error: the usage goes to stderr, exit 2.
	root.RunE = func(c *cobra.Command, _ []string) error {
		fmt.Fprint(c.ErrOrStderr(), c.UsageString())
		return Exit(ExitUsage)
	}
	return root
}

// helpCommand is `prog help [CMD]`: CMD's help (CMD -h), or the top-level
// help; an unknown CMD is a usage error with the closest command.
func helpCommand(prog string) *cobra.Command {
	return &cobra.Command{
		Use:     "help [command]",
		Short:   "print the help of a command (the same as the command's -h)",
		Long:    "Print the help of a command: its synopsis, description, own flags, the shared configuration, an example and its exit codes. Without a command, the list of commands.",
		Example: "  " + prog + " help run",
		Annotations: map[string]string{
			FooterAnnotation: "exit codes:\n  0  the help was printed\n  2  no such command",
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var names []cobra.Completion
			for _, cmd := range c.Root().Commands() {
				if cmd.IsAvailableCommand() && len(args) == 0 {
					names = append(names, cobra.CompletionWithDesc(cmd.Name(), cmd.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return err
			}
			if cmd == nil {
				return fmt.Errorf("unknown help topic %q", strings.Join(args, " "))
			}
			cmd.InitDefaultHelpFlag()
			return cmd.Help()
		},
	}
}

// ExitError is a command's exit code other than 0, its reason already
// reported: Execute exits with it and prints nothing.
type ExitError struct{ Code int }

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Exit is the error a command's RunE returns for its exit code: nil for 0.
func Exit(code int) error {
	if code == ExitOK {
		return nil
	}
	return &ExitError{Code: code}
}

// Execute runs root with args and returns the exit code: the command's
// own (Exit), or ExitUsage for what cobra or pflag refused (an unknown
// command or flag, a bad flag value, a misplaced argument), reported on
// stderr as "prog: ..." after scrub removed any secret.
func Execute(root *cobra.Command, args []string, stderr io.Writer, scrub func(string) string) int {
	root.SetArgs(args)
	err := root.Execute()
	var exit *ExitError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &exit):
		return exit.Code
	}
	msg := strings.TrimRight(scrub(err.Error()), "\n")
	var name string
	if _, serr := fmt.Sscanf(err.Error(), "unknown command %q", &name); serr == nil {
		if s := suggest(root, name); len(s) > 0 {
			msg += "\n\nDid you mean this?\n\t" + strings.Join(s, "\n\t")
		}
	}
	fmt.Fprintf(stderr, "%s: %s\n", root.Name(), msg)
	if strings.HasPrefix(msg, "unknown command") || strings.HasPrefix(msg, "unknown help topic") {
		fmt.Fprintf(stderr, "Run '%s --help' for the commands.\n", root.Name())
	}
	return ExitUsage
}

// suggest is the commands closest to name, a command root does not have,
// in order: cobra's (SuggestionsFor: within SuggestionsMinimumDistance
// edits, a prefix, or a command's SuggestFor) and the help command, which
// cobra never suggests (it is not an "available" command to cobra), when
// name is close to it by config.Suggest or a prefix of it.
func suggest(root *cobra.Command, name string) []string {
	out := root.SuggestionsFor(name)
	lower := strings.ToLower(name)
	for _, c := range root.Commands() {
		if c.Name() == "help" && !c.Hidden && (strings.HasPrefix(c.Name(), lower) || config.Suggest(lower, []string{c.Name()}) != "") {
			out = append(out, c.Name())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// NoArgs is a cobra.PositionalArgs for a command that takes no argument:
// one is a configuration error naming it (exit 2).
func NoArgs(c *cobra.Command, args []string) error {
	if len(args) > 0 {
		return &config.Error{Field: "flags", Msg: fmt.Sprintf("unexpected argument %q: %s takes none", args[0], c.CommandPath())}
	}
	return nil
}

// flagError is every command's flag error (cobra's FlagErrorFunc): a
// configuration error (exit 2), with the closest flag for an unknown one.
func flagError(c *cobra.Command, err error) error {
	msg := err.Error()
	var missing *pflag.NotExistError
	if errors.As(err, &missing) && missing.GetSpecifiedName() != "" {
		var names []string
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if !f.Hidden {
				names = append(names, f.Name)
			}
		})
		if s := config.Suggest(missing.GetSpecifiedName(), names); s != "" {
			msg = fmt.Sprintf("%s (did you mean --%s?)", msg, s)
		}
	}
	return &config.Error{Field: "flags", Msg: msg}
}

// Flags is one command's flags, on its cobra command: its own flags on
// the embedded FlagSet (define them with the FlagSet's methods, or with
// SizeVar, DurationVar, ShareVar and SizeRangeVar), and --config and the
// configuration keys it takes on the command's persistent flags, which
// the help lists apart, below its own.
type Flags struct {
	*pflag.FlagSet
	shared *pflag.FlagSet
	src    config.Sources
	file   *string
}

// NewFlags binds --config and every configuration key, or only the named
// ones (novasim takes the database and storage keys), to cmd. getenv reads
// the keys' environment variables.
func NewFlags(cmd *cobra.Command, getenv func(string) string, only ...string) *Flags {
	shared := cmd.PersistentFlags()
	f := &Flags{FlagSet: cmd.Flags(), shared: shared, src: config.Sources{Getenv: getenv, Flags: map[string]string{}, Only: only}}
	f.file = new(string)
	shared.VarP(&keyValue{placeholder: "FILE", set: func(v string) error { *f.file = v; return nil }}, "config", "",
		"YAML configuration file (keys are the flag names). In every source, durations take Go's units and days and weeks (30s, 5m, 24h, 30d, 1d12h, 2w) and sizes binary units (K/KiB, M/MiB, G/GiB, T/TiB: 1G = 2^30 bytes), converted to the unit a key's name says")
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
		name := k.Name
		v := &keyValue{placeholder: k.Placeholder, isBool: k.Bool, set: func(v string) error {
			if err := config.CheckValue(name, v); err != nil {
				return err
			}
			f.src.Flags[name] = v
			return nil
		}}
		// A boolean (IsBoolFlag) takes no value (--flag) or an attached
		// one (--flag=false): a following argument is never its value.
		shared.Var(v, k.Name, usage)
	}
	return f
}

// keyValue is a configuration key's flag: its value is checked and handed
// to the configuration's sources when it is set, and the configuration
// applies its default, so the flag has none of its own.
type keyValue struct {
	placeholder string
	isBool      bool
	set         func(string) error
	v           string
}

func (k *keyValue) String() string { return k.v }

func (k *keyValue) Set(v string) error {
	if err := k.set(v); err != nil {
		return err
	}
	k.v = v
	return nil
}

// IsBoolFlag makes a boolean key's flag one pflag's way: it takes no
// value, or an attached one (--name, --name=false); help shows --name.
func (k *keyValue) IsBoolFlag() bool { return k.isBool }

// Type is the value's placeholder in help (DURATION, SIZE): pflag prints
// it after the flag's name; "bool" prints none.
func (k *keyValue) Type() string {
	if k.isBool {
		return "bool"
	}
	return k.placeholder
}

// Load loads and validates the configuration (flag > environment >
// --config file > default) once cobra parsed the command line, and checks
// the required keys. args are the positional arguments cobra left, which
// a command built on Load does not take. Its errors are configuration
// errors (exit 2).
func (f *Flags) Load(args []string, require ...string) (config.Config, error) {
	if len(args) > 0 {
		return config.Config{}, &config.Error{Field: "flags", Msg: fmt.Sprintf("unexpected argument %q", args[0])}
	}
	src := f.src
	src.File = *f.file
	cfg, err := config.Load(src)
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Require(require...)
}

// Lookup returns the flag name, the command's own or a configuration
// key's (cobra merges the two sets only when it parses).
func (f *Flags) Lookup(name string) *pflag.Flag {
	if fl := f.FlagSet.Lookup(name); fl != nil {
		return fl
	}
	return f.shared.Lookup(name)
}

// Given reports whether the flag name was given on the command line.
func (f *Flags) Given(name string) bool {
	fl := f.Lookup(name)
	return fl != nil && fl.Changed
}
