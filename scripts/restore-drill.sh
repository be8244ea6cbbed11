#!/usr/bin/env bash
# restore-drill.sh: the metastore restored from a backup, end to end, with
# the real binaries on the file-backed store (docs/architecture.md#reconcile;
# deploy/README.md, "Backup and restore"). novasim writes DRILL_STREAMS
# streams; the auditor settles; the backup (pg_dump -Fc) is taken; more
# rounds of traffic and cycles past a 2 s reap grace rewrite tails and reap
# what the backup names; the backup is restored into a fresh database; the
# first cycle must halt (exit 6); reconcile (dry run, --apply, --apply
# again); two cycles; novasim check --settled-only and auditor verify must
# pass. It prints the figures: records checked, objects listed, the
# halted cycle's and reconcile's times. DRILL_KEEP=1 keeps the databases
# and the store.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
streams=${DRILL_STREAMS:-12}
flights=${DRILL_FLIGHTS:-6}
rounds=${DRILL_ROUNDS:-3}
base=${NOVA_DEMO_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
work=$(mktemp -d "${TMPDIR:-/tmp}/nova-drill.XXXXXX")
db="nova_drill_$(date +%s)_$$"
rdb="${db}_restored"
url="${base%%/postgres\?*}/$db?sslmode=disable"
rurl="${base%%/postgres\?*}/$rdb?sslmode=disable"
cleanup() {
	if [ "${DRILL_KEEP:-0}" != 1 ]; then
		psql "$base" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
		psql "$base" -qc "DROP DATABASE IF EXISTS $rdb WITH (FORCE)" >/dev/null 2>&1 || true
		rm -rf "$work"
	else
		echo "drill: kept databases $db, $rdb and $work"
	fi
}
trap cleanup EXIT
psql "$base" -qc "CREATE DATABASE $db" >/dev/null
common=(--star drill --fs-root "$work/store")
auditor=(--data-dir "$work/data" --denorm-linger 0s --express-denorm-linger 0s --denorm-tail-growth 0
	--reap-grace 2s --log-format json --log-level warn)
write() { bin/novasim write --database-url "$1" "${common[@]}" --flights "$2" --progress none --log-level warn >/dev/null; }
cycle() { bin/auditor run --once --database-url "$1" "${common[@]}" "${auditor[@]}" >/dev/null; }

bin/auditor migrate --database-url "$url" >/dev/null
bin/novasim setup --database-url "$url" "${common[@]}" --streams "$streams" >/dev/null
write "$url" "$flights"
cycle "$url"
write "$url" "$((flights / 2 + 1))"
pg_dump -Fc -f "$work/backup.dump" "$url"
echo "drill: backup taken; $rounds rounds of traffic and cycles past the grace follow"
for _ in $(seq "$rounds"); do
	write "$url" "$((flights / 2 + 1))"
	cycle "$url"
	sleep 2.5
	cycle "$url"
done
psql "$base" -qc "CREATE DATABASE $rdb" >/dev/null
pg_restore --exit-on-error --no-owner -d "$rurl" "$work/backup.dump"
echo "drill: restored into $rdb"

t0=$(date +%s.%N)
set +e
bin/auditor run --once --database-url "$rurl" "${common[@]}" "${auditor[@]}" >/dev/null 2>"$work/halt.txt"
code=$?
set -e
t1=$(date +%s.%N)
if [ "$code" != 6 ]; then
	echo "drill: the first cycle on the restored metastore exited $code, want 6 (metastore_rewound)"; cat "$work/halt.txt"; exit 1
fi
echo "drill: the first cycle halted (exit 6) in $(echo "$t1 - $t0" | bc)s: $(psql "$rurl" -tAc 'SELECT halted_reason FROM nova.auditor_state' | cut -c1-90)..."
bin/auditor reconcile --database-url "$rurl" "${common[@]}" "${auditor[@]}" | tail -1
bin/auditor reconcile --apply --json --concurrency "${DRILL_CONCURRENCY:-8}" --database-url "$rurl" "${common[@]}" "${auditor[@]}" >"$work/apply.json"
python3 - "$work/apply.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("drill: reconcile --apply: %d streams, %d objects listed, %d read whole (%d bytes), %d changes, %d records lost, %d forgotten, %.2fs" % (
    len(r["streams"]), r["objects_listed"], r["objects_read"], r["bytes_read"], r["changes"], r["lost_records"], r["forgotten_records"], r["seconds"]))
PY
again=$(bin/auditor reconcile --apply --json --database-url "$rurl" "${common[@]}" "${auditor[@]}" | python3 -c 'import json,sys; print(json.load(sys.stdin)["changes"])')
echo "drill: reconcile --apply again: $again changes"
[ "$again" = 0 ]
cycle "$rurl"
sleep 2.5
cycle "$rurl"
bin/novasim check --settled-only --database-url "$rurl" "${common[@]}" | head -1
bin/auditor verify --database-url "$rurl" "${common[@]}"
echo "drill: OK"
