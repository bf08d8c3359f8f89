#!/usr/bin/env bash
# Runs a command with private PostgreSQL, Redis and S3 servers started for it
# (their CODEHUB_TEST_* variables exported), then stops them. Used by the
# benchmark targets:  scripts/with-services.sh go test -bench . ./proxy/
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d /tmp/codehub-svc.XXXXXX)
cleanup() {
	"$root/scripts/services.sh" stop "$dir" || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM
"$root/scripts/services.sh" start "$dir"
# shellcheck disable=SC1091
source "$dir/env"
"$@"
