//! SPDY/3.1 streaming with kubectl 1.28 (which has no WebSocket exec): `capstan server
//! --node-runtime process` runs the pods; kubectl's exec, attach and cp upgrade to SPDY/3.1
//! (`X-Stream-Protocol-Version: v4.channel.k8s.io`) at the API server, which splices the
//! connection to the node's kubelet, which speaks SPDY: one stream per channel (`error`,
//! `stdin`, `stdout`, `stderr`, `resize`), header blocks compressed with SPDY/3's dictionary.

use std::process::{Command, Stdio};

use e2e::ServerProcess;
use e2e::cli::{apply, ok, wait_for};

/// The kubectl 1.28 binary beside the dispatcher on PATH.
const KUBECTL_1_28: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.28";

fn process_cluster() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=1", "--node-runtime=process"],
    )
    .expect("server starts");
    (dir, s)
}

/// Runs kubectl 1.28 with the admin kubeconfig; (exit code, stdout, stderr).
fn kubectl_128(s: &ServerProcess, args: &[&str], stdin: Option<&str>) -> (i32, String, String) {
    use std::io::Write;
    let mut child = Command::new(KUBECTL_1_28)
        .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
        .arg(format!("--cache-dir={}", s.cache_dir.display()))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl 1.28 runs");
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes()).expect("stdin written");
    }
    let out = child.wait_with_output().expect("kubectl 1.28 ends");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `curl -i` over HTTP/1.1 as the admin (client certificate); the whole answer.
fn curl_admin(s: &ServerProcess, args: &[&str], path: &str) -> String {
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "-i", "--http1.1", "-m", "10", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(args)
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_running(s: &ServerProcess, pod: &str) {
    wait_for(s, 60, &format!("pod {pod} Running"), || {
        let (_, out, _) = s
            .kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"])
            .expect("kubectl runs");
        (out == "Running").then_some(())
    });
}

#[test]
fn kubectl_1_28_exec_attach_and_cp_over_spdy() {
    let (_dir, s) = process_cluster();
    ok(
        &s,
        &[
            "run",
            "b",
            "--image=busybox",
            "--",
            "sh",
            "-c",
            "sleep 3611",
        ],
    );
    wait_running(&s, "b");

    // The upgrade is SPDY/3.1 with the v4 channel protocol.
    let (code, out, err) = kubectl_128(&s, &["-v=8", "exec", "b", "--", "echo", "hi"], None);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "hi\n");
    assert!(err.contains("Upgrade: SPDY/3.1"), "{err}");
    assert!(
        err.contains("X-Stream-Protocol-Version: v4.channel.k8s.io"),
        "{err}"
    );

    // stdout and stderr apart, the exit code from the error stream's Status.
    let (code, out, err) = kubectl_128(
        &s,
        &[
            "exec",
            "b",
            "--",
            "sh",
            "-c",
            "echo out; echo err >&2; exit 3",
        ],
        None,
    );
    assert_eq!(code, 3, "{err}");
    assert_eq!(out, "out\n");
    assert!(err.contains("err\n"), "{err}");
    assert!(err.contains("command terminated with exit code 3"), "{err}");

    // stdin to the end (the client's FIN on the stdin stream), and a large output.
    let (code, out, err) = kubectl_128(
        &s,
        &["exec", "-i", "b", "--", "tr", "a-z", "A-Z"],
        Some("piped over spdy\n"),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, "PIPED OVER SPDY\n");
    let (code, out, err) = kubectl_128(
        &s,
        &[
            "exec",
            "b",
            "--",
            "sh",
            "-c",
            "head -c 300000 /dev/zero | tr '\\0' x",
        ],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.len(), 300_000);
    assert!(out.bytes().all(|b| b == b'x'));

    // A missing command: the error stream carries it, kubectl exits non-zero.
    let (code, _, err) = kubectl_128(&s, &["exec", "b", "--", "/no/such/command"], None);
    assert_ne!(code, 0, "{err}");

    // exec -it: a terminal (stdin, stdout and the resize stream; stderr merged).
    let tty = Command::new("script")
        .args(["-q", "-e", "-c"])
        .arg(format!(
            "{KUBECTL_1_28} --kubeconfig={} exec -it b -- sh -c 'tty; echo $TERM'",
            s.kubeconfig.display()
        ))
        .arg("/dev/null")
        .stdin(Stdio::null())
        .output()
        .expect("script runs");
    let tty = String::from_utf8_lossy(&tty.stdout).into_owned();
    assert!(tty.contains("/dev/pts/0"), "{tty}");
    assert!(tty.contains("xterm"), "{tty}");

    // attach: the container's stdin and output.
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
    wait_running(&s, "att");
    let (code, out, err) = kubectl_128(&s, &["attach", "-i", "att"], Some("hello\n"));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("got hello"), "{out}");

    // kubectl cp both ways (tar over exec, stdin and stdout streams).
    let local = tempfile::tempdir().expect("tempdir");
    let src = local.path().join("in.txt");
    let content: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&src, &content).expect("write");
    let (code, _, err) = kubectl_128(
        &s,
        &["cp", &src.display().to_string(), "b:/tmp/in.txt"],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        ok(&s, &["exec", "b", "--", "sh", "-c", "wc -l < /tmp/in.txt"]).trim(),
        "20000"
    );
    let back = local.path().join("out.txt");
    let (code, _, err) = kubectl_128(
        &s,
        &["cp", "b:/tmp/in.txt", &back.display().to_string()],
        None,
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read_to_string(&back).expect("read"), content);

    // A SPDY upgrade offering no protocol the kubelet speaks: upstream's 403.
    let refused = curl_admin(
        &s,
        &[
            "-X",
            "POST",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: SPDY/3.1",
            "-H",
            "X-Stream-Protocol-Version: v9.channel.k8s.io",
        ],
        "/api/v1/namespaces/default/pods/b/exec?command=true&stdout=true",
    );
    assert!(refused.starts_with("HTTP/1.1 403"), "{refused}");
    assert!(
        refused.contains("unable to upgrade: unable to negotiate protocol: client supports [v9.channel.k8s.io], server accepts [v4.channel.k8s.io]"),
        "{refused}"
    );

    // A container that is not running: the kubelet's Status comes back through SPDY's refusal.
    let (code, _, err) = kubectl_128(&s, &["exec", "att", "--", "true"], None);
    assert_ne!(code, 0);
    assert!(!err.is_empty());
}
