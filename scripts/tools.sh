#!/usr/bin/env bash
# tools.sh: build the pinned developer tools into .bin/ from the Go module
# proxy, as scripts/services.sh does for versitygw, and print the path of
# the one asked for.
#
#   scripts/tools.sh golangci-lint   .bin/golangci-lint at GOLANGCI_LINT_VERSION
#
# A tool is built the first time (golangci-lint: about 3 minutes) and again
# only when its pinned version changes: `go install` stamps no version into
# the binary, so the installed version is kept in a file beside it.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
bin="$top/.bin"
GOLANGCI_LINT_VERSION=v2.15.0

install() { # name module version
	if [ ! -x "$bin/$1" ] || [ "$(cat "$bin/$1.version" 2>/dev/null)" != "$3" ]; then
		printf 'tools: installing %s %s into .bin\n' "$1" "$3" >&2
		mkdir -p "$bin"
		GOBIN="$bin" GOFLAGS=-buildvcs=false go install "$2@$3"
		echo "$3" >"$bin/$1.version"
	fi
	echo "$bin/$1"
}

case "${1:-}" in
golangci-lint) install golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint "$GOLANGCI_LINT_VERSION" ;;
*)
	echo "usage: scripts/tools.sh golangci-lint" >&2
	exit 2
	;;
esac
