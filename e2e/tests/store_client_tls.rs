//! TLS on the store's client port, as etcd's `--cert-file`, `--key-file`,
//! `--trusted-ca-file` and `--client-cert-auth`, driven by stock etcdctl:
//!
//! - `capstan store` with certificates from `capstan certs store-server|store-client`:
//!   etcdctl with `--cacert/--cert/--key` reads and writes; without a client certificate,
//!   with one from another CA, with an expired one (the log says why), or speaking plain text to the port it is refused — and the
//!   member keeps serving the good client; `capstan member list` and `capstan snapshot save`
//!   take etcdctl's `--cacert/--cert/--key` for such a member.
//! - `capstan server --listen-client-urls=https://…` serves TLS with client authentication
//!   by default (`pki/etcd/server.crt`, `pki/etcd/healthcheck-client.crt`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::{ServerProcess, capstan_bin, free_port};

/// A child process killed on drop, with its log file.
struct Proc {
    child: Child,
    log: PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Proc {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
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

/// Runs capstan: (success, stdout, stderr).
fn capstan_try(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(capstan_bin())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("capstan runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// Client credentials for etcdctl: (CA, certificate, key); `None` fields are left out.
#[derive(Clone, Copy, Default)]
struct Creds<'a> {
    ca: Option<&'a Path>,
    cert: Option<&'a Path>,
    key: Option<&'a Path>,
}

/// Runs etcdctl against `endpoint` with `creds`: (success, stdout, stderr).
fn etcdctl(endpoint: &str, creds: Creds<'_>, args: &[&str]) -> (bool, String, String) {
    let mut cmd = Command::new("etcdctl");
    cmd.env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .args(["--command-timeout=5s", "--dial-timeout=3s"]);
    if let Some(ca) = creds.ca {
        cmd.arg(format!("--cacert={}", s(ca)));
    }
    if let Some(cert) = creds.cert {
        cmd.arg(format!("--cert={}", s(cert)));
    }
    if let Some(key) = creds.key {
        cmd.arg(format!("--key={}", s(key)));
    }
    let out = cmd
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("etcdctl runs (apt-get install etcd-client)");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An expired client certificate (`CN=etcdctl`, 2020–2021) signed by the CA in `pki_dir`
/// (`ca.crt`, `ca.key`), written to `out_dir`: (certificate, key).
fn expired_client_cert(pki_dir: &Path, out_dir: &Path) -> (PathBuf, PathBuf) {
    use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
    let read = |f: &str| std::fs::read_to_string(pki_dir.join(f)).expect("CA file");
    let issuer = Issuer::from_ca_cert_pem(
        &read("ca.crt"),
        KeyPair::from_pem(&read("ca.key")).expect("key"),
    )
    .expect("CA");
    let mut params = CertificateParams::default();
    params
        .distinguished_name
        .push(DnType::CommonName, "etcdctl");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    std::fs::create_dir_all(out_dir).expect("dir");
    let (c, k) = (out_dir.join("etcdctl.crt"), out_dir.join("etcdctl.key"));
    std::fs::write(&c, cert.pem()).expect("cert");
    std::fs::write(&k, key.serialize_pem()).expect("key");
    (c, k)
}

/// Polls `f` until it holds or `secs` pass; panics with `log()`.
fn eventually(secs: u64, what: &str, log: impl Fn() -> String, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; log:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn capstan_store_serves_tls_and_refuses_clients_without_a_trusted_certificate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = tmp.path().join("pki-root");
    capstan(&["certs", "init", "--data-dir", s(&pki)]);
    let etcd_dir = pki.join("etcd");
    capstan(&[
        "certs",
        "store-server",
        "--data-dir",
        s(&pki),
        "--name",
        "m1",
        "--hosts",
        "127.0.0.1",
        "--out-dir",
        s(&etcd_dir),
    ]);
    capstan(&[
        "certs",
        "store-client",
        "--data-dir",
        s(&pki),
        "--name",
        "etcdctl",
        "--out-dir",
        s(&etcd_dir),
    ]);
    // A client certificate from another CA.
    let other = tmp.path().join("other-root");
    capstan(&["certs", "init", "--data-dir", s(&other)]);
    capstan(&[
        "certs",
        "store-client",
        "--data-dir",
        s(&other),
        "--name",
        "etcdctl",
        "--out-dir",
        s(&other.join("etcd")),
    ]);

    let ca = pki.join("pki/ca.crt");
    let port = free_port();
    let url = format!("https://127.0.0.1:{port}");
    let log = tmp.path().join("store.log");
    let child = Command::new(capstan_bin())
        .arg("store")
        .args(["--name", "m1", "--listen-client-urls", &url])
        .arg("--data-dir")
        .arg(tmp.path().join("m1"))
        .arg("--cert-file")
        .arg(etcd_dir.join("server.crt"))
        .arg("--key-file")
        .arg(etcd_dir.join("server.key"))
        .arg("--trusted-ca-file")
        .arg(&ca)
        .arg("--client-cert-auth")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"))
        .spawn()
        .expect("spawn capstan store");
    let store = Proc { child, log };

    let (cert, key) = (etcd_dir.join("etcdctl.crt"), etcd_dir.join("etcdctl.key"));
    let good = Creds {
        ca: Some(&ca),
        cert: Some(&cert),
        key: Some(&key),
    };
    eventually(
        30,
        "the TLS member to answer",
        || store.log(),
        || etcdctl(&url, good, &["endpoint", "health"]).0,
    );

    let (ok, out, err) = etcdctl(&url, good, &["put", "/secret", "s3cr3t"]);
    assert!(ok && out.trim() == "OK", "{out} {err}");
    let (ok, out, err) = etcdctl(&url, good, &["get", "/secret", "--print-value-only"]);
    assert!(ok && out.trim() == "s3cr3t", "{out} {err}");
    // etcdctl 3.4's `endpoint status` sends `:authority: https://…`.
    let (ok, out, err) = etcdctl(&url, good, &["endpoint", "status", "-w", "json"]);
    assert!(ok && out.contains("\"leader\""), "{out} {err}");

    // capstan's own etcd clients take etcdctl's TLS flags: `member list`, `snapshot save`.
    let tls_flags = ["--cacert", s(&ca), "--cert", s(&cert), "--key", s(&key)];
    let mut args = vec!["member", "list", "-w", "table", "--endpoints", &url];
    args.extend(tls_flags);
    let (ok, out, err) = capstan_try(&args);
    assert!(ok && out.contains("m1"), "{out} {err}");
    let snap = tmp.path().join("backup.db");
    let mut args = vec!["snapshot", "save", s(&snap), "--endpoints", &url];
    args.extend(tls_flags);
    let (ok, out, err) = capstan_try(&args);
    assert!(ok && err.contains("Snapshot saved"), "{out} {err}");
    let (ok, out, err) = capstan_try(&["snapshot", "status", s(&snap), "-w", "json"]);
    assert!(ok && out.contains("\"totalKey\""), "{out} {err}");
    // Without a client certificate the member refuses them too; without --cacert they
    // refuse to guess.
    let (ok, _, err) = capstan_try(&["member", "list", "--endpoints", &url, "--cacert", s(&ca)]);
    assert!(!ok && !err.contains("panicked"), "{err}");
    let (ok, _, err) = capstan_try(&["member", "list", "--endpoints", &url]);
    assert!(!ok && err.contains("--cacert"), "{err}");

    // No client certificate: refused.
    let ca_only = Creds {
        ca: Some(&ca),
        ..Creds::default()
    };
    let (ok, out, _) = etcdctl(&url, ca_only, &["get", "/secret", "--print-value-only"]);
    assert!(
        !ok && !out.contains("s3cr3t"),
        "read without a client cert: {out}"
    );
    // A client certificate from another CA: refused.
    let (ocert, okey) = (
        other.join("etcd/etcdctl.crt"),
        other.join("etcd/etcdctl.key"),
    );
    let foreign = Creds {
        ca: Some(&ca),
        cert: Some(&ocert),
        key: Some(&okey),
    };
    let (ok, out, _) = etcdctl(&url, foreign, &["get", "/secret", "--print-value-only"]);
    assert!(
        !ok && !out.contains("s3cr3t"),
        "read with a foreign cert: {out}"
    );
    // An expired client certificate signed by the right CA: refused, and the log says why.
    let (xcert, xkey) = expired_client_cert(&pki.join("pki"), &tmp.path().join("expired"));
    let expired = Creds {
        ca: Some(&ca),
        cert: Some(&xcert),
        key: Some(&xkey),
    };
    let (ok, out, err) = etcdctl(&url, expired, &["get", "/secret", "--print-value-only"]);
    assert!(
        !ok && !out.contains("s3cr3t"),
        "read with an expired cert: {out} {err}"
    );
    eventually(
        10,
        "the expired certificate's handshake to be logged",
        || store.log(),
        || {
            store
                .log()
                .lines()
                .any(|l| l.contains("TLS handshake failed") && l.contains("xpired"))
        },
    );
    // A client that does not trust the member's CA refuses it.
    let other_ca = other.join("pki/ca.crt");
    let distrust = Creds {
        ca: Some(&other_ca),
        cert: Some(&cert),
        key: Some(&key),
    };
    let (ok, out, _) = etcdctl(&url, distrust, &["get", "/secret"]);
    assert!(!ok && !out.contains("s3cr3t"), "{out}");
    // Plain text to the TLS port: refused.
    let (ok, out, _) = etcdctl(
        &format!("http://127.0.0.1:{port}"),
        Creds::default(),
        &["get", "/secret"],
    );
    assert!(!ok && !out.contains("s3cr3t"), "plain-text read: {out}");

    // The member kept serving the good client.
    let (ok, out, err) = etcdctl(&url, good, &["put", "/after", "1"]);
    assert!(ok && out.trim() == "OK", "{out} {err}\n{}", store.log());
    assert!(
        store.log().contains("TLS handshake failed"),
        "the refused handshakes are logged: {}",
        store.log()
    );
}

#[test]
fn capstan_store_refuses_https_urls_without_a_certificate() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = Command::new(capstan_bin())
        .arg("store")
        .args([
            "--listen-client-urls",
            &format!("https://127.0.0.1:{}", free_port()),
        ])
        .arg("--data-dir")
        .arg(tmp.path().join("m"))
        .output()
        .expect("capstan store");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--cert-file and --key-file"),
        "{err}"
    );
}

#[test]
fn capstan_server_https_client_urls_require_client_certificates_by_default() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("server");
    let url = format!("https://127.0.0.1:{}", free_port());
    let server =
        ServerProcess::start_with(&dir, &[&format!("--listen-client-urls={url}")]).expect("start");
    let (ok, out, err) = server
        .kubectl(&["create", "configmap", "tls-check", "--from-literal=a=1"])
        .expect("kubectl");
    assert!(ok, "{out} {err}");

    let ca = dir.join("pki/ca.crt");
    let cert = dir.join("pki/etcd/healthcheck-client.crt");
    let key = dir.join("pki/etcd/healthcheck-client.key");
    let good = Creds {
        ca: Some(&ca),
        cert: Some(&cert),
        key: Some(&key),
    };
    let mut keys = String::new();
    eventually(
        20,
        "the member's etcd API",
        || server.log(),
        || {
            let (ok, out, _) = etcdctl(
                &url,
                good,
                &["get", "/registry/", "--prefix", "--keys-only"],
            );
            keys = out;
            ok
        },
    );
    assert!(
        keys.contains("/registry/core/configmaps/default/tls-check"),
        "{keys}"
    );

    let ca_only = Creds {
        ca: Some(&ca),
        ..Creds::default()
    };
    let (ok, out, _) = etcdctl(
        &url,
        ca_only,
        &["get", "/registry/", "--prefix", "--keys-only"],
    );
    assert!(!ok && !out.contains("/registry/"), "{out}");
    // The API server is unaffected by the refused client.
    let (ok, out, err) = server
        .kubectl(&["get", "configmap", "tls-check", "-o", "jsonpath={.data.a}"])
        .expect("kubectl");
    assert!(ok && out == "1", "{out} {err}");
}
