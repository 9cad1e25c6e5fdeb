//! Defaults of the cluster-level groups: rbac.authorization.k8s.io/v1
//! (`pkg/apis/rbac/v1/defaults.go`), scheduling.k8s.io/v1 (`pkg/apis/scheduling/v1/defaults.go`),
//! flowcontrol.apiserver.k8s.io/v1 (`pkg/apis/flowcontrol/v1/defaults.go`), apiregistration.k8s.io/v1
//! and apiextensions.k8s.io/v1.

use serde_json::json;

use super::{Obj, default_num, default_ptr, default_str, each_obj, ptr_obj, str_of, struct_obj};

/// The RBAC API group: the default `apiGroup` of role references and user/group subjects.
const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// Defaults an rbac.authorization.k8s.io/v1 object of kind `kind`.
pub(super) fn rbac(kind: &str, obj: &mut Obj) {
    if !matches!(kind, "RoleBinding" | "ClusterRoleBinding") {
        return;
    }
    // `SetDefaults_RoleBinding` / `SetDefaults_ClusterRoleBinding`.
    if let Some(role_ref) = struct_obj(obj, "roleRef") {
        default_str(role_ref, "apiGroup", RBAC_GROUP);
    }
    // `SetDefaults_Subject` (a ServiceAccount's group stays "").
    each_obj(obj, "subjects", |s| {
        if matches!(str_of(s, "kind"), "User" | "Group") {
            default_str(s, "apiGroup", RBAC_GROUP);
        }
    });
}

/// Defaults a scheduling.k8s.io/v1 object: a PriorityClass preempts lower priorities
/// (`SetDefaults_PriorityClass`).
pub(super) fn scheduling(kind: &str, obj: &mut Obj) {
    if kind == "PriorityClass" {
        default_ptr(obj, "preemptionPolicy", json!("PreemptLowerPriority"));
    }
}

/// Defaults a flowcontrol.apiserver.k8s.io/v1 object of kind `kind`.
pub(super) fn flowcontrol(kind: &str, obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    match kind {
        // `SetDefaults_FlowSchemaSpec`.
        "FlowSchema" => default_num(spec, "matchingPrecedence", 1000),
        "PriorityLevelConfiguration" => {
            if let Some(limited) = ptr_obj(spec, "limited") {
                // `SetDefaults_LimitedPriorityLevelConfiguration`.
                default_ptr(limited, "nominalConcurrencyShares", json!(30));
                default_ptr(limited, "lendablePercent", json!(0));
                if let Some(queuing) =
                    ptr_obj(limited, "limitResponse").and_then(|r| ptr_obj(r, "queuing"))
                {
                    // `SetDefaults_QueuingConfiguration`.
                    default_num(queuing, "handSize", 8);
                    default_num(queuing, "queues", 64);
                    default_num(queuing, "queueLengthLimit", 50);
                }
            }
            if let Some(exempt) = ptr_obj(spec, "exempt") {
                // `SetDefaults_ExemptPriorityLevelConfiguration`.
                default_ptr(exempt, "nominalConcurrencyShares", json!(0));
                default_ptr(exempt, "lendablePercent", json!(0));
            }
        }
        _ => {}
    }
}

/// Defaults an apiregistration.k8s.io/v1 APIService: its service's port is 443
/// (`SetDefaults_ServiceReference` of kube-aggregator).
pub(super) fn apiregistration(kind: &str, obj: &mut Obj) {
    if kind != "APIService" {
        return;
    }
    if let Some(service) = ptr_obj(obj, "spec").and_then(|s| ptr_obj(s, "service")) {
        default_ptr(service, "port", json!(443));
    }
}

/// Defaults an apiextensions.k8s.io/v1 CustomResourceDefinition
/// (`SetDefaults_CustomResourceDefinition` of apiextensions-apiserver): singular and list kind
/// from the kind, `conversion: {strategy: None}`, a webhook service's port 443, and the storage
/// version as the first stored version.
pub(super) fn apiextensions(kind: &str, obj: &mut Obj) {
    if kind != "CustomResourceDefinition" {
        return;
    }
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    if let Some(names) = struct_obj(spec, "names") {
        let kind = str_of(names, "kind").to_owned();
        default_str(names, "singular", &kind.to_lowercase());
        if !kind.is_empty() {
            default_str(names, "listKind", &format!("{kind}List"));
        }
    }
    default_ptr(spec, "conversion", json!({ "strategy": "None" }));
    if let Some(service) = ptr_obj(spec, "conversion")
        .and_then(|c| ptr_obj(c, "webhook"))
        .and_then(|w| ptr_obj(w, "clientConfig"))
        .and_then(|c| ptr_obj(c, "service"))
    {
        default_ptr(service, "port", json!(443));
    }
    let storage_version = spec
        .get("versions")
        .and_then(serde_json::Value::as_array)
        .and_then(|vs| {
            vs.iter()
                .filter_map(serde_json::Value::as_object)
                .find(|v| v.get("storage").and_then(serde_json::Value::as_bool) == Some(true))
        })
        .map(|v| str_of(v, "name").to_owned());
    if let (Some(version), Some(status)) = (storage_version, struct_obj(obj, "status")) {
        let none = match status.get("storedVersions") {
            None | Some(serde_json::Value::Null) => true,
            Some(serde_json::Value::Array(a)) => a.is_empty(),
            Some(_) => false,
        };
        if none {
            status.insert("storedVersions".into(), json!([version]));
        }
    }
}
