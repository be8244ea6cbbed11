#!/usr/bin/env bash
# demo-check.sh: make demo's database path against a Postgres that asks a
# password over TCP, as a stock Debian server does (make test runs it;
# about 15 seconds). A throwaway cluster with password_encryption =
# scram-sha-256 and `host all all 127.0.0.1/32 scram-sha-256` stands in for
# that server; then:
#
#  1. psql without the password is refused (the server is what it claims);
#  2. `scripts/demo.sh --database-only` with NOVA_DEMO_DATABASE_URL
#     carrying the password creates, migrates and drops its database there;
#  3. the same without NOVA_DEMO_DATABASE_URL, that server as the local one
#     (NOVA_DEMO_LOCAL_URL, no password): the demo falls back to a
#     throwaway cluster of its own, and stops and removes it afterwards.
#
# Needs bin/auditor (make build) and the Postgres server binaries.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
start=$(date +%s)

fail() {
	printf 'demo-check: FAIL: %s\n' "$*" >&2
	exit 1
}

dir=$(mktemp -d "${TMPDIR:-/tmp}/nova-demo-check.XXXXXX")
out=$(mktemp "${TMPDIR:-/tmp}/nova-demo-check-out.XXXXXX")
trap 'scripts/pg-throwaway.sh stop "$dir"; rm -f "$out"' EXIT
password="demo-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')"
url=$(PG_THROWAWAY_PASSWORD=$password scripts/pg-throwaway.sh start "$dir")
port=$(cat "$dir/port")
nopw="postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable"

# 1. The server asks a password.
if PGCONNECT_TIMEOUT=5 psql -w "$nopw" -qtAc 'SELECT 1' >/dev/null 2>&1; then
	fail "the scram server on port $port let user postgres in without a password"
fi

# 2. NOVA_DEMO_DATABASE_URL with the password.
if ! NOVA_DEMO_DATABASE_URL=$url scripts/demo.sh --database-only >"$out" 2>&1; then
	cat "$out" >&2
	fail "demo --database-only with NOVA_DEMO_DATABASE_URL carrying the password"
fi
grep -q "database path ok (NOVA_DEMO_DATABASE_URL)" "$out" || { cat "$out" >&2; fail "the demo did not use NOVA_DEMO_DATABASE_URL"; }
grep -q ": current$" "$out" || { cat "$out" >&2; fail "the demo's database is not current after migrate"; }
left=$(psql -w "$url" -tAc "SELECT count(*) FROM pg_database WHERE datname LIKE 'nova_demo_%'")
[ "$left" = 0 ] || fail "the demo left $left databases on the server"

# 3. No NOVA_DEMO_DATABASE_URL, the local server refusing: a throwaway
# cluster of the demo's own, gone afterwards.
if ! env -u NOVA_DEMO_DATABASE_URL NOVA_DEMO_LOCAL_URL="$nopw" scripts/demo.sh --database-only >"$out" 2>&1; then
	cat "$out" >&2
	fail "demo --database-only falling back from a refusing local server"
fi
grep -q "the local Postgres refused" "$out" || { cat "$out" >&2; fail "the demo did not say the local server refused"; }
grep -q "database path ok (a throwaway cluster on 127.0.0.1:" "$out" || { cat "$out" >&2; fail "the demo did not use a throwaway cluster"; }
fallback=$(sed -n 's/.*a throwaway cluster on 127.0.0.1:\([0-9]*\).*/\1/p' "$out" | tail -n 1)
if [ "$fallback" = "$port" ]; then fail "the throwaway cluster is the refusing server"; fi
if pg_isready -q -h 127.0.0.1 -p "$fallback" -t 1 2>/dev/null; then
	fail "the demo's throwaway cluster on port $fallback still runs"
fi
if ls -d "${TMPDIR:-/tmp}"/nova-demo-pg.* 2>/dev/null | while read -r d; do [ -f "$d/port" ] && [ "$(cat "$d/port")" = "$fallback" ] && echo "$d"; done | grep -q .; then
	fail "the demo's throwaway cluster's directory is left behind"
fi

echo "demo-check: ok: the demo's database path on a scram-sha-256 server, with NOVA_DEMO_DATABASE_URL and by the throwaway fallback ($(($(date +%s) - start))s)"
