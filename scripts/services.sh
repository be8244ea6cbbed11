#!/usr/bin/env bash
# services.sh: install and start the real services the tests need, and stop
# them again by PID.
#
#   scripts/services.sh up     start what is missing; print the env file path
#   scripts/services.sh down   stop every process that "up" started
#   scripts/services.sh env    print the env file path (after "up")
#
# versitygw v1.8.0 (Apache-2.0) is installed from the Go module proxy into
# .bin/ (cached across runs) and started on a free loopback port with the
# POSIX backend in a temporary directory and a fixed test access key.
# Postgres: the machine's server on 127.0.0.1:5432 is used when it answers;
# otherwise, if the server binaries are installed, a throwaway cluster is
# initialised in a temporary directory on a free port.
#
# Prometheus: the tests run a real Prometheus and promtool against the
# shipped dashboard and alerts; Debian's prometheus package is installed
# when either is missing (quietly; the tests start their own process on a
# loopback port, never the package's service).
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
	ROOT_ACCESS_KEY= ROOT_SECRET_KEY= nohup "$bin/versitygw" -q --access "$VGW_ACCESS" --secret "$VGW_SECRET" \
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
	# The package may start its own service (port 9090); the tests never
	# use it.
	if ! { "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus ||
		{ "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus; }; } \
		>"$run/prometheus-install.log" 2>&1; then
		log "installing prometheus failed; its log:"
		cat "$run/prometheus-install.log" >&2
		return 1
	fi
}

pg_answers() { # port
	if command -v pg_isready >/dev/null 2>&1; then
		pg_isready -q -h 127.0.0.1 -p "$1" -t 2
	else
		wait_tcp 127.0.0.1 "$1" 1
	fi
}

postgres_up() {
	if [ -n "${NOVA_TEST_DATABASE_URL:-}" ]; then
		echo "$NOVA_TEST_DATABASE_URL" >"$run/postgres.url"
		return 0
	fi
	if pg_answers 5432; then
		echo "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable" >"$run/postgres.url"
		return 0
	fi
	if alive "$run/postgres.pid" && pg_answers "$(cat "$run/postgres.port")"; then
		return 0
	fi
	local pgbin
	pgbin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$pgbin" ] || [ ! -x "$pgbin/initdb" ]; then
		log "no Postgres answers on 127.0.0.1:5432 and no server binaries are installed"
		log "install them (apt-get install postgresql) or set NOVA_TEST_DATABASE_URL"
		return 1
	fi
	local port data user=()
	port=$(free_port)
	data=$(mktemp -d "${TMPDIR:-/tmp}/nova-pg.XXXXXX")
	if [ "$(id -u)" = 0 ]; then
		chown postgres "$data" 2>/dev/null || true
		user=(runuser -u postgres --)
	fi
	"${user[@]}" "$pgbin/initdb" -D "$data" -U postgres -A trust >"$run/postgres.log" 2>&1
	"${user[@]}" "$pgbin/pg_ctl" -D "$data" -o "-h 127.0.0.1 -p $port -k $data" -l "$data/server.log" -w start >>"$run/postgres.log" 2>&1
	head -n 1 "$data/postmaster.pid" >"$run/postgres.pid"
	echo "$data" >"$run/postgres.data"
	echo "$port" >"$run/postgres.port"
	echo "postgres://postgres@127.0.0.1:$port/postgres?sslmode=disable" >"$run/postgres.url"
	log "throwaway Postgres on 127.0.0.1:$port (pid $(cat "$run/postgres.pid"))"
}

write_env() {
	cat >"$envfile" <<EOF
export NOVA_TEST_DATABASE_URL='$(cat "$run/postgres.url")'
export NOVA_TEST_S3_ENDPOINT='http://127.0.0.1:$(cat "$run/versitygw.port")'
export NOVA_TEST_S3_ACCESS_KEY='$VGW_ACCESS'
export NOVA_TEST_S3_SECRET_KEY='$VGW_SECRET'
export NOVA_TEST_VERSITYGW_PID='$(cat "$run/versitygw.pid")'
EOF
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

case "${1:-up}" in
up)
	prometheus_installed
	versitygw_up
	postgres_up
	write_env
	echo "$envfile"
	;;
env)
	echo "$envfile"
	;;
down)
	stop_pid "$run/versitygw.pid" versitygw
	if [ -f "$run/versitygw.data" ]; then rm -rf "$(cat "$run/versitygw.data")" "$run/versitygw.data"; fi
	stop_pid "$run/postgres.pid" postgres
	if [ -f "$run/postgres.data" ]; then rm -rf "$(cat "$run/postgres.data")" "$run/postgres.data"; fi
	rm -f "$envfile" "$run/postgres.url" "$run/versitygw.port" "$run/postgres.port"
	;;
*)
	echo "usage: $0 up|down|env" >&2
	exit 2
	;;
esac
