# dlock: tests run against real servers started by internal/testenv;
# scripts/install-backends.sh installs them (a fast no-op when present).
#
#   make test              install missing servers, vet, check go.mod is tidy, build with the oldest
#                          supported Go (go.mod's go line), race tests (missing backends fail)
#   make bench             run the comparative benchmark (bench/cmd/dlockbench); BENCHFLAGS=...
#   make install-backends  only install the servers
#   make vet | cover

GO        ?= go
# Two packages at a time (CI has 2 cores; each test binary starts servers).
TESTFLAGS ?= -race -p 2 -timeout 20m
BENCHFLAGS ?=
# The benchmark module's report test renders HTML in Chromium.
BACKENDS_FLAGS := --chromium

export DLOCK_REQUIRE_BACKENDS = 1

# GO_MIN is the go directive of go.mod: the oldest Go release the library
# supports. `make test` builds the library with that toolchain (fetched
# through the module proxy the first time), so that a newer API cannot creep
# in unnoticed.
GO_MIN := $(shell awk '$$1 == "go" {print $$2; exit}' go.mod)

.PHONY: all test vet tidy oldest-go cover bench install-backends backends

all: test

# backends installs the servers only when scripts/install-backends.sh --check
# finds one missing (redis-server, java + zookeeper.jar, initdb, mariadbd, etcd,
# and chromium when bench/ exists).
backends:
	@scripts/install-backends.sh --check $(BACKENDS_FLAGS) >/dev/null || scripts/install-backends.sh $(BACKENDS_FLAGS)

install-backends:
	scripts/install-backends.sh $(BACKENDS_FLAGS)

# The modules: the library (.), the benchmark (bench/), the
# fault-injection suite (faults/), the etcd driver (etcd/, whose client
# brings grpc) and the dlock command (cmd/dlock/, which links every driver,
# etcd's included), each with its own go.mod so that the library's
# requirements are only the drivers' client libraries.
MODULES := . bench faults etcd cmd/dlock otel

# each runs a command in every module, stopping at the first failure.
each = set -e; for m in $(MODULES); do echo "(cd $$m && $(1))"; (cd $$m && $(1)); done

vet:
	@$(call each,$(GO) vet ./...)

# tidy fails when go.mod or go.sum of any module is not what `go mod tidy`
# would write (run it in that module and commit).
tidy:
	@$(call each,$(GO) mod tidy -diff)

oldest-go:
	GOTOOLCHAIN=go$(GO_MIN) $(GO) build ./...

# The fault suite (faults/: ~7 minutes, most of it waiting for TTLs, about a
# fifth of one core) runs in the background while the other modules' tests
# run; its output is printed when it ends. Every module runs even when one
# fails, and the target fails if any did.
test: backends vet tidy oldest-go
	@log=$$(mktemp); \
	echo "(cd faults && $(GO) test $(TESTFLAGS) ./...) in the background"; \
	(cd faults && $(GO) test $(TESTFLAGS) ./...) >$$log 2>&1 & fpid=$$!; \
	failed=; \
	for m in $(filter-out faults,$(MODULES)); do \
		echo "(cd $$m && $(GO) test $(TESTFLAGS) ./...)"; \
		(cd $$m && $(GO) test $(TESTFLAGS) ./...) || failed="$$failed $$m"; \
	done; \
	wait $$fpid || failed="$$failed faults"; \
	echo "(cd faults && $(GO) test $(TESTFLAGS) ./...):"; cat $$log; rm -f $$log; \
	if [ -n "$$failed" ]; then echo "make test: tests failed in:$$failed" >&2; exit 1; fi

cover: backends
	$(GO) test -p 2 -timeout 20m -coverprofile=cover.out ./...
	$(GO) tool cover -func=cover.out | tail -1

bench: backends
	@if [ ! -d bench/cmd/dlockbench ]; then \
		echo "make bench: bench/cmd/dlockbench does not exist yet (the benchmark command lives in the nested module bench/)" >&2; \
		exit 1; \
	fi
	cd bench && $(GO) run ./cmd/dlockbench $(BENCHFLAGS)
