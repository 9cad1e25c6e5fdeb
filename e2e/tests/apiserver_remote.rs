//! The API server on a remote store (issue 4: `capstan apiserver --etcd-servers=…`): the same
//! etcd v3 client code against a real etcd (Debian's etcd 3.4) and against a 3-member
//! `capstan store` cluster.
//!
//! - `capstan apiserver --etcd-servers=<etcd>`: stock kubectl creates, reads, patches and
//!   deletes objects; a stale `resourceVersion` is a 409; `kubectl get --watch` sees every
//!   change; the objects are in etcd (`etcdctl`); a restarted API server finds them again.
//! - `capstan server --etcd-servers=<3 capstan store members>` (scheduler, controllers and
//!   simulated nodes in-process, all as API clients): a Deployment rolls out; after
//!   `kill -9` of the store's leader, kubectl writes work again once the store has failed
//!   over.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use e2e::etcd_cluster::Cluster;
use e2e::{ServerProcess, etcdctl, free_port};

/// A Debian `etcd` on free loopback ports; killed on drop.
struct Etcd {
    child: Child,
    url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_etcd(dir: &Path) -> Result<Etcd> {
    let url = format!("http://127.0.0.1:{}", free_port());
    let peer = format!("http://127.0.0.1:{}", free_port());
    let child = Command::new("etcd")
        .arg("--data-dir")
        .arg(dir.join("etcd"))
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
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("spawning etcd (apt-get install etcd-server)")?;
    let etcd = Etcd { child, url };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !etcdctl(&etcd.url, &["endpoint", "health"], None)?.0 {
        if Instant::now() > deadline {
            bail!("etcd did not become healthy");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(etcd)
}

/// `capstan apiserver` on a free port, waiting for `/readyz`.
fn start_apiserver(data_dir: &Path, servers: &str) -> Result<ServerProcess> {
    let port = free_port();
    let mut p = ServerProcess::spawn_command(
        "apiserver",
        data_dir,
        port,
        &[
            "--etcd-servers",
            servers,
            "--disable-admission-plugins=ServiceAccount",
        ],
    )?;
    p.wait_ready(Duration::from_secs(30))?;
    Ok(p)
}

#[test]
fn apiserver_on_a_real_etcd() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let etcd = start_etcd(dir.path())?;
    let api_dir = dir.path().join("api");
    let mut api = start_apiserver(&api_dir, &etcd.url)?;

    let (ok, out, err) = api.kubectl(&["create", "configmap", "c1", "--from-literal=a=1"])?;
    assert!(ok, "{out} {err}");
    let (ok, rv, err) = api.kubectl(&[
        "get",
        "configmap",
        "c1",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ])?;
    assert!(ok, "{err}");
    // resourceVersion is etcd's revision of the key.
    let (ok, raw, err) = etcdctl(
        &etcd.url,
        &["get", "/registry/core/configmaps/default/c1", "-w", "json"],
        None,
    )?;
    assert!(ok, "{err}");
    assert!(
        raw.contains(&format!("\"mod_revision\":{}", rv.trim())),
        "etcd's mod_revision is the resourceVersion {rv}: {raw}"
    );

    // A watch sees the later changes.
    let mut watch = api.kubectl_spawn(&["get", "configmaps", "--watch", "-o", "name"])?;
    std::thread::sleep(Duration::from_millis(500));
    let (ok, out, err) =
        api.kubectl(&["patch", "configmap", "c1", "-p", r#"{"data":{"b":"2"}}"#])?;
    assert!(ok, "{out} {err}");
    let (ok, out, err) = api.kubectl(&["create", "configmap", "c2"])?;
    assert!(ok, "{out} {err}");

    // A stale resourceVersion is a conflict.
    let stale = format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"c1","namespace":"default","resourceVersion":"{}"}},"data":{{"a":"old"}}}}"#,
        rv.trim()
    );
    let file = dir.path().join("stale.json");
    std::fs::write(&file, stale)?;
    let (ok, out, err) = api.kubectl(&["replace", "-f", &file.to_string_lossy()])?;
    assert!(!ok, "a stale replace succeeded: {out}");
    assert!(
        err.contains("the object has been modified"),
        "expected a 409 Conflict: {err}"
    );

    let (ok, out, err) = api.kubectl(&["delete", "configmap", "c2"])?;
    assert!(ok, "{out} {err}");
    std::thread::sleep(Duration::from_millis(500));
    let _ = watch.kill();
    let seen = watch.wait_with_output()?;
    let seen = String::from_utf8_lossy(&seen.stdout);
    assert!(
        seen.matches("configmap/c1").count() >= 2 && seen.matches("configmap/c2").count() >= 2,
        "the watch saw the patch, the create and the delete: {seen}"
    );

    // Another API server process on the same etcd finds everything again.
    api.kill9();
    let api2 = start_apiserver(&api_dir, &etcd.url)?;
    let (ok, out, err) = api2.kubectl(&["get", "configmap", "c1", "-o", "jsonpath={.data.b}"])?;
    assert!(ok && out.trim() == "2", "{out} {err}");
    let (ok, out, _) = api2.kubectl(&["get", "configmap", "c2"])?;
    assert!(!ok, "c2 was deleted: {out}");
    Ok(())
}

#[test]
fn control_plane_on_a_capstan_store_cluster_survives_a_store_failover() -> Result<()> {
    let mut store = Cluster::start(3, &[])?;
    store.wait_leader(Duration::from_secs(60))?;
    let servers = store.endpoints();
    let dir = tempfile::tempdir()?;
    let api = ServerProcess::start_cluster(
        &dir.path().join("cp"),
        &["--etcd-servers", &servers, "--nodes=2"],
    )?;

    let (ok, out, err) = api.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=2",
    ])?;
    assert!(ok, "{out} {err}");
    let (ok, out, err) = api.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    assert!(ok, "rollout: {out} {err}\n{}", api.log());
    let (ok, keys, err) = etcdctl(
        &servers,
        &["get", "/registry/", "--prefix", "--keys-only"],
        None,
    )?;
    assert!(ok, "{err}");
    assert!(
        keys.contains("/registry/apps/deployments/default/web"),
        "the Deployment is in the store cluster: {keys}"
    );

    // kill -9 the store's leader: kubectl writes work again after the failover.
    let leader = store.wait_leader(Duration::from_secs(30))?;
    store.members[leader].kill9();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    loop {
        let (ok, _, err) = api.kubectl(&["create", "configmap", "after-failover"])?;
        // AlreadyExists: an earlier attempt was answered with a timeout (indeterminate, as
        // etcd's "possibly due to previous leader failure") yet committed.
        if ok || err.contains("already exists") {
            break;
        }
        if Instant::now() > deadline {
            bail!("no write after the store failover: {err}\n{}", api.log());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "first kubectl write {:.2} s after kill -9 of the store leader",
        started.elapsed().as_secs_f64()
    );
    // A write caught in flight by the failover fails as a timeout (etcd's "possibly due to
    // previous leader failure"): clients retry those.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (ok, out, err) = api.kubectl(&["scale", "deployment/web", "--replicas=3"])?;
        if ok {
            break;
        }
        if Instant::now() > deadline {
            bail!("scale after the failover: {out} {err}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let (ok, out, err) = api.kubectl(&["rollout", "status", "deployment/web", "--timeout=120s"])?;
    assert!(ok, "rollout after failover: {out} {err}");
    Ok(())
}
