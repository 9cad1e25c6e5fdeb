//! LoadBalancer address assignment latency: `capstan server` (controller manager on, so the
//! `service-lb` controller runs; no nodes, no scheduler) with `--service-lb-range` a /24 of
//! loopback, driven by kube-rs with the admin kubeconfig.
//!
//! Run with `make bench-servicelb` (`cargo bench -p e2e --bench servicelb`:
//! `target/release/capstan`, or `$CAPSTAN_BIN`). It is not a test: it prints figures and fails
//! only when the server cannot be started or a step errors or times out.
//!
//! Figures (latency = from sending the create to the watch event, one watch of the namespace
//! opened before, that shows `status.loadBalancer.ingress[0].ip`):
//!
//! 1. **one at a time**: 50 `type: LoadBalancer` Services, each created once the previous one
//!    has its address.
//! 2. **50 at once**: 50 more created back to back by 8 concurrent creators (the controller's
//!    level-triggered loop recomputes from its caches; this shows how the writes queue).
//!
//! Each prints p50/p99 (and max). The machine's CPU is shared: a fixed CPU loop's time is
//! printed with the figures, to compare runs.

use std::collections::HashMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use e2e::ServerProcess;
use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::Mutex;

/// Longest any step may take.
const CAP: Duration = Duration::from_secs(120);
/// Services per figure.
const N: usize = 50;

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("servicelb bench failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Milliseconds a fixed integer loop takes on this machine (the VM's speed drifts).
fn calibration_ms() -> u128 {
    let start = Instant::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..200_000_000u64 {
        x = std::hint::black_box(x.rotate_left(5) ^ i).wrapping_mul(0x0100_0000_01b3);
    }
    std::hint::black_box(x);
    start.elapsed().as_millis()
}

/// When each Service was sent, and when its address was first seen.
#[derive(Default)]
struct Times {
    sent: HashMap<String, Instant>,
    seen: HashMap<String, Instant>,
}

fn service(name: &str) -> Result<Service> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 8080}]},
    }))?)
}

fn has_address(svc: &Service) -> bool {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .and_then(|i| i.first())
        .and_then(|i| i.ip.as_ref())
        .is_some()
}

/// Follows the namespace's Services and records when each first has an address.
fn follow(api: Api<Service>, times: Arc<Mutex<Times>>) -> tokio::task::JoinHandle<Result<()>> {
    tokio::spawn(async move {
        let mut stream = api
            .watch(&WatchParams::default().timeout(290), "0")
            .await?
            .boxed();
        while let Some(event) = stream.try_next().await? {
            if let WatchEvent::Added(svc) | WatchEvent::Modified(svc) = event
                && has_address(&svc)
            {
                let name = svc.metadata.name.clone().unwrap_or_default();
                times
                    .lock()
                    .await
                    .seen
                    .entry(name)
                    .or_insert_with(Instant::now);
            }
        }
        Ok(())
    })
}

async fn wait_seen(times: &Mutex<Times>, names: &[String]) -> Result<()> {
    let deadline = Instant::now() + CAP;
    loop {
        {
            let t = times.lock().await;
            if names.iter().all(|n| t.seen.contains_key(n)) {
                return Ok(());
            }
        }
        if Instant::now() > deadline {
            bail!("not every Service got an address within {CAP:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn report(what: &str, times: &Times, names: &[String]) {
    let mut ms: Vec<f64> = names
        .iter()
        .filter_map(|n| Some(times.seen.get(n)?.duration_since(*times.sent.get(n)?)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let pick = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
    println!(
        "{what:<42} n={:<3} p50 {:>7.1} ms   p99 {:>7.1} ms   max {:>7.1} ms",
        ms.len(),
        pick(0.50),
        pick(0.99),
        ms.last().copied().unwrap_or(0.0)
    );
}

fn run() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let server = ServerProcess::start_raw(
        &tmp.path().join("data"),
        &[
            "--nodes=0",
            "--disable-scheduler",
            "--service-lb-range=127.0.251.0/24",
        ],
    )
    .context("starting capstan server")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
        let client = kube::Client::try_from(config)?;
        let api: Api<Service> = Api::namespaced(client, "default");
        let times = Arc::new(Mutex::new(Times::default()));
        let watcher = follow(api.clone(), Arc::clone(&times));
        println!("calibration loop: {} ms", calibration_ms());

        // 1. One at a time.
        let names: Vec<String> = (0..N).map(|i| format!("seq-{i}")).collect();
        for name in &names {
            times.lock().await.sent.insert(name.clone(), Instant::now());
            api.create(&PostParams::default(), &service(name)?).await?;
            wait_seen(&times, std::slice::from_ref(name)).await?;
        }
        report(
            "LB address, one at a time (create → ip)",
            &*times.lock().await,
            &names,
        );

        // 2. At once, 8 creators.
        let burst: Vec<String> = (0..N).map(|i| format!("burst-{i}")).collect();
        let mut creators = Vec::new();
        for chunk in burst.chunks(N.div_ceil(8)) {
            let (api, times, chunk) = (api.clone(), Arc::clone(&times), chunk.to_vec());
            creators.push(tokio::spawn(async move {
                for name in chunk {
                    times.lock().await.sent.insert(name.clone(), Instant::now());
                    api.create(&PostParams::default(), &service(&name)?).await?;
                }
                anyhow::Ok(())
            }));
        }
        for c in creators {
            c.await??;
        }
        wait_seen(&times, &burst).await?;
        report(
            "LB address, 50 at once (8 creators)",
            &*times.lock().await,
            &burst,
        );
        watcher.abort();
        println!("calibration loop: {} ms", calibration_ms());
        anyhow::Ok(())
    })
}
