package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/nova/auditor/internal/config"
	"github.com/nova/auditor/internal/testenv"
)

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := dispatch(context.Background(), env{stdout: &out, stderr: &errb, getenv: func(string) string { return "" }}, args)
	return code, out.String(), errb.String()
}

// loadFlags loads the configuration of the command line args (the
// process's environment below it) as a command built on the shared flags
// does.
func loadFlags(args []string, require ...string) (config.Config, error) {
	c := &cobra.Command{Use: "t"}
	fs := newFlags(env{stdout: io.Discard, stderr: io.Discard, getenv: os.Getenv}, c)
	if err := c.ParseFlags(args); err != nil {
		return config.Config{}, fmt.Errorf("parse %q: %w", args, err)
	}
	return fs.Load(c.Flags().Args(), require...)
}

func TestMigrateThenRunVersionChecks(t *testing.T) {
	t.Parallel()
	url := testenv.FreshDatabase(t)

	// An unmigrated database: run and serve refuse with exit 2.
	for _, cmd := range []string{"run", "serve"} {
		code, _, stderr := runCLI(t, cmd, "--star", "s1", "--database-url", url)
		if code != 2 || !strings.Contains(stderr, "auditor migrate") {
			t.Fatalf("%s on an empty database: exit %d, %q", cmd, code, stderr)
		}
	}
	code, stdout, stderr := runCLI(t, "migrate", "--database-url", url)
	if code != 0 || !strings.Contains(stdout, "applied [1") {
		t.Fatalf("migrate: exit %d, %q %q", code, stdout, stderr)
	}
	code, stdout, _ = runCLI(t, "migrate", "--database-url", url)
	if code != 0 || !strings.Contains(stdout, "already current") {
		t.Fatalf("second migrate: exit %d, %q", code, stdout)
	}

	// A database newer than the binary is refused by every command.
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO nova.schema_migrations (version, name) VALUES (999, 'future')`); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"migrate"}, {"run", "--star", "s1"}, {"serve", "--star", "s1"}} {
		code, _, stderr := runCLI(t, append(args, "--database-url", url)...)
		if code != 2 || !strings.Contains(stderr, "newer than this binary") {
			t.Fatalf("%v on a newer database: exit %d, %q", args, code, stderr)
		}
	}
}

// TestUnreachableDatabaseExits5WithoutSecrets: a database nothing listens
// at is a dependency not reached (exit 5), said so, never the URL blamed,
// and the password is not printed.
func TestUnreachableDatabaseExits5WithoutSecrets(t *testing.T) {
	t.Parallel()
	const secret = "hunter2secret"
	code, stdout, stderr := runCLI(t, "run", "--star", "s1", "--database-url", "postgres://u:"+secret+"@127.0.0.1:1/x?connect_timeout=2")
	if code != exitUnreachable || !strings.HasPrefix(stderr, "auditor: the database could not be reached at ") || !strings.Contains(stderr, "database-url") {
		t.Fatalf("exit %d, want %d saying the database could not be reached: %q", code, exitUnreachable, stderr)
	}
	if strings.Contains(stderr+stdout, secret) {
		t.Fatalf("output leaks the password: %q", stderr)
	}
}

func TestBadConfigurationExits2WithoutSecrets(t *testing.T) {
	t.Parallel()
	const secret = "hunter2secret"
	cases := []struct {
		name  string
		args  []string
		field string
	}{
		{"unknown flag", []string{"run", "--denorm-lingr", "5m"}, "denorm-lingr"},
		{"negative duration", []string{"run", "--star", "s1", "--database-url", "postgres://u:" + secret + "@127.0.0.1:1/x", "--denorm-linger", "-5m"}, "denorm-linger"},
		{"express without =", []string{"run", "--star", "s1", "--database-url", "postgres://u:" + secret + "@127.0.0.1:1/x", "--s3-express-buckets", "az1"}, "s3-express-buckets"},
		{"bad star", []string{"run", "--star", "No_Good", "--database-url", "postgres://u:" + secret + "@127.0.0.1:1/x"}, "star"},
		{"missing star", []string{"run", "--database-url", "postgres://u:" + secret + "@127.0.0.1:1/x"}, "star"},
		{"unknown command", []string{"settle-everything"}, "unknown command"},
		{"unreadable database CA file", []string{"run", "--star", "s1", "--database-url", "postgres://u:" + secret + "@127.0.0.1:1/x?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem&sslpassword=" + secret}, "database-url"},
		{"unreadable S3 CA file", []string{"inspect", "--key", "x", "--s3-endpoint", "https://127.0.0.1:1", "--s3-ca-file", "/nonexistent/ca.pem"}, "s3-ca-file"},
		{"zero attempt deadline", []string{"inspect", "--key", "x", "--s3-endpoint", "https://127.0.0.1:1", "--s3-attempt-timeout-copy", "0s"}, "s3-attempt-timeout-copy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.args...)
			if code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, stderr)
			}
			if !strings.Contains(stderr, tc.field) {
				t.Fatalf("stderr %q does not name %s", stderr, tc.field)
			}
			if strings.Contains(stderr+stdout, secret) {
				t.Fatalf("output leaks the password: %q", stderr)
			}
		})
	}
}

// TestRunUnknownStarOrStream: run --once (and its dry run) of a star the
// metastore does not hold, or of a stream not in the star, is a
// configuration error (exit 2) naming it, as the exit code table says,
// before any cycle: no run is recorded.
func TestRunUnknownStarOrStream(t *testing.T) {
	t.Parallel()
	url, _ := migratedDB(t)
	common := []string{"--database-url", url, "--fs-root", t.TempDir(), "--data-dir", t.TempDir(), "--log-level", "error"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--once", "--star", "nosuch"}, `no star "nosuch"`},
		{[]string{"run", "--once", "--dry-run", "--star", "nosuch"}, `no star "nosuch"`},
		{[]string{"run", "--once", "--star", "s1", "--stream", "00000000000000000000000000000001"}, `no stream 00000000-0000-0000-0000-000000000001 in star "s1"`},
	} {
		code, _, errs := runCLI(t, append(c.args, common...)...)
		if code != exitUsage || !strings.Contains(errs, c.want) {
			t.Errorf("auditor %s: exit %d %q, want %d and %q", strings.Join(c.args, " "), code, errs, exitUsage, c.want)
		}
	}
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var runs int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM nova.auditor_runs").Scan(&runs); err != nil {
		t.Fatal(err)
	}
	if runs != 0 {
		t.Errorf("%d runs recorded, want none", runs)
	}
}
