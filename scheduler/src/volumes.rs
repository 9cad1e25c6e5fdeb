//! VolumeBinding (kube-scheduler's `volumebinding` plugin): pods wait for their
//! PersistentVolumeClaims, and claims of a `WaitForFirstConsumer` class are bound or
//! provisioned on the node the pod goes to.
//!
//! - **PreFilter**: every claim the pod mounts (`persistentVolumeClaim` volumes and generic
//!   ephemeral volumes, claim `<pod>-<volume>`) must exist and not be being deleted; an
//!   unbound claim whose class binds at once (`Immediate`, or no class) keeps the pod
//!   pending — `pod has unbound immediate PersistentVolumeClaims` — until the
//!   PersistentVolume controller binds it.
//! - **Filter**: a bound claim's volume must allow the node (its `nodeAffinity`); a
//!   `WaitForFirstConsumer` claim needs an `Available` volume of its class that fits it and
//!   allows the node, or a class whose provisioner can make one (not
//!   `kubernetes.io/no-provisioner`, `allowedTopologies` matching the node).
//! - **PreBind**: on the chosen node, a matched volume is bound to its claim (`claimRef`, as
//!   upstream's binder writes it) and a claim left to provision is annotated
//!   `volume.kubernetes.io/selected-node`; the pod is bound once every claim is (the
//!   PersistentVolume controller and the provisioner finish the work), or the attempt fails
//!   after [`BIND_TIMEOUT`].
//!
//! Claim, volume and class changes move pods parked by this plugin back to the queue.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::json;

use crate::cache::NodeInfo;
use crate::framework::selector::{Labels, Selector, node_selector_matches};
use crate::framework::{Code, Status};

/// The plugin's name, as FailedScheduling statuses and queueing hints name it.
pub const PLUGIN: &str = "VolumeBinding";
/// Upstream's reasons.
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// A bound volume's node affinity excludes the node.
pub const NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// No volume or provisioner for a delayed claim on the node.
pub const BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// A bound claim's volume does not exist.
pub const PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";
/// How long PreBind waits for the claims to be bound (upstream's `bindTimeoutSeconds`).
pub const BIND_TIMEOUT: Duration = Duration::from_secs(600);

const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

/// The claims, volumes and classes the scheduler watches.
#[derive(Clone)]
pub struct Volumes {
    /// PersistentVolumeClaims.
    pub claims: Store<PersistentVolumeClaim>,
    /// PersistentVolumes.
    pub volumes: Store<PersistentVolume>,
    /// StorageClasses.
    pub classes: Store<StorageClass>,
}

/// A `WaitForFirstConsumer` claim still to bind, with what could serve it.
#[derive(Debug, Clone)]
pub struct Delayed {
    /// The claim.
    pub claim: Arc<PersistentVolumeClaim>,
    /// `Available` volumes of its class that fit it, smallest first.
    pub candidates: Vec<Arc<PersistentVolume>>,
    /// Its class, when it exists.
    pub class: Option<Arc<StorageClass>>,
}

/// PreFilter's result for a pod with claims.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    /// Volumes of bound claims (`None`: the claim names a volume that does not exist).
    pub bound: Vec<Option<Arc<PersistentVolume>>>,
    /// Claims waiting for their first consumer.
    pub delayed: Vec<Delayed>,
}

/// What PreBind does for one claim on the chosen node.
#[derive(Debug, Clone)]
pub enum Action {
    /// Bind this volume to the claim.
    Bind(Arc<PersistentVolume>, Arc<PersistentVolumeClaim>),
    /// Ask the provisioner for a volume on the node.
    Provision(Arc<PersistentVolumeClaim>),
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The claims `pod` mounts.
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
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

fn claim_class(c: &PersistentVolumeClaim) -> &str {
    annotation(&c.metadata, BETA_CLASS)
        .or_else(|| c.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

fn volume_class(v: &PersistentVolume) -> &str {
    annotation(&v.metadata, BETA_CLASS)
        .or_else(|| v.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// Upstream's `isPVCFullyBound`.
fn fully_bound(c: &PersistentVolumeClaim) -> bool {
    c.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && annotation(&c.metadata, BIND_COMPLETED).is_some()
}

/// A storage quantity in bytes, rounded up.
fn bytes(q: &str) -> Option<u128> {
    lean::quantity::to_f64(q).map(|b| b.max(0.0).ceil() as u128)
}

fn requested(c: &PersistentVolumeClaim) -> u128 {
    c.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .and_then(|q| bytes(&q.0))
        .unwrap_or(0)
}

fn capacity(v: &PersistentVolume) -> u128 {
    v.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| bytes(&q.0))
        .unwrap_or(0)
}

/// Whether volume `v` could serve claim `c` (upstream's `FindMatchingVolume` checks but the
/// node): unclaimed and `Available`, same class, not being deleted, big enough, every access
/// mode the claim asks for, the same volume mode, and the claim's selector.
fn fits(v: &PersistentVolume, c: &PersistentVolumeClaim) -> bool {
    let (Some(vs), Some(cs)) = (v.spec.as_ref(), c.spec.as_ref()) else {
        return false;
    };
    let phase = v.status.as_ref().and_then(|s| s.phase.as_deref());
    if vs.claim_ref.is_some()
        || phase != Some("Available")
        || v.metadata.deletion_timestamp.is_some()
    {
        return false;
    }
    if volume_class(v) != claim_class(c) || capacity(v) < requested(c) {
        return false;
    }
    let modes = vs.access_modes.clone().unwrap_or_default();
    if !cs.access_modes.iter().flatten().all(|m| modes.contains(m)) {
        return false;
    }
    let mode = |m: Option<&String>| m.map_or("Filesystem", String::as_str).to_owned();
    if mode(vs.volume_mode.as_ref()) != mode(cs.volume_mode.as_ref()) {
        return false;
    }
    match &cs.selector {
        Some(sel) => {
            let labels: Labels = v
                .metadata
                .labels
                .clone()
                .unwrap_or_default()
                .into_iter()
                .collect();
            Selector::new(Some(sel)).matches(&labels)
        }
        None => true,
    }
}

/// Whether volume `v`'s required node affinity allows `node`.
fn allows(v: &PersistentVolume, node: &NodeInfo) -> bool {
    match v
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    {
        Some(sel) => node_selector_matches(sel, &node.name, &node.labels),
        None => true,
    }
}

/// Whether `class` can provision a volume reachable from `node`.
fn provisionable(class: &StorageClass, node: &NodeInfo) -> bool {
    if class.provisioner == NO_PROVISIONER {
        return false;
    }
    let Some(topologies) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    topologies.iter().any(|term| {
        term.match_label_expressions.iter().flatten().all(|req| {
            node.labels
                .get(&req.key)
                .is_some_and(|v| req.values.contains(v))
        })
    })
}

fn unresolvable(reason: impl Into<String>) -> Status {
    Status::new(Code::UnschedulableAndUnresolvable, PLUGIN, reason)
}

impl Volumes {
    /// PreFilter: `Ok(None)` when the pod mounts no claim.
    pub fn pre_filter(&self, pod: &Pod) -> Result<Option<PodVolumes>, Status> {
        let names = claim_names(pod);
        if names.is_empty() {
            return Ok(None);
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let mut out = PodVolumes::default();
        let mut immediate = false;
        for name in names {
            let Some(claim) = self.claims.get(&ObjectRef::new(&name).within(ns)) else {
                return Err(unresolvable(format!(
                    "persistentvolumeclaim \"{name}\" not found"
                )));
            };
            if claim.metadata.deletion_timestamp.is_some() {
                return Err(unresolvable(format!(
                    "persistentvolumeclaim \"{name}\" is being deleted"
                )));
            }
            if fully_bound(&claim) {
                let volume = claim
                    .spec
                    .as_ref()
                    .and_then(|s| s.volume_name.as_deref())
                    .and_then(|v| self.volumes.get(&ObjectRef::new(v)));
                out.bound.push(volume);
                continue;
            }
            let class_name = claim_class(&claim).to_owned();
            let class = (!class_name.is_empty())
                .then(|| self.classes.get(&ObjectRef::new(&class_name)))
                .flatten();
            let delayed = class
                .as_ref()
                .is_some_and(|c| c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer"));
            if !delayed {
                immediate = true;
                continue;
            }
            let mut candidates: Vec<Arc<PersistentVolume>> = self
                .volumes
                .state()
                .into_iter()
                .filter(|v| fits(v, &claim))
                .collect();
            candidates.sort_by_key(|v| capacity(v));
            out.delayed.push(Delayed {
                claim,
                candidates,
                class,
            });
        }
        if immediate {
            return Err(unresolvable(UNBOUND_IMMEDIATE));
        }
        Ok(Some(out))
    }

    /// PreBind's plan for `node`: one action per delayed claim (volumes matched at most once).
    pub fn plan(vols: &PodVolumes, node: &NodeInfo) -> Result<Vec<Action>, Status> {
        let mut reasons = Vec::new();
        for v in &vols.bound {
            match v {
                None => reasons.push(PV_NOT_EXIST),
                Some(v) if !allows(v, node) => reasons.push(NODE_CONFLICT),
                Some(_) => {}
            }
        }
        let mut actions = Vec::new();
        let mut taken: Vec<String> = Vec::new();
        for d in &vols.delayed {
            let matched = d.candidates.iter().find(|v| {
                allows(v, node)
                    && !taken
                        .iter()
                        .any(|t| Some(t.as_str()) == v.metadata.name.as_deref())
            });
            if let Some(v) = matched {
                taken.push(v.metadata.name.clone().unwrap_or_default());
                actions.push(Action::Bind(v.clone(), d.claim.clone()));
            } else if d.class.as_ref().is_some_and(|c| provisionable(c, node)) {
                actions.push(Action::Provision(d.claim.clone()));
            } else if !reasons.contains(&BIND_CONFLICT) {
                reasons.push(BIND_CONFLICT);
            }
        }
        if reasons.is_empty() {
            Ok(actions)
        } else {
            reasons.dedup();
            Err(Status {
                code: Code::UnschedulableAndUnresolvable,
                plugin: PLUGIN,
                reasons: reasons.into_iter().map(str::to_owned).collect(),
            })
        }
    }

    /// Filter: whether `node` can serve the pod's claims.
    pub fn filter(vols: Option<&PodVolumes>, node: &NodeInfo) -> Result<(), Status> {
        match vols {
            Some(v) => Self::plan(v, node).map(|_| ()),
            None => Ok(()),
        }
    }

    /// PreBind: carries out `actions` (the plan for `node`) and waits until every claim is
    /// bound.
    pub async fn pre_bind(
        &self,
        client: &kube::Client,
        ns: &str,
        node: &str,
        actions: Vec<Action>,
    ) -> Result<(), String> {
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        let pvs: Api<PersistentVolume> = Api::all(client.clone());
        let mut waiting: Vec<String> = Vec::new();
        for action in actions {
            match action {
                Action::Bind(v, c) => {
                    let mut v = (*v).clone();
                    let spec = v.spec.get_or_insert_with(Default::default);
                    spec.claim_ref = Some(ObjectReference {
                        kind: Some("PersistentVolumeClaim".into()),
                        api_version: Some("v1".into()),
                        namespace: c.metadata.namespace.clone(),
                        name: c.metadata.name.clone(),
                        uid: c.metadata.uid.clone(),
                        resource_version: c.metadata.resource_version.clone(),
                        ..Default::default()
                    });
                    v.metadata
                        .annotations
                        .get_or_insert_with(BTreeMap::new)
                        .insert(BOUND_BY_CONTROLLER.into(), "yes".into());
                    let name = v.metadata.name.clone().unwrap_or_default();
                    pvs.replace(&name, &PostParams::default(), &v)
                        .await
                        .map_err(|e| format!("binding volumes: {e}"))?;
                    waiting.push(c.metadata.name.clone().unwrap_or_default());
                }
                Action::Provision(c) => {
                    let name = c.metadata.name.clone().unwrap_or_default();
                    let patch = json!({"metadata": {"annotations": {SELECTED_NODE: node}}});
                    claims
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(|e| format!("binding volumes: {e}"))?;
                    waiting.push(name);
                }
            }
        }
        let deadline = tokio::time::Instant::now() + BIND_TIMEOUT;
        loop {
            let mut pending = false;
            for name in &waiting {
                let Some(c) = self.claims.get(&ObjectRef::new(name).within(ns)) else {
                    return Err(format!("persistentvolumeclaim \"{name}\" not found"));
                };
                if fully_bound(&c) {
                    continue;
                }
                pending = true;
            }
            if !pending {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err("binding volumes: context deadline exceeded".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, PersistentVolumeClaimSpec,
        PersistentVolumeSpec, PersistentVolumeStatus, VolumeNodeAffinity,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn node(name: &str) -> NodeInfo {
        NodeInfo::from_node(&Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([(
                    "kubernetes.io/hostname".to_owned(),
                    name.to_owned(),
                )])),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn claim(size: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec!["ReadWriteOnce".into()]),
                storage_class_name: Some("local".into()),
                resources: Some(k8s_openapi::api::core::v1::VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        "storage".to_owned(),
                        Quantity(size.into()),
                    )])),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn volume(name: &str, size: &str, on: &str) -> PersistentVolume {
        PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                access_modes: Some(vec!["ReadWriteOnce".into(), "ReadOnlyMany".into()]),
                capacity: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.into()),
                )])),
                storage_class_name: Some("local".into()),
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: "kubernetes.io/hostname".into(),
                                operator: "In".into(),
                                values: Some(vec![on.into()]),
                            }]),
                            ..Default::default()
                        }],
                    }),
                }),
                ..Default::default()
            }),
            status: Some(PersistentVolumeStatus {
                phase: Some("Available".into()),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn volumes_fit_claims_by_size_modes_and_class() {
        let c = claim("1Gi");
        assert!(fits(&volume("a", "1Gi", "n1"), &c));
        assert!(fits(&volume("a", "2G", "n1"), &c));
        assert!(!fits(&volume("a", "500Mi", "n1"), &c));
        let mut other = volume("a", "1Gi", "n1");
        if let Some(s) = other.spec.as_mut() {
            s.storage_class_name = Some("fast".into());
        }
        assert!(!fits(&other, &c));
        let mut rwx = c;
        if let Some(s) = rwx.spec.as_mut() {
            s.access_modes = Some(vec!["ReadWriteMany".into()]);
        }
        assert!(!fits(&volume("a", "1Gi", "n1"), &rwx));
    }

    #[test]
    fn delayed_claims_take_a_volume_on_the_node_or_are_provisioned() {
        let c = Arc::new(claim("1Gi"));
        let class = |provisioner: &str| {
            Some(Arc::new(StorageClass {
                provisioner: provisioner.into(),
                ..Default::default()
            }))
        };
        let vols = PodVolumes {
            bound: vec![],
            delayed: vec![Delayed {
                claim: c,
                candidates: vec![Arc::new(volume("on-n1", "1Gi", "n1"))],
                class: class(NO_PROVISIONER),
            }],
        };
        match Volumes::plan(&vols, &node("n1")).as_deref() {
            Ok([Action::Bind(v, _)]) => assert_eq!(v.metadata.name.as_deref(), Some("on-n1")),
            other => panic!("{other:?}"),
        }
        let err = Volumes::plan(&vols, &node("n2")).unwrap_err();
        assert_eq!(err.reasons, vec![BIND_CONFLICT.to_owned()]);
        let provisioned = PodVolumes {
            delayed: vec![Delayed {
                class: class("capstan.dev/local-path"),
                ..vols.delayed[0].clone()
            }],
            ..vols
        };
        assert!(matches!(
            Volumes::plan(&provisioned, &node("n2")).as_deref(),
            Ok([Action::Provision(_)])
        ));
    }

    #[test]
    fn bound_volumes_keep_pods_on_their_nodes() {
        let vols = PodVolumes {
            bound: vec![Some(Arc::new(volume("v", "1Gi", "n1")))],
            delayed: vec![],
        };
        assert!(Volumes::filter(Some(&vols), &node("n1")).is_ok());
        let err = Volumes::filter(Some(&vols), &node("n2")).unwrap_err();
        assert_eq!(err.reasons, vec![NODE_CONFLICT.to_owned()]);
        let missing = PodVolumes {
            bound: vec![None],
            delayed: vec![],
        };
        assert_eq!(
            Volumes::filter(Some(&missing), &node("n1"))
                .unwrap_err()
                .reasons,
            vec![PV_NOT_EXIST.to_owned()]
        );
    }
}
