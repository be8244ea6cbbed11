package repocheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nova/auditor/internal/testenv"
)

// TestIAMPoliciesDocumented: every policy in deploy/iam parses as the IAM
// check reads it (testenv.ReadIAMPolicy: Allow statements of exact
// actions), deploy/README.md links it and names each action it grants in
// its "IAM policy" section, and the runbook links it too.
func TestIAMPoliciesDocumented(t *testing.T) {
	root := repoRoot(t)
	files, err := filepath.Glob(filepath.Join(root, "deploy", "iam", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 2 {
		t.Fatalf("deploy/iam holds %d policies, want the general-purpose and the directory buckets' ones: %v", len(files), files)
	}
	readme := readFile(t, filepath.Join(root, "deploy", "README.md"))
	start := strings.Index(readme, "\n### IAM policy\n")
	if start < 0 {
		t.Fatal("deploy/README.md has no IAM policy section")
	}
	section := readme[start+1:]
	for _, next := range []string{"\n## ", "\n### "} {
		if end := strings.Index(section[4:], next); end >= 0 {
			section = section[:end+4]
		}
	}
	runbook := readFile(t, filepath.Join(root, "deploy", "RUNBOOK.md"))
	for _, f := range files {
		p, err := testenv.ReadIAMPolicy(f)
		if err != nil {
			t.Error(err)
			continue
		}
		link := "(iam/" + filepath.Base(f) + ")"
		if !strings.Contains(section, link) {
			t.Errorf("deploy/README.md's IAM policy section does not link %s", link)
		}
		if !strings.Contains(runbook, link) {
			t.Errorf("deploy/RUNBOOK.md does not link %s", link)
		}
		for _, st := range p.Statement {
			for _, a := range st.Action {
				if !strings.Contains(section, "`"+a+"`") {
					t.Errorf("%s grants %s, which deploy/README.md's IAM policy section does not explain", filepath.Base(f), a)
				}
			}
		}
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
