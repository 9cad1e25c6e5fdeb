//! Where the built-in kinds keep quantities, and their canonicalization when an object is
//! written (create, update, patch).
//!
//! Upstream parses every `resource.Quantity` while decoding the request body, so a malformed
//! one is a 400 (`<Kind> in version "<v>" cannot be handled as a <Kind>: <parse error>`) and
//! the object is stored with each quantity in the form `Quantity.String()` gives. On top of
//! that, the core/v1 defaulters (`SetDefaults_ResourceList`, called by the generated
//! defaulters of core, apps and batch for every `ResourceList` field) round resource-list
//! values up to milli precision. Kinds whose API packages have no such defaulters (node/v1
//! `RuntimeClass`, storage/v1 `CSIStorageCapacity`, autoscaling/v2) only get the canonical form.
//!
//! Paths below are dotted JSON field names; `name[]` means "each element of the array
//! `name`". Missing fields and fields of another JSON type are skipped: typed decoding
//! (`registry::typed`) has already rejected wrong types for these kinds.

use serde_json::{Map, Value};

use super::{Quantity, QuantityError};
use crate::error::ApiError;
use crate::registry::catalog::ResourceInfo;

/// What a path leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leaf {
    /// A `ResourceList` (name → quantity) that upstream's defaulters round up to milli
    /// precision.
    List,
    /// A `ResourceList` no defaulter touches (only canonicalized).
    PlainList,
    /// A single quantity.
    One,
}

type Rules = &'static [(&'static str, Leaf)];

/// A container (regular, init or ephemeral).
const CONTAINER: Rules = &[
    ("resources.limits", Leaf::List),
    ("resources.requests", Leaf::List),
    ("env[].valueFrom.resourceFieldRef.divisor", Leaf::One),
];

/// A pod spec, apart from its containers.
const POD_SPEC: Rules = &[
    ("overhead", Leaf::List),
    ("resources.limits", Leaf::List),
    ("resources.requests", Leaf::List),
    ("volumes[].emptyDir.sizeLimit", Leaf::One),
    (
        "volumes[].downwardAPI.items[].resourceFieldRef.divisor",
        Leaf::One,
    ),
    (
        "volumes[].projected.sources[].downwardAPI.items[].resourceFieldRef.divisor",
        Leaf::One,
    ),
    (
        "volumes[].ephemeral.volumeClaimTemplate.spec.resources.limits",
        Leaf::List,
    ),
    (
        "volumes[].ephemeral.volumeClaimTemplate.spec.resources.requests",
        Leaf::List,
    ),
];

/// The container lists of a pod spec.
const CONTAINER_LISTS: [&str; 3] = ["containers[]", "initContainers[]", "ephemeralContainers[]"];

/// A container status (in a pod's status).
const CONTAINER_STATUS: Rules = &[
    ("allocatedResources", Leaf::List),
    ("resources.limits", Leaf::List),
    ("resources.requests", Leaf::List),
];

/// The container status lists of a pod status.
const CONTAINER_STATUS_LISTS: [&str; 3] = [
    "containerStatuses[]",
    "initContainerStatuses[]",
    "ephemeralContainerStatuses[]",
];

/// A whole PersistentVolumeClaim (also a StatefulSet's `volumeClaimTemplates[]`).
const PVC: Rules = &[
    ("spec.resources.limits", Leaf::List),
    ("spec.resources.requests", Leaf::List),
    ("status.capacity", Leaf::List),
    ("status.allocatedResources", Leaf::List),
];

const NODE: Rules = &[
    ("status.capacity", Leaf::List),
    ("status.allocatable", Leaf::List),
];

const PERSISTENT_VOLUME: Rules = &[("spec.capacity", Leaf::List)];

const RESOURCE_QUOTA: Rules = &[
    ("spec.hard", Leaf::List),
    ("status.hard", Leaf::List),
    ("status.used", Leaf::List),
];

const LIMIT_RANGE: Rules = &[
    ("spec.limits[].max", Leaf::List),
    ("spec.limits[].min", Leaf::List),
    ("spec.limits[].default", Leaf::List),
    ("spec.limits[].defaultRequest", Leaf::List),
    ("spec.limits[].maxLimitRequestRatio", Leaf::List),
];

const RUNTIME_CLASS: Rules = &[("overhead.podFixed", Leaf::PlainList)];

const CSI_STORAGE_CAPACITY: Rules = &[("capacity", Leaf::One), ("maximumVolumeSize", Leaf::One)];

/// autoscaling/v2 HorizontalPodAutoscaler: metric targets, current values and tolerances.
const HPA_V2: Rules = &[
    ("spec.metrics[].object.target.value", Leaf::One),
    ("spec.metrics[].object.target.averageValue", Leaf::One),
    ("spec.metrics[].pods.target.value", Leaf::One),
    ("spec.metrics[].pods.target.averageValue", Leaf::One),
    ("spec.metrics[].resource.target.value", Leaf::One),
    ("spec.metrics[].resource.target.averageValue", Leaf::One),
    ("spec.metrics[].containerResource.target.value", Leaf::One),
    (
        "spec.metrics[].containerResource.target.averageValue",
        Leaf::One,
    ),
    ("spec.metrics[].external.target.value", Leaf::One),
    ("spec.metrics[].external.target.averageValue", Leaf::One),
    ("spec.behavior.scaleUp.tolerance", Leaf::One),
    ("spec.behavior.scaleDown.tolerance", Leaf::One),
    ("status.currentMetrics[].object.current.value", Leaf::One),
    (
        "status.currentMetrics[].object.current.averageValue",
        Leaf::One,
    ),
    ("status.currentMetrics[].pods.current.value", Leaf::One),
    (
        "status.currentMetrics[].pods.current.averageValue",
        Leaf::One,
    ),
    ("status.currentMetrics[].resource.current.value", Leaf::One),
    (
        "status.currentMetrics[].resource.current.averageValue",
        Leaf::One,
    ),
    (
        "status.currentMetrics[].containerResource.current.value",
        Leaf::One,
    ),
    (
        "status.currentMetrics[].containerResource.current.averageValue",
        Leaf::One,
    ),
    ("status.currentMetrics[].external.current.value", Leaf::One),
    (
        "status.currentMetrics[].external.current.averageValue",
        Leaf::One,
    ),
];

/// Parses every quantity of an object of resource `r` (a built-in kind) and rewrites it in
/// upstream's canonical form, in place; call after defaulting, before validation.
///
/// A malformed quantity is upstream's decode error: `400 BadRequest` with
/// `<Kind> in version "<version>" cannot be handled as a <Kind>: <reason>`. Kinds without
/// quantities are left unchanged.
pub fn canonicalize(r: &ResourceInfo, obj: &mut Map<String, Value>) -> Result<(), ApiError> {
    let mut root = Value::Object(std::mem::take(obj));
    let result = walk(r.group, r.version, r.kind, &mut root);
    if let Value::Object(m) = root {
        *obj = m;
    }
    result.map_err(|e| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            r.kind, r.version, r.kind
        ))
    })
}

/// Canonicalizes the quantities of an object of `group/version, Kind=kind`.
fn walk(group: &str, version: &str, kind: &str, obj: &mut Value) -> Result<(), QuantityError> {
    match (group, version, kind) {
        ("", "v1", "Pod") => {
            pod_spec(obj, "spec")?;
            for list in CONTAINER_STATUS_LISTS {
                rules_at(obj, &format!("status.{list}"), CONTAINER_STATUS)?;
            }
            Ok(())
        }
        ("", "v1", "PodTemplate") => pod_spec(obj, "template.spec"),
        ("", "v1", "ReplicationController")
        | ("apps", "v1", "Deployment" | "ReplicaSet" | "DaemonSet")
        | ("batch", "v1", "Job") => pod_spec(obj, "spec.template.spec"),
        ("apps", "v1", "StatefulSet") => {
            pod_spec(obj, "spec.template.spec")?;
            rules_at(obj, "spec.volumeClaimTemplates[]", PVC)
        }
        ("batch", "v1", "CronJob") => pod_spec(obj, "spec.jobTemplate.spec.template.spec"),
        ("", "v1", "Node") => rules_at(obj, "", NODE),
        ("", "v1", "PersistentVolume") => rules_at(obj, "", PERSISTENT_VOLUME),
        ("", "v1", "PersistentVolumeClaim") => rules_at(obj, "", PVC),
        ("", "v1", "ResourceQuota") => rules_at(obj, "", RESOURCE_QUOTA),
        ("", "v1", "LimitRange") => rules_at(obj, "", LIMIT_RANGE),
        ("node.k8s.io", "v1", "RuntimeClass") => rules_at(obj, "", RUNTIME_CLASS),
        ("storage.k8s.io", "v1", "CSIStorageCapacity") => rules_at(obj, "", CSI_STORAGE_CAPACITY),
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => rules_at(obj, "", HPA_V2),
        _ => Ok(()),
    }
}

/// The quantities of the pod spec at `path`, its containers included.
fn pod_spec(obj: &mut Value, path: &str) -> Result<(), QuantityError> {
    rules_at(obj, path, POD_SPEC)?;
    for list in CONTAINER_LISTS {
        rules_at(obj, &format!("{path}.{list}"), CONTAINER)?;
    }
    Ok(())
}

/// Applies `rules` (paths relative to `path`) to every value at `path`.
fn rules_at(obj: &mut Value, path: &str, rules: Rules) -> Result<(), QuantityError> {
    visit(obj, path, &mut |base| {
        for &(rel, leaf) in rules {
            visit(base, rel, &mut |v| apply(v, leaf))?;
        }
        Ok(())
    })
}

/// Calls `f` on every value `path` reaches from `v` (`v` itself for the empty path).
fn visit(
    v: &mut Value,
    path: &str,
    f: &mut dyn FnMut(&mut Value) -> Result<(), QuantityError>,
) -> Result<(), QuantityError> {
    if path.is_empty() {
        return f(v);
    }
    let (segment, rest) = path.split_once('.').unwrap_or((path, ""));
    let (key, each) = match segment.strip_suffix("[]") {
        Some(key) => (key, true),
        None => (segment, false),
    };
    let Some(child) = v.as_object_mut().and_then(|m| m.get_mut(key)) else {
        return Ok(());
    };
    if !each {
        return visit(child, rest, f);
    }
    if let Some(items) = child.as_array_mut() {
        for item in items {
            visit(item, rest, f)?;
        }
    }
    Ok(())
}

/// Canonicalizes the quantity or resource list `v`.
fn apply(v: &mut Value, leaf: Leaf) -> Result<(), QuantityError> {
    match leaf {
        Leaf::One => {
            if !v.is_null() {
                *v = Value::String(Quantity::from_json(v)?.to_string());
            }
        }
        Leaf::List | Leaf::PlainList => {
            if let Some(list) = v.as_object_mut() {
                for value in list.values_mut() {
                    let mut q = Quantity::from_json(value)?;
                    if leaf == Leaf::List {
                        q.round_up_milli();
                    }
                    *value = Value::String(q.to_string());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn walked(group: &str, version: &str, kind: &str, mut v: Value) -> Value {
        walk(group, version, kind, &mut v).unwrap();
        v
    }

    #[test]
    fn pod_quantities_everywhere_are_canonical() {
        let pod = walked(
            "",
            "v1",
            "Pod",
            json!({
                "spec": {
                    "containers": [{
                        "name": "c",
                        "resources": {
                            "requests": {"cpu": "0.5", "memory": "1.5Gi"},
                            "limits": {"cpu": "1000m", "memory": 2147483648_u64, "x/y": 1.5},
                            "claims": [{"name": "gpu"}]
                        },
                        "env": [
                            {"name": "A", "value": "0.5"},
                            {"name": "B", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "0.001"}}}
                        ]
                    }],
                    "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "0.0001"}}}],
                    "ephemeralContainers": [{"name": "e", "resources": {"limits": {"memory": "1024Mi"}}}],
                    "overhead": {"cpu": "250m", "memory": "120000000"},
                    "resources": {"limits": {"cpu": "2000m"}},
                    "volumes": [
                        {"name": "a", "emptyDir": {"sizeLimit": "0.0001"}},
                        {"name": "b", "downwardAPI": {"items": [{"path": "p", "resourceFieldRef": {"resource": "limits.memory", "divisor": "1024Ki"}}]}},
                        {"name": "c", "projected": {"sources": [{"downwardAPI": {"items": [{"path": "p", "resourceFieldRef": {"resource": "requests.cpu", "divisor": "1000m"}}]}}]}},
                        {"name": "d", "ephemeral": {"volumeClaimTemplate": {"spec": {"resources": {"requests": {"storage": "1.5Gi"}}}}}}
                    ]
                },
                "status": {
                    "containerStatuses": [{"name": "c", "allocatedResources": {"cpu": "0.5"}, "resources": {"requests": {"cpu": "1000m"}}}]
                }
            }),
        );
        let c = &pod["spec"]["containers"][0];
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "500m", "memory": "1536Mi"})
        );
        assert_eq!(
            c["resources"]["limits"],
            json!({"cpu": "1", "memory": "2147483648", "x/y": "1500m"})
        );
        assert_eq!(c["resources"]["claims"], json!([{"name": "gpu"}]));
        assert_eq!(c["env"][0]["value"], "0.5", "env values are not quantities");
        assert_eq!(
            c["env"][1]["valueFrom"]["resourceFieldRef"]["divisor"],
            "1m"
        );
        assert_eq!(
            pod["spec"]["initContainers"][0]["resources"]["requests"]["cpu"], "1m",
            "resource lists are rounded up to milli precision"
        );
        assert_eq!(
            pod["spec"]["ephemeralContainers"][0]["resources"]["limits"]["memory"],
            "1Gi"
        );
        assert_eq!(
            pod["spec"]["overhead"],
            json!({"cpu": "250m", "memory": "120M"})
        );
        assert_eq!(pod["spec"]["resources"]["limits"]["cpu"], "2");
        let vols = &pod["spec"]["volumes"];
        assert_eq!(
            vols[0]["emptyDir"]["sizeLimit"], "100u",
            "single quantities keep nano precision"
        );
        assert_eq!(
            vols[1]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"],
            "1Mi"
        );
        assert_eq!(
            vols[2]["projected"]["sources"][0]["downwardAPI"]["items"][0]["resourceFieldRef"]["divisor"],
            "1"
        );
        assert_eq!(
            vols[3]["ephemeral"]["volumeClaimTemplate"]["spec"]["resources"]["requests"]["storage"],
            "1536Mi"
        );
        let st = &pod["status"]["containerStatuses"][0];
        assert_eq!(st["allocatedResources"]["cpu"], "500m");
        assert_eq!(st["resources"]["requests"]["cpu"], "1");
    }

    #[test]
    fn pod_templates_of_every_workload_are_walked() {
        let template = || json!({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "0.25"}}}]}});
        let cases: [(&str, &str, Value, &[&str]); 7] = [
            (
                "",
                "PodTemplate",
                json!({"template": template()}),
                &["template"],
            ),
            (
                "",
                "ReplicationController",
                json!({"spec": {"template": template()}}),
                &["spec", "template"],
            ),
            (
                "apps",
                "Deployment",
                json!({"spec": {"template": template()}}),
                &["spec", "template"],
            ),
            (
                "apps",
                "ReplicaSet",
                json!({"spec": {"template": template()}}),
                &["spec", "template"],
            ),
            (
                "apps",
                "DaemonSet",
                json!({"spec": {"template": template()}}),
                &["spec", "template"],
            ),
            (
                "batch",
                "Job",
                json!({"spec": {"template": template()}}),
                &["spec", "template"],
            ),
            (
                "batch",
                "CronJob",
                json!({"spec": {"jobTemplate": {"spec": {"template": template()}}}}),
                &["spec", "jobTemplate", "spec", "template"],
            ),
        ];
        for (group, kind, obj, path) in cases {
            let out = walked(group, "v1", kind, obj);
            let mut t = &out;
            for key in path {
                t = &t[*key];
            }
            assert_eq!(
                t["spec"]["containers"][0]["resources"]["requests"]["cpu"], "250m",
                "{kind}"
            );
        }
        let sts = walked(
            "apps",
            "v1",
            "StatefulSet",
            json!({"spec": {"template": template(), "volumeClaimTemplates": [
                {"spec": {"resources": {"requests": {"storage": "0.5Gi"}}}, "status": {"capacity": {"storage": "1024Mi"}}}
            ]}}),
        );
        assert_eq!(
            sts["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "250m"
        );
        let pvc = &sts["spec"]["volumeClaimTemplates"][0];
        assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "512Mi");
        assert_eq!(pvc["status"]["capacity"]["storage"], "1Gi");
    }

    #[test]
    fn other_kinds_with_quantities() {
        let node = walked(
            "",
            "v1",
            "Node",
            json!({"status": {"capacity": {"cpu": "4", "memory": "8192Mi", "pods": "110"},
                              "allocatable": {"cpu": "3.5", "ephemeral-storage": "1000000000"}}}),
        );
        assert_eq!(
            node["status"],
            json!({"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
                   "allocatable": {"cpu": "3500m", "ephemeral-storage": "1G"}})
        );
        let pv = walked(
            "",
            "v1",
            "PersistentVolume",
            json!({"spec": {"capacity": {"storage": "1024Gi"}}}),
        );
        assert_eq!(pv["spec"]["capacity"]["storage"], "1Ti");
        let pvc = walked(
            "",
            "v1",
            "PersistentVolumeClaim",
            json!({"spec": {"resources": {"requests": {"storage": "1.5Gi"}, "limits": {"storage": "2048Mi"}}},
                   "status": {"capacity": {"storage": "2Gi"}, "allocatedResources": {"storage": "1536Mi"}}}),
        );
        assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "1536Mi");
        assert_eq!(pvc["spec"]["resources"]["limits"]["storage"], "2Gi");
        assert_eq!(pvc["status"]["allocatedResources"]["storage"], "1536Mi");
        let quota = walked(
            "",
            "v1",
            "ResourceQuota",
            json!({"spec": {"hard": {"pods": "10", "requests.cpu": "1000m"}},
                   "status": {"hard": {"requests.memory": "1000Mi"}, "used": {"requests.cpu": "0"}}}),
        );
        assert_eq!(
            quota["spec"]["hard"],
            json!({"pods": "10", "requests.cpu": "1"})
        );
        assert_eq!(quota["status"]["hard"]["requests.memory"], "1000Mi");
        assert_eq!(quota["status"]["used"]["requests.cpu"], "0");
        let lr = walked(
            "",
            "v1",
            "LimitRange",
            json!({"spec": {"limits": [{"type": "Container",
                "max": {"cpu": "2000m"}, "min": {"cpu": "0.1"}, "default": {"memory": "0.5Gi"},
                "defaultRequest": {"cpu": "100m"}, "maxLimitRequestRatio": {"cpu": "1.5"}}]}}),
        );
        assert_eq!(
            lr["spec"]["limits"][0],
            json!({"type": "Container", "max": {"cpu": "2"}, "min": {"cpu": "100m"},
                   "default": {"memory": "512Mi"}, "defaultRequest": {"cpu": "100m"},
                   "maxLimitRequestRatio": {"cpu": "1500m"}})
        );
        // No defaulter in node/v1: no milli rounding.
        let rc = walked(
            "node.k8s.io",
            "v1",
            "RuntimeClass",
            json!({"handler": "h", "overhead": {"podFixed": {"cpu": "0.0001", "memory": "1024Ki"}}}),
        );
        assert_eq!(
            rc["overhead"]["podFixed"],
            json!({"cpu": "100u", "memory": "1Mi"})
        );
        let cap = walked(
            "storage.k8s.io",
            "v1",
            "CSIStorageCapacity",
            json!({"storageClassName": "s", "capacity": "1024Mi", "maximumVolumeSize": 1000}),
        );
        assert_eq!(cap["capacity"], "1Gi");
        assert_eq!(cap["maximumVolumeSize"], "1k");
        let hpa = walked(
            "autoscaling",
            "v2",
            "HorizontalPodAutoscaler",
            json!({"spec": {"metrics": [
                    {"type": "Pods", "pods": {"metric": {"name": "m"}, "target": {"type": "AverageValue", "averageValue": "1000m"}}},
                    {"type": "External", "external": {"metric": {"name": "q"}, "target": {"type": "Value", "value": "0.5"}}}],
                   "behavior": {"scaleUp": {"tolerance": "0.05"}}},
                   "status": {"currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageValue": "0.25"}}}]}}),
        );
        assert_eq!(
            hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"],
            "1"
        );
        assert_eq!(
            hpa["spec"]["metrics"][1]["external"]["target"]["value"],
            "500m"
        );
        assert_eq!(hpa["spec"]["behavior"]["scaleUp"]["tolerance"], "50m");
        assert_eq!(
            hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageValue"],
            "250m"
        );
    }

    #[test]
    fn kinds_without_quantities_are_untouched() {
        let cm = json!({"data": {"cpu": "0.5"}});
        assert_eq!(walked("", "v1", "ConfigMap", cm.clone()), cm);
        let hpa1 = json!({"spec": {"targetCPUUtilizationPercentage": 50}});
        assert_eq!(
            walked("autoscaling", "v1", "HorizontalPodAutoscaler", hpa1.clone()),
            hpa1
        );
    }

    #[test]
    fn nulls_and_wrong_shapes() {
        // A null inside a resource list is upstream's zero quantity; a null pointer field
        // stays null; a list that is not an object is left for typed decoding to judge.
        let pod = walked(
            "",
            "v1",
            "Pod",
            json!({"spec": {"containers": [{"name": "c", "resources": {"limits": {"cpu": null}, "requests": "x"}}],
                            "volumes": [{"name": "v", "emptyDir": {"sizeLimit": null}}]}}),
        );
        let c = &pod["spec"]["containers"][0]["resources"];
        assert_eq!(c["limits"]["cpu"], "0");
        assert_eq!(c["requests"], "x");
        assert!(pod["spec"]["volumes"][0]["emptyDir"]["sizeLimit"].is_null());
    }

    fn info(group: &'static str, kind: &'static str) -> &'static ResourceInfo {
        crate::registry::catalog::BUILTIN
            .iter()
            .find(|r| r.group == group && r.kind == kind)
            .unwrap()
    }

    #[test]
    fn malformed_quantities_are_upstreams_decode_errors() {
        let mut pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "0.5"}, "limits": {"cpu": "1 core"}}}]}})
        .as_object()
        .cloned()
        .unwrap();
        let err = canonicalize(info("", "Pod"), &mut pod).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Pod in version \"v1\" cannot be handled as a Pod: quantities must match the regular \
             expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
        assert!(matches!(err, ApiError::BadRequest(_)));
        let mut dep = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "resources": {"limits": {"memory": "32MMi"}}}]}}}})
        .as_object()
        .cloned()
        .unwrap();
        let err = canonicalize(info("apps", "Deployment"), &mut dep).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Deployment in version \"v1\" cannot be handled as a Deployment: unable to parse quantity's suffix"
        );
        let mut node = json!({"status": {"capacity": {"cpu": true}}})
            .as_object()
            .cloned()
            .unwrap();
        assert!(canonicalize(info("", "Node"), &mut node).is_err());
        let mut ok = json!({"metadata": {"name": "n"}, "status": {"capacity": {"cpu": " 2000m "}}})
            .as_object()
            .cloned()
            .unwrap();
        canonicalize(info("", "Node"), &mut ok).unwrap();
        assert_eq!(ok["status"]["capacity"]["cpu"], "2");
        assert_eq!(
            ok["metadata"]["name"], "n",
            "the rest of the object is kept"
        );
    }
}
