#!/usr/bin/env bash
# make bench-fleet: a fleet of idle stars on the file store, measured from
# the outside (docs/measurements.md, "The fleet, idle"). For each
# shape "STARS:MEMBERS" of NOVA_BENCH_FLEET_SHAPES (default "200:2
# 1000:4") it creates a fresh database on the server of
# NOVA_BENCH_DATABASE_URL (a maintenance database's URL; the default is
# NOVA_TEST_DATABASE_URL), sets up the stars, starts the members together
# (serve --stars all, --schedule @every 10s) and prints one table row:
#
#   led: seconds until every star is led and has had a successful cycle
#   at 60s / at 5m: stars per member then (5m only with NOVA_BENCH_FLEET_LONG=1)
#   peak conns: most connections of the database seen at once
#   commits/s: the database's commits per second over the last 60 s, and
#     per idle star-cycle (stars / 10 s cycles per second)
#   cpu/cycle: the members' CPU (user + system) per idle star-cycle
#   rss/star: the members' resident memory over the stars
#   re-lead: seconds until every star of a member killed with SIGKILL is
#     led again
#
# It needs psql and an auditor and novasim built from this tree (it builds
# them into .bin). Extra serve flags: NOVA_BENCH_FLEET_FLAGS. With
# NOVA_BENCH_FLEET_ROLE (a login role without superuser) the database is
# that role's and the auditor connects as it, so that the measuring
# psql, as the URL's superuser, still gets in when the members take every
# ordinary connection.
set -euo pipefail
cd "$(dirname "$0")/.."

url=${NOVA_BENCH_DATABASE_URL:-${NOVA_TEST_DATABASE_URL:?set NOVA_BENCH_DATABASE_URL or NOVA_TEST_DATABASE_URL}}
shapes=${NOVA_BENCH_FLEET_SHAPES:-"200:2 1000:4"}
long=${NOVA_BENCH_FLEET_LONG:-0}
mkdir -p .bin
go build -o .bin/auditor ./cmd/auditor
go build -o .bin/novasim ./cmd/novasim
hz=$(getconf CLK_TCK)

work=$(mktemp -d)
pids=()
db=""
cleanup() {
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	if [[ -n $db ]]; then psql -qX "$url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true; fi
	rm -rf "$work"
}
trap cleanup EXIT

# dburl: url with its database replaced by $1
dburl() { sed -E "s#^(postgres(ql)?://[^/]+/)[^?]*#\1$1#" <<<"$url"; }
role=${NOVA_BENCH_FLEET_ROLE:-}
# memberurl: the database's URL for the auditor (as role when set)
memberurl() {
	if [[ -n $role ]]; then sed -E "s#^(postgres(ql)?://)[^@/]*@#\1$role@#" <<<"$(dburl "$db")"; else dburl "$db"; fi
}
q() { psql -qAtX "$(dburl "$db")" -c "$1"; }
cpu() { # user + system ticks of the members
	local t=0
	for p in "${pids[@]}"; do
		[[ -r /proc/$p/stat ]] && t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat")))
	done
	echo "$t"
}
rss() { # resident KiB of the members
	local t=0
	for p in "${pids[@]}"; do
		[[ -r /proc/$p/status ]] && t=$((t + $(awk '/^VmRSS/ {print $2}' "/proc/$p/status")))
	done
	echo "$t"
}
perMember() { q "SELECT string_agg(n::text, '/' ORDER BY n DESC) FROM (SELECT count(*) AS n FROM nova.auditor_leases WHERE expires_at > now() GROUP BY holder) x"; }
commits() { q "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"; }
conns() { q "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"; }

printf '%-12s %6s %-14s %-14s %6s %10s %10s %10s %9s %8s\n' shape led "at 60s" "at 5m" "peak" commits/s per-cycle cpu/cycle rss/star re-lead
for shape in $shapes; do
	stars=${shape%%:*} members=${shape##*:}
	db=bench_fleet_$RANDOM$RANDOM
	psql -qX "$url" -c "CREATE DATABASE $db${role:+ OWNER $role}" >/dev/null
	export NOVA_AUDITOR_DATABASE_URL
	NOVA_AUDITOR_DATABASE_URL=$(memberurl)
	.bin/auditor migrate >/dev/null
	root=$work/$db
	mkdir -p "$root"
	for i in $(seq 1 "$stars"); do
		.bin/novasim setup --star "$(printf 's%04d' "$i")" --streams 1 --fs-root "$root/fs" --create-buckets >/dev/null
	done
	pids=()
	start=$(date +%s.%N)
	for m in $(seq 1 "$members"); do
		# shellcheck disable=SC2086
		.bin/auditor serve --stars all --holder "m$m" --fs-root "$root/fs" --data-dir "$root/m$m" \
			--schedule '@every 10s' --http-addr 127.0.0.1:0 --log-level warn ${NOVA_BENCH_FLEET_FLAGS:-} \
			>"$root/m$m.log" 2>&1 &
		pids+=($!)
	done
	led="" at60="" at5m="-" peak=0 kill9=""
	elapsed() { awk -v s="$start" -v n="$(date +%s.%N)" 'BEGIN {printf "%.0f", n - s}'; }
	last=$((long == 1 ? 330 : 130))
	c0="" t0="" u0=""
	while :; do
		e=$(elapsed)
		n=$(conns); ((n > peak)) && peak=$n
		if [[ -z $led ]] && [[ $(q "SELECT count(*) FROM nova.auditor_leases WHERE expires_at > now()") == "$stars" ]] &&
			[[ $(q "SELECT count(DISTINCT star) FROM nova.auditor_runs WHERE outcome = 'ok'") == "$stars" ]]; then
			led=$e
		fi
		((e >= 60)) && [[ -z $at60 ]] && at60=$(perMember)
		((e >= 300)) && [[ $at5m == - ]] && ((long == 1)) && at5m=$(perMember)
		if ((e >= last - 60)) && [[ -z $c0 ]]; then c0=$(commits) t0=$(date +%s.%N) u0=$(cpu); fi
		((e >= last)) && break
		sleep 1
	done
	c1=$(commits) t1=$(date +%s.%N) u1=$(cpu) r=$(rss)
	read -r cps percycle cpucycle rssstar < <(awk -v c0="$c0" -v c1="$c1" -v t0="$t0" -v t1="$t1" -v u0="$u0" -v u1="$u1" \
		-v hz="$hz" -v m="$stars" -v r="$r" 'BEGIN {
			s = t1 - t0; cycles = m * s / 10
			printf "%.1f %.2f %.2fms %.2fMiB\n", (c1 - c0) / s, (c1 - c0) / cycles, (u1 - u0) / hz * 1000 / cycles, r / 1024 / m }')
	# SIGKILL the first member: every star it led is led again by the others
	victim=${pids[0]}
	kill -9 "$victim"
	pids=("${pids[@]:1}")
	k0=$(date +%s.%N)
	while [[ $(q "SELECT count(*) FROM nova.auditor_leases WHERE expires_at > now() AND holder <> 'm1'") != "$stars" ]]; do sleep 0.5; done
	kill9=$(awk -v s="$k0" -v n="$(date +%s.%N)" 'BEGIN {printf "%.0f", n - s}')
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
	printf '%-12s %5ss %-14s %-14s %6s %10s %10s %10s %9s %7ss\n' "$stars/$members" "${led:-never}" "${at60:-}" "$at5m" "$peak" \
		"$cps" "$percycle" "$cpucycle" "$rssstar" "$kill9"
	psql -qX "$url" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null
	db=""
done
