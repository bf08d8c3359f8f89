# CodeHub. `make run` and `make test` work on a fresh Debian machine with Go:
# they install what is missing and start private services on loopback ports.
SHELL := /bin/bash
STATE ?= $(CURDIR)/.state
export CODEHUB_TOOLS_DIR := $(STATE)/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)

.PHONY: all build deps test run vet fmt golden bench clean

all: build

build:
	CGO_ENABLED=0 go build -ldflags '$(LDFLAGS)' -o bin/codehub ./cmd/codehub

deps:
	scripts/services.sh install
	scripts/install-code-server.sh $(STATE)

test: deps
	scripts/services.sh install-browser
	scripts/test.sh

run: deps build
	scripts/run.sh

vet:
	go vet ./...

fmt:
	gofmt -l -w .

# Regenerates the golden files of rendered jobspecs.
golden:
	go test ./jobspecs/ -run Golden -update

clean:
	rm -rf bin
