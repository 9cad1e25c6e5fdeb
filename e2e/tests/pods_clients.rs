//! Client libraries' streaming calls against pods that really run (`capstan server
//! --node-runtime process`): the official Python client's `kubernetes.stream.stream` exec
//! (stdout and stderr apart, stdin, exit status from the error channel), kube-rs's `ws`
//! feature (`Api::<Pod>::exec`, `attach`, `log_stream`), and a kube-rs program run as a
//! pod (`e2e/src/bin/incluster_list.rs`) that lists pods with its service account's
//! projected token through the in-cluster configuration.

use std::process::Command;
use std::time::Duration;

use e2e::ServerProcess;
use e2e::cli::{apply, ok, wait_for};
use futures_util::{AsyncBufReadExt, StreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, AttachParams, LogParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

const STEP: Duration = Duration::from_secs(30);

fn process_cluster() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=1", "--node-runtime=process"],
    )
    .expect("server starts");
    (dir, s)
}

fn phase(s: &ServerProcess, pod: &str) -> String {
    let (_, out, _) = s
        .kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"])
        .expect("kubectl runs");
    out
}

fn wait_phase(s: &ServerProcess, pod: &str, want: &str, secs: u64) {
    wait_for(s, secs, &format!("pod {pod} {want}"), || {
        (phase(s, pod) == want).then_some(())
    });
}

async fn client(server: &ServerProcess) -> Client {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig).expect("read admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube config from the admin kubeconfig");
    Client::try_from(config).expect("kube client")
}

/// Runs `e2e/clients/python_stream.py` with `args` after the kubeconfig; panics with its
/// output unless it prints its closing line.
fn python_stream(s: &ServerProcess, args: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/python_stream.py");
    let out = Command::new("python3")
        .arg(script)
        .arg(&s.kubeconfig)
        .args(args)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("python stream: ok"),
        "python stream {args:?} failed:\nstdout: {stdout}\nstderr: {}\nserver log tail: {}",
        String::from_utf8_lossy(&out.stderr),
        e2e::cli::tail(&s.log())
    );
}

#[test]
fn the_python_clients_stream_exec_reaches_the_process() {
    let (_dir, s) = process_cluster();
    ok(
        &s,
        &[
            "run",
            "py",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "exec sleep 3620",
        ],
    );
    wait_phase(&s, "py", "Running", 60);
    python_stream(&s, &["py", "exec"]);
}

#[test]
fn kube_rs_ws_exec_attach_and_log_stream() {
    let (_dir, s) = process_cluster();
    apply(
        &s,
        r#"apiVersion: v1
kind: Pod
metadata: {name: kr}
spec:
  containers:
  - {name: c, image: busybox, command: [sh, -c, "echo first; exec sleep 3621"]}
---
apiVersion: v1
kind: Pod
metadata: {name: kra}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: busybox, stdin: true, command: [sh, -c, "read x; echo got $x; echo bye >&2"]}
"#,
    );
    wait_phase(&s, "kr", "Running", 60);
    wait_phase(&s, "kra", "Running", 60);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let pods: Api<Pod> = Api::namespaced(client(&s).await, "default");

        // exec: stdout and stderr apart, then the exit status.
        let mut p = timeout(
            STEP,
            pods.exec(
                "kr",
                ["sh", "-c", "echo out; echo err >&2; exit 3"],
                &AttachParams::default().stderr(true),
            ),
        )
        .await
        .expect("exec in time")
        .expect("exec upgrades");
        let mut stdout = p.stdout().expect("stdout");
        let mut stderr = p.stderr().expect("stderr");
        let status = p.take_status().expect("status");
        let (mut out, mut err) = (String::new(), String::new());
        timeout(STEP, async {
            let (a, b) = tokio::join!(
                stdout.read_to_string(&mut out),
                stderr.read_to_string(&mut err)
            );
            a.and(b)
        })
        .await
        .expect("output in time")
        .expect("output read");
        assert_eq!(out, "out\n");
        assert_eq!(err, "err\n");
        let status = timeout(STEP, status)
            .await
            .expect("status in time")
            .expect("a status");
        assert_eq!(status.status.as_deref(), Some("Failure"), "{status:?}");
        assert_eq!(
            status.reason.as_deref(),
            Some("NonZeroExitCode"),
            "{status:?}"
        );
        let code = status
            .details
            .as_ref()
            .and_then(|d| d.causes.as_ref())
            .and_then(|c| c.iter().find(|c| c.reason.as_deref() == Some("ExitCode")))
            .and_then(|c| c.message.clone());
        assert_eq!(code.as_deref(), Some("3"), "{status:?}");
        timeout(STEP, p.join())
            .await
            .expect("join in time")
            .expect("joined");

        // exec with stdin: what the client writes reaches the process; success status.
        let mut p = pods
            .exec(
                "kr",
                ["sh", "-c", "read line; echo got $line"],
                &AttachParams::default().stdin(true).stderr(false),
            )
            .await
            .expect("exec upgrades");
        let mut stdin = p.stdin().expect("stdin");
        stdin.write_all(b"kube-rs\n").await.expect("stdin written");
        let mut out = String::new();
        let mut stdout = p.stdout().expect("stdout");
        let status = p.take_status().expect("status");
        timeout(STEP, stdout.read_to_string(&mut out))
            .await
            .expect("output in time")
            .expect("output read");
        assert_eq!(out, "got kube-rs\n");
        let status = timeout(STEP, status).await.expect("status in time");
        assert_eq!(status.and_then(|s| s.status).as_deref(), Some("Success"));

        // attach: the container's stdin and output.
        let mut p = timeout(
            STEP,
            pods.attach("kra", &AttachParams::default().stdin(true).stderr(true)),
        )
        .await
        .expect("attach in time")
        .expect("attach upgrades");
        let mut stdin = p.stdin().expect("stdin");
        let mut stdout = p.stdout().expect("stdout");
        let mut stderr = p.stderr().expect("stderr");
        stdin.write_all(b"attached\n").await.expect("stdin written");
        let (mut out, mut err) = (String::new(), String::new());
        timeout(STEP, async {
            let (a, b) = tokio::join!(
                stdout.read_to_string(&mut out),
                stderr.read_to_string(&mut err)
            );
            a.and(b)
        })
        .await
        .expect("attach output in time")
        .expect("attach output read");
        assert_eq!(out, "got attached\n");
        assert_eq!(err, "bye\n");

        // log_stream: follow the running container's log, line by line.
        let mut lines = pods
            .log_stream(
                "kr",
                &LogParams {
                    follow: true,
                    ..LogParams::default()
                },
            )
            .await
            .expect("log stream")
            .lines();
        let first = timeout(STEP, lines.next())
            .await
            .expect("a line in time")
            .expect("a line")
            .expect("line read");
        assert_eq!(first, "first");
        // Non-follow, with timestamps, from the exited pod.
        let log = pods
            .logs(
                "kra",
                &LogParams {
                    timestamps: true,
                    ..LogParams::default()
                },
            )
            .await
            .expect("logs");
        assert!(
            log.contains(" got attached\n") && log.starts_with("20"),
            "{log}"
        );
    });
    wait_phase(&s, "kra", "Succeeded", 30);
}

#[test]
fn a_kube_rs_program_run_as_a_pod_lists_pods_with_its_service_account() {
    let (_dir, s) = process_cluster();
    let bin = env!("CARGO_BIN_EXE_incluster_list");
    assert!(bin.starts_with('/'), "{bin}");
    // The pod's service account may list pods, nothing more.
    ok(&s, &["create", "serviceaccount", "lister"]);
    ok(
        &s,
        &[
            "create",
            "role",
            "pod-lister",
            "--verb=list",
            "--resource=pods",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "rolebinding",
            "pod-lister",
            "--role=pod-lister",
            "--serviceaccount=default:lister",
        ],
    );
    ok(
        &s,
        &["run", "bystander", "--image=busybox", "--", "sleep", "3622"],
    );
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: lister}}
spec:
  serviceAccountName: lister
  restartPolicy: Never
  containers:
  - name: c
    image: rust
    command: ["{bin}"]
"#
        ),
    );
    wait_for(&s, 90, "lister finished", || {
        matches!(phase(&s, "lister").as_str(), "Succeeded" | "Failed").then_some(())
    });
    let log = ok(&s, &["logs", "lister"]);
    assert_eq!(phase(&s, "lister"), "Succeeded", "{log}");
    let port = s.url.rsplit(':').next().unwrap_or_default().to_owned();
    assert!(
        log.contains(&format!("api server https://127.0.0.1:{port}/")),
        "{log}"
    );
    assert!(log.contains("pod bystander\n"), "{log}");
    assert!(log.contains("pod lister\n"), "{log}");
    assert!(log.contains("as default\n"), "{log}");

    // Without the binding, the same program is refused as its service account.
    ok(&s, &["delete", "rolebinding", "pod-lister"]);
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: refused}}
spec:
  serviceAccountName: lister
  restartPolicy: Never
  containers:
  - name: c
    image: rust
    command: ["{bin}"]
"#
        ),
    );
    wait_phase(&s, "refused", "Failed", 90);
    let log = ok(&s, &["logs", "refused"]);
    assert!(
        log.contains("system:serviceaccount:default:lister") && log.contains("forbidden"),
        "{log}"
    );
}
