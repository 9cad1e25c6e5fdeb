//! Dashboard benchmark (`cargo bench -p e2e --bench dashboard`): the web dashboard in headless
//! Chromium against a large cluster — 5,000 nodes and 20,000 pods — on the same 2-core
//! machine as the API server.
//!
//! 1. A bare `capstan server` (no scheduler, controllers or simulated kubelets: they would
//!    compete for the cores; the dashboard only reads).
//! 2. 5,000 Node objects (8 CPU, 32Gi, 110 pods, Ready) and 20,000 pods (100m CPU / 128Mi
//!    each, already bound by `spec.nodeName`, 4 per node) over 32 connections.
//! 3. A cluster-admin service-account token; Chromium opens `/dashboard/#token=…`.
//!    Page load = navigation → the overview's node table holds 5,000 rows and the pod card
//!    counts 20,000 (lists of both, the per-node request totals, the first render); then the
//!    pods view → its table holds 20,000 rows.
//! 4. Time to update, 5 times: with the pods table filtered to the new name, `kubectl create`
//!    of a pod (spawned at t0) → its row is in the page (polled over CDP every 10 ms).
//!    This includes kubectl's start-up (measured alone and printed).
//!
//! It prints figures and never fails on them; it exits non-zero only when a step errors.
//! `CAPSTAN_BENCH_NODES` / `CAPSTAN_BENCH_PODS` override the sizes for quick runs.

#[path = "../tests/dashboard/cdp.rs"]
mod cdp;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use e2e::{ServerProcess, capstan_bin};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::{Api, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;
use tokio::task::JoinSet;

const NODES: usize = 5_000;
const PODS: usize = 20_000;
const CONNS: usize = 32;
const ROUNDS: usize = 5;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dashboard bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn env_count(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Creates `count` objects `make(i)` over `CONNS` tasks (a few retries each).
async fn create_all<K, F>(api: Api<K>, count: usize, make: F) -> Result<()>
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
    let mut set = JoinSet::new();
    for c in 0..CONNS {
        let (api, make) = (api.clone(), make.clone());
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
                i += CONNS;
            }
            Ok::<(), anyhow::Error>(())
        });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    Ok(())
}

fn node(i: usize) -> Node {
    let name = format!("bench-node-{i}");
    let res = json!({"cpu": "8", "memory": "32Gi", "pods": "110"});
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": res, "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "bench node"}]}
    }))
    .unwrap_or_default()
}

fn pod(i: usize, nodes: usize) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("pod-{i}"), "namespace": "bench", "labels": {"app": "bench"}},
        "spec": {"nodeName": format!("bench-node-{}", i % nodes.max(1)),
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}]}
    }))
    .unwrap_or_default()
}

fn run() -> Result<()> {
    let nodes = env_count("CAPSTAN_BENCH_NODES", NODES);
    let pods = env_count("CAPSTAN_BENCH_PODS", PODS);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let tmp = tempfile::Builder::new()
        .prefix("capstan-dashboard-bench-")
        .tempdir()?;
    eprintln!(
        "data in {}; capstan binary {}",
        tmp.path().display(),
        capstan_bin().display()
    );
    let server = ServerProcess::start(&tmp.path().join("data"))?;

    let t = Instant::now();
    rt.block_on(async {
        let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        config.read_timeout = Some(Duration::from_secs(60));
        let client = kube::Client::try_from(config)?;
        create_all(Api::<Node>::all(client.clone()), nodes, node).await?;
        let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "bench"}}))?;
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await?;
        create_all(Api::<Pod>::namespaced(client, "bench"), pods, move |i| {
            pod(i, nodes)
        })
        .await?;
        Ok::<(), anyhow::Error>(())
    })?;
    eprintln!(
        "{nodes} nodes and {pods} pods created in {:.1} s",
        t.elapsed().as_secs_f64()
    );

    let kubectl = |args: &[&str]| -> Result<String> {
        let (ok, out, err) = server.kubectl(args)?;
        if !ok {
            bail!("kubectl {}: {err}", args.join(" "));
        }
        Ok(out)
    };
    kubectl(&["create", "serviceaccount", "bench", "-n", "default"])?;
    kubectl(&[
        "create",
        "clusterrolebinding",
        "bench",
        "--clusterrole=cluster-admin",
        "--serviceaccount=default:bench",
    ])?;
    let token = kubectl(&["create", "token", "bench", "-n", "default"])?
        .trim()
        .to_owned();

    let mut browser = cdp::Browser::launch()?;
    let limit = Duration::from_secs(300);
    let t = Instant::now();
    let page = browser.new_page(&format!(
        "{}/dashboard/#token={token}&view=overview",
        server.url
    ))?;
    browser.wait_for(
        &page,
        &format!(
            "(document.querySelector('[data-table=nodes] .tools .muted') || {{}}).textContent === '{nodes} items' && \
             (document.querySelector('[data-card=pods] .big') || {{}}).textContent === '{pods}'"
        ),
        limit,
        "overview with every node and pod",
    )?;
    let overview_load = t.elapsed();
    let shots = capstan_bin()
        .parent()
        .and_then(|p| p.parent())
        .map(|t| t.join("dashboard-screenshots"))
        .unwrap_or_default();
    browser.screenshot(&page, &shots.join("bench-overview.png"))?;

    let t = Instant::now();
    browser.eval(&page, "location.hash = '#/pods'; true")?;
    let want = pods;
    browser.wait_for(
        &page,
        &format!(
            "(document.querySelector('[data-table=pods] .tools .muted') || {{}}).textContent === '{want} items'"
        ),
        limit,
        "pods view with every pod",
    )?;
    let pods_view = t.elapsed();
    let heap = browser.eval(
        &page,
        "performance.memory ? performance.memory.usedJSHeapSize : 0",
    )?;

    // kubectl's own start-up and create, alone (so the page's share can be told apart).
    let t = Instant::now();
    kubectl(&[
        "create",
        "configmap",
        "bench-probe",
        "-n",
        "bench",
        "--from-literal=a=b",
    ])?;
    let kubectl_alone = t.elapsed();

    let mut updates = Vec::new();
    for round in 0..ROUNDS {
        let name = format!("bench-new-{round}");
        browser.eval(
            &page,
            &format!(
                "(() => {{ const f = document.querySelector('[data-table=pods] .filter'); f.value = '{name}'; \
                 f.dispatchEvent(new Event('input')); return true; }})()"
            ),
        )?;
        let t0 = Instant::now();
        let mut child = server.kubectl_spawn(&[
            "run",
            &name,
            "-n",
            "bench",
            "--image=registry.k8s.io/pause:3.10",
            "--overrides={\"spec\":{\"nodeName\":\"bench-node-0\"}}",
        ])?;
        let deadline = t0 + Duration::from_secs(60);
        loop {
            let seen = browser.eval(
                &page,
                &format!("!!document.querySelector('[data-table=pods] .tr[data-name=\"{name}\"]')"),
            )?;
            if seen == json!(true) {
                updates.push(t0.elapsed());
                break;
            }
            if Instant::now() > deadline {
                bail!("{name} not seen in the page within 60 s");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.wait();
    }
    updates.sort();
    let median = updates[updates.len() / 2];

    println!();
    println!(
        "dashboard bench: {nodes} nodes, {pods} pods, headless Chromium, bare capstan server (machine shared; figures are indicative)"
    );
    println!(
        "  page load → overview complete          {:.2} s   (lists of nodes and pods, per-node requests, first render)",
        overview_load.as_secs_f64()
    );
    println!(
        "  overview → pods view complete          {:.2} s   (pods informer reused; {want} rows, virtualised)",
        pods_view.as_secs_f64()
    );
    println!(
        "  JS heap after both views               {:.0} MB",
        heap.as_f64().unwrap_or(0.0) / 1e6
    );
    println!(
        "  time to update (kubectl run → row)     median {:.0} ms, min {:.0} ms, max {:.0} ms over {ROUNDS}",
        median.as_secs_f64() * 1e3,
        updates[0].as_secs_f64() * 1e3,
        updates[updates.len() - 1].as_secs_f64() * 1e3
    );
    println!(
        "  of which kubectl alone (create cm)     {:.0} ms",
        kubectl_alone.as_secs_f64() * 1e3
    );
    Ok(())
}
