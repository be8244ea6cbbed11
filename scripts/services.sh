#!/usr/bin/env bash
# services.sh: install and start the real services the tests need, and stop
# them again by PID.
#
#   scripts/services.sh up [SERVER]    start what is missing; print the env file path
#   scripts/services.sh down [SERVER]  stop what "up" started (everything, or what "up SERVER" started)
#   scripts/services.sh env [SERVER]   print the env file path (after "up")
#
# SERVER is the S3 server the tests run against: versitygw (the default,
# make test; env file .run/services.env) or seaweedfs (make test-compat;
# env file .run/seaweedfs.env). The env file says which one it is
# (NOVA_TEST_S3_SERVER): tests that hold for versitygw alone skip on the
# other (testenv.RequireVersitygw).
#
# versitygw v1.8.0 (Apache-2.0) is installed from the Go module proxy into
# .bin/ (cached across runs) and started on a free loopback port with the
# POSIX backend in a temporary directory and a fixed test access key.
#
# SeaweedFS (Apache-2.0) is built from the Go module proxy into .bin/weed
# the first time (5 to 9 minutes and 2.7 GB of RAM: `go install` refuses
# the module, whose go.mod has a replace directive, so the module is
# downloaded, copied and built in place), and `weed mini` (master, volume
# server, filer and S3 gateway in one process) is started on free loopback
# ports with its data in a temporary directory. Its S3 gateway takes the
# admin identity's keys from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY,
# set to the same test keys as versitygw's.
# Postgres: the machine's server on 127.0.0.1:5432 is used when it takes
# user postgres without a password; otherwise (none answers, or it asks a
# password as a stock server does over TCP), if the server binaries are
# installed, a throwaway cluster (scripts/pg-throwaway.sh) is initialised
# in a temporary directory on a free port.
#
# Prometheus: the tests run a real Prometheus and promtool against the
# shipped dashboard and alerts; Debian's prometheus package is installed
# when either is missing (quietly; the tests start their own process on a
# loopback port, never the package's service, which is kept from starting
# during the install and disabled and stopped after it).
#
# Idempotent: a second "up" reuses running services. State lives in .run/.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
run="$top/.run"
bin="$top/.bin"
envfile="$run/services.env"
VGW_VERSION=v1.8.0
VGW_ACCESS=nova-test-access
VGW_SECRET=nova-test-secret-key
# SeaweedFS publishes no semver tags for its Go module: this pseudo-version
# is one commit of its master branch.
SWFS_MODULE=github.com/seaweedfs/seaweedfs
SWFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
mkdir -p "$run" "$bin"

log() { printf 'services: %s\n' "$*" >&2; }

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

free_port() {
	python3 - <<'EOF' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
EOF
}

wait_tcp() { # host port seconds
	local i
	for ((i = 0; i < $3 * 20; i++)); do
		if (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; then return 0; fi
		sleep 0.05
	done
	return 1
}

versitygw_up() {
	if alive "$run/versitygw.pid" && [ -f "$run/versitygw.port" ] &&
		wait_tcp 127.0.0.1 "$(cat "$run/versitygw.port")" 1; then
		return 0
	fi
	# `go install` does not stamp the version into the binary (it prints
	# "git"), so the installed version is kept in a file beside it.
	if [ ! -x "$bin/versitygw" ] || [ "$(cat "$bin/versitygw.version" 2>/dev/null)" != "$VGW_VERSION" ]; then
		log "installing versitygw $VGW_VERSION into .bin (about 2 minutes the first time)"
		GOBIN="$bin" GOFLAGS=-buildvcs=false go install "github.com/versity/versitygw/cmd/versitygw@$VGW_VERSION"
		echo "$VGW_VERSION" >"$bin/versitygw.version"
	fi
	local port data
	port=$(free_port)
	data=$(mktemp -d "${TMPDIR:-/tmp}/nova-versitygw.XXXXXX")
	echo "$data" >"$run/versitygw.data"
	# --keep-alive: versitygw closes every connection after one response
	# unless told otherwise, and an S3 endpoint in production keeps them:
	# without it every request of the tests and benchmarks dials anew
	# (1.006 dials per settled object measured), client CPU no auditor
	# pays in production.
	ROOT_ACCESS_KEY= ROOT_SECRET_KEY= nohup "$bin/versitygw" -q --keep-alive --access "$VGW_ACCESS" --secret "$VGW_SECRET" \
		--port "127.0.0.1:$port" posix "$data" >"$run/versitygw.log" 2>&1 &
	echo $! >"$run/versitygw.pid"
	echo "$port" >"$run/versitygw.port"
	if ! wait_tcp 127.0.0.1 "$port" 10; then
		log "versitygw did not start; its log:"
		cat "$run/versitygw.log" >&2
		return 1
	fi
	log "versitygw $VGW_VERSION on 127.0.0.1:$port (pid $(cat "$run/versitygw.pid"))"
}

# seaweedfs_installed builds weed into .bin unless the pinned version is
# there (the version is kept in a file beside it, as for versitygw).
seaweedfs_installed() {
	if [ -x "$bin/weed" ] && [ "$(cat "$bin/weed.version" 2>/dev/null)" = "$SWFS_VERSION" ]; then
		return 0
	fi
	log "building SeaweedFS $SWFS_VERSION into .bin/weed (5 to 9 minutes and 2.7 GB of RAM the first time)"
	local tmp dir
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/nova-weed-build.XXXXXX")
	# Downloaded outside any module, so that our go.mod and go.sum are
	# left alone.
	dir=$(cd "$tmp" && GOFLAGS= go mod download -json "$SWFS_MODULE@$SWFS_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",*$/\1/p')
	if [ -z "$dir" ] || [ ! -d "$dir/weed" ]; then
		log "go mod download $SWFS_MODULE@$SWFS_VERSION gave no module directory"
		rm -rf "$tmp"
		return 1
	fi
	# The module cache is read-only: build in a writable copy.
	cp -r "$dir" "$tmp/src"
	chmod -R u+w "$tmp/src"
	if ! (cd "$tmp/src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -o "$bin/weed.new" ./weed) >"$run/weed-build.log" 2>&1; then
		log "building SeaweedFS failed; the end of its log (.run/weed-build.log):"
		tail -n 20 "$run/weed-build.log" >&2
		rm -rf "$tmp" "$bin/weed.new"
		return 1
	fi
	mv "$bin/weed.new" "$bin/weed"
	echo "$SWFS_VERSION" >"$bin/weed.version"
	rm -rf "$tmp"
}

# low_free_ports prints n distinct loopback ports, each free with port+10000
# free too (weed derives each service's gRPC port so), all below Linux's
# ephemeral range (32768) so that no outgoing connection takes one first.
low_free_ports() {
	python3 - "$1" <<'EOF'
import random, socket, sys
def free(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()
n, got = int(sys.argv[1]), []
while len(got) < n:
    p = random.randrange(10000, 22000)
    taken = {q for g in got for q in (g, g + 10000)}
    if p not in taken and p + 10000 not in taken and free(p) and free(p + 10000):
        got.append(p)
print(" ".join(map(str, got)))
EOF
}

seaweedfs_up() {
	if alive "$run/seaweedfs.pid" && [ -f "$run/seaweedfs.port" ] &&
		wait_tcp 127.0.0.1 "$(cat "$run/seaweedfs.port")" 1; then
		return 0
	fi
	seaweedfs_installed
	local master volume filer s3 admin data i
	read -r master volume filer s3 admin <<<"$(low_free_ports 5)"
	data=$(mktemp -d "${TMPDIR:-/tmp}/nova-seaweedfs.XXXXXX")
	echo "$data" >"$run/seaweedfs.data"
	# Every port explicit (weed mini moves a taken default port elsewhere;
	# an explicit one fails instead), the Iceberg, Lance, WebDAV and legacy
	# admin listeners off, no telemetry. Each bucket is a collection of
	# volumes of its own: the tests make hundreds of buckets, so the volume
	# server may hold many small volumes (sparse files, not preallocated);
	# by default weed mini sizes a handful of 1 GiB ones to the disk, and
	# PUTs fail with 500 InternalError ("no free volumes") after a few
	# dozen buckets.
	AWS_ACCESS_KEY_ID="$VGW_ACCESS" AWS_SECRET_ACCESS_KEY="$VGW_SECRET" nohup "$bin/weed" mini -dir="$data" \
		-ip=127.0.0.1 -ip.bind=127.0.0.1 -master.port="$master" -volume.port="$volume" -filer.port="$filer" \
		-s3.port="$s3" -s3.port.iceberg=0 -s3.port.lance=0 -webdav=false -admin.ui=false \
		-admin.port="$admin" -admin.port.legacy=0 -master.telemetry=false \
		-master.volumeSizeLimitMB=64 -volume.max=4000 \
		>"$run/seaweedfs.log" 2>&1 &
	echo $! >"$run/seaweedfs.pid"
	echo "$s3" >"$run/seaweedfs.port"
	# The S3 port opens once the master, the volume server and the filer
	# are up; it answers an unsigned request with an S3 error document.
	for ((i = 0; i < 1200; i++)); do
		if ! alive "$run/seaweedfs.pid"; then break; fi
		if curl -s -o /dev/null "http://127.0.0.1:$s3/" 2>/dev/null; then
			log "SeaweedFS $SWFS_VERSION (weed mini) S3 on 127.0.0.1:$s3 (pid $(cat "$run/seaweedfs.pid"))"
			return 0
		fi
		sleep 0.1
	done
	log "SeaweedFS did not start within 2 minutes; its log:"
	cat "$run/seaweedfs.log" >&2
	return 1
}

prometheus_installed() {
	if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
		return 0
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "prometheus and promtool are missing and there is no apt-get: install them (Prometheus 2.x)"
		return 1
	fi
	local sudo=()
	if [ "$(id -u)" != 0 ]; then sudo=(sudo -n); fi
	log "installing Debian's prometheus package (prometheus, promtool)"
	# The package starts and enables its own service (port 9090) on
	# install; the tests never use it, and a test run must leave no system
	# service behind. A policy-rc.d that exits 101 forbids invoke-rc.d to
	# start anything while the package installs (one already there, as in
	# Docker images, is left as it is); the service is then disabled and
	# stopped in case an init system started it anyway.
	local policy=/usr/sbin/policy-rc.d ours=0
	if [ ! -e "$policy" ]; then
		printf '#!/bin/sh\n# scripts/services.sh: no service starts while prometheus installs\nexit 101\n' |
			"${sudo[@]}" tee "$policy" >/dev/null && "${sudo[@]}" chmod 755 "$policy" && ours=1
	fi
	local ok=1
	if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus ||
		{ "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; } \
		>"$run/prometheus-install.log" 2>&1; then
		ok=0
	fi
	if [ "$ours" = 1 ]; then "${sudo[@]}" rm -f "$policy"; fi
	if [ "$ok" = 0 ]; then
		log "installing prometheus failed; its log:"
		cat "$run/prometheus-install.log" >&2
		return 1
	fi
	prometheus_service_stopped
}

# shells_installed installs zsh and fish, whose completion scripts the
# tests load (auditor completion zsh|fish), from Debian's packages when
# apt-get is there; without them those checks are skipped, said in the log.
shells_installed() {
	if command -v zsh >/dev/null 2>&1 && command -v fish >/dev/null 2>&1; then
		return 0
	fi
	if ! command -v apt-get >/dev/null 2>&1; then
		log "zsh or fish is missing and there is no apt-get: their completion checks are skipped"
		return 0
	fi
	local sudo=()
	if [ "$(id -u)" != 0 ]; then sudo=(sudo -n); fi
	log "installing Debian's zsh and fish packages (the completion tests load their scripts)"
	{ "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh fish ||
		{ "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zsh fish; }; } \
		>"$run/shells-install.log" 2>&1 || log "installing zsh and fish failed (their completion checks are skipped); see $run/shells-install.log"
}

# prometheus_service_stopped disables and stops the prometheus package's
# system service (systemd or its init.d script), and fails when it still
# runs: the tests start their own Prometheus on a loopback port.
prometheus_service_stopped() {
	local sudo=()
	if [ "$(id -u)" != 0 ]; then sudo=(sudo -n); fi
	if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
		"${sudo[@]}" systemctl disable --now prometheus >>"$run/prometheus-install.log" 2>&1 || true
		if systemctl is-active --quiet prometheus 2>/dev/null; then
			log "the prometheus package's service still runs after systemctl disable --now prometheus"
			return 1
		fi
	elif [ -x /etc/init.d/prometheus ]; then
		if command -v update-rc.d >/dev/null 2>&1; then
			"${sudo[@]}" update-rc.d prometheus disable >>"$run/prometheus-install.log" 2>&1 || true
		fi
		if [ -f /run/prometheus/prometheus.pid ] && kill -0 "$(cat /run/prometheus/prometheus.pid)" 2>/dev/null; then
			"${sudo[@]}" service prometheus stop >>"$run/prometheus-install.log" 2>&1 || true
		fi
		if [ -f /run/prometheus/prometheus.pid ] && kill -0 "$(cat /run/prometheus/prometheus.pid)" 2>/dev/null; then
			log "the prometheus package's service still runs after service prometheus stop"
			return 1
		fi
	fi
}

pg_answers() { # port
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -h 127.0.0.1 -p "$1" -t 2
	else
		wait_tcp 127.0.0.1 "$1" 1
	fi
}

# pg_usable: the server on 127.0.0.1:port takes user postgres without a
# password, as the tests' URL needs (with psql; without it, that it
# answers). A stock Debian server asks a password over TCP (scram-sha-256):
# then a throwaway cluster is used instead.
pg_usable() { # port
	if command -v psql >/dev/null 2>&1; then
		PGCONNECT_TIMEOUT=3 psql -w "postgres://postgres@127.0.0.1:$1/postgres?sslmode=disable" -qtAc 'SELECT 1' >/dev/null 2>&1
	else
		pg_answers "$1"
	fi
}

postgres_up() {
	if [ -n "${NOVA_TEST_DATABASE_URL:-}" ]; then
		echo "$NOVA_TEST_DATABASE_URL" >"$run/postgres.url"
		return 0
	fi
	if pg_usable 5432; then
		echo "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" >"$run/postgres.url"
		return 0
	fi
	if alive "$run/postgres.pid" && pg_answers "$(cat "$run/postgres.port")"; then
		return 0
	fi
	if pg_answers 5432; then
		log "the Postgres on 127.0.0.1:5432 refuses user postgres without a password: using a throwaway cluster (or set NOVA_TEST_DATABASE_URL)"
	fi
	local data
	data=$(mktemp -d "${TMPDIR:-/tmp}/nova-pg.XXXXXX")
	echo "$data" >"$run/postgres.data"
	if ! PG_THROWAWAY_PASSWORD= "$top/scripts/pg-throwaway.sh" start "$data" >"$run/postgres.url" 2>"$run/postgres.log"; then
		cat "$run/postgres.log" >&2
		log "install the server binaries (apt-get install postgresql) or set NOVA_TEST_DATABASE_URL"
		return 1
	fi
	head -n 1 "$data/data/postmaster.pid" >"$run/postgres.pid"
	cp "$data/port" "$run/postgres.port"
	log "throwaway Postgres on 127.0.0.1:$(cat "$run/postgres.port") (pid $(cat "$run/postgres.pid"))"
}

write_env() { # server
	if [ "$1" = seaweedfs ]; then
		cat >"$(envfile_of seaweedfs)" <<EOF
export NOVA_TEST_DATABASE_URL='$(cat "$run/postgres.url")'
export NOVA_TEST_S3_SERVER=seaweedfs
export NOVA_TEST_S3_ENDPOINT='http://127.0.0.1:$(cat "$run/seaweedfs.port")'
export NOVA_TEST_S3_ACCESS_KEY='$VGW_ACCESS'
export NOVA_TEST_S3_SECRET_KEY='$VGW_SECRET'
EOF
		return
	fi
	cat >"$(envfile_of versitygw)" <<EOF
export NOVA_TEST_DATABASE_URL='$(cat "$run/postgres.url")'
export NOVA_TEST_S3_SERVER=versitygw
export NOVA_TEST_S3_ENDPOINT='http://127.0.0.1:$(cat "$run/versitygw.port")'
export NOVA_TEST_S3_ACCESS_KEY='$VGW_ACCESS'
export NOVA_TEST_S3_SECRET_KEY='$VGW_SECRET'
export NOVA_TEST_VERSITYGW_PID='$(cat "$run/versitygw.pid")'
EOF
}

envfile_of() { # server
	if [ "$1" = seaweedfs ]; then echo "$run/seaweedfs.env"; else echo "$envfile"; fi
}

stop_pid() { # pidfile name
	if alive "$1"; then
		local pid
		pid=$(cat "$1")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
		log "stopped $2 (pid $pid)"
	fi
	rm -f "$1"
}

seaweedfs_down() {
	stop_pid "$run/seaweedfs.pid" seaweedfs
	if [ -f "$run/seaweedfs.data" ]; then rm -rf "$(cat "$run/seaweedfs.data")" "$run/seaweedfs.data"; fi
	rm -f "$(envfile_of seaweedfs)" "$run/seaweedfs.port"
}

server=${2:-versitygw}
case "$server" in
versitygw | seaweedfs) ;;
*)
	echo "$0: unknown S3 server $server (versitygw, seaweedfs)" >&2
	exit 2
	;;
esac

case "${1:-up}" in
up)
	prometheus_installed
	shells_installed
	"${server}_up"
	postgres_up
	write_env "$server"
	envfile_of "$server"
	;;
env)
	envfile_of "$server"
	;;
down)
	# down seaweedfs stops SeaweedFS alone, down versitygw all but it
	# (versitygw and a throwaway Postgres), down everything.
	if [ "${2:-}" != versitygw ]; then seaweedfs_down; fi
	if [ "${2:-}" = seaweedfs ]; then exit 0; fi
	stop_pid "$run/versitygw.pid" versitygw
	if [ -f "$run/versitygw.data" ]; then rm -rf "$(cat "$run/versitygw.data")" "$run/versitygw.data"; fi
	stop_pid "$run/postgres.pid" postgres
	if [ -f "$run/postgres.data" ]; then rm -rf "$(cat "$run/postgres.data")" "$run/postgres.data"; fi
	rm -f "$envfile" "$run/postgres.url" "$run/versitygw.port" "$run/postgres.port"
	;;
*)
	echo "usage: $0 up|down|env [versitygw|seaweedfs]" >&2
	exit 2
	;;
esac
