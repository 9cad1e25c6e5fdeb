#!/bin/bash
# Regenerates capstan/link-order.txt (issue 26; why: capstan/build.rs): runs a release
# `capstan server` under callgrind, records the functions it runs while starting and idling
# (first), then during common kubectl commands and a little kbench load (next), and writes
# their mangled names, in that order, keeping only those the binary has.
# usage: scripts/link-order.sh [CAPSTAN_BIN] [KBENCH_BIN]   (needs valgrind, kubectl;
# takes ≈ 3 minutes). Rebuild the release binary afterwards: `make build-release`.
set -eu
BIN=$(realpath "${1:-target/release/capstan}")
K=$(realpath "${2:-target/kbench/release/kbench}")
OUT=$(realpath capstan)/link-order.txt
for f in "$BIN" "$K"; do [ -x "$f" ] || { echo "link-order: $f is missing"; exit 2; }; done
command -v valgrind >/dev/null || { echo "link-order: needs valgrind (apt-get install valgrind)"; exit 2; }
W=$(mktemp -d); PORT=$((20000 + RANDOM % 12000))  # below the ephemeral range (32768+), where earlier runs' client ports live
trap 'kill $VG 2>/dev/null; rm -rf "$W"' EXIT
export KUBECONFIG=$W/d/admin.kubeconfig
mkdir "$W/d"
# MIMALLOC_ARENA_EAGER_COMMIT set: capstan re-executes itself to set it otherwise, which
# would leave callgrind behind.
MIMALLOC_ARENA_EAGER_COMMIT=0 valgrind --tool=callgrind --demangle=no --dump-instr=no \
  --collect-jumps=no --callgrind-out-file="$W/cg.out" "$BIN" server --data-dir "$W/d" \
  --secure-port $PORT > "$W/vg.log" 2>&1 & VG=$!
for _ in $(seq 600); do
  [ -f "$KUBECONFIG" ] && kubectl get --raw /readyz >/dev/null 2>&1 && break
  sleep 0.5
done
kubectl get --raw /readyz >/dev/null
echo "link-order: server ready under callgrind; idling 20 s"
sleep 20
callgrind_control -d idle $VG >/dev/null
echo "link-order: kubectl commands"
kubectl get pods -A >/dev/null
kubectl create configmap x --from-literal=a=b >/dev/null
kubectl create deployment web --image=nginx --replicas=2 >/dev/null
kubectl expose deployment web --port=80 >/dev/null
kubectl wait --for=condition=available deploy/web --timeout=180s >/dev/null
kubectl get deploy,rs,pods,svc,ep,cm -o wide >/dev/null
kubectl get ns -o yaml >/dev/null
kubectl describe pod -l app=web >/dev/null
kubectl scale deploy web --replicas=3 >/dev/null
kubectl rollout status deploy/web --timeout=180s >/dev/null
kubectl delete deployment web >/dev/null
kubectl delete svc web >/dev/null
kubectl auth can-i get pods >/dev/null
timeout 5 kubectl get pods -w >/dev/null || true
kubectl api-resources >/dev/null
kubectl explain pods.spec >/dev/null
kubectl top nodes >/dev/null || true
kubectl get --raw /metrics >/dev/null
kubectl create ns t1 >/dev/null && kubectl delete ns t1 >/dev/null
kubectl run p --image=busybox --restart=Never >/dev/null
kubectl wait --for=condition=ready pod/p --timeout=120s >/dev/null
kubectl delete pod p >/dev/null
kubectl get events -A >/dev/null
echo "link-order: kbench load"
kubectl create ns bench >/dev/null
"$K" create --namespace bench --concurrency 4 --duration 8 --size 1024 | grep RESULT
"$K" get --namespace bench --concurrency 4 --duration 5 | grep RESULT
"$K" watch --namespace bench --watchers 50 --events 20 --rate 10 | grep RESULT
"$K" list --namespace bench --resource configmaps --repeat 3 | grep RESULT
"$K" seed --namespace bench --resource pods --count 50 | grep RESULT
callgrind_control -d load $VG >/dev/null
kill -TERM $VG; wait $VG || true
python3 - "$BIN" "$OUT" "$W"/cg.out.1 "$W"/cg.out.2 <<'EOF'
import re, subprocess, sys
binary, out, dumps = sys.argv[1], sys.argv[2], sys.argv[3:]
nm = subprocess.run(["nm", binary], capture_output=True, text=True, check=True).stdout
have = {l.split()[-1] for l in nm.splitlines() if len(l.split()) == 3 and l.split()[1] in "tT"}
seen, order = set(), []
for path in dumps:
    ids = {}
    for line in open(path, errors="replace"):
        m = re.match(r"^c?fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if not m:
            continue
        if m.group(2) is not None:
            ids[m.group(1)] = m.group(2)
        name = ids.get(m.group(1))
        if name in have and name not in seen:
            seen.add(name)
            order.append(name)
open(out, "w").write("".join(n + "\n" for n in order))
print(f"link-order: {len(order)} functions written to {out}")
EOF
