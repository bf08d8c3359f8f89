# CodeHub. `make run` and `make test` work on a fresh Debian 12 machine with
# Go, run as root (they install packages with apt-get and run PostgreSQL as
# its own user): they install what is missing and start private services on
# loopback ports. `make stop` ends what `make run` started.
SHELL := /bin/bash
STATE ?= $(CURDIR)/.state
export CODEHUB_TOOLS_DIR := $(STATE)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build image deps test run stop vet fmt golden bench-archive bench-engine bench-proxy bench-proxy-peers bench-ports scale clean

all: build

build:
	CGO_ENABLED=0 go build -ldflags '$(LDFLAGS)' -o bin/codehub ./cmd/codehub

# codehub's OCI image, built without pulling anything: bin/codehub-image-$(VERSION).tar,
# loaded as $(IMAGE):$(VERSION) into the engine DOCKER_HOST names, if one answers.
IMAGE ?= codehub
image:
	scripts/image.sh $(VERSION) $(IMAGE)

deps:
	scripts/services.sh install
	scripts/install-code-server.sh $(STATE)

test: deps
	scripts/services.sh install-browser
	scripts/test.sh

run: deps build
	scripts/run.sh

stop:
	scripts/run.sh stop

vet:
	go vet ./...

fmt:
	gofmt -l -w .

# Regenerates the golden files of rendered jobspecs.
golden:
	go test ./jobspecs/ -run Golden -update

# Benchmarks (results and machine notes in docs/benchmarks.md).
bench-archive: deps
	scripts/with-services.sh go test -v -run '^$$' -bench BenchmarkDataMover -benchtime 2x -timeout 40m ./archive/
	scripts/with-services.sh go test -v -run '^$$' -bench BenchmarkIncremental -benchtime 2x -timeout 20m ./archive/

bench-engine: deps
	scripts/with-services.sh go test -run '^$$' -bench 'ConvergedTick|FailoverTakeover|TickWithChanges' -benchmem -benchtime 10x ./controller/

# Twice: everything sharing the machine's cores, then (with two or more)
# the load generator and the workspace on CPU 0 and the proxy on the rest.
bench-proxy: deps
	scripts/with-services.sh go test -run '^$$' -bench . -benchtime 3s ./proxy/
	@if [ "$$(nproc)" -ge 2 ]; then \
		CODEHUB_BENCH_LOAD_CPUS=0 scripts/with-services.sh taskset -c 1-$$(( $$(nproc) - 1 )) \
			go test -run '^$$' -bench . -benchtime 3s ./proxy/; \
	fi

# CodeHub's proxy (the real server) against nginx, HAProxy and Caddy under
# wrk; the script installs wrk and the three proxies when they are missing.
bench-proxy-peers:
	scripts/bench-proxy-peers.sh

bench-ports:
	scripts/bench-ports.sh

# The scale harness (docs/benchmarks.md, "At scale"): SCALE_WORKSPACES
# workspaces on a real Nomad agent, which must be on PATH (docs/nomad.md),
# against the same jobs registered straight to Nomad. Not part of make test.
SCALE_WORKSPACES ?= 300
scale: deps
	@command -v nomad >/dev/null || { echo "make scale needs a nomad binary on PATH (docs/nomad.md)"; exit 1; }
	CODEHUB_SCALE_WORKSPACES=$(SCALE_WORKSPACES) scripts/with-services.sh \
		go test -count=1 -v -run '^$$' -bench NomadScale -benchtime 1x -timeout 150m ./e2e/

clean:
	rm -rf bin
