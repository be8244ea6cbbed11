#!/usr/bin/env bash
# pg-throwaway.sh: a throwaway Postgres cluster in a directory of its own,
# for `make test` (scripts/services.sh) and `make demo` when no usable
# server answers on 127.0.0.1:5432, and for the demo's check against a
# server that wants a password (scripts/demo-check.sh).
#
#   scripts/pg-throwaway.sh start DIR   initdb in DIR/data, start it on a free loopback port, print its URL
#   scripts/pg-throwaway.sh stop DIR    stop it and remove DIR
#
# DIR must exist and be empty; it holds the cluster, its log, `port` and
# `url`. The server listens on 127.0.0.1 and a socket in DIR only. By
# default it trusts every connection (user postgres, no password). With
# PG_THROWAWAY_PASSWORD set it authenticates TCP as a stock Debian server
# does: password_encryption = scram-sha-256, `host all all 127.0.0.1/32
# scram-sha-256`, postgres's password the one given, and the printed URL
# carries it. As root the server runs as the postgres user (initdb refuses
# root). Uses the newest /usr/lib/postgresql/*/bin.
set -euo pipefail

log() { printf 'pg-throwaway: %s\n' "$*" >&2; }

free_port() {
	python3 - <<'PY' 2>/dev/null || echo $((20000 + RANDOM % 20000))
import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()
PY
}

pgbin() {
	local b
	b=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	if [ -z "$b" ] || [ ! -x "$b/initdb" ]; then
		log "no Postgres server binaries (/usr/lib/postgresql/*/bin/initdb): apt-get install postgresql"
		return 1
	fi
	echo "$b"
}

as_owner() { # command...: as the postgres user when root
	if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

start() { # dir
	local dir=$1 bin port auth=(-A trust)
	bin=$(pgbin)
	mkdir -p "$dir/data"
	if [ -n "${PG_THROWAWAY_PASSWORD:-}" ]; then
		printf '%s\n' "$PG_THROWAWAY_PASSWORD" >"$dir/pwfile"
		auth=(--auth-local=trust --auth-host=scram-sha-256 --pwfile="$dir/pwfile")
	fi
	if [ "$(id -u)" = 0 ]; then chown -R postgres "$dir"; fi
	if ! as_owner "$bin/initdb" -D "$dir/data" -U postgres "${auth[@]}" >"$dir/initdb.log" 2>&1; then
		log "initdb failed; its log:"
		cat "$dir/initdb.log" >&2
		return 1
	fi
	rm -f "$dir/pwfile"
	if [ -n "${PG_THROWAWAY_PASSWORD:-}" ]; then
		# Exactly a stock server's rules for TCP, stated rather than left
		# to initdb's defaults.
		echo "password_encryption = 'scram-sha-256'" >>"$dir/data/postgresql.conf"
		printf 'local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n' >"$dir/data/pg_hba.conf"
	fi
	port=$(free_port)
	if ! as_owner "$bin/pg_ctl" -D "$dir/data" -o "-h 127.0.0.1 -p $port -k $dir" -l "$dir/server.log" -w start >>"$dir/initdb.log" 2>&1; then
		log "the server did not start; its log:"
		cat "$dir/server.log" >&2
		return 1
	fi
	echo "$port" >"$dir/port"
	local user=postgres
	if [ -n "${PG_THROWAWAY_PASSWORD:-}" ]; then
		user="postgres:$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$PG_THROWAWAY_PASSWORD")"
	fi
	echo "postgres://$user@127.0.0.1:$port/postgres?sslmode=disable" >"$dir/url"
	cat "$dir/url"
}

stop() { # dir
	local dir=$1 bin
	if [ -f "$dir/data/postmaster.pid" ]; then
		bin=$(pgbin)
		as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$dir"
}

case "${1:-}" in
start | stop)
	if [ -z "${2:-}" ]; then
		echo "usage: $0 start|stop DIR" >&2
		exit 2
	fi
	"$1" "$2"
	;;
*)
	echo "usage: $0 start|stop DIR" >&2
	exit 2
	;;
esac
