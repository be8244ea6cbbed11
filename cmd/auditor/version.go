package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/nova/auditor/migrations"
)

// release is the auditor's semantic version, the one place it is defined:
// `auditor --version` prints it, make version and the image build read it
// from here, and the manifests in deploy/kubernetes name the image by it
// (TestOneVersion). Raise it with each release, with CHANGELOG.md.
const release = "1.0.0"

// build is the source revision, stamped at build time (-ldflags
// "-X main.build=$(git describe --always --dirty)"): build metadata of
// the version, never a version of its own.
var build = ""

// unknownRevision is the revision of a build that was neither stamped
// nor given the VCS state by Go (go test, go run, a build outside a
// checkout or with -buildvcs=false).
const unknownRevision = "unknown"

// revision is the build's source revision: build when stamped, else the
// VCS revision Go recorded (go build in a checkout: its first 7 hex
// digits, as git abbreviates, "-dirty" when the tree had changes), else
// unknownRevision.
func revision() string {
	bi, _ := debug.ReadBuildInfo() // nil when not recorded
	return revisionOf(build, bi)
}

// revisionOf is revision for a stamp and the build information Go
// recorded (nil: none).
func revisionOf(stamped string, bi *debug.BuildInfo) string {
	if stamped != "" {
		return stamped
	}
	if bi == nil {
		return unknownRevision
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return unknownRevision
	}
	if len(rev) > 7 {
		rev = rev[:7]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// buildVersion is release with the build's revision as semver build
// metadata (1.0.0+0f8848c), or release alone when the revision is
// unknown: the version the metrics, the logs and the runtime row carry.
func buildVersion() string {
	if r := revision(); r != unknownRevision {
		return release + "+" + r
	}
	return release
}

// versionLine is what `auditor version` and `auditor --version` print
// after "auditor ": the release, then the revision (unknown when neither
// stamped nor recorded), the Go version and the schema version.
func versionLine() string {
	return fmt.Sprintf("%s (revision %s, %s, schema version %d)", release, revision(), runtime.Version(), migrations.Latest())
}
