#!/usr/bin/env bash
# Installs (when missing) and runs private PostgreSQL, Redis and S3 (versitygw)
# instances on free loopback ports. Never touches the machine's default
# services or ports. Every local user can reach a loopback port (a workspace
# terminal included), so each service demands a password made at start, and
# DIR (data, logs, the env file holding the passwords) is private to root.
#
#   scripts/services.sh install        install what is missing
#   scripts/services.sh install-browser  install Chromium for the browser test
#   scripts/services.sh start DIR      start all three under DIR, write DIR/env
#   scripts/services.sh stop DIR       stop them (data stays in DIR)
#
# DIR/env holds the variables tests and `make run` read.
set -euo pipefail

VERSITYGW_VERSION=v1.8.0
root=$(cd "$(dirname "$0")/.." && pwd)
bindir=${CODEHUB_TOOLS_DIR:-$root/.state/bin}

log() { printf 'services: %s\n' "$*" >&2; }

pg_bin() {
	if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
		dirname "$(readlink -f "$(command -v initdb)")"
		return
	fi
	local d
	d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
	[ -n "$d" ] && [ -x "$d/initdb" ] && echo "$d"
}

apt_install() {
	if [ -z "${apt_updated:-}" ]; then
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		apt_updated=1
	fi
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

install() {
	if [ -z "$(pg_bin)" ]; then
		log "installing postgresql"
		apt_install postgresql
	fi
	if ! command -v redis-server >/dev/null 2>&1; then
		log "installing redis-server"
		apt_install redis-server
	fi
	if ! command -v zstd >/dev/null 2>&1; then
		apt_install zstd
	fi
	# The port tests run python3's http.server and a TCP echo inside
	# their workspaces, as a developer would.
	if ! command -v python3 >/dev/null 2>&1; then
		apt_install python3
	fi
	# The SSH tests drive the real OpenSSH client (ssh, scp, sftp,
	# ssh-agent) and rsync, which also runs inside their workspaces.
	if ! command -v ssh >/dev/null 2>&1 || ! command -v ssh-agent >/dev/null 2>&1; then
		log "installing openssh-client"
		apt_install openssh-client
	fi
	if ! command -v rsync >/dev/null 2>&1; then
		log "installing rsync"
		apt_install rsync
	fi
	# promtool checks and unit-tests the alerting rules in deploy/; the
	# package's server is not started.
	if ! command -v promtool >/dev/null 2>&1; then
		log "installing prometheus (for promtool)"
		apt_install --no-install-recommends prometheus
	fi
	# The TLS front test runs nginx with deploy/nginx/codehub.conf, as its
	# own process on loopback ports; the package's service is not used.
	if ! command -v nginx >/dev/null 2>&1; then
		log "installing nginx"
		apt_install --no-install-recommends nginx
	fi
	if [ ! -x "$bindir/versitygw" ]; then
		log "installing versitygw $VERSITYGW_VERSION"
		mkdir -p "$bindir"
		GOBIN="$bindir" go install "github.com/versity/versitygw/cmd/versitygw@$VERSITYGW_VERSION"
	fi
}

install_browser() {
	if ! command -v chromium >/dev/null 2>&1; then
		log "installing chromium"
		apt_install chromium
	fi
}

# free_port picks a port below the kernel's range for outgoing connections:
# one in it may be bound by a connection that a probe does not see.
free_port() {
	local p lo
	lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	[ "$lo" -gt 11000 ] || lo=32768
	while :; do
		p=$((10000 + RANDOM % (lo - 10000)))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

wait_for() { # name, command...
	local name=$1
	shift
	for _ in $(seq 1 100); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	log "$name did not come up"
	return 1
}

new_password() { head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n'; }

start() {
	local dir=$1
	# Files made here hold passwords or data: no one else may read them.
	umask 077
	mkdir -p "$dir"
	dir=$(cd "$dir" && pwd)
	local pgb
	pgb=$(pg_bin)

	# PostgreSQL refuses to run as root: its files belong to postgres, who
	# needs to pass through DIR to them, and to nothing else in it.
	local pgport pgdata=$dir/pg pgpass
	pgport=$(free_port)
	pgpass=$(new_password)
	chmod 711 "$dir"
	# The server runs as postgres, which may not reach a checkout under a
	# private home directory: keep its data where it can, linked from DIR.
	if ! runuser -u postgres -- test -x "$dir"; then
		local alt
		alt=/var/tmp/codehub-pg-$(printf '%s' "$dir" | md5sum | cut -c1-12)
		mkdir -p "$alt"
		[ -e "$pgdata" ] || ln -s "$alt" "$pgdata"
		pgdata=$alt
	fi
	if [ ! -s "$pgdata/PG_VERSION" ]; then
		mkdir -p "$pgdata"
		chown postgres: "$pgdata"
		chmod 700 "$pgdata"
		runuser -u postgres -- "$pgb/initdb" -D "$pgdata" -U postgres -A trust -E UTF8 >"$dir/initdb.log" 2>&1 ||
			{ cat "$dir/initdb.log" >&2; return 1; }
	fi
	# Its own socket (inside the private data dir) trusts postgres; TCP,
	# which anyone on the machine reaches, takes the password set below.
	# Written at every start, so data made by an older trusting version
	# is locked too.
	printf 'local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\nhost all all ::1/128 scram-sha-256\n' >"$pgdata/pg_hba.conf"
	chown postgres: "$pgdata/pg_hba.conf"
	runuser -u postgres -- "$pgb/pg_ctl" -D "$pgdata" -l "$pgdata/server.log" -w -t 60 \
		-o "-c listen_addresses=127.0.0.1 -p $pgport -k $pgdata -c max_connections=300 -c fsync=off" start >/dev/null ||
		{ cat "$pgdata/server.log" >&2; return 1; }
	# On stdin, so the password never shows in a process listing.
	printf "ALTER USER postgres PASSWORD '%s';\n" "$pgpass" |
		runuser -u postgres -- "$pgb/psql" -X -q -h "$pgdata" -p "$pgport" -U postgres -d postgres -v ON_ERROR_STOP=1 -f - >/dev/null

	local rport rpass
	rport=$(free_port)
	rpass=$(new_password)
	# In a file, not on the command line, which every user can read.
	echo "requirepass $rpass" >"$dir/redis.conf"
	redis-server "$dir/redis.conf" --bind 127.0.0.1 --port "$rport" --databases 1001 --save '' --appendonly no \
		--daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" --dir "$dir"
	wait_for redis env REDISCLI_AUTH="$rpass" redis-cli -p "$rport" ping

	local sport key secret
	sport=$(free_port)
	key=codehub-test
	secret=$(new_password)
	mkdir -p "$dir/s3"
	ROOT_ACCESS_KEY=$key ROOT_SECRET_KEY=$secret nohup "$bindir/versitygw" --port "127.0.0.1:$sport" --quiet \
		posix "$dir/s3" >"$dir/versitygw.log" 2>&1 &
	echo $! >"$dir/versitygw.pid"
	wait_for versitygw curl -s -o /dev/null "http://127.0.0.1:$sport/"

	cat >"$dir/env" <<ENV
export CODEHUB_TEST_DATABASE_URL=postgres://postgres:$pgpass@127.0.0.1:$pgport/postgres?sslmode=disable
export CODEHUB_TEST_REDIS_URL=redis://:$rpass@127.0.0.1:$rport/0
export CODEHUB_TEST_S3_ENDPOINT=127.0.0.1:$sport
export CODEHUB_TEST_S3_ACCESS_KEY=$key
export CODEHUB_TEST_S3_SECRET_KEY=$secret
export CODEHUB_TEST_S3_REGION=us-east-1
ENV
	log "postgres 127.0.0.1:$pgport, redis 127.0.0.1:$rport, s3 127.0.0.1:$sport (state in $dir)"
}

stop() {
	local dir=$1
	[ -d "$dir" ] || return 0
	local pgb
	pgb=$(pg_bin)
	if [ -f "$dir/pg/postmaster.pid" ]; then
		runuser -u postgres -- "$pgb/pg_ctl" -D "$dir/pg" -m fast -w stop >/dev/null 2>&1 || true
	fi
	for f in redis versitygw; do
		if [ -f "$dir/$f.pid" ]; then
			kill "$(cat "$dir/$f.pid")" 2>/dev/null || true
			rm -f "$dir/$f.pid"
		fi
	done
	rm -f "$dir/env"
}

case "${1:-}" in
install) install ;;
install-browser) install_browser ;;
start) start "$2" ;;
stop) stop "$2" ;;
*)
	echo "usage: $0 install | install-browser | start DIR | stop DIR" >&2
	exit 2
	;;
esac
