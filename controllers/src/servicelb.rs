//! The service load balancer (`service-lb`), as k3s' servicelb: every Service of type
//! `LoadBalancer` without a `loadBalancerClass` gets an address out of `--service-lb-range`
//! (default `127.0.100.0/24`, loopback: never reachable from another machine) in
//! `status.loadBalancer.ingress[].ip`, and a built-in TCP proxy listens on
//! `<that address>:<each TCP port>` and forwards every connection to one of the Service's
//! ready endpoints (its EndpointSlices, round robin, the next one when a dial fails).
//!
//! - Services with another `loadBalancerClass` are left alone (another implementation owns
//!   them); a Service that stops being a LoadBalancer (or moves to another class) loses the
//!   address this controller gave it.
//! - A `spec.loadBalancerIP` inside the range and free is honoured.
//! - An exhausted range is a Warning event `AllocationFailed` on the Service (once per
//!   Service while it lasts), never an error of the loop; the Service gets an address as
//!   soon as one is freed.
//! - The proxy reaches endpoints that are real sockets: a selector-less Service with a
//!   hand-written EndpointSlice naming a process on this host, or pods of the process
//!   runtime. Pods of simulated nodes have IPs no process listens on, so connections to
//!   their Service's address are accepted and then closed when every dial fails.
//!
//! The loop is level-triggered: any change to a Service or an EndpointSlice (and a 5 s tick)
//! recomputes everything from the watch caches; the proxies read their backends from a
//! shared table the loop rewrites.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures_util::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::{Context, LoopFuture, reference};

/// Label naming an EndpointSlice's Service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// How long a dial to one endpoint may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// An IPv4 range of assignable addresses (a CIDR without its network and broadcast
/// addresses when it has more than two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Range {
    first: u32,
    last: u32,
    cidr: String,
}

impl Range {
    /// Parses `a.b.c.d/n`.
    pub(crate) fn parse(cidr: &str) -> Result<Range, String> {
        let bad =
            || format!("--service-lb-range {cidr:?}: expected an IPv4 CIDR such as 127.0.100.0/24");
        let (ip, bits) = cidr.split_once('/').ok_or_else(bad)?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad())?;
        let bits: u32 = bits.parse().map_err(|_| bad())?;
        if !(8..=32).contains(&bits) {
            return Err(bad());
        }
        let mask = if bits == 32 {
            u32::MAX
        } else {
            !(u32::MAX >> bits)
        };
        let net = u32::from(ip) & mask;
        let broadcast = net | !mask;
        let (first, last) = if broadcast - net >= 2 {
            (net + 1, broadcast - 1)
        } else {
            (net, broadcast)
        };
        Ok(Range {
            first,
            last,
            cidr: cidr.to_owned(),
        })
    }

    fn contains(&self, ip: Ipv4Addr) -> bool {
        (self.first..=self.last).contains(&u32::from(ip))
    }

    /// The first address not in `used`.
    fn allocate(&self, used: &BTreeSet<Ipv4Addr>) -> Option<Ipv4Addr> {
        (self.first..=self.last)
            .map(Ipv4Addr::from)
            .find(|ip| !used.contains(ip))
    }
}

/// `namespace/name`.
fn key(svc: &Service) -> String {
    format!(
        "{}/{}",
        svc.metadata.namespace.as_deref().unwrap_or_default(),
        svc.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether this controller owns `svc`: type LoadBalancer without a class.
fn ours(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer") && s.load_balancer_class.is_none()
    })
}

/// The IPv4 addresses in `svc`'s load balancer status.
fn status_ips(svc: &Service) -> Vec<Ipv4Addr> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .map(|ing| {
            ing.iter()
                .filter_map(|i| i.ip.as_deref()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// What one listener forwards to.
type Backends = Arc<RwLock<HashMap<SocketAddr, Vec<SocketAddr>>>>;

/// The running TCP listeners, by address.
struct Proxies {
    listeners: HashMap<SocketAddr, tokio::task::JoinHandle<()>>,
    backends: Backends,
    /// Addresses whose bind failed (logged once).
    failed: BTreeSet<SocketAddr>,
}

impl Proxies {
    /// Makes the listeners exactly `wanted` (address → backends).
    fn set(&mut self, wanted: HashMap<SocketAddr, Vec<SocketAddr>>) {
        self.listeners.retain(|addr, task| {
            let keep = wanted.contains_key(addr) && !task.is_finished();
            if !keep {
                task.abort();
                tracing::info!(%addr, "service load balancer: stopped listening");
            }
            keep
        });
        self.failed.retain(|a| wanted.contains_key(a));
        for addr in wanted.keys() {
            if self.listeners.contains_key(addr) || self.failed.contains(addr) {
                continue;
            }
            match std::net::TcpListener::bind(addr).and_then(|l| {
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l)
            }) {
                Ok(listener) => {
                    tracing::info!(%addr, "service load balancer: listening");
                    let backends = Arc::clone(&self.backends);
                    self.listeners
                        .insert(*addr, tokio::spawn(serve(listener, *addr, backends)));
                }
                Err(e) => {
                    tracing::warn!(%addr, error = %e, "service load balancer: cannot listen");
                    self.failed.insert(*addr);
                }
            }
        }
        *self
            .backends
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = wanted;
    }

    fn stop(&mut self) {
        for (_, t) in self.listeners.drain() {
            t.abort();
        }
    }
}

/// Accepts connections on `addr` and forwards each to a backend.
async fn serve(listener: tokio::net::TcpListener, addr: SocketAddr, backends: Backends) {
    let next = Arc::new(AtomicUsize::new(0));
    loop {
        let (mut conn, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::debug!(%addr, error = %e, "service load balancer: accept");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let list = backends
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&addr)
            .cloned()
            .unwrap_or_default();
        let next = Arc::clone(&next);
        tokio::spawn(async move {
            let start = next.fetch_add(1, Ordering::Relaxed);
            for i in 0..list.len() {
                let target = list[(start + i) % list.len()];
                match tokio::time::timeout(DIAL_TIMEOUT, tokio::net::TcpStream::connect(target))
                    .await
                {
                    Ok(Ok(mut upstream)) => {
                        let _ = upstream.set_nodelay(true);
                        let _ = tokio::io::copy_bidirectional(&mut conn, &mut upstream).await;
                        return;
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(%addr, %target, error = %e, "service load balancer: dial")
                    }
                    Err(_) => {
                        tracing::debug!(%addr, %target, "service load balancer: dial timed out")
                    }
                }
            }
            tracing::debug!(%addr, %peer, "service load balancer: no reachable endpoint; closing");
        });
    }
}

/// The ready endpoints of service port `port_name`/`protocol` of `ns/name`.
fn endpoints_of(
    slices: &Store<EndpointSlice>,
    ns: &str,
    name: &str,
    port_name: &str,
    protocol: &str,
) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for slice in slices.state() {
        if slice.metadata.namespace.as_deref() != Some(ns)
            || slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(SERVICE_NAME_LABEL))
                .map(String::as_str)
                != Some(name)
        {
            continue;
        }
        let Some(port) = slice.ports.iter().flatten().find_map(|p| {
            let matches = p.name.as_deref().unwrap_or_default() == port_name
                && p.protocol.as_deref().unwrap_or("TCP") == protocol;
            matches.then_some(p.port).flatten()
        }) else {
            continue;
        };
        let Ok(port) = u16::try_from(port) else {
            continue;
        };
        for ep in &slice.endpoints {
            if ep.conditions.as_ref().and_then(|c| c.ready) == Some(false) {
                continue;
            }
            for a in &ep.addresses {
                if let Ok(ip) = a.parse::<IpAddr>() {
                    out.push(SocketAddr::new(ip, port));
                }
            }
        }
    }
    out
}

async fn patch_status(ctx: &Context, svc: &Service, ingress: serde_json::Value) {
    let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
    let name = svc.metadata.name.as_deref().unwrap_or_default();
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
    let body = json!({"status": {"loadBalancer": ingress}});
    if let Err(e) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        tracing::warn!(service = %key(svc), error = %e, "service load balancer: updating status");
    }
}

/// Recomputes addresses, statuses and listeners from the watch caches.
async fn reconcile(
    ctx: &Context,
    range: &Range,
    services: &Store<Service>,
    slices: &Store<EndpointSlice>,
    proxies: &mut Proxies,
    warned: &mut BTreeSet<String>,
) {
    let mut all: Vec<Arc<Service>> = services.state();
    all.sort_by(|a, b| {
        (a.metadata.creation_timestamp.as_ref().map(|t| t.0), key(a))
            .cmp(&(b.metadata.creation_timestamp.as_ref().map(|t| t.0), key(b)))
    });
    // Addresses already held, first come first kept.
    let mut used: BTreeSet<Ipv4Addr> = BTreeSet::new();
    let mut assigned: BTreeMap<String, Ipv4Addr> = BTreeMap::new();
    for svc in all.iter().filter(|s| ours(s)) {
        if let Some(ip) = status_ips(svc)
            .into_iter()
            .find(|ip| range.contains(*ip) && !used.contains(ip))
        {
            used.insert(ip);
            assigned.insert(key(svc), ip);
        }
    }
    for svc in &all {
        let k = key(svc);
        if !ours(svc) {
            // A Service that is no longer ours keeps nothing of ours.
            let held: Vec<Ipv4Addr> = status_ips(svc)
                .into_iter()
                .filter(|ip| range.contains(*ip))
                .collect();
            let not_lb = svc.spec.as_ref().and_then(|s| s.type_.as_deref()) != Some("LoadBalancer");
            if !held.is_empty() && not_lb {
                tracing::info!(service = %k, "service load balancer: releasing the address");
                patch_status(ctx, svc, json!({"ingress": null})).await;
            }
            continue;
        }
        if assigned.contains_key(&k) {
            // Its status already names its address; make sure it is the only one.
            if status_ips(svc).len() > 1 {
                let ip = assigned[&k];
                patch_status(
                    ctx,
                    svc,
                    json!({"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}),
                )
                .await;
            }
            warned.remove(&k);
            continue;
        }
        let requested = svc
            .spec
            .as_ref()
            .and_then(|s| s.load_balancer_ip.as_deref())
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
            .filter(|ip| range.contains(*ip) && !used.contains(ip));
        match requested.or_else(|| range.allocate(&used)) {
            Some(ip) => {
                used.insert(ip);
                assigned.insert(k.clone(), ip);
                tracing::info!(service = %k, %ip, "service load balancer: address assigned");
                patch_status(
                    ctx,
                    svc,
                    json!({"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}),
                )
                .await;
                warned.remove(&k);
            }
            None => {
                if warned.insert(k.clone()) {
                    tracing::warn!(service = %k, range = %range.cidr, "service load balancer: range exhausted");
                    ctx.event(
                        &reference(svc.as_ref()),
                        true,
                        "AllocationFailed",
                        "AllocateIP",
                        format!(
                            "Failed to allocate IP for \"{k}\": no available IPs in --service-lb-range {}",
                            range.cidr
                        ),
                    )
                    .await;
                }
            }
        }
    }
    warned.retain(|k| all.iter().any(|s| key(s) == *k && ours(s)));

    // Listeners: every TCP port of every Service with an address.
    let mut wanted: HashMap<SocketAddr, Vec<SocketAddr>> = HashMap::new();
    for svc in all.iter().filter(|s| ours(s)) {
        let Some(ip) = assigned.get(&key(svc)) else {
            continue;
        };
        let ns = svc.metadata.namespace.as_deref().unwrap_or_default();
        let name = svc.metadata.name.as_deref().unwrap_or_default();
        for p in svc
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
        {
            let protocol = p.protocol.as_deref().unwrap_or("TCP");
            let Ok(port) = u16::try_from(p.port) else {
                continue;
            };
            if protocol != "TCP" {
                continue;
            }
            let backends = endpoints_of(
                slices,
                ns,
                name,
                p.name.as_deref().unwrap_or_default(),
                protocol,
            );
            wanted.insert(SocketAddr::new(IpAddr::V4(*ip), port), backends);
        }
    }
    proxies.set(wanted);
}

/// Follows `api` into a reflector store, waking `notify` on every change.
fn follow<K>(api: Api<K>, notify: Arc<tokio::sync::Notify>, shutdown: CancellationToken) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                item = stream.next() => match item {
                    Some(Ok(_)) => notify.notify_one(),
                    Some(Err(e)) => tracing::debug!(error = %e, "service load balancer: watch"),
                    None => return,
                },
            }
        }
    });
    store
}

async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let range = Range::parse(&ctx.options.service_lb_range).map_err(anyhow::Error::msg)?;
    let notify = Arc::new(tokio::sync::Notify::new());
    let services = follow(
        Api::<Service>::all(ctx.root.clone()),
        Arc::clone(&notify),
        shutdown.clone(),
    );
    let slices = follow(
        Api::<EndpointSlice>::all(ctx.root.clone()),
        Arc::clone(&notify),
        shutdown.clone(),
    );
    let _ = services.wait_until_ready().await;
    let _ = slices.wait_until_ready().await;
    let mut proxies = Proxies {
        listeners: HashMap::new(),
        backends: Arc::default(),
        failed: BTreeSet::new(),
    };
    let mut warned = BTreeSet::new();
    loop {
        reconcile(&ctx, &range, &services, &slices, &mut proxies, &mut warned).await;
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = notify.notified() => {}
            () = tokio::time::sleep(Duration::from_secs(5)) => {}
        }
    }
    proxies.stop();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_skip_network_and_broadcast() {
        let r = Range::parse("127.0.100.0/24").unwrap();
        assert_eq!(
            r.allocate(&BTreeSet::new()),
            Some(Ipv4Addr::new(127, 0, 100, 1))
        );
        let used: BTreeSet<Ipv4Addr> = (1..=254).map(|i| Ipv4Addr::new(127, 0, 100, i)).collect();
        assert_eq!(r.allocate(&used), None);
        assert!(!r.contains(Ipv4Addr::new(127, 0, 100, 255)));
        let one = Range::parse("127.0.100.7/32").unwrap();
        assert_eq!(
            one.allocate(&BTreeSet::new()),
            Some(Ipv4Addr::new(127, 0, 100, 7))
        );
        assert!(Range::parse("127.0.100.0").is_err());
        assert!(Range::parse("::1/128").is_err());
    }
}
