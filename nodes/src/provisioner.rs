//! The cluster's storage, as kind ships it (its `standard` class and local-path
//! provisioner): a default StorageClass `standard` (`WaitForFirstConsumer`, reclaim
//! `Delete`) whose provisioner, [`PROVISIONER`], makes a node-local `hostPath`
//! PersistentVolume for each claim the PersistentVolume controller hands to it, on the node
//! the scheduler chose, and deletes the volumes of that class its claims released.
//!
//! It is an ordinary API client, as an external provisioner is (user
//! `system:capstan:local-path-provisioner`, bound to upstream's
//! `system:persistent-volume-provisioner` role): claims carry
//! `volume.kubernetes.io/storage-provisioner: capstan.dev/local-path` once the
//! PersistentVolume controller asks for a volume, and `volume.kubernetes.io/selected-node`
//! once the scheduler picked a node; the volume is created pre-bound to the claim
//! (`claimRef`), and the PersistentVolume controller completes the binding.
//!
//! The class is created at start when no class of this provisioner exists (the default mark
//! only when no other class has it), as minikube's addon manager keeps its
//! `EnsureExists` addons: deleting it lasts until the next start.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// The provisioner's name, as StorageClasses and volumes name it.
pub const PROVISIONER: &str = "capstan.dev/local-path";
/// The StorageClass created for it.
pub const CLASS: &str = "standard";
/// Where its volumes live on a node (kind's local-path provisioner uses the same).
pub const BASE_PATH: &str = "/var/local-path-provisioner";

const STORAGE_PROVISIONER: &str = "volume.kubernetes.io/storage-provisioner";
const BETA_STORAGE_PROVISIONER: &str = "volume.beta.kubernetes.io/storage-provisioner";
const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const PROVISIONED_BY: &str = "pv.kubernetes.io/provisioned-by";
const DEFAULT_CLASS: &str = "storageclass.kubernetes.io/is-default-class";
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Everything is looked at again this often, besides on every change.
const RESYNC: Duration = Duration::from_secs(15);

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

fn claim_class(c: &PersistentVolumeClaim) -> &str {
    annotation(&c.metadata, BETA_CLASS)
        .or_else(|| c.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// The name of the volume made for claim `c` (external provisioners' `pvc-<claim uid>`).
fn volume_name(c: &PersistentVolumeClaim) -> String {
    format!("pvc-{}", c.metadata.uid.as_deref().unwrap_or_default())
}

/// Whether claim `c` waits for this provisioner: handed to it, unbound, not being deleted,
/// and — for a `WaitForFirstConsumer` class — placed on a node.
fn wants_volume(c: &PersistentVolumeClaim, class: &StorageClass) -> bool {
    let asked = [STORAGE_PROVISIONER, BETA_STORAGE_PROVISIONER]
        .iter()
        .any(|k| annotation(&c.metadata, k) == Some(PROVISIONER));
    let unbound = c
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_none_or(str::is_empty);
    let placed = class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer")
        || annotation(&c.metadata, SELECTED_NODE).is_some();
    asked
        && unbound
        && placed
        && class.provisioner == PROVISIONER
        && c.metadata.deletion_timestamp.is_none()
}

/// The volume for claim `c` of `class`, pre-bound to it, on `node` when one was chosen.
pub fn volume_for(c: &PersistentVolumeClaim, class: &StorageClass) -> PersistentVolume {
    let name = volume_name(c);
    let ns = c.metadata.namespace.clone().unwrap_or_default();
    let claim = c.metadata.name.clone().unwrap_or_default();
    let spec = c.spec.clone().unwrap_or_default();
    let node = annotation(&c.metadata, SELECTED_NODE).map(str::to_owned);
    let storage = spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned();
    PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            annotations: Some(BTreeMap::from([(
                PROVISIONED_BY.to_owned(),
                PROVISIONER.to_owned(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: storage.map(|s| BTreeMap::from([("storage".to_owned(), s)])),
            access_modes: spec.access_modes.clone(),
            persistent_volume_reclaim_policy: Some(
                class
                    .reclaim_policy
                    .clone()
                    .unwrap_or_else(|| "Delete".into()),
            ),
            storage_class_name: Some(class.metadata.name.clone().unwrap_or_default()),
            volume_mode: spec.volume_mode,
            mount_options: class.mount_options.clone(),
            claim_ref: Some(ObjectReference {
                kind: Some("PersistentVolumeClaim".into()),
                api_version: Some("v1".into()),
                namespace: Some(ns.clone()),
                name: Some(claim.clone()),
                uid: c.metadata.uid.clone(),
                resource_version: c.metadata.resource_version.clone(),
                ..Default::default()
            }),
            host_path: Some(HostPathVolumeSource {
                path: format!("{BASE_PATH}/{name}_{ns}_{claim}"),
                type_: Some("DirectoryOrCreate".into()),
            }),
            node_affinity: node.map(|n| VolumeNodeAffinity {
                required: Some(NodeSelector {
                    node_selector_terms: vec![NodeSelectorTerm {
                        match_expressions: Some(vec![NodeSelectorRequirement {
                            key: "kubernetes.io/hostname".into(),
                            operator: "In".into(),
                            values: Some(vec![n]),
                        }]),
                        ..Default::default()
                    }],
                }),
            }),
            ..Default::default()
        }),
        status: None,
    }
}

/// Whether volume `v` is one of ours whose claim released it and whose policy deletes it.
fn to_delete(v: &PersistentVolume) -> bool {
    annotation(&v.metadata, PROVISIONED_BY) == Some(PROVISIONER)
        && v.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Released")
        && v.spec
            .as_ref()
            .and_then(|s| s.persistent_volume_reclaim_policy.as_deref())
            == Some("Delete")
        && v.metadata.deletion_timestamp.is_none()
}

/// The class this provisioner serves, made at start (see the module docs).
fn default_class(mark_default: bool) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(CLASS.into()),
            annotations: mark_default
                .then(|| BTreeMap::from([(DEFAULT_CLASS.to_owned(), "true".to_owned())])),
            ..Default::default()
        },
        provisioner: PROVISIONER.into(),
        reclaim_policy: Some("Delete".into()),
        volume_binding_mode: Some("WaitForFirstConsumer".into()),
        ..Default::default()
    }
}

fn reflect<K>(
    client: &kube::Client,
    changed: &Arc<Notify>,
    shutdown: &CancellationToken,
) -> Store<K>
where
    K: Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(Api::<K>::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .touched_objects();
    let (changed, shutdown) = (changed.clone(), shutdown.clone());
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                ev = stream.next() => match ev {
                    None => return,
                    Some(Err(e)) => tracing::debug!(error = %e, "provisioner watch failed"),
                    Some(Ok(_)) => changed.notify_one(),
                }
            }
        }
    });
    reader
}

/// Runs the provisioner until `shutdown`.
pub async fn run(client: kube::Client, shutdown: CancellationToken) -> anyhow::Result<()> {
    let classes_api: Api<StorageClass> = Api::all(client.clone());
    let existing = classes_api.list(&Default::default()).await?;
    if !existing.items.iter().any(|c| c.provisioner == PROVISIONER) {
        let has_default = existing
            .items
            .iter()
            .any(|c| annotation(&c.metadata, DEFAULT_CLASS) == Some("true"));
        match classes_api
            .create(&PostParams::default(), &default_class(!has_default))
            .await
        {
            Ok(_) => tracing::info!(
                class = CLASS,
                "created the StorageClass of the local-path provisioner"
            ),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let changed = Arc::new(Notify::new());
    let claims: Store<PersistentVolumeClaim> = reflect(&client, &changed, &shutdown);
    let volumes: Store<PersistentVolume> = reflect(&client, &changed, &shutdown);
    let classes: Store<StorageClass> = reflect(&client, &changed, &shutdown);
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: PROVISIONER.into(),
            instance: None,
        },
    );
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    loop {
        for c in claims.state() {
            let Some(class) = classes.get(&ObjectRef::new(claim_class(&c))) else {
                continue;
            };
            if !wants_volume(&c, &class) || volumes.get(&ObjectRef::new(&volume_name(&c))).is_some()
            {
                continue;
            }
            let v = volume_for(&c, &class);
            let name = volume_name(&c);
            let (kind, reason, note) = match pvs.create(&PostParams::default(), &v).await {
                Ok(_) => (
                    EventType::Normal,
                    "ProvisioningSucceeded",
                    format!("Successfully provisioned volume {name}"),
                ),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => (
                    EventType::Warning,
                    "ProvisioningFailed",
                    format!(
                        "failed to provision volume with StorageClass {:?}: {e}",
                        claim_class(&c)
                    ),
                ),
            };
            let reference = c.object_ref(&());
            let event = Event {
                type_: kind,
                reason: reason.into(),
                note: Some(note),
                action: "Provisioning".into(),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &reference).await {
                tracing::debug!(error = %e, "provisioner event not recorded");
            }
        }
        for v in volumes.state() {
            if !to_delete(&v) {
                continue;
            }
            let name = v.metadata.name.clone().unwrap_or_default();
            match pvs.delete(&name, &DeleteParams::default()).await {
                Ok(_) => tracing::info!(volume = %name, "deleted a released volume"),
                Err(e) => tracing::debug!(volume = %name, error = %e, "deleting a released volume"),
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = changed.notified() => {}
            () = tokio::time::sleep(RESYNC) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaimSpec, VolumeResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn claim(annotations: &[(&str, &str)]) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data-db-0".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some(CLASS.into()),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity("1Gi".into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn claims_are_served_once_handed_over_and_placed() {
        let class = default_class(true);
        assert!(!wants_volume(&claim(&[]), &class));
        assert!(!wants_volume(
            &claim(&[(STORAGE_PROVISIONER, PROVISIONER)]),
            &class
        ));
        let placed = claim(&[(STORAGE_PROVISIONER, PROVISIONER), (SELECTED_NODE, "n1")]);
        assert!(wants_volume(&placed, &class));
        let v = volume_for(&placed, &class);
        assert_eq!(v.metadata.name.as_deref(), Some("pvc-u-1"));
        let spec = v.spec.unwrap_or_default();
        assert_eq!(
            spec.claim_ref.and_then(|r| r.name).as_deref(),
            Some("data-db-0")
        );
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        assert_eq!(
            spec.capacity.and_then(|c| c.get("storage").cloned()),
            Some(Quantity("1Gi".into()))
        );
        let term = &spec
            .node_affinity
            .and_then(|a| a.required)
            .map(|r| r.node_selector_terms)
            .unwrap_or_default()[0];
        assert_eq!(
            term.match_expressions.as_ref().map(|e| e[0].values.clone()),
            Some(Some(vec!["n1".to_owned()]))
        );
        assert_eq!(
            spec.host_path.map(|h| h.path).as_deref(),
            Some("/var/local-path-provisioner/pvc-u-1_default_data-db-0")
        );
    }
}
