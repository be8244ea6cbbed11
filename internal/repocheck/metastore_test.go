package repocheck

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nova/auditor/migrations"
)

// docTable is what docs/metastore.md says of one table: the type cell of
// each column it lists.
type docTable map[string]string

// metastoreDoc reads the column tables of docs/metastore.md: under each
// heading "### nova.<table>", the rows of a Markdown table whose header is
// "| column | type | meaning |". Every `name` in a row's first cell is a
// column, and the second cell starts with its type ("bigint ≥ 1, default
// 1", "uuid PK → streams", "text[], default '{}'").
func metastoreDoc(t *testing.T, text string) map[string]docTable {
	t.Helper()
	heading := regexp.MustCompile(`^#{2,4}\s+(.*)$`)
	tableHeading := regexp.MustCompile("^`?(nova\\.\\w+)`?$")
	name := regexp.MustCompile("`([a-z_][a-z0-9_]*)`")
	doc := map[string]docTable{}
	current := ""
	inRows := false
	for i, line := range strings.Split(text, "\n") {
		if m := heading.FindStringSubmatch(line); m != nil {
			current, inRows = "", false
			if tm := tableHeading.FindStringSubmatch(strings.TrimSpace(m[1])); tm != nil {
				current = tm[1]
				if doc[current] != nil {
					t.Errorf("docs/metastore.md:%d: a second section for %s", i+1, current)
				}
				doc[current] = docTable{}
			}
			continue
		}
		if current == "" {
			continue
		}
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		switch {
		case !strings.HasPrefix(line, "|"):
			inRows = false
		case len(cells) >= 3 && strings.TrimSpace(cells[0]) == "column" && strings.TrimSpace(cells[1]) == "type":
			inRows = true
		case inRows && !strings.HasPrefix(line, "|---"):
			cols := name.FindAllStringSubmatch(cells[0], -1)
			if len(cols) == 0 {
				t.Errorf("docs/metastore.md:%d: a row of %s names no `column`", i+1, current)
			}
			for _, c := range cols {
				if _, dup := doc[current][c[1]]; dup {
					t.Errorf("docs/metastore.md:%d: %s.%s is listed twice", i+1, current, c[1])
				}
				doc[current][c[1]] = strings.TrimSpace(cells[1])
			}
		}
	}
	return doc
}

// typeCellSays reports whether a doc type cell starts with typ as a whole
// word: "bigint, default 0" says bigint, "bigint[]" does not.
func typeCellSays(cell, typ string) bool {
	rest, ok := strings.CutPrefix(strings.ToLower(cell), typ)
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	c := rest[0]
	return !(c == '[' || c == '_' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
}

// TestMetastoreDocNamesEveryColumn: docs/metastore.md names every table
// the migrations leave, every column of it with its declared type, every
// index, and every migration; and it names no table or column the
// migrations do not have (a dropped or renamed column is taken out of the
// doc too).
func TestMetastoreDocNamesEveryColumn(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "metastore.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	var sqls []string
	for _, m := range all {
		sqls = append(sqls, m.SQL)
		if id := fmt.Sprintf("%04d_%s", m.Version, m.Name); !strings.Contains(text, "`"+id+"`") {
			t.Errorf("docs/metastore.md does not name migration `%s`", id)
		}
	}
	s, err := parseSchema(sqls...)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.tables) < 10 {
		t.Fatalf("the migrations leave %d tables: the reader missed some", len(s.tables))
	}
	doc := metastoreDoc(t, text)
	checked := 0
	for _, name := range s.tableNames() {
		dt, ok := doc[name]
		if !ok {
			t.Errorf("docs/metastore.md has no section \"### %s\" with a column | type | meaning table", name)
			continue
		}
		for _, col := range s.tables[name].colNames() {
			typ := s.tables[name].cols[col]
			cell, ok := dt[col]
			switch {
			case !ok:
				t.Errorf("docs/metastore.md: %s does not list column `%s` (%s)", name, col, typ)
			case !typeCellSays(cell, typ):
				t.Errorf("docs/metastore.md: %s.%s is %s in the migrations, the doc says %q", name, col, typ, cell)
			default:
				checked++
			}
		}
		for col := range dt {
			if _, ok := s.tables[name].cols[col]; !ok {
				t.Errorf("docs/metastore.md lists %s.%s, which the migrations do not create (or drop)", name, col)
			}
		}
	}
	for name := range doc {
		if _, ok := s.tables[name]; !ok {
			t.Errorf("docs/metastore.md has a section for %s, which the migrations do not create (or drop)", name)
		}
	}
	for idx := range s.indexes {
		if !strings.Contains(text, "`"+idx+"`") {
			t.Errorf("docs/metastore.md does not name index `%s`", idx)
		}
	}
	t.Logf("%d tables, %d columns, %d indexes checked", len(s.tables), checked, len(s.indexes))
}
