//! networking.k8s.io/v1 and discovery.k8s.io/v1 defaults (`pkg/apis/networking/v1/defaults.go`,
//! `pkg/apis/discovery/v1/defaults.go`).

use serde_json::{Value, json};

use super::{Obj, default_ptr, each_obj, ptr_obj, struct_obj};

/// Defaults a networking.k8s.io/v1 object of kind `kind`.
pub(super) fn networking(kind: &str, obj: &mut Obj) {
    match kind {
        "NetworkPolicy" => network_policy(obj),
        "IngressClass" => ingress_class(obj),
        _ => {}
    }
}

/// Defaults a discovery.k8s.io/v1 object of kind `kind`: an EndpointSlice's ports
/// (`SetDefaults_EndpointPort`: `name: ""`, `protocol: TCP`).
pub(super) fn discovery(kind: &str, obj: &mut Obj) {
    if kind == "EndpointSlice" {
        each_obj(obj, "ports", |p| {
            default_ptr(p, "name", json!(""));
            default_ptr(p, "protocol", json!("TCP"));
        });
    }
}

/// `SetDefaults_NetworkPolicy` (a policy without `policyTypes` is an Ingress policy, and an
/// Egress one too when it has egress rules) and `SetDefaults_NetworkPolicyPort` (`protocol:
/// TCP`) on every rule's ports.
fn network_policy(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    let empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    if empty(spec.get("policyTypes")) {
        let mut types = vec![json!("Ingress")];
        if !empty(spec.get("egress")) {
            types.push(json!("Egress"));
        }
        spec.insert("policyTypes".into(), Value::Array(types));
    }
    for rules in ["ingress", "egress"] {
        each_obj(spec, rules, |rule| {
            each_obj(rule, "ports", |p| default_ptr(p, "protocol", json!("TCP")));
        });
    }
}

/// `SetDefaults_IngressClass`: parameters without a scope are cluster-scoped.
fn ingress_class(obj: &mut Obj) {
    if let Some(parameters) = ptr_obj(obj, "spec").and_then(|s| ptr_obj(s, "parameters")) {
        default_ptr(parameters, "scope", json!("Cluster"));
    }
}
