//! The PersistentVolume controller (`persistentvolume-binder`, upstream's
//! `pkg/controller/volume/persistentvolume`): binds claims to volumes and keeps both phases.
//!
//! - A claim without `spec.volumeName` gets the smallest `Available` volume that serves it
//!   (access modes a superset of the claim's, the fewest first; capacity at least the
//!   request; same storage class and volume mode; the claim's selector matches the volume's
//!   labels; not being deleted), or the volume pre-bound to it (`spec.claimRef` naming the
//!   claim). Binding writes, in upstream's order: the volume's `claimRef` (with
//!   `pv.kubernetes.io/bound-by-controller`), its phase `Bound`, the claim's `volumeName` and
//!   `pv.kubernetes.io/bind-completed`, the claim's phase `Bound` with the volume's access
//!   modes and capacity.
//! - No volume: a claim of a `WaitForFirstConsumer` class waits (event
//!   `WaitForFirstConsumer`); a claim of a class whose provisioner is external is annotated
//!   `volume.kubernetes.io/storage-provisioner` for that provisioner (event
//!   `ExternalProvisioning`), which creates a volume pre-bound to it; a claim of a missing
//!   class or of an in-tree provisioner this server has no plugin for gets
//!   `ProvisioningFailed`; a claim of no class, `FailedBinding`. Each stays `Pending`.
//! - A claim naming a volume binds to it when the volume fits (else `VolumeMismatch`).
//! - A bound claim whose volume is gone, or bound to another claim, is `Lost`.
//! - A volume without a claim is `Available`; one whose claim is gone is `Released`, then
//!   reclaimed: `Retain` keeps it, `Delete` of a volume an external provisioner made is left
//!   to that provisioner, other reclaims find no volume plugin here (there are none) and
//!   mark it `Failed`, as upstream does for a volume no plugin can delete or recycle.
//! - A claim with no class at all gets the default StorageClass, if there is one
//!   (retroactive default class assignment).
//!
//! One worker handles claims and volumes (upstream's sync is not reentrant either); every
//! write is a compare-and-swap on the object's resourceVersion, so a stale cache only costs
//! a retry. Unbound claims are looked at again whenever a volume or a class changes, and
//! everything every 15 s (upstream's `pvClaimBinderSyncPeriod`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::{ReconcileError, reference};
use crate::queue::{Queue, SyncResult, run_workers};
use crate::replicaset::pods::Selector;
use crate::resourcequota::parse_milli;
use crate::{Context, LoopFuture, informer};

/// On a claim: the binding is complete.
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// On a claim or volume: this controller set `volumeName` / `claimRef`.
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// On a volume: the provisioner that made it.
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
/// On a claim: the provisioner asked to make its volume (and the beta name of it).
const STORAGE_PROVISIONER: [&str; 2] = [
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
];
/// On a claim: the node the scheduler chose (ends `WaitForFirstConsumer`).
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The beta storage class annotation, which wins over `storageClassName`.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// A StorageClass marked default (and the beta name of the mark).
const DEFAULT_CLASS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];
/// Upstream's resync period.
const RESYNC: Duration = Duration::from_secs(15);
/// The queue key that looks at every claim not yet bound.
const UNBOUND_CLAIMS: &str = "unbound-claims";

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The informers' stores.
#[derive(Clone)]
struct Stores {
    volumes: Store<PersistentVolume>,
    claims: Store<PersistentVolumeClaim>,
    classes: Store<StorageClass>,
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn has_annotation(meta: &kube::api::ObjectMeta, key: &str) -> bool {
    annotation(meta, key).is_some()
}

fn set_annotation(meta: &mut kube::api::ObjectMeta, key: &str, value: &str) {
    meta.annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.to_owned(), value.to_owned());
}

fn name(meta: &kube::api::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

/// `namespace/name` of a claim.
fn claim_key(c: &PersistentVolumeClaim) -> String {
    informer::key(c)
}

/// Upstream's `GetPersistentVolumeClaimClass`: the beta annotation, else `storageClassName`.
fn claim_class(c: &PersistentVolumeClaim) -> &str {
    annotation(&c.metadata, BETA_CLASS)
        .or_else(|| c.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// Upstream's `GetPersistentVolumeClass`.
fn volume_class(v: &PersistentVolume) -> &str {
    annotation(&v.metadata, BETA_CLASS)
        .or_else(|| v.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

fn volume_phase(v: &PersistentVolume) -> &str {
    v.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn claim_phase(c: &PersistentVolumeClaim) -> &str {
    c.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

fn claim_ref(v: &PersistentVolume) -> Option<&ObjectReference> {
    v.spec.as_ref()?.claim_ref.as_ref()
}

fn volume_name(c: &PersistentVolumeClaim) -> &str {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default()
}

/// Bytes (in thousandths) of a storage quantity; 0 when absent or unreadable.
fn storage(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> i128 {
    q.and_then(|q| parse_milli(&q.0)).map_or(0, |(v, _)| v)
}

fn requested(c: &PersistentVolumeClaim) -> i128 {
    storage(
        c.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("storage")),
    )
}

fn capacity(v: &PersistentVolume) -> i128 {
    storage(
        v.spec
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("storage")),
    )
}

fn access_modes(modes: Option<&Vec<String>>) -> Vec<String> {
    let mut m: Vec<String> = modes.cloned().unwrap_or_default();
    m.sort();
    m.dedup();
    m
}

fn volume_modes(v: &PersistentVolume) -> Vec<String> {
    access_modes(v.spec.as_ref().and_then(|s| s.access_modes.as_ref()))
}

fn claim_modes(c: &PersistentVolumeClaim) -> Vec<String> {
    access_modes(c.spec.as_ref().and_then(|s| s.access_modes.as_ref()))
}

/// Upstream's `CheckVolumeModeMismatches` (both default to `Filesystem`).
fn volume_mode_mismatch(c: &PersistentVolumeClaim, v: &PersistentVolume) -> bool {
    let claim = c.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    let volume = v.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
    claim.unwrap_or("Filesystem") != volume.unwrap_or("Filesystem")
}

/// Upstream's `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and has its
/// uid, or none yet).
fn bound_to_claim(v: &PersistentVolume, c: &PersistentVolumeClaim) -> bool {
    let Some(r) = claim_ref(v) else {
        return false;
    };
    r.name.as_deref() == c.metadata.name.as_deref()
        && r.namespace.as_deref() == c.metadata.namespace.as_deref()
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == c.metadata.uid.as_deref())
}

/// Upstream's `FindMatchingVolume` without a node: the volume pre-bound to the claim, else
/// the smallest available one that fits (none while binding waits for a consumer).
fn find_matching<'v>(
    c: &PersistentVolumeClaim,
    volumes: &[&'v PersistentVolume],
    delay: bool,
) -> Option<&'v PersistentVolume> {
    let want = requested(c);
    let class = claim_class(c);
    let selector = c
        .spec
        .as_ref()
        .and_then(|s| s.selector.as_ref())
        .map(|s| Selector::from_label_selector(Some(s)));
    let mut best: Option<(&PersistentVolume, i128)> = None;
    for v in volumes {
        if claim_ref(v).is_some() && !bound_to_claim(v, c) {
            continue;
        }
        let size = capacity(v);
        if size < want || volume_mode_mismatch(c, v) || v.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if bound_to_claim(v, c) {
            return Some(v);
        }
        if delay || volume_phase(v) != "Available" {
            continue;
        }
        if selector
            .as_ref()
            .is_some_and(|s| !s.matches(v.metadata.labels.as_ref()))
        {
            continue;
        }
        if volume_class(v) != class {
            continue;
        }
        if best.is_none_or(|(_, b)| b > size) {
            best = Some((v, size));
        }
    }
    best.map(|(v, _)| v)
}

/// Upstream's `findByClaim`: volumes grouped by their set of access modes; the sets holding
/// every mode the claim asks for are tried from the smallest up, the first match wins.
fn find_best_match<'v>(
    c: &PersistentVolumeClaim,
    volumes: &'v [Arc<PersistentVolume>],
    delay: bool,
) -> Option<&'v PersistentVolume> {
    let wanted = claim_modes(c);
    let mut groups: BTreeMap<Vec<String>, Vec<&PersistentVolume>> = BTreeMap::new();
    for v in volumes {
        groups.entry(volume_modes(v)).or_default().push(v.as_ref());
    }
    let mut sets: Vec<(&Vec<String>, &Vec<&PersistentVolume>)> = groups
        .iter()
        .filter(|(modes, _)| wanted.iter().all(|w| modes.contains(w)))
        .collect();
    sets.sort_by_key(|(modes, _)| modes.len());
    sets.into_iter()
        .find_map(|(_, group)| find_matching(c, group, delay))
}

/// Upstream's `checkVolumeSatisfyClaim`, for a claim that names its volume.
fn check_satisfies(v: &PersistentVolume, c: &PersistentVolumeClaim) -> Result<(), String> {
    if v.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "the volume is marked for deletion {:?}",
            name(&v.metadata)
        ));
    }
    if capacity(v) < requested(c) {
        return Err("requested PV is too small".into());
    }
    if volume_class(v) != claim_class(c) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(c, v) {
        return Err("incompatible volumeMode".into());
    }
    let modes = volume_modes(v);
    if !claim_modes(c).iter().all(|m| modes.contains(m)) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

/// The default StorageClass (the newest when several are marked, as upstream picks).
fn default_class(classes: &Store<StorageClass>) -> Option<String> {
    classes
        .state()
        .into_iter()
        .filter(|c| {
            DEFAULT_CLASS
                .iter()
                .any(|k| annotation(&c.metadata, k) == Some("true"))
        })
        .max_by(|a, b| {
            let t = |c: &StorageClass| c.metadata.creation_timestamp.clone().map(|t| t.0);
            t(a).cmp(&t(b))
                .then_with(|| b.metadata.name.cmp(&a.metadata.name))
        })
        .and_then(|c| c.metadata.name.clone())
}

fn failed(e: kube::Error) -> ReconcileError {
    ReconcileError::Kube(e)
}

/// Writes `obj` (its spec and metadata, or with `status` its status) through the API:
/// a compare-and-swap on the resourceVersion it was read at.
async fn put<K>(api: Api<K>, obj: &K, status: bool) -> Result<K, ReconcileError>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut obj = obj.clone();
    obj.meta_mut().managed_fields = None;
    let name = name(obj.meta());
    let pp = PostParams::default();
    // Boxed: the request futures are large, and every sync awaits several writes.
    let written = if status {
        Box::pin(api.replace_status(name, &pp, &obj)).await
    } else {
        Box::pin(api.replace(name, &pp, &obj)).await
    };
    written.map_err(failed)
}

/// The claims of `c`'s namespace.
fn claims_api(ctx: &Context, c: &PersistentVolumeClaim) -> Api<PersistentVolumeClaim> {
    let ns = c.metadata.namespace.as_deref().unwrap_or_default();
    Api::namespaced(ctx.client.clone(), ns)
}

/// Writes the claim (spec and metadata).
async fn put_claim(
    ctx: &Context,
    c: &PersistentVolumeClaim,
) -> Result<PersistentVolumeClaim, ReconcileError> {
    put(claims_api(ctx, c), c, false).await
}

/// Writes the volume (spec and metadata).
async fn put_volume(
    ctx: &Context,
    v: &PersistentVolume,
) -> Result<PersistentVolume, ReconcileError> {
    put(Api::all(ctx.client.clone()), v, false).await
}

/// Upstream's `updateVolumePhase`: writes the phase (and message) when they differ.
async fn volume_phase_to(
    ctx: &Context,
    v: &PersistentVolume,
    phase: &str,
    message: &str,
) -> Result<PersistentVolume, ReconcileError> {
    let status = v.status.clone().unwrap_or_default();
    if status.phase.as_deref() == Some(phase)
        && status.message.as_deref().unwrap_or_default() == message
    {
        return Ok(v.clone());
    }
    let mut v = v.clone();
    let s = v.status.get_or_insert_with(Default::default);
    s.phase = Some(phase.to_owned());
    s.message = (!message.is_empty()).then(|| message.to_owned());
    let written = put(Api::all(ctx.client.clone()), &v, true).await?;
    tracing::info!(pv = name(&v.metadata), phase, "volume entered phase");
    Ok(written)
}

/// Upstream's `updateVolumePhaseWithEvent`: the phase, and the event only when it changed.
async fn volume_phase_with_event(
    ctx: &Context,
    v: &PersistentVolume,
    phase: &str,
    reason: &str,
    message: &str,
) -> Result<PersistentVolume, ReconcileError> {
    if volume_phase(v) == phase {
        return Ok(v.clone());
    }
    let written = volume_phase_to(ctx, v, phase, message).await?;
    ctx.event(
        &reference(&written),
        true,
        reason,
        "Reclaim",
        message.to_owned(),
    )
    .await;
    Ok(written)
}

/// Upstream's `updateClaimStatus`: the phase, and the volume's access modes and capacity
/// (cleared without a volume), written when they differ.
async fn claim_status_to(
    ctx: &Context,
    c: &PersistentVolumeClaim,
    phase: &str,
    volume: Option<&PersistentVolume>,
) -> Result<PersistentVolumeClaim, ReconcileError> {
    let mut status = c.status.clone().unwrap_or_default();
    let before = status.clone();
    status.phase = Some(phase.to_owned());
    match volume {
        None => {
            status.access_modes = None;
            status.capacity = None;
        }
        Some(v) => {
            let spec = v.spec.as_ref();
            status.access_modes = spec.and_then(|s| s.access_modes.clone());
            let volume_size = capacity(v);
            let claim_size = storage(before.capacity.as_ref().and_then(|c| c.get("storage")));
            let has = before
                .capacity
                .as_ref()
                .is_some_and(|c| c.contains_key("storage"));
            if !has || volume_size != claim_size {
                status.capacity = spec.and_then(|s| s.capacity.clone());
            }
        }
    }
    if status == before {
        return Ok(c.clone());
    }
    let mut c = c.clone();
    c.status = Some(status);
    let written = put(claims_api(ctx, &c), &c, true).await?;
    tracing::info!(pvc = %claim_key(&c), phase, "claim entered phase");
    Ok(written)
}

/// Upstream's `updateClaimStatusWithEvent`: the phase, and the event only when it changed.
async fn claim_status_with_event(
    ctx: &Context,
    c: &PersistentVolumeClaim,
    phase: &str,
    reason: &str,
    message: &str,
) -> Result<(), ReconcileError> {
    if claim_phase(c) == phase {
        return Ok(());
    }
    let written = claim_status_to(ctx, c, phase, None).await?;
    ctx.event(
        &reference(&written),
        true,
        reason,
        "Binding",
        message.to_owned(),
    )
    .await;
    Ok(())
}

/// Upstream's `bind`: the volume to the claim, its phase, the claim to the volume, its
/// phase — each written only when it differs.
async fn bind(
    ctx: &Context,
    v: &PersistentVolume,
    c: &PersistentVolumeClaim,
) -> Result<(), ReconcileError> {
    // The volume's claimRef (upstream's `bindVolumeToClaim`).
    let mut volume = v.clone();
    let full = claim_ref(v)
        .is_some_and(|r| bound_to_claim(v, c) && r.uid.as_deref() == c.metadata.uid.as_deref());
    if !full {
        let by_controller = claim_ref(v).is_none();
        let spec = volume.spec.get_or_insert_with(Default::default);
        spec.claim_ref = Some(reference(c));
        if by_controller && !has_annotation(&volume.metadata, BOUND_BY_CONTROLLER) {
            set_annotation(&mut volume.metadata, BOUND_BY_CONTROLLER, "yes");
        }
        volume = put_volume(ctx, &volume).await?;
        tracing::info!(pv = name(&v.metadata), pvc = %claim_key(c), "volume bound to claim");
    }
    let volume = volume_phase_to(ctx, &volume, "Bound", "").await?;
    // The claim's volumeName (upstream's `bindClaimToVolume`).
    let mut claim = c.clone();
    let mut dirty = false;
    if volume_name(c) != name(&volume.metadata) {
        claim.spec.get_or_insert_with(Default::default).volume_name = volume.metadata.name.clone();
        set_annotation(&mut claim.metadata, BOUND_BY_CONTROLLER, "yes");
        dirty = true;
    }
    if !has_annotation(&claim.metadata, BIND_COMPLETED) {
        set_annotation(&mut claim.metadata, BIND_COMPLETED, "yes");
        dirty = true;
    }
    if dirty {
        claim = put_claim(ctx, &claim).await?;
    }
    claim_status_to(ctx, &claim, "Bound", Some(&volume)).await?;
    Ok(())
}

/// Upstream's `syncClaim`.
async fn sync_claim(ctx: &Context, stores: &Stores, key: &str) -> SyncResult {
    let Some(c) = informer::get(&stores.claims, key) else {
        return Ok(None);
    };
    if has_annotation(&c.metadata, BIND_COMPLETED) {
        sync_bound_claim(ctx, stores, &c).await?;
    } else {
        sync_unbound_claim(ctx, stores, &c).await?;
    }
    Ok(None)
}

/// Upstream's `syncUnboundClaim`.
async fn sync_unbound_claim(
    ctx: &Context,
    stores: &Stores,
    c: &PersistentVolumeClaim,
) -> Result<(), ReconcileError> {
    let wanted = volume_name(c);
    if wanted.is_empty() {
        // Retroactive default class: a claim created before there was a default gets it.
        let unset = c
            .spec
            .as_ref()
            .is_none_or(|s| s.storage_class_name.is_none())
            && !has_annotation(&c.metadata, BETA_CLASS);
        if unset && let Some(class) = default_class(&stores.classes) {
            let mut claim = c.clone();
            claim
                .spec
                .get_or_insert_with(Default::default)
                .storage_class_name = Some(class);
            put_claim(ctx, &claim).await?;
            return Ok(());
        }
        let class_name = claim_class(c);
        let class = (!class_name.is_empty())
            .then(|| informer::get(&stores.classes, class_name))
            .flatten();
        let delay = class
            .as_ref()
            .is_some_and(|k| k.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"))
            && !has_annotation(&c.metadata, SELECTED_NODE);
        let volumes = stores.volumes.state();
        if let Some(v) = find_best_match(c, &volumes, delay) {
            return bind(ctx, v, c).await;
        }
        if delay {
            return pending(
                ctx,
                c,
                Some((false, "WaitForFirstConsumer", "Binding")),
                "waiting for first consumer to be created before binding".into(),
            )
            .await;
        }
        if !class_name.is_empty() {
            return provision(ctx, c, class_name, class.as_deref()).await;
        }
        return pending(
            ctx,
            c,
            Some((false, "FailedBinding", "Binding")),
            "no persistent volumes available for this claim and no storage class is set".into(),
        )
        .await;
    }
    // The user asked for a volume.
    let Some(v) = informer::get(&stores.volumes, wanted) else {
        return pending(ctx, c, None, String::new()).await;
    };
    if claim_ref(&v).is_none() {
        if let Err(why) = check_satisfies(&v, c) {
            let message = format!("Cannot bind to requested volume {wanted:?}: {why}");
            return pending(ctx, c, Some((true, "VolumeMismatch", "Binding")), message).await;
        }
        return bind(ctx, &v, c).await;
    }
    if bound_to_claim(&v, c) {
        return bind(ctx, &v, c).await;
    }
    if has_annotation(&c.metadata, BOUND_BY_CONTROLLER) {
        return Err(ReconcileError::Other(format!(
            "Invalid binding of claim {:?} to volume {wanted:?}: volume already claimed by {:?}",
            claim_key(c),
            claim_ref(&v)
                .map(|r| format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or_default(),
                    r.name.as_deref().unwrap_or_default()
                ))
                .unwrap_or_default()
        )));
    }
    pending(ctx, c, None, String::new()).await
}

/// The claim stays (or goes back to) `Pending`, with an event (warning, reason, action)
/// saying why when there is one.
async fn pending(
    ctx: &Context,
    c: &PersistentVolumeClaim,
    event: Option<(bool, &str, &str)>,
    message: String,
) -> Result<(), ReconcileError> {
    if let Some((warning, reason, action)) = event {
        ctx.event(&reference(c), warning, reason, action, message)
            .await;
    }
    claim_status_to(ctx, c, "Pending", None).await?;
    Ok(())
}

/// Upstream's `provisionClaimOperation` for a server without volume plugins: an external
/// provisioner is asked through the claim's annotations; anything else fails.
async fn provision(
    ctx: &Context,
    c: &PersistentVolumeClaim,
    class_name: &str,
    class: Option<&StorageClass>,
) -> Result<(), ReconcileError> {
    let failed = Some((true, "ProvisioningFailed", "Provisioning"));
    let Some(class) = class else {
        let message = format!("storageclass.storage.k8s.io {class_name:?} not found");
        return pending(ctx, c, failed, message).await;
    };
    let provisioner = class.provisioner.as_str();
    if provisioner.starts_with("kubernetes.io/") {
        let message = format!("no volume plugin matched name: {provisioner}");
        return pending(ctx, c, failed, message).await;
    }
    let mut claim = c.clone();
    if STORAGE_PROVISIONER
        .iter()
        .any(|k| annotation(&c.metadata, k) != Some(provisioner))
    {
        for k in STORAGE_PROVISIONER {
            set_annotation(&mut claim.metadata, k, provisioner);
        }
        claim = put_claim(ctx, &claim).await?;
    }
    let message = format!(
        "Waiting for a volume to be created either by the external provisioner '{provisioner}' \
         or manually by the system administrator. If volume creation is delayed, please \
         verify that the provisioner is running and correctly registered."
    );
    let waiting = Some((false, "ExternalProvisioning", "Provisioning"));
    pending(ctx, &claim, waiting, message).await
}

/// Upstream's `syncBoundClaim`.
async fn sync_bound_claim(
    ctx: &Context,
    stores: &Stores,
    c: &PersistentVolumeClaim,
) -> Result<(), ReconcileError> {
    let wanted = volume_name(c);
    if wanted.is_empty() {
        return claim_status_with_event(
            ctx,
            c,
            "Lost",
            "ClaimLost",
            "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!",
        )
        .await;
    }
    let Some(v) = informer::get(&stores.volumes, wanted) else {
        return claim_status_with_event(
            ctx,
            c,
            "Lost",
            "ClaimLost",
            "Bound claim has lost its PersistentVolume. Data on the volume is lost!",
        )
        .await;
    };
    match claim_ref(&v) {
        None => bind(ctx, &v, c).await,
        Some(r) if r.uid.as_deref() == c.metadata.uid.as_deref() => bind(ctx, &v, c).await,
        Some(_) => {
            claim_status_with_event(
                ctx,
                c,
                "Lost",
                "ClaimMisbound",
                "Two claims are bound to the same volume, this one is bound incorrectly",
            )
            .await
        }
    }
}

/// Upstream's `syncVolume`.
async fn sync_volume(ctx: &Context, stores: &Stores, key: &str, queue: &Queue) -> SyncResult {
    let Some(v) = informer::get(&stores.volumes, key) else {
        return Ok(None);
    };
    let Some(r) = claim_ref(&v) else {
        volume_phase_to(ctx, &v, "Available", "").await?;
        return Ok(None);
    };
    if r.uid.as_deref().unwrap_or_default().is_empty() {
        // Pre-bound to a claim that has not bound yet: the claim's sync binds it.
        volume_phase_to(ctx, &v, "Available", "").await?;
        return Ok(None);
    }
    let ns = r.namespace.as_deref().unwrap_or_default();
    let claim_name = r.name.as_deref().unwrap_or_default();
    let claim = informer::get(&stores.claims, &format!("{ns}/{claim_name}"))
        .filter(|c| c.metadata.uid.as_deref() == r.uid.as_deref());
    let Some(claim) = claim else {
        // The claim is gone (or was made again under the same name): release and reclaim.
        let mut volume = (*v).clone();
        if !matches!(volume_phase(&v), "Released" | "Failed") {
            volume = volume_phase_to(ctx, &v, "Released", "").await?;
        }
        reclaim(ctx, &volume).await?;
        return Ok(None);
    };
    let bound_name = volume_name(&claim);
    if bound_name.is_empty() {
        // The binding is not complete: the claim's sync finishes it.
        queue.add(format!("c:{}", claim_key(&claim)));
        return Ok(None);
    }
    if bound_name == name(&v.metadata) {
        volume_phase_to(ctx, &v, "Bound", "").await?;
        return Ok(None);
    }
    // The claim is bound to another volume.
    let reclaim_policy = v
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref());
    if has_annotation(&v.metadata, PROVISIONED_BY) && reclaim_policy == Some("Delete") {
        let mut volume = (*v).clone();
        if !matches!(volume_phase(&v), "Released" | "Failed") {
            volume = volume_phase_to(ctx, &v, "Released", "").await?;
        }
        reclaim(ctx, &volume).await?;
        return Ok(None);
    }
    unbind(ctx, &v).await?;
    Ok(None)
}

/// Upstream's `unbindVolume`: a claimRef this controller set goes; one the user set loses
/// only its uid (the volume stays pre-bound). The volume is then `Available`.
async fn unbind(ctx: &Context, v: &PersistentVolume) -> Result<(), ReconcileError> {
    let mut volume = v.clone();
    let by_controller = has_annotation(&v.metadata, BOUND_BY_CONTROLLER);
    if let Some(spec) = volume.spec.as_mut() {
        if by_controller {
            spec.claim_ref = None;
        } else if let Some(r) = spec.claim_ref.as_mut() {
            r.uid = None;
        }
    }
    if by_controller && let Some(a) = volume.metadata.annotations.as_mut() {
        a.remove(BOUND_BY_CONTROLLER);
    }
    let volume = put_volume(ctx, &volume).await?;
    volume_phase_to(ctx, &volume, "Available", "").await?;
    Ok(())
}

/// Upstream's `reclaimVolume` without volume plugins.
async fn reclaim(ctx: &Context, v: &PersistentVolume) -> Result<(), ReconcileError> {
    let policy = v
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
        .unwrap_or("Retain");
    match policy {
        "Recycle" => {
            volume_phase_with_event(
                ctx,
                v,
                "Failed",
                "VolumeFailedRecycle",
                "No recycler plugin found for the volume!",
            )
            .await?;
        }
        "Delete" => {
            let external = annotation(&v.metadata, PROVISIONED_BY)
                .is_some_and(|p| !p.is_empty() && !p.starts_with("kubernetes.io/"));
            if !external {
                let message = format!(
                    "error getting deleter volume plugin for volume {:?}: no deletable volume plugin matched",
                    name(&v.metadata)
                );
                volume_phase_with_event(ctx, v, "Failed", "VolumeFailedDelete", &message).await?;
            }
            // Otherwise the external provisioner deletes it.
        }
        _ => {} // Retain: the volume stays Released for the administrator.
    }
    Ok(())
}

/// Queues every claim that is not bound (a volume or class changed).
fn queue_unbound(stores: &Stores, queue: &Queue) {
    for c in stores.claims.state() {
        if !has_annotation(&c.metadata, BIND_COMPLETED) {
            queue.add(format!("c:{}", claim_key(&c)));
        }
    }
}

/// One queued key: `c:<namespace>/<name>`, `v:<name>` or [`UNBOUND_CLAIMS`].
async fn sync(ctx: Context, stores: Stores, queue: Queue, key: String) -> SyncResult {
    if key == UNBOUND_CLAIMS {
        queue_unbound(&stores, &queue);
        return Ok(None);
    }
    match key.split_once(':') {
        Some(("c", k)) => Box::pin(sync_claim(&ctx, &stores, k)).await,
        Some(("v", k)) => Box::pin(sync_volume(&ctx, &stores, k, &queue)).await,
        _ => Ok(None),
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let volumes = ctx
        .informers
        .watch::<PersistentVolume>(
            Box::new(move |old, new: Option<&PersistentVolume>| {
                if let Some(v) = new.or(old) {
                    q.add(format!("v:{}", name(&v.metadata)));
                    if let Some(r) = claim_ref(v) {
                        q.add(format!(
                            "c:{}/{}",
                            r.namespace.as_deref().unwrap_or_default(),
                            r.name.as_deref().unwrap_or_default()
                        ));
                    }
                }
                // A volume came, went or changed: waiting claims may fit it now.
                q.add(UNBOUND_CLAIMS);
            }),
            &shutdown,
        )
        .await;
    let q = queue.clone();
    let claims = ctx
        .informers
        .watch::<PersistentVolumeClaim>(
            Box::new(move |old, new: Option<&PersistentVolumeClaim>| {
                if let Some(c) = new.or(old) {
                    q.add(format!("c:{}", claim_key(c)));
                    let bound = volume_name(c);
                    if !bound.is_empty() {
                        q.add(format!("v:{bound}"));
                    }
                }
            }),
            &shutdown,
        )
        .await;
    let q = queue.clone();
    let classes = ctx
        .informers
        .watch::<StorageClass>(Box::new(move |_, _| q.add(UNBOUND_CLAIMS)), &shutdown)
        .await;
    let ready = async {
        volumes.wait_until_ready().await?;
        claims.wait_until_ready().await?;
        classes.wait_until_ready().await?;
        anyhow::Ok(())
    };
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = ready => r?,
    }
    let stores = Stores {
        volumes,
        claims,
        classes,
    };
    let resync = {
        let (stores, queue, shutdown) = (stores.clone(), queue.clone(), shutdown.clone());
        async move {
            loop {
                for v in stores.volumes.state() {
                    queue.add(format!("v:{}", name(&v.metadata)));
                }
                for c in stores.claims.state() {
                    queue.add(format!("c:{}", claim_key(&c)));
                }
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    () = tokio::time::sleep(RESYNC) => {}
                }
            }
        }
    };
    let c = ctx.clone();
    let (s, q) = (stores.clone(), queue.clone());
    let workers = run_workers(&ctx, &queue, 1, &shutdown, move |key| {
        sync(c.clone(), s.clone(), q.clone(), key)
    });
    tokio::join!(resync, workers);
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pv(v: serde_json::Value) -> Arc<PersistentVolume> {
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).unwrap()
    }

    fn volume(name: &str, size: &str, modes: &[&str], class: &str) -> Arc<PersistentVolume> {
        pv(json!({
            "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": modes,
                     "storageClassName": class, "hostPath": {"path": "/tmp/x"}},
            "status": {"phase": "Available"}
        }))
    }

    fn claim(size: &str, modes: &[&str], class: Option<&str>) -> PersistentVolumeClaim {
        let mut c = json!({
            "metadata": {"name": "data", "namespace": "default", "uid": "u1"},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}}
        });
        if let Some(class) = class {
            c["spec"]["storageClassName"] = json!(class);
        }
        pvc(c)
    }

    fn best<'v>(
        c: &PersistentVolumeClaim,
        volumes: &'v [Arc<PersistentVolume>],
    ) -> Option<&'v str> {
        find_best_match(c, volumes, false).map(|v| name(&v.metadata))
    }

    #[test]
    fn the_smallest_fitting_volume_of_the_narrowest_modes_wins() {
        let volumes = vec![
            volume("big", "10Gi", &["ReadWriteOnce"], ""),
            volume("small", "1Gi", &["ReadWriteOnce"], ""),
            volume("tiny", "100Mi", &["ReadWriteOnce"], ""),
            volume("many", "1Gi", &["ReadWriteOnce", "ReadOnlyMany"], ""),
            volume("classy", "1Gi", &["ReadWriteOnce"], "fast"),
        ];
        let cases: [(&str, &str, Option<&str>, Option<&str>); 7] = [
            ("500Mi", "ReadWriteOnce", None, Some("small")),
            ("1Gi", "ReadWriteOnce", Some(""), Some("small")),
            ("2Gi", "ReadWriteOnce", None, Some("big")),
            ("20Gi", "ReadWriteOnce", None, None),
            ("1Gi", "ReadOnlyMany", None, Some("many")),
            ("1Gi", "ReadWriteOnce", Some("fast"), Some("classy")),
            ("1Gi", "ReadWriteMany", None, None),
        ];
        for (size, mode, class, want) in cases {
            let c = claim(size, &[mode], class);
            assert_eq!(best(&c, &volumes), want, "{size} {mode} {class:?}");
        }
    }

    #[test]
    fn only_available_unclaimed_matching_volumes_are_taken() {
        let mut taken = (*volume("taken", "1Gi", &["ReadWriteOnce"], "")).clone();
        taken.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            name: Some("other".into()),
            namespace: Some("default".into()),
            uid: Some("u2".into()),
            ..Default::default()
        });
        let mut released = (*volume("released", "1Gi", &["ReadWriteOnce"], "")).clone();
        released.status.as_mut().unwrap().phase = Some("Released".into());
        let mut block = (*volume("block", "1Gi", &["ReadWriteOnce"], "")).clone();
        block.spec.as_mut().unwrap().volume_mode = Some("Block".into());
        let labelled = pv(json!({
            "metadata": {"name": "labelled", "labels": {"tier": "gold"}},
            "spec": {"capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"]},
            "status": {"phase": "Available"}
        }));
        let volumes = vec![
            Arc::new(taken),
            Arc::new(released),
            Arc::new(block),
            labelled,
        ];
        let c = claim("1Gi", &["ReadWriteOnce"], None);
        assert_eq!(best(&c, &volumes), Some("labelled"));
        let mut picky = c.clone();
        picky.spec.as_mut().unwrap().selector =
            Some(serde_json::from_value(json!({"matchLabels": {"tier": "silver"}})).unwrap());
        assert_eq!(best(&picky, &volumes), None);
        // Waiting for a consumer: only a volume pre-bound to the claim binds.
        assert_eq!(
            find_best_match(&c, &volumes, true).map(|v| name(&v.metadata)),
            None
        );
    }

    #[test]
    fn a_volume_pre_bound_to_the_claim_wins_whatever_its_phase() {
        let mut pre = (*volume("pre", "10Gi", &["ReadWriteOnce"], "other")).clone();
        pre.spec.as_mut().unwrap().claim_ref = Some(ObjectReference {
            name: Some("data".into()),
            namespace: Some("default".into()),
            ..Default::default()
        });
        pre.status.as_mut().unwrap().phase = Some("Pending".into());
        let volumes = vec![
            volume("small", "1Gi", &["ReadWriteOnce"], ""),
            Arc::new(pre),
        ];
        let c = claim("1Gi", &["ReadWriteOnce"], None);
        assert_eq!(best(&c, &volumes), Some("pre"));
        assert_eq!(
            find_best_match(&c, &volumes, true).map(|v| name(&v.metadata)),
            Some("pre")
        );
    }

    #[test]
    fn a_named_volume_is_checked_as_upstream_words_it() {
        let c = claim("2Gi", &["ReadWriteOnce"], None);
        let small = volume("v", "1Gi", &["ReadWriteOnce"], "");
        assert_eq!(
            check_satisfies(&small, &c),
            Err("requested PV is too small".into())
        );
        let classy = volume("v", "5Gi", &["ReadWriteOnce"], "fast");
        assert_eq!(
            check_satisfies(&classy, &c),
            Err("storageClassName does not match".into())
        );
        let ro = volume("v", "5Gi", &["ReadOnlyMany"], "");
        assert_eq!(
            check_satisfies(&ro, &c),
            Err("incompatible accessMode".into())
        );
        let fits = volume("v", "5Gi", &["ReadWriteOnce"], "");
        assert_eq!(check_satisfies(&fits, &c), Ok(()));
    }

    #[test]
    fn the_beta_class_annotation_wins() {
        let mut c = claim("1Gi", &["ReadWriteOnce"], Some("fast"));
        assert_eq!(claim_class(&c), "fast");
        set_annotation(&mut c.metadata, BETA_CLASS, "slow");
        assert_eq!(claim_class(&c), "slow");
    }
}
