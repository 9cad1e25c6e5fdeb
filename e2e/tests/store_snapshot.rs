//! Disaster recovery (issue 4, done-means 5): `capstan snapshot save` from a live 3-member
//! cluster, `capstan snapshot status`, and `capstan snapshot restore` into three fresh data
//! directories of a new cluster (new token, new ports) that starts with the same keys,
//! values, create/mod revisions, versions, leases and compaction point — and a new cluster
//! id, as `etcdutl snapshot restore` gives. A corrupted file and a non-empty data directory
//! are refused with etcd's messages.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::etcd_cluster::Cluster;
use e2e::{capstan_bin, etcdctl, free_port};
use serde_json::Value;

fn ctl(endpoint: &str, args: &[&str]) -> String {
    let (ok, out, err) = etcdctl(endpoint, args, None).expect("etcdctl runs");
    assert!(ok, "etcdctl {args:?}: {out}{err}");
    out
}

fn capstan(args: &[&str]) -> (bool, String) {
    let out = Command::new(capstan_bin())
        .args(args)
        .output()
        .expect("capstan runs");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Until a put through `endpoint` succeeds.
fn wait_writable(endpoint: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !etcdctl(endpoint, &["put", "/health", "ok"], None).is_ok_and(|(ok, _, _)| ok) {
        assert!(Instant::now() < deadline, "{what} never took a write");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every key under `/dr/` with its revisions, version, lease and value, and the header
/// revision (`etcdctl get -w json`).
fn dump(endpoint: &str) -> (Vec<Value>, i64) {
    let v: Value = serde_json::from_str(&ctl(endpoint, &["get", "/dr/", "--prefix", "-w", "json"]))
        .expect("json");
    (
        v["kvs"].as_array().cloned().unwrap_or_default(),
        v["header"]["revision"].as_i64().unwrap_or(0),
    )
}

fn cluster_id(endpoint: &str) -> u64 {
    let v: Value =
        serde_json::from_str(&ctl(endpoint, &["endpoint", "status", "-w", "json"])).expect("json");
    v[0]["Status"]["header"]["cluster_id"].as_u64().unwrap_or(0)
}

/// A restored member process, killed on drop.
struct Restored(Child);

impl Drop for Restored {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn restore_into(file: &Path, dir: &Path, name: &str, peer: &str, initial: &str) -> (bool, String) {
    capstan(&[
        "snapshot",
        "restore",
        file.to_str().expect("utf-8"),
        "--name",
        name,
        "--data-dir",
        dir.to_str().expect("utf-8"),
        "--initial-cluster",
        initial,
        "--initial-advertise-peer-urls",
        peer,
        "--initial-cluster-token",
        "restored",
    ])
}

#[test]
fn a_snapshot_of_a_live_cluster_restores_into_a_new_cluster() {
    let mut source = Cluster::start(3, &[]).expect("cluster starts");
    let ep = source.members[0].client_url.clone();
    wait_writable(&ep, "the source cluster");

    // History worth keeping: versions, a deletion, a compaction, a key on a lease.
    for i in 0..20 {
        ctl(&ep, &["put", &format!("/dr/key-{i:02}"), &format!("v{i}")]);
    }
    for i in 0..5 {
        ctl(&ep, &["put", "/dr/key-00", &format!("again-{i}")]);
    }
    ctl(&ep, &["del", "/dr/key-19"]);
    let (_, compact_at) = dump(&ep);
    ctl(&ep, &["compact", &compact_at.to_string()]);
    ctl(&ep, &["put", "/dr/after-compaction", "x"]);
    let lease = ctl(&ep, &["lease", "grant", "600"]);
    let lease_id = lease
        .split_whitespace()
        .nth(1)
        .expect("lease id")
        .to_owned();
    ctl(&ep, &["put", "/dr/leased", "l", "--lease", &lease_id]);
    let (before, before_rev) = dump(&source.members[1].client_url);
    assert_eq!(before.len(), 21, "{before:?}");

    // Save from a follower-or-leader member of the live cluster.
    let tmp = tempfile::tempdir().expect("tempdir");
    let file = tmp.path().join("backup.db");
    let (ok, out) = capstan(&[
        "snapshot",
        "save",
        file.to_str().expect("utf-8"),
        "--endpoints",
        &source.members[2].client_url,
    ]);
    assert!(ok && out.contains("Snapshot saved at"), "{out}");
    let (ok, out) = capstan(&[
        "snapshot",
        "status",
        file.to_str().expect("utf-8"),
        "-w",
        "json",
    ]);
    assert!(ok, "{out}");
    let status: Value = serde_json::from_str(out.trim()).expect("status json");
    assert_eq!(status["revision"].as_i64(), Some(before_rev), "{status}");
    let (ok, table) = capstan(&[
        "snapshot",
        "status",
        file.to_str().expect("utf-8"),
        "-w",
        "table",
    ]);
    assert!(ok && table.contains("TOTAL KEYS"), "{table}");
    let old_cluster = cluster_id(&ep);
    for m in &mut source.members {
        m.kill9();
    }

    // Bad input: a corrupted copy and a used data directory.
    let mut bytes = std::fs::read(&file).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    let corrupt = tmp.path().join("corrupt.db");
    std::fs::write(&corrupt, bytes).expect("write");
    let peers: Vec<String> = (0..3)
        .map(|_| format!("http://127.0.0.1:{}", free_port()))
        .collect();
    let initial = peers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("r{i}={p}"))
        .collect::<Vec<_>>()
        .join(",");
    let (ok, out) = restore_into(&corrupt, &tmp.path().join("x"), "r0", &peers[0], &initial);
    assert!(!ok && out.contains("expected sha256"), "{out}");
    let used = tmp.path().join("used");
    std::fs::create_dir_all(&used).expect("mkdir");
    std::fs::write(used.join("something"), "x").expect("write");
    let (ok, out) = restore_into(&file, &used, "r0", &peers[0], &initial);
    assert!(!ok && out.contains("not empty"), "{out}");

    // Restore into three fresh directories and start the new cluster.
    let mut members = Vec::new();
    let mut clients = Vec::new();
    for (i, peer) in peers.iter().enumerate() {
        let name = format!("r{i}");
        let dir: PathBuf = tmp.path().join(&name);
        let (ok, out) = restore_into(&file, &dir, &name, peer, &initial);
        assert!(ok, "restore {name}: {out}");
        let client = format!("http://127.0.0.1:{}", free_port());
        let log = std::fs::File::create(tmp.path().join(format!("{name}.log"))).expect("log");
        let child = Command::new(capstan_bin())
            .arg("store")
            .args(["--name", &name])
            .arg("--data-dir")
            .arg(&dir)
            .args(["--listen-client-urls", &client])
            .args(["--listen-peer-urls", peer])
            .args(["--initial-advertise-peer-urls", peer])
            .args(["--initial-cluster", &initial])
            .args(["--initial-cluster-token", "restored"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn restored member");
        members.push(Restored(child));
        clients.push(client);
    }
    for c in &clients {
        // A linearizable read through each member once there is a leader.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !etcdctl(c, &["get", "/dr/key-01"], None).is_ok_and(|(ok, _, _)| ok) {
            assert!(
                Instant::now() < deadline,
                "restored member {c} never served a read; log:\n{}",
                std::fs::read_to_string(tmp.path().join("r0.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let (after, after_rev) = dump(c);
        assert_eq!(after_rev, before_rev, "same revision on {c}");
        assert_eq!(
            after, before,
            "same keys, values, revisions, versions and leases on {c}"
        );
        // The compaction point came along.
        let (ok, _, err) = etcdctl(
            c,
            &["get", "/dr/key-01", "--rev", &(compact_at - 1).to_string()],
            None,
        )
        .expect("etcdctl");
        assert!(!ok && err.contains("compacted"), "{err}");
    }
    let new_cluster = cluster_id(&clients[0]);
    assert_ne!(
        new_cluster, old_cluster,
        "a restored cluster is a new cluster"
    );
    assert!(clients.iter().all(|c| cluster_id(c) == new_cluster));
    let (ok, table, _) = etcdctl(
        &clients.join(","),
        &["endpoint", "status", "-w", "table"],
        None,
    )
    .expect("etcdctl");
    assert!(ok);
    assert_eq!(e2e::leaders_in_table(&table).expect("table"), 1, "{table}");
    // And it takes writes, continuing the revision sequence.
    ctl(&clients[1], &["put", "/dr/new", "n"]);
    let (_, rev) = dump(&clients[2]);
    assert_eq!(rev, before_rev + 1);
    drop(members);
}
