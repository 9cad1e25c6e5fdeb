# Capstan: one entry point for building, running, testing and benchmarking.
CARGO ?= cargo
DATA_DIR ?= $(CURDIR)/.capstan
STORE_URL ?= http://127.0.0.1:2379
SECURE_PORT ?= 6443

.PHONY: all build build-release run run-store test test-deps test-faults lint bench bench-store bench-api bench-scheduler bench-controllers bench-memory bench-kbench bench-pods bench-servicelb bench-dashboard link-order clean

all: build

build:
	$(CARGO) build -p capstan

## Every release build selects the whole workspace (building only the capstan binary): with
## `-p capstan` alone Cargo resolves some dependencies' features differently, which gives a
## second binary whose symbol names capstan/link-order.txt does not match (and a second
## build of half the tree).
RELEASE_BUILD = $(CARGO) build --release --workspace --bin capstan

build-release:
	$(RELEASE_BUILD)

## run: build (release: a debug build is slow under load) and start `capstan server` (store +
## Kubernetes API, scheduler, controllers, 3 simulated nodes) on https://127.0.0.1:$(SECURE_PORT)
## with data, PKI and the admin kubeconfig in ./.capstan/. Needs only the Rust toolchain.
run: build-release
	@echo "export KUBECONFIG=$(DATA_DIR)/admin.kubeconfig   # then: kubectl get ns"
	./target/release/capstan server --data-dir $(DATA_DIR) --secure-port $(SECURE_PORT)

## run-store: a bare store member speaking the etcd v3 API on $(STORE_URL)
run-store: build-release
	@echo "export ETCDCTL_API=3 ETCDCTL_ENDPOINTS=$(STORE_URL)   # then: etcdctl put k v"
	./target/release/capstan store --name default --data-dir $(DATA_DIR)/store-only --listen-client-urls $(STORE_URL)

## test: every test — unit tests next to the code and e2e tests against the real binary.
## The binary is built first, in one invocation with the tests: the same package selection and
## dev-dependencies, so the same features, and nothing is built twice (`build -p capstan` alone
## resolved features differently and compiled every kube-based crate a second time).
## What the tests need besides Rust (etcd, etcdctl, the Python client) is installed first.
test: test-deps
	$(CARGO) build --workspace --bins --tests
	$(CARGO) test --workspace

## test-deps: install what the tests drive besides the binary (scripts/test-deps.sh).
test-deps:
	@bash scripts/test-deps.sh

## test-faults: the long form of the store fault suite: FAULT_RUNS runs (default 100) of a
## 3-member cluster under load with kill -9, SIGSTOP, partition (one-way and isolation), delay
## and member-replacement faults, each history checked for
## linearizability; failing histories are saved to FAULT_HISTORY_DIR (default /tmp).
FAULT_RUNS ?= 100
test-faults:
	$(CARGO) build -p capstan
	FAULT_RUNS=$(FAULT_RUNS) $(CARGO) test --workspace --test store_faults -- --nocapture

## lint: formatting and clippy with warnings as errors.
## The API clients (controllers, scheduler, nodes) reach the cluster only through the API:
## none of them may depend on the apiserver or the store.
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	@for c in controllers scheduler nodes; do \
	  if $(CARGO) tree -p $$c -e normal --prefix none | grep -qE '^(apiserver|store) '; then \
	    echo "lint: $$c must not depend on apiserver or store"; exit 1; fi; done

## bench: every benchmark (prints figures; never fails on them).
bench: bench-store bench-api bench-scheduler bench-controllers

## bench-store: capstan store vs Debian's etcd 3.4, same client, same disk.
bench-store: test-deps
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench store

## bench-api: capstan server's Kubernetes API (creates, gets, list, watch fan-out, RSS,
## start-up) beside kube-apiserver + etcd reference figures.
bench-api:
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench api

## bench-scheduler: capstan scheduler (own process) placing 10,000 pods on 5,000 nodes through
## the API: pods/s and p99 scheduling latency.
bench-scheduler:
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench scheduler

## bench-controllers: a Deployment of 10,000 replicas on 1,000 simulated nodes in one capstan
## server: time until every pod is created, bound and Running, and pods/s.
bench-controllers:
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench controllers

## bench-pods: the process runtime (2 nodes): pod start latency create → Running (20 one at
## a time, 100 at once) and exec round trips (kube-rs WebSocket exec, kubectl exec).
bench-pods:
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench pods

## bench-servicelb: LoadBalancer address assignment latency (create → ingress IP), 50
## Services one at a time and 50 at once, p50/p99.
bench-servicelb:
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench servicelb

## bench-dashboard: the web dashboard in headless Chromium with 5,000 nodes and 20,000 pods:
## page load, and time to update (kubectl run → row visible).
bench-dashboard: test-deps
	$(RELEASE_BUILD)
	$(CARGO) bench -p e2e --bench dashboard

## bench-memory: resident memory of `capstan server` (default flags: controllers, scheduler,
## 3 simulated nodes) idle, holding 100k ConfigMaps right after creating them, and after 30 s
## create bursts at 1, 32 and 128 connections, driven by the independent load tool kbench
## (built from KBENCH_SRC), beside the targets; plus the server's own /metrics breakdown.
KBENCH_SRC ?= ../shared/kbench
bench-memory:
	$(RELEASE_BUILD)
	@test -f $(KBENCH_SRC)/Cargo.toml || { echo "bench-memory: kbench sources not found in $(KBENCH_SRC) (set KBENCH_SRC=...)"; exit 1; }
	$(CARGO) build --release --manifest-path $(KBENCH_SRC)/Cargo.toml --target-dir target/kbench
	KBENCH=$(CURDIR)/target/kbench/release/kbench $(CARGO) bench -p e2e --bench memory

## bench-kbench: issue 26's whole table with kbench (RSS idle / 100k held / after bursts,
## creates at 1/32/128 connections, GETs, watch fan-out) against a release `capstan server`;
## `scripts/kbench-table.sh OTHER_BINARY` compares another build.
bench-kbench:
	$(RELEASE_BUILD)
	@test -f $(KBENCH_SRC)/Cargo.toml || { echo "bench-kbench: kbench sources not found in $(KBENCH_SRC) (set KBENCH_SRC=...)"; exit 1; }
	$(CARGO) build --release --manifest-path $(KBENCH_SRC)/Cargo.toml --target-dir target/kbench
	scripts/kbench-table.sh target/release/capstan target/kbench/release/kbench

## link-order: re-records capstan/link-order.txt, the functions a starting, idle and lightly
## used server runs, which release links lay out first (see capstan/build.rs; needs valgrind).
link-order:
	$(RELEASE_BUILD)
	@test -f $(KBENCH_SRC)/Cargo.toml || { echo "link-order: kbench sources not found in $(KBENCH_SRC) (set KBENCH_SRC=...)"; exit 1; }
	$(CARGO) build --release --manifest-path $(KBENCH_SRC)/Cargo.toml --target-dir target/kbench
	scripts/link-order.sh target/release/capstan target/kbench/release/kbench
	$(RELEASE_BUILD)

clean:
	$(CARGO) clean
