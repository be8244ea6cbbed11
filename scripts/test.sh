#!/usr/bin/env bash
# test.sh: the README's test command. Starts the real services (versitygw,
# and Postgres if none is running), runs every test with integration tests
# required (a missing service fails instead of skipping), then stops what it
# started. Extra arguments go to `go test` (default ./...).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
# Stop afterwards what this run starts: everything, unless versitygw was
# already running (make services-up); a leftover env file of a run that was
# interrupted does not count.
started=1
if [ -f .run/versitygw.pid ] && kill -0 "$(cat .run/versitygw.pid)" 2>/dev/null; then started=0; fi
envfile=$(scripts/services.sh up)
if [ "$started" = 1 ]; then trap 'scripts/services.sh down versitygw' EXIT; fi
# shellcheck disable=SC1090
. "$envfile"
export NOVA_TEST_REQUIRE_SERVICES=1
if [ "$#" -eq 0 ]; then set -- ./...; fi
go test -count=1 -timeout "${NOVA_TEST_TIMEOUT:-75m}" "$@"
