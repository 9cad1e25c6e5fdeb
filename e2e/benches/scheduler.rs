//! Scheduler benchmark (`make bench-scheduler`): 5,000 nodes, 10,000 pending pods, scheduled
//! and bound through the API by `capstan scheduler` running as its own process, on the same
//! 2-core machine as the API server and this client.
//!
//! 1. A bare `capstan server` (`--nodes=0 --disable-controller-manager --disable-scheduler
//!    --disable-admission-plugins=ServiceAccount`).
//! 2. 5,000 Node objects (8 CPU, 32Gi, 110 pods, Ready, hostname and zone labels over 3
//!    zones) created by the bench itself with their status (as the API allows for nodes), over
//!    32 connections. The simulated kubelets (`capstan nodes`) are deliberately not run: their
//!    lease renewals and pod status updates would compete with the scheduler for the two
//!    cores, and scheduling does not need them.
//! 3. 10,000 pods (one container, 100m CPU / 128Mi) created in namespace `bench` over 32
//!    connections while nothing schedules them.
//! 4. A watch of the namespace's pods is opened, then `capstan scheduler --kubeconfig
//!    <admin>` is spawned. The figures: pods/s = 10,000 / (last pod seen bound − scheduler
//!    spawn), which includes the scheduler's start-up and initial lists; the steady rate
//!    between the first and last binding; and the scheduling latency of each pod = the time
//!    the watch saw it bound − max(its creation, the scheduler spawn) (p50/p99).
//!
//! Target (issue 5): ≥ 2,000 pods/s end to end. It never fails on numbers; it exits non-zero
//! only when a step errors or times out (10 minutes for the scheduling step).

use std::collections::HashMap;
use std::pin::pin;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::{ServerProcess, capstan_bin};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::Mutex;
use tokio::task::JoinSet;
use tokio_stream::StreamExt;

/// Defaults; `CAPSTAN_BENCH_NODES` / `CAPSTAN_BENCH_PODS` override them for quick runs.
const NODES: usize = 5_000;
const PODS: usize = 10_000;
const CONNS: usize = 32;
const SCHEDULE_CAP: Duration = Duration::from_secs(600);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("scheduler bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Runs `count` creates of `make(i)` over `CONNS` tasks; returns the instant each finished.
async fn create_all<K, F>(api: Api<K>, count: usize, make: F) -> Result<Vec<Instant>>
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    F: Fn(usize) -> K + Send + Sync + 'static,
{
    let make = Arc::new(make);
    let done = Arc::new(Mutex::new(vec![Instant::now(); count]));
    let mut set = JoinSet::new();
    for c in 0..CONNS {
        let (api, make, done) = (api.clone(), make.clone(), done.clone());
        set.spawn(async move {
            let mut i = c;
            while i < count {
                let obj = make(i);
                let mut tries = 0;
                loop {
                    match api.create(&PostParams::default(), &obj).await {
                        Ok(_) => break,
                        Err(e) if tries < 5 => {
                            tries += 1;
                            eprintln!("create {i} failed ({e}); retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(e) => return Err(anyhow::Error::from(e).context(format!("create {i}"))),
                    }
                }
                done.lock().await[i] = Instant::now();
                i += CONNS;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    let v = done.lock().await.clone();
    Ok(v)
}

fn node(i: usize) -> Node {
    let name = format!("bench-node-{i}");
    let zone = ["zone-a", "zone-b", "zone-c"][i % 3];
    let res = json!({"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": zone}},
        "status": {"capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "bench node"}]}
    }))
    .unwrap_or_default()
}

fn pod(i: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "namespace": "bench", "labels": {"app": "bench"}},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    }))
    .unwrap_or_default()
}

fn run() -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let keep = std::env::var_os("CAPSTAN_BENCH_KEEP").is_some();
    let tmp = tempfile::Builder::new()
        .prefix("capstan-scheduler-bench-")
        .tempdir()?;
    let data = tmp.path().join("data");
    eprintln!(
        "data in {}; capstan binary {}",
        tmp.path().display(),
        capstan_bin().display()
    );
    let server = ServerProcess::start_raw(
        &data,
        &[
            "--nodes=0",
            "--disable-controller-manager",
            "--disable-scheduler",
            "--disable-admission-plugins=ServiceAccount",
        ],
    )?;
    let result = rt.block_on(bench(&server));
    if keep {
        let path = tmp.keep();
        eprintln!("kept {}", path.display());
    }
    drop(server);
    result
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn bench(server: &ServerProcess) -> Result<()> {
    let nodes = env_count("CAPSTAN_BENCH_NODES", NODES);
    let pods = env_count("CAPSTAN_BENCH_PODS", PODS);
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(60));
    let client = kube::Client::try_from(config)?;

    let t = Instant::now();
    create_all(Api::<Node>::all(client.clone()), nodes, node).await?;
    // Nodes keep the status they are created with; make sure, else set it.
    let probe = Api::<Node>::all(client.clone()).get("bench-node-0").await?;
    if probe
        .status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .is_none()
    {
        bail!("the API server dropped node status on create");
    }
    eprintln!(
        "{nodes} nodes created in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}}))?;
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await?;
    let t = Instant::now();
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "bench");
    let created = create_all(pods_api.clone(), pods, pod).await?;
    let create_secs = t.elapsed().as_secs_f64();
    eprintln!(
        "{pods} pods created in {create_secs:.1} s ({:.0}/s)",
        pods as f64 / create_secs
    );

    // Watch bindings, then start the scheduler.
    let mut stream = pin!(watcher(pods_api.clone(), watcher::Config::default()));
    let mut bound: HashMap<String, Instant> = HashMap::new();
    loop {
        match stream.next().await {
            Some(Ok(watcher::Event::InitDone)) => break,
            Some(Ok(_)) => {}
            Some(Err(e)) => bail!("watch failed: {e}"),
            None => bail!("watch ended"),
        }
    }
    let log = std::fs::File::create(server.data_dir.with_extension("scheduler.log"))?;
    let spawned = Instant::now();
    let mut sched = Command::new(capstan_bin())
        .args(["scheduler", "--kubeconfig"])
        .arg(&server.kubeconfig)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("spawning capstan scheduler")?;
    let deadline = spawned + SCHEDULE_CAP;
    let mut first: Option<Instant> = None;
    let mut progress = Instant::now();
    while bound.len() < pods {
        let next = tokio::time::timeout_at(deadline.into(), stream.next()).await;
        let ev = match next {
            Err(_) => break,
            Ok(None) => bail!("watch ended"),
            Ok(Some(Err(e))) => {
                eprintln!("watch error: {e}");
                continue;
            }
            Ok(Some(Ok(ev))) => ev,
        };
        if let watcher::Event::Apply(p) | watcher::Event::InitApply(p) = ev
            && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        {
            let now = Instant::now();
            let name = p.metadata.name.clone().unwrap_or_default();
            bound.entry(name).or_insert(now);
            first.get_or_insert(now);
            if progress.elapsed() > Duration::from_secs(2) {
                progress = now;
                eprintln!(
                    "{} pods bound after {:.1} s",
                    bound.len(),
                    spawned.elapsed().as_secs_f64()
                );
            }
        }
    }
    let last = bound.values().max().copied().unwrap_or(spawned);
    let _ = sched.kill();
    let _ = sched.wait();
    let n = bound.len();
    let total = last.duration_since(spawned).as_secs_f64();
    let steady = first
        .map(|f| last.duration_since(f).as_secs_f64())
        .unwrap_or(0.0);
    let mut lat: Vec<Duration> = bound
        .iter()
        .filter_map(|(name, t)| {
            let i: usize = name.strip_prefix("pod-")?.parse().ok()?;
            let start = created.get(i).copied()?.max(spawned);
            Some(t.saturating_duration_since(start))
        })
        .collect();
    lat.sort();
    println!();
    println!("scheduler bench: {nodes} nodes, {pods} pods, capstan scheduler as its own process");
    println!("  pods bound                    {n}/{pods}");
    println!(
        "  pods/s end to end             {:.0}   (from scheduler spawn to last binding, {total:.2} s; target >= 2000)",
        n as f64 / total.max(1e-9)
    );
    println!(
        "  pods/s first..last binding    {:.0}   ({steady:.2} s)",
        n as f64 / steady.max(1e-9)
    );
    println!(
        "  scheduling latency p50 / p99  {:.0} ms / {:.0} ms   (bound seen − max(created, scheduler spawn))",
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "  time to first binding         {:.2} s   (start-up, leader election, initial lists)",
        first
            .map(|f| f.duration_since(spawned).as_secs_f64())
            .unwrap_or(0.0)
    );
    if n < pods {
        bail!("only {n} of {pods} pods were bound within {SCHEDULE_CAP:?}");
    }
    Ok(())
}
