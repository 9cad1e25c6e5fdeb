//! The Endpoints controller (`endpoint`): an Endpoints object per Service with a selector,
//! listing the selected pods' addresses (ready and not ready) and the ports they serve
//! (upstream `pkg/controller/endpoint`). Also the pod-to-Service plumbing the EndpointSlice
//! controller shares.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
    ServicePort,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

/// Label marking headless services' endpoints (upstream `v1.IsHeadlessService`).
pub(crate) const HEADLESS_LABEL: &str = "service.kubernetes.io/headless";
/// Upstream's cap on addresses in one Endpoints object.
const MAX_CAPACITY: usize = 1000;
/// Annotation set when the cap truncated the addresses.
const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Whether `svc` selects `pod` (same namespace, non-empty selector matching its labels).
pub(crate) fn selects(svc: &Service, pod: &Pod) -> bool {
    if svc.metadata.namespace != pod.metadata.namespace {
        return false;
    }
    let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    if sel.is_empty() {
        return false;
    }
    let labels = pod.metadata.labels.as_ref();
    sel.iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// The label selector string for a service's selector (`k=v,...`), if it has one.
pub(crate) fn selector_string(svc: &Service) -> Option<String> {
    let sel = svc.spec.as_ref()?.selector.as_ref()?;
    if sel.is_empty() {
        return None;
    }
    Some(
        sel.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(","),
    )
}

/// Whether the pod's Ready condition is True.
pub(crate) fn pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Upstream `ShouldPodBeInEndpoints`: the pod has an IP, is not terminating (unless
/// `include_terminating`) and can still run per its restart policy.
pub(crate) fn should_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if pod_ips(pod).is_empty() {
        return false;
    }
    if !include_terminating && pod.metadata.deletion_timestamp.is_some() {
        return false;
    }
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    match pod.spec.as_ref().and_then(|s| s.restart_policy.as_deref()) {
        Some("Never") => !matches!(phase, Some("Failed" | "Succeeded")),
        Some("OnFailure") => phase != Some("Succeeded"),
        _ => true,
    }
}

/// The pod's IPs (`status.podIPs`, else `status.podIP`).
pub(crate) fn pod_ips(pod: &Pod) -> Vec<String> {
    let Some(st) = pod.status.as_ref() else {
        return Vec::new();
    };
    let ips: Vec<String> = st
        .pod_ips
        .iter()
        .flatten()
        .map(|p| p.ip.clone())
        .filter(|ip| !ip.is_empty())
        .collect();
    if !ips.is_empty() {
        return ips;
    }
    st.pod_ip
        .iter()
        .filter(|ip| !ip.is_empty())
        .cloned()
        .collect()
}

/// Upstream `podutil.FindPort`: the container port a service port targets on `pod`. A numeric
/// target port (or none: the service port) is used as is; a named one is looked up among the
/// pod's container ports with the same protocol.
pub(crate) fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match &port.target_port {
        None => Some(port.port),
        Some(IntOrString::Int(n)) => Some(*n),
        Some(IntOrString::String(name)) => {
            if let Ok(n) = name.parse::<i32>() {
                return Some(n);
            }
            let proto = port.protocol.as_deref().unwrap_or("TCP");
            let spec = pod.spec.as_ref()?;
            spec.containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|cp| {
                    cp.name.as_deref() == Some(name.as_str())
                        && cp.protocol.as_deref().unwrap_or("TCP") == proto
                })
                .map(|cp| cp.container_port)
        }
    }
}

/// Whether the service is headless (`clusterIP: None`).
pub(crate) fn headless(svc: &Service) -> bool {
    svc.spec.as_ref().and_then(|s| s.cluster_ip.as_deref()) == Some("None")
}

/// A reference to `pod` as endpoints carry it.
pub(crate) fn pod_reference(pod: &Pod) -> ObjectReference {
    ObjectReference {
        kind: Some("Pod".to_owned()),
        namespace: pod.metadata.namespace.clone(),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..ObjectReference::default()
    }
}

/// The DNS hostname a headless service gives `pod` (its `hostname` when its `subdomain` is the
/// service's name).
pub(crate) fn pod_hostname(svc: &Service, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let host = spec.hostname.as_ref().filter(|h| !h.is_empty())?;
    if headless(svc) && spec.subdomain.as_deref() == svc.metadata.name.as_deref() {
        Some(host.clone())
    } else {
        None
    }
}

/// A resolved service port: name, container port, protocol, app protocol.
pub(crate) type PortKey = (String, i32, String, Option<String>);

/// Queues the services (keys) selecting the old or the new version of a pod.
pub(crate) fn queue_services_of(queue: &Queue, services: &Store<Service>, pods: [Option<&Pod>; 2]) {
    if let [Some(old), Some(new)] = pods
        && old.metadata.resource_version == new.metadata.resource_version
    {
        return;
    }
    for svc in services.state() {
        if pods.iter().flatten().any(|p| selects(&svc, p)) {
            queue.add(informer::key(svc.as_ref()));
        }
    }
}

/// The pods of the cache `svc` selects.
pub(crate) fn selected_pods(pods: &Store<Pod>, svc: &Service) -> Vec<Pod> {
    pods.state()
        .iter()
        .filter(|p| selects(svc, p))
        .map(|p| (**p).clone())
        .collect()
}

/// Spawns the service and pod informers both endpoint controllers use, feeding `queue` with
/// service keys; waits until both have listed (None when shut down first).
pub(crate) async fn service_pod_informers(
    ctx: &Context,
    queue: &Queue,
    shutdown: &CancellationToken,
) -> anyhow::Result<Option<(Store<Service>, Store<Pod>)>> {
    let q = queue.clone();
    let services = ctx
        .informers
        .watch::<Service>(
            Box::new(move |old: Option<&Service>, new: Option<&Service>| {
                if let Some(s) = new.or(old) {
                    q.add(informer::key(s));
                }
            }),
            shutdown,
        )
        .await;
    let (q, svc) = (queue.clone(), services.clone());
    let pods = ctx
        .informers
        .watch::<Pod>(
            Box::new(move |old: Option<&Pod>, new: Option<&Pod>| {
                queue_services_of(&q, &svc, [old, new]);
            }),
            shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => Ok(None),
        r = async { services.wait_until_ready().await?; pods.wait_until_ready().await } => {
            r?;
            Ok(Some((services, pods)))
        }
    }
}

/// The wanted subsets of `svc`'s Endpoints from `pods`, repacked as upstream: addresses grouped
/// by the port set they serve, sorted.
fn desired_subsets(svc: &Service, pods: &[Pod]) -> (Vec<EndpointSubset>, bool) {
    let spec = svc.spec.clone().unwrap_or_default();
    let tolerate_unready = spec.publish_not_ready_addresses == Some(true);
    let ports = spec.ports.unwrap_or_default();
    // port set → (ready, not ready)
    type Group = (Vec<EndpointAddress>, Vec<EndpointAddress>);
    let mut groups: BTreeMap<Vec<PortKey>, Group> = BTreeMap::new();
    let mut total = 0usize;
    let mut truncated = false;
    for pod in pods {
        if !should_be_in_endpoints(pod, tolerate_unready) {
            continue;
        }
        let Some(ip) = pod_ips(pod).into_iter().next() else {
            continue;
        };
        let addr = EndpointAddress {
            ip,
            hostname: pod_hostname(svc, pod),
            node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
            target_ref: Some(pod_reference(pod)),
        };
        let mut set = Vec::new();
        for p in &ports {
            match find_port(pod, p) {
                Some(n) => set.push((
                    p.name.clone().unwrap_or_default(),
                    n,
                    p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                    p.app_protocol.clone(),
                )),
                None => tracing::debug!(
                    pod = pod.metadata.name.as_deref().unwrap_or(""),
                    port = p.name.as_deref().unwrap_or(""),
                    "no container port for service port"
                ),
            }
        }
        if set.is_empty() && !(ports.is_empty() && headless(svc)) {
            continue;
        }
        if total >= MAX_CAPACITY {
            truncated = true;
            continue;
        }
        total += 1;
        set.sort();
        let g = groups.entry(set).or_default();
        if tolerate_unready || pod_ready(pod) {
            g.0.push(addr);
        } else {
            g.1.push(addr);
        }
    }
    let subsets = groups
        .into_iter()
        .map(|(set, (mut ready, mut not_ready))| {
            ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            not_ready.sort_by(|a, b| a.ip.cmp(&b.ip));
            EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!set.is_empty()).then(|| {
                    set.into_iter()
                        .map(|(name, port, protocol, app_protocol)| EndpointPort {
                            name: (!name.is_empty()).then_some(name),
                            port,
                            protocol: Some(protocol),
                            app_protocol,
                        })
                        .collect()
                }),
            }
        })
        .collect();
    (subsets, truncated)
}

/// The labels the Endpoints carries: the service's, plus the headless marker.
fn desired_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    if headless(svc) {
        labels.insert(HEADLESS_LABEL.to_owned(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

/// The stores the Endpoints loop reads.
#[derive(Clone)]
struct Caches {
    /// Services.
    services: Store<Service>,
    /// Pods.
    pods: Store<Pod>,
    /// Endpoints.
    endpoints: Store<Endpoints>,
}

/// Syncs the Endpoints of service `key` (`namespace/name`).
async fn sync(ctx: Context, caches: Caches, key: String) -> SyncResult {
    let (Some(ns), name) = informer::split_key(&key) else {
        return Ok(None);
    };
    let api: Api<Endpoints> = Api::namespaced(ctx.client.clone(), ns);
    let current = informer::get(&caches.endpoints, &key);
    let Some(svc) = informer::get(&caches.services, &key) else {
        // The service is gone: so go its Endpoints (they carry no owner reference).
        if current.is_some() {
            match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
        }
        return Ok(None);
    };
    if selector_string(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        // Selector-less services' Endpoints belong to the user.
        return Ok(None);
    }
    let pods = selected_pods(&caches.pods, &svc);
    let (subsets, truncated) = desired_subsets(&svc, &pods);
    let labels = desired_labels(&svc);
    let subsets = (!subsets.is_empty()).then_some(subsets);
    let result = match current {
        None => {
            let mut annotations = BTreeMap::new();
            if truncated {
                annotations.insert(OVER_CAPACITY.to_owned(), "truncated".to_owned());
            }
            let ep = Endpoints {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    labels: Some(labels),
                    annotations: (!annotations.is_empty()).then_some(annotations),
                    ..ObjectMeta::default()
                },
                subsets,
            };
            api.create(&PostParams::default(), &ep).await
        }
        Some(cur) => {
            let cur_truncated = cur
                .metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(OVER_CAPACITY));
            if cur.subsets == subsets
                && cur.metadata.labels.clone().unwrap_or_default() == labels
                && cur_truncated == truncated
            {
                return Ok(None);
            }
            let mut ep = (*cur).clone();
            ep.subsets = subsets;
            ep.metadata.labels = Some(labels);
            let ann = ep.metadata.annotations.get_or_insert_with(BTreeMap::new);
            if truncated {
                ann.insert(OVER_CAPACITY.to_owned(), "truncated".to_owned());
            } else {
                ann.remove(OVER_CAPACITY);
            }
            api.replace(name, &PostParams::default(), &ep).await
        }
    };
    match result {
        Ok(_) => Ok(None),
        // A stale cache (conflict, exists, gone): look again once the watch catches up.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
            Ok(Some(Duration::from_millis(200)))
        }
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("being terminated") => {
            Ok(None)
        }
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// Upstream's `--concurrent-endpoint-syncs` default.
const WORKERS: usize = 5;

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let Some((services, pods)) = service_pod_informers(&ctx, &queue, &shutdown).await? else {
        return Ok(());
    };
    let endpoints = ctx
        .informers
        .watch::<Endpoints>(informer::enqueue_key(queue.clone()), &shutdown)
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = endpoints.wait_until_ready() => r?,
    }
    for svc in services.state() {
        queue.add(informer::key(svc.as_ref()));
    }
    let caches = Caches {
        services,
        pods,
        endpoints,
    };
    let c = ctx.clone();
    run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
        sync(c.clone(), caches.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Container, ContainerPort, PodCondition, PodIP, PodSpec, PodStatus, ServiceSpec,
    };

    fn pod(name: &str, ip: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                containers: vec![Container {
                    name: "c".into(),
                    ports: Some(vec![ContainerPort {
                        name: Some("http".into()),
                        container_port: 8080,
                        ..ContainerPort::default()
                    }]),
                    ..Container::default()
                }],
                ..PodSpec::default()
            }),
            status: Some(PodStatus {
                pod_ip: Some(ip.into()),
                pod_ips: Some(vec![PodIP { ip: ip.into() }]),
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn svc(target: IntOrString) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::from([("app".into(), "web".into())])),
                ports: Some(vec![ServicePort {
                    name: Some("web".into()),
                    port: 80,
                    target_port: Some(target),
                    protocol: Some("TCP".into()),
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn named_target_ports_resolve_and_unready_pods_go_to_not_ready_addresses() {
        let s = svc(IntOrString::String("http".into()));
        let pods = vec![pod("b", "10.0.0.2", false), pod("a", "10.0.0.1", true)];
        let (subsets, truncated) = desired_subsets(&s, &pods);
        assert!(!truncated);
        assert_eq!(subsets.len(), 1);
        let ss = &subsets[0];
        assert_eq!(ss.ports.as_ref().map(|p| p[0].port), Some(8080));
        assert_eq!(
            ss.addresses.as_ref().map(|a| a[0].ip.as_str()),
            Some("10.0.0.1")
        );
        assert_eq!(
            ss.not_ready_addresses.as_ref().map(|a| a[0].ip.as_str()),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn publish_not_ready_addresses_makes_every_pod_ready() {
        let mut s = svc(IntOrString::Int(9000));
        if let Some(spec) = s.spec.as_mut() {
            spec.publish_not_ready_addresses = Some(true);
        }
        let (subsets, _) = desired_subsets(&s, &[pod("b", "10.0.0.2", false)]);
        assert_eq!(subsets[0].addresses.as_ref().map(Vec::len), Some(1));
        assert_eq!(subsets[0].ports.as_ref().map(|p| p[0].port), Some(9000));
    }

    #[test]
    fn a_missing_named_port_leaves_the_pod_out() {
        let s = svc(IntOrString::String("nope".into()));
        let (subsets, _) = desired_subsets(&s, &[pod("a", "10.0.0.1", true)]);
        assert!(subsets.is_empty());
    }
}
