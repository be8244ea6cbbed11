#!/usr/bin/env bash
# demo.sh: the auditor's main job end to end on this machine. It makes a
# fresh database on the local Postgres (NOVA_DEMO_DATABASE_URL overrides the
# server), migrates it, and prints the schema version. Later steps (simulated
# traffic, a settle cycle, a check) are added as they land.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
base=${NOVA_DEMO_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
db="nova_demo_$(date +%s)"
psql "$base" -qc "CREATE DATABASE $db" >/dev/null
url="${base%%/postgres\?*}/$db?sslmode=disable"
echo "demo: database $db"
bin/auditor migrate --database-url "$url"
