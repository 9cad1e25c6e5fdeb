# Capstan: one entry point for building, running, testing and benchmarking.
CARGO ?= cargo
DATA_DIR ?= $(CURDIR)/.capstan
STORE_URL ?= http://127.0.0.1:2379

.PHONY: all build run test lint bench bench-store clean

all: build

build:
	$(CARGO) build -p capstan

## run: build and start a store member on $(STORE_URL) with data in ./.capstan/
run: build
	@echo "export ETCDCTL_API=3 ETCDCTL_ENDPOINTS=$(STORE_URL)   # then: etcdctl put k v"
	./target/debug/capstan store --name default --data-dir $(DATA_DIR)/store --listen-client-urls $(STORE_URL)

## test: every test — unit tests next to the code and e2e tests against the real binary.
## The binary is built first (same debug profile, so nothing is built twice).
test:
	$(CARGO) build -p capstan
	$(CARGO) test --workspace

## lint: formatting and clippy with warnings as errors.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

## bench: every benchmark (prints figures; never fails on them).
bench: bench-store

## bench-store: capstan store vs Debian's etcd 3.4, same client, same disk.
bench-store:
	$(CARGO) build --release -p capstan
	$(CARGO) bench -p e2e --bench store

clean:
	$(CARGO) clean
