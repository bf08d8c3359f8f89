#!/usr/bin/env bash
# Installs code-server from npm into STATE/code-server and prints the path of
# its executable (STATE/code-server/bin/code-server) on stdout. Does nothing
# but print the path when that version is already installed there.
#
#   scripts/install-code-server.sh [STATE]      default: .state
#
# 4.100.3 is the newest release that runs on Node 20. When the node on PATH
# is another major version (Debian 12 ships 18), Node 20 is installed from
# npm's `node` package into STATE/node20 (Debian's npm first, when there is
# no npm at all), and code-server is installed and run with it; the
# system's node is left alone. Its npm install builds
# native modules (kerberos needs libkrb5-dev) and its bundled @vscode/ripgrep
# downloads a binary from GitHub in a postinstall step; we hand that step
# Debian's rg through the package's own download cache instead.
set -euo pipefail

CODE_SERVER_VERSION=4.100.3
# Pinned by lib/vscode/npm-shrinkwrap.json of code-server 4.100.3; the release
# name is the one that package's postinstall looks for in its cache.
RIPGREP_PKG_VERSION=1.15.11
RIPGREP_RELEASE=v13.0.0-10

root=$(cd "$(dirname "$0")/.." && pwd)
state=${1:-$root/.state}
mkdir -p "$state/code-server"
dir=$(cd "$state/code-server" && pwd)
bin=$dir/bin/code-server
marker=$dir/.installed-$CODE_SERVER_VERSION

log() { printf 'install-code-server: %s\n' "$*" >&2; }

if [ -f "$marker" ] && [ -x "$bin" ]; then
	echo "$bin"
	exit 0
fi

apt_install() {
	local sudo=()
	[ "$(id -u)" -eq 0 ] || sudo=(sudo)
	log "installing $*"
	"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y "$@" >&2 ||
		{ "${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update >&2 &&
			"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y "$@" >&2; }
}

node_major() { "$1" -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo none; }

# node20 prints the directory of a Node 20 to put first on PATH, or nothing
# when the node on PATH is one. npm's `node` package carries the official
# build (with its headers, which node-gyp needs: nodejs.org, where it would
# fetch them, is not needed then).
node20() {
	[ "$(node_major node)" = 20 ] && return 0
	local prefix=$state/node20
	if [ "$(node_major "$prefix/bin/node")" != 20 ]; then
		command -v npm >/dev/null 2>&1 || apt_install npm
		log "node on PATH is $(node_major node), code-server $CODE_SERVER_VERSION needs 20: installing node@20 from npm into $prefix"
		rm -rf "$prefix"
		mkdir -p "$prefix/bin"
		echo '{"private": true}' >"$prefix/package.json"
		if ! (cd "$prefix" && npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false \
			npm install --no-save node@20 >"$prefix/install.log" 2>&1); then
			tail -n 20 "$prefix/install.log" >&2
			log "npm install node@20 failed"
			return 1
		fi
		ln -sfn ../node_modules/node/bin/node "$prefix/bin/node"
		if [ "$(node_major "$prefix/bin/node")" != 20 ]; then
			log "$prefix/bin/node is not Node 20"
			return 1
		fi
	fi
	echo "$prefix/bin"
}

node_dir=$(node20)
if [ -n "$node_dir" ]; then
	export PATH=$node_dir:$PATH
	headers=$(find "$state/node20/node_modules" -path '*/include/node/node.h' -print -quit)
	export npm_config_nodedir=${headers%/include/node/node.h}
fi

# node-gyp builds the native modules with make, g++ and python3.
missing=()
dpkg -s libkrb5-dev >/dev/null 2>&1 || missing+=(libkrb5-dev)
command -v rg >/dev/null 2>&1 || missing+=(ripgrep)
command -v make >/dev/null 2>&1 || missing+=(make)
command -v g++ >/dev/null 2>&1 || missing+=(g++)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if [ ${#missing[@]} -gt 0 ]; then
	apt_install "${missing[@]}"
fi

case $(uname -m) in
x86_64) rg_target=x86_64-unknown-linux-musl ;;
aarch64) rg_target=aarch64-unknown-linux-musl ;;
*)
	log "unsupported architecture $(uname -m)"
	exit 1
	;;
esac

# The ripgrep postinstall looks for its release archive in
# $TMPDIR/vscode-ripgrep-cache-VERSION before downloading; a private TMPDIR
# holding an archive of Debian's rg makes it unpack that one.
tmp=$dir/.tmp
rm -rf "$tmp"
cache=$tmp/vscode-ripgrep-cache-$RIPGREP_PKG_VERSION
mkdir -p "$cache/stage"
cp "$(command -v rg)" "$cache/stage/rg"
tar -czf "$cache/ripgrep-$RIPGREP_RELEASE-$rg_target.tar.gz" -C "$cache/stage" rg
rm -rf "$cache/stage"

# A local install in DIR (found from the working directory, not --prefix or
# --global): npm hands its settings to lifecycle scripts as npm_config_*,
# and code-server's postinstall runs a nested `npm install` in lib/vscode
# that must not inherit a global or prefixed install.
[ -f "$dir/package.json" ] || echo '{"private": true}' >"$dir/package.json"
log "installing code-server $CODE_SERVER_VERSION into $dir (takes minutes; log: $dir/install.log)"
if ! (cd "$dir" && TMPDIR=$tmp \
	npm_config_unsafe_perm=true \
	npm_config_yes=true \
	npm_config_update_notifier=false \
	npm_config_fund=false \
	npm_config_audit=false \
	npm install --no-save "code-server@$CODE_SERVER_VERSION" >"$dir/install.log" 2>&1); then
	tail -n 40 "$dir/install.log" >&2
	log "npm install failed"
	exit 1
fi
mkdir -p "$dir/bin"
rm -f "$bin"
if [ -n "$node_dir" ]; then
	# code-server starts with `#!/usr/bin/env node` and runs its helpers
	# with the same node, so Node 20 goes first on its PATH.
	printf '#!/bin/sh\nPATH='"'%s'"':$PATH exec '"'%s'"' "$@"\n' "$node_dir" "$dir/node_modules/.bin/code-server" >"$bin"
	chmod 755 "$bin"
else
	ln -s ../node_modules/.bin/code-server "$bin"
fi
# A first run writes a default config into HOME and says so; keep that out
# of the operator's home and out of the version line.
installed=$(HOME=$tmp "$bin" --version 2>/dev/null | awk '/^[0-9]+\.[0-9]+\.[0-9]+ /{print $1; exit}')
rm -rf "$tmp"
if [ "$installed" != "$CODE_SERVER_VERSION" ]; then
	log "installed code-server reports version '$installed', want $CODE_SERVER_VERSION"
	exit 1
fi
touch "$marker"
echo "$bin"
