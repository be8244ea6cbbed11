package repocheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/nova/auditor/migrations"
)

// rolesGrant is what deploy/postgres-roles.sql grants nova_auditor on one
// table or sequence: each verb with its column list ("" for the whole
// table).
type rolesGrant map[string][]string

func (g rolesGrant) String() string {
	var parts []string
	for _, v := range []string{"SELECT", "INSERT", "UPDATE", "DELETE", "USAGE"} {
		cols, ok := g[v]
		switch {
		case !ok:
		case len(cols) == 0:
			parts = append(parts, v)
		default:
			parts = append(parts, v+" ("+strings.Join(cols, ", ")+")")
		}
	}
	return strings.Join(parts, ", ")
}

var (
	rolesGrantRe = regexp.MustCompile(`(?m)^\s*GRANT ((?:[A-Z]+(?: \([a-z_, ]+\))?(?:, )?)+) ON (SEQUENCE )?nova\.(\w+) TO nova_auditor;`)
	rolesVerbRe  = regexp.MustCompile(`([A-Z]+)(?: \(([a-z_, ]+)\))?`)
)

// rolesScriptGrants reads the script's grants to nova_auditor on tables
// and sequences of nova, by object name.
func rolesScriptGrants(t *testing.T, script string) map[string]rolesGrant {
	out := map[string]rolesGrant{}
	for _, m := range rolesGrantRe.FindAllStringSubmatch(script, -1) {
		if out[m[3]] != nil {
			t.Errorf("deploy/postgres-roles.sql grants on nova.%s twice: keep one statement per object", m[3])
		}
		g := rolesGrant{}
		for _, v := range rolesVerbRe.FindAllStringSubmatch(m[1], -1) {
			var cols []string
			for _, c := range strings.Split(v[2], ",") {
				if c = strings.TrimSpace(c); c != "" {
					cols = append(cols, c)
				}
			}
			g[v[1]] = cols
		}
		out[m[3]] = g
	}
	return out
}

// TestRolesScriptFollowsTheMigrations holds deploy/postgres-roles.sql to
// what the migrations create and docs/metastore.md says, where that needs
// no database (cmd/auditor's TestLeastPrivilegeRoles runs it): the script
// is written for the binary's schema version; it hands every table of the
// migrations to the migration role; its grants to nova_auditor name only
// tables and columns the migrations create, every one of those tables,
// and USAGE on exactly the sequences of the bigserial columns of the tables
// it may insert into; what "Who writes what" says the auditor only reads
// it cannot write, a column it says the auditor writes it can; and the
// table of "Roles" is the script's grants.
func TestRolesScriptFollowsTheMigrations(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "postgres-roles.sql"))
	if err != nil {
		t.Fatal(err)
	}
	script := string(b)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var sqls []string
	for _, m := range all {
		sqls = append(sqls, m.SQL)
	}
	s, err := parseSchema(sqls...)
	if err != nil {
		t.Fatal(err)
	}

	// The schema version it is written for.
	versions := regexp.MustCompile(`schema version (\d+)|IF v [<>] (\d+)|this script (?:knows|grants for) (\d+)`).FindAllStringSubmatch(script, -1)
	if len(versions) < 4 {
		t.Fatalf("deploy/postgres-roles.sql names its schema version %d times, want its header, both checks and both messages", len(versions))
	}
	for _, v := range versions {
		n, _ := strconv.Atoi(v[1] + v[2] + v[3])
		if n != migrations.Latest() {
			t.Errorf("deploy/postgres-roles.sql: %q, but the binary's schema version is %d: update the grants for the new migrations", v[0], migrations.Latest())
		}
	}

	// Every table of the migrations (and the runner's own) goes to the
	// migration role.
	own := regexp.MustCompile(`FOREACH t IN ARRAY ARRAY\[([^\]]*)\]`).FindStringSubmatch(script)
	if own == nil {
		t.Fatal("deploy/postgres-roles.sql: no FOREACH t IN ARRAY ARRAY[...] of the tables the migration role owns")
	}
	var owned []string
	for _, q := range regexp.MustCompile(`'(\w+)'`).FindAllStringSubmatch(own[1], -1) {
		owned = append(owned, "nova."+q[1])
	}
	want := append(s.tableNames(), "nova.schema_migrations")
	sort.Strings(owned)
	sort.Strings(want)
	if !slices.Equal(owned, want) {
		t.Errorf("deploy/postgres-roles.sql hands %v to the migration role; the migrations make %v", owned, want)
	}

	// The grants name what exists, cover every table, and the sequences
	// of exactly the tables nova_auditor inserts into.
	grants := rolesScriptGrants(t, script)
	seqs := map[string]bool{}
	for _, name := range s.tableNames() {
		tbl := s.tables[name]
		short := strings.TrimPrefix(name, "nova.")
		g, ok := grants[short]
		if !ok || len(g["SELECT"]) != 0 {
			t.Errorf("deploy/postgres-roles.sql does not grant nova_auditor SELECT on the whole of %s (%v)", name, g)
		}
		for verb, cols := range g {
			for _, c := range cols {
				if _, ok := tbl.cols[c]; !ok {
					t.Errorf("deploy/postgres-roles.sql grants %s (%s) on %s, which has no such column", verb, c, name)
				}
			}
		}
		for _, col := range tbl.colNames() {
			if _, ins := g["INSERT"]; tbl.cols[col] == "bigserial" && ins {
				seqs[fmt.Sprintf("%s_%s_seq", short, col)] = true
			}
		}
	}
	if _, ok := grants["schema_migrations"]; !ok {
		t.Error("deploy/postgres-roles.sql does not grant nova_auditor SELECT on nova.schema_migrations (every command checks the version)")
	}
	for obj, g := range grants {
		switch {
		case strings.HasSuffix(obj, "_seq"):
			if !seqs[obj] || g.String() != "USAGE" {
				t.Errorf("deploy/postgres-roles.sql grants %s on sequence nova.%s; want USAGE on exactly the sequences of bigserial columns of tables it may insert into", g, obj)
			}
			delete(seqs, obj)
		case obj == "schema_migrations":
			if g.String() != "SELECT" {
				t.Errorf("deploy/postgres-roles.sql grants %s on nova.schema_migrations; want SELECT", g)
			}
		case s.tables["nova."+obj] == nil:
			t.Errorf("deploy/postgres-roles.sql grants on nova.%s, which the migrations do not create", obj)
		}
	}
	for seq := range seqs {
		t.Errorf("deploy/postgres-roles.sql does not grant USAGE on nova.%s (nova_auditor inserts into its table)", seq)
	}

	// docs/metastore.md: who writes what, and the table of Roles.
	b, err = os.ReadFile(filepath.Join(root, "docs", "metastore.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rows := docSectionRows(t, doc, "## Who writes what")
	if len(rows) < 15 {
		t.Fatalf("docs/metastore.md: %d rows under Who writes what", len(rows))
	}
	cell := regexp.MustCompile("^`([a-z_]+)(?:\\.([a-z_]+))?`$")
	for _, r := range rows {
		m := cell.FindStringSubmatch(r[0])
		if m == nil || len(r) < 3 {
			t.Errorf("docs/metastore.md, Who writes what: a row %q that names no table", r)
			continue
		}
		g, col, auditor := grants[m[1]], m[2], r[2]
		writes := func() []string {
			var w []string
			for _, v := range []string{"INSERT", "UPDATE", "DELETE"} {
				cols, ok := g[v]
				if ok && (col == "" || len(cols) == 0 || slices.Contains(cols, col)) {
					w = append(w, v)
				}
			}
			return w
		}()
		switch {
		case g == nil:
			t.Errorf("docs/metastore.md says the auditor %q %s; deploy/postgres-roles.sql grants it nothing there", auditor, r[0])
		case auditor == "R" && len(writes) > 0:
			t.Errorf("docs/metastore.md says the auditor only reads %s; deploy/postgres-roles.sql grants it %v", r[0], writes)
		case col != "" && strings.HasPrefix(auditor, "W") && !slices.Contains(writes, "UPDATE"):
			t.Errorf("docs/metastore.md says the auditor writes %s; deploy/postgres-roles.sql grants no UPDATE of it", r[0])
		}
	}

	listed := map[string]string{}
	roleRows := docSectionRows(t, doc, "## Roles")
	if len(roleRows) < 8 {
		t.Fatalf("docs/metastore.md: %d rows in the table of Roles", len(roleRows))
	}
	name := regexp.MustCompile("`([a-z_]+)`")
	for _, r := range roleRows {
		for _, m := range name.FindAllStringSubmatch(r[0], -1) {
			obj := m[1]
			if strings.HasPrefix(r[0], "the sequences of") {
				obj += "_id_seq"
			}
			listed[obj] = strings.ReplaceAll(r[1], "`", "")
		}
	}
	for obj, g := range grants {
		if listed[obj] != g.String() {
			t.Errorf("docs/metastore.md, Roles: %s has %q; deploy/postgres-roles.sql grants %q", obj, listed[obj], g)
		}
	}
	for obj := range listed {
		if grants[obj] == nil {
			t.Errorf("docs/metastore.md, Roles: lists %s, which deploy/postgres-roles.sql grants nothing on", obj)
		}
	}
}

// docSectionRows returns the cells of the body rows of the first Markdown
// table under heading (up to the next heading of any level).
func docSectionRows(t *testing.T, doc, heading string) [][]string {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/metastore.md has no %q", heading)
	}
	var rows [][]string
	inTable := false
	for _, line := range strings.Split(rest, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		if !strings.HasPrefix(line, "|") {
			if inTable {
				break
			}
			continue
		}
		if !inTable { // the header row
			inTable = true
			continue
		}
		if strings.HasPrefix(line, "|---") {
			continue
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(c))
		}
		rows = append(rows, cells)
	}
	return rows
}

// TestReaderRoleIsReadOnly: deploy/postgres-roles.sql grants nova_reader
// nothing but CONNECT on the database, USAGE on the schema and SELECT on
// tables, and docs/metastore.md's paragraph on it names exactly those
// tables (cmd/auditor's TestReadOnlyRole sees each one needed).
func TestReaderRoleIsReadOnly(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "deploy", "postgres-roles.sql"))
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	grant := regexp.MustCompile(`GRANT (.+?) ON (?:(DATABASE|SCHEMA|SEQUENCE|ALL \w+ IN SCHEMA) )?(\S+) TO nova_reader\b`)
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.Contains(line, "GRANT") || !strings.Contains(line, "TO nova_reader") {
			continue
		}
		m := grant.FindStringSubmatch(line)
		switch {
		case m == nil:
			t.Errorf("deploy/postgres-roles.sql: a grant to nova_reader this check cannot read: %s", line)
		case m[2] == "DATABASE" && m[1] == "CONNECT", m[2] == "SCHEMA" && m[1] == "USAGE" && m[3] == "nova":
		case m[2] == "" && m[1] == "SELECT" && strings.HasPrefix(m[3], "nova."):
			tables = append(tables, strings.TrimPrefix(m[3], "nova."))
		default:
			t.Errorf("deploy/postgres-roles.sql grants nova_reader %s on %s %s: it may only read", m[1], m[2], m[3])
		}
	}
	if len(tables) < 5 {
		t.Fatalf("deploy/postgres-roles.sql grants nova_reader SELECT on %d tables", len(tables))
	}
	b, err = os.ReadFile(filepath.Join(root, "docs", "metastore.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(b), "\n- `nova_reader` ")
	if !ok {
		t.Fatal("docs/metastore.md has no paragraph on nova_reader")
	}
	para, _, _ = strings.Cut(para, "\n- ")
	para, _, _ = strings.Cut(para, "\n\n")
	_, inner, ok := strings.Cut(para, "SELECT on")
	if !ok {
		t.Fatal("docs/metastore.md's paragraph on nova_reader names no SELECT")
	}
	inner, _, _ = strings.Cut(inner, ")")
	var listed []string
	for _, m := range regexp.MustCompile("`([a-z_]+)`").FindAllStringSubmatch(inner, -1) {
		listed = append(listed, m[1])
	}
	sort.Strings(tables)
	sort.Strings(listed)
	if !slices.Equal(tables, listed) {
		t.Errorf("docs/metastore.md lists nova_reader's tables as %v; deploy/postgres-roles.sql grants SELECT on %v", listed, tables)
	}
}
