#!/usr/bin/env bash
# Starts private services, runs the whole test suite against them, stops them.
# A missing service is a failure here (CODEHUB_TEST_REQUIRE_SERVICES=1); only
# the real-Nomad tests may skip, when no nomad binary is on PATH.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dir=$(mktemp -d /tmp/codehub-test.XXXXXX)
cleanup() {
	scripts/services.sh stop "$dir" || true
	rm -rf "$dir"
}
trap cleanup EXIT INT TERM

scripts/services.sh start "$dir"
# shellcheck disable=SC1091
source "$dir/env"
export CODEHUB_TEST_REQUIRE_SERVICES=1
if [ -x "$root/.state/code-server/bin/code-server" ]; then
	export CODEHUB_TEST_CODE_SERVER="$root/.state/code-server/bin/code-server"
fi
command -v nomad >/dev/null 2>&1 || echo "test: no nomad binary on PATH: the real-Nomad end-to-end tests will skip"

go vet ./...
# shellcheck disable=SC2086
go test -race -count=1 -timeout 40m ${GO_TEST_FLAGS:-} ./...
