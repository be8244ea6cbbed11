package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHelpPerCommand: `auditor help CMD` is CMD's help; a command's help
// lists its own flags first, at most 12 for migrate, and the shared
// configuration below under its own heading, each with its value's
// placeholder; a mistyped command, flag or YAML key is answered with the
// closest name.
func TestHelpPerCommand(t *testing.T) {
	code, viaHelp, _ := runCLI(t, "help", "run")
	_, viaFlag, _ := runCLI(t, "run", "-h")
	if code != exitOK || viaHelp != viaFlag || !strings.Contains(viaHelp, "\nUsage:\n  auditor run [flags]\n") {
		t.Fatalf("auditor help run: exit %d, %.80q; want run -h's help", code, viaHelp)
	}
	_, out, _ := runCLI(t, "migrate", "-h")
	own, shared, found := strings.Cut(out, "\nShared configuration")
	if !found {
		t.Fatalf("migrate -h has no shared configuration heading:\n%s", out)
	}
	// A flag's line: pflag indents it, with its shorthand if it has one.
	flagLine := regexp.MustCompile(`(?m)^ +(-[a-z], )?--[a-z]`)
	if n := len(flagLine.FindAllString(own, -1)); n == 0 || n > 12 {
		t.Errorf("migrate -h lists %d flags before the shared configuration, want 1 to 12:\n%s", n, own)
	}
	for _, want := range []string{"--denorm-linger DURATION ", "--denorm-output-cap-mib SIZE ", "--database-url STRING ", "--config FILE "} {
		if !strings.Contains(shared, want) {
			t.Errorf("the shared configuration of migrate -h lacks %q", want)
		}
	}
	// A boolean key takes no value or an attached one: no placeholder,
	// and shown as plain --pprof, as pflag v1.0 showed a bool (v1.1.0
	// prints --pprof[=true|false]).
	if !regexp.MustCompile(`\n +--pprof {2,}serve`).MatchString(shared) {
		t.Errorf("the shared configuration of migrate -h does not list --pprof without a placeholder")
	}
	if strings.Contains(own, "--denorm-linger") {
		t.Errorf("migrate -h lists a configuration key among its own flags")
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrat"}, "Did you mean this?\n\tmigrate\n"},
		{[]string{"help", "sever"}, "Did you mean this?\n\tserve\n"},
		{[]string{"hlep"}, "Did you mean this?\n\thelp\n"},
		{[]string{"help", "hlep"}, "Did you mean this?\n\thelp\n"},
		{[]string{"status", "--stra", "s1"}, "did you mean --star?"},
	} {
		code, _, errs := runCLI(t, c.args...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("auditor %s: exit %d %q, want %d and %q", strings.Join(c.args, " "), code, errs, exitUsage, c.want)
		}
	}
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("denorm-lingr: 5m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errs := runCLI(t, "status", "--star", "s1", "--config", file)
	if code != exitUsage || !strings.Contains(errs, `did you mean "denorm-linger"?`) {
		t.Errorf("a mistyped YAML key: exit %d %q, want %d and the closest key", code, errs, exitUsage)
	}
}

// TestEveryCommandHasASynopsisAndAnExample: every command's -h starts
// with its one-line synopsis, then its description, and shows an example
// that runs the command.
func TestEveryCommandHasASynopsisAndAnExample(t *testing.T) {
	for name, c := range commands() {
		if c.example == "" || !strings.Contains(c.example, "auditor "+name) && !strings.Contains(c.example, "auditor completion") && name != "crashpoints" {
			t.Errorf("%s: example %q does not run the command", name, c.example)
		}
		if c.summary == "" || strings.Contains(c.summary, "\n") || c.description == "" {
			t.Errorf("%s: synopsis %q, description %q: want one line and a description", name, c.summary, c.description)
		}
		_, out, _ := runCLI(t, name, "-h")
		if !strings.Contains(out, "\nExamples:\n  "+c.example+"\n") {
			t.Errorf("%s -h does not show its example %q:\n%s", name, c.example, out)
		}
		if !strings.HasPrefix(out, c.summary+"\n\n"+c.description) {
			t.Errorf("%s -h does not start with its synopsis %q and its description", name, c.summary)
		}
	}
}

// TestHelpShowsBooleansPlain: no command's help, the top-level's
// included, shows a boolean as --name[=true|false] (pflag v1.1.0's
// rendering) or a zero duration's "(default 0s)"; cobra's -h, --help is
// shown plain, and a boolean still takes --name=false.
func TestHelpShowsBooleansPlain(t *testing.T) {
	helps := [][]string{{"--help"}}
	for name := range commands() {
		helps = append(helps, []string{name, "-h"})
	}
	for _, args := range helps {
		_, out, _ := runCLI(t, args...)
		if strings.Contains(out, "[=") || strings.Contains(out, "(default 0s)") || !regexp.MustCompile(`\n  -h, --help {2,}help for`).MatchString(out) {
			t.Errorf("auditor %s shows [=...] or (default 0s), or not a plain -h, --help:\n%s", strings.Join(args, " "), out)
		}
	}
	if code, _, errs := runCLI(t, "run", "--once=false", "--star", "s1", "--database-url", "postgres://u@127.0.0.1:1/x"); code != exitUsage || !strings.Contains(errs, "run only runs one cycle") {
		t.Errorf("run --once=false: exit %d %q, want %d and the refusal of a run without --once", code, errs, exitUsage)
	}
}
