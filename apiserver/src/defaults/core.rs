//! core/v1 defaults (`pkg/apis/core/v1/defaults.go` and its generated defaulters).
//!
//! ConfigMap, ResourceQuota and ServiceAccount have nothing visible to default:
//! `SetDefaults_ConfigMap` only turns a missing `data` into an empty map, which is not
//! serialized, and the resource lists of quotas are only rounded (see the module docs above).

use serde_json::{Value, json};

use super::{
    Obj, default_ptr, default_str, each_obj, is_empty_map, is_empty_str, is_unset, is_zero, pod,
    ptr_obj, pvc, str_of, struct_obj,
};

/// Defaults a core/v1 object of kind `kind`.
pub(super) fn apply(kind: &str, obj: &mut Obj) {
    match kind {
        "Pod" => pod::pod(obj),
        "PodTemplate" => {
            if let Some(template) = struct_obj(obj, "template") {
                pod::template(template);
            }
        }
        "ReplicationController" => replication_controller(obj),
        "Service" => service(obj),
        "Secret" => {
            merge_string_data(obj);
            default_str(obj, "type", "Opaque");
        }
        "Namespace" => namespace(obj),
        "Node" => node(obj),
        "PersistentVolume" => persistent_volume(obj),
        "PersistentVolumeClaim" => pvc(obj),
        "Endpoints" => each_obj(obj, "subsets", |subset| {
            each_obj(subset, "ports", |p| default_str(p, "protocol", "TCP"));
        }),
        "LimitRange" => {
            if let Some(spec) = struct_obj(obj, "spec") {
                each_obj(spec, "limits", limit_range_item);
            }
        }
        _ => {}
    }
}

/// Upstream's v1 → internal conversion of a Secret: each `stringData` value is written into
/// `data` (base64, replacing a `data` value of the same key) and `stringData` is dropped, so
/// it is neither stored nor answered. A non-string value is left for validation to refuse.
fn merge_string_data(obj: &mut Obj) {
    use base64::Engine as _;
    let Some(Value::Object(strings)) = obj.get("stringData") else {
        return;
    };
    if strings.values().any(|v| !v.is_string()) {
        return;
    }
    let encoded: Vec<(String, Value)> = strings
        .iter()
        .map(|(k, v)| {
            let text = v.as_str().unwrap_or_default();
            let b64 = base64::engine::general_purpose::STANDARD.encode(text.as_bytes());
            (k.clone(), Value::String(b64))
        })
        .collect();
    obj.remove("stringData");
    let data = obj
        .entry("data")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    if !data.is_object() {
        *data = Value::Object(serde_json::Map::new());
    }
    if let Some(data) = data.as_object_mut() {
        data.extend(encoded);
    }
}

/// The labels of `metadata` in `obj`, when set and not empty.
fn labels_of(obj: &Obj) -> Option<Obj> {
    obj.get("metadata")?
        .get("labels")?
        .as_object()
        .filter(|l| !l.is_empty())
        .cloned()
}

/// Sets the object's labels to `labels` when it has none (the RC and Job rule).
pub(super) fn default_labels(obj: &mut Obj, labels: Obj) {
    if let Some(meta) = struct_obj(obj, "metadata")
        && is_empty_map(meta.get("labels"))
    {
        meta.insert("labels".into(), Value::Object(labels));
    }
}

/// The labels of a pod template at `spec.template`, when set and not empty.
pub(super) fn template_labels(spec: &Obj) -> Option<Obj> {
    spec.get("template")
        .and_then(Value::as_object)
        .and_then(labels_of)
}

/// `SetDefaults_ReplicationController`: selector and labels from the template's labels,
/// `replicas: 1` (a `+default` marker), and the template (a pointer here) when present.
fn replication_controller(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    let labels = template_labels(spec);
    default_ptr(spec, "replicas", json!(1));
    if let Some(labels) = &labels
        && is_empty_map(spec.get("selector"))
    {
        spec.insert("selector".into(), Value::Object(labels.clone()));
    }
    if let Some(template) = ptr_obj(spec, "template") {
        pod::template(template);
    }
    if let Some(labels) = labels {
        default_labels(obj, labels);
    }
}

/// `SetDefaults_Service` (and the `+default="TCP"` marker of `ServicePort.protocol`).
fn service(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    default_str(spec, "sessionAffinity", "None");
    match str_of(spec, "sessionAffinity") {
        "None" => {
            spec.remove("sessionAffinityConfig");
        }
        "ClientIP" => {
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| c.get("timeoutSeconds"));
            if is_unset(timeout) {
                spec.insert(
                    "sessionAffinityConfig".into(),
                    json!({ "clientIP": { "timeoutSeconds": 10800 } }),
                );
            }
        }
        _ => {}
    }
    default_str(spec, "type", "ClusterIP");
    each_obj(spec, "ports", |p| {
        default_str(p, "protocol", "TCP");
        let target = p.get("targetPort");
        if is_zero(target) || is_empty_str(target) {
            let port = p.get("port").filter(|v| v.is_number()).cloned();
            p.insert("targetPort".into(), port.unwrap_or_else(|| json!(0)));
        }
    });
    let service_type = str_of(spec, "type").to_owned();
    let has_external_ips = spec
        .get("externalIPs")
        .and_then(Value::as_array)
        .is_some_and(|ips| !ips.is_empty());
    let externally_accessible = service_type == "LoadBalancer"
        || service_type == "NodePort"
        || (service_type == "ClusterIP" && has_external_ips);
    if externally_accessible {
        default_str(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(
        service_type.as_str(),
        "ClusterIP" | "NodePort" | "LoadBalancer"
    ) {
        default_ptr(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if service_type == "LoadBalancer" {
        default_ptr(spec, "allocateLoadBalancerNodePorts", json!(true));
        let ingress = ptr_obj(obj, "status")
            .and_then(|s| ptr_obj(s, "loadBalancer"))
            .and_then(|lb| lb.get_mut("ingress"))
            .and_then(Value::as_array_mut);
        for ing in ingress
            .into_iter()
            .flatten()
            .filter_map(Value::as_object_mut)
        {
            if !is_empty_str(ing.get("ip")) {
                default_ptr(ing, "ipMode", json!("VIP"));
            }
        }
    }
}

/// `SetDefaults_Namespace` (the `kubernetes.io/metadata.name` label, always set to the name)
/// and `SetDefaults_NamespaceStatus` (`phase: Active`).
fn namespace(obj: &mut Obj) {
    if let Some(meta) = ptr_obj(obj, "metadata") {
        let name = str_of(meta, "name").to_owned();
        if !name.is_empty() {
            if !meta.get("labels").is_some_and(Value::is_object) {
                meta.insert("labels".into(), json!({}));
            }
            if let Some(labels) = ptr_obj(meta, "labels") {
                labels.insert("kubernetes.io/metadata.name".into(), Value::String(name));
            }
        }
    }
    if let Some(status) = struct_obj(obj, "status") {
        default_str(status, "phase", "Active");
    }
}

/// `SetDefaults_NodeStatus`: allocatable defaults to capacity. (Nodes have no spec defaults.)
fn node(obj: &mut Obj) {
    let Some(status) = ptr_obj(obj, "status") else {
        return;
    };
    if is_unset(status.get("allocatable")) {
        let capacity = status
            .get("capacity")
            .and_then(Value::as_object)
            .filter(|c| !c.is_empty())
            .cloned();
        if let Some(capacity) = capacity {
            status.insert("allocatable".into(), Value::Object(capacity));
        }
    }
}

/// `SetDefaults_PersistentVolume` and the defaults of its volume source.
fn persistent_volume(obj: &mut Obj) {
    if let Some(status) = struct_obj(obj, "status") {
        default_str(status, "phase", "Pending");
    }
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    default_str(spec, "persistentVolumeReclaimPolicy", "Retain");
    default_ptr(spec, "volumeMode", json!("Filesystem"));
    if let Some(host_path) = ptr_obj(spec, "hostPath") {
        default_ptr(host_path, "type", json!(""));
    }
    pod::shared_volume_sources(spec);
}

/// `SetDefaults_LimitRangeItem`: for `Container` items, `default` from `max`, then
/// `defaultRequest` from `default` and then from `min`, for each resource not already set.
fn limit_range_item(item: &mut Obj) {
    if str_of(item, "type") != "Container" {
        return;
    }
    let list = |item: &Obj, key: &str| -> Obj {
        item.get(key)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let mut default = list(item, "default");
    for (name, q) in list(item, "max") {
        default.entry(name).or_insert(q);
    }
    let mut default_request = list(item, "defaultRequest");
    for (name, q) in default.iter().map(|(n, q)| (n.clone(), q.clone())) {
        default_request.entry(name).or_insert(q);
    }
    for (name, q) in list(item, "min") {
        default_request.entry(name).or_insert(q);
    }
    // Empty maps are not serialized; only write what upstream would show.
    for (key, value) in [("default", default), ("defaultRequest", default_request)] {
        if !value.is_empty() && item.get(key).is_none_or(Value::is_object) {
            item.insert(key.into(), Value::Object(value));
        }
    }
}
