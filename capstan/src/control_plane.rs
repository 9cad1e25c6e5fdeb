//! The control plane as kubeadm shows it: `capstan server` registers a Node for itself
//! (labelled `node-role.kubernetes.io/control-plane`, tainted `NoSchedule` as kubeadm does)
//! and one mirror pod per component it runs in `kube-system` — `kube-apiserver-<node>`,
//! `etcd-<node>` (the embedded store member), `kube-scheduler-<node>`,
//! `kube-controller-manager-<node>` — with kubeadm's labels (`tier: control-plane`,
//! `component: …`) and mirror-pod annotations, owned by the Node.
//!
//! Every [`HEARTBEAT`] it renews the Node's Lease in `kube-node-lease`, posts the Node's
//! status, and sets each pod's `Ready` from the component's health: the API server's and the
//! store's from `/readyz?verbose` (`[+]ping`, `[+]etcd`), the scheduler's and the controller
//! manager's from their leader Leases (renewed within the last 30 s). A restart of the server
//! process on the same data directory counts one restart of every container
//! (`restartCount`), as the kubelet counts a static pod's container restarts.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

/// How often the Lease, the Node status and the pods' readiness are refreshed.
pub(crate) const HEARTBEAT: Duration = Duration::from_secs(10);
/// How fresh a component's leader Lease must be for its pod to be Ready.
const LEASE_FRESH: i64 = 30;

/// What this server runs.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The Node's name.
    pub(crate) node_name: String,
    /// The address the API server serves on (the Node's InternalIP and the pods' IPs).
    pub(crate) address: String,
    /// Whether the store member is embedded (an `etcd-<node>` pod).
    pub(crate) embedded_store: bool,
    /// Whether the scheduler runs in-process.
    pub(crate) scheduler: bool,
    /// Whether the controller manager runs in-process.
    pub(crate) controller_manager: bool,
}

/// One component's pod.
struct Component {
    /// `component` label and container name.
    name: &'static str,
    /// The Lease whose freshness is its health (leader-elected components).
    lease: Option<&'static str>,
}

fn now() -> String {
    jiff::Timestamp::now()
        .round(jiff::TimestampRound::new().smallest(jiff::Unit::Second))
        .map_or_else(|_| jiff::Timestamp::now().to_string(), |t| t.to_string())
}

fn components(o: &Options) -> Vec<Component> {
    let mut out = vec![Component {
        name: "kube-apiserver",
        lease: None,
    }];
    if o.embedded_store {
        out.push(Component {
            name: "etcd",
            lease: None,
        });
    }
    if o.scheduler {
        out.push(Component {
            name: "kube-scheduler",
            lease: Some("kube-scheduler"),
        });
    }
    if o.controller_manager {
        out.push(Component {
            name: "kube-controller-manager",
            lease: Some("kube-controller-manager"),
        });
    }
    out
}

/// The machine's memory as the kubelet reports it (`/proc/meminfo`'s `MemTotal`, in `Ki`).
fn memory() -> String {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| {
                let kb = l.strip_prefix("MemTotal:")?.trim().strip_suffix("kB")?;
                kb.trim().parse::<u64>().ok()
            })
        })
        .map_or_else(|| "0".to_owned(), |kb| format!("{kb}Ki"))
}

/// The Node object, as registered.
fn node(o: &Options) -> Value {
    let cpus = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let memory = memory();
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": o.node_name,
            "labels": {
                "kubernetes.io/hostname": o.node_name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": std::env::consts::ARCH.replace("x86_64", "amd64").replace("aarch64", "arm64"),
                "beta.kubernetes.io/os": "linux",
                "node-role.kubernetes.io/control-plane": "",
                "node.kubernetes.io/exclude-from-external-load-balancers": "",
            },
        },
        "spec": {
            "taints": [{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
        },
        "status": {
            "capacity": {"cpu": cpus.to_string(), "pods": "110", "memory": memory},
            "allocatable": {"cpu": cpus.to_string(), "pods": "110", "memory": memory},
        },
    })
}

fn node_status(o: &Options) -> Value {
    let t = now();
    let cond = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": t, "lastTransitionTime": t})
    };
    json!({"status": {
        "conditions": [
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
            cond("Ready", "True", "KubeletReady", "capstan server is posting ready status"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": o.address},
            {"type": "Hostname", "address": o.node_name},
        ],
        "nodeInfo": {
            "kubeletVersion": "v1.33.0",
            "kubeProxyVersion": "",
            "containerRuntimeVersion": format!("capstan://{}", env!("CARGO_PKG_VERSION")),
            "operatingSystem": "linux",
            "architecture": std::env::consts::ARCH,
            "osImage": "", "kernelVersion": "", "machineID": "", "systemUUID": "", "bootID": "",
        },
    }})
}

/// A mirror pod of `c` on the Node `node_uid`.
fn pod(o: &Options, c: &Component, node_uid: &str) -> Value {
    let hash = format!("{:016x}", fxhash(&format!("{}/{}", o.node_name, c.name)));
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": format!("{}-{}", c.name, o.node_name),
            "namespace": "kube-system",
            "labels": {"component": c.name, "tier": "control-plane"},
            "annotations": {
                "kubernetes.io/config.source": "file",
                "kubernetes.io/config.hash": hash,
                "kubernetes.io/config.mirror": hash,
                "kubernetes.io/config.seen": now(),
            },
            "ownerReferences": [{
                "apiVersion": "v1", "kind": "Node", "name": o.node_name, "uid": node_uid,
                "controller": true,
            }],
        },
        "spec": {
            "nodeName": o.node_name,
            "hostNetwork": true,
            "priorityClassName": "system-node-critical",
            "automountServiceAccountToken": false,
            "tolerations": [{"operator": "Exists", "effect": "NoExecute"}],
            "containers": [{
                "name": c.name,
                "image": format!("capstan:{}", env!("CARGO_PKG_VERSION")),
                "command": ["capstan", "server"],
            }],
        },
    })
}

/// A small stable hash (FNV-1a) for the config hash annotations.
fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Registers the Node and the pods, then keeps them current until `shutdown`.
pub(crate) async fn run(
    client: kube::Client,
    o: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node_obj: Node = serde_json::from_value(node(&o))?;
    let uid = match nodes.create(&PostParams::default(), &node_obj).await {
        Ok(n) => n.metadata.uid,
        Err(kube::Error::Api(e)) if e.code == 409 => nodes.get(&o.node_name).await?.metadata.uid,
        Err(e) => return Err(e.into()),
    }
    .unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let comps = components(&o);
    // Restart counts: one more than the pods last showed (this process is a restart).
    let mut restarts: BTreeMap<&'static str, i64> = BTreeMap::new();
    let started = now();
    for c in &comps {
        let name = format!("{}-{}", c.name, o.node_name);
        let count = match pods.get_opt(&name).await? {
            Some(p)
                if p.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.uid == uid) =>
            {
                p.status
                    .and_then(|s| s.container_statuses)
                    .and_then(|cs| cs.first().map(|c| i64::from(c.restart_count) + 1))
                    .unwrap_or(0)
            }
            Some(_) => {
                // A pod of an earlier Node of the same name: replace it.
                let _ = pods.delete(&name, &Default::default()).await;
                0
            }
            None => 0,
        };
        restarts.insert(c.name, count);
        let p: Pod = serde_json::from_value(pod(&o, c, &uid))?;
        match pods.create(&PostParams::default(), &p).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => tracing::warn!(pod = %name, error = %e, "creating the mirror pod"),
        }
    }
    tracing::info!(node = %o.node_name, pods = comps.len(), "control plane registered as a Node and mirror pods");
    let leases_ns: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let leases_sys: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    loop {
        if let Err(e) = beat(&o, &nodes, &leases_ns).await {
            tracing::warn!(error = %e, "control-plane node heartbeat");
        }
        let verbose = client
            .request_text(
                http::Request::get("/readyz?verbose")
                    .body(Vec::new())
                    .map_err(anyhow::Error::from)?,
            )
            .await
            .unwrap_or_default();
        for c in &comps {
            let ready = match (c.name, c.lease) {
                ("kube-apiserver", _) => verbose.contains("[+]ping ok"),
                ("etcd", _) => verbose.contains("[+]etcd ok"),
                (_, Some(lease)) => fresh(&leases_sys, lease).await,
                _ => true,
            };
            let body = pod_status(&o, c.name, ready, restarts[c.name], &started);
            let name = format!("{}-{}", c.name, o.node_name);
            if let Err(e) = pods
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
                .await
            {
                tracing::debug!(pod = %name, error = %e, "mirror pod status");
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

/// Whether Lease `kube-system/<name>` was renewed within [`LEASE_FRESH`] seconds.
async fn fresh(leases: &Api<Lease>, name: &str) -> bool {
    let Ok(Some(l)) = leases.get_opt(name).await else {
        return false;
    };
    let Some(renew) = l.spec.and_then(|s| s.renew_time) else {
        return false;
    };
    let age = jiff::Timestamp::now().as_second() - renew.0.as_second();
    age <= LEASE_FRESH
}

/// The Node's Lease and status.
async fn beat(o: &Options, nodes: &Api<Node>, leases: &Api<Lease>) -> anyhow::Result<()> {
    let t = jiff::Timestamp::now().to_string();
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": o.node_name, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": o.node_name, "leaseDurationSeconds": 40, "renewTime": t},
    });
    leases
        .patch(
            &o.node_name,
            &PatchParams::apply("capstan-control-plane").force(),
            &Patch::Apply(&lease),
        )
        .await?;
    nodes
        .patch_status(
            &o.node_name,
            &PatchParams::default(),
            &Patch::Merge(&node_status(o)),
        )
        .await?;
    Ok(())
}

fn pod_status(o: &Options, name: &str, ready: bool, restarts: i64, started: &str) -> Value {
    let t = now();
    let flag = if ready { "True" } else { "False" };
    let cond = |kind: &str, status: &str| json!({"type": kind, "status": status, "lastProbeTime": null, "lastTransitionTime": t});
    json!({"status": {
        "phase": "Running",
        "hostIP": o.address,
        "hostIPs": [{"ip": o.address}],
        "podIP": o.address,
        "podIPs": [{"ip": o.address}],
        "startTime": started,
        "qosClass": "BestEffort",
        "conditions": [
            cond("PodReadyToStartContainers", "True"),
            cond("Initialized", "True"),
            cond("Ready", flag),
            cond("ContainersReady", flag),
            cond("PodScheduled", "True"),
        ],
        "containerStatuses": [{
            "name": name,
            "ready": ready,
            "started": true,
            "restartCount": restarts,
            "image": format!("capstan:{}", env!("CARGO_PKG_VERSION")),
            "imageID": "",
            "containerID": format!("capstan://{}", std::process::id()),
            "state": {"running": {"startedAt": started}},
        }],
    }})
}
