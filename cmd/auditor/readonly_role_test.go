package main

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/nova/auditor/catalog"
	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/sim"
)

// TestReadOnlyRole holds deploy/postgres-roles.sql's read-only role to
// what it is for, on a database that revokes CONNECT from PUBLIC, migrated
// as the migration role and holding a settled star:
//
//   - as the read-only role, `auditor status`, `status --json`, `ls`, `verify`
//     (which reads every settled object), `migrate --status` and `migrate
//     --dry-run` succeed, with no permission denied in their output
//     (`status --fleet` is not among them: it inserts the lease rows of
//     new stars);
//   - every grant of the role is needed: with each one revoked in turn,
//     one of those commands fails on a permission denied on that object;
//   - it writes nothing: its sessions start read-only, and with that set
//     off an INSERT, UPDATE or DELETE of an auditor table, and a CREATE in
//     the schema, are refused for want of privilege.
func TestReadOnlyRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	roles := newTestRoles(t)
	script := roles.script(t)
	url := testenv.FreshDatabase(t)
	root := t.TempDir()
	hardenAndApply(t, url, script)
	if code, out, errs := runCLI(t, "migrate", "--database-url", roleURL(t, url, roles.migrate)); code != 0 {
		t.Fatalf("migrate as %s: exit %d %s %s", roles.migrate, code, out, errs)
	}
	if notices := applyScript(t, url, script); len(notices) != 0 {
		t.Fatalf("the script after the migrations: %q", notices)
	}

	// A star with settled objects, written and settled as the superuser.
	func() {
		db, err := catalog.Open(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		store := newRoleStore(t, root)
		if _, err := sim.Setup(ctx, db, sim.SetupOptions{Star: "s1", Streams: 4, FenceWindow: 2, Content: sim.DefaultContent(5)}); err != nil {
			t.Fatal(err)
		}
		if _, err := sim.Write(ctx, db, sim.Storage{Store: store, Standard: roleBucket}, sim.WriteOptions{Star: "s1", Flights: 6,
			FlightBytes: 64 << 10, FlightInterval: time.Minute, Session: 1}); err != nil {
			t.Fatal(err)
		}
	}()
	store := []string{"--fs-root", root, "--bucket", roleBucket}
	if code, out, errs := runCLI(t, append([]string{"run", "--once", "--star", "s1", "--database-url", url, "--data-dir", t.TempDir(),
		"--denorm-linger", "0s", "--denorm-tail-growth", "0"}, store...)...); code != 0 {
		t.Fatalf("run --once as the superuser: exit %d %s %s", code, out, errs)
	}

	ro := roleURL(t, url, roles.readonly)
	star := append([]string{"--star", "s1", "--database-url", ro}, store...)
	commands := [][]string{
		append([]string{"status"}, star...),
		append([]string{"status", "--json"}, star...),
		append([]string{"verify"}, star...),
		append([]string{"ls"}, star...),
		append([]string{"ls", "--json"}, star...),
		{"migrate", "--status", "--database-url", ro},
		{"migrate", "--dry-run", "--database-url", ro},
	}
	// readAll runs every command as the read-only role: the first
	// permission denied (its line), or an error for any other failure.
	readAll := func() (deniedLine string, err error) {
		for _, args := range commands {
			code, out, errs := runCLI(t, args...)
			for _, line := range strings.Split(out+errs, "\n") {
				if strings.Contains(line, denied) {
					return line, nil
				}
			}
			if code != exitOK {
				return "", fmt.Errorf("auditor %s: exit %d: %s", strings.Join(args[:2], " "), code, errs)
			}
			if args[0] == "verify" && !regexp.MustCompile(`verified [1-9][0-9]* objects .*: 0 findings`).MatchString(out) {
				return "", errors.New("verify as the read-only role: " + out)
			}
		}
		return "", nil
	}
	if line, err := readAll(); line != "" || err != nil {
		t.Fatalf("as %s with every grant: %q %v", roles.readonly, line, err)
	}

	// Every grant is needed.
	var units []grantUnit
	for _, m := range grantStmt.FindAllStringSubmatch(script, -1) {
		if m[4] == roles.readonly {
			units = append(units, grantUnit{verb: m[1], kind: m[2], object: m[3]})
		}
	}
	if len(units) < 10 {
		t.Fatalf("only %d grants to %s found in %s", len(units), roles.readonly, rolesScript)
	}
	for _, u := range units {
		execSQL(t, url, u.revoke(roles.readonly, dbName(t, url)))
		line, err := readAll()
		switch {
		case err != nil:
			t.Errorf("without %s the commands broke without a permission denied: %v", u, err)
		case line == "":
			t.Errorf("%s is never needed: status and verify ran without it", u)
		case !strings.Contains(line, u.deniedOn()):
			t.Errorf("without %s the permission denied is not %q: %s", u, u.deniedOn(), line)
		}
		applyScript(t, url, script) // every grant back
	}

	// It writes nothing.
	c, err := pgx.Connect(ctx, ro)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	writes := []string{
		`INSERT INTO nova.admin_requests (star, kind) VALUES ('s1', 'pause')`,
		`UPDATE nova.streams SET settled_through = settled_through`,
		`DELETE FROM nova.catalog`,
		`CREATE TABLE nova.readonly_probe (x int)`,
	}
	for _, w := range writes {
		if code := sqlState(c.Exec(ctx, w)); code != "25006" {
			t.Errorf("%s as %s in a default session: SQLSTATE %q, want 25006 (read-only transaction)", w, roles.readonly, code)
		}
	}
	if _, err := c.Exec(ctx, `SET default_transaction_read_only = off`); err != nil {
		t.Fatal(err)
	}
	for _, w := range writes {
		if code := sqlState(c.Exec(ctx, w)); code != "42501" {
			t.Errorf("%s as %s with read-only off: SQLSTATE %q, want 42501 (insufficient privilege)", w, roles.readonly, code)
		}
	}
}

// sqlState is the Postgres error code of a statement's error ("" for none
// or for an error that is not Postgres's).
func sqlState(_ pgconn.CommandTag, err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
