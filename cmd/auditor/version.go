package main

import "runtime/debug"

// release is the auditor's semantic version, the one place it is defined:
// `auditor --version` prints it, make version and the image build read it
// from here, and the manifests in deploy/kubernetes name the image by it
// (TestOneVersion). Raise it with each release, with CHANGELOG.md.
const release = "1.0.0"

// build is the source revision, stamped at build time (-ldflags
// "-X main.build=$(git describe --always --dirty)"): build metadata of
// the version, never a version of its own.
var build = ""

// buildVersion is release with the build's revision as semver build
// metadata (1.0.0+0f8848c), or the VCS revision Go recorded.
func buildVersion() string {
	meta := build
	if meta == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" && len(s.Value) >= 7 {
					meta = s.Value[:7]
				}
			}
		}
	}
	if meta == "" {
		return release
	}
	return release + "+" + meta
}
