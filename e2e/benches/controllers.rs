//! Controller benchmark (`make bench-controllers`): a Deployment of 10,000 replicas on 1,000
//! simulated nodes, everything in one `capstan server` (API server, controllers, scheduler,
//! simulated kubelets) on this machine.
//!
//! 1. `capstan server --nodes=1000` (whole cluster); wait until 1,000 nodes are Ready.
//! 2. A watch of namespace `bench`'s pods is opened, then one Deployment of 10,000 replicas is
//!    created (t0).
//! 3. Figures: time until every pod exists (the ReplicaSet controller's creation rate), is
//!    bound (scheduler), and is Running (simulated kubelets), all from t0; pods/s =
//!    10,000 / time-to-all-Running; and when `kubectl rollout status`'s condition holds
//!    (deployment status: updated = available = 10,000).
//!
//! Target (issue 6): all Running in ≤ 20 s. It never fails on numbers; it exits non-zero only
//! when a step errors or times out (10 minutes). `CAPSTAN_BENCH_NODES` /
//! `CAPSTAN_BENCH_REPLICAS` override the sizes for quick runs.

use std::collections::HashSet;
use std::pin::pin;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::ServerProcess;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::watcher;
use serde_json::json;
use tokio_stream::StreamExt;

const NODES: usize = 1_000;
const REPLICAS: usize = 10_000;
const CAP: Duration = Duration::from_secs(600);

/// A pod as the bench's watch reads it: only what it counts. The bench shares the machine's
/// two cores with the server, so it decodes no more than it needs (serde skips the rest).
#[derive(Clone, Debug, serde::Deserialize)]
struct Seen {
    #[serde(deserialize_with = "seen_meta")]
    metadata: ObjectMeta,
    spec: Option<SeenSpec>,
    status: Option<SeenStatus>,
}

#[derive(Clone, Debug, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct SeenSpec {
    node_name: Option<String>,
}

#[derive(Clone, Debug, serde::Deserialize)]
struct SeenStatus {
    phase: Option<String>,
}

/// `metadata` reduced to what the watcher needs (name, namespace, resourceVersion).
fn seen_meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        resource_version: Option<String>,
    }
    let m = <Meta as serde::Deserialize>::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        resource_version: m.resource_version,
        ..ObjectMeta::default()
    })
}

impl k8s_openapi::Resource for Seen {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for Seen {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("controllers bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Milliseconds a fixed integer loop takes on this machine: the bench's figures move with
/// the VM's speed, which drifts by tens of per cent within minutes here.
fn calibration_ms() -> u128 {
    let start = Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..200_000_000u64 {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x0100_0000_01b3);
    }
    std::hint::black_box(x);
    start.elapsed().as_millis()
}

/// CPU seconds (user + system, all threads) the process `pid` has used, from
/// `/proc/<pid>/stat` (Linux; clock ticks of USER_HZ = 100).
fn server_cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces) start at state, field 3.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i - 3)?.parse::<f64>().ok();
    Some((ticks(14)? + ticks(15)?) / 100.0)
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run() -> Result<()> {
    let nodes = env("CAPSTAN_BENCH_NODES", NODES);
    let replicas = env("CAPSTAN_BENCH_REPLICAS", REPLICAS);
    let dir = tempfile::tempdir()?;
    let nodes_flag = format!("--nodes={nodes}");
    let loop_ms = calibration_ms();
    let server = ServerProcess::start_cluster(&dir.path().join("data"), &[&nodes_flag])?;
    println!(
        "controllers bench: {replicas} replicas on {nodes} simulated nodes, one capstan server"
    );
    println!(
        "  machine speed: a fixed CPU loop took {loop_ms} ms (this VM's speed drifts; compare \
         runs with similar figures)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(bench(&server, nodes, replicas));
    if result.is_err() {
        let log = server.log();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        eprintln!(
            "server log tail:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        );
    }
    result
}

async fn bench(server: &ServerProcess, nodes: usize, replicas: usize) -> Result<()> {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;

    // 1. Nodes Ready.
    let start = Instant::now();
    let node_api: Api<Node> = Api::all(client.clone());
    loop {
        let list = node_api.list(&ListParams::default()).await?;
        let ready = list
            .items
            .iter()
            .filter(|n| {
                n.status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            })
            .count();
        if ready >= nodes {
            break;
        }
        if start.elapsed() > CAP {
            bail!("only {ready}/{nodes} nodes Ready after {CAP:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!(
        "  {nodes} nodes Ready after {:.1} s",
        start.elapsed().as_secs_f64()
    );

    let ns_api: Api<Namespace> = Api::all(client.clone());
    ns_api
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "bench"}}))?,
        )
        .await?;
    let pods: Api<Seen> = Api::namespaced(client.clone(), "bench");
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "bench");

    // 2. Watch, then create the deployment.
    let mut stream = pin!(watcher(pods.clone(), watcher::Config::default()));
    // Wait for the watch to be established (its initial list ends).
    while let Some(ev) = stream.next().await {
        if matches!(ev?, watcher::Event::InitDone) {
            break;
        }
    }
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "big"},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "big"}},
            "template": {
                "metadata": {"labels": {"app": "big"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
            }
        }
    }))?;
    let cpu0 = server_cpu_seconds(server.pid());
    let t0 = Instant::now();
    deployments
        .create(&PostParams::default(), &deployment)
        .await?;
    let mut created: HashSet<String> = HashSet::new();
    let mut bound: HashSet<String> = HashSet::new();
    let mut running: HashSet<String> = HashSet::new();
    let (mut t_created, mut t_bound, mut t_running) = (None, None, None);
    let mut first_running = None;
    // Progress: counts every 2 s (shows which stage trails: creation, binding or kubelets).
    let mut next_report = Duration::from_secs(2);
    while t_running.is_none() {
        if t0.elapsed() >= next_report {
            println!(
                "    {:>5.1} s: created {:>5}  bound {:>5}  Running {:>5}",
                t0.elapsed().as_secs_f64(),
                created.len(),
                bound.len(),
                running.len()
            );
            next_report += Duration::from_secs(2);
        }
        let ev = tokio::time::timeout(CAP.saturating_sub(t0.elapsed()), stream.next())
            .await
            .context("timed out waiting for pods")?;
        let Some(ev) = ev else { bail!("watch ended") };
        let pods_seen = match ev? {
            watcher::Event::Apply(p) | watcher::Event::InitApply(p) => vec![p],
            _ => Vec::new(),
        };
        for p in pods_seen {
            let name = p.metadata.name.clone().unwrap_or_default();
            created.insert(name.clone());
            if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                bound.insert(name.clone());
            }
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running") {
                running.insert(name);
                first_running.get_or_insert_with(|| t0.elapsed());
            }
        }
        if t_created.is_none() && created.len() >= replicas {
            t_created = Some(t0.elapsed());
        }
        if t_bound.is_none() && bound.len() >= replicas {
            t_bound = Some(t0.elapsed());
        }
        if running.len() >= replicas {
            t_running = Some(t0.elapsed());
        }
    }
    let all_running = t_running.unwrap_or_default();
    // 3. The deployment's status catches up (what `kubectl rollout status` waits for).
    let t_status = loop {
        let d = deployments.get("big").await?;
        let st = d.status.unwrap_or_default();
        let r = i32::try_from(replicas).unwrap_or(i32::MAX);
        if st.updated_replicas == Some(r)
            && st.available_replicas == Some(r)
            && st.replicas == Some(r)
        {
            break t0.elapsed();
        }
        if t0.elapsed() > CAP {
            bail!("deployment status did not reach {replicas} available");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let cpu = server_cpu_seconds(server.pid())
        .zip(cpu0)
        .map(|(now, then)| now - then);
    // Events trail the pods (they are best effort, in their own lanes): how many exist now.
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), "bench");
    let page = events.list(&ListParams::default().limit(1)).await?;
    let recorded = page.metadata.remaining_item_count.unwrap_or(0)
        + i64::try_from(page.items.len()).unwrap_or(0);
    let secs = |d: Option<Duration>| d.map_or(f64::NAN, |d| d.as_secs_f64());
    println!(
        "  all {replicas} pods created after   {:>7.2} s  ({:.0} pods/s)",
        secs(t_created),
        replicas as f64 / secs(t_created)
    );
    println!(
        "  all {replicas} pods bound after     {:>7.2} s",
        secs(t_bound)
    );
    println!(
        "  first pod Running after      {:>7.2} s",
        secs(first_running)
    );
    println!(
        "  all {replicas} pods Running after   {:>7.2} s  ({:.0} pods/s)   target: <= 20 s",
        all_running.as_secs_f64(),
        replicas as f64 / all_running.as_secs_f64()
    );
    println!(
        "  deployment status available  {:>7.2} s  (rollout status condition)",
        t_status.as_secs_f64()
    );
    if let Some(cpu) = cpu {
        println!(
            "  server CPU since t0          {cpu:>7.1} s  ({:.2} ms per pod, whole cluster)",
            cpu * 1000.0 / replicas as f64
        );
    }
    println!(
        "  events in namespace by then  {recorded:>7}    (per pod, once all are written: \
         Scheduled, Pulled, Created, Started)"
    );
    Ok(())
}
