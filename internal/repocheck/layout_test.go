package repocheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// TestReadmeLayoutMatchesFolders: the README's Layout table names only
// folders that exist, and every Go package is in it: as a row of its own,
// or named (`name` or `name/`) in the row of the folder it is under.
func TestReadmeLayoutMatchesFolders(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "\n## Layout\n")
	if start < 0 {
		t.Fatal("README has no Layout section")
	}
	section := text[start+1:]
	if end := strings.Index(section[3:], "\n## "); end >= 0 {
		section = section[:end+3]
	}
	row := regexp.MustCompile("(?m)^\\| `([^`]+/)` \\|(.*)\\|$")
	rows := map[string]string{} // folder/ -> what the row says
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		rows[m[1]] = m[2]
		if st, err := os.Stat(filepath.Join(root, m[1])); err != nil || !st.IsDir() {
			t.Errorf("the Layout table names %s, which is not a folder", m[1])
		}
	}
	if len(rows) < 5 {
		t.Fatalf("the Layout table has %d rows", len(rows))
	}
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var folders []string
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		folders = append(folders, filepath.ToSlash(rel)+"/")
	}
	sort.Strings(folders)
	for _, f := range folders {
		if _, ok := rows[f]; ok {
			continue
		}
		parent := ""
		for p := range rows {
			if strings.HasPrefix(f, p) && len(p) > len(parent) {
				parent = p
			}
		}
		if parent == "" {
			t.Errorf("package folder %s is in no row of the README's Layout table", f)
			continue
		}
		rest := strings.TrimSuffix(strings.TrimPrefix(f, parent), "/")
		if !strings.Contains(rows[parent], "`"+rest+"`") && !strings.Contains(rows[parent], "`"+rest+"/`") {
			t.Errorf("package folder %s: the Layout row of %s does not name `%s`", f, parent, rest)
		}
	}
}

// TestOneTopology: the storage topology (which buckets hold a class, and
// the zone health they share) is built in one place, cmd/internal/wire,
// and handed to the steps; test support and objstore's own contract suite
// build theirs from it, and only the binary makes the health it shares.
// The bucket policy is stated once, by objstore.StarTopology: bundle.Topology
// applies it under the metastore's classes, and nothing else builds a
// topology of classes of its own (objstore's contract suite excepted).
func TestOneTopology(t *testing.T) {
	root := repoRoot(t)
	allowed := map[string][]string{
		"objstore.StarTopology(": {"bundle/"},             // under the metastore's class names
		"objstore.NewTopology(":  {"objstore/storetest/"}, // the contract's own classes
		"bundle.Topology(":       {"cmd/internal/wire/", "internal/testenv/teststore/"},
		"objstore.NewBucketSet(": {},
		"objstore.NewHealth(":    {"cmd/auditor/"},
	}
	sources(t, root, func(p, text string) {
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") || strings.HasPrefix(rel, "internal/repocheck/") {
			return
		}
		for call, dirs := range allowed {
			if !strings.Contains(text, call) {
				continue
			}
			ok := false
			for _, d := range dirs {
				ok = ok || strings.HasPrefix(rel, d)
			}
			if !ok {
				t.Errorf("%s calls %s: the topology is built by cmd/internal/wire and handed on", rel, call)
			}
		}
	})
}
