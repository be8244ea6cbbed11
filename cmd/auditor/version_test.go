package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneVersion: the auditor's version is defined once (release):
// `auditor --version` prints it, every image the manifests in
// deploy/kubernetes run is tagged v<release>, make version and the image
// build read it from cmd/auditor/version.go, and no build stamps a version
// of its own over it (only the revision, as build metadata).
func TestOneVersion(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+$`).MatchString(release) {
		t.Fatalf("release %q is not a semantic version MAJOR.MINOR.PATCH", release)
	}
	for _, args := range [][]string{{"--version"}, {"version"}} {
		code, out, errs := runCLI(t, args...)
		if code != exitOK || !strings.HasPrefix(out, "auditor "+release+" ") && !strings.HasPrefix(out, "auditor "+release+"+") {
			t.Errorf("auditor %v: exit %d %q %q, want version %s", args, code, out, errs, release)
		}
	}

	root := filepath.Join("..", "..")
	read := func(rel string) string {
		b, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	manifests, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "*.yaml"))
	if err != nil || len(manifests) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	image := regexp.MustCompile(`image:\s*\S*nova/auditor:(\S+)`)
	images := 0
	for _, m := range manifests {
		b, err := os.ReadFile(m)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range image.FindAllStringSubmatch(string(b), -1) {
			images++
			if g[1] != "v"+release {
				t.Errorf("%s runs the auditor image %s, the binary is v%s", filepath.Base(m), g[1], release)
			}
		}
	}
	if images == 0 {
		t.Error("no manifest names the auditor image")
	}
	for _, f := range []string{"Makefile", "Dockerfile"} {
		if text := read(f); strings.Contains(text, "main.version") || !strings.Contains(text, "main.build") {
			t.Errorf("%s must stamp only main.build (the revision), never a version of its own", f)
		}
	}
	if !strings.Contains(read("Makefile"), "cmd/auditor/version.go") {
		t.Error("make version does not read cmd/auditor/version.go")
	}
}
