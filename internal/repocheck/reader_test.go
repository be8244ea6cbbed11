package repocheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOneBundleReader: the auditor reads stored bundles through one
// reader, bundle.Reader (docs/architecture.md#reading-stored-bundles).
// Outside bundle/ (and objstore/, the store itself, and bundlefmt/, the
// bytes' format), no non-test file of the auditor reads an object's
// bytes (GetRange, GetSuffix) or opens a footer, a trailer or an envelope
// from them. novasim's engine (and cmd/novasim) is exempt on purpose: it
// is the tests' oracle, and an oracle sharing the reader would share its
// bugs. `auditor doctor`'s checks (cmd/auditor/doctor_checks.go) are
// exempt too: they read back probe objects they wrote, never a bundle; and
// so is the rewind check (rewind/guard.go), which reads back its own
// marker objects.
func TestOneBundleReader(t *testing.T) {
	root := repoRoot(t)
	exempt := []string{"bundle", "bundlefmt", "objstore", "sim", "cmd/novasim", "internal/testenv", "cmd/auditor/doctor_checks.go", "rewind/guard.go"}
	reads := map[string]bool{"GetRange": true, "GetSuffix": true}
	opens := map[string]bool{"OpenFooter": true, "OpenObjectFooter": true, "DecodeTrailer": true, "ValidateEnvelope": true}
	checked := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch d.Name() {
			case ".git", ".bin", ".run", "bin", "node_modules", "testdata":
				return filepath.SkipDir
			}
			for _, e := range exempt {
				if rel == e {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") || slices.Contains(exempt, rel) {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			name := sel.Sel.Name
			pkg, _ := sel.X.(*ast.Ident)
			switch {
			case reads[name]:
				t.Errorf("%s calls %s: read stored bundles through bundle.Reader", rel, name)
			case opens[name] && pkg != nil && pkg.Name == "bundlefmt":
				t.Errorf("%s calls bundlefmt.%s: open stored bundles through bundle.Reader", rel, name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files: the walk missed the tree", checked)
	}
}
