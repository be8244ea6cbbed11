package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestDependencyPictureMatchesImports holds the dependency picture of
// docs/architecture.md#packages-and-dependencies to go list: every
// package of the module (test helpers apart) has its line, and each line
// names exactly the project's packages it imports.
func TestDependencyPictureMatchesImports(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "Dependencies point one way.")
	if start < 0 {
		t.Fatal("docs/architecture.md has no dependency picture")
	}
	block := doc[start:]
	open := strings.Index(block, "```\n")
	end := strings.Index(block[open+4:], "```")
	if open < 0 || end < 0 {
		t.Fatal("the dependency picture is not a fenced block")
	}
	picture := map[string][]string{} // package -> imports as drawn
	var last []string                // the packages of the line a continuation belongs to
	for _, line := range strings.Split(block[open+4:open+4+end], "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		lhs, rhs, arrow := strings.Cut(line, "->")
		if !arrow {
			for _, p := range last { // a continuation line
				picture[p] = append(picture[p], expand(rhsList(lhs))...)
			}
			continue
		}
		last = expand([]string{strings.TrimSpace(lhs)})
		for _, p := range last {
			if strings.TrimSpace(rhs) == "nothing of ours" {
				picture[p] = []string{}
				continue
			}
			picture[p] = append(picture[p], expand(rhsList(rhs))...)
		}
	}

	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/nova/auditor/"
	skip := regexp.MustCompile(`^(internal/testenv|internal/repocheck|deploy/)`)
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], mod)
		if skip.MatchString(pkg) {
			continue
		}
		var imports []string
		for _, imp := range fields[1:] {
			if rel, ok := strings.CutPrefix(imp, mod); ok {
				imports = append(imports, rel)
			}
		}
		drawn, ok := picture[pkg]
		if !ok {
			t.Errorf("%s is not in the dependency picture (it imports %v)", pkg, imports)
			continue
		}
		slices.Sort(imports)
		drawn = slices.Compact(slices.Sorted(slices.Values(drawn)))
		if !slices.Equal(imports, drawn) {
			t.Errorf("%s: the picture draws %v, go list says %v", pkg, drawn, imports)
		}
		delete(picture, pkg)
	}
	for pkg := range picture {
		t.Errorf("the dependency picture draws %s, which is not a package", pkg)
	}
}

// TestPackageTableNamesEveryPackage: the package table of
// docs/architecture.md#packages-and-dependencies names every package of
// the module, and nothing that is not one.
func TestPackageTableNamesEveryPackage(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "## Packages and dependencies")
	end := strings.Index(doc, "Dependencies point one way.")
	if start < 0 || end < start {
		t.Fatal("docs/architecture.md has no package table")
	}
	named := map[string]bool{}
	cell := regexp.MustCompile("`([^`]+)`")
	for _, line := range strings.Split(doc[start:end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 3 || !strings.HasPrefix(line, "|") {
			continue
		}
		for _, m := range cell.FindAllStringSubmatch(cells[1], -1) {
			named[m[1]] = true
		}
	}
	cmd := exec.Command("go", "list", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		rel := strings.TrimPrefix(p, "github.com/nova/auditor/")
		if strings.HasPrefix(rel, "deploy/") {
			continue // the manifests' test, not code
		}
		if !named[rel] {
			t.Errorf("package %s has no row in the package table", rel)
		}
		delete(named, rel)
	}
	for p := range named {
		t.Errorf("the package table names %s, which is not a package", p)
	}
}

// rhsList splits "a, b (why), c/{x,y}" into its items, dropping the
// parenthesised asides.
func rhsList(s string) []string {
	s = regexp.MustCompile(`\s*\([^)]*\)`).ReplaceAllString(s, "")
	var out []string
	depth, cur := 0, strings.Builder{}
	for _, r := range s {
		switch {
		case r == '{':
			depth++
		case r == '}':
			depth--
		case r == ',' && depth == 0:
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
			continue
		}
		cur.WriteRune(r)
	}
	if t := strings.TrimSpace(cur.String()); t != "" {
		out = append(out, t)
	}
	return out
}

// expand expands one level of braces in each item, "a/{x,y}" and
// "{x,y}" alike, and splits a left-hand side's "a, b" list.
func expand(items []string) []string {
	var out []string
	for _, it := range items {
		for _, it := range rhsList(it) {
			i, j := strings.Index(it, "{"), strings.Index(it, "}")
			if i < 0 || j < i {
				out = append(out, it)
				continue
			}
			for _, alt := range strings.Split(it[i+1:j], ",") {
				out = append(out, it[:i]+strings.TrimSpace(alt)+it[j+1:])
			}
		}
	}
	return out
}
