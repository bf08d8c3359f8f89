#!/usr/bin/env bash
# `make run`: private services under .state/run, a development configuration
# with the single-machine backend, then `codehub server` in the foreground.
# `make stop`: ends it, every workspace process it started, and the services.
#
#   scripts/run.sh         run; refuses while another run of this checkout runs
#   scripts/run.sh stop    stop a run of this checkout and everything it started
#
# One run per checkout: .state/run.lock is held (flock) for the life of the
# run, so a second one refuses before it touches anything of the first.
# Checkouts run beside each other on different ports (CODEHUB_RUN_PORT).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
state=${STATE:-$root/.state}
dir=$state/run
cfg=$state/codehub.dev.hcl
port=${CODEHUB_RUN_PORT:-8080}
# Run as root, workspaces run as this unprivileged user (made when missing).
ws_user=${CODEHUB_RUN_WORKSPACE_USER:-codehub-ws}

log() { printf 'run: %s\n' "$*" >&2; }

# Homes live outside the checkout, or VS Code would offer the checkout's git
# repository in every workspace. One data dir per checkout.
# sample_repo makes, once, the bare repository the "sample" template clones
# into a new workspace's home, beside the homes so the workspace user can
# read it; it belongs to that user, since git refuses repositories of
# others. It prints the repository's path, whose last part names the
# folder the clone gets in the home ("sample").
sample_repo() {
	local repo=$1.repos/sample.git work
	# Runs before this one kept it under a name the clone's folder took.
	rm -rf "$1.sample-repo.git"
	if [ ! -d "$repo" ]; then
		work=$(mktemp -d)
		printf '# Sample\n\nCloned by CodeHub at this workspace'"'"'s first start.\n' >"$work/README.md"
		git -C "$work" init --quiet
		git -C "$work" add README.md
		git -C "$work" -c user.name=CodeHub -c user.email=codehub@localhost commit --quiet -m "sample"
		mkdir -p "$(dirname "$repo")"
		git clone --quiet --bare "$work" "$repo"
		rm -rf "$work"
	fi
	if [ -n "${2:-}" ]; then
		chown -R "$2" "$repo"
	fi
	echo "$repo"
}

data_dir() {
	local base instance
	instance=$(basename "$root")-$(printf '%s' "$root" | md5sum | cut -c1-8)
	if [ "$(id -u)" -eq 0 ]; then
		base=/var/lib/codehub
	else
		base=${XDG_DATA_HOME:-$HOME/.local/share}/codehub
	fi
	echo "${CODEHUB_RUN_DATA_DIR:-$base/$instance}"
}

mkdir -p "$state"
# fd 9 holds the lock. Long-lived children get it closed (9>&-): a service
# or workspace holding it would refuse every later run.
exec 9>>"$state/run.lock"

stop_run() {
	if ! flock -n 9; then
		local pid
		pid=$(cat "$state/run.pid" 2>/dev/null || true)
		log "stopping make run (pid ${pid:-unknown})"
		[ -z "$pid" ] || kill -TERM "$pid" 2>/dev/null || true
		# It stops its server, then its services, then lets the lock go.
		if ! flock -w 120 9; then
			log "make run (pid ${pid:-unknown}) did not end within 2 minutes"
			exit 1
		fi
	fi
	# Workspaces outlive the server by design; stop-all ends them and their
	# archive and restore jobs.
	if [ -s "$cfg" ] && [ -x "$root/bin/codehub" ]; then
		"$root/bin/codehub" workspace stop-all -config "$cfg"
	fi
	# What a run that was killed outright left behind.
	"$root/scripts/services.sh" stop "$dir"
	rm -f "$state/run.pid"
}

# workspace_user makes the unprivileged user workspaces run as, and lets it
# pass through .state to code-server (and Node) without listing or reading
# anything else there: the config, the admin password and the services'
# data are root's alone (0600 files, 0700 directories).
workspace_user() {
	if ! id -u "$ws_user" >/dev/null 2>&1; then
		log "creating system user $ws_user for workspaces"
		useradd --system --user-group --shell /bin/bash --home-dir /nonexistent --no-create-home "$ws_user"
	fi
	chmod 711 "$state"
}

# move_old_homes moves homes of runs from before the data dir left the
# checkout, once their workspace processes (still running as root) ended.
move_old_homes() { # code-server data user-line
	local old=$state/data
	[ -d "$old/volumes" ] && [ ! -e "$2" ] || return 0
	log "moving the homes of earlier runs from $old to $2"
	local tmp=$dir/old-data.hcl
	(
		umask 077
		printf 's3 {\n  access_key = "unused"\n  secret_key = "unused"\n}\nbackend "local" {\n  data_dir = "%s"\n  code_server = "%s"\n  %s\n}\n' "$old" "$1" "$3" >"$tmp"
	)
	"$root/bin/codehub" workspace stop-all -config "$tmp" >/dev/null
	rm -f "$tmp"
	mkdir -p "$(dirname "$2")"
	mv "$old" "$2"
}

run() {
	if ! flock -n 9; then
		log "make run is already running from this checkout (pid $(cat "$state/run.pid" 2>/dev/null || echo unknown)); it keeps running. Stop it with make stop."
		exit 1
	fi
	echo $$ >"$state/run.pid"
	if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
		log "port $port is taken; set CODEHUB_RUN_PORT to another port"
		exit 1
	fi
	local data user_line=""
	data=$(data_dir)
	if [ "$(id -u)" -eq 0 ]; then
		workspace_user
		user_line="user        = \"$ws_user\""
	fi

	trap '"$root/scripts/services.sh" stop "$dir" || true; rm -f "$state/run.pid"' EXIT
	# Services a killed run left behind: the lock says no run owns them.
	"$root/scripts/services.sh" stop "$dir" >/dev/null 2>&1 || true
	"$root/scripts/services.sh" start "$dir" 9>&-
	# Plain variables, not exported: codehub gets its settings from the file.
	eval "$(sed 's/^export //' "$dir/env")"

	# The admin password is made once and kept, so the login stays the same
	# across runs; it is printed only the first time.
	local first=""
	if [ ! -s "$state/admin-password" ]; then
		(umask 077 && head -c 18 /dev/urandom | base64 | tr -d '/+=' >"$state/admin-password")
		first=1
	fi
	chmod 600 "$state/admin-password"
	local admin_password code_server
	admin_password=$(cat "$state/admin-password")
	code_server=$("$root/scripts/install-code-server.sh" "$state" 2>/dev/null | tail -n 1)
	move_old_homes "$code_server" "$data" "$user_line"
	local sample owner=""
	if [ -n "$user_line" ]; then
		owner=$ws_user
	fi
	sample=$(sample_repo "$data" "$owner")

	# Every secret the server needs is in the file, which only root reads,
	# so `codehub user … -config .state/codehub.dev.hcl` works as it is.
	(
		umask 077
		cat >"$cfg.tmp" <<HCL
# Generated by scripts/run.sh for \`make run\` (mode 0600: it holds the
# passwords of this run's services); edit config/codehub.example.hcl instead.
listen     = "127.0.0.1:$port"
public_url = "http://localhost:$port"
log_level  = "info"

# Each workspace on its own origin, {id}.localhost: browsers resolve every
# *.localhost name to loopback, so no DNS is needed.
proxy { subdomain_base = "localhost" }

database { url = "$CODEHUB_TEST_DATABASE_URL" }
redis    { url = "$CODEHUB_TEST_REDIS_URL" }
s3 {
  endpoint   = "$CODEHUB_TEST_S3_ENDPOINT"
  bucket     = "codehub"
  region     = "$CODEHUB_TEST_S3_REGION"
  use_ssl    = false
  access_key = "$CODEHUB_TEST_S3_ACCESS_KEY"
  secret_key = "$CODEHUB_TEST_S3_SECRET_KEY"
}

backend "local" {
  data_dir    = "$data"
  code_server = "$code_server"
  $user_line
}

workspace {
  standby_ttl = "10m"
  archive_ttl = "30m"
}

# Two templates beside the default code-server: the same program, and one
# whose first start clones a sample repository made by scripts/run.sh, with
# a prebuilt home and a warm one, so a new workspace of it starts at once.
template "default" {
  description = "Plain code-server"
}

template "sample" {
  description          = "code-server with a sample repository cloned into the home"
  repository_parameter = "repository"
  parameter "repository" {
    description = "Repository to clone at the first start"
    default     = "file://$sample"
    regex       = "(https|ssh|git|file)://.+"
  }
  warm = 1
  prebuild {
    init = ["git log --oneline > HISTORY"]
  }
}

auth {
  bootstrap_admin {
    username = "admin"
    password = "$admin_password"
  }
}
HCL
	)
	mv "$cfg.tmp" "$cfg"

	echo
	echo "  CodeHub is starting at http://localhost:$port/"
	if [ -n "$first" ]; then
		echo "  log in as admin with password: $admin_password"
		echo "  (kept in $state/admin-password)"
	else
		echo "  log in as admin (password in $state/admin-password)"
	fi
	echo "  workspace homes: $data"
	echo "  make stop ends it and every workspace it started"
	echo
	# codehub runs as a child so that a TERM sent to this script (make stop,
	# not only a Ctrl-C to the whole terminal) stops it gracefully before
	# the services.
	"$root/bin/codehub" server -config "$cfg" 9>&- &
	local server=$! status=0 stopping=""
	trap 'stopping=1; kill -TERM "$server" 2>/dev/null || true' INT TERM
	wait "$server" || status=$?
	# A trapped signal ends the first wait early; this one waits for the
	# server's own exit, which tells whether it stopped cleanly.
	if [ -n "$stopping" ]; then
		status=0
		wait "$server" 2>/dev/null || status=$?
	fi
	exit "$status"
}

case "${1:-run}" in
run) run ;;
stop) stop_run ;;
*)
	echo "usage: $0 [run | stop]" >&2
	exit 2
	;;
esac
