//! Pods that really run: `capstan server --node-runtime process` makes its nodes run each
//! container's command as host processes (own mount and PID namespaces, unprivileged user,
//! volumes at their mountPath) and serve the kubelet API, so stock kubectl's `logs`,
//! `logs -f`, `exec` (WebSocket) with stdin and exit codes work; Jobs complete or fail
//! because their processes exit; a crashing container goes into CrashLoopBackOff with its
//! termination message; readiness and liveness probes (exec, httpGet) run for real;
//! deleting a pod kills its processes, and so does killing the node.

use std::process::{Command, Stdio};
use std::time::Instant;

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok, wait_for};
use serde_json::Value;

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

/// Host processes whose command line contains `marker`.
fn host_processes(marker: &str) -> usize {
    let out = Command::new("pgrep")
        .args(["-f", marker])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout).lines().count()
}

#[test]
fn kubectl_run_logs_exec_and_delete_reach_the_pods_processes() {
    let (_dir, s) = process_cluster();
    let created = Instant::now();
    ok(
        &s,
        &[
            "run",
            "b",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "echo hello from $HOSTNAME; id -u; echo $KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; sleep 3607",
        ],
    );
    wait_phase(&s, "b", "Running", 60);
    let start_latency = created.elapsed();
    // The command really ran, as the unprivileged default user, told the real API server.
    let logs = wait_for(&s, 20, "logs of b", || {
        let (done, out, _) = s.kubectl(&["logs", "b"]).expect("kubectl runs");
        (done && out.contains("hello from b")).then_some(out)
    });
    let port = s.url.rsplit(':').next().unwrap_or_default().to_owned();
    assert!(logs.contains("65534\n"), "{logs}");
    assert!(logs.contains(&format!("127.0.0.1:{port}")), "{logs}");
    assert_eq!(host_processes("^sleep 3607"), 1);
    // An Event says the image was not pulled.
    let events = ok(
        &s,
        &["get", "events", "--field-selector", "involvedObject.name=b"],
    );
    assert!(events.contains("not pulled"), "{events}");

    // exec: exit codes, stdin, the pod's namespaces and volumes.
    let (success, _, err) = s
        .kubectl(&["exec", "b", "--", "sh", "-c", "exit 3"])
        .expect("kubectl runs");
    assert!(!success);
    assert!(err.contains("exit code 3"), "{err}");
    let status = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
        .args(["exec", "b", "--", "sh", "-c", "exit 3"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("kubectl runs");
    assert_eq!(status.code(), Some(3));
    let round = Instant::now();
    ok(&s, &["exec", "b", "--", "true"]);
    let exec_round_trip = round.elapsed();
    let (fed, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["exec", "-i", "b", "--", "sh", "-c", "tr a-z A-Z"],
            Some("piped through\n"),
        )
        .expect("kubectl runs");
    assert!(fed, "{err}");
    assert_eq!(out, "PIPED THROUGH\n");
    let ps = ok(
        &s,
        &[
            "exec",
            "b",
            "--",
            "sh",
            "-c",
            "ps -o pid= -o args= | head -1",
        ],
    );
    assert!(ps.trim().starts_with("1 sh -c echo hello"), "{ps}");
    let token = ok(
        &s,
        &[
            "exec",
            "b",
            "--",
            "cat",
            "/var/run/secrets/kubernetes.io/serviceaccount/namespace",
        ],
    );
    assert_eq!(token, "default");
    assert!(
        !std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/namespace").exists()
            || std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .is_ok_and(|n| n != "default"),
        "the volume must not land on the host"
    );
    // A client in the pod (kubectl's in-cluster config: KUBERNETES_SERVICE_HOST/PORT, the
    // projected token and CA) talks to the API server as the pod's service account.
    let me = ok(
        &s,
        &[
            "exec",
            "b",
            "--",
            "kubectl",
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(me, "system:serviceaccount:default:default");

    // exec -it: a terminal (kubectl given one by `script`).
    let tty = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!(
            "kubectl --kubeconfig={} exec -it b -- sh -c 'tty; echo $TERM'",
            s.kubeconfig.display()
        ))
        .arg("/dev/null")
        .stdin(Stdio::null())
        .output()
        .expect("script runs");
    let tty = String::from_utf8_lossy(&tty.stdout).into_owned();
    assert!(tty.contains("/dev/pts/0"), "{tty}");
    assert!(tty.contains("xterm"), "{tty}");

    // attach: a container with stdin reads what the client sends.
    apply(
        &s,
        r#"apiVersion: v1
kind: Pod
metadata: {name: att}
spec:
  restartPolicy: Never
  containers:
  - {name: c, image: busybox, stdin: true, command: [sh, -c, "read x; echo got $x"]}
"#,
    );
    wait_phase(&s, "att", "Running", 60);
    let (attached, out, err) = s
        .kubectl_as(&s.kubeconfig, &["attach", "-i", "att"], Some("hello\n"))
        .expect("kubectl runs");
    assert!(attached, "{err}");
    assert!(out.contains("got hello"), "{out}");
    wait_phase(&s, "att", "Succeeded", 30);

    // kubectl cp, both ways (tar over exec).
    let local = tempfile::tempdir().expect("tempdir");
    let src = local.path().join("in.txt");
    std::fs::write(&src, "copied in\n").expect("write");
    let src_arg = src.display().to_string();
    ok(&s, &["cp", &src_arg, "b:/tmp/in.txt"]);
    assert_eq!(
        ok(&s, &["exec", "b", "--", "cat", "/tmp/in.txt"]),
        "copied in\n"
    );
    let back = local.path().join("out.txt").display().to_string();
    ok(&s, &["cp", "b:/tmp/in.txt", &back]);
    assert_eq!(std::fs::read_to_string(&back).expect("read"), "copied in\n");
    // The container's writes stay in its own layer.
    assert!(
        !std::path::Path::new("/tmp/in.txt").exists()
            || std::fs::read_to_string("/tmp/in.txt").is_ok_and(|c| c != "copied in\n")
    );
    // The kubelet API through nodes/proxy.
    let node = ok(&s, &["get", "pod", "b", "-o", "jsonpath={.spec.nodeName}"]);
    let pods = ok(
        &s,
        &["get", "--raw", &format!("/api/v1/nodes/{node}/proxy/pods")],
    );
    assert!(pods.contains("\"name\":\"b\""), "{pods}");

    // logs -f follows a container until it exits.
    ok(
        &s,
        &[
            "run",
            "f",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
            "-c",
            "for i in 1 2 3; do echo line $i; sleep 0.5; done",
        ],
    );
    wait_for(&s, 60, "pod f started", || {
        matches!(phase(&s, "f").as_str(), "Running" | "Succeeded").then_some(())
    });
    let followed = ok(&s, &["logs", "-f", "f"]);
    assert_eq!(followed, "line 1\nline 2\nline 3\n");
    wait_phase(&s, "f", "Succeeded", 30);
    let tail = ok(&s, &["logs", "f", "--tail=1", "--timestamps"]);
    assert!(
        tail.ends_with(" line 3\n") && tail.starts_with("20"),
        "{tail}"
    );

    // Deleting the pod kills its processes.
    ok(&s, &["delete", "pod", "b", "--wait=true"]);
    wait_for(&s, 20, "b's processes gone", || {
        (host_processes("^sleep 3607") == 0).then_some(())
    });
    eprintln!(
        "process runtime: create→Running {} ms, exec round trip (kubectl exec -- true) {} ms",
        start_latency.as_millis(),
        exec_round_trip.as_millis()
    );
}

fn job(name: &str, script: &str) -> String {
    format!(
        r#"apiVersion: batch/v1
kind: Job
metadata: {{name: {name}}}
spec:
  backoffLimit: 0
  template:
    spec:
      restartPolicy: Never
      containers: [{{name: c, image: busybox, command: [sh, -c, "{script}"]}}]
"#
    )
}

fn job_condition(s: &ServerProcess, name: &str) -> Option<String> {
    let j = json(s, &["get", "job", name, "-o", "json"]);
    j["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| {
            c["status"] == "True" && matches!(c["type"].as_str(), Some("Complete" | "Failed"))
        })
        .and_then(|c| c["type"].as_str().map(str::to_owned))
}

#[test]
fn jobs_complete_or_fail_because_their_processes_exit() {
    let (_dir, s) = process_cluster();
    apply(&s, &job("ok", "echo done; exit 0"));
    apply(&s, &job("bad", "echo failing >&2; exit 1"));
    let done = wait_for(&s, 90, "job ok finished", || job_condition(&s, "ok"));
    assert_eq!(done, "Complete");
    let failed = wait_for(&s, 90, "job bad finished", || job_condition(&s, "bad"));
    assert_eq!(failed, "Failed");
    let pods = json(&s, &["get", "pods", "-l", "job-name=bad", "-o", "json"]);
    let t = &pods["items"][0]["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["exitCode"], 1, "{t}");
    assert_eq!(t["reason"], "Error");
    assert_eq!(ok(&s, &["logs", "job/ok"]), "done\n");
}

#[test]
fn a_crashing_container_goes_into_crash_loop_back_off() {
    let (_dir, s) = process_cluster();
    apply(
        &s,
        r#"apiVersion: v1
kind: Pod
metadata: {name: crash}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "echo crashing; echo out of luck > /dev/termination-log; exit 2"]
"#,
    );
    let status: Value = wait_for(&s, 90, "CrashLoopBackOff", || {
        let p = json(&s, &["get", "pod", "crash", "-o", "json"]);
        let cs = p["status"]["containerStatuses"][0].clone();
        (cs["state"]["waiting"]["reason"] == "CrashLoopBackOff").then_some(cs)
    });
    assert!(
        status["restartCount"].as_i64().unwrap_or(0) >= 1,
        "{status}"
    );
    let last = &status["lastState"]["terminated"];
    assert_eq!(last["exitCode"], 2, "{status}");
    assert_eq!(last["message"], "out of luck\n", "{status}");
    let table = ok(&s, &["get", "pod", "crash"]);
    assert!(table.contains("CrashLoopBackOff"), "{table}");
    assert_eq!(ok(&s, &["logs", "crash", "--previous"]), "crashing\n");

    // A command that does not exist: StartError (exit 128) with the reason, as containerd.
    apply(
        &s,
        r#"apiVersion: v1
kind: Pod
metadata: {name: missing}
spec:
  restartPolicy: Never
  containers: [{name: c, image: busybox, command: [no-such-command-capstan]}]
"#,
    );
    wait_phase(&s, "missing", "Failed", 60);
    let p = json(&s, &["get", "pod", "missing", "-o", "json"]);
    let t = &p["status"]["containerStatuses"][0]["state"]["terminated"];
    assert_eq!(t["reason"], "StartError", "{t}");
    assert_eq!(t["exitCode"], 128, "{t}");
    assert!(
        t["message"]
            .as_str()
            .is_some_and(|m| m.contains("executable file not found")),
        "{t}"
    );
}

#[test]
fn a_node_killed_with_sigkill_takes_its_containers_with_it() {
    let (_dir, mut s) = process_cluster();
    ok(&s, &["run", "k", "--image=busybox", "--", "sleep", "3609"]);
    wait_phase(&s, "k", "Running", 60);
    wait_for(&s, 20, "k's process", || {
        (host_processes("^sleep 3609") == 1).then_some(())
    });
    s.kill9();
    wait_for(&s, 20, "k's process gone with its node", || {
        (host_processes("^sleep 3609") == 0).then_some(())
    });
}

#[test]
fn probes_drive_readiness_and_restart_a_dead_container() {
    let (_dir, s) = process_cluster();
    let port = e2e::free_port();
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: probed}}
spec:
  containers:
  - name: c
    image: busybox
    command: [sh, -c, "touch /tmp/alive; exec sleep 3610"]
    readinessProbe:
      exec: {{command: [test, -f, /tmp/ready]}}
      periodSeconds: 1
    livenessProbe:
      exec: {{command: [test, -f, /tmp/alive]}}
      periodSeconds: 1
      failureThreshold: 2
  - name: web
    image: python
    command: [python3, -m, http.server, "{port}", --bind, 127.0.0.1]
    readinessProbe:
      httpGet: {{port: {port}, path: /}}
      periodSeconds: 1
"#
        ),
    );
    let ready = |s: &ServerProcess| {
        let p = json(s, &["get", "pod", "probed", "-o", "json"]);
        let by_name = |n: &str| {
            p["status"]["containerStatuses"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["name"] == n))
                .map(|c| c["ready"] == true)
                .unwrap_or(false)
        };
        (by_name("c"), by_name("web"))
    };
    // The HTTP server answers: web is ready; c's exec probe fails until the file exists.
    wait_for(&s, 60, "web ready", || {
        (ready(&s) == (false, true)).then_some(())
    });
    ok(
        &s,
        &["exec", "probed", "-c", "c", "--", "touch", "/tmp/ready"],
    );
    wait_for(&s, 30, "c ready", || {
        (ready(&s) == (true, true)).then_some(())
    });
    let p = json(&s, &["get", "pod", "probed", "-o", "json"]);
    let cond = p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or_default();
    assert_eq!(cond["status"], "True", "{cond}");
    // The liveness probe fails: the container is killed and restarted (its writable
    // layer is new, so it is not ready again).
    ok(&s, &["exec", "probed", "-c", "c", "--", "rm", "/tmp/alive"]);
    wait_for(&s, 30, "c restarted", || {
        let p = json(&s, &["get", "pod", "probed", "-o", "json"]);
        let c = p["status"]["containerStatuses"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["name"] == "c").cloned())
            .unwrap_or_default();
        (c["restartCount"].as_i64().unwrap_or(0) >= 1).then_some(())
    });
    assert!(!ready(&s).0);
    let events = ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=probed",
        ],
    );
    assert!(events.contains("Liveness probe failed"), "{events}");
    assert!(
        events.contains("failed liveness probe, will be restarted"),
        "{events}"
    );
}

#[test]
fn init_containers_volumes_env_and_users_are_as_the_pod_says() {
    let (_dir, s) = process_cluster();
    ok(
        &s,
        &["create", "configmap", "cfg", "--from-literal=greeting=hi"],
    );
    ok(
        &s,
        &[
            "create",
            "secret",
            "generic",
            "sec",
            "--from-literal=pw=s3cret",
        ],
    );
    apply(
        &s,
        r#"apiVersion: v1
kind: Pod
metadata: {name: init, labels: {app: demo}}
spec:
  restartPolicy: Never
  securityContext: {runAsUser: 1000, fsGroup: 2000}
  initContainers:
  - name: prep
    image: busybox
    command: [sh, -c, "echo prepared > /work/state"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: main
    image: busybox
    workingDir: /work
    command: [sh, -c, "cat state; cat /etc/cfg/greeting; echo; echo $PW $greeting $POD $APP; id -u; pwd"]
    env:
    - {name: PW, valueFrom: {secretKeyRef: {name: sec, key: pw}}}
    - {name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: APP, valueFrom: {fieldRef: {fieldPath: "metadata.labels['app']"}}}
    envFrom: [{configMapRef: {name: cfg}}]
    volumeMounts: [{name: work, mountPath: /work}, {name: cfg, mountPath: /etc/cfg}]
  volumes:
  - {name: work, emptyDir: {}}
  - {name: cfg, configMap: {name: cfg}}
"#,
    );
    wait_phase(&s, "init", "Succeeded", 60);
    assert_eq!(
        ok(&s, &["logs", "init", "-c", "main"]),
        "prepared\nhi\ns3cret hi init demo\n1000\n/work\n"
    );
}
