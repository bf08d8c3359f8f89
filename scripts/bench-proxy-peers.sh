#!/usr/bin/env bash
# Measures CodeHub's workspace proxy against nginx, HAProxy and Caddy, all
# in front of one upstream, in one run on this machine:
#
#   scripts/bench-proxy-peers.sh      (make bench-proxy-peers)
#
# The upstream is proxy/testdata/upstream. It runs as the program of a real
# workspace: `codehub server` with the single-machine backend starts it in
# place of code-server, so CodeHub's side is the whole server path (session
# cookie, route cache, owner check, upstream token, activity, metrics). nginx,
# HAProxy and Caddy each proxy to that same process, with configurations
# written to a temporary directory. wrk (one thread, 64 connections) then
# loads each target in turn, ROUNDS times, starting each round one target
# further on so that no target always follows the same one. Each round
# also measures every target with one connection (one request at a time),
# whose p50 is the latency a proxy adds when it is not queueing requests;
# under 64 connections the p50 mostly follows the request rate.
#
# Settings: ROUNDS (3), DURATION (10s), CONNS (64), SINGLE_DURATION (5s),
# URL_PATH (/ok, 3 bytes).
# CODEHUB_BENCH_PROFILE=FILE also records a perf profile of codehub server
# under its load of the first round, in FILE (perf.data format), and its
# report in FILE.txt.
#
# Everything listens on 127.0.0.1 on free ports and is stopped on exit; the
# machine's own nginx, HAProxy and Caddy services and ports are not touched.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

log() { printf 'bench-proxy-peers: %s\n' "$*" >&2; }

install_tools() {
	local missing=() cmd
	for cmd in wrk nginx haproxy caddy jq curl; do
		command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
	done
	[ ${#missing[@]} -eq 0 ] && return
	log "installing ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
	DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
	# Installing nginx, HAProxy or Caddy starts its system service on port
	# 80 where systemd runs; only this script's private copies may listen.
	if [ -d /run/systemd/system ]; then
		for cmd in "${missing[@]}"; do
			case $cmd in
			nginx | haproxy | caddy) systemctl disable --now "$cmd" >/dev/null 2>&1 || true ;;
			esac
		done
	fi
}

# The private PostgreSQL, Redis and S3 come from with-services.sh, which
# runs this script again with their variables set.
if [ -z "${CODEHUB_TEST_DATABASE_URL:-}" ]; then
	install_tools
	if [ -n "${CODEHUB_BENCH_PROFILE:-}" ] && ! command -v perf >/dev/null 2>&1; then
		log "CODEHUB_BENCH_PROFILE needs perf (Debian: apt-get install linux-perf)"
		exit 1
	fi
	"$root/scripts/services.sh" install
	exec "$root/scripts/with-services.sh" "$0" "$@"
fi

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
URL_PATH=${URL_PATH:-/ok}
SINGLE_DURATION=${SINGLE_DURATION:-5s}

dir=$(mktemp -d /tmp/codehub-peers.XXXXXX)
pids=()
server_pid=
cleanup() {
	local status=$?
	if [ -n "$server_pid" ]; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	# Workspaces outlive codehub by design: end the upstream's process
	# group, which the backend recorded when it started it.
	local state
	for state in "$dir"/data/run/ws-*/state.json; do
		[ -f "$state" ] || continue
		local pgid
		pgid=$(jq -r '.process.pgid' "$state")
		[ "$pgid" -gt 1 ] && kill -KILL -- "-$pgid" 2>/dev/null || true
	done
	local p
	for p in "${pids[@]}"; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	if [ "$status" != 0 ]; then
		local f
		for f in "$dir"/*.log "$dir"/nginx/error.log; do
			[ -s "$f" ] && { log "$f:"; tail -n 20 "$f" >&2; }
		done
	fi
	rm -rf "$dir"
	exit "$status"
}
trap cleanup EXIT INT TERM

free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 30000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# wait_http URL: until URL answers 200, for at most 60 s.
wait_http() {
	local _
	for _ in $(seq 1 600); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' "$1")" = 200 ]; then return 0; fi
		sleep 0.1
	done
	log "$1 never answered 200"
	return 1
}

log "building codehub and the upstream"
(cd "$root" && CGO_ENABLED=0 go build -o "$dir/codehub" ./cmd/codehub)
(cd "$root" && go build -o "$dir/upstream" ./proxy/testdata/upstream)

start_codehub() {
	local port=$1 password
	password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
	echo "$password" >"$dir/admin-password"
	cat >"$dir/codehub.hcl" <<HCL
listen     = "127.0.0.1:$port"
public_url = "http://127.0.0.1:$port"

database { url = "$CODEHUB_TEST_DATABASE_URL" }
redis    { url = "$CODEHUB_TEST_REDIS_URL" }
s3 {
  endpoint = "$CODEHUB_TEST_S3_ENDPOINT"
  bucket   = "codehub-peers"
  region   = "$CODEHUB_TEST_S3_REGION"
  use_ssl  = false
}

backend "local" {
  data_dir    = "$dir/data"
  code_server = "$dir/upstream"
}

auth {
  bootstrap_admin {
    username = "admin"
  }
}
HCL
	CODEHUB_S3_ACCESS_KEY=$CODEHUB_TEST_S3_ACCESS_KEY CODEHUB_S3_SECRET_KEY=$CODEHUB_TEST_S3_SECRET_KEY \
		CODEHUB_AUTH_BOOTSTRAP_ADMIN_PASSWORD=$password \
		"$dir/codehub" server -config "$dir/codehub.hcl" >"$dir/codehub.log" 2>&1 &
	server_pid=$!
	wait_http "http://127.0.0.1:$port/api/v1/health"
}

# workspace BASE: logs in as admin, creates a workspace, waits until it
# runs and prints its id; the session cookie is left in $dir/cookies.
workspace() {
	local base=$1 id phase op _
	curl -sf -c "$dir/cookies" -H 'Content-Type: application/json' \
		-d "{\"username\":\"admin\",\"password\":\"$(cat "$dir/admin-password")\"}" \
		"$base/api/v1/login" >/dev/null
	id=$(curl -sf -b "$dir/cookies" -H 'Content-Type: application/json' -d '{"name":"bench"}' \
		"$base/api/v1/workspaces" | jq -r .id)
	for _ in $(seq 1 1200); do
		read -r phase op < <(curl -sf -b "$dir/cookies" "$base/api/v1/workspaces/$id" | jq -r '"\(.phase) \(.operation)"')
		if [ "$phase" = RUNNING ] && [ "$op" = NONE ]; then
			echo "$id"
			return
		fi
		sleep 0.1
	done
	log "workspace $id never ran (phase $phase, operation $op)"
	return 1
}

start_nginx() {
	local port=$1 upstream=$2
	mkdir -p "$dir/nginx"
	cat >"$dir/nginx/nginx.conf" <<CONF
daemon off;
user root;
worker_processes auto;
pid $dir/nginx/nginx.pid;
error_log $dir/nginx/error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $dir/nginx/body;
  proxy_temp_path $dir/nginx/proxy;
  fastcgi_temp_path $dir/nginx/fastcgi;
  uwsgi_temp_path $dir/nginx/uwsgi;
  scgi_temp_path $dir/nginx/scgi;
  upstream workspace {
    server $upstream;
    keepalive 64;
  }
  server {
    listen 127.0.0.1:$port;
    location / {
      proxy_pass http://workspace;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
    }
  }
}
CONF
	nginx -p "$dir/nginx" -c "$dir/nginx/nginx.conf" &
	pids+=($!)
}

start_haproxy() {
	local port=$1 upstream=$2
	cat >"$dir/haproxy.cfg" <<CONF
global
  maxconn 4096
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
frontend peers
  bind 127.0.0.1:$port
  default_backend workspace
backend workspace
  server upstream $upstream
CONF
	haproxy -db -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
	pids+=($!)
}

start_caddy() {
	local port=$1 upstream=$2
	cat >"$dir/Caddyfile" <<CONF
{
  admin off
  auto_https off
}
http://127.0.0.1:$port {
  bind 127.0.0.1
  reverse_proxy $upstream
}
CONF
	XDG_DATA_HOME=$dir/caddy XDG_CONFIG_HOME=$dir/caddy \
		caddy run --adapter caddyfile --config "$dir/Caddyfile" >"$dir/caddy.log" 2>&1 &
	pids+=($!)
}

# to_us VALUE: wrk's latency (e.g. 512.00us, 1.23ms, 1.01s) in µs.
to_us() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); print v + 0 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); print v * 1000 }
		else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000000 }
		else { print "nan" } }'
}

names=(direct nginx haproxy caddy codehub)
declare -A url rps p50 single errors

# measure NAME CONNS DURATION: one wrk run, into last_rps, last_p50 (µs)
# and last_errors (wrk's count of failed or non-2xx answers, if any).
measure() {
	local name=$1 out args=(-t1 -c"$2" -d"$3" --latency)
	[ "$name" = codehub ] && args+=(-H "Cookie: codehub_session=$session")
	out=$(wrk "${args[@]}" "${url[$name]}")
	printf '%s, %s connections\n%s\n' "$name" "$2" "$out" >>"$dir/wrk.log"
	last_rps=$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")
	last_p50=$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")
	last_errors=$(awk '/Non-2xx or 3xx responses:|Socket errors:/ { printf "%s ", $0 }' <<<"$out")
}

server_port=$(free_port)
start_codehub "$server_port"
id=$(workspace "http://127.0.0.1:$server_port")
session=$(awk '$6 == "codehub_session" { print $7 }' "$dir/cookies")
upstream=127.0.0.1:$(jq -r .port "$dir/data/run/ws-$id/state.json")

nginx_port=$(free_port)
start_nginx "$nginx_port" "$upstream"
haproxy_port=$(free_port)
start_haproxy "$haproxy_port" "$upstream"
caddy_port=$(free_port)
start_caddy "$caddy_port" "$upstream"

url[direct]=http://$upstream$URL_PATH
url[nginx]=http://127.0.0.1:$nginx_port$URL_PATH
url[haproxy]=http://127.0.0.1:$haproxy_port$URL_PATH
url[caddy]=http://127.0.0.1:$caddy_port$URL_PATH
url[codehub]=http://127.0.0.1:$server_port/w/$id$URL_PATH

for name in direct nginx haproxy caddy; do
	wait_http "${url[$name]}"
done
body=$(curl -sf -b "codehub_session=$session" "${url[codehub]}")
[ "$body" = "$(curl -sf "${url[direct]}")" ] || {
	log "codehub did not answer like the upstream: $body"
	exit 1
}

echo "machine: $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), Linux $(uname -r), $(go version | awk '{ print $3 }')"
echo "tools: $(wrk --version 2>&1 | head -n 1 | awk '{ print "wrk", $2 }'), $(nginx -v 2>&1 | awk '{ print $3 }'), haproxy $(haproxy -v | awk 'NR == 1 { print $3 }'), caddy $(caddy version | awk '{ print $1 }')"
echo "commit: $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
echo "wrk -t1 -c$CONNS -d$DURATION --latency, path $URL_PATH; upstream $upstream (workspace $id)"

log "warming up"
for name in "${names[@]}"; do
	measure "$name" "$CONNS" 2s
done

# run_round ROUND: every target under load, then every target one request
# at a time, each in the round's order.
run_round() {
	local round=$1 name i
	order=()
	for i in "${!names[@]}"; do
		order+=("${names[$(((i + round - 1) % ${#names[@]}))]}")
	done
	for name in "${order[@]}"; do
		if [ "$name" = codehub ] && [ "$round" = 1 ] && [ -n "${CODEHUB_BENCH_PROFILE:-}" ]; then
			profile measure "$name" "$CONNS" "$DURATION"
		else
			measure "$name" "$CONNS" "$DURATION"
		fi
		rps[$name]=$last_rps p50[$name]=$last_p50 errors[$name]=$last_errors
	done
	for name in "${order[@]}"; do
		measure "$name" 1 "$SINGLE_DURATION"
		single[$name]=$last_p50
		errors[$name]+=$last_errors
	done
}

# profile CMD…: runs CMD while perf samples codehub server.
profile() {
	perf record -F 999 -g -o "$CODEHUB_BENCH_PROFILE" -p "$server_pid" -- sleep 8 2>"$dir/perf.log" &
	local profiler=$!
	"$@"
	wait "$profiler"
	perf report -i "$CODEHUB_BENCH_PROFILE" --no-children --stdio --sort symbol \
		>"$CODEHUB_BENCH_PROFILE.txt" 2>/dev/null
}

added() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.0f", a - b }'; }

for round in $(seq 1 "$ROUNDS"); do
	echo
	echo "round $round/$ROUNDS, $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	run_round "$round"
	printf '%-8s %11s %6s %9s %9s %12s %9s  %s\n' target 'requests/s' ratio 'p50 µs' added 'p50 1 conn' added order
	for name in "${names[@]}"; do
		pos=0
		for i in "${!order[@]}"; do [ "${order[$i]}" = "$name" ] && pos=$((i + 1)); done
		printf '%-8s %11.0f %6s %9.0f %9s %12.0f %9s  %s %s\n' "$name" "${rps[$name]}" \
			"$(awk -v a="${rps[$name]}" -v b="${rps[direct]}" 'BEGIN { printf "%.2f", a / b }')" \
			"${p50[$name]}" "$(added "${p50[$name]}" "${p50[direct]}")" \
			"${single[$name]}" "$(added "${single[$name]}" "${single[direct]}")" "$pos" "${errors[$name]}"
	done
done
echo
echo "end $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
