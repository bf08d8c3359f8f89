#!/usr/bin/env bash
# A private Docker engine for the docker-driver end-to-end test, started the
# way docs/nomad.md describes for machines without a bridge network, and the
# two images that test runs, built here from what this machine has: nothing
# is ever pulled.
#
#   scripts/docker-test-engine.sh start DIR CODE_SERVER_DIR
#   scripts/docker-test-engine.sh stop DIR
#
# start runs dockerd with its data, exec root and socket under DIR (host
# networking only: no bridge, no iptables), then imports
#   codehub-code-server:e2e  a root filesystem holding this machine's Node 20,
#                            the code-server installed in CODE_SERVER_DIR
#                            (scripts/install-code-server.sh) with the
#                            libraries its binaries need, a workspace user
#                            1000:1000, and an ENTRYPOINT shaped like the
#                            official image's (a script plus arguments);
#   codehub-job:e2e          the static codehub binary built from this tree;
# and writes DIR/env with the CODEHUB_TEST_DOCKER_* variables. stop ends the
# engine, unmounts what it left and removes DIR.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

log() { printf 'docker-test-engine: %s\n' "$*" >&2; }

# copy_with_libs FILE [DEST]: FILE into the root filesystem with every
# shared library ldd names for it (and the loader).
copy_with_libs() {
	local src=$1 dest=${2:-$1} lib
	install -D -m 0755 "$(readlink -f "$src")" "$rootfs$dest"
	while read -r lib; do
		[ -e "$rootfs$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
	done < <(ldd "$src" 2>/dev/null | grep -o '/[^ ]*' || true)
}

build_code_server_image() {
	local cs=$1
	local node
	node=$(command -v node)
	if [ "$(node -p 'process.versions.node.split(".")[0]')" != 20 ]; then
		log "the code-server image needs Node 20 on PATH"
		exit 1
	fi
	rootfs=$dir/rootfs-code-server
	mkdir -p "$rootfs"/{tmp,home/coder,etc,usr/lib}
	chmod 1777 "$rootfs/tmp"
	copy_with_libs "$node" /usr/bin/node
	for tool in sh env id cat ls mkdir rm stat head sleep; do
		copy_with_libs "$(command -v "$tool")" "/bin/$tool"
	done
	# What the SSH test runs in the workspace: rsync's far end, ssh-add
	# for agent forwarding.
	for tool in rsync ssh-add; do
		copy_with_libs "$(command -v "$tool")" "/usr/bin/$tool"
	done
	# git for a first start's clone (over HTTP) and fast-forward, and
	# basename and find, which the first-start script runs.
	copy_with_libs "$(command -v git)" /usr/bin/git
	for helper in git-remote-http git-remote-https; do
		copy_with_libs "$(git --exec-path)/$helper" "/usr/lib/git-core/$helper"
	done
	for tool in basename find; do
		if command -v "$tool" >/dev/null; then
			copy_with_libs "$(command -v "$tool")" "/bin/$tool"
		fi
	done
	mkdir -p "$rootfs/usr/lib/code-server"
	cp -a "$cs/node_modules" "$rootfs/usr/lib/code-server/node_modules"
	# Native modules and ripgrep are binaries with libraries of their own.
	while read -r bin; do
		while read -r lib; do
			[ -e "$rootfs$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$rootfs$lib"
		done < <(ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' || true)
	done < <(find "$rootfs/usr/lib/code-server" -type f \( -name '*.node' -o -name rg \))
	printf 'root:x:0:0:root:/root:/bin/sh\ncoder:x:1000:1000:coder:/home/coder:/bin/sh\n' >"$rootfs/etc/passwd"
	printf 'root:x:0:\ncoder:x:1000:\n' >"$rootfs/etc/group"
	chown 1000:1000 "$rootfs/home/coder"
	cat >"$rootfs/usr/bin/entrypoint.sh" <<'SH'
#!/bin/sh
exec /usr/bin/node /usr/lib/code-server/node_modules/code-server/out/node/entry.js "$@"
SH
	chmod 0755 "$rootfs/usr/bin/entrypoint.sh"
	tar --numeric-owner -C "$rootfs" -c . |
		docker import \
			--change 'ENTRYPOINT ["/usr/bin/entrypoint.sh", "--bind-addr", "0.0.0.0:8080", "."]' \
			--change 'ENV PATH=/usr/bin:/bin' \
			- codehub-code-server:e2e >/dev/null
	rm -rf "$rootfs"
}

build_job_image() {
	rootfs=$dir/rootfs-job
	mkdir -p "$rootfs/tmp"
	chmod 1777 "$rootfs/tmp"
	(cd "$root" && CGO_ENABLED=0 go build -o "$rootfs/codehub" ./cmd/codehub)
	tar --numeric-owner -C "$rootfs" -c . |
		docker import --change 'ENTRYPOINT ["/codehub"]' - codehub-job:e2e >/dev/null
	rm -rf "$rootfs"
}

start() {
	local cs=$2
	mkdir -p "$dir"/{data,exec}
	dockerd --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
		--data-root "$dir/data" --exec-root "$dir/exec" \
		-H "unix://$dir/docker.sock" --pidfile "$dir/docker.pid" >"$dir/dockerd.log" 2>&1 &
	export DOCKER_HOST=unix://$dir/docker.sock
	for _ in $(seq 1 300); do
		docker version >/dev/null 2>&1 && break
		sleep 0.1
	done
	if ! docker version >/dev/null 2>&1; then
		tail -n 30 "$dir/dockerd.log" >&2
		log "dockerd did not start"
		exit 1
	fi
	build_code_server_image "$cs"
	build_job_image
	cat >"$dir/env" <<ENV
export CODEHUB_TEST_DOCKER_ENDPOINT=unix://$dir/docker.sock
export CODEHUB_TEST_DOCKER_IMAGE=codehub-code-server:e2e
export CODEHUB_TEST_DOCKER_JOB_IMAGE=codehub-job:e2e
ENV
	log "engine at unix://$dir/docker.sock with codehub-code-server:e2e and codehub-job:e2e"
}

stop() {
	if [ -s "$dir/docker.pid" ]; then
		local pid
		pid=$(cat "$dir/docker.pid")
		kill "$pid" 2>/dev/null || true
		for _ in $(seq 1 200); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$pid" 2>/dev/null || true
	fi
	# Network namespaces and overlay mounts can stay behind; deepest first.
	awk -v d="$dir/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do umount -l "$m" 2>/dev/null || true; done
	rm -rf "$dir"
}

cmd=${1:-}
dir=${2:-}
if [ -z "$cmd" ] || [ -z "$dir" ]; then
	echo "usage: $0 start DIR CODE_SERVER_DIR | stop DIR" >&2
	exit 2
fi
case $cmd in
start)
	[ $# -eq 3 ] || { echo "usage: $0 start DIR CODE_SERVER_DIR" >&2; exit 2; }
	start "$dir" "$3"
	;;
stop) stop ;;
*)
	echo "usage: $0 start DIR CODE_SERVER_DIR | stop DIR" >&2
	exit 2
	;;
esac
