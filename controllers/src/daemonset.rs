//! The DaemonSet controller (`daemonset`): one pod per eligible node (node selector, required
//! node affinity, taints against the pod's tolerations plus the ones upstream adds), each
//! pinned by injected node affinity on `metadata.name`; pods on nodes that no longer qualify,
//! duplicates and failed pods are removed; RollingUpdate replaces outdated pods at most
//! `maxUnavailable` at a time (OnDelete leaves them). Each template is kept as a
//! ControllerRevision ([`crate::history`]) whose hash labels the pods made from it; a
//! template that returns to an earlier one (`kubectl rollout undo`) reuses it. Upstream
//! `pkg/controller/daemon`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{ControllerRevision, DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{
    Affinity, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
    Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::history::{self, Created, Snapshot};
use crate::node_lifecycle::{NOT_READY, UNREACHABLE, tolerates};
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer, reference};

/// Label with the hash of the template (revision) a pod was made from.
const HASH_LABEL: &str = history::POD_HASH_LABEL;
/// Upstream's (deprecated) template generation label.
const GENERATION_LABEL: &str = "pod-template-generation";
/// How long to wait for the cache to show our own creations and deletions.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(30);

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The tolerations upstream adds to every daemon pod (`AddOrUpdateDaemonPodTolerations`).
fn daemon_tolerations(host_network: bool) -> Vec<Toleration> {
    let t = |key: &str, effect: &str| Toleration {
        key: Some(key.to_owned()),
        operator: Some("Exists".to_owned()),
        effect: Some(effect.to_owned()),
        ..Toleration::default()
    };
    let mut out = vec![
        t(NOT_READY, "NoExecute"),
        t(UNREACHABLE, "NoExecute"),
        t("node.kubernetes.io/disk-pressure", "NoSchedule"),
        t("node.kubernetes.io/memory-pressure", "NoSchedule"),
        t("node.kubernetes.io/pid-pressure", "NoSchedule"),
        t("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if host_network {
        out.push(t("node.kubernetes.io/network-unavailable", "NoSchedule"));
    }
    out
}

/// Whether `req` holds for `value` (absent: None).
fn requirement_holds(req: &NodeSelectorRequirement, value: Option<&str>) -> bool {
    let values = req.values.clone().unwrap_or_default();
    match req.operator.as_str() {
        "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| v.parse::<i64>().ok()),
                values.first().and_then(|b| b.parse::<i64>().ok()),
            ) else {
                return false;
            };
            if req.operator == "Gt" {
                v > bound
            } else {
                v < bound
            }
        }
        _ => false,
    }
}

/// Whether `node` satisfies one node selector term.
fn term_matches(term: &NodeSelectorTerm, node: &Node) -> bool {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let exprs = term.match_expressions.iter().flatten();
    let fields = term.match_fields.iter().flatten();
    let has_any = term
        .match_expressions
        .as_ref()
        .is_some_and(|e| !e.is_empty())
        || term.match_fields.as_ref().is_some_and(|f| !f.is_empty());
    has_any
        && exprs
            .into_iter()
            .all(|r| requirement_holds(r, labels.get(&r.key).map(String::as_str)))
        && fields.into_iter().all(|r| {
            let v = (r.key == "metadata.name")
                .then_some(node.metadata.name.as_deref())
                .flatten();
            requirement_holds(r, v)
        })
}

/// Whether the daemon pod `template` may run on `node` (upstream `NodeShouldRunDaemonPod`:
/// node selector, required node affinity, NoSchedule/NoExecute taints).
fn should_run(ds: &DaemonSet, node: &Node) -> bool {
    let Some(spec) = ds.spec.as_ref().and_then(|s| s.template.spec.as_ref()) else {
        return false;
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    if let Some(sel) = &spec.node_selector
        && !sel.iter().all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    if let Some(req) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| {
            n.required_during_scheduling_ignored_during_execution
                .as_ref()
        })
        && !req
            .node_selector_terms
            .iter()
            .any(|t| term_matches(t, node))
    {
        return false;
    }
    let mut tolerations = spec.tolerations.clone().unwrap_or_default();
    tolerations.extend(daemon_tolerations(spec.host_network == Some(true)));
    let taints: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    taints
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .all(|t| tolerations.iter().any(|tol| tolerates(tol, t)))
}

/// The daemon pod for `node`.
fn new_pod(ds: &DaemonSet, node: &str, hash: &str) -> Pod {
    let spec = ds.spec.clone().unwrap_or_default();
    let mut meta = spec.template.metadata.unwrap_or_default();
    let name = ds.metadata.name.clone().unwrap_or_default();
    meta.name = None;
    meta.generate_name = Some(format!("{name}-"));
    meta.namespace = ds.metadata.namespace.clone();
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(HASH_LABEL.to_owned(), hash.to_owned());
    labels.insert(
        GENERATION_LABEL.to_owned(),
        ds.metadata.generation.unwrap_or(1).to_string(),
    );
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "DaemonSet".to_owned(),
        name,
        uid: ds.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let mut pod_spec = spec.template.spec.unwrap_or_default();
    // Node affinity on the node's name replaces any required terms (upstream
    // `ReplaceDaemonSetPodNodeNameNodeAffinity`).
    let term = NodeSelectorTerm {
        match_fields: Some(vec![NodeSelectorRequirement {
            key: "metadata.name".to_owned(),
            operator: "In".to_owned(),
            values: Some(vec![node.to_owned()]),
        }]),
        match_expressions: None,
    };
    let affinity = pod_spec.affinity.get_or_insert_with(Affinity::default);
    let na = affinity
        .node_affinity
        .get_or_insert_with(NodeAffinity::default);
    na.required_during_scheduling_ignored_during_execution = Some(NodeSelector {
        node_selector_terms: vec![term],
    });
    let tolerations = pod_spec.tolerations.get_or_insert_with(Vec::new);
    for t in daemon_tolerations(pod_spec.host_network == Some(true)) {
        if !tolerations
            .iter()
            .any(|x| x.key == t.key && x.effect == t.effect)
        {
            tolerations.push(t);
        }
    }
    Pod {
        metadata: meta,
        spec: Some(pod_spec),
        status: None,
    }
}

/// The node a daemon pod is meant for (its nodeName, else the injected affinity).
fn pod_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = &spec.node_name {
        return Some(n.clone());
    }
    spec.affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find(|r| r.key == "metadata.name" && r.operator == "In")
        .and_then(|r| r.values.as_ref()?.first().cloned())
}

/// Whether the pod is Ready.
fn ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Pods a sync created and deleted (upstream's expectations).
#[derive(Default)]
struct Pending {
    /// Names created.
    created: Vec<String>,
    /// Names deleted.
    deleted: Vec<String>,
    /// When.
    at: Option<Instant>,
}

/// The loop's state.
#[derive(Clone)]
struct State {
    /// The controller's context.
    ctx: Context,
    /// DaemonSets.
    sets: Store<DaemonSet>,
    /// Nodes.
    nodes: Store<Node>,
    /// Pods.
    pods: Store<Pod>,
    /// ControllerRevisions.
    revisions: Store<ControllerRevision>,
    /// Pods created and deleted per DaemonSet that the cache may not show yet, and since when.
    pending: Arc<Mutex<HashMap<String, Pending>>>,
}

/// Upstream `constructHistory`: the revision of the current template (created, or an
/// earlier one renumbered as the newest) and the DaemonSet's other revisions. `None` when a
/// hash collision made the collision count grow (sync again).
async fn construct_history(
    st: &State,
    ds: &DaemonSet,
) -> Result<Option<(ControllerRevision, Vec<ControllerRevision>)>, ReconcileError> {
    let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
    let uid = ds.metadata.uid.as_deref().unwrap_or_default();
    let spec = ds.spec.clone().unwrap_or_default();
    let data = history::template_patch(&spec.template)?;
    let (mut current, old): (Vec<_>, Vec<_>) = history::controlled(&st.revisions, ns, uid)
        .into_iter()
        .partition(|r| history::data(r) == Some(&data));
    let next = history::next_revision(&old);
    // Duplicates of the current template (upstream `dedupCurHistories`): keep the newest.
    if current.len() > 1 {
        let extra: Vec<&ControllerRevision> = current.iter().rev().skip(1).collect();
        history::delete(&st.ctx.client, &extra).await?;
    }
    let cur = match current.pop() {
        Some(cur) if cur.revision < next => history::renumber(&st.ctx.client, &cur, next).await?,
        Some(cur) => cur,
        None => {
            let collision_count = ds.status.as_ref().and_then(|s| s.collision_count);
            let snap = Snapshot {
                kind: "DaemonSet",
                owner: &ds.metadata,
                template_labels: spec
                    .template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.as_ref()),
                data,
                revision: next,
                hash_label: HASH_LABEL,
                collision_count,
            };
            match history::create(&st.ctx.client, &snap).await? {
                Created::Made(r) => *r,
                Created::Collision => {
                    bump_collision_count(st, ds).await?;
                    return Ok(None);
                }
            }
        }
    };
    Ok(Some((cur, old)))
}

/// Grows the DaemonSet's `status.collisionCount` after a revision name collision (read
/// afresh: a stale count only needs another look).
async fn bump_collision_count(st: &State, ds: &DaemonSet) -> Result<(), ReconcileError> {
    let ns = ds.metadata.namespace.as_deref().unwrap_or_default();
    let name = ds.metadata.name.as_deref().unwrap_or_default();
    let api: Api<DaemonSet> = Api::namespaced(st.ctx.client.clone(), ns);
    let mut fresh = api.get(name).await?;
    let seen = ds.status.as_ref().and_then(|s| s.collision_count);
    let status = fresh.status.get_or_insert_with(DaemonSetStatus::default);
    if status.collision_count != seen {
        return Ok(());
    }
    status.collision_count = Some(seen.unwrap_or(0) + 1);
    api.replace_status(name, &PostParams::default(), &fresh)
        .await?;
    Ok(())
}

/// Syncs DaemonSet `key`.
async fn sync(st: State, key: String) -> SyncResult {
    let Some(ds) = informer::get(&st.sets, &key) else {
        return Ok(None);
    };
    if ds.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let uid = ds.metadata.uid.clone().unwrap_or_default();
    let ns = ds.metadata.namespace.clone().unwrap_or_default();
    let Some((cur, old_revisions)) = construct_history(&st, &ds).await? else {
        return Ok(Some(Duration::from_millis(200)));
    };
    let hash = cur
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(HASH_LABEL))
        .cloned()
        .unwrap_or_else(|| cur.metadata.name.clone().unwrap_or_default());
    let all = st.pods.state();
    let mine: Vec<&Pod> = all
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|p| {
            p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let mut by_node: HashMap<String, Vec<&Pod>> = HashMap::new();
    for p in &mine {
        if let Some(n) = pod_node(p) {
            by_node.entry(n).or_default().push(p);
        }
    }
    let nodes = st.nodes.state();
    let api: Api<Pod> = Api::namespaced(st.ctx.client.clone(), &ns);
    let ds_ref = reference(ds.as_ref());
    let spec = ds.spec.clone().unwrap_or_default();

    // Wait for the cache to show the last round's changes.
    let settled = {
        let names: HashMap<&str, &Pod> = all
            .iter()
            .filter_map(|p| p.metadata.name.as_deref().map(|n| (n, p.as_ref())))
            .collect();
        let mut m = st
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let done = m.get(&key).is_none_or(|e| {
            e.at.is_some_and(|t| t.elapsed() > EXPECTATIONS_TIMEOUT)
                || (e.created.iter().all(|n| names.contains_key(n.as_str()))
                    && e.deleted.iter().all(|n| {
                        names
                            .get(n.as_str())
                            .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
                    }))
        });
        if done {
            m.remove(&key);
        }
        done
    };

    let mut to_create: Vec<String> = Vec::new();
    let mut to_delete: Vec<&Pod> = Vec::new();
    let mut desired = 0;
    let mut current = 0;
    let mut misscheduled = 0;
    let mut ready_n = 0;
    let mut updated = 0;
    let mut available = 0;
    let mut outdated_on_nodes: Vec<&Pod> = Vec::new();
    let mut unavailable_now = 0;
    for node in &nodes {
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        let pods = by_node.remove(&name).unwrap_or_default();
        if should_run(&ds, node) {
            desired += 1;
            // Failed pods go (and are replaced); duplicates beyond the first go.
            let (failed, mut live): (Vec<&Pod>, Vec<&Pod>) = pods.into_iter().partition(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed")
            });
            to_delete.extend(failed);
            if live.is_empty() {
                to_create.push(name);
                unavailable_now += 1;
                continue;
            }
            current += 1;
            live.sort_by(|a, b| {
                a.metadata
                    .creation_timestamp
                    .cmp(&b.metadata.creation_timestamp)
            });
            let keep = live[0];
            to_delete.extend(live.into_iter().skip(1));
            let fresh = keep
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(HASH_LABEL))
                == Some(&hash);
            if ready(keep) {
                ready_n += 1;
                available += 1;
            } else {
                unavailable_now += 1;
            }
            if fresh {
                updated += 1;
            } else {
                outdated_on_nodes.push(keep);
            }
        } else if !pods.is_empty() {
            misscheduled += 1;
            to_delete.extend(pods);
        }
    }
    // Pods for nodes that no longer exist.
    for pods in by_node.into_values() {
        to_delete.extend(pods);
    }
    // RollingUpdate: replace outdated pods, unavailable ones first, within maxUnavailable.
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    if strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate" {
        let max_unavailable = strategy
            .rolling_update
            .as_ref()
            .and_then(|r| r.max_unavailable.clone())
            .unwrap_or(IntOrString::Int(1));
        let max = match max_unavailable {
            IntOrString::Int(n) => usize::try_from(n).unwrap_or(0),
            IntOrString::String(s) => {
                let pct: usize = s.trim_end_matches('%').parse().unwrap_or(0);
                (pct * desired).div_ceil(100)
            }
        }
        .max(1);
        outdated_on_nodes.sort_by_key(|p| ready(p));
        let mut budget = max.saturating_sub(unavailable_now);
        for p in outdated_on_nodes {
            if !ready(p) {
                to_delete.push(p);
            } else if budget > 0 {
                budget -= 1;
                to_delete.push(p);
            }
        }
    }

    let mut pending = Pending::default();
    if settled {
        for node in &to_create {
            let pod = new_pod(&ds, node, &hash);
            match api.create(&PostParams::default(), &pod).await {
                Ok(p) => {
                    let name = p.metadata.name.unwrap_or_default();
                    pending.created.push(name.clone());
                    st.ctx
                        .event(
                            &ds_ref,
                            false,
                            "SuccessfulCreate",
                            "Create",
                            format!("Created pod: {name}"),
                        )
                        .await;
                }
                Err(e) => {
                    st.ctx
                        .event(
                            &ds_ref,
                            true,
                            "FailedCreate",
                            "Create",
                            format!("Error creating: {e}"),
                        )
                        .await;
                    return Err(ReconcileError::Kube(e));
                }
            }
        }
        for p in &to_delete {
            let Some(name) = p.metadata.name.as_deref() else {
                continue;
            };
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {
                    pending.deleted.push(name.to_owned());
                    st.ctx
                        .event(
                            &ds_ref,
                            false,
                            "SuccessfulDelete",
                            "Delete",
                            format!("Deleted pod: {name}"),
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
        }
        let changed = !(pending.created.is_empty() && pending.deleted.is_empty());
        if changed && let Ok(mut m) = st.pending.lock() {
            pending.at = Some(Instant::now());
            m.insert(key.clone(), pending);
        }
        // Upstream `cleanupHistory`: old revisions beyond the limit that no pod uses.
        if !changed {
            let live: HashSet<&str> = mine
                .iter()
                .filter_map(|p| p.metadata.labels.as_ref()?.get(HASH_LABEL))
                .map(String::as_str)
                .collect();
            let limit = spec
                .revision_history_limit
                .unwrap_or(history::DEFAULT_LIMIT);
            let trim = history::to_trim(
                &old_revisions,
                limit,
                |r| {
                    r.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(HASH_LABEL))
                        .is_some_and(|h| live.contains(h.as_str()))
                },
                true,
            );
            history::delete(&st.ctx.client, &trim).await?;
        }
    }

    let to_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let old = ds.status.clone().unwrap_or_default();
    let status = DaemonSetStatus {
        current_number_scheduled: to_i32(current),
        desired_number_scheduled: to_i32(desired),
        number_misscheduled: to_i32(misscheduled),
        number_ready: to_i32(ready_n),
        number_available: Some(to_i32(available)),
        number_unavailable: (desired > available).then(|| to_i32(desired - available)),
        updated_number_scheduled: Some(to_i32(updated)),
        observed_generation: ds.metadata.generation,
        collision_count: old.collision_count,
        conditions: old.conditions.clone(),
    };
    if status != old {
        let sets: Api<DaemonSet> = Api::namespaced(st.ctx.client.clone(), &ns);
        let mut d = (*ds).clone();
        d.status = Some(status);
        let name = ds.metadata.name.as_deref().unwrap_or_default();
        match sets.replace_status(name, &PostParams::default(), &d).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                return Ok(Some(Duration::from_millis(200)));
            }
            Err(e) => return Err(ReconcileError::Kube(e)),
        }
    }
    Ok((!settled).then_some(Duration::from_millis(500)))
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let sets = ctx
        .informers
        .watch::<DaemonSet>(informer::enqueue_key(queue.clone()), &shutdown)
        .await;
    let (q, all_sets) = (queue.clone(), sets.clone());
    let nodes = ctx
        .informers
        .watch::<Node>(
            Box::new(move |old: Option<&Node>, new: Option<&Node>| {
                // Heartbeat-only updates do not change eligibility.
                if let (Some(o), Some(n)) = (old, new)
                    && o.spec == n.spec
                    && o.metadata.labels == n.metadata.labels
                {
                    return;
                }
                for d in all_sets.state() {
                    q.add(informer::key(d.as_ref()));
                }
            }),
            &shutdown,
        )
        .await;
    let pods = ctx
        .informers
        .watch::<Pod>(
            informer::enqueue_controller("DaemonSet", queue.clone()),
            &shutdown,
        )
        .await;
    let revisions = ctx
        .informers
        .watch::<ControllerRevision>(
            informer::enqueue_controller("DaemonSet", queue.clone()),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async {
            sets.wait_until_ready().await?;
            nodes.wait_until_ready().await?;
            pods.wait_until_ready().await?;
            revisions.wait_until_ready().await
        } => r?,
    }
    for d in sets.state() {
        queue.add(informer::key(d.as_ref()));
    }
    let st = State {
        ctx: ctx.clone(),
        sets,
        nodes,
        pods,
        revisions,
        pending: Arc::default(),
    };
    run_workers(&ctx, &queue, 2, &shutdown, move |key| sync(st.clone(), key)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::DaemonSetSpec;
    use k8s_openapi::api::core::v1::{NodeSpec, PodSpec, PodTemplateSpec};
    use kube::api::ObjectMeta;

    fn ds() -> DaemonSet {
        DaemonSet {
            metadata: ObjectMeta {
                name: Some("agent".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: Some(DaemonSetSpec {
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec::default()),
                },
                ..DaemonSetSpec::default()
            }),
            status: None,
        }
    }

    fn node(name: &str, taints: Vec<Taint>) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            status: None,
        }
    }

    #[test]
    fn daemon_pods_tolerate_unschedulable_and_not_ready_but_not_foreign_taints() {
        let cordoned = Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        assert!(should_run(&ds(), &node("a", vec![cordoned])));
        let foreign = Taint {
            key: "dedicated".into(),
            value: Some("gpu".into()),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        assert!(!should_run(&ds(), &node("b", vec![foreign])));
    }

    #[test]
    fn new_pods_are_pinned_by_node_affinity_on_the_node_name() {
        let p = new_pod(&ds(), "n1", "h");
        assert_eq!(pod_node(&p).as_deref(), Some("n1"));
        assert!(p.spec.as_ref().is_some_and(|s| s.node_name.is_none()));
        assert_eq!(
            p.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(HASH_LABEL))
                .map(String::as_str),
            Some("h")
        );
    }
}
