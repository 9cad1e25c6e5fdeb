//! `capstan apiserver --etcd-servers=https://…` with kube-apiserver's `--etcd-cafile`,
//! `--etcd-certfile` and `--etcd-keyfile`:
//!
//! - on Debian's etcd started with TLS and `--client-cert-auth`: kubectl writes land in etcd
//!   (read back with etcdctl over TLS);
//! - on a TLS `capstan store`;
//! - an untrusted server certificate (wrong `--etcd-cafile`) or a client certificate from
//!   another CA fails the start with a message saying so — no panic, the store unaffected.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::{ServerProcess, capstan_bin, free_port};

/// A child process killed on drop.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn capstan(args: &[&str]) {
    let out = Command::new(capstan_bin())
        .args(args)
        .output()
        .expect("capstan runs");
    assert!(
        out.status.success(),
        "capstan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A CA under `root` with a store serving certificate (`etcd/server.*`) and the client
/// certificate `etcd/apiserver-etcd-client.*`.
struct Pki {
    root: PathBuf,
}

impl Pki {
    fn new(root: PathBuf) -> Pki {
        capstan(&["certs", "init", "--data-dir", s(&root)]);
        let etcd = root.join("etcd");
        capstan(&[
            "certs",
            "store-server",
            "--data-dir",
            s(&root),
            "--name",
            "etcd0",
            "--hosts",
            "127.0.0.1",
            "--out-dir",
            s(&etcd),
        ]);
        capstan(&[
            "certs",
            "store-client",
            "--data-dir",
            s(&root),
            "--out-dir",
            s(&etcd),
        ]);
        Pki { root }
    }
    fn ca(&self) -> PathBuf {
        self.root.join("pki/ca.crt")
    }
    fn server(&self) -> (PathBuf, PathBuf) {
        (
            self.root.join("etcd/server.crt"),
            self.root.join("etcd/server.key"),
        )
    }
    fn client(&self) -> (PathBuf, PathBuf) {
        (
            self.root.join("etcd/apiserver-etcd-client.crt"),
            self.root.join("etcd/apiserver-etcd-client.key"),
        )
    }
    /// etcdctl's TLS flags with this PKI's client certificate.
    fn etcdctl_flags(&self) -> Vec<String> {
        let (cert, key) = self.client();
        vec![
            format!("--cacert={}", s(&self.ca())),
            format!("--cert={}", s(&cert)),
            format!("--key={}", s(&key)),
        ]
    }
}

fn etcdctl(url: &str, pki: &Pki, args: &[&str]) -> (bool, String, String) {
    let out = Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={url}"))
        .args(["--command-timeout=5s", "--dial-timeout=3s"])
        .args(pki.etcdctl_flags())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("etcdctl runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn wait_healthy(url: &str, pki: &Pki) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !etcdctl(url, pki, &["endpoint", "health"]).0 {
        assert!(Instant::now() < deadline, "{url} never became healthy");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Debian's etcd serving `https://` client URLs with `--client-cert-auth`.
fn start_etcd(dir: &Path, pki: &Pki) -> (Proc, String) {
    let url = format!("https://127.0.0.1:{}", free_port());
    let peer = format!("http://127.0.0.1:{}", free_port());
    let (cert, key) = pki.server();
    let child = Command::new("etcd")
        .arg("--data-dir")
        .arg(dir.join("etcd-data"))
        .args([
            "--listen-client-urls",
            &url,
            "--advertise-client-urls",
            &url,
        ])
        .args([
            "--listen-peer-urls",
            &peer,
            "--initial-advertise-peer-urls",
            &peer,
        ])
        .args(["--initial-cluster", &format!("default={peer}")])
        .arg(format!("--cert-file={}", s(&cert)))
        .arg(format!("--key-file={}", s(&key)))
        .arg(format!("--trusted-ca-file={}", s(&pki.ca())))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("etcd.log")).expect("log"))
        .spawn()
        .expect("spawning etcd (apt-get install etcd-server)");
    let p = Proc(child);
    wait_healthy(&url, pki);
    (p, url)
}

/// A TLS `capstan store` with `--client-cert-auth`.
fn start_store(dir: &Path, pki: &Pki) -> (Proc, String) {
    let url = format!("https://127.0.0.1:{}", free_port());
    let (cert, key) = pki.server();
    let child = Command::new(capstan_bin())
        .arg("store")
        .args(["--name", "etcd0", "--listen-client-urls", &url])
        .arg("--data-dir")
        .arg(dir.join("store-data"))
        .arg(format!("--cert-file={}", s(&cert)))
        .arg(format!("--key-file={}", s(&key)))
        .arg(format!("--trusted-ca-file={}", s(&pki.ca())))
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("store.log")).expect("log"))
        .spawn()
        .expect("spawn capstan store");
    let p = Proc(child);
    wait_healthy(&url, pki);
    (p, url)
}

fn tls_flags(url: &str, ca: &Path, cert: &Path, key: &Path) -> Vec<String> {
    vec![
        format!("--etcd-servers={url}"),
        format!("--etcd-cafile={}", s(ca)),
        format!("--etcd-certfile={}", s(cert)),
        format!("--etcd-keyfile={}", s(key)),
        "--disable-admission-plugins=ServiceAccount".to_owned(),
    ]
}

fn start_apiserver(dir: &Path, flags: &[String]) -> ServerProcess {
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut p = ServerProcess::spawn_command("apiserver", dir, free_port(), &args)
        .expect("spawn capstan apiserver");
    if let Err(e) = p.wait_ready(Duration::from_secs(30)) {
        panic!("{e:#}");
    }
    p
}

/// Runs `capstan apiserver` expecting it to fail its start; returns its stderr.
fn failed_start(dir: &Path, flags: &[String]) -> String {
    let mut child = Command::new(capstan_bin())
        .arg("apiserver")
        .arg("--data-dir")
        .arg(dir)
        .args(["--secure-port", &free_port().to_string()])
        .args(flags)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn capstan apiserver");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if child.try_wait().expect("wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("capstan apiserver kept running with bad TLS settings");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!err.contains("panicked"), "{err}");
    err
}

/// Writes through kubectl, reads the key back through etcdctl over TLS.
fn round_trip(api: &ServerProcess, url: &str, pki: &Pki, name: &str) {
    let (ok, out, err) = api
        .kubectl(&["create", "configmap", name, "--from-literal=a=1"])
        .expect("kubectl");
    assert!(ok, "{out} {err}\n{}", api.log());
    let (ok, out, err) = etcdctl(
        url,
        pki,
        &[
            "get",
            &format!("/registry/core/configmaps/default/{name}"),
            "--keys-only",
        ],
    );
    assert!(ok && out.contains(name), "{out} {err}");
    let (ok, out, err) = api
        .kubectl(&["get", "configmap", name, "-o", "jsonpath={.data.a}"])
        .expect("kubectl");
    assert!(ok && out == "1", "{out} {err}");
}

#[test]
fn apiserver_on_debian_etcd_with_tls_and_client_certificates() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path().join("etcd-pki"));
    let (_etcd, url) = start_etcd(tmp.path(), &pki);
    let (cert, key) = pki.client();
    let api = start_apiserver(
        &tmp.path().join("api"),
        &tls_flags(&url, &pki.ca(), &cert, &key),
    );
    round_trip(&api, &url, &pki, "over-tls");
}

#[test]
fn apiserver_on_a_tls_capstan_store() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path().join("etcd-pki"));
    let (_store, url) = start_store(tmp.path(), &pki);
    let (cert, key) = pki.client();
    let api = start_apiserver(
        &tmp.path().join("api"),
        &tls_flags(&url, &pki.ca(), &cert, &key),
    );
    round_trip(&api, &url, &pki, "over-tls");
}

#[test]
fn wrong_ca_or_foreign_client_certificate_fails_the_start_clearly() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = Pki::new(tmp.path().join("etcd-pki"));
    let other = Pki::new(tmp.path().join("other-pki"));
    let (_etcd, url) = start_etcd(tmp.path(), &pki);
    let (cert, key) = pki.client();
    let (ocert, okey) = other.client();

    // The server's certificate is not signed by --etcd-cafile.
    let err = failed_start(
        &tmp.path().join("api1"),
        &tls_flags(&url, &other.ca(), &cert, &key),
    );
    assert!(err.contains("not trusted by --etcd-cafile"), "{err}");

    // The client certificate comes from another CA: etcd refuses it.
    let err = failed_start(
        &tmp.path().join("api2"),
        &tls_flags(&url, &pki.ca(), &ocert, &okey),
    );
    assert!(
        err.contains("refused this client's certificate") || err.contains("closed the connection"),
        "{err}"
    );

    eprintln!("foreign client certificate: {err}");
    // No --etcd-cafile for an https:// server.
    let err = failed_start(&tmp.path().join("api3"), &[format!("--etcd-servers={url}")]);
    assert!(err.contains("--etcd-cafile"), "{err}");

    // etcd is unaffected: the right settings work.
    let api = start_apiserver(
        &tmp.path().join("api4"),
        &tls_flags(&url, &pki.ca(), &cert, &key),
    );
    round_trip(&api, &url, &pki, "after-bad-clients");
}
