#!/usr/bin/env bash
# test-compat.sh: the auditor against a second S3 implementation, SeaweedFS
# (`weed mini`, built into .bin/ the first time: 5 to 9 minutes). It starts
# SeaweedFS with scripts/services.sh (and Postgres if none runs), then runs,
# each timed:
#
#  1. contract: the S3 store's tests: the objstore contract suite
#     (storetest, TestContract), the checksum probe (TestProbe), the
#     checksum modes, faults, resumes and bucket rules (objstore/s3store);
#  2. doctor:   `auditor doctor` on a fresh star with a standard bucket and
#     two express buckets; it must exit 0 (every check ok or warn);
#  3. demo:     scripts/demo.sh with DEMO_STORE=s3 on SeaweedFS;
#  4. live:     the live-traffic test on S3 (TestLiveTraffic/s3) for
#     COMPAT_LIVE_DURATION (default 20s of writing).
#
# COMPAT_PARTS chooses parts (default "contract doctor demo live"). It
# stops SeaweedFS afterwards unless it was already running.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
parts=${COMPAT_PARTS:-contract doctor demo live}

started=1
if [ -f .run/seaweedfs.pid ] && kill -0 "$(cat .run/seaweedfs.pid)" 2>/dev/null; then started=0; fi
t0=$(date +%s.%N)
envfile=$(scripts/services.sh up seaweedfs)
if [ "$started" = 1 ]; then trap 'scripts/services.sh down seaweedfs' EXIT; fi
# shellcheck disable=SC1090
. "$envfile"
export NOVA_TEST_REQUIRE_SERVICES=1
timings=("services: $(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")s (SeaweedFS up)")

# part NAME CMD...: runs one part, records how long it took; the first
# failure stops the run after printing the timings so far.
part() {
	local name=$1 t rc=0
	shift
	echo "=== compat: $name ==="
	t=$(date +%s.%N)
	"$@" || rc=$?
	timings+=("$name: $(printf '%.1f' "$(echo "$(date +%s.%N) - $t" | bc)")s$([ "$rc" = 0 ] || echo " FAILED (exit $rc)")")
	if [ "$rc" != 0 ]; then
		summary
		exit "$rc"
	fi
}

summary() {
	echo
	echo "=== make test-compat on SeaweedFS ($NOVA_TEST_S3_ENDPOINT) ==="
	printf '  %s\n' "${timings[@]}"
	printf '  total: %.1fs\n' "$(echo "$(date +%s.%N) - $t0" | bc)"
}

# gotest LOG FILTER ARGS...: go test -v with its whole output in LOG and the
# lines matching FILTER on the terminal; its exit status.
gotest() {
	local log=$1 filter=$2 rc=0
	shift 2
	go test -count=1 -v "$@" >"$log" 2>&1 || rc=$?
	grep -E "$filter" "$log" || true
	if [ "$rc" != 0 ]; then
		echo "compat: go test failed (exit $rc); the end of $log:" >&2
		tail -n 60 "$log" >&2
	fi
	return "$rc"
}

contract() {
	gotest .run/compat-contract.log '^(--- |ok|FAIL)|probe: | only: ' -timeout 20m ./objstore/s3store/
}

doctor() {
	local base db url star=compat bucket rc=0
	base=$NOVA_TEST_DATABASE_URL
	db="nova_compat_$(date +%s)_$$"
	psql "$base" -qc "CREATE DATABASE $db" >/dev/null
	url="${base%%/postgres\?*}/$db?sslmode=disable"
	bucket="nova-compat-$(date +%s)-$$"
	local flags=(--database-url "$url" --star "$star" --s3-endpoint "$NOVA_TEST_S3_ENDPOINT" --s3-path-style
		--bucket "$bucket" --s3-express-buckets "za=$bucket-za,zb=$bucket-zb" --location za)
	AWS_ACCESS_KEY_ID=$NOVA_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NOVA_TEST_S3_SECRET_KEY AWS_REGION=us-east-1 \
		bin/novasim setup "${flags[@]}" --migrate --create-buckets --streams 4 >/dev/null || rc=$?
	if [ "$rc" = 0 ]; then
		AWS_ACCESS_KEY_ID=$NOVA_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NOVA_TEST_S3_SECRET_KEY AWS_REGION=us-east-1 \
			bin/auditor doctor "${flags[@]}" || rc=$?
		case "$rc" in
		0) ;;
		3) echo "compat: doctor found a failing check (exit 3): the table above says which and what to do" >&2 ;;
		5) echo "compat: doctor reached no bucket (exit 5)" >&2 ;;
		*) echo "compat: doctor exited $rc" >&2 ;;
		esac
	fi
	psql "$base" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
	return "$rc"
}

demo() {
	DEMO_STORE=s3 DEMO_S3_ENDPOINT=$NOVA_TEST_S3_ENDPOINT NOVA_DEMO_DATABASE_URL=$NOVA_TEST_DATABASE_URL \
		AWS_ACCESS_KEY_ID=$NOVA_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NOVA_TEST_S3_SECRET_KEY AWS_REGION=us-east-1 \
		scripts/demo.sh
}

live() {
	NOVA_LIVE_DURATION=${COMPAT_LIVE_DURATION:-20s} gotest .run/compat-live.log '^\s*--- |^(ok|FAIL)\b|live_test.go' \
		-timeout 30m -run '^TestLiveTraffic$/^s3$' ./cmd/auditor/
}

if [[ " $parts " == *" doctor "* || " $parts " == *" demo "* ]]; then
	part build make -s build
fi
for p in $parts; do
	case "$p" in
	contract | doctor | demo | live) part "$p" "$p" ;;
	*)
		echo "test-compat: unknown part $p (contract, doctor, demo, live)" >&2
		exit 2
		;;
	esac
done
summary
