package main

import (
	"os"
	"path/filepath"
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
	if code != exitOK || viaHelp != viaFlag || !strings.HasPrefix(viaHelp, "usage of auditor run:") {
		t.Fatalf("auditor help run: exit %d, %.80q; want run -h's help", code, viaHelp)
	}
	_, out, _ := runCLI(t, "migrate", "-h")
	own, shared, found := strings.Cut(out, "\nshared configuration")
	if !found {
		t.Fatalf("migrate -h has no shared configuration heading:\n%s", out)
	}
	if n := strings.Count(own, "\n  --"); n == 0 || n > 12 {
		t.Errorf("migrate -h lists %d flags before the shared configuration, want 1 to 12:\n%s", n, own)
	}
	for _, want := range []string{"--denorm-linger=DURATION", "--denorm-output-cap-mib=SIZE", "--database-url=STRING", "--config=FILE", "\n  --pprof\n"} {
		if !strings.Contains(shared, want) {
			t.Errorf("the shared configuration of migrate -h lacks %q", want)
		}
	}
	if strings.Contains(own, "--denorm-linger") {
		t.Errorf("migrate -h lists a configuration key among its own flags")
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrat"}, `did you mean "migrate"?`},
		{[]string{"help", "sever"}, `did you mean "serve"?`},
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

// TestEveryCommandHasASynopsisAndAnExample: every command's -h shows an
// example that starts with the command, and those built on the shared
// flags show their one-line summary under the usage line.
func TestEveryCommandHasASynopsisAndAnExample(t *testing.T) {
	for name, c := range commands() {
		if c.example == "" || !strings.Contains(c.example, "auditor "+name) && !strings.Contains(c.example, "auditor completion") && name != "crashpoints" {
			t.Errorf("%s: example %q does not run the command", name, c.example)
		}
		_, out, _ := runCLI(t, name, "-h")
		if !strings.Contains(out, "example:\n  "+c.example+"\n") {
			t.Errorf("%s -h does not show its example %q:\n%s", name, c.example, out)
		}
		if strings.HasPrefix(out, "usage of auditor "+name+":\n") && strings.Count(out, "\n  --") > 0 && !strings.Contains(out, "\n  "+c.summary+"\n") {
			t.Errorf("%s -h does not show its synopsis %q", name, c.summary)
		}
	}
}
