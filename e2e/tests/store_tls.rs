//! Peer TLS between `capstan store` members: `https://` peer URLs with certificates from
//! `capstan certs peer` (issued by the cluster CA from `capstan certs init`),
//! `--peer-trusted-ca-file` and `--peer-client-cert-auth`, as etcd's flags.
//!
//! - Three members with certificates from the cluster CA form one cluster: one leader in
//!   `etcdctl endpoint status`, a put through one member is read linearizably on the others.
//! - A member whose certificate comes from another CA is shut out: the two good members keep
//!   a quorum and serve writes, the impostor never learns a leader nor any data.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::{capstan_bin, etcdctl, free_port, leaders_in_table};

/// A `capstan store` process, killed on drop.
struct Member {
    child: Child,
    client_url: String,
    log: PathBuf,
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Member {
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

/// `capstan certs init` in `dir`, then a peer certificate for each of `names` under
/// `dir/<name>/`.
fn pki(dir: &Path, names: &[&str]) {
    let d = dir.to_str().expect("utf-8 path");
    capstan(&["certs", "init", "--data-dir", d]);
    for name in names {
        let out = dir.join(name);
        capstan(&[
            "certs",
            "peer",
            "--data-dir",
            d,
            "--name",
            name,
            "--hosts",
            "127.0.0.1",
            "--out-dir",
            out.to_str().expect("utf-8 path"),
        ]);
    }
}

/// Starts three members `m1..m3`; member `i` uses the peer certificate under `pki_dirs[i]`
/// and trusts `ca_files[i]`.
fn start(root: &Path, pki_dirs: [&Path; 3], ca_files: [&Path; 3]) -> Vec<Member> {
    let peers: Vec<String> = (0..3)
        .map(|_| format!("https://127.0.0.1:{}", free_port()))
        .collect();
    let cluster = peers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("m{}={p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    (0..3)
        .map(|i| {
            let name = format!("m{}", i + 1);
            let client_url = format!("http://127.0.0.1:{}", free_port());
            let log = root.join(format!("{name}.log"));
            let cert = pki_dirs[i].join(&name).join("peer.crt");
            let key = pki_dirs[i].join(&name).join("peer.key");
            let child = Command::new(capstan_bin())
                .arg("store")
                .args(["--name", &name])
                .arg("--data-dir")
                .arg(root.join(&name))
                .args(["--listen-client-urls", &client_url])
                .args(["--initial-advertise-peer-urls", &peers[i]])
                .args(["--listen-peer-urls", &peers[i]])
                .args(["--initial-cluster", &cluster])
                .args(["--initial-cluster-token", "tls-e2e"])
                .arg("--peer-cert-file")
                .arg(&cert)
                .arg("--peer-key-file")
                .arg(&key)
                .arg("--peer-trusted-ca-file")
                .arg(ca_files[i])
                .arg("--peer-client-cert-auth")
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(std::fs::File::create(&log).expect("log file"))
                .spawn()
                .expect("spawn capstan store");
            Member {
                child,
                client_url,
                log,
            }
        })
        .collect()
}

/// Polls `f` until it is true or `secs` pass.
fn eventually(secs: u64, what: &str, members: &[Member], mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        if Instant::now() > deadline {
            let logs: Vec<String> = members.iter().map(Member::log).collect();
            panic!(
                "timed out waiting for {what}; logs:\n{}",
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn leader_of(endpoint: &str) -> Option<u64> {
    let (ok, out, _) = etcdctl(endpoint, &["endpoint", "status", "-w", "json"], None).ok()?;
    if !ok {
        return None;
    }
    let v: serde_json::Value = serde_json::from_str(&out).ok()?;
    v[0]["Status"]["leader"].as_u64()
}

#[test]
fn members_with_certificates_from_the_cluster_ca_form_a_cluster() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let ca = tmp.path().join("ca");
    pki(&ca, &["m1", "m2", "m3"]);
    let ca_cert = ca.join("pki/ca.crt");
    let members = start(tmp.path(), [&ca, &ca, &ca], [&ca_cert, &ca_cert, &ca_cert]);
    let endpoints = members
        .iter()
        .map(|m| m.client_url.as_str())
        .collect::<Vec<_>>()
        .join(",");
    eventually(30, "one leader over TLS", &members, || {
        etcdctl(&endpoints, &["endpoint", "status", "-w", "table"], None)
            .ok()
            .filter(|(ok, _, _)| *ok)
            .and_then(|(_, table, _)| leaders_in_table(&table).ok())
            == Some(1)
    });
    let (ok, _, err) =
        etcdctl(&members[1].client_url, &["put", "tls-key", "v"], None).expect("put");
    assert!(ok, "{err}");
    for m in &members {
        let (ok, out, err) = etcdctl(
            &m.client_url,
            &["get", "tls-key", "--print-value-only"],
            None,
        )
        .expect("get");
        assert!(ok, "{err}");
        assert_eq!(out.trim(), "v");
    }
}

#[test]
fn a_member_with_a_certificate_from_another_ca_is_shut_out() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let good = tmp.path().join("good");
    let rogue = tmp.path().join("rogue");
    pki(&good, &["m1", "m2"]);
    pki(&rogue, &["m3"]);
    let good_ca = good.join("pki/ca.crt");
    let rogue_ca = rogue.join("pki/ca.crt");
    let members = start(
        tmp.path(),
        [&good, &good, &rogue],
        [&good_ca, &good_ca, &rogue_ca],
    );

    // m1 and m2 are a quorum of three: they elect a leader and commit writes.
    eventually(30, "a leader among the trusted members", &members, || {
        leader_of(&members[0].client_url).is_some_and(|l| l != 0)
            && leader_of(&members[1].client_url) == leader_of(&members[0].client_url)
    });
    let (ok, _, err) = etcdctl(&members[0].client_url, &["put", "secret", "v"], None).expect("put");
    assert!(ok, "{err}");
    let (ok, out, _) = etcdctl(
        &members[1].client_url,
        &["get", "secret", "--print-value-only"],
        None,
    )
    .expect("get");
    assert!(ok && out.trim() == "v");

    // The impostor never joins: no leader, and none of the data.
    let leader = leader_of(&members[0].client_url);
    assert_ne!(leader_of(&members[2].client_url), leader);
    let (_, out, _) = etcdctl(
        &members[2].client_url,
        &["get", "secret", "--consistency=s", "--print-value-only"],
        None,
    )
    .expect("serializable get");
    assert_eq!(out.trim(), "", "the impostor has no data");
}
