package main

import (
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nova/auditor/internal/testenv"
)

// closedPortURL is a database URL nothing listens at: the connection is
// refused at the network level, and connect_timeout bounds the wait.
const closedPortURL = "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"

// otherDatabase is url naming another database of the same server.
func otherDatabase(t *testing.T, raw, name string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// TestEveryCommandRefusesBadInput: every subcommand of the dispatch table,
// given an unknown flag, a bad size, a bad duration, a database nothing
// listens at, or one that answers and refuses the URL, exits with the
// code the table documents (2 for what the operator must fix, 5 for a
// dependency that did not answer), a code its -h lists, and says on
// stderr which flag is at fault. A command that takes no size or duration
// flag, or reads no database, skips those rows; serve waits for a database
// that does not answer (its /readyz says so) rather than exiting.
func TestEveryCommandRefusesBadInput(t *testing.T) {
	t.Parallel()
	refusing := otherDatabase(t, testenv.DatabaseURL(t), "no_such_database_for_bad_input")
	fsRoot := t.TempDir()

	type row struct {
		name  string
		args  []string
		code  int
		field string // what stderr must name
	}
	// What each command needs besides the row's own flags, and which of
	// the database rows apply to it.
	type shape struct {
		base      []string // before the row's flags (inspect's key form)
		sizes     bool     // it binds the configuration keys (sizes, durations)
		database  bool     // it reads the metastore and exits when it does not answer
		extraRows []row
	}
	shapes := map[string]shape{
		"migrate":     {sizes: true, database: true},
		"run":         {sizes: true, database: true},
		"serve":       {sizes: true},
		"version":     {},
		"inspect":     {base: []string{"--key", "x"}, sizes: true},
		"crashpoints": {},
		"trigger": {sizes: true, database: true, extraRows: []row{
			{"bad --wait", []string{"trigger", "--wait", "soon"}, exitUsage, "wait"}}},
		"pause":   {sizes: true, database: true},
		"resume":  {sizes: true, database: true},
		"release": {sizes: true, database: true},
		"erase": {sizes: true, database: true, extraRows: []row{
			{"bad --timeout", []string{"erase", "--wait", "--timeout", "later"}, exitUsage, "timeout"}}},
		"ls": {sizes: true, database: true},
		"status": {sizes: true, database: true, extraRows: []row{
			{"unreachable database, --fleet", []string{"status", "--fleet", "--database-url", closedPortURL}, exitUnreachable, "database-url"}}},
		"verify": {sizes: true, database: true, extraRows: []row{
			{"bad --window", []string{"verify", "--star", "s1", "--database-url", closedPortURL, "--window", "4XB"}, exitUsage, "window"},
			{"bad --rate", []string{"verify", "--star", "s1", "--database-url", closedPortURL, "--rate", "fast"}, exitUsage, "rate"}}},
		"reconcile":  {sizes: true, database: true},
		"doctor":     {sizes: true, database: true},
		"completion": {},
	}
	cmds := commands()
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
		if _, ok := shapes[n]; !ok {
			t.Errorf("command %s has no row in this test: say which bad input applies to it", n)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		sh := shapes[name]
		with := func(flags ...string) []string {
			return append(append([]string{name}, sh.base...), flags...)
		}
		rows := []row{{"unknown flag", with("--no-such-flag"), exitUsage, "no-such-flag"}}
		if sh.sizes {
			rows = append(rows,
				row{"bad size", with("--settle-max-bytes", "12XB"), exitUsage, "settle-max-bytes"},
				row{"bad duration", with("--lease-ttl", "5parsecs"), exitUsage, "lease-ttl"})
		}
		if sh.database {
			store := []string{"--star", "s1", "--fs-root", fsRoot}
			rows = append(rows,
				row{"unreachable database", with(append(store, "--database-url", closedPortURL)...), exitUnreachable, "database-url"},
				row{"database refusing the URL", with(append(store, "--database-url", refusing)...), exitUsage, "database-url"})
			if name == "doctor" { // a refused database is one of doctor's failed checks
				rows[len(rows)-1].code = exitFindings
			}
		}
		rows = append(rows, sh.extraRows...)
		for _, r := range rows {
			t.Run(name+"/"+r.name, func(t *testing.T) {
				t.Parallel()
				code, stdout, stderr := runCLI(t, r.args...)
				if code != r.code {
					t.Fatalf("auditor %s: exit %d, want %d\nstdout %q\nstderr %q", strings.Join(r.args, " "), code, r.code, stdout, stderr)
				}
				if !slices.Contains(cmds[name].exits, code) {
					t.Errorf("auditor %s exits %d, which its -h does not list (%v)", name, code, cmds[name].exits)
				}
				said := stderr
				if name == "doctor" && code == exitFindings {
					said = stdout // doctor's failed checks are its table, with what to change
				}
				if !strings.Contains(said, r.field) {
					t.Errorf("auditor %s: stderr does not name %s: %q", strings.Join(r.args, " "), r.field, stderr)
				}
				if code == exitUnreachable && (!strings.Contains(stderr, "could not be reached") || strings.Contains(stderr, "database-url: ")) {
					t.Errorf("auditor %s: an unreachable database must be said so, not blamed on the URL: %q", name, stderr)
				}
			})
		}
	}
}

// TestEveryCommandHelpListsItsExitCodes: each command's -h ends with the
// rows of the exit-code table it may return, as auditor --help prints them.
func TestEveryCommandHelpListsItsExitCodes(t *testing.T) {
	t.Parallel()
	for name, c := range commands() {
		code, out, errs := runCLI(t, name, "-h")
		if code != exitOK {
			t.Errorf("auditor %s -h: exit %d %q", name, code, errs)
			continue
		}
		if name == "inspect" { // the file form's usage lists its own codes
			continue
		}
		_, listed, ok := strings.Cut(out, "exit codes:\n")
		if !ok {
			t.Errorf("auditor %s -h lists no exit codes:\n%s", name, out)
			continue
		}
		for _, want := range c.exits {
			if !strings.Contains(listed, "  "+strconv.Itoa(want)+"  ") {
				t.Errorf("auditor %s -h does not list exit %d:\n%s", name, want, listed)
			}
		}
	}
}
