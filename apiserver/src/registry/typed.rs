//! Typed decoding of built-in kinds through their k8s-openapi types: it rejects wrongly
//! typed fields (400, as upstream's decoder does), drops fields the type does not know
//! (upstream prunes them for built-in kinds), and reports those unknown fields so
//! `fieldValidation=Strict|Warn` can act on them.

use serde_json::{Map, Value};

/// Round-trips a JSON object through the Rust type of a kind.
type Roundtrip = fn(Value) -> Result<Value, serde_json::Error>;

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(
    v: Value,
) -> Result<Value, serde_json::Error> {
    let typed: T = serde_json::from_value(v)?;
    serde_json::to_value(typed)
}

macro_rules! kinds {
    ($(($group:literal, $version:literal, $kind:literal, $ty:ty)),* $(,)?) => {
        fn lookup(group: &str, version: &str, kind: &str) -> Option<Roundtrip> {
            match (group, version, kind) {
                $(($group, $version, $kind) => Some(roundtrip::<$ty> as Roundtrip),)*
                _ => None,
            }
        }
    };
}

use k8s_openapi::api::{
    admissionregistration, apps, autoscaling, batch, certificates, coordination, core, discovery,
    events, flowcontrol, networking, node, policy, rbac, scheduling, storage,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration;

kinds![
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        admissionregistration::v1::MutatingWebhookConfiguration
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        admissionregistration::v1::ValidatingAdmissionPolicy
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        admissionregistration::v1::ValidatingAdmissionPolicyBinding
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        admissionregistration::v1::ValidatingWebhookConfiguration
    ),
    (
        "apps",
        "v1",
        "ControllerRevision",
        apps::v1::ControllerRevision
    ),
    ("apps", "v1", "DaemonSet", apps::v1::DaemonSet),
    ("apps", "v1", "Deployment", apps::v1::Deployment),
    ("apps", "v1", "ReplicaSet", apps::v1::ReplicaSet),
    ("apps", "v1", "StatefulSet", apps::v1::StatefulSet),
    (
        "autoscaling",
        "v1",
        "HorizontalPodAutoscaler",
        autoscaling::v1::HorizontalPodAutoscaler
    ),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        autoscaling::v2::HorizontalPodAutoscaler
    ),
    ("batch", "v1", "CronJob", batch::v1::CronJob),
    ("batch", "v1", "Job", batch::v1::Job),
    (
        "certificates.k8s.io",
        "v1",
        "CertificateSigningRequest",
        certificates::v1::CertificateSigningRequest
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        coordination::v1::Lease
    ),
    ("", "v1", "ConfigMap", core::v1::ConfigMap),
    ("", "v1", "Endpoints", core::v1::Endpoints),
    ("", "v1", "Event", core::v1::Event),
    ("", "v1", "LimitRange", core::v1::LimitRange),
    ("", "v1", "Namespace", core::v1::Namespace),
    ("", "v1", "Node", core::v1::Node),
    ("", "v1", "PersistentVolume", core::v1::PersistentVolume),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        core::v1::PersistentVolumeClaim
    ),
    ("", "v1", "Pod", core::v1::Pod),
    ("", "v1", "PodTemplate", core::v1::PodTemplate),
    (
        "",
        "v1",
        "ReplicationController",
        core::v1::ReplicationController
    ),
    ("", "v1", "ResourceQuota", core::v1::ResourceQuota),
    ("", "v1", "Secret", core::v1::Secret),
    ("", "v1", "Service", core::v1::Service),
    ("", "v1", "ServiceAccount", core::v1::ServiceAccount),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        discovery::v1::EndpointSlice
    ),
    ("events.k8s.io", "v1", "Event", events::v1::Event),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "FlowSchema",
        flowcontrol::v1::FlowSchema
    ),
    (
        "flowcontrol.apiserver.k8s.io",
        "v1",
        "PriorityLevelConfiguration",
        flowcontrol::v1::PriorityLevelConfiguration
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        networking::v1::Ingress
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        networking::v1::IngressClass
    ),
    (
        "networking.k8s.io",
        "v1",
        "IPAddress",
        networking::v1::IPAddress
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        networking::v1::NetworkPolicy
    ),
    (
        "networking.k8s.io",
        "v1",
        "ServiceCIDR",
        networking::v1::ServiceCIDR
    ),
    ("node.k8s.io", "v1", "RuntimeClass", node::v1::RuntimeClass),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        policy::v1::PodDisruptionBudget
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        rbac::v1::ClusterRole
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        rbac::v1::ClusterRoleBinding
    ),
    ("rbac.authorization.k8s.io", "v1", "Role", rbac::v1::Role),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        rbac::v1::RoleBinding
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        scheduling::v1::PriorityClass
    ),
    ("storage.k8s.io", "v1", "CSIDriver", storage::v1::CSIDriver),
    ("storage.k8s.io", "v1", "CSINode", storage::v1::CSINode),
    (
        "storage.k8s.io",
        "v1",
        "CSIStorageCapacity",
        storage::v1::CSIStorageCapacity
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        storage::v1::StorageClass
    ),
    (
        "storage.k8s.io",
        "v1",
        "VolumeAttachment",
        storage::v1::VolumeAttachment
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        apiextensions::v1::CustomResourceDefinition
    ),
    (
        "apiregistration.k8s.io",
        "v1",
        "APIService",
        apiregistration::v1::APIService
    ),
];

/// The outcome of typed decoding.
#[derive(Debug)]
pub struct Decoded {
    /// The object as the type sees it (unknown fields dropped).
    pub object: Map<String, Value>,
    /// Dotted paths of fields the type does not know, e.g. `spec.foo`.
    pub unknown: Vec<String>,
}

/// Decodes `obj` as `group/version, Kind=kind`. Unknown kinds pass through unchanged.
/// A type error is returned as the decoder's message.
pub fn decode(
    group: &str,
    version: &str,
    kind: &str,
    obj: Map<String, Value>,
) -> Result<Decoded, String> {
    let Some(rt) = lookup(group, version, kind) else {
        return Ok(Decoded {
            object: obj,
            unknown: Vec::new(),
        });
    };
    let input = Value::Object(obj);
    let output = rt(input.clone()).map_err(|e| e.to_string())?;
    let mut unknown = Vec::new();
    diff(&input, &output, "", &mut unknown);
    match output {
        Value::Object(object) => Ok(Decoded { object, unknown }),
        _ => Err("decoded object is not a JSON object".into()),
    }
}

/// Collects paths present in `input` but absent from `output`. Nulls count as absent on
/// both sides (an explicit null is the same as an unset field).
fn diff(input: &Value, output: &Value, path: &str, out: &mut Vec<String>) {
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, v) in i {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match o.get(k) {
                    Some(ov) => diff(v, ov, &p, out),
                    None if v.is_null() => {}
                    // Empty objects/arrays may be dropped by the type's serializer without
                    // being unknown; only report fields the type could not have kept.
                    None if is_empty(v) => {}
                    None => out.push(p),
                }
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (idx, (iv, ov)) in i.iter().zip(o.iter()).enumerate() {
                diff(iv, ov, &format!("{path}[{idx}]"), out);
            }
        }
        _ => {}
    }
}

fn is_empty(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.values().all(|x| x.is_null() || is_empty(x)),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: &Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn unknown_fields_are_reported_and_dropped() {
        let d = decode(
            "apps",
            "v1",
            "Deployment",
            obj(&json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "x", "bogus": 1},
                "spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}}, "foo": "bar",
                         "template": {"spec": {"containers": [{"name": "c", "image": "i", "imagePullPolice": "x"}]}}}
            })),
        )
        .unwrap();
        assert_eq!(
            d.unknown,
            [
                "metadata.bogus",
                "spec.foo",
                "spec.template.spec.containers[0].imagePullPolice"
            ]
        );
        assert!(d.object["spec"].get("foo").is_none());
        assert_eq!(d.object["spec"]["replicas"], 2);
    }

    #[test]
    fn wrong_types_are_errors() {
        let err = decode(
            "",
            "v1",
            "ConfigMap",
            obj(&json!({"metadata": {"name": 5}})),
        )
        .unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
    }

    #[test]
    fn known_fields_survive_unchanged() {
        let input = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "labels": {"a": "b"}, "creationTimestamp": "2026-11-22T05:00:00Z"},
            "spec": {"containers": [{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "500m"}},
                      "ports": [{"containerPort": 80}]}]}
        });
        let d = decode("", "v1", "Pod", obj(&input)).unwrap();
        assert!(d.unknown.is_empty(), "{:?}", d.unknown);
        assert_eq!(Value::Object(d.object), input);
    }
}
