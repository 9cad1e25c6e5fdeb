//! Test-side helpers for driving `capstan server` with stock kubectl, shared by the cluster
//! tests (workloads, namespaces, garbage collection, services, jobs, …).
//!
//! These panic with the kubectl error and the tail of the server's log: they are meant for
//! `#[test]` functions, where a panic is the failure report.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::ServerProcess;

/// A whole control plane (`capstan server` with scheduler, controllers and simulated nodes)
/// in a fresh temporary directory; keep the directory alive as long as the server.
pub fn cluster() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &[]).expect("server starts");
    (dir, s)
}

/// The last 60 lines of a log.
pub fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Runs kubectl as the admin and returns its stdout; panics (with stderr and the server's
/// log tail) when it fails.
pub fn ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log tail:\n{}",
        tail(&s.log())
    );
    out
}

/// Runs kubectl (which must print JSON, e.g. with `-o json`) and parses its output.
pub fn json(s: &ServerProcess, args: &[&str]) -> Value {
    serde_json::from_str(&ok(s, args)).expect("kubectl printed JSON")
}

/// `kubectl apply -f -` of a YAML document as the admin; panics when it fails.
pub fn apply(s: &ServerProcess, yaml: &str) {
    let (applied, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(yaml))
        .expect("kubectl runs");
    assert!(applied, "kubectl apply failed: {err}");
}

/// Polls `f` every 200 ms until it returns `Some`, or panics with `what` and the server's
/// log tail after `secs` seconds.
pub fn wait_for<T>(
    s: &ServerProcess,
    secs: u64,
    what: &str,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {secs} s waiting for {what}\nserver log tail:\n{}",
            tail(&s.log())
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
