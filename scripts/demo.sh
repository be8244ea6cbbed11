#!/usr/bin/env bash
# demo.sh: the auditor's main job end to end on this machine.
#
#  1. a fresh database, migrated: on the server NOVA_DEMO_DATABASE_URL
#     names (its database is where CREATE DATABASE runs; a password in it
#     is used), else on the local Postgres when it takes user postgres
#     without a password (NOVA_DEMO_LOCAL_URL, default
#     postgres://postgres@127.0.0.1:5432/postgres), else, when it refuses
#     (a stock server asks a password over TCP) or does not answer, on a
#     throwaway cluster (scripts/pg-throwaway.sh, as make test starts one)
#     stopped and removed afterwards;
#  2. novasim creates a few hundred streams and writes skewed traffic into
#     the file-backed store under a temporary directory (or versitygw);
#  3. `auditor run --once` settles every stream;
#  4. `novasim check` verifies every record, byte for byte;
#  5. more traffic and a second cycle (tails grow by revision, reaps of the
#     old revisions are armed), then a third past a short reap grace trims
#     and reaps the transit slots and superseded objects; the check again;
#  6. a summary: streams, records, objects, bytes copied server side versus
#     fetched, slots reaped, what storage holds, and the time taken.
#
# DEMO_STORE=s3 runs the same against S3: the server at DEMO_S3_ENDPOINT
# (path-style; credentials from the AWS SDK's chain, AWS_ACCESS_KEY_ID ...)
# when set, else versitygw (scripts/services.sh starts it). The bucket is
# DEMO_BUCKET, created when missing (default: a fresh one). The default is
# the file-backed store, needing only Go and Postgres.
#
# --database-only runs step 1 alone (the database created and migrated,
# `auditor migrate --status` current, then dropped): the quick check
# scripts/demo-check.sh runs in make test.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
start=$(date +%s.%N)

database_only=0
case "${1:-}" in
--database-only) database_only=1 ;;
"") ;;
*)
	echo "usage: $0 [--database-only]" >&2
	exit 2
	;;
esac

streams=${DEMO_STREAMS:-300}
flights=${DEMO_FLIGHTS:-200}
work=$(mktemp -d "${TMPDIR:-/tmp}/nova-demo.XXXXXX")
db="nova_demo_$(date +%s)_$$"
throwaway=""
base=""
cleanup() {
	if [ "${DEMO_KEEP:-0}" != 1 ]; then
		if [ -n "$base" ]; then psql -w "$base" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; fi
		rm -rf "$work"
		if [ -n "$throwaway" ]; then "$top/scripts/pg-throwaway.sh" stop "$throwaway"; fi
	else
		echo "demo: kept database $db and $work"
		if [ -n "$throwaway" ]; then echo "demo: the throwaway cluster still runs: scripts/pg-throwaway.sh stop $throwaway"; fi
	fi
}
trap cleanup EXIT

# The server: NOVA_DEMO_DATABASE_URL, else the local one when it takes
# user postgres without a password (-w: psql never prompts), else a
# throwaway cluster.
if [ -n "${NOVA_DEMO_DATABASE_URL:-}" ]; then
	base=$NOVA_DEMO_DATABASE_URL
	where_db="NOVA_DEMO_DATABASE_URL"
else
	base=${NOVA_DEMO_LOCAL_URL:-postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable}
	where_db="the local Postgres"
	if ! PGCONNECT_TIMEOUT=5 psql -w "$base" -qtAc 'SELECT 1' >/dev/null 2>"$work/local-pg.txt"; then
		echo "demo: the local Postgres refused ($(head -n 1 "$work/local-pg.txt")); starting a throwaway cluster"
		throwaway=$(mktemp -d "${TMPDIR:-/tmp}/nova-demo-pg.XXXXXX")
		base=$(PG_THROWAWAY_PASSWORD= "$top/scripts/pg-throwaway.sh" start "$throwaway")
		where_db="a throwaway cluster on 127.0.0.1:$(cat "$throwaway/port")"
	fi
fi
psql -w "$base" -qc "CREATE DATABASE $db" >/dev/null
# The demo's database: the base URL with its path replaced (user,
# password, host and parameters kept; sslmode=disable when none is given).
url=$(python3 - "$base" "$db" <<'PY'
import sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
q = u.query or "sslmode=disable"
print(urllib.parse.urlunsplit((u.scheme, u.netloc, "/" + sys.argv[2], q, "")))
PY
)

common=(--database-url "$url" --star demo)
setup_extra=()
slots=()
if [ "${DEMO_STORE:-file}" = s3 ]; then
	endpoint=${DEMO_S3_ENDPOINT:-}
	server="S3"
	if [ -z "$endpoint" ]; then
		# versitygw, installed and started by scripts/services.sh (left running).
		envfile=$(scripts/services.sh up)
		# shellcheck disable=SC1090
		. "$envfile"
		export AWS_ACCESS_KEY_ID=$NOVA_TEST_S3_ACCESS_KEY AWS_SECRET_ACCESS_KEY=$NOVA_TEST_S3_SECRET_KEY AWS_REGION=us-east-1
		endpoint=$NOVA_TEST_S3_ENDPOINT
		server=versitygw
	fi
	export AWS_REGION=${AWS_REGION:-us-east-1}
	bucket=${DEMO_BUCKET:-"nova-demo-$(date +%s)-$$"}
	common+=(--s3-endpoint "$endpoint" --s3-path-style --bucket "$bucket")
	setup_extra=(--create-buckets)
	# Slots stored with CRC-32: versitygw 1.8.0 then reports a ranged
	# copy's CRC-32C correctly, so the auditor's probe lets the server check
	# those assemblies (no read-back). DEMO_SLOT_CHECKSUM=crc32c shows the
	# read-back fallback.
	slots=(--slot-checksum "${DEMO_SLOT_CHECKSUM:-crc32}")
	where="$server at $endpoint, bucket $bucket"
else
	common+=(--fs-root "$work/store")
	where="the file-backed store at $work/store"
fi

echo "demo: database $db on $where_db, objects in $where"
bin/auditor migrate --database-url "$url"
if [ "$database_only" = 1 ]; then
	bin/auditor migrate --status --database-url "$url" >"$work/status.txt"
	head -n 1 "$work/status.txt"
	echo "demo: database path ok ($where_db)"
	exit 0
fi
bin/novasim setup "${common[@]}" "${setup_extra[@]}" --streams "$streams" --fence-window 2
bin/novasim write "${common[@]}" "${slots[@]}" --flights "$flights" --absorb-flights 4 \
	--fail-failover 0.01 --fail-lost 0.01 --progress none --log-level warn
# Hot streams beside the cold long tail: flights of 16 MiB whose hottest
# streams' chunks reach S3's 5 MiB part minimum, so on S3 they are copied
# server side (UploadPartCopy: no byte passes through the auditor) while
# the small chunks of the tail are fetched and gathered.
bin/novasim write "${common[@]}" "${slots[@]}" --flights "${DEMO_HOT_FLIGHTS:-6}" --flight-bytes 16MiB --flight-interval 1m \
	--max-batch 4096 --absorb-flights 1 --progress none --log-level warn
echo "demo: settling"
bin/auditor run --once "${common[@]}" --data-dir "$work/data" --denorm-linger 0s --express-denorm-linger 0s --denorm-tail-growth 0 \
	--reap-grace 2s --denorm-output-cap-mib 32 --log-format json --log-level warn | tee "$work/run1.txt"
bin/novasim check "${common[@]}" | tee "$work/check1.txt"
echo "demo: more traffic, then a second cycle grows the tails by revision (~1) and arms reaps of the old ones"
bin/novasim write "${common[@]}" "${slots[@]}" --flights $((flights / 4)) --absorb-flights 4 --progress none --log-level warn
bin/auditor run --once "${common[@]}" --data-dir "$work/data" --denorm-linger 0s --express-denorm-linger 0s --denorm-tail-growth 0 \
	--reap-grace 2s --denorm-output-cap-mib 32 --log-format json --log-level warn | tee "$work/run2.txt"
echo "demo: waiting out the 2s reap grace, then trimming and reaping"
sleep 3
bin/auditor run --once "${common[@]}" --data-dir "$work/data" --reap-grace 2s --log-format json --log-level warn | tee "$work/run3.txt"
bin/novasim check "${common[@]}" | tee "$work/check2.txt"

end=$(date +%s.%N)
q() { psql -w "$url" -tAc "$1"; }
echo
echo "=== demo summary ==="
echo "streams:          $(q 'SELECT count(*) FROM nova.streams')"
echo "records settled:  $(q 'SELECT coalesce(sum(record_count), 0) FROM nova.catalog')"
echo "catalog objects:  $(q 'SELECT count(*) FROM nova.catalog') (revisions up to ~$(q 'SELECT coalesce(max(revision), 0) FROM nova.catalog'))"
echo "ledger:"
q "SELECT format('  run %s %s: %s streams, %s published, %s adopted, %s B copied server side, %s B fetched, %s B uploaded, %s slots and %s objects reaped',
	id, outcome, streams_settled, objects_published, objects_adopted, bytes_copied, bytes_fetched, bytes_uploaded, slots_reaped, objects_reaped)
	FROM nova.auditor_runs ORDER BY id"
# Bytes through the auditor per settled byte: what it fetched and uploaded
# against what it published. A naive settle (download every chunk, upload
# the object) moves 2.0; server-side copies move next to nothing. Of the
# fetched bytes, those that read a published object back to verify it
# (the file store reads every object it assembled whole, for its CRC; an
# S3 server that cannot check copied parts, the same) are not in the
# ledger apart: each run's "cycle ok" line says them (run*.txt).
read_back=$(cat "$work"/run*.txt | sed -n 's/.* fetched (\([0-9]*\) of them read back to verify).*/\1/p' | paste -sd+ | sed 's/^$/0/' | bc)
q "SELECT format('bytes per settled byte: %s copied server side, %s fetched (%s of it read-back verification, %s the rest), %s uploaded (through the auditor %s; a naive settle moves 2.00)',
	round(sum(bytes_copied)::numeric / s, 3), round(sum(bytes_fetched)::numeric / s, 3),
	round($read_back::numeric / s, 3), round((sum(bytes_fetched) - $read_back)::numeric / s, 3), round(sum(bytes_uploaded)::numeric / s, 3),
	round((sum(bytes_fetched) + sum(bytes_uploaded))::numeric / s, 3))
	FROM nova.auditor_runs, (SELECT greatest(sum(bytes_copied + bytes_uploaded), 1) AS s FROM nova.auditor_runs) t GROUP BY s"
echo "trim cursor:      $(q "SELECT format('epoch %s seq %s', epoch, seq) FROM nova.trim_cursors")"
echo "open refs:        $(q 'SELECT count(*) FROM nova.span_refs') (due markers $(q 'SELECT count(*) FROM nova.due_markers'))"
if [ "${DEMO_STORE:-file}" != s3 ]; then
	echo "storage holds:    $(find "$work/store" -type f -path '*/stars/*' | wc -l) slot objects, $(find "$work/store" -type f -path '*/streams/*' | wc -l) settled objects, $(du -sh "$work/store" | cut -f1)"
fi
printf 'time taken:       %.1fs\n' "$(echo "$end - $start" | bc)"
grep -q '^OK' "$work/check2.txt"
