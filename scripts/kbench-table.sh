#!/bin/bash
# Issue 26's table, measured with the independent load tool kbench against `capstan server`
# (default flags: controllers, scheduler, 3 simulated nodes), one fresh server per part:
#   1. RSS idle (10 s after ready), then RSS right after seeding 100k 1-KiB ConfigMaps;
#   2. creates for 30 s at 1, 32 and 128 connections, RSS after them, GETs at 32
#      connections for 20 s, 1000 watchers × 200 events at 20/s;
#   3. RSS after exactly 210k creates (the issue's after-burst count: a fast machine makes
#      ~3.5× more in part 2's 90 s, so that row is not comparable with the target).
# usage: scripts/kbench-table.sh [CAPSTAN_BIN] [KBENCH_BIN]   (prints the RESULT lines)
# Run it with nothing else busy on the machine, and interleave binaries to compare them.
set -u
BIN=${1:-target/release/capstan}
K=${2:-target/kbench/release/kbench}
for f in "$BIN" "$K"; do
  [ -x "$f" ] || { echo "kbench-table: $f is missing (make build-release; see ../shared/kbench/README)"; exit 2; }
done
BIN=$(realpath "$BIN"); K=$(realpath "$K")
start() {
  D=$(mktemp -d); PORT=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768+), where earlier runs' client ports live
  "$BIN" server --data-dir "$D" --secure-port $PORT > "$D/log" 2>&1 & PID=$!
  KC=$D/admin.kubeconfig
  for _ in $(seq 200); do
    [ -f "$KC" ] && "$K" ready --kubeconfig "$KC" --url https://127.0.0.1:$PORT/readyz >/dev/null 2>&1 && return
    sleep 0.3
  done
  echo "kbench-table: server did not become ready (log: $D/log)"; exit 2
}
rss() { echo "$1 RSS_MB=$(( $(awk '/VmRSS/{print $2}' /proc/$PID/status) / 1024 ))"; }
stop() { kill $PID; wait $PID 2>/dev/null; rm -rf "$D"; }
trap 'kill $PID 2>/dev/null; rm -rf "$D"' EXIT
ns() { KUBECONFIG=$KC kubectl create ns "$1" >/dev/null; }
start; sleep 10; rss idle_fresh; ns bench
"$K" seed --kubeconfig "$KC" --resource configmaps --count 100000 --namespace bench --pid $PID | grep RESULT
rss after_100k_seed; stop
start; ns bench
for c in 1 32 128; do
  "$K" create --kubeconfig "$KC" --namespace bench --concurrency $c --duration 30 --size 1024 --pid $PID | grep RESULT
done
rss after_bursts
"$K" get --kubeconfig "$KC" --namespace bench --concurrency 32 --duration 20 --pid $PID | grep RESULT
ns watchns
"$K" watch --kubeconfig "$KC" --namespace watchns --watchers 1000 --events 200 --rate 20 --pid $PID | grep RESULT
stop
start; ns bench
"$K" seed --kubeconfig "$KC" --resource configmaps --count 210000 --namespace bench --pid $PID | grep RESULT
rss after_210k_creates; stop
