#!/usr/bin/env bash
# Installs what `make test` needs beyond the Rust toolchain, only what is missing:
#   etcdctl and etcd (Debian's etcd-client / etcd-server 3.4: the store is checked against the
#   stock etcd client, `--etcd-servers` against a real etcd), and the official Kubernetes
#   Python client (e2e/tests/python_client.rs), and Debian's chromium (the dashboard test).
#   kubectl comes with the machine.
# Debian packages need root (apt-get); without it, one line says what to install.
set -euo pipefail

missing=()
command -v etcdctl >/dev/null || missing+=(etcd-client)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v curl >/dev/null || missing+=(curl)
# Headless Chromium drives the web dashboard in e2e/tests/dashboard.rs (DevTools protocol).
command -v chromium >/dev/null || missing+=(chromium)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "test-deps: missing Debian packages: ${missing[*]} — install them (apt-get install ${missing[*]}) and rerun make test" >&2
    exit 1
  fi
  echo "test-deps: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  # The etcd-server package starts a system etcd on :2379; tests use their own ports, but
  # keep the machine quiet.
  if command -v systemctl >/dev/null && systemctl is-active --quiet etcd 2>/dev/null; then
    systemctl stop etcd || true
  fi
fi
if ! command -v kubectl >/dev/null; then
  echo "test-deps: kubectl is not on PATH — the e2e tests drive the stock kubectl (1.27–1.33)" >&2
  exit 1
fi
if ! python3 -c 'import kubernetes' 2>/dev/null; then
  echo "test-deps: installing the Kubernetes Python client"
  python3 -m pip install -q 'kubernetes>=33,<34' 2>/dev/null ||
    python3 -m pip install -q --break-system-packages 'kubernetes>=33,<34'
fi
