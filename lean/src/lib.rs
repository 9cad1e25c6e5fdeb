//! Pods as the API clients (controllers' informers, the scheduler, the simulated nodes)
//! decode them: without `metadata.managedFields`.
//!
//! Upstream's controller manager and scheduler strip managed fields from what their
//! informers keep (client-go's `TransformStripManagedFields`); no client of ours reads
//! them. Here they are not even decoded: a pod's `fieldsV1` trees are the largest part of
//! its JSON and would be built into `serde_json::Value` maps on every watch event only to
//! be dropped. [`LeanPod`] reads a Pod with the field skipped and converts into a plain
//! [`Pod`] for the reader's store.

pub mod caches;
pub mod header;
pub mod quantity;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::Deserialize;

/// A Pod read without its managed fields; becomes a [`Pod`] with `managed_fields: None`.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct LeanPod {
    /// The pod's metadata (all but `managedFields`), kept as `ObjectMeta`.
    #[serde(default, deserialize_with = "meta")]
    metadata: ObjectMeta,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

/// `ObjectMeta`'s fields but `managedFields` (which serde skips without building it).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

/// Reads an `ObjectMeta` without its managed fields; for `#[serde(deserialize_with)]` on
/// other lean readings (the garbage collector's view of every object's metadata).
pub fn meta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = Meta::deserialize(d)?;
    Ok(ObjectMeta {
        annotations: m.annotations,
        creation_timestamp: m.creation_timestamp,
        deletion_grace_period_seconds: m.deletion_grace_period_seconds,
        deletion_timestamp: m.deletion_timestamp,
        finalizers: m.finalizers,
        generate_name: m.generate_name,
        generation: m.generation,
        labels: m.labels,
        managed_fields: None,
        name: m.name,
        namespace: m.namespace,
        owner_references: m.owner_references,
        resource_version: m.resource_version,
        self_link: m.self_link,
        uid: m.uid,
    })
}

impl From<LeanPod> for Pod {
    fn from(p: LeanPod) -> Pod {
        Pod {
            metadata: p.metadata,
            spec: p.spec,
            status: p.status,
        }
    }
}

impl k8s_openapi::Resource for LeanPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::Metadata for LeanPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_pod_is_read_whole_but_its_managed_fields() {
        let v = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "p", "namespace": "ns", "uid": "u", "resourceVersion": "7",
                "generateName": "p-", "labels": {"a": "b"}, "annotations": {"x": "y"},
                "finalizers": ["f"], "creationTimestamp": "2026-11-26T10:00:00Z",
                "deletionTimestamp": "2026-11-26T10:01:00Z", "deletionGracePeriodSeconds": 30,
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r",
                                     "uid": "ru", "controller": true}],
                "managedFields": [{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}}]
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running"}
        });
        let lean: Pod = serde_json::from_value::<LeanPod>(v.clone()).unwrap().into();
        let mut full: Pod = serde_json::from_value(v).unwrap();
        assert!(full.metadata.managed_fields.take().is_some());
        assert_eq!(lean, full);
    }
}
