//! Measured usage on process nodes: `capstan server --node-runtime process` runs the pods'
//! containers as host processes, each node's kubelet serves `/metrics/resource` (CPU from
//! the container process tree's utime+stime, memory from its RSS), and the metrics server
//! scrapes it through `nodes/proxy`, so stock `kubectl top pod` shows a busy loop near a
//! core and a sleeping pod near zero.

use e2e::ServerProcess;
use e2e::cli::{apply, wait_for};
use serde_json::Value;

const PODS: &str = r#"apiVersion: v1
kind: Pod
metadata: { name: busy, namespace: default }
spec:
  containers:
  - name: main
    image: busybox
    command: ["sh", "-c", "while :; do :; done"]
---
apiVersion: v1
kind: Pod
metadata: { name: idle, namespace: default }
spec:
  containers:
  - name: main
    image: busybox
    command: ["sleep", "3600"]
"#;

/// Millicores from a `kubectl top` CPU column (`"998m"` or `"1"`).
fn millicores(v: &str) -> Option<u64> {
    match v.strip_suffix('m') {
        Some(m) => m.parse().ok(),
        None => v.parse::<u64>().ok().map(|c| c * 1000),
    }
}

/// The CPU (millicores) `kubectl top pod` shows for each pod.
fn top(s: &ServerProcess) -> Option<Vec<(String, u64)>> {
    let (ok, out, _) = s
        .kubectl(&["top", "pod", "--no-headers", "-n", "default"])
        .ok()?;
    ok.then_some(())?;
    out.lines()
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some((cols.first()?.to_string(), millicores(cols.get(1)?)?))
        })
        .collect()
}

/// The memory (bytes) of the pod's container in its PodMetrics.
fn memory_bytes(s: &ServerProcess, pod: &str) -> Option<u64> {
    let path = format!("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/{pod}");
    let (ok, out, _) = s.kubectl(&["get", "--raw", &path]).ok()?;
    ok.then_some(())?;
    let v: Value = serde_json::from_str(&out).ok()?;
    let m = v["containers"][0]["usage"]["memory"].as_str()?;
    m.strip_suffix("Ki")?.parse::<u64>().ok().map(|k| k * 1024)
}

#[test]
fn kubectl_top_shows_measured_usage_of_process_pods() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=1", "--node-runtime=process"],
    )
    .expect("server starts");
    apply(&s, PODS);
    // A busy loop uses about a core; the sleeper nearly nothing (the machine is shared, so
    // the busy one only has to reach 200m).
    let (busy, idle) = wait_for(&s, 120, "kubectl top: busy >= 200m, idle < 50m", || {
        let rows = top(&s)?;
        let get = |n: &str| rows.iter().find(|(p, _)| p == n).map(|r| r.1);
        let (busy, idle) = (get("busy")?, get("idle")?);
        (busy >= 200 && idle < 50).then_some((busy, idle))
    });
    eprintln!("measured: busy {busy}m, idle {idle}m");
    for pod in ["busy", "idle"] {
        let bytes = wait_for(&s, 30, &format!("{pod} memory > 0"), || {
            memory_bytes(&s, pod).filter(|&b| b > 0)
        });
        eprintln!("measured: {pod} working set {bytes} bytes");
    }
}
