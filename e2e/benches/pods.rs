//! Pods that really run: `capstan server --nodes=2 --node-runtime=process` (containers are
//! host processes, `nodes/src/process/`), driven by kube-rs with the admin kubeconfig.
//!
//! Run with `make bench-pods` (`cargo bench -p e2e --bench pods`: `target/release/capstan`,
//! or `$CAPSTAN_BIN`). It is not a test: it prints figures and fails only when the server
//! cannot be started or a step errors or times out.
//!
//! Figures:
//!
//! 1. **pod start, one at a time**: 20 pods (`sleep 3600`, default service account, so a
//!    projected token is requested and written for each) created one after the other, each
//!    once the previous one is Running. Latency = from sending the create to the watch event
//!    (one watch of the namespace, opened before) that shows `status.phase: Running`.
//! 2. **pod start, 100 at once**: 100 pods created back to back by 16 concurrent
//!    creators, latency per pod as in 1 (scheduling, the node's pod worker, sandbox
//!    preparation, process start and the status write all queue here).
//! 3. **exec round trip**: 50 `Api::<Pod>::exec(["true"])` calls (kube-rs `ws`: WebSocket
//!    upgrade through the API server's pods/exec proxy to the node's kubelet API, `nsenter`
//!    of the container, the exit status read back), one after the other; and 10 `kubectl exec
//!    -- true` runs (a kubectl process each, as a user's script pays).
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
use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};
use kube::api::{Api, AttachParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::sync::Mutex;

/// Longest any step may take.
const CAP: Duration = Duration::from_secs(300);

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("pods bench failed: {e:#}");
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

fn run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let loop_ms = calibration_ms();
    let server = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=2", "--node-runtime=process"],
    )?;
    println!("pods bench: capstan server --nodes=2 --node-runtime=process");
    println!(
        "  machine speed: a fixed CPU loop took {loop_ms} ms (compare runs with similar figures)"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = rt.block_on(bench(&server));
    if result.is_err() {
        eprintln!("server log tail:\n{}", e2e::cli::tail(&server.log()));
    }
    result
}

fn pod(name: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "c".into(),
                image: Some("busybox".into()),
                command: Some(vec!["sleep".into(), "3600".into()]),
                ..Container::default()
            }],
            termination_grace_period_seconds: Some(0),
            ..PodSpec::default()
        }),
        ..Pod::default()
    }
}

/// p50, p99 and max of `v` in milliseconds.
fn summary(mut v: Vec<Duration>) -> String {
    if v.is_empty() {
        return "n/a".into();
    }
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1;
        v[i].as_secs_f64() * 1000.0
    };
    format!(
        "p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (n={})",
        at(0.50),
        at(0.99),
        at(1.0),
        v.len()
    )
}

/// When each pod was first seen Running, by a watch of `default` opened before any create.
type Seen = Arc<Mutex<HashMap<String, Instant>>>;

async fn watch_running(pods: Api<Pod>, seen: Seen) -> Result<()> {
    let rv = pods
        .list_metadata(&kube::api::ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(290), &rv)
        .await?
        .boxed();
    while let Some(ev) = stream.try_next().await? {
        if let WatchEvent::Added(p) | WatchEvent::Modified(p) = ev
            && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
            && let Some(name) = p.metadata.name
        {
            seen.lock().await.entry(name).or_insert_with(Instant::now);
        }
    }
    Ok(())
}

async fn wait_running(seen: &Seen, names: &[String], deadline: Instant) -> Result<()> {
    loop {
        let s = seen.lock().await;
        if names.iter().all(|n| s.contains_key(n)) {
            return Ok(());
        }
        let missing = names.iter().filter(|n| !s.contains_key(*n)).count();
        drop(s);
        if Instant::now() > deadline {
            bail!("{missing} pods not Running after {CAP:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn bench(server: &ServerProcess) -> Result<()> {
    let kubeconfig = Kubeconfig::read_from(&server.kubeconfig)?;
    let config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = kube::Client::try_from(config)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    // The default service account exists before pods that use it are admitted.
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    while sa.get_opt("default").await?.is_none() {
        if start.elapsed() > CAP {
            bail!("no default service account");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen: Seen = Arc::default();
    let watcher = tokio::spawn(watch_running(pods.clone(), seen.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;

    // 1. One at a time.
    let mut serial = Vec::new();
    for i in 0..20 {
        let name = format!("serial-{i}");
        let sent = Instant::now();
        pods.create(&PostParams::default(), &pod(&name)).await?;
        wait_running(&seen, std::slice::from_ref(&name), sent + CAP).await?;
        let at = seen.lock().await[&name];
        serial.push(at - sent);
    }
    println!(
        "  pod start (create → Running), one at a time: {}",
        summary(serial)
    );

    // 2. 100 at once, 16 creators.
    let names: Vec<String> = (0..100).map(|i| format!("burst-{i}")).collect();
    let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
    let began = Instant::now();
    futures_util::stream::iter(names.clone())
        .map(|name| {
            let pods = pods.clone();
            let sent = sent.clone();
            async move {
                let at = Instant::now();
                pods.create(&PostParams::default(), &pod(&name)).await?;
                sent.lock().await.insert(name, at);
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    wait_running(&seen, &names, began + CAP).await?;
    let all = began.elapsed();
    let (sent, s) = (sent.lock().await, seen.lock().await);
    let burst: Vec<Duration> = names.iter().map(|n| s[n] - sent[n]).collect();
    drop((sent, s));
    println!(
        "  pod start (create → Running), 100 at once: {}; all 100 Running after {:.1} s",
        summary(burst),
        all.as_secs_f64()
    );
    watcher.abort();

    // 3. Exec round trips.
    let mut rounds = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        let mut p = pods
            .exec("serial-0", ["true"], &AttachParams::default().stderr(false))
            .await
            .context("exec")?;
        let status = p.take_status().context("status")?;
        let status = status.await;
        if status.as_ref().and_then(|s| s.status.as_deref()) != Some("Success") {
            bail!("exec true: {status:?}");
        }
        p.join().await?;
        rounds.push(t.elapsed());
    }
    println!(
        "  exec round trip (kube-rs ws, `true`): {}",
        summary(rounds)
    );
    let mut rounds = Vec::new();
    for _ in 0..10 {
        let t = Instant::now();
        let (done, _, err) = server.kubectl(&["exec", "serial-0", "--", "true"])?;
        if !done {
            bail!("kubectl exec: {err}");
        }
        rounds.push(t.elapsed());
    }
    println!(
        "  exec round trip (kubectl exec -- true, a process each): {}",
        summary(rounds)
    );
    Ok(())
}
