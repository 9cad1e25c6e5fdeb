//! The PV protection controller (`persistentvolume-protection`, upstream's
//! `pkg/controller/volume/pvprotection`): a PersistentVolume being deleted keeps its
//! `kubernetes.io/pv-protection` finalizer (added by the `StorageObjectInUseProtection`
//! admission plugin) while its phase is `Bound`, and loses it once the volume is not bound
//! (Pending, Available, Released, Failed), so the delete completes. A volume that is not being
//! deleted and lacks the finalizer gets it, as upstream does for volumes created before the
//! plugin was enabled.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

/// The finalizer this controller adds and removes.
const FINALIZER: &str = "kubernetes.io/pv-protection";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Whether `pv` is in use: upstream's `isBeingUsed` looks at the phase the PV controller
/// writes, `Bound` alone.
fn in_use(pv: &PersistentVolume) -> bool {
    pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound")
}

fn protected(pv: &PersistentVolume) -> bool {
    pv.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// What the controller does with `pv`: `Some(true)` adds the finalizer, `Some(false)`
/// removes it, `None` leaves the volume alone.
fn action(pv: &PersistentVolume) -> Option<bool> {
    let deleting = pv.metadata.deletion_timestamp.is_some();
    match (deleting, protected(pv)) {
        (true, true) if !in_use(pv) => Some(false),
        (false, false) => Some(true),
        _ => None,
    }
}

/// Adds or removes the finalizer of volume `key` as [`action`] says.
async fn sync(ctx: Context, volumes: Store<PersistentVolume>, key: String) -> SyncResult {
    let Some(pv) = informer::get(&volumes, &key) else {
        return Ok(None);
    };
    let Some(add) = action(&pv) else {
        return Ok(None);
    };
    let mut updated = (*pv).clone();
    let finalizers = updated.metadata.finalizers.get_or_insert_with(Vec::new);
    if add {
        finalizers.push(FINALIZER.to_owned());
        tracing::info!(pv = %key, "pv-protection: adding the finalizer");
    } else {
        finalizers.retain(|f| f != FINALIZER);
        tracing::info!(pv = %key, "pv-protection: the volume is not bound; removing its finalizer");
    }
    updated.metadata.managed_fields = None;
    let api: Api<PersistentVolume> = Api::all(ctx.client.clone());
    let (_, name) = informer::split_key(&key);
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
    let volumes = ctx
        .informers
        .watch::<PersistentVolume>(
            Box::new(move |_old, new: Option<&PersistentVolume>| {
                if let Some(pv) = new.filter(|pv| action(pv).is_some()) {
                    q.add(informer::key(pv));
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = volumes.wait_until_ready() => r?,
    }
    for pv in volumes.state() {
        if action(&pv).is_some() {
            queue.add(informer::key(pv.as_ref()));
        }
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, 1, &shutdown, move |key| {
        sync(c.clone(), volumes.clone(), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pv(v: serde_json::Value) -> PersistentVolume {
        serde_json::from_value(v).unwrap_or_default()
    }

    #[test]
    fn the_finalizer_goes_once_the_volume_is_not_bound() {
        let deleting = |phase: &str| {
            pv(json!({
                "metadata": {"name": "v", "finalizers": [FINALIZER],
                             "deletionTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"phase": phase}
            }))
        };
        assert_eq!(action(&deleting("Bound")), None);
        for phase in ["Pending", "Available", "Released", "Failed"] {
            assert_eq!(action(&deleting(phase)), Some(false), "{phase}");
        }
        let live = pv(json!({"metadata": {"name": "v"}, "status": {"phase": "Bound"}}));
        assert_eq!(action(&live), Some(true));
        let kept = pv(json!({"metadata": {"name": "v", "finalizers": [FINALIZER]}}));
        assert_eq!(action(&kept), None);
        let other = pv(json!({"metadata": {"name": "v", "finalizers": ["x"],
                                          "deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_eq!(action(&other), None);
    }
}
