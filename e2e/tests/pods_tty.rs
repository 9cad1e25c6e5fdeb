//! Terminals of `exec -t` on the process runtime (`capstan server --node-runtime process`):
//! the command runs on a pseudo-terminal whose window size is the client's — the size
//! kubectl sends right after connecting, and every later one (kubectl 1.33 on WebSocket
//! channel 4, kubectl 1.28 on the SPDY `resize` stream, the Python client's
//! `write_channel(4, …)`) is applied with `TIOCSWINSZ`, so `stty size` in the container
//! prints it; the output carries no byte the client did not cause (no NUL). And a SPDY
//! upgrade offering no protocol the kubelet speaks gets upstream's 403 with
//! `X-Accepted-Stream-Protocol-Versions`.

use std::process::Command;

use e2e::ServerProcess;
use e2e::cli::{ok, wait_for};

/// The versioned kubectl binaries beside the dispatcher on PATH.
const KUBECTL_1_33: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.33";
const KUBECTL_1_28: &str = "/usr/lib/google-cloud-sdk/bin/kubectl.1.28";

/// Runs a command on a pseudo-terminal of a given size, as a user's terminal would, and
/// plays steps against it: `{"expect": s}` waits (30 s at most) for `s` in the output,
/// `{"resize": [rows, cols]}` sets the window size (the kernel signals SIGWINCH to the
/// command), `{"send": s}` types `s`, `{"send": s, "until": t}` types `s` every half
/// second until `t` is in the output. Prints `{"rc": …, "out": …}` as JSON.
/// Usage: python3 -c DRIVER ROWS COLS STEPS_JSON ARGV…
const DRIVER: &str = r#"
import fcntl, json, os, select, struct, subprocess, sys, termios, time
rows, cols, steps, argv = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4:]
master, slave = os.openpty()
fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
def controlling_terminal():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
p = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                     start_new_session=True, preexec_fn=controlling_terminal)
os.close(slave)
out = b""
eof = False
def read_for(seconds):
    global out, eof
    end = time.time() + seconds
    while not eof and time.time() < end:
        r, _, _ = select.select([master], [], [], max(0.0, min(0.1, end - time.time())))
        if r:
            try:
                d = os.read(master, 65536)
            except OSError:
                d = b""
            if not d:
                eof = True
            out += d
def finish(rc):
    print(json.dumps({"rc": rc, "out": out.decode("latin-1")}))
    sys.exit(0)
for step in steps:
    if "resize" in step:
        r, c = step["resize"]
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", r, c, 0, 0))
    if "send" in step:
        until = step.get("until")
        deadline = time.time() + 30
        while True:
            os.write(master, step["send"].encode())
            if until is None:
                break
            read_for(0.5)
            if until.encode() in out:
                break
            if eof or time.time() > deadline:
                finish(-2)
    if "expect" in step:
        deadline = time.time() + 30
        while step["expect"].encode() not in out:
            if eof or time.time() > deadline:
                finish(-2)
            read_for(0.2)
deadline = time.time() + 30
while not eof and time.time() < deadline:
    read_for(0.5)
try:
    rc = p.wait(timeout=max(1.0, deadline - time.time()))
except subprocess.TimeoutExpired:
    p.kill()
    rc = -1
finish(rc)
"#;

/// The Python client: exec `sh` with a terminal, resize on channel 4, `stty size` shows it.
const PYTHON_RESIZE: &str = r#"
import json, sys, time
from kubernetes import client, config
from kubernetes.stream import stream
config.load_kube_config(config_file=sys.argv[1])
core = client.CoreV1Api()
resp = stream(core.connect_get_namespaced_pod_exec, sys.argv[2], "default",
              command=["sh"], stdin=True, stdout=True, stderr=True, tty=True,
              _preload_content=False)
out = ""
def size_shows(rows, cols):
    global out
    resp.write_channel(4, json.dumps({"Width": cols, "Height": rows}))
    want = f"{rows} {cols}"
    deadline = time.time() + 30
    while time.time() < deadline:
        resp.write_stdin("stty size\n")
        end = time.time() + 0.5
        while time.time() < end:
            resp.update(timeout=0.1)
            out += resp.read_stdout(timeout=0) if resp.peek_stdout() else ""
        if want in out:
            return
    raise AssertionError(f"no {want!r} in {out!r}")
size_shows(22, 77)
size_shows(33, 90)
resp.write_stdin("exit 5\n")
deadline = time.time() + 30
while resp.is_open() and time.time() < deadline:
    resp.update(timeout=0.5)
err = resp.read_channel(3)
assert '"ExitCode"' in err and '"5"' in err, err
assert "\0" not in out, repr(out)
print("python tty: ok")
"#;

fn process_cluster() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=1", "--node-runtime=process"],
    )
    .expect("server starts");
    (dir, s)
}

fn wait_running(s: &ServerProcess, pod: &str) {
    wait_for(s, 60, &format!("pod {pod} Running"), || {
        let (_, out, _) = s
            .kubectl(&["get", "pod", pod, "-o", "jsonpath={.status.phase}"])
            .expect("kubectl runs");
        (out == "Running").then_some(())
    });
}

/// Runs `kubectl exec -it` with `kubectl` on a terminal of `rows`×`cols`, playing `steps`
/// (see [`DRIVER`]); (exit code, everything the terminal showed).
fn exec_on_terminal(
    s: &ServerProcess,
    kubectl: &str,
    rows: u16,
    cols: u16,
    steps: &serde_json::Value,
    command: &[&str],
) -> (i64, String) {
    let mut args = vec!["exec", "-it", "b", "--"];
    args.extend_from_slice(command);
    kubectl_on_terminal(s, kubectl, rows, cols, steps, &args)
}

/// Runs `kubectl args…` on a terminal of `rows`×`cols`, playing `steps` (see [`DRIVER`]);
/// (exit code, everything the terminal showed).
fn kubectl_on_terminal(
    s: &ServerProcess,
    kubectl: &str,
    rows: u16,
    cols: u16,
    steps: &serde_json::Value,
    args: &[&str],
) -> (i64, String) {
    let out = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(rows.to_string())
        .arg(cols.to_string())
        .arg(steps.to_string())
        .arg(kubectl)
        .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
        .arg(format!("--cache-dir={}", s.cache_dir.display()))
        .args(args)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "driver output {stdout:?} ({e}); stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        v["rc"].as_i64().unwrap_or(-1),
        v["out"].as_str().unwrap_or_default().to_owned(),
    )
}

/// kubectl 1.33 (WebSocket v5) and 1.28 (SPDY/3.1): the container's terminal has the
/// client's size from the start, follows a resize mid-session, and shows no NUL.
#[test]
fn kubectl_exec_tty_takes_the_clients_window_size() {
    let (_dir, s) = process_cluster();
    ok(&s, &["run", "b", "--image=busybox", "--", "sleep", "3600"]);
    wait_running(&s, "b");

    for (kubectl, rows, cols) in [(KUBECTL_1_33, 37, 101), (KUBECTL_1_28, 41, 99)] {
        // The initial size, with a command that runs at once.
        let (rc, out) = exec_on_terminal(
            &s,
            kubectl,
            rows,
            cols,
            &serde_json::json!([]),
            &["stty", "size"],
        );
        assert_eq!(rc, 0, "{kubectl}: {out:?}");
        assert_eq!(out, format!("{rows} {cols}\r\n"), "{kubectl}");
        assert!(!out.contains('\0'), "{kubectl}: {out:?}");

        // An interactive shell: the size at start, then the terminal resized.
        let steps = serde_json::json!([
            {"send": "stty size\r", "expect": format!("{rows} {cols}\r\n")},
            {"resize": [50, 120]},
            {"send": "stty size\r", "until": "50 120\r\n"},
            {"send": "tty; exit 4\r", "expect": "/dev/pts/"},
        ]);
        let (rc, out) = exec_on_terminal(&s, kubectl, rows, cols, &steps, &["sh"]);
        assert_eq!(rc, 4, "{kubectl}: {out:?}");
        assert!(
            out.contains(&format!("{rows} {cols}\r\n")),
            "{kubectl}: {out:?}"
        );
        assert!(out.contains("50 120\r\n"), "{kubectl}: {out:?}");
        assert!(out.contains("/dev/pts/0\r\n"), "{kubectl}: {out:?}");
        assert!(!out.contains('\0'), "{kubectl}: {out:?}");
    }
}

/// A container with `tty: true` and `stdin: true`: its `sh` runs on a terminal of the
/// container's devpts; `kubectl attach -it` (1.33 on WebSocket, 1.28 on SPDY) types into it, gives it the
/// client's window size and every later one, and the container log records the terminal.
#[test]
fn kubectl_attach_tty_reaches_the_main_process_terminal() {
    let (dir, s) = process_cluster();
    for (kubectl, pod, rows, cols) in [(KUBECTL_1_33, "t", 37, 101), (KUBECTL_1_28, "u", 41, 99)] {
        let manifest = dir.path().join(format!("{pod}.yaml"));
        std::fs::write(
            &manifest,
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {pod}\nspec:\n  restartPolicy: Never\n  \
                 containers:\n  - name: c\n    image: busybox\n    command: [sh]\n    stdin: true\n    \
                 tty: true\n"
            ),
        )
        .expect("manifest written");
        ok(&s, &["apply", "-f", &manifest.to_string_lossy()]);
        wait_running(&s, pod);
        let steps = serde_json::json!([
            {"send": "stty size; tty\r", "until": format!("{rows} {cols}\r\n")},
            {"expect": "/dev/pts/0\r\n"},
            {"resize": [50, 120]},
            {"send": "stty size\r", "until": "50 120\r\n"},
            {"send": "exit\r"},
        ]);
        let (rc, out) =
            kubectl_on_terminal(&s, kubectl, rows, cols, &steps, &["attach", "-it", pod]);
        assert!(
            out.contains("/dev/pts/0\r\n"),
            "{kubectl}: {out:?}\nserver log tail: {}",
            e2e::cli::tail(&s.log())
        );
        assert!(out.contains("50 120\r\n"), "{kubectl}: {out:?}");
        assert_eq!(rc, 0, "{kubectl}: {out:?}");
        let logs = ok(&s, &["logs", pod]);
        assert!(logs.contains("/dev/pts/0"), "{kubectl}: {logs:?}");
        assert!(logs.contains("50 120"), "{kubectl}: {logs:?}");
    }

    // `kubectl run -it --rm`: the pod is made with stdin and tty, attached to once
    // running, and deleted when its shell exits.
    let steps = serde_json::json!([
        {"send": "tty\r", "until": "/dev/pts/0\r\n"},
        {"send": "exit\r"},
    ]);
    let (rc, out) = kubectl_on_terminal(
        &s,
        KUBECTL_1_33,
        24,
        80,
        &steps,
        &[
            "run",
            "-it",
            "--rm",
            "r",
            "--image=busybox",
            "--restart=Never",
            "--",
            "sh",
        ],
    );
    assert!(out.contains("/dev/pts/0\r\n"), "{out:?}");
    assert_eq!(rc, 0, "{out:?}");
    assert!(out.contains("pod \"r\" deleted"), "{out:?}");
}

/// The Python client's `stream(..., tty=True)` resizing on channel 4.
#[test]
fn the_python_clients_resize_channel_reaches_the_terminal() {
    let (_dir, s) = process_cluster();
    ok(&s, &["run", "b", "--image=busybox", "--", "sleep", "3600"]);
    wait_running(&s, "b");
    let out = Command::new("python3")
        .arg("-c")
        .arg(PYTHON_RESIZE)
        .arg(&s.kubeconfig)
        .arg("b")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("python tty: ok"),
        "stdout: {stdout}\nstderr: {}\nserver log tail: {}",
        String::from_utf8_lossy(&out.stderr),
        e2e::cli::tail(&s.log())
    );
}

/// A SPDY upgrade offering only protocols the kubelet does not speak: upstream's 403, with
/// the protocols it accepts in `X-Accepted-Stream-Protocol-Versions`.
#[test]
fn a_refused_stream_protocol_names_the_accepted_ones() {
    let (_dir, s) = process_cluster();
    ok(&s, &["run", "b", "--image=busybox", "--", "sleep", "3600"]);
    wait_running(&s, "b");
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "-i", "--http1.1", "-m", "10", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args([
            "-X",
            "POST",
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: SPDY/3.1",
            "-H",
            "X-Stream-Protocol-Version: v9.channel.k8s.io",
            "-H",
            "X-Stream-Protocol-Version: v8.channel.k8s.io",
        ])
        .arg(format!(
            "{}/api/v1/namespaces/default/pods/b/exec?command=true&stdout=true&tty=true",
            s.url
        ))
        .output()
        .expect("curl runs");
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let accepted: Vec<&str> = answer
        .lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| k.eq_ignore_ascii_case("x-accepted-stream-protocol-versions"))
        .map(|(_, v)| v.trim())
        .collect();
    assert_eq!(accepted, vec!["v4.channel.k8s.io"], "{answer}");
    assert!(
        answer.contains("client supports [v9.channel.k8s.io v8.channel.k8s.io]"),
        "{answer}"
    );
}
