#!/usr/bin/env bash
# Measures a workspace port's address against the workspace's own address,
# through one `codehub server`, in one run on this machine:
#
#   scripts/bench-ports.sh      (make bench-ports)
#
# The server runs with the single-machine backend in path mode. Its
# workspace program is proxy/testdata/upstream (in place of code-server),
# and a second copy of it is started inside the workspace over `codehub
# ssh`, listening on a port of its own, as a dev server would. wrk (one
# thread, CONNS connections) then loads GET URL_PATH at /w/{id}/ (the
# workbench's path: proxy to the program) and at /w/{port}--{id}/ (the
# port's path: proxy to the dev server, over connections the workspace
# agent dialled and handed over on its Unix socket) in turn, ROUNDS times, alternating which goes first, and measures each
# with one connection too. Both are served to the owner's session cookie.
#
# Settings: ROUNDS (3), DURATION (10s), CONNS (64), SINGLE_DURATION (5s),
# URL_PATH (/ok, 3 bytes). RELAY=haproxy adds a third path, a peer's
# relay: HAProxy in TCP mode, started inside the workspace on a port of
# its own and relaying to the dev server, reached at that port's path
# (proxy, HAProxy, dev server: the hop the agent makes on Nomad, where it
# relays), installed from apt if missing.
#
# Everything listens on 127.0.0.1 on free ports and is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

log() { printf 'bench-ports: %s\n' "$*" >&2; }

if [ -z "${CODEHUB_TEST_DATABASE_URL:-}" ]; then
	missing=()
	tools=(wrk jq curl)
	[ "${RELAY:-}" = haproxy ] && tools+=(haproxy)
	for cmd in "${tools[@]}"; do
		command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing ${missing[*]}"
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq
		DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null
	fi
	"$root/scripts/services.sh" install
	exec "$root/scripts/with-services.sh" "$0" "$@"
fi

ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10s}
CONNS=${CONNS:-64}
URL_PATH=${URL_PATH:-/ok}
SINGLE_DURATION=${SINGLE_DURATION:-5s}

dir=$(mktemp -d /tmp/codehub-bench-ports.XXXXXX)
server_pid=
id=
cleanup() {
	local status=$?
	local pidfile
	for pidfile in dev.pid relay.pid; do
		if [ -n "$id" ] && [ -f "$dir/data/volumes/ws-$id-home/$pidfile" ]; then
			kill -TERM "$(cat "$dir/data/volumes/ws-$id-home/$pidfile")" 2>/dev/null || true
		fi
	done
	if [ -n "$server_pid" ]; then
		kill -TERM "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
	fi
	# Workspaces outlive codehub by design: end the workspace's process
	# group, which the backend recorded when it started it.
	local state pgid
	for state in "$dir"/data/run/ws-*/state.json; do
		[ -f "$state" ] || continue
		pgid=$(jq -r '.process.pgid' "$state")
		[ "$pgid" -gt 1 ] && kill -KILL -- "-$pgid" 2>/dev/null || true
	done
	if [ "$status" != 0 ] && [ -s "$dir/codehub.log" ]; then
		log "$dir/codehub.log:"
		tail -n 20 "$dir/codehub.log" >&2
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

# wait_ok URL [CURL ARGS…]: until URL answers 200, for at most 60 s.
wait_ok() {
	local u=$1 _
	shift
	for _ in $(seq 1 600); do
		if [ "$(curl -s -o /dev/null -w '%{http_code}' "$@" "$u")" = 200 ]; then return 0; fi
		sleep 0.1
	done
	log "$u never answered 200"
	return 1
}

log "building codehub and the upstream"
(cd "$root" && CGO_ENABLED=0 go build -o "$dir/codehub" ./cmd/codehub)
(cd "$root" && go build -o "$dir/upstream" ./proxy/testdata/upstream)

port=$(free_port)
base=http://127.0.0.1:$port
password=$(head -c 18 /dev/urandom | base64 | tr -d '/+=')
cat >"$dir/codehub.hcl" <<HCL
listen     = "127.0.0.1:$port"
public_url = "$base"

database { url = "$CODEHUB_TEST_DATABASE_URL" }
redis    { url = "$CODEHUB_TEST_REDIS_URL" }
s3 {
  endpoint = "$CODEHUB_TEST_S3_ENDPOINT"
  bucket   = "codehub-bench-ports"
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
wait_ok "$base/api/v1/health"

curl -sf -c "$dir/cookies" -H 'Content-Type: application/json' \
	-d "{\"username\":\"admin\",\"password\":\"$password\"}" "$base/api/v1/login" >/dev/null
session=$(awk '$6 == "codehub_session" { print $7 }' "$dir/cookies")
id=$(curl -sf -b "$dir/cookies" -H 'Content-Type: application/json' -d '{"name":"bench"}' \
	"$base/api/v1/workspaces" | jq -r .id)
for _ in $(seq 1 1200); do
	read -r phase op < <(curl -sf -b "$dir/cookies" "$base/api/v1/workspaces/$id" | jq -r '"\(.phase) \(.operation)"')
	[ "$phase" = RUNNING ] && [ "$op" = NONE ] && break
	sleep 0.1
done
token=$(curl -sf -b "$dir/cookies" -H 'Content-Type: application/json' -H "Origin: $base" \
	-d '{"name":"bench","scope":"read-write"}' "$base/api/v1/tokens" | jq -r .secret)

dev=$(free_port)
CODEHUB_URL=$base CODEHUB_TOKEN=$token XDG_CONFIG_HOME=$dir/config \
	"$dir/codehub" ssh bench "nohup $dir/upstream --bind-addr 127.0.0.1:$dev </dev/null >/dev/null 2>&1 & echo \$! > dev.pid"

declare -A url
url[workbench]=$base/w/$id$URL_PATH
url[port]=$base/w/$dev--$id$URL_PATH
wait_ok "${url[port]}" -b "codehub_session=$session"
paths=(workbench port)
if [ "${RELAY:-}" = haproxy ]; then
	relay=$(free_port)
	printf 'defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  timeout server 60s\nlisten relay\n  bind 127.0.0.1:%s\n  server dev 127.0.0.1:%s\n' "$relay" "$dev" |
		CODEHUB_URL=$base CODEHUB_TOKEN=$token XDG_CONFIG_HOME=$dir/config "$dir/codehub" ssh bench "cat > haproxy.cfg"
	CODEHUB_URL=$base CODEHUB_TOKEN=$token XDG_CONFIG_HOME=$dir/config \
		"$dir/codehub" ssh bench "nohup $(command -v haproxy) -f haproxy.cfg </dev/null >/dev/null 2>&1 & echo \$! > relay.pid"
	url[relay]=$base/w/$relay--$id$URL_PATH
	wait_ok "${url[relay]}" -b "codehub_session=$session"
	paths+=(relay)
fi

# to_us VALUE: wrk's latency (e.g. 512.00us, 1.23ms, 1.01s) in µs.
to_us() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); print v + 0 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); print v * 1000 }
		else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000000 }
		else { print "nan" } }'
}

# measure NAME CONNS DURATION: prints requests/s and p50 (µs) of one run.
measure() {
	local out
	out=$(wrk -t1 -c"$2" -d"$3" --latency -H "Cookie: codehub_session=$session" "${url[$1]}")
	if grep -q 'Non-2xx or 3xx responses:\|Socket errors:' <<<"$out"; then
		log "$1: $(grep 'Non-2xx or 3xx responses:\|Socket errors:' <<<"$out" | tr '\n' ' ')"
	fi
	printf '%s %s\n' "$(awk '/^Requests\/sec:/ { print $2 }' <<<"$out")" "$(to_us "$(awk '$1 == "50%" { print $2 }' <<<"$out")")"
}

header='| round | load |'
rule='|---|---|'
for name in "${paths[@]}"; do
	header+=" $name req/s · p50 µs |"
	rule+='---|'
done
for name in "${paths[@]:1}"; do
	header+=" $name/workbench |"
	rule+='---|'
done
header+=' one connection p50 µs:'
for name in "${paths[@]}"; do header+=" $name"; done
printf '%s |\n%s---|\n' "$header" "$rule"
for round in $(seq 1 "$ROUNDS"); do
	order=("${paths[@]}")
	# Alternate which goes first.
	[ $((round % 2)) = 0 ] && order=($(printf '%s\n' "${paths[@]}" | tac))
	declare -A rps p50 one
	for name in "${order[@]}"; do
		read -r rps[$name] p50[$name] < <(measure "$name" "$CONNS" "$DURATION")
	done
	for name in "${order[@]}"; do
		read -r _ one[$name] < <(measure "$name" 1 "$SINGLE_DURATION")
	done
	line="| $round | $(cut -d' ' -f1 /proc/loadavg) |"
	for name in "${paths[@]}"; do line+=" ${rps[$name]} · ${p50[$name]} |"; done
	for name in "${paths[@]:1}"; do
		line+=" $(awk -v a="${rps[$name]}" -v b="${rps[workbench]}" 'BEGIN { printf "%.2f", a / b }') |"
	done
	line+=""
	for name in "${paths[@]}"; do line+=" ${one[$name]}"; done
	printf '%s |\n' "$line"
done
