//! `NodeRestriction` (upstream's `plugin/pkg/admission/noderestriction`): a kubelet
//! identity (`system:node:<name>` in `system:nodes`) may change only its own Node (and not
//! its taints or restricted labels), only pods bound to it (status, eviction, deletion,
//! mirror pods), only its own Lease and CSINode, and may ask tokens only for pods bound to
//! it. The messages are upstream's.

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::{Attributes, Lookup, MutatingAdmission, Operation, forbidden, str_at};
use crate::authz::node::{NODE_LEASE_NAMESPACE, node_identity};
use crate::error::{ApiError, GroupResource, Result};

/// The plugin.
pub struct NodeRestriction;

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// Labels a kubelet may set on its Node (`kubeletapis.IsKubeletLabel`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map_or("", |(ns, _)| ns)
}

fn in_domain(namespace: &str, domain: &str) -> bool {
    namespace == domain || namespace.ends_with(&format!(".{domain}"))
}

fn is_kubelet_label(key: &str) -> bool {
    KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|d| in_domain(label_namespace(key), d))
}

fn is_kubernetes_label(key: &str) -> bool {
    let ns = label_namespace(key);
    in_domain(ns, "kubernetes.io") || in_domain(ns, "k8s.io")
}

fn labels(obj: Option<&Map<String, Value>>) -> Map<String, Value> {
    obj.and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// Label keys a node may not add, remove or change, sorted.
fn forbidden_labels(new: &Map<String, Value>, old: &Map<String, Value>) -> Vec<String> {
    let modified: BTreeSet<&String> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(*v))
        .chain(old.iter().filter(|(k, v)| new.get(*k) != Some(*v)))
        .map(|(k, _)| k)
        .collect();
    modified
        .into_iter()
        .filter(|k| {
            in_domain(label_namespace(k), NODE_RESTRICTION_NAMESPACE)
                || (is_kubernetes_label(k) && !is_kubelet_label(k))
        })
        .cloned()
        .collect()
}

fn spec_field<'a>(obj: Option<&'a Map<String, Value>>, field: &str) -> Option<&'a Value> {
    obj?.get("spec")?.get(field).filter(|v| !v.is_null())
}

fn node_name_of(obj: &Map<String, Value>) -> &str {
    obj.get("spec")
        .and_then(|s| s.get("nodeName"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn pod_not_found(name: &str) -> ApiError {
    ApiError::NotFound {
        resource: GroupResource::new("", "pods"),
        name: name.into(),
    }
}

impl NodeRestriction {
    fn existing_pod(
        &self,
        lookup: &Lookup<'_>,
        namespace: &str,
        name: &str,
    ) -> Result<Map<String, Value>> {
        lookup
            .get(&format!("/registry/core/pods/{namespace}/{name}"))?
            .ok_or_else(|| pod_not_found(name))
    }

    fn pod(
        &self,
        lookup: &Lookup<'_>,
        node: &str,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
    ) -> Result<()> {
        match a.operation {
            Operation::Create => pod_create(lookup, node, a, obj),
            Operation::Delete => {
                let existing = self.existing_pod(lookup, a.namespace, a.name)?;
                if node_name_of(&existing) != node {
                    return Err(forbidden(
                        a,
                        obj,
                        format!(
                            "node {node:?} can only delete pods with spec.nodeName set to itself"
                        ),
                    ));
                }
                Ok(())
            }
            Operation::Update | Operation::Connect => Err(forbidden(
                a,
                obj,
                format!(
                    "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
                    a.operation.as_str()
                ),
            )),
        }
    }

    fn pod_status(
        &self,
        node: &str,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if a.operation != Operation::Update {
            return Err(forbidden(
                a,
                obj,
                format!("unexpected operation {:?}", a.operation.as_str()),
            ));
        }
        if old.map(node_name_of) != Some(node) {
            return Err(forbidden(
                a,
                obj,
                format!(
                    "node {node:?} can only update pod status for pods with spec.nodeName set to itself"
                ),
            ));
        }
        if labels(obj) != labels(old) {
            return Err(forbidden(
                a,
                obj,
                format!("node {node:?} cannot update labels through pod status"),
            ));
        }
        let claims = |o: Option<&Map<String, Value>>| {
            o.and_then(|o| o.get("status"))
                .and_then(|s| s.get("resourceClaimStatuses"))
                .cloned()
        };
        if claims(obj) != claims(old) {
            return Err(forbidden(
                a,
                obj,
                format!("node {node:?} cannot update resource claim statues"),
            ));
        }
        Ok(())
    }

    fn pod_eviction(
        &self,
        lookup: &Lookup<'_>,
        node: &str,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if a.operation != Operation::Create {
            return Err(forbidden(
                a,
                obj,
                format!("unexpected operation {}", a.operation.as_str()),
            ));
        }
        let mut pod_name = a.name.to_owned();
        if pod_name.is_empty() {
            pod_name = obj
                .map(|o| str_at(&Value::Object(o.clone()), &["metadata", "name"]).to_owned())
                .unwrap_or_default();
            if pod_name.is_empty() {
                return Err(forbidden(
                    a,
                    obj,
                    "could not determine pod from request data",
                ));
            }
        }
        let existing = self.existing_pod(lookup, a.namespace, &pod_name)?;
        if node_name_of(&existing) != node {
            return Err(forbidden(
                a,
                obj,
                format!("node {node} can only evict pods with spec.nodeName set to itself"),
            ));
        }
        Ok(())
    }

    fn node(
        &self,
        node: &str,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let requested = if a.operation == Operation::Create {
            obj.and_then(|o| o.get("metadata"))
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
        } else {
            a.name
        };
        if requested != node {
            return Err(forbidden(
                a,
                obj,
                format!("node {node:?} is not allowed to modify node {requested:?}"),
            ));
        }
        match a.operation {
            Operation::Create => {
                if spec_field(obj, "configSource").is_some() {
                    return Err(forbidden(
                        a,
                        obj,
                        format!(
                            "node {node:?} is not allowed to create pods with a non-nil configSource"
                        ),
                    ));
                }
                let bad = forbidden_labels(&labels(obj), &Map::new());
                if !bad.is_empty() {
                    return Err(forbidden(
                        a,
                        obj,
                        format!(
                            "node {node:?} is not allowed to set the following labels: {}",
                            bad.join(", ")
                        ),
                    ));
                }
            }
            Operation::Update => {
                let source = spec_field(obj, "configSource");
                if source.is_some() && source != spec_field(old, "configSource") {
                    return Err(forbidden(
                        a,
                        obj,
                        format!(
                            "node {node:?} is not allowed to update configSource to a new non-nil configSource"
                        ),
                    ));
                }
                let taints = |o| {
                    spec_field(o, "taints")
                        .filter(|t| t.as_array().is_some_and(|a| !a.is_empty()))
                        .cloned()
                };
                if taints(obj) != taints(old) {
                    return Err(forbidden(
                        a,
                        obj,
                        format!("node {node:?} is not allowed to modify taints"),
                    ));
                }
                let bad = forbidden_labels(&labels(obj), &labels(old));
                if !bad.is_empty() {
                    return Err(forbidden(
                        a,
                        obj,
                        format!("is not allowed to modify labels: {}", bad.join(", ")),
                    ));
                }
            }
            Operation::Delete | Operation::Connect => {}
        }
        Ok(())
    }

    fn service_account(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        node: &str,
    ) -> Result<()> {
        if a.operation != Operation::Create || a.subresource != "token" {
            return Ok(());
        }
        let spec_ref = obj
            .and_then(|o| o.get("spec"))
            .and_then(|s| s.get("boundObjectRef"))
            .filter(|r| !r.is_null());
        let Some(r) = spec_ref.filter(|r| {
            str_at(r, &["apiVersion"]) == "v1"
                && str_at(r, &["kind"]) == "Pod"
                && !str_at(r, &["name"]).is_empty()
        }) else {
            return Err(forbidden(a, obj, "node requested token not bound to a pod"));
        };
        let uid = str_at(r, &["uid"]);
        if uid.is_empty() {
            return Err(forbidden(
                a,
                obj,
                "node requested token with a pod binding without a uid",
            ));
        }
        let pod = self.existing_pod(lookup, a.namespace, str_at(r, &["name"]))?;
        let pod_uid = pod
            .get("metadata")
            .and_then(|m| m.get("uid"))
            .and_then(Value::as_str)
            .unwrap_or("");
        if uid != pod_uid {
            return Err(forbidden(
                a,
                obj,
                format!(
                    "the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"
                ),
            ));
        }
        if node_name_of(&pod) != node {
            return Err(forbidden(
                a,
                obj,
                "node requested token bound to a pod scheduled on a different node",
            ));
        }
        Ok(())
    }
}

fn object_name(obj: Option<&Map<String, Value>>) -> &str {
    obj.and_then(|o| o.get("metadata"))
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("")
}

fn pod_create(
    lookup: &Lookup<'_>,
    node: &str,
    a: &Attributes<'_>,
    obj: Option<&Map<String, Value>>,
) -> Result<()> {
    let Some(pod) = obj else {
        return Err(forbidden(a, obj, "unexpected type <nil>"));
    };
    let annotations = pod
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    if !annotations.is_some_and(|m| m.contains_key(MIRROR_ANNOTATION)) {
        return Err(forbidden(
            a,
            obj,
            format!(
                "pod does not have {MIRROR_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"
            ),
        ));
    }
    if node_name_of(pod) != node {
        return Err(forbidden(
            a,
            obj,
            format!("node {node:?} can only create pods with spec.nodeName set to itself"),
        ));
    }
    let owners: Vec<&Value> = pod
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    match owners.as_slice() {
        [] => {
            return Err(forbidden(
                a,
                obj,
                format!("node {node:?} can only create pods with an owner reference set to itself"),
            ));
        }
        [owner] => {
            if str_at(owner, &["apiVersion"]) != "v1"
                || str_at(owner, &["kind"]) != "Node"
                || str_at(owner, &["name"]) != node
            {
                return Err(forbidden(
                    a,
                    obj,
                    format!(
                        "node {node:?} can only create pods with an owner reference set to itself"
                    ),
                ));
            }
            if owner.get("controller").and_then(Value::as_bool) != Some(true) {
                return Err(forbidden(
                    a,
                    obj,
                    format!(
                        "node {node:?} can only create pods with a controller owner reference set to itself"
                    ),
                ));
            }
            if owner.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true) {
                return Err(forbidden(
                    a,
                    obj,
                    format!("node {node:?} must not set blockOwnerDeletion on an owner reference"),
                ));
            }
            let stored = lookup
                .get(&format!("/registry/core/nodes/{node}"))?
                .ok_or_else(|| ApiError::NotFound {
                    resource: GroupResource::new("", "nodes"),
                    name: node.into(),
                })?;
            let node_uid = str_at(&Value::Object(stored), &["metadata", "uid"]).to_owned();
            let owner_uid = str_at(owner, &["uid"]);
            if owner_uid != node_uid {
                return Err(forbidden(
                    a,
                    obj,
                    format!("node {node} UID mismatch: expected {owner_uid} got {node_uid}"),
                ));
            }
        }
        _ => {
            return Err(forbidden(
                a,
                obj,
                format!(
                    "node {node:?} can only create pods with a single owner reference set to itself"
                ),
            ));
        }
    }
    let doc = Value::Object(pod.clone());
    if !str_at(&doc, &["spec", "serviceAccountName"]).is_empty() {
        return Err(forbidden(
            a,
            obj,
            format!("node {node:?} can not create pods that reference a service account"),
        ));
    }
    let refs = crate::authz::node::pod_references(&doc);
    if refs.secrets > 0 {
        return Err(forbidden(
            a,
            obj,
            format!("node {node:?} can not create pods that reference secrets"),
        ));
    }
    if refs.configmaps > 0 {
        return Err(forbidden(
            a,
            obj,
            format!("node {node:?} can not create pods that reference configmaps"),
        ));
    }
    let volumes = doc
        .get("spec")
        .and_then(|s| s.get("volumes"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let trust_bundles = volumes.iter().any(|v| {
        v.get("projected")
            .and_then(|p| p.get("sources"))
            .and_then(Value::as_array)
            .is_some_and(|s| s.iter().any(|src| src.get("clusterTrustBundle").is_some()))
    });
    if trust_bundles {
        return Err(forbidden(
            a,
            obj,
            format!("node {node:?} can not create pods that reference clustertrustbundles"),
        ));
    }
    if volumes
        .iter()
        .any(|v| v.get("persistentVolumeClaim").is_some())
    {
        return Err(forbidden(
            a,
            obj,
            format!("node {node:?} can not create pods that reference persistentvolumeclaims"),
        ));
    }
    Ok(())
}

impl MutatingAdmission for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    fn admit(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        let Some(node) = node_identity(a.user) else {
            return Ok(());
        };
        let obj = obj.map(|o| &*o);
        if node.is_empty() {
            return Err(forbidden(
                a,
                obj,
                format!("could not determine node from user {:?}", a.user.name),
            ));
        }
        match (a.group, a.resource) {
            ("", "pods") => match a.subresource {
                "" => self.pod(lookup, node, a, obj),
                "status" => self.pod_status(node, a, obj, old),
                "eviction" => self.pod_eviction(lookup, node, a, obj),
                other => Err(forbidden(
                    a,
                    obj,
                    format!(
                        "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
                    ),
                )),
            },
            ("", "nodes") => self.node(node, a, obj, old),
            ("", "persistentvolumeclaims") => {
                if a.subresource != "status" {
                    return Err(forbidden(a, obj, "may only update PVC status"));
                }
                if a.operation != Operation::Update {
                    return Err(forbidden(
                        a,
                        obj,
                        format!("unexpected operation {:?}", a.operation.as_str()),
                    ));
                }
                // Only status.capacity, status.conditions and the expansion fields may
                // change (the status scope already keeps the rest as stored).
                let strip = |o: Option<&Map<String, Value>>| {
                    let mut o = o.cloned().unwrap_or_default();
                    if let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                        m.remove("resourceVersion");
                        m.remove("managedFields");
                    }
                    if let Some(s) = o.get_mut("status").and_then(Value::as_object_mut) {
                        for f in [
                            "capacity",
                            "conditions",
                            "allocatedResourceStatuses",
                            "allocatedResources",
                        ] {
                            s.remove(f);
                        }
                    }
                    o
                };
                if strip(obj) != strip(old) {
                    return Err(forbidden(
                        a,
                        obj,
                        format!(
                            "node {node:?} is not allowed to update fields other than status.capacity and status.conditions"
                        ),
                    ));
                }
                Ok(())
            }
            ("", "serviceaccounts") => self.service_account(lookup, a, obj, node),
            ("coordination.k8s.io", "leases") => {
                if a.namespace != NODE_LEASE_NAMESPACE {
                    return Err(forbidden(
                        a,
                        obj,
                        format!(
                            "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                        ),
                    ));
                }
                let name = if a.operation == Operation::Create {
                    object_name(obj)
                } else {
                    a.name
                };
                if name != node {
                    return Err(forbidden(
                        a,
                        obj,
                        "can only access node lease with the same name as the requesting node",
                    ));
                }
                Ok(())
            }
            ("storage.k8s.io", "csinodes") => {
                let name = if a.operation == Operation::Create {
                    object_name(obj)
                } else {
                    a.name
                };
                if name != node {
                    return Err(forbidden(
                        a,
                        obj,
                        "can only access CSINode with the same name as the requesting node",
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nodes_keep_away_from_restricted_labels() {
        let new = json!({"kubernetes.io/hostname": "n1", "node-role.kubernetes.io/control-plane": "", "team": "a", "node-restriction.kubernetes.io/x": "y", "node.kubernetes.io/exclude-from-external-load-balancers": ""});
        let bad = forbidden_labels(new.as_object().unwrap(), &Map::new());
        assert_eq!(
            bad,
            vec![
                "node-restriction.kubernetes.io/x".to_owned(),
                "node-role.kubernetes.io/control-plane".to_owned()
            ]
        );
    }
}
