//! The fleet: lays out the nodes' addresses, registers them, runs their heartbeats, and
//! feeds the pods bound to them to per-pod tasks from ONE watch of all bound pods
//! (`spec.nodeName!=`), however many nodes there are.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::Options;
use crate::api::FleetApi;
use crate::cidr::Cidr;
use crate::node::SimNode;

/// Registrations in flight at once.
const REGISTER_CONCURRENCY: usize = 32;

/// Plans the nodes: names, zones round-robin, pod CIDRs and InternalIPs. Nodes that already
/// exist keep theirs; new ones take the lowest subnets no other Node uses.
pub(crate) async fn plan(api: &FleetApi, opts: &Options) -> anyhow::Result<Vec<Arc<SimNode>>> {
    let cluster = Cidr::parse(&opts.cluster_cidr).map_err(anyhow::Error::msg)?;
    let node_ips = Cidr::parse(&opts.node_ip_range).map_err(anyhow::Error::msg)?;
    let zones: Vec<&str> = opts
        .zones
        .iter()
        .map(String::as_str)
        .filter(|z| !z.is_empty())
        .collect();
    if zones.is_empty() {
        anyhow::bail!("--zones must name at least one zone");
    }
    let existing = kube::Api::<Node>::all(api.client().clone())
        .list(&Default::default())
        .await?;
    let mut taken_subnets = HashSet::new();
    let mut taken_ips = HashSet::new();
    let mut mine: HashMap<String, (Option<Cidr>, Option<Ipv4Addr>)> = HashMap::new();
    let names: Vec<String> = (0..opts.count)
        .map(|i| format!("{}{i}", opts.name_prefix))
        .collect();
    let wanted: HashSet<&str> = names.iter().map(String::as_str).collect();
    for n in &existing.items {
        let cidr = n
            .spec
            .as_ref()
            .and_then(|s| s.pod_cidr.as_deref())
            .and_then(|c| Cidr::parse(c).ok());
        let ip = n
            .status
            .as_ref()
            .and_then(|s| s.addresses.as_ref())
            .and_then(|a| a.iter().find(|a| a.type_ == "InternalIP"))
            .and_then(|a| a.address.parse::<Ipv4Addr>().ok());
        if let Some(c) = cidr {
            taken_subnets.insert(c);
        }
        if let Some(ip) = ip {
            taken_ips.insert(ip);
        }
        let name = n.metadata.name.clone().unwrap_or_default();
        if wanted.contains(name.as_str()) {
            mine.insert(name, (cidr, ip));
        }
    }
    let mut next_subnet = 0u64;
    let mut next_ip = 1u64;
    let mut nodes = Vec::with_capacity(opts.count);
    for (i, name) in names.into_iter().enumerate() {
        let (cidr, ip) = mine.remove(&name).unwrap_or((None, None));
        let cidr =
            match cidr {
                Some(c) => c,
                None => loop {
                    let c = cluster.subnet(opts.node_cidr_mask_size, next_subnet).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--cluster-cidr {} has no room for another /{} pod CIDR (node {name})",
                        opts.cluster_cidr,
                        opts.node_cidr_mask_size
                    )
                })?;
                    next_subnet += 1;
                    if taken_subnets.insert(c) {
                        break c;
                    }
                },
            };
        let ip = match ip {
            Some(ip) => ip,
            None => loop {
                let ip = node_ips.nth(next_ip).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--node-ip-range {} is full (node {name})",
                        opts.node_ip_range
                    )
                })?;
                next_ip += 1;
                if taken_ips.insert(ip) {
                    break ip;
                }
            },
        };
        // Process nodes are reached on loopback: their kubelet API listens there and their
        // pods share the host's network.
        let ip = if opts.runtime == crate::Runtime::Process {
            Ipv4Addr::LOCALHOST
        } else {
            ip
        };
        let zone = zones[i % zones.len()].to_owned();
        nodes.push(Arc::new(SimNode::new(name, zone, cidr, ip)));
    }
    Ok(nodes)
}

/// Registers every node (bounded concurrency) and starts each one's heartbeat task as soon
/// as it is registered; logs progress. Returns when all are registered (or `shutdown`).
pub(crate) async fn register_all(
    api: &FleetApi,
    opts: &Arc<Options>,
    nodes: &[Arc<SimNode>],
    shutdown: &CancellationToken,
    heartbeats: &mut tokio::task::JoinSet<()>,
) {
    let started = Instant::now();
    let total = nodes.len();
    let mut done = 0usize;
    let mut last_log = Instant::now();
    let mut registrations = futures_util::stream::iter(nodes.iter().cloned())
        .map(|node| {
            let api = api.clone();
            let opts = opts.clone();
            async move {
                let mut delay = std::time::Duration::from_millis(500);
                loop {
                    match node.register(&api, &opts).await {
                        Ok(uid) => return (node, uid),
                        Err(e) => {
                            tracing::warn!(node = %node.name, error = %e, "unable to register node, will retry");
                            tokio::time::sleep(delay).await;
                            delay = (delay * 2).min(std::time::Duration::from_secs(7));
                        }
                    }
                }
            }
        })
        .buffer_unordered(REGISTER_CONCURRENCY);
    loop {
        let next = tokio::select! {
            () = shutdown.cancelled() => return,
            n = registrations.next() => n,
        };
        let Some((node, uid)) = next else { break };
        done += 1;
        let api = api.clone();
        let opts = opts.clone();
        let token = shutdown.clone();
        heartbeats.spawn(async move { node.heartbeat(api, &opts, uid, token).await });
        if last_log.elapsed().as_secs() >= 5 {
            tracing::info!(registered = done, total, elapsed = ?started.elapsed(), "registering nodes");
            last_log = Instant::now();
        }
    }
    tracing::info!(
        nodes = total,
        elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "all nodes registered"
    );
}

/// Watches every pod bound to a node and hands those on our nodes to one task each (by
/// uid), until `shutdown`. The watch re-lists after errors; pods missing from a re-list
/// are treated as deleted.
pub(crate) async fn watch_pods(
    api: FleetApi,
    nodes: Arc<HashMap<String, Arc<SimNode>>>,
    opts: Arc<Options>,
    shutdown: CancellationToken,
) {
    // Decoded without managed fields, which no simulated kubelet reads.
    let pods = kube::Api::<lean::LeanPod>::all(api.client().clone());
    let config = watcher::Config::default().fields("spec.nodeName!=");
    let mut stream = watcher(pods, config)
        .default_backoff()
        .into_stream()
        .boxed();
    let mut tasks: HashMap<String, watch::Sender<Option<Arc<Pod>>>> = HashMap::new();
    let mut relisted: HashSet<String> = HashSet::new();
    let mut runners = tokio::task::JoinSet::new();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => break,
            e = stream.try_next() => e,
            Some(_) = runners.join_next(), if !runners.is_empty() => continue,
        };
        let event = match event {
            Ok(Some(e)) => e,
            Ok(None) => break,
            Err(e) => {
                tracing::warn!(error = %e, "pod watch failed, retrying");
                continue;
            }
        };
        let mut dispatch = |pod: lean::LeanPod| {
            let pod = Pod::from(pod);
            let node = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .and_then(|n| nodes.get(n))?;
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            match tasks.get(&uid) {
                Some(tx) => {
                    tx.send_replace(Some(Arc::new(pod)));
                }
                None => {
                    let (tx, rx) = watch::channel(Some(Arc::new(pod)));
                    tasks.insert(uid.clone(), tx);
                    runners.spawn(crate::pod::run(
                        api.clone(),
                        node.clone(),
                        opts.clone(),
                        rx,
                        shutdown.clone(),
                    ));
                }
            }
            Some(uid)
        };
        match event {
            watcher::Event::Init => relisted.clear(),
            watcher::Event::InitApply(pod) => {
                if let Some(uid) = dispatch(pod) {
                    relisted.insert(uid);
                }
            }
            watcher::Event::InitDone => {
                tasks.retain(|uid, tx| {
                    let keep = relisted.contains(uid);
                    if !keep {
                        tx.send_replace(None);
                    }
                    keep
                });
                relisted.clear();
            }
            watcher::Event::Apply(pod) => {
                dispatch(pod);
            }
            watcher::Event::Delete(pod) => {
                let uid = Pod::from(pod).metadata.uid.unwrap_or_default();
                if let Some(tx) = tasks.remove(&uid) {
                    tx.send_replace(None);
                }
            }
        }
    }
    for tx in tasks.values() {
        tx.send_replace(None);
    }
    while runners.join_next().await.is_some() {}
}

/// Watches the Nodes (one watch for the fleet) and hands each of ours its stored conditions,
/// so a node whose status someone else changed reports again at once (the kubelet reads its
/// Node from an informer for the same reason).
pub(crate) async fn watch_nodes(
    api: FleetApi,
    nodes: Arc<HashMap<String, Arc<SimNode>>>,
    shutdown: CancellationToken,
) {
    let all = kube::Api::<Node>::all(api.client().clone());
    let mut stream = watcher(all, watcher::Config::default())
        .default_backoff()
        .boxed();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            e = stream.next() => e,
        };
        let event = match event {
            Some(Ok(e)) => e,
            Some(Err(e)) => {
                tracing::warn!(error = %e, "node watch failed, retrying");
                continue;
            }
            None => return,
        };
        match event {
            watcher::Event::Apply(n) | watcher::Event::InitApply(n) => {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                if let Some(sim) = nodes.get(name) {
                    let conditions = n
                        .status
                        .and_then(|s| s.conditions)
                        .and_then(|c| serde_json::to_value(c).ok());
                    sim.observe(conditions);
                }
            }
            watcher::Event::Delete(n) => {
                let name = n.metadata.name.as_deref().unwrap_or_default();
                if nodes.contains_key(name) {
                    tracing::warn!(node = %name, "node deleted; not registering it again (as the kubelet)");
                }
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        }
    }
}
