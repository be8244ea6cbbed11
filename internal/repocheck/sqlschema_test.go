package repocheck

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// A small reader of the migrations' DDL: enough to know which tables,
// columns (with their declared types) and indexes the migrations leave
// behind. It understands CREATE TABLE bodies, ALTER TABLE ADD / DROP /
// ALTER (TYPE) / RENAME COLUMN and RENAME TO, DROP TABLE, CREATE and DROP
// INDEX. Every other statement (INSERT, UPDATE, CREATE SCHEMA ...) changes
// no column and is skipped; an ALTER TABLE action it does not know is an
// error, so a new kind of migration teaches the reader instead of slipping
// past the doc check.

// schema is what the migrations leave: tables by qualified name, and index
// names.
type schema struct {
	tables  map[string]*sqlTable
	indexes map[string]bool
}

// sqlTable is a table's columns by name, with their normalized types.
type sqlTable struct {
	cols map[string]string
}

func (s schema) tableNames() []string {
	var names []string
	for n := range s.tables {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func (t *sqlTable) colNames() []string {
	var names []string
	for n := range t.cols {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// parseSchema applies the migrations' statements in order.
func parseSchema(migrations ...string) (schema, error) {
	s := schema{tables: map[string]*sqlTable{}, indexes: map[string]bool{}}
	for i, m := range migrations {
		for _, stmt := range sqlStatements(m) {
			if err := s.apply(stmt); err != nil {
				return s, fmt.Errorf("migration %d: %w in %q", i+1, err, stmt)
			}
		}
	}
	return s, nil
}

var (
	createTableRe = regexp.MustCompile(`(?is)^create\s+(?:unlogged\s+)?table\s+(?:if\s+not\s+exists\s+)?([\w."]+)\s*\((.*)\)$`)
	alterTableRe  = regexp.MustCompile(`(?is)^alter\s+table\s+(?:if\s+exists\s+)?(?:only\s+)?([\w."]+)\s+(.*)$`)
	dropTableRe   = regexp.MustCompile(`(?is)^drop\s+table\s+(?:if\s+exists\s+)?(.*?)(?:\s+(?:cascade|restrict))?$`)
	createIndexRe = regexp.MustCompile(`(?is)^create\s+(?:unique\s+)?index\s+(?:concurrently\s+)?(?:if\s+not\s+exists\s+)?([\w"]+)\s+on\s`)
	dropIndexRe   = regexp.MustCompile(`(?is)^drop\s+index\s+(?:concurrently\s+)?(?:if\s+exists\s+)?(.*?)(?:\s+(?:cascade|restrict))?$`)
)

func (s schema) apply(stmt string) error {
	if m := createTableRe.FindStringSubmatch(stmt); m != nil {
		t := &sqlTable{cols: map[string]string{}}
		for _, item := range splitTopLevel(m[2]) {
			f := strings.Fields(item)
			switch strings.ToLower(f[0]) {
			case "constraint", "primary", "unique", "check", "foreign", "exclude", "like":
				continue // a table constraint, not a column
			}
			name, typ := columnDef(f)
			if typ == "" {
				return fmt.Errorf("column %s has no type", name)
			}
			t.cols[name] = typ
		}
		s.tables[ident(m[1])] = t
		return nil
	}
	if m := alterTableRe.FindStringSubmatch(stmt); m != nil {
		name := ident(m[1])
		t, ok := s.tables[name]
		if !ok {
			return fmt.Errorf("ALTER TABLE of unknown table %s", name)
		}
		for _, action := range splitTopLevel(m[2]) {
			if renamed, err := s.alter(name, t, strings.Fields(action)); err != nil {
				return err
			} else if renamed != "" {
				name = renamed
			}
		}
		return nil
	}
	if m := dropTableRe.FindStringSubmatch(stmt); m != nil {
		for _, n := range splitTopLevel(m[1]) {
			delete(s.tables, ident(n))
		}
		return nil
	}
	if m := createIndexRe.FindStringSubmatch(stmt); m != nil {
		s.indexes[ident(m[1])] = true
		return nil
	}
	if m := dropIndexRe.FindStringSubmatch(stmt); m != nil {
		for _, n := range splitTopLevel(m[1]) {
			n = ident(n)
			delete(s.indexes, n[strings.LastIndex(n, ".")+1:])
		}
	}
	return nil
}

// alter applies one ALTER TABLE action to t (named name) and returns the
// table's new name when the action renames it.
func (s schema) alter(name string, t *sqlTable, f []string) (string, error) {
	kw := func(i int) string {
		if i < len(f) {
			return strings.ToLower(f[i])
		}
		return ""
	}
	// skip drops optional keywords (COLUMN, IF [NOT] EXISTS) at f[i:].
	skip := func(i int, words ...string) int {
		for _, w := range words {
			if kw(i) == w {
				i++
			}
		}
		return i
	}
	switch kw(0) {
	case "add":
		switch kw(1) {
		case "constraint", "primary", "unique", "check", "foreign", "exclude":
			return "", nil
		}
		i := skip(1, "column", "if", "not", "exists")
		col, typ := columnDef(f[i:])
		if typ == "" {
			return "", fmt.Errorf("added column %s has no type", col)
		}
		t.cols[col] = typ
	case "drop":
		if kw(1) == "constraint" {
			return "", nil
		}
		i := skip(1, "column", "if", "exists")
		delete(t.cols, ident(f[i]))
	case "alter":
		i := skip(1, "column")
		col := ident(f[i])
		switch {
		case kw(i+1) == "type" || kw(i+1) == "set" && kw(i+2) == "data" && kw(i+3) == "type":
			j := skip(i+1, "set", "data", "type")
			_, typ := columnDef(append([]string{col}, f[j:]...))
			t.cols[col] = typ
		case kw(i+1) == "set" || kw(i+1) == "drop":
			// a default, NOT NULL, statistics: the type stays
		default:
			return "", fmt.Errorf("ALTER COLUMN action %q not understood", strings.Join(f, " "))
		}
	case "rename":
		switch {
		case kw(1) == "to":
			newName := ident(f[2])
			if !strings.Contains(newName, ".") && strings.Contains(name, ".") {
				newName = name[:strings.Index(name, ".")+1] + newName // stays in its schema
			}
			delete(s.tables, name)
			s.tables[newName] = t
			return newName, nil
		case kw(1) == "constraint":
		default:
			i := skip(1, "column")
			if kw(i+1) != "to" {
				return "", fmt.Errorf("RENAME action %q not understood", strings.Join(f, " "))
			}
			from, to := ident(f[i]), ident(f[i+2])
			t.cols[to] = t.cols[from]
			delete(t.cols, from)
		}
	case "validate":
	default:
		return "", fmt.Errorf("ALTER TABLE action %q not understood", strings.Join(f, " "))
	}
	return "", nil
}

// columnStop are the words that end a column's type in its definition.
var columnStop = map[string]bool{"not": true, "null": true, "default": true, "primary": true, "references": true,
	"check": true, "unique": true, "constraint": true, "generated": true, "collate": true}

// typeAliases are Postgres's other spellings of a type, mapped to the one
// the docs use.
var typeAliases = map[string]string{
	"int": "integer", "int4": "integer", "int8": "bigint", "int2": "smallint", "bool": "boolean",
	"float8": "double precision", "float4": "real", "serial8": "bigserial", "serial4": "serial",
	"timestamp with time zone": "timestamptz", "timestamp without time zone": "timestamp",
	"character varying": "varchar",
}

// columnDef splits a column definition's words into its name and its
// normalized type: lower case, single spaces, aliases resolved, array
// brackets kept ("bigint[]").
func columnDef(f []string) (name, typ string) {
	name = ident(f[0])
	var words []string
	for _, w := range f[1:] {
		if columnStop[strings.ToLower(w)] {
			break
		}
		words = append(words, strings.ToLower(w))
	}
	typ = strings.ReplaceAll(strings.Join(words, " "), " [", "[")
	base, arr, _ := strings.Cut(typ, "[")
	if a, ok := typeAliases[base]; ok {
		base = a
	}
	if typ == base || !strings.Contains(typ, "[") {
		return name, base
	}
	return name, base + "[" + arr
}

// ident unquotes and lower-cases an identifier ("nova"."Runs" stays case
// sensitive, as Postgres keeps it).
func ident(s string) string {
	s = strings.TrimSpace(s)
	if !strings.Contains(s, `"`) {
		return strings.ToLower(s)
	}
	return strings.ReplaceAll(s, `"`, "")
}

// sqlStatements splits SQL text into statements at the semicolons outside
// quotes, with the comments removed and whitespace collapsed.
func sqlStatements(src string) []string {
	var stmts []string
	var b strings.Builder
	flush := func() {
		if s := strings.Join(strings.Fields(b.String()), " "); s != "" {
			stmts = append(stmts, s)
		}
		b.Reset()
	}
	for i := 0; i < len(src); i++ {
		c := src[i]
		switch {
		case c == '\'' || c == '"': // a literal or a quoted identifier, copied whole
			j := i + 1
			for j < len(src) && src[j] != c {
				j++
			}
			b.WriteString(src[i:min(j+1, len(src))])
			i = j
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			for i < len(src) && src[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case c == '/' && strings.HasPrefix(src[i:], "/*"):
			end := strings.Index(src[i+2:], "*/")
			if end < 0 {
				i = len(src)
			} else {
				i += 2 + end + 1
			}
			b.WriteByte(' ')
		case c == ';':
			flush()
		default:
			b.WriteByte(c)
		}
	}
	flush()
	return stmts
}

// splitTopLevel splits s at the commas outside parentheses and quotes,
// each part trimmed.
func splitTopLevel(s string) []string {
	var parts []string
	depth, start := 0, 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			parts = append(parts, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	if last := strings.TrimSpace(s[start:]); last != "" {
		parts = append(parts, last)
	}
	return parts
}

// TestParseSchema: the reader follows what each kind of statement does to
// the columns, and ignores what changes none.
func TestParseSchema(t *testing.T) {
	s, err := parseSchema(`
CREATE SCHEMA IF NOT EXISTS nova;
-- a comment; with a semicolon
CREATE TABLE nova.a (
  id       bigserial PRIMARY KEY,
  name     text NOT NULL CHECK (name ~ '^[a-z]--;$'), /* block; comment */
  n        int8 NOT NULL DEFAULT 0,
  seqs     bigint [] NOT NULL,
  at       timestamp with time zone,
  ratio    double precision NOT NULL,
  PRIMARY KEY (id, name),
  CHECK (n >= 0)
);
CREATE UNIQUE INDEX a_name_idx ON nova.a (name) WHERE n > 0;
CREATE TABLE nova.gone (x text);
CREATE INDEX gone_idx ON nova.gone (x);`,
		`ALTER TABLE nova.a
  ADD COLUMN tags text[] NOT NULL DEFAULT '{}',
  ADD flag bool,
  DROP COLUMN ratio,
  ADD CONSTRAINT a_n CHECK (n < 10);
ALTER TABLE nova.a ALTER COLUMN n TYPE integer, ALTER COLUMN name SET DEFAULT '';
ALTER TABLE nova.a RENAME COLUMN at TO seen_at;
INSERT INTO nova.a (name) VALUES ('x; y');
DROP TABLE IF EXISTS nova.gone;
DROP INDEX nova.gone_idx;
ALTER TABLE nova.a RENAME TO b;`)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{"nova.b": {
		"id": "bigserial", "name": "text", "n": "integer", "seqs": "bigint[]", "seen_at": "timestamptz",
		"tags": "text[]", "flag": "boolean",
	}}
	if got := s.tableNames(); len(got) != 1 || got[0] != "nova.b" {
		t.Fatalf("tables %v, want [nova.b]", got)
	}
	if got := s.tables["nova.b"].cols; fmt.Sprint(got) != fmt.Sprint(want["nova.b"]) {
		t.Errorf("columns %v\nwant    %v", got, want["nova.b"])
	}
	if !s.indexes["a_name_idx"] || s.indexes["gone_idx"] || len(s.indexes) != 1 {
		t.Errorf("indexes %v, want a_name_idx only", s.indexes)
	}

	for _, bad := range []string{
		"CREATE TABLE nova.a (x int); ALTER TABLE nova.a OWNER TO someone;",
		"ALTER TABLE nova.nothing ADD COLUMN x int;",
		"CREATE TABLE nova.a (x);",
	} {
		if _, err := parseSchema(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
