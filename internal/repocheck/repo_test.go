package repocheck

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod at %s: %v", root, err)
	}
	return root
}

// sources walks the repository's Go, SQL, YAML and JSON files.
func sources(t *testing.T, root string, fn func(path, text string)) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".bin", ".run", "bin", "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(p) {
		case ".go", ".sql", ".yaml", ".yml", ".json", ".md":
		default:
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fn(p, string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestNoCommentPointsOutsideTheRepo: the design documents beside the
// checkout are not in a clone; every citation goes to docs/.
func TestNoCommentPointsOutsideTheRepo(t *testing.T) {
	root := repoRoot(t)
	outside := regexp.MustCompile(`\.\./shared|(^|[^/\w])(DESIGN|FORMAT|METASTORE|EXAMPLES)\.md`)
	self := filepath.Join(root, "internal", "repocheck")
	sources(t, root, func(p, text string) {
		if strings.HasPrefix(p, self) {
			return
		}
		for i, line := range strings.Split(text, "\n") {
			if outside.MatchString(line) {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s:%d points outside the repository: %s", rel, i+1, strings.TrimSpace(line))
			}
		}
	})
}

// TestDocsAnchorsExist: every docs/<file>.md#<anchor> a source names is a
// heading of that file.
func TestDocsAnchorsExist(t *testing.T) {
	root := repoRoot(t)
	anchors := map[string]map[string]bool{}
	heading := regexp.MustCompile(`^#+\s+(.*)$`)
	for _, f := range []string{"format.md", "metastore.md", "architecture.md", "operations.md", "measurements.md"} {
		fh, err := os.Open(filepath.Join(root, "docs", f))
		if err != nil {
			t.Fatal(err)
		}
		anchors[f] = map[string]bool{}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			if m := heading.FindStringSubmatch(sc.Text()); m != nil {
				anchors[f][slug(m[1])] = true
			}
		}
		fh.Close()
	}
	ref := regexp.MustCompile(`docs/(\w+\.md)#([a-z0-9_-]+)`)
	n := 0
	sources(t, root, func(p, text string) {
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			n++
			if as, ok := anchors[m[1]]; !ok || !as[m[2]] {
				rel, _ := filepath.Rel(root, p)
				t.Errorf("%s names docs/%s#%s, which is not a heading there", rel, m[1], m[2])
			}
		}
	})
	if n == 0 {
		t.Fatal("no docs/ anchor is named anywhere: the scan found nothing")
	}
}

// slug is GitHub's heading anchor: lower case, spaces to dashes, only
// letters, digits, dashes and underscores kept.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestImportsPointOneWay: the storage and format libraries depend on
// nothing of ours but each other as DESIGN lays out, and never on
// internal/ (the leaves they share, crc32c and fsync, sit beside them); the steps do not
// import the daemon or the binary, nor the daemon the steps; verify (the
// offline fsck) imports no step and not the daemon; nothing imports cmd/;
// sim, the write path novasim and the tests play, checks the steps without
// using them; and nothing the auditor is built from reaches
// catalog/writepath, the write path's statements, or sim, directly or
// through another package: both are novasim's and the tests'.
func TestImportsPointOneWay(t *testing.T) {
	root := repoRoot(t)
	cmd := exec.Command("go", "list", "-json", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/nova/auditor/"
	forbidden := map[string][]string{
		"bundlefmt":  {"catalog", "objstore", "settle", "trim", "daemon", "verify", "pendingobj", "internal/", "cmd/"},
		"pendingobj": {"catalog", "objstore", "settle", "trim", "daemon", "verify", "bundlefmt", "internal/", "cmd/"},
		"objstore":   {"catalog", "settle", "trim", "daemon", "verify", "pendingobj", "internal/", "cmd/"},
		"catalog":    {"objstore", "settle", "trim", "daemon", "verify", "pendingobj", "internal/", "cmd/"},
		"bundle":     {"settle", "trim", "daemon", "verify", "pendingobj", "cmd/"},
		"settle":     {"trim", "daemon", "verify", "cmd/"},
		"trim":       {"settle", "daemon", "verify", "cmd/"},
		"daemon":     {"settle", "trim", "verify", "cmd/"}, // the steps come as cycle.Step, trim's view as a TrimReader
		"verify":     {"daemon", "settle", "trim", "cmd/"},
		"sim":        {"settle", "trim", "daemon", "verify", "cmd/"},
		// crc32c and fsync are leaves: everything may import them, they import nothing of ours.
		"crc32c": {"bundlefmt", "pendingobj", "objstore", "catalog", "settle", "trim", "daemon", "verify", "bundle", "migrations", "fsync", "internal/", "cmd/"},
		"fsync":  {"bundlefmt", "pendingobj", "objstore", "catalog", "settle", "trim", "daemon", "verify", "bundle", "migrations", "crc32c", "internal/", "cmd/"},
	}
	// The production packages, subpackages included, and the auditor's
	// binary (its non-test files: go list's Deps is the closure of Imports,
	// test imports apart) never reach the write path: its statements, or
	// novasim's engine.
	writePath := []string{"catalog/writepath", "sim"}
	production := []string{"bundle", "bundlefmt", "pendingobj", "objstore", "catalog", "settle", "trim", "daemon", "migrations", "internal/cycle", "cmd/auditor"}
	seen := map[string]bool{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Deps       []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p.ImportPath, mod)
		if slices.Contains(writePath, rel) {
			seen[rel] = true
		}
		for _, pkg := range production {
			if slices.Contains(writePath, rel) || rel != pkg && !strings.HasPrefix(rel, pkg+"/") {
				continue
			}
			seen[pkg] = true
			for _, d := range p.Deps {
				if w := strings.TrimPrefix(d, mod); slices.Contains(writePath, w) {
					t.Errorf("%s depends on %s: the write path is for novasim and the tests", rel, w)
				}
			}
		}
		for pkg, bad := range forbidden {
			if rel != pkg && !strings.HasPrefix(rel, pkg+"/") {
				continue
			}
			for _, imp := range p.Imports {
				irel := strings.TrimPrefix(imp, mod)
				if irel == imp {
					continue
				}
				for _, b := range bad {
					if irel == b || strings.HasPrefix(irel, strings.TrimSuffix(b, "/")+"/") || (strings.HasSuffix(b, "/") && strings.HasPrefix(irel, b)) {
						t.Errorf("%s imports %s", rel, irel)
					}
				}
			}
		}
	}
	for _, pkg := range production {
		if !seen[pkg] {
			t.Errorf("go list found no package %s: the write-path rule checks nothing there", pkg)
		}
	}
	for _, pkg := range writePath {
		if !seen[pkg] {
			t.Errorf("go list found no package %s: the write-path rule keeps the auditor from a package that is not there", pkg)
		}
	}
}

// TestNoIssueNumbers: no tracked file (code, tests, docs, Makefile,
// scripts) cites a tracker's issue by number. The number means nothing to
// a reader of a clone; the text says what the capability or the bug is
// ("the long tail at the copy floor", "the late delete of a released
// key"). make lint runs the same pattern.
func TestNoIssueNumbers(t *testing.T) {
	root := repoRoot(t)
	cite := regexp.MustCompile(`(?i)issue ?#?[0-9]+`)
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	files := 0
	for _, rel := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil || slices.Contains(b, 0) {
			continue // deleted in the work tree, or binary
		}
		files++
		for i, line := range strings.Split(string(b), "\n") {
			if m := cite.FindString(line); m != "" {
				t.Errorf("%s:%d cites %q: say what it means instead", rel, i+1, m)
			}
		}
	}
	if files == 0 {
		t.Fatal("no file was read: the scan found nothing")
	}
}

// TestUpgradingListsEveryMigration: UPGRADING.md has a row for every
// migration in migrations/sql (what it changes, locks, and asks of the
// operator), so a new migration cannot ship without one.
func TestUpgradingListsEveryMigration(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "UPGRADING.md"))
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "migrations", "sql", "*.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no migrations: %v", err)
	}
	for _, f := range files {
		num, name, _ := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".sql"), "_")
		if row := "| " + num + " `" + name + "` |"; !strings.Contains(string(b), row) {
			t.Errorf("UPGRADING.md has no row %q for %s", row, filepath.Base(f))
		}
	}
}
