//! The StatefulSet controller (`statefulset`): pods with stable ordinal names (`<set>-<i>`),
//! hostnames and PVCs from `volumeClaimTemplates` (`<claim>-<set>-<i>`), created and removed
//! in order (OrderedReady: one at a time, each Running and Ready before the next) or all at
//! once (Parallel); RollingUpdate replaces pods at or above `partition` from the highest
//! ordinal down; `persistentVolumeClaimRetentionPolicy` decides whether PVCs outlive the set or
//! its scale-downs. Each template is kept as a ControllerRevision ([`crate::history`]):
//! `status.currentRevision`/`updateRevision` name them and pods carry their revision's name;
//! a template that returns to an earlier one (`kubectl rollout undo`) reuses it. Upstream
//! `pkg/controller/statefulset`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ControllerRevision, StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::history::{self, Created, Snapshot};
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer, reference};

/// Label with the revision a pod was made from.
const REVISION_LABEL: &str = history::POD_HASH_LABEL;
/// Label with the pod's name.
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label with the pod's ordinal.
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Upstream `getStatefulSetRevisions`: the set's revisions (oldest first), its current and
/// its update revision. The update revision is the newest revision when the template did not
/// change, an earlier equal revision renumbered as the newest when it returned to one, else
/// a new revision (a name taken by other data makes the collision count grow until one is
/// free). The current revision is the one `status.currentRevision` names, else the update
/// revision. Also returns the collision count used.
async fn revisions(
    st: &State,
    sts: &StatefulSet,
) -> Result<(Vec<ControllerRevision>, String, ControllerRevision, i32), ReconcileError> {
    let ns = sts.metadata.namespace.as_deref().unwrap_or_default();
    let uid = sts.metadata.uid.as_deref().unwrap_or_default();
    let spec = sts.spec.clone().unwrap_or_default();
    let status = sts.status.clone().unwrap_or_default();
    let revs = history::controlled(&st.revisions, ns, uid);
    let data = history::template_patch(&spec.template)?;
    let next = history::next_revision(&revs);
    let mut collision_count = status.collision_count.unwrap_or(0);
    let equal = revs.iter().rev().find(|r| history::data(r) == Some(&data));
    let update = match equal {
        Some(r)
            if revs
                .last()
                .is_some_and(|last| last.metadata.name == r.metadata.name) =>
        {
            r.clone()
        }
        Some(r) => history::renumber(&st.ctx.client, r, next).await?,
        None => loop {
            let snap = Snapshot {
                kind: "StatefulSet",
                owner: &sts.metadata,
                template_labels: spec
                    .template
                    .metadata
                    .as_ref()
                    .and_then(|m| m.labels.as_ref()),
                data: data.clone(),
                revision: next,
                hash_label: history::REVISION_HASH_LABEL,
                collision_count: Some(collision_count),
            };
            match history::create(&st.ctx.client, &snap).await? {
                Created::Made(r) => break *r,
                Created::Collision if collision_count < 100 => collision_count += 1,
                Created::Collision => {
                    return Err(ReconcileError::Other(
                        "no free revision name after 100 hash collisions".to_owned(),
                    ));
                }
            }
        },
    };
    let update_name = update.metadata.name.clone().unwrap_or_default();
    let current = status
        .current_revision
        .filter(|c| {
            revs.iter()
                .any(|r| r.metadata.name.as_deref() == Some(c.as_str()))
        })
        .unwrap_or_else(|| update_name.clone());
    Ok((revs, current, update, collision_count))
}

/// An owner reference to `sts` (controller or not).
fn owner_ref(sts: &StatefulSet, controller: bool) -> OwnerReference {
    OwnerReference {
        api_version: "apps/v1".to_owned(),
        kind: "StatefulSet".to_owned(),
        name: sts.metadata.name.clone().unwrap_or_default(),
        uid: sts.metadata.uid.clone().unwrap_or_default(),
        controller: Some(controller),
        block_owner_deletion: Some(true),
    }
}

/// The PVC name for claim template `claim` and ordinal `i`.
fn claim_name(claim: &str, sts: &str, i: i32) -> String {
    format!("{claim}-{sts}-{i}")
}

/// The pod for ordinal `i`.
fn new_pod(sts: &StatefulSet, i: i32, rev: &str) -> Pod {
    let spec = sts.spec.clone().unwrap_or_default();
    let set = sts.metadata.name.clone().unwrap_or_default();
    let name = format!("{set}-{i}");
    let mut meta = spec.template.metadata.unwrap_or_default();
    meta.name = Some(name.clone());
    meta.generate_name = None;
    meta.namespace = sts.metadata.namespace.clone();
    let labels = meta.labels.get_or_insert_with(BTreeMap::new);
    labels.insert(REVISION_LABEL.to_owned(), rev.to_owned());
    labels.insert(POD_NAME_LABEL.to_owned(), name.clone());
    labels.insert(POD_INDEX_LABEL.to_owned(), i.to_string());
    meta.owner_references = Some(vec![owner_ref(sts, true)]);
    let mut pod_spec = spec.template.spec.unwrap_or_default();
    pod_spec.hostname = Some(name);
    if let Some(svc) = spec.service_name.filter(|s| !s.is_empty()) {
        pod_spec.subdomain = Some(svc);
    }
    let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
    for c in spec.volume_claim_templates.iter().flatten() {
        let cname = c.metadata.name.clone().unwrap_or_default();
        volumes.retain(|v| v.name != cname);
        volumes.push(Volume {
            name: cname.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&cname, &set, i),
                read_only: None,
            }),
            ..Volume::default()
        });
    }
    Pod {
        metadata: meta,
        spec: Some(pod_spec),
        status: None,
    }
}

/// The pod's ordinal from its name (`<set>-<i>`).
fn ordinal(set: &str, pod: &Pod) -> Option<i32> {
    pod.metadata
        .name
        .as_deref()?
        .strip_prefix(set)?
        .strip_prefix('-')?
        .parse()
        .ok()
}

/// Whether the pod is Running and Ready.
fn running_ready(pod: &Pod) -> bool {
    let st = pod.status.as_ref();
    st.and_then(|s| s.phase.as_deref()) == Some("Running")
        && st
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The loop's state.
#[derive(Clone)]
struct State {
    /// The controller's context.
    ctx: Context,
    /// StatefulSets.
    sets: Store<StatefulSet>,
    /// Pods.
    pods: Store<Pod>,
    /// ControllerRevisions.
    revisions: Store<ControllerRevision>,
}

/// Creates the PVCs pod `i` needs that do not exist yet.
async fn ensure_claims(st: &State, sts: &StatefulSet, i: i32) -> Result<(), kube::Error> {
    let spec = sts.spec.clone().unwrap_or_default();
    let ns = sts.metadata.namespace.as_deref().unwrap_or_default();
    let set = sts.metadata.name.as_deref().unwrap_or_default();
    let api: Api<PersistentVolumeClaim> = Api::namespaced(st.ctx.client.clone(), ns);
    let delete_with_set = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_deleted.as_deref())
        == Some("Delete");
    for tmpl in spec.volume_claim_templates.iter().flatten() {
        let cname = tmpl.metadata.name.clone().unwrap_or_default();
        let name = claim_name(&cname, set, i);
        if api.get_opt(&name).await?.is_some() {
            continue;
        }
        let mut pvc = tmpl.clone();
        pvc.metadata.name = Some(name.clone());
        pvc.metadata.namespace = Some(ns.to_owned());
        pvc.metadata.resource_version = None;
        pvc.metadata.uid = None;
        pvc.status = None;
        let labels = pvc.metadata.labels.get_or_insert_with(BTreeMap::new);
        if let Some(m) = spec.selector.match_labels.as_ref() {
            labels.extend(m.clone());
        }
        if delete_with_set {
            pvc.metadata.owner_references = Some(vec![owner_ref(sts, false)]);
        }
        match api.create(&PostParams::default(), &pvc).await {
            Ok(_) => {
                st.ctx
                    .event(
                        &reference(sts),
                        false,
                        "SuccessfulCreate",
                        "Create",
                        format!("create Claim {name} Pod {set}-{i} in StatefulSet {set} success"),
                    )
                    .await;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Syncs StatefulSet `key`.
async fn sync(st: State, key: String) -> SyncResult {
    let Some(sts) = informer::get(&st.sets, &key) else {
        return Ok(None);
    };
    if sts.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let sts = (*sts).clone();
    let set = sts.metadata.name.clone().unwrap_or_default();
    let ns = sts.metadata.namespace.clone().unwrap_or_default();
    let uid = sts.metadata.uid.clone().unwrap_or_default();
    let spec = sts.spec.clone().unwrap_or_default();
    let replicas = spec.replicas.unwrap_or(1).max(0);
    let start = spec.ordinals.as_ref().and_then(|o| o.start).unwrap_or(0);
    let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
    let (revs, current_name, update, collision_count) = revisions(&st, &sts).await?;
    let rev = update.metadata.name.clone().unwrap_or_default();
    let sts_ref = reference(&sts);
    let api: Api<Pod> = Api::namespaced(st.ctx.client.clone(), &ns);
    let all = st.pods.state();
    let mut pods: HashMap<i32, &Pod> = HashMap::new();
    for p in all.iter().map(AsRef::as_ref) {
        let mine = p.metadata.namespace.as_deref() == Some(ns.as_str())
            && p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid);
        if let (true, Some(i)) = (mine, ordinal(&set, p)) {
            pods.insert(i, p);
        }
    }
    let wanted = start..start + replicas;
    let mut blocked = false;
    let mut requeue = None;

    // Create missing (and replace failed) pods in ordinal order.
    for i in wanted.clone() {
        match pods.get(&i) {
            None => {
                if blocked {
                    break;
                }
                ensure_claims(&st, &sts, i).await?;
                let pod = new_pod(&sts, i, &rev);
                match api.create(&PostParams::default(), &pod).await {
                    Ok(_) => {
                        st.ctx
                            .event(
                                &sts_ref,
                                false,
                                "SuccessfulCreate",
                                "Create",
                                format!("create Pod {set}-{i} in StatefulSet {set} successful"),
                            )
                            .await;
                    }
                    Err(kube::Error::Api(e)) if e.code == 409 => {}
                    Err(e) => return Err(ReconcileError::Kube(e)),
                }
                if !parallel {
                    blocked = true;
                }
            }
            Some(p) => {
                let failed = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Failed");
                if failed && p.metadata.deletion_timestamp.is_none() {
                    let name = p.metadata.name.clone().unwrap_or_default();
                    match api.delete(&name, &DeleteParams::default()).await {
                        Ok(_) | Err(kube::Error::Api(_)) => {
                            st.ctx
                                .event(
                                    &sts_ref,
                                    false,
                                    "SuccessfulDelete",
                                    "Delete",
                                    format!("delete Pod {name} in StatefulSet {set} successful"),
                                )
                                .await;
                        }
                        Err(e) => return Err(ReconcileError::Kube(e)),
                    }
                    blocked = !parallel;
                } else if !parallel
                    && (!running_ready(p) || p.metadata.deletion_timestamp.is_some())
                {
                    blocked = true;
                }
            }
        }
        if blocked && !parallel {
            break;
        }
    }

    // Condemned pods (beyond the wanted ordinals): highest first, one at a time unless
    // Parallel, and only once every wanted pod is healthy for OrderedReady.
    let mut condemned: Vec<i32> = pods
        .keys()
        .copied()
        .filter(|i| !wanted.contains(i))
        .collect();
    condemned.sort_unstable_by(|a, b| b.cmp(a));
    let delete_claims_on_scale = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .and_then(|p| p.when_scaled.as_deref())
        == Some("Delete");
    if !blocked || parallel {
        for i in condemned {
            let Some(p) = pods.get(&i) else { continue };
            if p.metadata.deletion_timestamp.is_some() {
                if parallel {
                    continue;
                }
                break;
            }
            let name = p.metadata.name.clone().unwrap_or_default();
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    st.ctx
                        .event(
                            &sts_ref,
                            false,
                            "SuccessfulDelete",
                            "Delete",
                            format!("delete Pod {name} in StatefulSet {set} successful"),
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
            if delete_claims_on_scale {
                let claims: Api<PersistentVolumeClaim> =
                    Api::namespaced(st.ctx.client.clone(), &ns);
                for tmpl in spec.volume_claim_templates.iter().flatten() {
                    let cname = tmpl.metadata.name.clone().unwrap_or_default();
                    match claims
                        .delete(&claim_name(&cname, &set, i), &DeleteParams::default())
                        .await
                    {
                        Ok(_) | Err(kube::Error::Api(_)) => {}
                        Err(e) => return Err(ReconcileError::Kube(e)),
                    }
                }
            }
            if !parallel {
                blocked = true;
                break;
            }
        }
    }

    // RollingUpdate: outdated pods at or above the partition, highest first, one at a time.
    let strategy = spec.update_strategy.clone().unwrap_or_default();
    let partition = strategy
        .rolling_update
        .as_ref()
        .and_then(|r| r.partition)
        .unwrap_or(0);
    let rev_of = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(REVISION_LABEL))
            .cloned()
    };
    if strategy.type_.as_deref().unwrap_or("RollingUpdate") == "RollingUpdate" && !blocked {
        let all_healthy = wanted.clone().all(|i| {
            pods.get(&i)
                .is_some_and(|p| running_ready(p) && p.metadata.deletion_timestamp.is_none())
        });
        if all_healthy {
            let mut ordinals: Vec<i32> =
                wanted.clone().filter(|i| *i >= start + partition).collect();
            ordinals.sort_unstable_by(|a, b| b.cmp(a));
            for i in ordinals {
                let Some(p) = pods.get(&i) else { continue };
                if rev_of(p).as_deref() == Some(rev.as_str()) {
                    continue;
                }
                let name = p.metadata.name.clone().unwrap_or_default();
                match api.delete(&name, &DeleteParams::default()).await {
                    Ok(_) | Err(kube::Error::Api(_)) => {
                        st.ctx
                            .event(
                                &sts_ref,
                                false,
                                "SuccessfulDelete",
                                "Delete",
                                format!("delete Pod {name} in StatefulSet {set} successful"),
                            )
                            .await;
                    }
                    Err(e) => return Err(ReconcileError::Kube(e)),
                }
                requeue = Some(Duration::from_millis(500));
                break;
            }
        }
    }

    // Status.
    let live: Vec<&Pod> = pods
        .values()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect();
    let count =
        |f: &dyn Fn(&Pod) -> bool| i32::try_from(live.iter().filter(|p| f(p)).count()).unwrap_or(0);
    let old = sts.status.clone().unwrap_or_default();
    let updated = count(&|p| rev_of(p).as_deref() == Some(rev.as_str()));
    let ready = count(&|p| running_ready(p));
    let all_updated = updated == replicas && i32::try_from(live.len()).unwrap_or(0) == replicas;
    let current_revision = if all_updated {
        rev.clone()
    } else {
        current_name
    };
    let current = count(&|p| rev_of(p).as_deref() == Some(current_revision.as_str()));
    let status = StatefulSetStatus {
        replicas: i32::try_from(live.len()).unwrap_or(0),
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        current_replicas: Some(current),
        updated_replicas: Some(updated),
        current_revision: Some(current_revision.clone()),
        update_revision: Some(rev.clone()),
        observed_generation: sts.metadata.generation,
        collision_count: Some(collision_count),
        conditions: old.conditions.clone(),
    };
    // Upstream `truncateHistory`: revisions neither status nor any pod uses, beyond the
    // limit, oldest first.
    let live: HashSet<String> = pods
        .values()
        .filter_map(|p| rev_of(p))
        .chain([rev.clone(), current_revision.clone()])
        .collect();
    let limit = spec
        .revision_history_limit
        .unwrap_or(history::DEFAULT_LIMIT);
    let trim = history::to_trim(
        &revs,
        limit,
        |r| r.metadata.name.as_ref().is_some_and(|n| live.contains(n)),
        false,
    );
    history::delete(&st.ctx.client, &trim).await?;
    if status != old {
        let sets: Api<StatefulSet> = Api::namespaced(st.ctx.client.clone(), &ns);
        let mut s = sts.clone();
        s.status = Some(status);
        match sets.replace_status(&set, &PostParams::default(), &s).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                return Ok(Some(Duration::from_millis(200)));
            }
            Err(e) => return Err(ReconcileError::Kube(e)),
        }
    }
    Ok(requeue)
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let sets = ctx
        .informers
        .watch::<StatefulSet>(
            Box::new(
                move |old: Option<&StatefulSet>, new: Option<&StatefulSet>| {
                    if let Some(s) = new.or(old) {
                        q.add(informer::key(s));
                    }
                },
            ),
            &shutdown,
        )
        .await;
    let pods = ctx
        .informers
        .watch::<Pod>(
            informer::enqueue_controller("StatefulSet", queue.clone()),
            &shutdown,
        )
        .await;
    let revisions = ctx
        .informers
        .watch::<ControllerRevision>(
            informer::enqueue_controller("StatefulSet", queue.clone()),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async {
            sets.wait_until_ready().await?;
            pods.wait_until_ready().await?;
            revisions.wait_until_ready().await
        } => r?,
    }
    for s in sets.state() {
        queue.add(informer::key(s.as_ref()));
    }
    let st = State {
        ctx: ctx.clone(),
        sets,
        pods,
        revisions,
    };
    run_workers(&ctx, &queue, 5, &shutdown, move |key| sync(st.clone(), key)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::StatefulSetSpec;
    use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec};
    use kube::api::ObjectMeta;

    #[test]
    fn pods_get_ordinal_names_hostnames_and_their_claims() {
        let sts = StatefulSet {
            metadata: ObjectMeta {
                name: Some("db".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: Some(StatefulSetSpec {
                service_name: Some("db".into()),
                template: PodTemplateSpec {
                    metadata: None,
                    spec: Some(PodSpec::default()),
                },
                volume_claim_templates: Some(vec![PersistentVolumeClaim {
                    metadata: ObjectMeta {
                        name: Some("data".into()),
                        ..ObjectMeta::default()
                    },
                    ..PersistentVolumeClaim::default()
                }]),
                ..StatefulSetSpec::default()
            }),
            status: None,
        };
        let p = new_pod(&sts, 2, "db-abc");
        assert_eq!(p.metadata.name.as_deref(), Some("db-2"));
        assert_eq!(ordinal("db", &p), Some(2));
        let spec = p.spec.unwrap_or_default();
        assert_eq!(spec.hostname.as_deref(), Some("db-2"));
        assert_eq!(spec.subdomain.as_deref(), Some("db"));
        let vol = spec.volumes.unwrap_or_default();
        assert_eq!(
            vol[0]
                .persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.as_str()),
            Some("data-db-2")
        );
    }
}
