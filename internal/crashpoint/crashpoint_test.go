package crashpoint

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestParseAndHit(t *testing.T) {
	crashed := 0
	s, err := Parse(AfterCommit+":3", func() { crashed++ })
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		s.Hit(AfterIntent) // other points never count
		s.Hit(AfterCommit)
		want := 0
		if i >= 2 {
			want = 1
		}
		if crashed != want {
			t.Fatalf("after %d hits crashed %d times", i+1, crashed)
		}
	}
	for _, bad := range []string{"nope", AfterCommit + ":0", AfterCommit + ":x"} {
		if _, err := Parse(bad, func() {}); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
	var none *Set
	none.Hit(AfterCommit) // a nil set is a no-op
	if got, _ := FromEnv(func(string) string { return "" }); got != nil {
		t.Fatal("armed without the variable")
	}
}

// TestEveryPointIsPlaced keeps All() and the code in step: every listed
// point's name appears as a string literal in the non-test sources outside
// this package, and every crash("...") literal in them is listed.
func TestEveryPointIsPlaced(t *testing.T) {
	var src strings.Builder
	root := "../.."
	err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() && strings.HasPrefix(info.Name(), ".") && p != root {
			return filepath.SkipDir
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") && !strings.Contains(p, "internal/crashpoint") {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	code := src.String()
	listed := map[string]bool{}
	for _, n := range All() {
		listed[n] = true
		if !strings.Contains(code, `"`+n+`"`) {
			t.Errorf("crash point %s is listed but never placed", n)
		}
	}
	for _, m := range regexp.MustCompile(`[cC]rash\("([a-z.-]+)"\)`).FindAllStringSubmatch(code, -1) {
		if !listed[m[1]] {
			t.Errorf("crash point %s is placed but not listed in All()", m[1])
		}
	}
}
