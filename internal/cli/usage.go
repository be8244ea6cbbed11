package cli

import (
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// The usage template's flagUsages, registered once: cobra's template
// functions are one map of the process, which the commands' help reads
// (and NewRoot, called by concurrent tests, must not write).
func init() { cobra.AddTemplateFunc("flagUsages", FlagUsages) }

// FlagUsages is fs's FlagUsages as the help prints it: a boolean flag as
// --name (pflag from v1.1.0 prints every boolean, cobra's -h, --help too,
// as --name[=true|false]; it still takes --name=false), and a DURATION
// flag whose default is zero with no "(default 0s)", as pflag does for
// its own durations. It renders a copy of fs; fs is left as it is.
func FlagUsages(fs *pflag.FlagSet) string {
	show := pflag.NewFlagSet("", pflag.ContinueOnError)
	show.SortFlags = fs.SortFlags
	fs.VisitAll(func(f *pflag.Flag) {
		c := *f
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			// Without IsBoolFlag pflag prints no placeholder for a "bool"
			// value and no [=true] for its NoOptDefVal "true".
			c.Value = shownBool{f.Value}
			if c.NoOptDefVal == "" {
				c.NoOptDefVal = "true"
			}
		}
		if _, ok := f.Value.(durationValue); ok && f.DefValue == "0s" {
			c.DefValue = ""
		}
		show.AddFlag(&c)
	})
	return show.FlagUsages()
}

// shownBool is a boolean flag's value as help shows it: typed "bool",
// without IsBoolFlag.
type shownBool struct{ v pflag.Value }

func (b shownBool) String() string     { return b.v.String() }
func (b shownBool) Set(s string) error { return b.v.Set(s) }
func (b shownBool) Type() string       { return "bool" }
