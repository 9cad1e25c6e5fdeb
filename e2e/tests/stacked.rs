//! The stacked topology: three `capstan server` processes, each running the API server on
//! its own embedded store member, the three members forming one Raft cluster
//! (`--initial-cluster`), as kubeadm's stacked etcd. They share one PKI (`capstan certs
//! init`, then the CA and service-account keys copied into each data directory); the members
//! talk over mutually authenticated TLS with peer certificates each server issues itself from
//! that CA (`https://` peer URLs; `http://` ones are refused).
//!
//! - `etcdctl endpoint status` over the three members shows one leader; `kubectl` against
//!   any server sees the same cluster: a ConfigMap written through one is read through the
//!   others, and `/readyz?verbose` reports the `etcd` check.
//! - `kill -9` of the server whose member leads: the two others elect a new leader and keep
//!   serving kubectl reads and writes (the gap is printed); the killed server restarts and
//!   catches up.
//! - Each member's `--listen-metrics-urls` serves etcd's metrics (`etcd_server_has_leader`,
//!   `etcd_server_is_leader`, `etcd_server_leader_changes_seen_total`, WAL fsync latency, …)
//!   and `/health`, which follow the failover.

use std::path::Path;
use std::time::{Duration, Instant};

use e2e::{ServerProcess, capstan_bin, etcdctl, free_port, http_get, leaders_in_table};
use serde_json::Value;

/// One node of the stacked cluster: how to (re)start it, and the running process.
struct StackedNode {
    dir: std::path::PathBuf,
    port: u16,
    metrics_port: u16,
    args: Vec<String>,
    client_url: String,
    server: Option<ServerProcess>,
}

impl StackedNode {
    fn spawn(&mut self) {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        self.server = Some(ServerProcess::spawn(&self.dir, self.port, &args).expect("spawn"));
    }

    fn server(&self) -> &ServerProcess {
        self.server.as_ref().expect("running")
    }
}

/// `(member id, leader id)` of the member serving `endpoint`, if it answers.
fn member_status(endpoint: &str) -> Option<(u64, u64)> {
    let (ok, out, _) = etcdctl(endpoint, &["endpoint", "status", "-w", "json"], None).ok()?;
    if !ok {
        return None;
    }
    let v: Value = serde_json::from_str(&out).ok()?;
    let st = &v[0]["Status"];
    Some((st["header"]["member_id"].as_u64()?, st["leader"].as_u64()?))
}

/// Index of the node whose member every running member names as leader.
fn agreed_leader(nodes: &[StackedNode], running: &[usize], secs: u64) -> usize {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let statuses: Vec<Option<(u64, u64)>> = running
            .iter()
            .map(|&i| member_status(&nodes[i].client_url))
            .collect();
        if let Some(Some((_, leader))) = statuses.first()
            && *leader != 0
            && statuses
                .iter()
                .all(|s| s.is_some_and(|(_, l)| l == *leader))
            && let Some(pos) = statuses
                .iter()
                .position(|s| s.is_some_and(|(id, _)| id == *leader))
        {
            return running[pos];
        }
        assert!(
            Instant::now() < deadline,
            "no agreed leader among {running:?} after {secs} s: {statuses:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The value of the sample `name` (exact name and labels) in a metrics text.
fn sample(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The store metrics of a node (etcd's names, on `--listen-metrics-urls`).
fn store_metrics(n: &StackedNode) -> String {
    let (code, body) = http_get(n.metrics_port, "/metrics").expect("metrics answer");
    assert_eq!(code, 200, "{body}");
    body
}

fn copy_shared_pki(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("pki")).expect("pki dir");
    for f in ["ca.crt", "ca.key", "sa.key", "sa.pub"] {
        std::fs::copy(from.join("pki").join(f), to.join("pki").join(f)).expect("copy pki file");
    }
}

fn kubectl_ok(s: &ServerProcess, args: &[&str]) -> Result<String, String> {
    match s.kubectl(args) {
        Ok((true, out, _)) => Ok(out),
        Ok((false, _, err)) => Err(err),
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn three_stacked_servers_serve_kubectl_and_survive_the_leaders_death() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let base = tmp.path().join("shared");
    let out = std::process::Command::new(capstan_bin())
        .args(["certs", "init", "--data-dir"])
        .arg(&base)
        .output()
        .expect("capstan certs init");
    assert!(
        out.status.success(),
        "certs init: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    let peers: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let initial_cluster = peers
        .iter()
        .enumerate()
        .map(|(i, p)| format!("n{}=https://127.0.0.1:{p}", i + 1))
        .collect::<Vec<_>>()
        .join(",");
    let mut nodes: Vec<StackedNode> = (0..3)
        .map(|i| {
            let dir = tmp.path().join(format!("n{}", i + 1));
            copy_shared_pki(&base, &dir);
            let peer = format!("https://127.0.0.1:{}", peers[i]);
            let client_url = format!("http://127.0.0.1:{}", free_port());
            let metrics_port = free_port();
            let args = vec![
                "--nodes=0".to_owned(),
                format!("--name=n{}", i + 1),
                format!("--initial-cluster={initial_cluster}"),
                format!("--initial-advertise-peer-urls={peer}"),
                format!("--listen-peer-urls={peer}"),
                format!("--listen-client-urls={client_url}"),
                "--initial-cluster-token=stacked-e2e".to_owned(),
                format!("--listen-metrics-urls=http://127.0.0.1:{metrics_port}"),
            ];
            StackedNode {
                dir,
                port: free_port(),
                metrics_port,
                args,
                client_url,
                server: None,
            }
        })
        .collect();
    // capstan server's members talk TLS only.
    let out = std::process::Command::new(capstan_bin())
        .arg("server")
        .arg("--data-dir")
        .arg(tmp.path().join("plain"))
        .args([
            "--name=n1",
            "--initial-cluster=n1=http://127.0.0.1:1,n2=http://127.0.0.1:2",
            "--initial-advertise-peer-urls=http://127.0.0.1:1",
        ])
        .output()
        .expect("capstan server");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("use https:// peer URLs"),
        "{err}"
    );

    for n in &mut nodes {
        n.spawn();
    }
    for n in &mut nodes {
        n.server
            .as_mut()
            .expect("spawned")
            .wait_ready(Duration::from_secs(60))
            .expect("server ready");
    }

    // One leader, three members, one cluster id.
    let endpoints = nodes
        .iter()
        .map(|n| n.client_url.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let (ok, table, err) =
        etcdctl(&endpoints, &["endpoint", "status", "-w", "table"], None).expect("etcdctl");
    assert!(ok, "endpoint status: {err}");
    assert_eq!(
        leaders_in_table(&table).expect("status table"),
        1,
        "exactly one leader:\n{table}"
    );
    let (ok, members, _) = etcdctl(&endpoints, &["member", "list"], None).expect("etcdctl");
    assert!(ok && members.lines().count() == 3, "member list: {members}");
    let leader = agreed_leader(&nodes, &[0, 1, 2], 30);
    for n in &nodes {
        assert!(
            n.dir.join("pki/peer.crt").exists(),
            "peer certificate issued"
        );
    }
    // etcd's metric names and /health on each member.
    let mut leaders = 0.0;
    for n in &nodes {
        let m = store_metrics(n);
        assert_eq!(sample(&m, "etcd_server_has_leader"), Some(1.0), "{m}");
        leaders += sample(&m, "etcd_server_is_leader").unwrap_or(0.0);
        assert!(sample(&m, "etcd_server_leader_changes_seen_total").unwrap_or(0.0) >= 1.0);
        assert!(sample(&m, "etcd_disk_wal_fsync_duration_seconds_count").unwrap_or(0.0) > 0.0);
        assert!(sample(&m, "etcd_debugging_mvcc_current_revision").unwrap_or(0.0) > 1.0);
        let (code, health) = http_get(n.metrics_port, "/health").expect("health answers");
        assert_eq!(
            (code, health.as_str()),
            (200, r#"{"health":"true","reason":""}"#)
        );
    }
    assert_eq!(
        leaders, 1.0,
        "exactly one member reports etcd_server_is_leader 1"
    );

    // Every server sees the same cluster, and the store check is reported.
    for n in &nodes {
        let s = n.server();
        let ns = kubectl_ok(s, &["get", "ns", "-o", "name"]).expect("get ns");
        for want in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            assert!(ns.contains(&format!("namespace/{want}")), "{ns}");
        }
        let ready = kubectl_ok(s, &["get", "--raw", "/readyz?verbose"]).expect("readyz");
        assert!(ready.contains("[+]etcd ok"), "{ready}");
    }
    let follower = (leader + 1) % 3;
    kubectl_ok(
        nodes[follower].server(),
        &["create", "configmap", "before", "--from-literal=k=v1"],
    )
    .expect("create through a follower");
    for n in &nodes {
        let v = kubectl_ok(
            n.server(),
            &["get", "configmap", "before", "-o", "jsonpath={.data.k}"],
        )
        .expect("read everywhere");
        assert_eq!(v, "v1");
    }

    // kill -9 the leader's server; the other two keep serving kubectl.
    nodes[leader].server.as_mut().expect("running").kill9();
    let killed_at = Instant::now();
    let survivors: Vec<usize> = (0..3).filter(|&i| i != leader).collect();
    let writer = survivors[0];
    let deadline = Instant::now() + Duration::from_secs(30);
    let gap = loop {
        match kubectl_ok(
            nodes[writer].server(),
            &["create", "configmap", "after", "--from-literal=k=v2"],
        ) {
            Ok(_) => break killed_at.elapsed(),
            // An attempt that timed out during the election may still have committed.
            Err(e) if e.contains("already exists") => break killed_at.elapsed(),
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "no write through a survivor 30 s after the leader died: {e}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    println!("stacked failover: first kubectl write {gap:?} after kill -9 of the leader node");
    let new_leader = agreed_leader(&nodes, &survivors, 30);
    assert_ne!(new_leader, leader);
    for &i in &survivors {
        let s = nodes[i].server();
        let names = kubectl_ok(s, &["get", "configmaps", "-o", "name"]).expect("list");
        assert!(
            names.contains("configmap/before") && names.contains("configmap/after"),
            "{names}"
        );
        kubectl_ok(
            s,
            &[
                "label",
                "configmap",
                "before",
                &format!("written-by=n{}", i + 1),
                "--overwrite",
            ],
        )
        .expect("writes through every survivor");
        let ready = kubectl_ok(s, &["get", "--raw", "/readyz"]).expect("readyz");
        assert_eq!(ready.trim(), "ok");
        let m = store_metrics(&nodes[i]);
        assert_eq!(sample(&m, "etcd_server_has_leader"), Some(1.0), "{m}");
        assert!(
            sample(&m, "etcd_server_leader_changes_seen_total").unwrap_or(0.0) >= 2.0,
            "the new leader is counted: {m}"
        );
    }

    // The killed server restarts on its data directory and catches up.
    nodes[leader].spawn();
    nodes[leader]
        .server
        .as_mut()
        .expect("spawned")
        .wait_ready(Duration::from_secs(60))
        .expect("restarted server ready");
    let v = kubectl_ok(
        nodes[leader].server(),
        &["get", "configmap", "after", "-o", "jsonpath={.data.k}"],
    )
    .expect("read on the restarted server");
    assert_eq!(v, "v2");
}
