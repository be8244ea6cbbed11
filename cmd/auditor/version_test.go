package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/nova/auditor/migrations"
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

// TestVersionPrintsTheRevision: `auditor version` and `--version` print
// the release, the build's revision, the Go version and the schema
// version. The revision is the one make build stamps (main.build), else
// the VCS revision Go recorded (its first 7 hex digits, "-dirty" for a
// tree with changes), else "unknown" (go test, go run, -buildvcs=false).
func TestVersionPrintsTheRevision(t *testing.T) {
	want := fmt.Sprintf("auditor %s (revision %s, %s, schema version %d)\n", release, revision(), runtime.Version(), migrations.Latest())
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if code, out, errs := runCLI(t, args...); code != exitOK || out != want {
			t.Errorf("auditor %v: exit %d %q %q, want %q", args, code, out, errs, want)
		}
	}

	const full = "0f8848c2d1e3b4a5968778695a4b3c2d1e0f9a8b"
	vcs := func(settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{}
		for i := 0; i < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		name    string
		stamped string
		bi      *debug.BuildInfo
		want    string
	}{
		{"stamped by make build", "v1.0.0-3-g0f8848c-dirty", vcs("vcs.revision", "1111111111"), "v1.0.0-3-g0f8848c-dirty"},
		{"recorded by go build", "", vcs("vcs", "git", "vcs.revision", full, "vcs.modified", "false"), "0f8848c"},
		{"recorded, the tree changed", "", vcs("vcs.revision", full, "vcs.modified", "true"), "0f8848c-dirty"},
		{"no VCS state recorded", "", vcs("-buildmode", "exe"), unknownRevision},
		{"no build information", "", nil, unknownRevision},
	} {
		if got := revisionOf(c.stamped, c.bi); got != c.want {
			t.Errorf("%s: revision %q, want %q", c.name, got, c.want)
		}
	}
}
