//! The node lifecycle controller (`nodelifecycle`, with upstream's taint-eviction controller
//! folded in): a node whose kubelet stops renewing its Lease and posting status for
//! `--node-monitor-grace-period` gets every condition set to Unknown ("NodeStatusUnknown",
//! "Kubelet stopped posting node status."; a node that never posted status gets them
//! `--node-startup-grace-period` after its creation, "NodeStatusNeverUpdated"), the
//! `node.kubernetes.io/unreachable` (or, when
//! Ready=False, `not-ready`) NoSchedule and NoExecute taints, and its pods Ready=False; pods
//! that do not tolerate a NoExecute taint, or tolerate it only for `tolerationSeconds`, are
//! evicted (DisruptionTarget condition, then deleted). Upstream `pkg/controller/nodelifecycle`
//! and `pkg/controller/tainteviction`.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod, PodCondition, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::queue::{Queue, run_workers};
use crate::{Context, LoopFuture, informer, reference};

/// Taint key of a node whose Ready condition is Unknown.
pub(crate) const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint key of a node whose Ready condition is False.
pub(crate) const NOT_READY: &str = "node.kubernetes.io/not-ready";
/// The conditions the controller sets to Unknown (upstream `nodeConditionTypes` plus Ready).
const CONDITION_TYPES: &[&str] = &["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Parses a Go-style duration (`40s`, `1m30s`, `500ms`, `2h`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    if rest.is_empty() {
        return Err("empty duration".to_owned());
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("missing unit in duration {s:?}"))?;
        let value: f64 = rest[..digits]
            .parse()
            .map_err(|_| format!("invalid duration {s:?}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let secs = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            u => return Err(format!("unknown unit {u:?} in duration {s:?}")),
        };
        total += Duration::from_secs_f64(value * secs);
        rest = &rest[unit_len..];
    }
    Ok(total)
}

/// A node's last observed heartbeat and when this controller saw it change (upstream's
/// `nodeHealthData.probeTimestamp`).
struct Health {
    /// Ready condition's lastHeartbeatTime and the Lease's renewTime, as last seen.
    heartbeat: (Option<Timestamp>, Option<Timestamp>),
    /// Local time the heartbeat last changed.
    probe: Instant,
}

/// The node's condition of `type_`.
fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The conditions to post for a node that stopped reporting (upstream `tryUpdateNodeHealth`):
/// every known condition Unknown; those the kubelet never posted are added
/// ("NodeStatusNeverUpdated", heartbeat at the node's creation), those already Unknown kept.
fn unknown_conditions(node: &Node, now: Timestamp) -> Vec<NodeCondition> {
    CONDITION_TYPES
        .iter()
        .map(|t| match condition(node, t) {
            Some(c) if c.status == "Unknown" => c.clone(),
            Some(c) => NodeCondition {
                status: "Unknown".to_owned(),
                reason: Some("NodeStatusUnknown".to_owned()),
                message: Some("Kubelet stopped posting node status.".to_owned()),
                last_transition_time: Some(Time(now)),
                ..c.clone()
            },
            None => NodeCondition {
                type_: (*t).to_owned(),
                status: "Unknown".to_owned(),
                reason: Some("NodeStatusNeverUpdated".to_owned()),
                message: Some("Kubelet never posted node status.".to_owned()),
                last_heartbeat_time: Some(
                    node.metadata
                        .creation_timestamp
                        .clone()
                        .unwrap_or(Time(now)),
                ),
                last_transition_time: Some(Time(now)),
            },
        })
        .collect()
}

/// Whether posting [`unknown_conditions`] would change the node.
fn needs_unknown(node: &Node) -> bool {
    CONDITION_TYPES
        .iter()
        .any(|t| condition(node, t).is_none_or(|c| c.status != "Unknown"))
}

/// The node's taints with the not-ready/unreachable ones matching its Ready status.
fn desired_taints(node: &Node, now: Timestamp) -> Vec<Taint> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    // No Ready condition yet (a node that never posted status): no taint of ours, as
    // upstream's tainting passes, which look only at posted conditions.
    let want_key = match condition(node, "Ready").map(|c| c.status.as_str()) {
        None | Some("True") => None,
        Some("False") => Some(NOT_READY),
        Some(_) => Some(UNREACHABLE),
    };
    let mut out: Vec<Taint> = current
        .iter()
        .filter(|t| {
            let ours = t.key == UNREACHABLE || t.key == NOT_READY;
            let ours_effect = t.effect == "NoSchedule" || t.effect == "NoExecute";
            !(ours && ours_effect) || Some(t.key.as_str()) == want_key
        })
        .cloned()
        .collect();
    if let Some(key) = want_key {
        for effect in ["NoSchedule", "NoExecute"] {
            if !out.iter().any(|t| t.key == key && t.effect == effect) {
                out.push(Taint {
                    key: key.to_owned(),
                    effect: effect.to_owned(),
                    time_added: (effect == "NoExecute").then_some(Time(now)),
                    value: None,
                });
            }
        }
    }
    out
}

/// Whether toleration `tol` tolerates `taint` (upstream `Toleration.ToleratesTaint`).
pub(crate) fn tolerates(tol: &Toleration, taint: &Taint) -> bool {
    if let Some(e) = tol.effect.as_deref().filter(|e| !e.is_empty())
        && e != taint.effect
    {
        return false;
    }
    let key = tol.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        _ => {
            !key.is_empty()
                && tol.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
    }
}

/// When a pod must leave a node with `taints` (its NoExecute ones): `Some(ZERO)` now,
/// `Some(d)` after `d`, `None` never (upstream `getMinTolerationTime`).
fn eviction_delay(pod: &Pod, taints: &[&Taint]) -> Option<Duration> {
    if taints.is_empty() {
        return None;
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let mut min: Option<i64> = None;
    for taint in taints {
        let used: Vec<&Toleration> = tolerations.iter().filter(|t| tolerates(t, taint)).collect();
        if used.is_empty() {
            return Some(Duration::ZERO);
        }
        for t in used {
            if let Some(secs) = t.toleration_seconds {
                min = Some(min.map_or(secs, |m| m.min(secs)));
            }
        }
    }
    min.map(|s| Duration::from_secs(u64::try_from(s).unwrap_or(0)))
}

/// Whether the pod has finished (its phase is Succeeded or Failed).
fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The loop's caches and memory.
struct Monitor {
    /// The controller's context.
    ctx: Context,
    /// Nodes.
    nodes: Store<Node>,
    /// Pods.
    pods: Store<Pod>,
    /// Node Leases in `kube-node-lease`.
    leases: Store<Lease>,
    /// Health per node.
    health: HashMap<String, Health>,
    /// Pod uid → when it was first seen on a node with NoExecute taints it tolerates for a
    /// while.
    tainted_since: HashMap<String, Instant>,
    /// `--node-monitor-grace-period`.
    grace: Duration,
    /// `--node-startup-grace-period`.
    startup_grace: Duration,
}

impl Monitor {
    /// One pass of upstream's `monitorNodeHealth` and the taint-eviction work.
    async fn tick(&mut self) {
        let now_i = Instant::now();
        let now = Timestamp::now();
        let mut seen = HashSet::new();
        for node in self.nodes.state() {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            seen.insert(name.clone());
            let lease = informer::get(&self.leases, &format!("kube-node-lease/{name}"));
            let hb = (
                condition(&node, "Ready")
                    .and_then(|c| c.last_heartbeat_time.as_ref())
                    .map(|t| t.0),
                lease
                    .as_ref()
                    .and_then(|l| l.spec.as_ref())
                    .and_then(|s| s.renew_time.as_ref())
                    .map(|t| t.0),
            );
            // A node that never posted status is probed from its creation, with the startup
            // grace (upstream's fake Ready condition at the node's creationTimestamp).
            let never_posted = condition(&node, "Ready").is_none();
            let grace = if never_posted {
                self.startup_grace
            } else {
                self.grace
            };
            let h = self.health.entry(name.clone()).or_insert_with(|| {
                let age = node
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .filter(|_| never_posted)
                    .map(|c| now.duration_since(c.0).as_secs_f64().max(0.0))
                    .map_or(Duration::ZERO, Duration::from_secs_f64);
                Health {
                    heartbeat: hb,
                    probe: now_i.checked_sub(age).unwrap_or(now_i),
                }
            });
            if h.heartbeat != hb {
                h.heartbeat = hb;
                h.probe = now_i;
            }
            let stale = now_i.duration_since(h.probe) > grace;
            let mut node = (*node).clone();
            if stale && needs_unknown(&node) {
                let conditions = unknown_conditions(&node, now);
                let patch = json!({"status": {"conditions": conditions}});
                let api: Api<Node> = Api::all(self.ctx.client.clone());
                match api
                    .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    Ok(n) => {
                        tracing::info!(node = %name, "node stopped posting status; marked Unknown");
                        self.ctx
                            .event(
                                &reference(&n),
                                false,
                                "NodeNotReady",
                                "NodeNotReady",
                                format!("Node {name} status is now: NodeNotReady"),
                            )
                            .await;
                        node = n;
                    }
                    Err(e) => {
                        tracing::warn!(node = %name, error = %e, "marking node Unknown failed");
                        continue;
                    }
                }
            }
            self.taint(&node, now).await;
            if condition(&node, "Ready").is_some_and(|c| c.status != "True") {
                self.mark_pods_not_ready(&name, now).await;
            }
        }
        self.health.retain(|n, _| seen.contains(n));
        self.evict(now_i).await;
    }

    /// Brings the node's not-ready/unreachable taints in line with its Ready condition.
    async fn taint(&self, node: &Node, now: Timestamp) {
        if let Err(e) = sync_taints(&self.ctx.client, node, now).await {
            tracing::debug!(node = ?node.metadata.name, error = %e, "updating taints failed; retrying next pass");
        }
    }

    /// Sets Ready=False on the pods of a node that is not ready (upstream `MarkPodsNotReady`).
    async fn mark_pods_not_ready(&self, node: &str, now: Timestamp) {
        let pods: Vec<_> = self
            .pods
            .state()
            .into_iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
            .filter(|p| !terminal(p))
            .collect();
        for pod in pods {
            let mut pod = (*pod).clone();
            let Some(st) = pod.status.as_mut() else {
                continue;
            };
            let Some(ready) = st
                .conditions
                .iter_mut()
                .flatten()
                .find(|c| c.type_ == "Ready")
            else {
                continue;
            };
            if ready.status == "False" {
                continue;
            }
            ready.status = "False".to_owned();
            ready.last_transition_time = Some(Time(now));
            let (Some(ns), Some(name)) =
                (pod.metadata.namespace.clone(), pod.metadata.name.clone())
            else {
                continue;
            };
            let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), &ns);
            match api
                .replace_status(&name, &PostParams::default(), &pod)
                .await
            {
                Ok(_) => {
                    self.ctx
                        .event(
                            &reference(&pod),
                            true,
                            "NodeNotReady",
                            "NodeNotReady",
                            "Node is not ready".to_owned(),
                        )
                        .await;
                }
                Err(e) => tracing::debug!(pod = %name, error = %e, "marking pod not ready failed"),
            }
        }
    }

    /// Evicts pods that may no longer stay on their NoExecute-tainted nodes.
    async fn evict(&mut self, now: Instant) {
        let mut still = HashSet::new();
        for pod in self.pods.state() {
            if pod.metadata.deletion_timestamp.is_some() || terminal(&pod) {
                continue;
            }
            let Some(node_name) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                continue;
            };
            let Some(node) = informer::get(&self.nodes, &node_name) else {
                continue;
            };
            let taints: Vec<&Taint> = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .into_iter()
                .flatten()
                .filter(|t| t.effect == "NoExecute")
                .collect();
            let Some(delay) = eviction_delay(&pod, &taints) else {
                continue;
            };
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            still.insert(uid.clone());
            let since = *self.tainted_since.entry(uid).or_insert(now);
            if now.duration_since(since) < delay {
                continue;
            }
            self.evict_pod(&pod).await;
        }
        self.tainted_since.retain(|uid, _| still.contains(uid));
    }

    /// Marks the pod with DisruptionTarget and deletes it.
    async fn evict_pod(&self, pod: &Pod) {
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return;
        };
        tracing::info!(namespace = ns, pod = name, "taint eviction");
        self.ctx
            .event(
                &reference(pod),
                false,
                "TaintManagerEviction",
                "Delete",
                format!("Marking for deletion Pod {ns}/{name}"),
            )
            .await;
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), ns);
        let mut p = pod.clone();
        if let Some(st) = p.status.as_mut() {
            let conds = st.conditions.get_or_insert_with(Vec::new);
            conds.retain(|c| c.type_ != "DisruptionTarget");
            conds.push(PodCondition {
                type_: "DisruptionTarget".to_owned(),
                status: "True".to_owned(),
                reason: Some("DeletionByTaintManager".to_owned()),
                message: Some("Taint manager: deleting due to NoExecute taint".to_owned()),
                last_transition_time: Some(Time(Timestamp::now())),
                ..PodCondition::default()
            });
            if let Err(e) = api.replace_status(name, &PostParams::default(), &p).await {
                tracing::debug!(pod = name, error = %e, "DisruptionTarget not set");
            }
        }
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => tracing::warn!(pod = name, error = %e, "taint eviction failed"),
        }
    }
}

/// Brings `node`'s not-ready/unreachable taints in line with its Ready condition (one
/// PATCH guarded by its resourceVersion, none when they already are).
async fn sync_taints(client: &kube::Client, node: &Node, now: Timestamp) -> kube::Result<()> {
    let current = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let want = desired_taints(node, now);
    if want == current {
        return Ok(());
    }
    let Some(name) = node.metadata.name.as_deref() else {
        return Ok(());
    };
    // No taints left: the field goes, as upstream's patches leave it.
    let taints = if want.is_empty() {
        serde_json::Value::Null
    } else {
        json!(want)
    };
    let patch = json!({
        "metadata": {"resourceVersion": node.metadata.resource_version},
        "spec": {"taints": taints},
    });
    let api: Api<Node> = Api::all(client.clone());
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// Upstream's node update workers (`doNoScheduleTaintingPass` on every Node event): a node
/// that turns Ready loses its `not-ready` taints at once, not at the next monitor pass.
const TAINT_WORKERS: usize = 8;

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let updates = Queue::default();
    let nodes = ctx
        .informers
        .watch::<Node>(informer::enqueue_key(updates.clone()), &shutdown)
        .await;
    let pods = ctx
        .informers
        .watch::<Pod>(Box::new(|_, _| {}), &shutdown)
        .await;
    let leases = informer::spawn(
        Api::<Lease>::namespaced(ctx.root.clone(), "kube-node-lease"),
        Box::new(|_, _| {}),
        &shutdown,
    );
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async {
            nodes.wait_until_ready().await?;
            pods.wait_until_ready().await?;
            leases.wait_until_ready().await
        } => r?,
    }
    let grace = ctx.options.node_monitor_grace_period;
    let startup_grace = ctx.options.node_startup_grace_period;
    // Upstream's --node-monitor-period is 5 s; never slower than a quarter of the grace.
    let period = Duration::from_secs(5)
        .min(grace / 4)
        .max(Duration::from_millis(200));
    let mut monitor = Monitor {
        ctx,
        nodes,
        pods,
        leases,
        health: HashMap::new(),
        tainted_since: HashMap::new(),
        grace,
        startup_grace,
    };
    let (ctx, c, store) = (
        monitor.ctx.clone(),
        monitor.ctx.clone(),
        monitor.nodes.clone(),
    );
    let workers = run_workers(&ctx, &updates, TAINT_WORKERS, &shutdown, move |key| {
        let (c, store) = (c.clone(), store.clone());
        async move {
            if let Some(node) = informer::get(&store, &key) {
                sync_taints(&c.client, &node, Timestamp::now()).await?;
            }
            Ok(None)
        }
    });
    let monitor = async {
        loop {
            monitor.tick().await;
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(period) => {}
            }
        }
    };
    tokio::join!(workers, monitor);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, PodSpec};

    fn node(ready: &str, taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    ..NodeCondition::default()
                }]),
                ..NodeStatus::default()
            }),
            ..Node::default()
        }
    }

    fn taint(key: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            effect: effect.into(),
            ..Taint::default()
        }
    }

    #[test]
    fn go_durations_parse() {
        assert_eq!(parse_duration("40s"), Ok(Duration::from_secs(40)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5").is_err());
    }

    #[test]
    fn unknown_nodes_get_unreachable_taints_and_ready_nodes_lose_them() {
        let now = Timestamp::now();
        let t = desired_taints(&node("Unknown", vec![taint("x", "NoSchedule")]), now);
        let keys: Vec<_> = t
            .iter()
            .map(|t| (t.key.as_str(), t.effect.as_str()))
            .collect();
        assert_eq!(
            keys,
            vec![
                ("x", "NoSchedule"),
                (UNREACHABLE, "NoSchedule"),
                (UNREACHABLE, "NoExecute")
            ]
        );
        assert!(t[2].time_added.is_some());
        let back = desired_taints(&node("True", t), now);
        assert_eq!(back.len(), 1);
        let nr = desired_taints(&node("False", vec![taint(UNREACHABLE, "NoExecute")]), now);
        assert!(nr.iter().all(|t| t.key == NOT_READY));
    }

    #[test]
    fn a_node_that_never_posted_status_gets_never_updated_conditions_and_no_early_taint() {
        let now = Timestamp::now();
        let created = Time(Timestamp::UNIX_EPOCH);
        let mut bare = Node::default();
        bare.metadata.creation_timestamp = Some(created.clone());
        bare.spec = Some(NodeSpec {
            taints: Some(vec![taint(UNREACHABLE, "NoSchedule")]),
            ..NodeSpec::default()
        });
        // Before any condition: none of our taints.
        assert!(desired_taints(&bare, now).is_empty());
        assert!(needs_unknown(&bare));
        let conds = unknown_conditions(&bare, now);
        let types: Vec<_> = conds.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(types, CONDITION_TYPES);
        for c in &conds {
            assert_eq!(c.status, "Unknown");
            assert_eq!(c.reason.as_deref(), Some("NodeStatusNeverUpdated"));
            assert_eq!(
                c.message.as_deref(),
                Some("Kubelet never posted node status.")
            );
            assert_eq!(c.last_heartbeat_time.as_ref(), Some(&created));
        }
        // Posted: Unknown everywhere, nothing more to post; tainted unreachable.
        bare.status = Some(NodeStatus {
            conditions: Some(conds.clone()),
            ..NodeStatus::default()
        });
        assert!(!needs_unknown(&bare));
        assert_eq!(unknown_conditions(&bare, now), conds);
        let keys: Vec<_> = desired_taints(&bare, now)
            .into_iter()
            .map(|t| (t.key, t.effect))
            .collect();
        assert_eq!(
            keys,
            vec![
                (UNREACHABLE.to_owned(), "NoSchedule".to_owned()),
                (UNREACHABLE.to_owned(), "NoExecute".to_owned())
            ]
        );
        // A kubelet's stale True condition turns Unknown with "stopped posting".
        let stale = node("True", vec![]);
        let c = &unknown_conditions(&stale, now)[0];
        assert_eq!(c.reason.as_deref(), Some("NodeStatusUnknown"));
    }

    #[test]
    fn toleration_seconds_bound_the_stay_and_untolerated_taints_evict_at_once() {
        let t = taint(UNREACHABLE, "NoExecute");
        let mut pod = Pod {
            spec: Some(PodSpec::default()),
            ..Pod::default()
        };
        assert_eq!(eviction_delay(&pod, &[&t]), Some(Duration::ZERO));
        pod.spec = Some(PodSpec {
            tolerations: Some(vec![Toleration {
                key: Some(UNREACHABLE.into()),
                operator: Some("Exists".into()),
                effect: Some("NoExecute".into()),
                toleration_seconds: Some(7),
                ..Toleration::default()
            }]),
            ..PodSpec::default()
        });
        assert_eq!(eviction_delay(&pod, &[&t]), Some(Duration::from_secs(7)));
        assert_eq!(eviction_delay(&pod, &[]), None);
    }
}
