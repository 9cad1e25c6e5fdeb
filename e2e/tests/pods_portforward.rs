//! `kubectl port-forward` to a process listening in a pod of `capstan server --node-runtime
//! process`, reached with curl: kubectl 1.33 tunnels SPDY through a WebSocket
//! (`SPDY/3.1+portforward.k8s.io`), kubectl 1.28 speaks SPDY/3.1 (`portforward.k8s.io`), the
//! Python client the WebSocket channel protocol (`v4.channel.k8s.io`, `?ports=`). Each
//! connection is its own stream pair; a port nobody listens on is reported on the error
//! stream; a closed forward frees its local port while the pod keeps serving.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use e2e::cli::{ok, wait_for};
use e2e::{ServerProcess, free_port};

const BIN: &str = "/usr/lib/google-cloud-sdk/bin";

fn process_cluster() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=1", "--node-runtime=process"],
    )
    .expect("server starts");
    (dir, s)
}

/// A running `kubectl port-forward`, killed when dropped; its output lines on a channel.
struct Forward {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Forward {
    fn start(s: &ServerProcess, version: &str, extra: &[&str], ports: &str) -> Forward {
        let mut child = Command::new(format!("{BIN}/kubectl.{version}"))
            .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
            .arg(format!("--cache-dir={}", s.cache_dir.display()))
            .args(extra)
            .args(["port-forward", "pod/w", ports])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        let (tx, lines) = mpsc::channel();
        for pipe in [
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Forward {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (30 s) for an output line containing `text`.
    fn wait_line(&mut self, text: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        if let Some(l) = self.seen.iter().find(|l| l.contains(text)) {
            return l.clone();
        }
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if l.contains(text) {
                        return l;
                    }
                }
                Err(_) => panic!("no line with {text:?}; saw:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Waits (30 s) for kubectl to exit; its code.
    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st.code();
            }
            assert!(std::time::Instant::now() < deadline, "kubectl did not exit");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Forward {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` of `http://127.0.0.1:<port>/<path>`: (exit code, body).
fn curl(port: u16, path: &str) -> (i32, String) {
    let out = Command::new("curl")
        .args(["-s", "-m", "10"])
        .arg(format!("http://127.0.0.1:{port}/{path}"))
        .output()
        .expect("curl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

/// Forwards through kubectl `version` and checks two connections, a large answer, and
/// the end of the forward.
fn forward_with(s: &ServerProcess, version: &str, extra: &[&str], pod_port: u16) -> Forward {
    let local = free_port();
    let mut f = Forward::start(s, version, extra, &format!("{local}:{pod_port}"));
    f.wait_line(&format!("Forwarding from 127.0.0.1:{local} -> {pod_port}"));
    let (code, body) = curl(local, "index.html");
    assert_eq!(code, 0);
    assert_eq!(body, "served from w\n");
    // A second connection, a large file: each connection its own stream pair.
    let (code, body) = curl(local, "big.txt");
    assert_eq!(code, 0);
    assert_eq!(body.len(), 500_000);
    f.wait_line(&format!("Handling connection for {local}"));
    f
}

#[test]
fn port_forward_with_kubectl_1_33_and_1_28_and_the_python_client() {
    let (dir, s) = process_cluster();
    let pod_port = free_port();
    let pod = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: w}}
spec:
  containers:
  - name: web
    image: python
    command: [sh, -c, "mkdir -p /tmp/www && cd /tmp/www && echo served from $HOSTNAME > index.html && head -c 500000 /dev/zero | tr '\\0' y > big.txt && exec python3 -m http.server {pod_port} --bind 127.0.0.1"]
"#
    );
    let manifest = dir.path().join("w.yaml");
    std::fs::write(&manifest, pod).expect("write");
    ok(&s, &["apply", "-f", &manifest.display().to_string()]);
    wait_for(&s, 60, "pod w serving", || {
        let (_, out, _) = s
            .kubectl(&["exec", "w", "--", "python3", "-c", &format!("import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{pod_port}/index.html').read().decode())")])
            .expect("kubectl runs");
        out.contains("served from w").then_some(())
    });

    // kubectl 1.33: SPDY tunnelled through a WebSocket.
    let mut f33 = forward_with(&s, "1.33", &["-v=8"], pod_port);
    f33.wait_line("Sec-Websocket-Protocol: SPDY/3.1+portforward.k8s.io");
    f33.wait_line("negotiated protocol: portforward.k8s.io");
    // kubectl 1.28: plain SPDY, at the same time.
    let f28 = forward_with(&s, "1.28", &[], pod_port);

    // Closing a forward frees its local port; the other one and the pod go on.
    let local33 = {
        let line = f33.wait_line("Forwarding from 127.0.0.1:");
        line.split(':')
            .nth(1)
            .and_then(|p| p.split_whitespace().next())
            .and_then(|p| p.parse::<u16>().ok())
            .expect("local port in the line")
    };
    drop(f33);
    wait_for(&s, 10, "the closed forward's port refused", || {
        (curl(local33, "index.html").0 != 0).then_some(())
    });
    drop(f28);
    let f = forward_with(&s, "1.33", &[], pod_port);
    drop(f);

    // A port nobody listens on: the error stream says so and kubectl ends, as with a kubelet.
    for version in ["1.33", "1.28"] {
        let dead = free_port();
        let local = free_port();
        let mut f = Forward::start(&s, version, &[], &format!("{local}:{dead}"));
        f.wait_line("Forwarding from 127.0.0.1:");
        let _ = curl(local, "");
        let line = f.wait_line("an error occurred forwarding");
        assert!(
            line.contains(&format!("error forwarding port {dead} to pod default/w")),
            "{line}"
        );
        assert!(line.contains("onnection refused"), "{line}");
        assert_ne!(f.wait_exit(), Some(0));
    }

    // Bad ports in a WebSocket port-forward: the kubelet's 400 through the API server.
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "-i", "--http1.1", "-m", "10", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args([
            "-H",
            "Connection: Upgrade",
            "-H",
            "Upgrade: websocket",
            "-H",
            "Sec-WebSocket-Version: 13",
            "-H",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "-H",
            "Sec-WebSocket-Protocol: v4.channel.k8s.io",
        ])
        .arg(format!(
            "{}/api/v1/namespaces/default/pods/w/portforward?ports=abc",
            s.url
        ))
        .output()
        .expect("curl runs");
    let refused = String::from_utf8_lossy(&out.stdout);
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(
        refused.contains(r#"unable to parse \"abc\" as a port"#),
        "{refused}"
    );

    // The Python client: the WebSocket channel protocol (`?ports=`, data/error channels).
    let script = format!(
        r#"
from kubernetes import config, client
from kubernetes.stream import portforward
config.load_kube_config({kubeconfig:?})
api = client.CoreV1Api()
for attempt in range(2):
    pf = portforward(api.connect_get_namespaced_pod_portforward, 'w', 'default', ports='{pod_port}')
    sock = pf.socket({pod_port})
    sock.setblocking(True)
    sock.sendall(b'GET /index.html HTTP/1.0\r\n\r\n')
    data = b''
    while True:
        d = sock.recv(4096)
        if not d:
            break
        data += d
    sock.close()
    assert pf.error({pod_port}) is None, pf.error({pod_port})
    print(data.decode().split('\r\n\r\n', 1)[1], end='')
"#,
        kubeconfig = s.kubeconfig.display().to_string(),
    );
    let out = Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout, "served from w\nserved from w\n");
}
