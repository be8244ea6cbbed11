package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/nova/auditor/internal/crashpoint"
)

// TestCrashPointsOneList: the one list (crashPoints) holds every
// crashpoint.Point constant declared in the non-test sources, once each,
// named <step>.<when>; and every crash hook is called with such a constant,
// never a string literal (which would compile against the typed hook but be
// missing from the list).
func TestCrashPointsOneList(t *testing.T) {
	listed := crashPoints()
	name := regexp.MustCompile(`^[a-z]+\.[a-z]+(-[a-z]+)*$`)
	for i, p := range listed {
		if !name.MatchString(string(p)) {
			t.Errorf("crash point %q is not named <step>.<when>", p)
		}
		if slices.Contains(listed[:i], p) {
			t.Errorf("crash point %q is listed twice", p)
		}
	}
	declared := map[crashpoint.Point]string{}
	fset := token.NewFileSet()
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				if sel, ok := n.Type.(*ast.SelectorExpr); ok && sel.Sel.Name == "Point" {
					for i, v := range n.Values {
						if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
							s, _ := strconv.Unquote(lit.Value)
							declared[crashpoint.Point(s)] = p + ":" + n.Names[i].Name
						}
					}
				}
			case *ast.CallExpr:
				var fn string
				switch f := n.Fun.(type) {
				case *ast.Ident:
					fn = f.Name
				case *ast.SelectorExpr:
					fn = f.Sel.Name
				}
				if (fn == "crash" || fn == "Crash") && len(n.Args) == 1 {
					if lit, ok := n.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						t.Errorf("%s: crash point %s placed as a literal: declare it as a crashpoint.Point constant and list it", fset.Position(n.Pos()), lit.Value)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(declared) == 0 {
		t.Fatal("no crashpoint.Point constant found: the scan is broken")
	}
	for p, where := range declared {
		if !slices.Contains(listed, p) {
			t.Errorf("crash point %s (%s) is declared but not in crashPoints()", p, where)
		}
	}
	for _, p := range listed {
		if _, ok := declared[p]; !ok {
			t.Errorf("crash point %s is listed but declared nowhere", p)
		}
	}
}
