package main

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/nova/auditor/internal/testenv"
	"github.com/nova/auditor/migrations"
)

// TestMigrateStatusAndDryRun: on a fresh database left empty, migrated part
// way (as an older binary would leave it), current, and ahead of the
// binary, `migrate --status` prints both versions and every migration
// applied or pending, exiting 0 only when current (20 behind, 21 ahead),
// and `migrate --dry-run` lists exactly the pending migrations and changes
// nothing (an empty database keeps no schema nova); ahead, it refuses as
// migrate does. Both flags at once are a usage error.
func TestMigrateStatusAndDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	latest := migrations.Latest()
	const partial = 5
	if latest <= partial {
		t.Fatalf("the binary knows %d migrations; the partial case needs more than %d", latest, partial)
	}
	line := regexp.MustCompile(`(?m)^(applied|pending|would apply)  (\d{4}) \w+`)
	count := func(out, kind string) (n, first, last int) {
		for _, m := range line.FindAllStringSubmatch(out, -1) {
			if m[1] != kind {
				continue
			}
			v, _ := strconv.Atoi(m[2])
			if n == 0 {
				first = v
			}
			n, last = n+1, v
		}
		return n, first, last
	}

	for _, tc := range []struct {
		name    string
		upTo    int  // migrations applied before the commands
		ahead   bool // and a version this binary does not know
		code    int  // of --status
		state   string
		dryCode int
	}{
		{name: "empty", upTo: 0, code: exitMigrateBehind, state: fmt.Sprintf("behind, %d pending", latest)},
		{name: "partial", upTo: partial, code: exitMigrateBehind, state: fmt.Sprintf("behind, %d pending", latest-partial)},
		{name: "current", upTo: latest, code: exitOK, state: "current"},
		{name: "ahead", upTo: latest, ahead: true, code: exitMigrateAhead, state: "ahead", dryCode: exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := testenv.FreshDatabase(t)
			dbVersion := tc.upTo
			if tc.upTo > 0 {
				conn, err := pgx.Connect(ctx, url)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := migrations.UpTo(ctx, conn, tc.upTo); err != nil {
					t.Fatal(err)
				}
				if tc.ahead {
					dbVersion = latest + 1
					if _, err := conn.Exec(ctx, `INSERT INTO nova.schema_migrations (version, name) VALUES ($1, 'future')`, dbVersion); err != nil {
						t.Fatal(err)
					}
				}
				conn.Close(ctx)
			}
			before := schemaSnapshot(t, url)

			code, out, errs := runCLI(t, "migrate", "--status", "--database-url", url)
			want := fmt.Sprintf("database schema version %d, this binary's %d: %s", dbVersion, latest, tc.state)
			if code != tc.code || !strings.HasPrefix(out, want) {
				t.Fatalf("migrate --status: exit %d %q %q, want exit %d and %q", code, out, errs, tc.code, want)
			}
			applied, firstA, lastA := count(out, "applied")
			pending, firstP, lastP := count(out, "pending")
			wantApplied := tc.upTo
			if tc.ahead {
				wantApplied++
				if !strings.Contains(out, fmt.Sprintf("%04d future", dbVersion)) || !strings.Contains(out, "(unknown to this binary)") {
					t.Errorf("migrate --status ahead does not name the unknown version:\n%s", out)
				}
			}
			if applied != wantApplied || (applied > 0 && (firstA != 1 || lastA != dbVersion)) {
				t.Errorf("migrate --status lists %d applied (%d to %d), want %d (1 to %d):\n%s", applied, firstA, lastA, wantApplied, dbVersion, out)
			}
			wantPending := max(latest-tc.upTo, 0)
			if tc.ahead {
				wantPending = 0
			}
			if pending != wantPending || (pending > 0 && (firstP != tc.upTo+1 || lastP != latest)) {
				t.Errorf("migrate --status lists %d pending (%d to %d), want %d (%d to %d):\n%s", pending, firstP, lastP, wantPending, tc.upTo+1, latest, out)
			}

			code, out, errs = runCLI(t, "migrate", "--dry-run", "--database-url", url)
			if code != tc.dryCode {
				t.Fatalf("migrate --dry-run: exit %d %q %q, want %d", code, out, errs, tc.dryCode)
			}
			switch {
			case tc.ahead:
				if !strings.Contains(errs, "newer than this binary") {
					t.Errorf("migrate --dry-run ahead: %q, want a refusal naming the newer schema", errs)
				}
			case wantPending == 0:
				if !strings.Contains(out, "already current, nothing to apply") {
					t.Errorf("migrate --dry-run current: %q", out)
				}
			default:
				n, first, last := count(out, "would apply")
				if n != wantPending || first != tc.upTo+1 || last != latest || !strings.Contains(out, "nothing applied") {
					t.Errorf("migrate --dry-run lists %d (%d to %d), want %d (%d to %d):\n%s", n, first, last, wantPending, tc.upTo+1, latest, out)
				}
			}
			if after := schemaSnapshot(t, url); after != before {
				t.Errorf("migrate --status and --dry-run changed the database:\nbefore %s\nafter  %s", before, after)
			}
		})
	}

	url := testenv.FreshDatabase(t)
	if code, _, errs := runCLI(t, "migrate", "--status", "--dry-run", "--database-url", url); code != exitUsage || !strings.Contains(errs, "dry-run") {
		t.Errorf("migrate --status --dry-run: exit %d %q, want %d naming dry-run", code, errs, exitUsage)
	}
}

// schemaSnapshot is what a change to the database would show: the
// relations of schema nova (none: no schema) and the recorded versions.
func schemaSnapshot(t *testing.T, url string) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var rels string
	if err := conn.QueryRow(ctx, `SELECT coalesce(string_agg(c.relname, ',' ORDER BY c.relname), '')
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'nova'`).Scan(&rels); err != nil {
		t.Fatal(err)
	}
	var schema bool
	if err := conn.QueryRow(ctx, `SELECT to_regnamespace('nova') IS NOT NULL`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	versions := ""
	if rels != "" {
		if err := conn.QueryRow(ctx, `SELECT string_agg(version::text, ',' ORDER BY version) FROM nova.schema_migrations`).Scan(&versions); err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf("schema %v; relations %s; versions %s", schema, rels, versions)
}

// TestMigrateStatusCodesMatchTheDocsAndHelp: migrateStatusCodes is the one
// table of migrate --status's codes: `auditor migrate -h` prints each row,
// docs/operations.md's operator surface holds the same table, and no code
// is one of exitCodes' or status --check's.
func TestMigrateStatusCodesMatchTheDocsAndHelp(t *testing.T) {
	code, help, _ := runCLI(t, "migrate", "-h")
	if code != exitOK {
		t.Fatalf("auditor migrate -h: exit %d", code)
	}
	rows := codeTableRows(t, filepath.Join("..", "..", "docs", "operations.md"), "## Operator surface", "| migrate --status code |")
	if len(rows) != len(migrateStatusCodes) {
		t.Errorf("docs/operations.md lists %d migrate --status codes, the binary %d", len(rows), len(migrateStatusCodes))
	}
	taken := map[int]bool{}
	for _, e := range exitCodes {
		taken[e.code] = true
	}
	for _, c := range statusCheckCodes {
		taken[c.code] = true
	}
	for _, c := range migrateStatusCodes {
		if line := "  " + strconv.Itoa(c.code) + "  " + c.meaning + "\n"; !strings.Contains(help, line) {
			t.Errorf("auditor migrate -h does not print %q", line)
		}
		if got := rows[strconv.Itoa(c.code)]; got != c.meaning {
			t.Errorf("migrate --status code %d: the docs say %q, the binary %q", c.code, got, c.meaning)
		}
		if taken[c.code] {
			t.Errorf("migrate --status code %d is also an exit code of another table", c.code)
		}
	}
}
