#!/usr/bin/env bash
# The trace of one settle of one stream: the files and packages of the
# auditor whose code one settle runs. settle's TestTraceOneSettle runs
# twice under coverage, once without its traced settle and once with it;
# a file is touched when a block of it ran more times with than without.
# Needs the services (scripts/services.sh up; sourced from
# .run/services.env). `make trace-settle` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
. .run/services.env
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for mode in without with; do
	NOVA_TEST_REQUIRE_SERVICES=1 NOVA_TRACE_SETTLE=$mode \
		go test -count=1 -covermode=count -coverpkg=./... -coverprofile="$out/$mode.txt" \
		-run '^TestTraceOneSettle$' ./settle/ >"$out/$mode.log" 2>&1 || { cat "$out/$mode.log"; exit 1; }
done
awk 'FNR == 1 { snap++; next } { c[snap, $1] += $NF; blocks[$1] = 1 }
	END { for (b in blocks) if (c[2, b] > c[1, b]) { split(b, a, ":"); print a[1] } }' \
	"$out/without.txt" "$out/with.txt" | sort -u | sed 's|^github.com/nova/auditor/||' |
	grep -Ev '^(sim|catalog/writepath|internal/testenv)/' >"$out/files" # the harness's write path, not the auditor
echo "files touched by one settle of one stream: $(wc -l <"$out/files")"
echo "packages: $(sed 's|/[^/]*$||' "$out/files" | sort -u | wc -l)"
sed 's|/[^/]*$||' "$out/files" | sort | uniq -c | sort -k2
echo
cat "$out/files"
