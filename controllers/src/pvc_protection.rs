//! The PVC protection controller (`persistentvolumeclaim-protection`, upstream's
//! `pkg/controller/volume/pvcprotection`): a PersistentVolumeClaim being deleted keeps its
//! `kubernetes.io/pvc-protection` finalizer (added by the `StorageObjectInUseProtection`
//! admission plugin) while a scheduled, unfinished pod of its namespace uses it, and loses it
//! once none does, so the delete completes. Pod changes requeue the claims they name.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

/// The finalizer this controller removes.
const FINALIZER: &str = "kubernetes.io/pvc-protection";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The claims `pod` mounts: `persistentVolumeClaim` volumes, and generic ephemeral volumes
/// (claim `<pod>-<volume>`).
fn claims_of(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(c.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
        .collect()
}

/// Whether `pod` keeps `claim` in use: it is scheduled (the kubelet refuses to start a pod
/// whose claim is being deleted, so an unscheduled one never mounts it), not finished, and
/// mounts the claim.
fn uses(pod: &Pod, claim: &str) -> bool {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let finished = matches!(phase, Some("Succeeded" | "Failed"));
    scheduled && !finished && claims_of(pod).iter().any(|c| c == claim)
}

fn protected(pvc: &PersistentVolumeClaim) -> bool {
    pvc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// Removes the finalizer of claim `key` if it is being deleted and no pod uses it.
async fn sync(
    ctx: Context,
    claims: Store<PersistentVolumeClaim>,
    pods: Store<Pod>,
    key: String,
) -> SyncResult {
    let Some(pvc) = informer::get(&claims, &key) else {
        return Ok(None);
    };
    if pvc.metadata.deletion_timestamp.is_none() || !protected(&pvc) {
        return Ok(None);
    }
    let (ns, name) = informer::split_key(&key);
    let ns = ns.unwrap_or_default();
    let in_cache = pods
        .state()
        .iter()
        .any(|p| p.metadata.namespace.as_deref() == Some(ns) && uses(p, name));
    if in_cache {
        return Ok(None);
    }
    // The cache may lag a pod just created: ask the API server before letting go (as
    // upstream's `askAPIServer`).
    let live: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let listed = live
        .list(&ListParams::default())
        .await
        .map_err(ReconcileError::Kube)?;
    if listed.items.iter().any(|p| uses(p, name)) {
        return Ok(None);
    }
    let mut updated = (*pvc).clone();
    if let Some(f) = updated.metadata.finalizers.as_mut() {
        f.retain(|x| x != FINALIZER);
    }
    updated.metadata.managed_fields = None;
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    tracing::info!(pvc = %key, "pvc-protection: no pod uses the claim; removing its finalizer");
    match api.replace(name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let claims = ctx
        .informers
        .watch::<PersistentVolumeClaim>(
            Box::new(move |_old, new: Option<&PersistentVolumeClaim>| {
                if let Some(c) = new.filter(|c| c.metadata.deletion_timestamp.is_some()) {
                    q.add(informer::key(c));
                }
            }),
            &shutdown,
        )
        .await;
    let q = queue.clone();
    let pods = ctx
        .informers
        .watch::<Pod>(
            Box::new(move |old: Option<&Pod>, new: Option<&Pod>| {
                for pod in [old, new].into_iter().flatten() {
                    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
                    for claim in claims_of(pod) {
                        q.add(format!("{ns}/{claim}"));
                    }
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = claims.wait_until_ready() => r?,
    }
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = pods.wait_until_ready() => r?,
    }
    for c in claims.state() {
        if c.metadata.deletion_timestamp.is_some() {
            queue.add(informer::key(c.as_ref()));
        }
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, 3, &shutdown, move |key| {
        sync(c.clone(), claims.clone(), pods.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn scheduled_unfinished_pods_use_their_claims() {
        let running = pod(json!({
            "metadata": {"name": "p", "namespace": "d"},
            "spec": {"nodeName": "n", "containers": [],
                     "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}},
                                 {"name": "e", "ephemeral": {}}]},
            "status": {"phase": "Running"}
        }));
        assert!(uses(&running, "data"));
        assert!(uses(&running, "p-e"));
        assert!(!uses(&running, "other"));
        let mut done = running.clone();
        if let Some(s) = done.status.as_mut() {
            s.phase = Some("Succeeded".into());
        }
        assert!(!uses(&done, "data"));
        let mut unscheduled = running;
        if let Some(s) = unscheduled.spec.as_mut() {
            s.node_name = None;
        }
        assert!(!uses(&unscheduled, "data"));
    }
}
