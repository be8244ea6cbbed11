package main

import (
	"context"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/daemon"
	"github.com/nova/auditor/sim"
)

// TestServeWaitsForAnUnreachableDatabase: a database that is down when
// serve starts is waited for (healthz 200, readyz 503, the process stays
// up) instead of exit 2; once it answers the daemon becomes ready and
// leads. A bad configuration still exits 2.
func TestServeWaitsForAnUnreachableDatabase(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	proxy := newProxy(t, dbHostPort(t, url))
	proxy.cut()
	p := startServe(t, "w1", proxy.via(t, url)+"&connect_timeout=1")
	time.Sleep(3 * time.Second) // a few tries
	if p.exited() {
		t.Fatalf("serve exited on an unreachable database: %v", p.err)
	}
	if code, _ := p.get("/healthz"); code != 200 {
		t.Fatalf("/healthz %d while waiting", code)
	}
	if code, body := p.get("/readyz"); code != 503 || !strings.Contains(body, "database") {
		t.Fatalf("/readyz %d %q while waiting", code, body)
	}
	if !p.out.contains("the database is unreachable; waiting for it") {
		t.Fatal("the wait is not logged")
	}
	proxy.restore()
	took := eventually(t, 40*time.Second, "leads once the database answers", func() bool {
		l, live := currentLease(t, db)
		return live && l.Holder == "w1"
	})
	t.Logf("led %s after the database came back (backoff from 1s doubling to 30s)", took)
	if code, body := p.get("/readyz"); code != 200 {
		t.Fatalf("/readyz %d %q after the database came back", code, body)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}

	// Configuration errors are not waited out: a bad flag, or a database
	// that answers and refuses the URL (no such database).
	code, _, stderr := runCLI(t, "serve", "--star", "s1", "--database-url", url, "--lease-renew", "1m")
	if code != 2 || !strings.Contains(stderr, "lease-renew") {
		t.Fatalf("a bad configuration: exit %d %q", code, stderr)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/no_such_database_here"
	code, _, stderr = runCLI(t, "serve", "--star", "s1", "--database-url", u.String(), "--fs-root", t.TempDir(), "--data-dir", t.TempDir())
	if code != 2 || !strings.Contains(stderr, "refused") {
		t.Fatalf("a database that does not exist: exit %d %q", code, stderr)
	}
}

// TestNewerSchemaStopsTheServingLeader: a migration newer than the binary,
// applied while serve runs, makes the leader step down and run no more
// cycles (a trigger waits), and no instance takes the lease; when the
// schema is the binary's again, work resumes.
func TestNewerSchemaStopsTheServingLeader(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	p := startServe(t, "n1", url, "--denorm-linger", "0s", "--denorm-tail-growth", "0")
	eventually(t, 10*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `INSERT INTO nova.schema_migrations (version, name) VALUES (999, 'future')`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the leader steps down on the newer schema", func() bool {
		return p.gauge("nova_auditor_leader") == 0 && value(p.metrics(), "nova_auditor_work_blocked", map[string]string{"reason": "schema"}) == 1
	})
	eventually(t, 5*time.Second, "the lease is released on a newer schema", func() bool {
		_, live := currentLease(t, db)
		return !live
	})
	runsBefore, _ := db.Ledger().LastRuns(ctx, "s1", 100)
	if _, err := db.Requests().RequestAdmin(ctx, "s1", catalog.AdminTrigger, nil, "test"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if runs, _ := db.Ledger().LastRuns(ctx, "s1", 100); len(runs) != len(runsBefore) {
		t.Fatalf("%d cycles ran on a newer schema", len(runs)-len(runsBefore))
	}
	if code, _ := p.get("/readyz"); code != 503 {
		t.Fatalf("/readyz %d on a newer schema", code)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM nova.schema_migrations WHERE version = 999`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the waiting trigger runs once the schema is the binary's", func() bool {
		runs, _ := db.Ledger().LastRuns(ctx, "s1", 100)
		return len(runs) > len(runsBefore)
	})
}

// TestStatusUsesTheDaemonsPolicy: auditor status, run with other flags,
// shows the linger and age cap the daemon runs with (as /status does),
// and says where they come from.
func TestStatusUsesTheDaemonsPolicy(t *testing.T) {
	t.Parallel()
	url, db := migratedDB(t)
	p := startServe(t, "p1", url, "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--denorm-age-cap", "2h")
	eventually(t, 10*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
	eventually(t, 10*time.Second, "the runtime is recorded", func() bool {
		_, err := db.Ledger().Runtime(context.Background(), "s1")
		return err == nil
	})
	code, out, errs := runCLI(t, "status", "--star", "s1", "--database-url", url, "--json", "--denorm-linger", "5m")
	if code != 0 {
		t.Fatalf("status: %d %s", code, errs)
	}
	var s daemon.Status
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Policy.Source != "leader" || s.Policy.Holder != "p1" || s.Policy.Linger != 0 || s.Policy.AgeCap != 7200 {
		t.Fatalf("policy %+v, want the daemon's (linger 0s, age cap 2h)", s.Policy)
	}
	for _, c := range s.Classes {
		if c.Class == catalog.ClassStandard && (c.Linger != 0 || c.AgeCap != 7200) {
			t.Fatalf("class %+v computed with the operator's flags", c)
		}
	}
	_, body := p.get("/status")
	var served daemon.Status
	if err := json.Unmarshal([]byte(body), &served); err != nil {
		t.Fatal(err)
	}
	if served.Policy.Linger != s.Policy.Linger || served.Policy.AgeCap != s.Policy.AgeCap {
		t.Fatalf("/status %+v and auditor status %+v disagree", served.Policy, s.Policy)
	}
	if got := value(p.metrics(), "nova_auditor_age_cap_seconds", map[string]string{"class": "standard"}); got != 7200 {
		t.Fatalf("age_cap_seconds %v, want 7200", got)
	}
	code, out, _ = runCLI(t, "status", "--star", "s1", "--database-url", url)
	if code != 0 || !strings.Contains(out, "linger 0s, age cap 2h0m") || !strings.Contains(out, "the daemon p1") {
		t.Fatalf("status text does not show the daemon's policy:\n%s", out)
	}
}

// TestUnknownStarAndStreamAreErrors: a typo in --star or --stream is exit 2
// naming it, not a healthy-looking status or a request no one takes.
func TestUnknownStarAndStreamAreErrors(t *testing.T) {
	t.Parallel()
	url, db := migratedDBNoStar(t)
	if _, err := sim.Setup(context.Background(), db, sim.SetupOptions{Star: "s1", Streams: 1, Content: sim.DefaultContent(1)}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args  []string
		field string
	}{
		{[]string{"status", "--star", "s1x"}, `no star "s1x"`},
		{[]string{"trigger", "--star", "s1x"}, `no star "s1x"`},
		{[]string{"trigger", "--star", "s1", "--stream", "00000000-0000-0000-0000-0000000000ff"}, "no stream 00000000-0000-0000-0000-0000000000ff"},
	} {
		code, out, stderr := runCLI(t, append(tc.args, "--database-url", url)...)
		if code != exitUsage || !strings.Contains(stderr, tc.field) {
			t.Errorf("%v: exit %d, stdout %q stderr %q", tc.args, code, out, stderr)
		}
	}
	if reqs, _ := db.Requests().AdminRequests(context.Background(), "s1", true, 10); len(reqs) != 0 {
		t.Fatalf("a request for an unknown stream was recorded: %+v", reqs)
	}
	if code, _, stderr := runCLI(t, "status", "--star", "s1", "--database-url", url); code != 0 {
		t.Fatalf("status of a known star: %d %s", code, stderr)
	}
}

// TestFlagsHelpVersionAndCompletion: a boolean takes no value, so it never
// swallows the next flag; help goes to stdout with exit 0 and names each
// default once; --version and the completion script work; the chunk
// target follows a small output cap unless set.
func TestFlagsHelpVersionAndCompletion(t *testing.T) {
	t.Parallel()
	// --s3-path-style --json: --json is status's, not the boolean's value.
	code, _, stderr := runCLI(t, "status", "--s3-path-style", "--json", "--star", "s1")
	if code != exitUsage || strings.Contains(stderr, "json") || !strings.Contains(stderr, "database-url") {
		t.Fatalf("--s3-path-style --json: exit %d %q (want only the missing database-url)", code, stderr)
	}
	if code, _, stderr := runCLI(t, "status", "--s3-path-style=false", "--star", "s1"); code != exitUsage || !strings.Contains(stderr, "database-url") {
		t.Fatalf("--s3-path-style=false: %d %q", code, stderr)
	}

	for _, cmd := range []string{"serve", "run", "status", "trigger", "pause", "resume", "release", "erase", "verify", "migrate"} {
		code, out, errs := runCLI(t, cmd, "--help")
		if code != 0 || errs != "" || !strings.Contains(out, "-holder") && cmd != "migrate" {
			t.Fatalf("%s --help: exit %d, stdout %q, stderr %q", cmd, code, out, errs)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Count(line, "(default") > 1 {
				t.Errorf("%s --help: two defaults in %q", cmd, line)
			}
		}
	}
	if code, out, _ := runCLI(t, "--help"); code != 0 || !strings.Contains(out, "exit codes:") || !strings.Contains(out, "  4  inspect") {
		t.Fatalf("auditor --help: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, "inspect", "--help"); code != 0 || !strings.Contains(out, "auditor inspect --key KEY") {
		t.Fatalf("inspect --help: %d %q", code, out)
	}
	if code, out, _ := runCLI(t, "--version"); code != 0 || !strings.HasPrefix(out, "auditor ") {
		t.Fatalf("--version: %d %q", code, out)
	}
	code, script, _ := runCLI(t, "completion", "bash")
	if code != 0 || !strings.Contains(script, "complete -o default -F __start_auditor auditor") || !strings.Contains(script, "__complete") {
		t.Fatalf("completion bash: %d %q", code, script)
	}
	// The script (cobra's) completes commands and flags by asking the
	// binary (auditor __complete): run it in bash against the real binary.
	// It takes _get_comp_words_by_ref from the bash-completion package
	// where _init_completion is missing; this shim stands in for it.
	if bash, err := exec.LookPath("bash"); err == nil {
		dir := t.TempDir()
		if err := os.Symlink(auditorBinary(t), filepath.Join(dir, "auditor")); err != nil {
			t.Fatal(err)
		}
		const shim = `declare -F _get_comp_words_by_ref >/dev/null || _get_comp_words_by_ref() { cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}; words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD; }`
		sh := filepath.Join(dir, "c.sh")
		if err := os.WriteFile(sh, []byte(shim+"\n"+script+"\nCOMP_WORDS=(auditor status --js); COMP_CWORD=2; __start_auditor; echo \"${COMPREPLY[@]}\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bash, sh)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		out, err := cmd.Output()
		if err != nil || strings.TrimSpace(string(out)) != "--json" {
			t.Fatalf("completing `auditor status --js`: %q %v", out, err)
		}
	}
	code, _, stderr = runCLI(t, "completion", "tcsh")
	if code != exitUsage || !strings.Contains(stderr, "completion") {
		t.Fatalf("completion tcsh: %d %q, want %d naming completion", code, stderr, exitUsage)
	}
	// zsh loads its script after compinit and defines the function; fish
	// completes a flag from the real binary's help and a command
	// (scripts/services.sh installs both shells).
	shells := map[string]func(dir, script string) *exec.Cmd{
		"zsh": func(dir, script string) *exec.Cmd {
			return exec.Command("zsh", "-c", "autoload -U compinit; compinit -u -d "+filepath.Join(dir, "zcomp")+"; source "+script+"; print $+functions[_auditor]")
		},
		"fish": func(dir, script string) *exec.Cmd {
			return exec.Command("fish", "--no-config", "-c", "source "+script+"; complete -C 'auditor status --js'; complete -C 'auditor mig'")
		},
	}
	want := map[string]string{"zsh": "1", "fish": "--json\nmigrate"}
	for shell, run := range shells {
		if _, err := exec.LookPath(shell); err != nil {
			t.Logf("completion %s: not loaded, %s is not installed (scripts/services.sh installs it)", shell, shell)
			continue
		}
		code, script, _ := runCLI(t, "completion", shell)
		if code != 0 || !strings.Contains(script, "__complete") {
			t.Fatalf("completion %s: %d %q", shell, code, script)
		}
		dir := t.TempDir()
		if err := os.Symlink(auditorBinary(t), filepath.Join(dir, "auditor")); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "c."+shell)
		if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := run(dir, path)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "HOME="+dir)
		out, err := cmd.Output()
		// fish prints each candidate with its description after a tab.
		got := regexp.MustCompile(`\t[^\n]*`).ReplaceAllString(strings.TrimSpace(string(out)), "")
		if err != nil || got != want[shell] {
			t.Fatalf("completion %s loaded in %s: %q %v, want %q", shell, shell, out, err, want[shell])
		}
	}
}

// TestExitCodesMatchTheDocsAndHelp: exitCodes is the one table of exit
// codes. `auditor --help` prints each of its rows and no other, and the
// README and docs/operations.md's operator surface each hold one
// "| exit code | meaning |" table with exactly its rows.
func TestExitCodesMatchTheDocsAndHelp(t *testing.T) {
	code, help, _ := runCLI(t, "--help")
	if code != exitOK {
		t.Fatalf("auditor --help: exit %d", code)
	}
	_, printed, ok := strings.Cut(help, "exit codes:\n")
	if !ok {
		t.Fatalf("auditor --help prints no exit codes:\n%s", help)
	}
	if n := strings.Count(printed, "\n"); n != len(exitCodes) {
		t.Errorf("auditor --help prints %d exit-code lines, the table has %d:\n%s", n, len(exitCodes), printed)
	}
	for _, c := range exitCodes {
		if line := fmt.Sprintf("  %d  %s\n", c.code, c.meaning); !strings.Contains(printed, line) {
			t.Errorf("auditor --help does not print exit %d as %q", c.code, line)
		}
	}

	for _, doc := range []struct{ file, section string }{
		{"README.md", ""},
		{"docs/operations.md", "## Operator surface"},
	} {
		rows := exitCodeRows(t, filepath.Join("..", "..", filepath.FromSlash(doc.file)), doc.section)
		if len(rows) != len(exitCodes) {
			t.Errorf("%s lists %d exit codes, the binary %d: %v", doc.file, len(rows), len(exitCodes), rows)
		}
		for _, c := range exitCodes {
			if got := rows[strconv.Itoa(c.code)]; got != c.meaning {
				t.Errorf("exit %d: %s says %q, the binary %q", c.code, doc.file, got, c.meaning)
			}
		}
	}
}

// exitCodeRows reads the one "| exit code | meaning |" table of a Markdown
// file, or of its section (a "## " heading to the next) when section is set.
func exitCodeRows(t *testing.T, path, section string) map[string]string {
	t.Helper()
	return codeTableRows(t, path, section, "| exit code |")
}

// codeTableRows reads the one table of a Markdown file (or of its section)
// whose header starts with header: code -> meaning.
func codeTableRows(t *testing.T, path, section, header string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	if section != "" {
		i := strings.Index(text, "\n"+section+"\n")
		if i < 0 {
			t.Fatalf("%s has no section %q", path, section)
		}
		text = text[i+1:]
		if end := strings.Index(text[len(section):], "\n## "); end >= 0 {
			text = text[:len(section)+end]
		}
	}
	rows := map[string]string{}
	tables := 0
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, header):
			tables++
			in = true
		case in && !strings.HasPrefix(line, "|"):
			in = false
		case in && !strings.HasPrefix(line, "|---"):
			cells := strings.Split(strings.Trim(line, "|"), "|")
			if len(cells) != 2 {
				t.Errorf("%s: exit-code row %q has %d cells", path, line, len(cells))
				continue
			}
			rows[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
		}
	}
	if tables != 1 {
		t.Fatalf("%s (section %q) has %d %q tables, want 1", path, section, tables, header)
	}
	return rows
}

// TestInspectKeyNeedsNoTempDir: inspect --key decodes the fetched object in
// memory, so it works where no temporary directory is writable (a pod
// with a read-only root filesystem).
func TestInspectKeyNeedsNoTempDir(t *testing.T) {
	root := t.TempDir()
	obj, err := os.ReadFile(filepath.Join("..", "..", "bundlefmt", "testdata", "example2_settled.bin"))
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, "nova", filepath.FromSlash(inspectSettledKey))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, obj, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", filepath.Join(root, "no-such-dir"))
	code, out, errs := runCLI(t, "inspect", "--key", inspectSettledKey, "--fs-root", root, "--json")
	if code != 0 || !strings.Contains(out, `"kind": "settled"`) {
		t.Fatalf("inspect --key without a temp dir: exit %d %q %q", code, out, errs)
	}
}

// TestDryRunBesideAServingDaemon: `run --once --dry-run` prints the plan
// while a daemon holds the lease, and changes nothing: the lease, the run
// ledger and the store are as they were.
func TestDryRunBesideAServingDaemon(t *testing.T) {
	t.Parallel()
	url, db := migratedDBNoStar(t)
	ctx := context.Background()
	if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 3, Content: sim.DefaultContent(5)}); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	p := startServe(t, "r1", url, "--fs-root", root)
	eventually(t, 10*time.Second, "leads", func() bool { return p.gauge("nova_auditor_leader") == 1 })
	before, _ := currentLease(t, db)
	code, out, errs := runCLI(t, "run", "--once", "--dry-run", "--star", "s1", "--database-url", url, "--fs-root", root,
		"--data-dir", t.TempDir(), "--denorm-linger", "0s", "--denorm-tail-growth", "0", "--log-level", "warn")
	if code != 0 || !strings.Contains(out, "cycle ok") {
		t.Fatalf("dry run beside the leader: exit %d %q %q", code, out, errs)
	}
	if after, live := currentLease(t, db); !live || after.Token != before.Token || after.Holder != "r1" {
		t.Fatalf("the dry run touched the lease: %+v then %+v", before, after)
	}
	if runs, _ := db.Ledger().LastRuns(ctx, "s1", 10); len(runs) != 0 {
		t.Fatalf("the dry run recorded %d runs", len(runs))
	}
}
