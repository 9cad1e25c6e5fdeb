//! The EndpointSlice controller (`endpointslice`): `discovery.k8s.io/v1` EndpointSlices for every
//! Service with a selector, managed by `endpointslice-controller.k8s.io`, at most 100 endpoints
//! each, with ready/serving/terminating conditions (upstream `pkg/controller/endpointslice` and
//! `staging/src/k8s.io/endpointslice`).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::endpoints::{
    HEADLESS_LABEL, PortKey, find_port, headless, pod_hostname, pod_ips, pod_ready, pod_reference,
    selected_pods, selector_string, service_pod_informers, should_be_in_endpoints,
};
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

/// Label naming the slice's service.
const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// Label naming the slice's manager.
const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's manager value.
const MANAGED_BY: &str = "endpointslice-controller.k8s.io";
/// Upstream's `--max-endpoints-per-slice` default.
const MAX_ENDPOINTS_PER_SLICE: usize = 100;

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// One wanted slice: its ports and endpoints.
#[derive(Debug, Clone, PartialEq)]
struct Wanted {
    /// The ports every endpoint in it serves (`None`: the placeholder slice).
    ports: Option<Vec<EndpointPort>>,
    /// Its endpoints.
    endpoints: Vec<Endpoint>,
}

/// The address type the service uses (its first IP family).
fn address_type(svc: &Service) -> &'static str {
    let family = svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
        .map(String::as_str);
    if family == Some("IPv6") {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// The endpoint a pod contributes (upstream `podToEndpoint`).
fn endpoint_for(svc: &Service, pod: &Pod, ip: String) -> Endpoint {
    let serving = pod_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    Endpoint {
        addresses: vec![ip],
        conditions: Some(EndpointConditions {
            ready: Some(publish || (serving && !terminating)),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        hostname: pod_hostname(svc, pod),
        node_name: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        target_ref: Some(pod_reference(pod)),
        ..Endpoint::default()
    }
}

/// The slices `svc` should have given `pods`: endpoints grouped by the ports they serve, in
/// chunks of at most `max` (a placeholder with no endpoints when there are none).
fn desired(svc: &Service, pods: &[Pod], max: usize) -> Vec<Wanted> {
    let family_v6 = address_type(svc) == "IPv6";
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    let mut groups: BTreeMap<Vec<PortKey>, Vec<Endpoint>> = BTreeMap::new();
    for pod in pods {
        if !should_be_in_endpoints(pod, true) {
            continue;
        }
        let Some(ip) = pod_ips(pod)
            .into_iter()
            .find(|ip| ip.contains(':') == family_v6)
        else {
            continue;
        };
        let mut set: Vec<_> = ports
            .iter()
            .filter_map(|p| {
                find_port(pod, p).map(|n| {
                    (
                        p.name.clone().unwrap_or_default(),
                        n,
                        p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                        p.app_protocol.clone(),
                    )
                })
            })
            .collect();
        if set.is_empty() && !(ports.is_empty() && headless(svc)) {
            continue;
        }
        set.sort();
        groups
            .entry(set)
            .or_default()
            .push(endpoint_for(svc, pod, ip));
    }
    let mut out = Vec::new();
    for (set, mut eps) in groups {
        eps.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        let ports: Vec<EndpointPort> = set
            .into_iter()
            .map(|(name, port, protocol, app_protocol)| EndpointPort {
                name: Some(name),
                port: Some(port),
                protocol: Some(protocol),
                app_protocol,
            })
            .collect();
        for chunk in eps.chunks(max.max(1)) {
            out.push(Wanted {
                ports: Some(ports.clone()),
                endpoints: chunk.to_vec(),
            });
        }
    }
    if out.is_empty() {
        out.push(Wanted {
            ports: None,
            endpoints: Vec::new(),
        });
    }
    out
}

/// The labels every slice of `svc` carries.
fn slice_labels(svc: &Service) -> BTreeMap<String, String> {
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.remove(MANAGED_BY_LABEL);
    labels.insert(
        SERVICE_NAME_LABEL.to_owned(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(MANAGED_BY_LABEL.to_owned(), MANAGED_BY.to_owned());
    if headless(svc) {
        labels.insert(HEADLESS_LABEL.to_owned(), String::new());
    } else {
        labels.remove(HEADLESS_LABEL);
    }
    labels
}

/// The controller owner reference to `svc`.
fn owner(svc: &Service) -> OwnerReference {
    OwnerReference {
        api_version: "v1".to_owned(),
        kind: "Service".to_owned(),
        name: svc.metadata.name.clone().unwrap_or_default(),
        uid: svc.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}

/// Whether `slice` already is `want` (same ports, endpoints, labels and owner).
fn matches(
    slice: &EndpointSlice,
    want: &Wanted,
    labels: &BTreeMap<String, String>,
    at: &str,
) -> bool {
    let ports_same = match (&slice.ports, &want.ports) {
        (None, None) => true,
        (Some(a), None) | (None, Some(a)) => a.is_empty(),
        (Some(a), Some(b)) => a == b,
    };
    ports_same
        && slice.endpoints == want.endpoints
        && slice.address_type == at
        && slice.metadata.labels.as_ref() == Some(labels)
}

/// Maps an API conflict or not-found (a stale view) to a quick retry.
fn retry_soon(e: kube::Error) -> SyncResult {
    match e {
        kube::Error::Api(ref s) if s.code == 409 || s.code == 404 => {
            Ok(Some(Duration::from_millis(200)))
        }
        kube::Error::Api(ref s) if s.code == 403 && s.message.contains("being terminated") => {
            Ok(None)
        }
        e => Err(ReconcileError::Kube(e)),
    }
}

/// Syncs the slices of service `key` (`namespace/name`).
async fn sync(ctx: Context, services: Store<Service>, pods: Store<Pod>, key: String) -> SyncResult {
    let (Some(ns), name) = informer::split_key(&key) else {
        return Ok(None);
    };
    // A deleted service's slices go through their owner references (garbage collector).
    let Some(svc) = informer::get(&services, &key) else {
        return Ok(None);
    };
    if selector_string(&svc).is_none() || svc.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let want = desired(&svc, &selected_pods(&pods, &svc), MAX_ENDPOINTS_PER_SLICE);
    let at = address_type(&svc);
    let labels = slice_labels(&svc);
    let api: Api<EndpointSlice> = Api::namespaced(ctx.client.clone(), ns);
    // Listed live rather than from a cache, so a slice created a moment ago is never created
    // twice (upstream keeps an EndpointSlice tracker for the same reason).
    let sel = format!("{SERVICE_NAME_LABEL}={name},{MANAGED_BY_LABEL}={MANAGED_BY}");
    let mut existing = api.list(&ListParams::default().labels(&sel)).await?.items;
    existing.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    // Slices of another address type, or owned by an older service of the same name, go.
    let uid = svc.metadata.uid.clone();
    let (mut mine, stale): (Vec<_>, Vec<_>) = existing.into_iter().partition(|s| {
        s.address_type == at
            && s.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && Some(&o.uid) == uid.as_ref())
    });
    // Keep slices that already match a wanted one exactly.
    let mut todo: Vec<Wanted> = Vec::new();
    for w in want {
        if let Some(i) = mine.iter().position(|s| matches(s, &w, &labels, at)) {
            mine.remove(i);
        } else {
            todo.push(w);
        }
    }
    let mut spare = mine.into_iter();
    for w in todo {
        let result = match spare.next() {
            Some(mut s) => {
                s.endpoints = w.endpoints;
                s.ports = w.ports;
                s.address_type = at.to_owned();
                s.metadata.labels = Some(labels.clone());
                let sname = s.metadata.name.clone().unwrap_or_default();
                api.replace(&sname, &PostParams::default(), &s).await
            }
            None => {
                let s = EndpointSlice {
                    metadata: ObjectMeta {
                        generate_name: Some(format!("{name}-")),
                        labels: Some(labels.clone()),
                        owner_references: Some(vec![owner(&svc)]),
                        ..ObjectMeta::default()
                    },
                    address_type: at.to_owned(),
                    endpoints: w.endpoints,
                    ports: w.ports,
                };
                api.create(&PostParams::default(), &s).await
            }
        };
        if let Err(e) = result {
            return retry_soon(e);
        }
    }
    for s in spare.chain(stale) {
        if let Some(sname) = s.metadata.name.as_deref() {
            match api.delete(sname, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
        }
    }
    Ok(None)
}

/// Upstream's `--concurrent-service-endpoint-syncs` default.
const WORKERS: usize = 5;

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let Some((services, pods)) = service_pod_informers(&ctx, &queue, &shutdown).await? else {
        return Ok(());
    };
    let q = queue.clone();
    // Someone else's edit or deletion of a managed slice brings its service back.
    let _slices = ctx
        .informers
        .watch::<EndpointSlice>(
            Box::new(
                move |old: Option<&EndpointSlice>, new: Option<&EndpointSlice>| {
                    let Some(s) = new.or(old) else { return };
                    let labels = s.metadata.labels.as_ref();
                    let managed = labels
                        .and_then(|l| l.get(MANAGED_BY_LABEL))
                        .is_some_and(|m| m == MANAGED_BY);
                    let svc = labels.and_then(|l| l.get(SERVICE_NAME_LABEL));
                    if let (true, Some(svc), Some(ns)) =
                        (managed, svc, s.metadata.namespace.as_deref())
                    {
                        q.add(format!("{ns}/{svc}"));
                    }
                },
            ),
            &shutdown,
        )
        .await;
    for svc in services.state() {
        queue.add(informer::key(svc.as_ref()));
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
        sync(c.clone(), services.clone(), pods.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        PodCondition, PodIP, PodSpec, PodStatus, ServicePort, ServiceSpec,
    };

    fn pod(i: usize) -> Pod {
        let ip = format!("10.0.{}.{}", i / 200, i % 200 + 1);
        Pod {
            metadata: ObjectMeta {
                name: Some(format!("p{i}")),
                namespace: Some("ns".into()),
                labels: Some(BTreeMap::from([("app".into(), "web".into())])),
                ..ObjectMeta::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                pod_ip: Some(ip.clone()),
                pod_ips: Some(vec![PodIP { ip }]),
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        }
    }

    fn svc() -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("ns".into()),
                ..ObjectMeta::default()
            },
            spec: Some(ServiceSpec {
                selector: Some(BTreeMap::from([("app".into(), "web".into())])),
                ports: Some(vec![ServicePort {
                    port: 80,
                    ..ServicePort::default()
                }]),
                ..ServiceSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn slices_hold_at_most_one_hundred_endpoints() {
        let pods: Vec<Pod> = (0..250).map(pod).collect();
        let want = desired(&svc(), &pods, MAX_ENDPOINTS_PER_SLICE);
        let sizes: Vec<usize> = want.iter().map(|w| w.endpoints.len()).collect();
        assert_eq!(sizes, vec![100, 100, 50]);
    }

    #[test]
    fn no_pods_gives_one_placeholder_slice() {
        let want = desired(&svc(), &[], MAX_ENDPOINTS_PER_SLICE);
        assert_eq!(want.len(), 1);
        assert!(want[0].endpoints.is_empty());
        assert!(want[0].ports.is_none());
    }

    #[test]
    fn terminating_pods_are_listed_not_ready_but_serving() {
        let mut p = pod(1);
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        ));
        let want = desired(&svc(), &[p], MAX_ENDPOINTS_PER_SLICE);
        let c = want[0].endpoints[0].conditions.clone().unwrap_or_default();
        assert_eq!(
            (c.ready, c.serving, c.terminating),
            (Some(false), Some(true), Some(true))
        );
    }
}
