//! The Deployment controller (upstream's `pkg/controller/deployment`): RollingUpdate and
//! Recreate through ReplicaSets named `<deployment>-<pod-template-hash>`, revision
//! annotations, proportional scaling, pause/resume, `revisionHistoryLimit` cleanup,
//! `progressDeadlineSeconds`, and upstream's conditions, status fields and events.

mod rollout;
mod status;
mod util;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus, ReplicaSet, ReplicaSetSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, ReconcileError, reference};
use crate::informer;
use crate::queue::{self, Queue, SyncResult};
use crate::replicaset::pods::{self, Selector};
use rollout::*;
use status::*;
use util::*;

/// `--concurrent-deployment-syncs`.
const WORKERS: usize = 5;

/// Starts the Deployment controller.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> crate::LoopFuture {
    Box::pin(run(ctx, shutdown))
}

struct Shared {
    ctx: Context,
    deployments: Store<Deployment>,
    replicasets: Store<ReplicaSet>,
}

async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let deployments = ctx
        .informers
        .watch::<Deployment>(informer::enqueue_key(queue.clone()), &shutdown)
        .await;
    let (q, ds) = (queue.clone(), deployments.clone());
    let replicasets = ctx
        .informers
        .watch::<ReplicaSet>(
            Box::new(move |old: Option<&ReplicaSet>, new: Option<&ReplicaSet>| {
                for rs in [old, new].into_iter().flatten() {
                    for k in deployments_for_rs(&ds, rs) {
                        q.add(k);
                    }
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async {
            deployments.wait_until_ready().await?;
            replicasets.wait_until_ready().await
        } => r?,
    }
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        deployments,
        replicasets,
    });
    for d in shared.deployments.state() {
        queue.add(informer::key(d.as_ref()));
    }
    queue::run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
        let s = shared.clone();
        async move { Box::pin(sync(&s, &key)).await }
    })
    .await;
    Ok(())
}

/// Deployments to wake for a ReplicaSet: its controller, or for an orphan every matching one.
fn deployments_for_rs(ds: &Store<Deployment>, rs: &ReplicaSet) -> Vec<String> {
    let ns = rs.metadata.namespace.clone().unwrap_or_default();
    if let Some(r) = pods::controller_of(&rs.metadata) {
        return if r.kind == "Deployment" {
            vec![format!("{ns}/{}", r.name)]
        } else {
            Vec::new()
        };
    }
    ds.state()
        .iter()
        .filter(|d| d.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|d| selector(d).matches(rs.metadata.labels.as_ref()))
        .map(|d| informer::key(d.as_ref()))
        .collect()
}

/// A label selector in the API's query syntax.
fn selector_string(sel: &LabelSelector) -> String {
    let mut parts: Vec<String> = sel
        .match_labels
        .iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for e in sel.match_expressions.iter().flatten() {
        let values = e.values.clone().unwrap_or_default().join(",");
        parts.push(match e.operator.as_str() {
            "In" => format!("{} in ({values})", e.key),
            "NotIn" => format!("{} notin ({values})", e.key),
            "Exists" => e.key.clone(),
            _ => format!("!{}", e.key),
        });
    }
    parts.join(",")
}

fn selector(d: &Deployment) -> Selector {
    Selector::from_label_selector(d.spec.as_ref().map(|s| &s.selector))
}

fn name_of<K: Resource>(o: &K) -> String {
    o.meta().name.clone().unwrap_or_default()
}

/// `syncDeployment`.
async fn sync(s: &Shared, key: &str) -> SyncResult {
    let Some(d) = informer::get(&s.deployments, key) else {
        return Ok(None);
    };
    let mut d = (*d).clone();
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let sel = selector(&d);
    if d.spec
        .as_ref()
        .and_then(|sp| sp.selector.match_labels.as_ref())
        .is_none_or(BTreeMap::is_empty)
        && d.spec
            .as_ref()
            .and_then(|sp| sp.selector.match_expressions.as_ref())
            .is_none_or(Vec::is_empty)
    {
        s.ctx
            .event(
                &reference(&d),
                true,
                "SelectingAll",
                "Select",
                "This deployment is selecting all pods. A non-empty selector is required."
                    .to_owned(),
            )
            .await;
        return Ok(None);
    }
    let rs_list = claim_replicasets(s, &d, &ns, &sel).await?;
    if d.metadata.deletion_timestamp.is_some() {
        return Box::pin(sync_status_only(s, &mut d, &rs_list)).await;
    }
    check_paused_conditions(s, &mut d).await?;
    let paused = d.spec.as_ref().and_then(|sp| sp.paused).unwrap_or(false);
    if paused {
        return Box::pin(sync_scale(s, &mut d, &rs_list)).await;
    }
    if is_scaling_event(&d, &rs_list) {
        return Box::pin(sync_scale(s, &mut d, &rs_list)).await;
    }
    if is_rolling(&d) {
        Box::pin(rollout_rolling(s, &mut d, &rs_list)).await
    } else {
        Box::pin(rollout_recreate(s, &mut d, &rs_list)).await
    }
}

/// ReplicaSets of the deployment after adoption/release (`getReplicaSetsForDeployment`).
async fn claim_replicasets(
    s: &Shared,
    d: &Deployment,
    ns: &str,
    sel: &Selector,
) -> Result<Vec<ReplicaSet>, ReconcileError> {
    let uid = d.metadata.uid.clone().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(s.ctx.client.clone(), ns);
    let deleting = d.metadata.deletion_timestamp.is_some();
    let mut out = Vec::new();
    let mut can_adopt: Option<bool> = None;
    for rs in s.replicasets.state() {
        if rs.metadata.namespace.as_deref() != Some(ns) {
            continue;
        }
        let matches = sel.matches(rs.metadata.labels.as_ref());
        match pods::controller_of(&rs.metadata) {
            Some(r) if r.uid == uid => {
                if matches || deleting {
                    out.push((*rs).clone());
                } else {
                    let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": uid}], "uid": rs.metadata.uid}});
                    match api
                        .patch(
                            &name_of(rs.as_ref()),
                            &PatchParams::default(),
                            &Patch::Strategic(patch),
                        )
                        .await
                    {
                        Ok(_) => {}
                        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 422 => {}
                        Err(e) => return Err(e.into()),
                    }
                }
            }
            Some(_) => {}
            None => {
                if !matches || deleting || rs.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                if can_adopt.is_none() {
                    let fresh = Api::<Deployment>::namespaced(s.ctx.client.clone(), ns)
                        .get_opt(&name_of(d))
                        .await?;
                    can_adopt = Some(fresh.is_some_and(|f| {
                        f.metadata.uid.as_deref() == Some(uid.as_str())
                            && f.metadata.deletion_timestamp.is_none()
                    }));
                }
                if can_adopt != Some(true) {
                    continue;
                }
                let r = pods::controller_ref("apps/v1", "Deployment", &d.metadata);
                let patch = json!({"metadata": {"ownerReferences": [r], "uid": rs.metadata.uid}});
                match api
                    .patch(
                        &name_of(rs.as_ref()),
                        &PatchParams::default(),
                        &Patch::Strategic(patch),
                    )
                    .await
                {
                    Ok(adopted) => out.push(adopted),
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 422 => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Ok(out)
}

/// Sets Progressing Unknown DeploymentPaused / DeploymentResumed (`checkPausedConditions`).
async fn check_paused_conditions(s: &Shared, d: &mut Deployment) -> Result<(), ReconcileError> {
    if progress_deadline(d).is_none() {
        return Ok(());
    }
    let paused = d.spec.as_ref().and_then(|sp| sp.paused).unwrap_or(false);
    let mut status = d.status.clone().unwrap_or_default();
    let reason = condition(&status, "Progressing").and_then(|c| c.reason.clone());
    let paused_reason = reason.as_deref() == Some("DeploymentPaused");
    let cond = if paused && !paused_reason {
        new_condition(
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".to_owned(),
        )
    } else if !paused && paused_reason {
        new_condition(
            "Progressing",
            "Unknown",
            "DeploymentResumed",
            "Deployment is resumed".to_owned(),
        )
    } else {
        return Ok(());
    };
    set_condition(&mut status, cond);
    write_status(s, d, status).await
}

/// `isScalingEvent`: an active ReplicaSet's desired-replicas annotation differs from
/// `spec.replicas`.
fn is_scaling_event(d: &Deployment, rs_list: &[ReplicaSet]) -> bool {
    let (new, old) = find_new_and_old(d, rs_list);
    new.iter()
        .chain(old.iter())
        .filter(|rs| rs_replicas(rs) > 0)
        .any(|rs| desired_replicas_annotation(rs).is_some_and(|v| v != replicas(d)))
}

/// (new ReplicaSet, old ReplicaSets): the oldest ReplicaSet whose template equals the
/// deployment's is the new one (`FindNewReplicaSet`, `FindOldReplicaSets`).
fn find_new_and_old(
    d: &Deployment,
    rs_list: &[ReplicaSet],
) -> (Option<ReplicaSet>, Vec<ReplicaSet>) {
    let mut sorted: Vec<&ReplicaSet> = rs_list.iter().collect();
    sorted.sort_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        ta.cmp(&tb)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    let template = d.spec.as_ref().map(|s| &s.template);
    let new = sorted
        .iter()
        .find(|rs| equal_ignore_hash(rs.spec.as_ref().and_then(|s| s.template.as_ref()), template))
        .map(|rs| (*rs).clone());
    let new_uid = new.as_ref().and_then(|n| n.metadata.uid.clone());
    let old = sorted
        .into_iter()
        .filter(|rs| rs.metadata.uid != new_uid || new_uid.is_none())
        .cloned()
        .collect();
    (new, old)
}

/// `getAllReplicaSetsAndSyncRevision`: the new ReplicaSet (created when `create`), brought
/// up to date with the deployment's annotations and revision; and the old ones.
async fn new_and_old(
    s: &Shared,
    d: &mut Deployment,
    rs_list: &[ReplicaSet],
    create: bool,
) -> Result<(Option<ReplicaSet>, Vec<ReplicaSet>), ReconcileError> {
    let (existing, old) = find_new_and_old(d, rs_list);
    let max_old = old
        .iter()
        .map(|rs| revision(rs.metadata.annotations.as_ref()))
        .max()
        .unwrap_or(0);
    let new_revision = (max_old + 1).to_string();
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(s.ctx.client.clone(), &ns);
    if let Some(mut rs) = existing {
        let mut changed = copy_annotations(d, &mut rs);
        let ann = rs.metadata.annotations.get_or_insert_with(BTreeMap::new);
        let cur = ann.get(REVISION).cloned().unwrap_or_default();
        if cur.parse::<i64>().unwrap_or(0) < max_old + 1 {
            if !cur.is_empty() {
                let hist = match ann.get(REVISION_HISTORY) {
                    Some(h) if !h.is_empty() => format!("{h},{cur}"),
                    _ => cur.clone(),
                };
                ann.insert(REVISION_HISTORY.to_owned(), hist);
            }
            ann.insert(REVISION.to_owned(), new_revision.clone());
            changed = true;
        }
        let mrs = d.spec.as_ref().and_then(|sp| sp.min_ready_seconds);
        if let Some(spec) = rs.spec.as_mut()
            && spec.min_ready_seconds != mrs
        {
            spec.min_ready_seconds = mrs;
            changed = true;
        }
        if changed {
            rs = api
                .replace(&name_of(&rs), &PostParams::default(), &rs)
                .await?;
        }
        let rev = rs
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(REVISION))
            .cloned()
            .unwrap_or_default();
        set_deployment_revision(s, d, &rev).await?;
        let mut status = d.status.clone().unwrap_or_default();
        if progress_deadline(d).is_some() && condition(&status, "Progressing").is_none() {
            set_condition(
                &mut status,
                new_condition(
                    "Progressing",
                    "True",
                    "FoundNewReplicaSet",
                    format!("Found new replica set \"{}\"", name_of(&rs)),
                ),
            );
            write_status(s, d, status).await?;
        }
        return Ok((Some(rs), old));
    }
    if !create {
        return Ok((None, old));
    }
    // Create the new ReplicaSet.
    let mut template = d
        .spec
        .as_ref()
        .map(|sp| sp.template.clone())
        .unwrap_or_default();
    let collision = d.status.as_ref().and_then(|st| st.collision_count);
    let hash = compute_hash(&template, collision);
    template
        .metadata
        .get_or_insert_with(ObjectMeta::default)
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HASH_LABEL.to_owned(), hash.clone());
    let mut selector: LabelSelector = d
        .spec
        .as_ref()
        .map(|sp| sp.selector.clone())
        .unwrap_or_default();
    selector
        .match_labels
        .get_or_insert_with(BTreeMap::new)
        .insert(HASH_LABEL.to_owned(), hash.clone());
    let name = format!("{}-{hash}", name_of(d));
    let all: Vec<ReplicaSet> = old.clone();
    let new_replicas = new_rs_new_replicas(d, &all, None);
    let mut rs = ReplicaSet {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(ns.clone()),
            labels: template.metadata.as_ref().and_then(|m| m.labels.clone()),
            owner_references: Some(vec![pods::controller_ref(
                "apps/v1",
                "Deployment",
                &d.metadata,
            )]),
            ..ObjectMeta::default()
        },
        spec: Some(ReplicaSetSpec {
            replicas: Some(new_replicas),
            min_ready_seconds: d.spec.as_ref().and_then(|sp| sp.min_ready_seconds),
            selector,
            template: Some(template),
        }),
        status: None,
    };
    copy_annotations(d, &mut rs);
    rs.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(REVISION.to_owned(), new_revision.clone());
    set_replicas_annotations(&mut rs, replicas(d), replicas(d) + max_surge(d));
    let created = match api.create(&PostParams::default(), &rs).await {
        Ok(c) => c,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            // Same name: ours with the same template is fine, otherwise a hash collision.
            let found = api.get_opt(&name).await?;
            if let Some(f) = found {
                let owned = pods::controller_of(&f.metadata)
                    .is_some_and(|r| Some(&r.uid) == d.metadata.uid.as_ref());
                if owned
                    && equal_ignore_hash(
                        f.spec.as_ref().and_then(|sp| sp.template.as_ref()),
                        d.spec.as_ref().map(|sp| &sp.template),
                    )
                {
                    return Ok((Some(f), old));
                }
            }
            let mut status = d.status.clone().unwrap_or_default();
            status.collision_count = Some(status.collision_count.unwrap_or(0) + 1);
            write_status(s, d, status).await?;
            return Err(ReconcileError::Other(format!(
                "hash collision for ReplicaSet {name}; collisionCount raised"
            )));
        }
        Err(kube::Error::Api(e)) => {
            let mut status = d.status.clone().unwrap_or_default();
            if progress_deadline(d).is_some() {
                set_condition(
                    &mut status,
                    new_condition(
                        "Progressing",
                        "False",
                        "ReplicaSetCreateError",
                        format!("Failed to create new replica set \"{name}\": {}", e.message),
                    ),
                );
                write_status(s, d, status).await?;
            }
            s.ctx
                .event(
                    &reference(d),
                    true,
                    "FailedCreate",
                    "Create",
                    format!("Failed to create new replica set \"{name}\": {}", e.message),
                )
                .await;
            return Err(kube::Error::Api(e).into());
        }
        Err(e) => return Err(e.into()),
    };
    if new_replicas > 0 {
        s.ctx
            .event(
                &reference(d),
                false,
                "ScalingReplicaSet",
                "Scale",
                format!("Scaled up replica set {name} from 0 to {new_replicas}"),
            )
            .await;
    }
    set_deployment_revision(s, d, &new_revision).await?;
    if progress_deadline(d).is_some() {
        let mut status = d.status.clone().unwrap_or_default();
        set_condition(
            &mut status,
            new_condition(
                "Progressing",
                "True",
                "NewReplicaSetCreated",
                format!("Created new replica set \"{name}\""),
            ),
        );
        write_status(s, d, status).await?;
    }
    Ok((Some(created), old))
}

/// Sets the deployment's revision annotation (`SetDeploymentRevision`).
async fn set_deployment_revision(
    s: &Shared,
    d: &mut Deployment,
    rev: &str,
) -> Result<(), ReconcileError> {
    if rev.is_empty() {
        return Ok(());
    }
    let ann = d.metadata.annotations.get_or_insert_with(BTreeMap::new);
    if ann.get(REVISION).map(String::as_str) == Some(rev) {
        return Ok(());
    }
    ann.insert(REVISION.to_owned(), rev.to_owned());
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(s.ctx.client.clone(), &ns);
    *d = api.replace(&name_of(d), &PostParams::default(), d).await?;
    Ok(())
}

/// Writes `status` (unchanged statuses are not written).
async fn write_status(
    s: &Shared,
    d: &mut Deployment,
    status: DeploymentStatus,
) -> Result<(), ReconcileError> {
    if d.status.as_ref() == Some(&status) {
        return Ok(());
    }
    d.status = Some(status);
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(s.ctx.client.clone(), &ns);
    *d = api
        .replace_status(&name_of(d), &PostParams::default(), d)
        .await?;
    Ok(())
}
