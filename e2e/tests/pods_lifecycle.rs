//! Startup probes and lifecycle hooks in the process runtime (`capstan server
//! --node-runtime process`), as the kubelet runs them: a startup probe holds back liveness
//! and readiness (and `started`) until it passes, and restarts a container that never
//! starts; a postStart hook runs beside the container's command and must succeed before the
//! container counts as started (a failing one stops the container — preStop, SIGTERM —
//! as the kubelet's killContainer: `FailedPostStartHook`);
//! a preStop hook (exec or httpGet) runs when the pod is deleted, before SIGTERM reaches
//! the container.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc;
use std::time::Duration;

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok, wait_for};
use serde_json::Value;

fn process_cluster() -> (tempfile::TempDir, ServerProcess) {
    process_cluster_with(&[])
}

fn process_cluster_with(extra: &[&str]) -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut args = vec!["--nodes=1", "--node-runtime=process"];
    args.extend_from_slice(extra);
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &args).expect("server starts");
    (dir, s)
}

/// The status of container `name` of `pod`.
fn container(s: &ServerProcess, pod: &str, name: &str) -> Value {
    let p = json(s, &["get", "pod", pod, "-o", "json"]);
    p["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name).cloned())
        .unwrap_or_default()
}

fn events(s: &ServerProcess, pod: &str) -> String {
    ok(
        s,
        &[
            "get",
            "events",
            "--field-selector",
            &format!("involvedObject.name={pod}"),
        ],
    )
}

#[test]
fn a_startup_probe_holds_back_liveness_and_readiness_and_restarts_what_never_starts() {
    let (_dir, s) = process_cluster();
    apply(
        &s,
        r#"apiVersion: v1
kind: Pod
metadata: {name: slow}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "exec sleep 3640"]
    startupProbe:
      exec: {command: [test, -f, /dev/shm/up]}
      periodSeconds: 1
      failureThreshold: 600
    # Would kill the container within a second or two if it ran before the startup probe
    # passed.
    livenessProbe:
      exec: {command: [test, -f, /dev/shm/up]}
      periodSeconds: 1
      failureThreshold: 1
    readinessProbe:
      exec: {command: ["true"]}
      periodSeconds: 1
---
apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "exec sleep 3641"]
    startupProbe:
      exec: {command: ["false"]}
      periodSeconds: 1
      failureThreshold: 2
"#,
    );
    // Running, not started, not ready: the startup probe fails and nothing else probes.
    wait_for(&s, 60, "slow running", || {
        let c = container(&s, "slow", "c");
        c["state"]["running"].is_object().then_some(())
    });
    // Several liveness periods (failureThreshold 1) go by without a kill.
    std::thread::sleep(Duration::from_secs(4));
    let c = container(&s, "slow", "c");
    assert_eq!(c["started"], false, "{c}");
    assert_eq!(c["ready"], false, "{c}");
    assert_eq!(c["restartCount"], 0, "{c}");
    // The startup probe passes: started, then the readiness probe makes it ready, and
    // the liveness probe (now passing) keeps it.
    ok(&s, &["exec", "slow", "--", "touch", "/dev/shm/up"]);
    wait_for(&s, 30, "slow started and ready", || {
        let c = container(&s, "slow", "c");
        (c["started"] == true && c["ready"] == true).then_some(())
    });
    let c = container(&s, "slow", "c");
    assert_eq!(c["restartCount"], 0, "{c}");
    let ready = ok(
        &s,
        &[
            "get",
            "pod",
            "slow",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
        ],
    );
    assert_eq!(ready, "True");

    // A startup probe that never passes: killed and restarted, as a liveness failure.
    wait_for(&s, 60, "never restarted", || {
        let c = container(&s, "never", "c");
        (c["restartCount"].as_i64().unwrap_or(0) >= 1).then_some(())
    });
    let c = container(&s, "never", "c");
    assert_eq!(c["started"], false, "{c}");
    let ev = events(&s, "never");
    assert!(ev.contains("Startup probe failed"), "{ev}");
    assert!(
        ev.contains("Container c failed startup probe, will be restarted"),
        "{ev}"
    );
}

#[test]
fn post_start_and_pre_stop_hooks_run_as_the_kubelet_runs_them() {
    // Grace periods honoured up to 30 s (the default cap is 1 s), as the kubelet does.
    let (_dir, s) = process_cluster_with(&["--node-max-grace=30s"]);
    // A host directory the hooks and the container write to (the default user is nobody).
    let shared = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(shared.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    // preStop httpGet goes to this listener (pods share the host network).
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    let port = listener.local_addr().expect("addr").port();
    let (req_tx, req_rx) = mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = vec![0u8; 2048];
            let n = conn.read(&mut buf).unwrap_or(0);
            let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
            if req_tx
                .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                .is_err()
            {
                return;
            }
        }
    });
    let dir = shared.path().display();
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: hooked}}
spec:
  terminationGracePeriodSeconds: 30
  volumes:
  - name: shared
    hostPath: {{path: "{dir}", type: Directory}}
  containers:
  - name: c
    image: busybox
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    # Waits for its postStart hook's file, then logs TERM when it comes.
    command:
    - sh
    - -c
    - |
      while [ ! -f /shared/post ]; do sleep 0.1; done
      echo "saw $(cat /shared/post)"
      trap 'echo TERM >> /shared/order; exit 0' TERM
      while true; do sleep 0.1; done
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, "echo post-start > /shared/post"]}}
      preStop:
        # Longer than the default 1 s cap: the grace period is honoured.
        exec: {{command: [sh, -c, "sleep 2; echo pre-stop >> /shared/order"]}}
  - name: web
    image: busybox
    command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 0.1; done"]
    lifecycle:
      preStop:
        httpGet: {{port: {port}, path: /pre-stop, httpHeaders: [{{name: X-Hook, value: web}}]}}
"#
        ),
    );
    // postStart ran beside the command; the container is started once it succeeded.
    let log = wait_for(&s, 60, "the postStart hook's file seen", || {
        let (_, out, _) = s.kubectl(&["logs", "hooked", "-c", "c"]).expect("kubectl");
        out.contains("saw post-start").then_some(out)
    });
    assert_eq!(log, "saw post-start\n");
    wait_for(&s, 30, "c started", || {
        (container(&s, "hooked", "c")["started"] == true).then_some(())
    });

    // Deleting the pod: preStop first, then SIGTERM.
    ok(&s, &["delete", "pod", "hooked", "--wait=false"]);
    let request = req_rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the preStop httpGet arrived");
    assert!(
        request.starts_with("GET /pre-stop HTTP/1.1\r\n"),
        "{request}"
    );
    assert!(request.contains("X-Hook: web\r\n"), "{request}");
    assert!(request.contains("User-Agent: kube-probe/"), "{request}");
    let order_file = shared.path().join("order");
    let order = wait_for(&s, 30, "preStop and TERM recorded", || {
        std::fs::read_to_string(&order_file)
            .ok()
            .filter(|o| o.contains("TERM"))
    });
    assert_eq!(order, "pre-stop\nTERM\n");
    wait_for(&s, 30, "hooked gone", || {
        let (found, _, _) = s.kubectl(&["get", "pod", "hooked"]).expect("kubectl");
        (!found).then_some(())
    });

    // A liveness failure stops the container as the kubelet does: preStop, then SIGTERM
    // (the container exits 0 from its trap, not 137 from a SIGKILL), then a restart.
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: unlive}}
spec:
  terminationGracePeriodSeconds: 10
  volumes:
  - name: shared
    hostPath: {{path: "{dir}", type: Directory}}
  containers:
  - name: c
    image: busybox
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: [sh, -c, "trap 'echo TERM >> /shared/probe-order; exit 0' TERM; while true; do sleep 0.1; done"]
    # The first probe waits for the shell to install its trap: a TERM before it is ignored
    # by the PID namespace's init and ends in the grace period's SIGKILL (as on a kubelet).
    livenessProbe:
      initialDelaySeconds: 3
      exec: {{command: [test, -f, /dev/shm/never]}}
      periodSeconds: 1
      failureThreshold: 1
    lifecycle:
      preStop:
        exec: {{command: [sh, -c, "echo pre-stop >> /shared/probe-order"]}}
"#
        ),
    );
    wait_for(&s, 60, "unlive restarted", || {
        let c = container(&s, "unlive", "c");
        (c["restartCount"].as_i64().unwrap_or(0) >= 1).then_some(())
    });
    let c = container(&s, "unlive", "c");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 0, "{c}");
    let order = std::fs::read_to_string(shared.path().join("probe-order")).expect("order");
    assert!(order.starts_with("pre-stop\nTERM\n"), "{order}");
    ok(&s, &["delete", "pod", "unlive", "--wait=false"]);

    // A failing postStart hook stops the container as the kubelet's killContainer does:
    // its preStop hook, then SIGTERM (exit 0 from the trap, not 137), then a restart as its
    // policy says. (The hook fails once the shell's TERM trap is in place.)
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: badhook}}
spec:
  terminationGracePeriodSeconds: 10
  volumes:
  - name: shared
    hostPath: {{path: "{dir}", type: Directory}}
  containers:
  - name: c
    image: busybox
    volumeMounts: [{{name: shared, mountPath: /shared}}]
    command: [sh, -c, "trap 'echo TERM >> /shared/hook-order; exit 0' TERM; touch /shared/hook-trap; while true; do sleep 0.1; done"]
    lifecycle:
      postStart:
        exec: {{command: [sh, -c, "while [ ! -f /shared/hook-trap ]; do sleep 0.1; done; echo no good >&2; exit 7"]}}
      preStop:
        exec: {{command: [sh, -c, "echo pre-stop >> /shared/hook-order"]}}
"#
        ),
    );
    wait_for(&s, 60, "badhook restarted", || {
        let c = container(&s, "badhook", "c");
        (c["restartCount"].as_i64().unwrap_or(0) >= 1).then_some(())
    });
    let c = container(&s, "badhook", "c");
    assert_eq!(c["started"], false, "{c}");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 0, "{c}");
    let order = std::fs::read_to_string(shared.path().join("hook-order")).expect("order");
    assert!(order.starts_with("pre-stop\nTERM\n"), "{order}");
    let ev = events(&s, "badhook");
    assert!(ev.contains("FailedPostStartHook"), "{ev}");
}

/// A gRPC health service (`grpc.health.v1.Health/Check`, h2c) on 127.0.0.1 answering the
/// status in `status` (1 SERVING, 2 NOT_SERVING) to every call; returns its port.
fn grpc_health_server(
    rt: &tokio::runtime::Runtime,
    status: std::sync::Arc<std::sync::atomic::AtomicU8>,
) -> u16 {
    use http_body_util::StreamBody;
    use hyper::body::{Bytes, Frame};
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    rt.spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let status = status.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let s = status.load(std::sync::atomic::Ordering::SeqCst);
                        async move {
                            assert_eq!(req.uri().path(), "/grpc.health.v1.Health/Check");
                            let mut trailers = hyper::HeaderMap::new();
                            trailers.insert(
                                "grpc-status",
                                hyper::header::HeaderValue::from_static("0"),
                            );
                            let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
                                Ok(Frame::data(Bytes::from(vec![0, 0, 0, 0, 2, 0x08, s]))),
                                Ok(Frame::trailers(trailers)),
                            ];
                            let body = StreamBody::new(futures_util::stream::iter(frames));
                            let resp = hyper::Response::builder()
                                .header("content-type", "application/grpc")
                                .body(body)
                                .expect("response");
                            Ok::<_, std::convert::Infallible>(resp)
                        }
                    },
                );
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    port
}

#[test]
fn grpc_probes_ask_the_standard_health_service() {
    let (_dir, s) = process_cluster();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let status = std::sync::Arc::new(std::sync::atomic::AtomicU8::new(1));
    let port = grpc_health_server(&rt, status.clone());
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: grpcprobed}}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "exec sleep 3644"]
    readinessProbe:
      grpc: {{port: {port}}}
      periodSeconds: 1
"#
        ),
    );
    wait_for(&s, 60, "ready through the gRPC health check", || {
        (container(&s, "grpcprobed", "c")["ready"] == true).then_some(())
    });
    status.store(2, std::sync::atomic::Ordering::SeqCst);
    wait_for(&s, 30, "unready once NOT_SERVING", || {
        (container(&s, "grpcprobed", "c")["ready"] == false).then_some(())
    });
    let ev = events(&s, "grpcprobed");
    assert!(
        ev.contains("Readiness probe failed: service unhealthy (responded with \"NOT_SERVING\")"),
        "{ev}"
    );
}
