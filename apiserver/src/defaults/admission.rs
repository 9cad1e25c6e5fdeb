//! admissionregistration.k8s.io/v1 defaults (`pkg/apis/admissionregistration/v1/defaults.go`):
//! webhook configurations and ValidatingAdmissionPolicies with their bindings.

use serde_json::json;

use super::{Obj, default_ptr, each_obj, ptr_obj};

/// Defaults an admissionregistration.k8s.io/v1 object of kind `kind`.
pub(super) fn apply(kind: &str, obj: &mut Obj) {
    match kind {
        "ValidatingWebhookConfiguration" => each_obj(obj, "webhooks", |w| webhook(w, false)),
        "MutatingWebhookConfiguration" => each_obj(obj, "webhooks", |w| webhook(w, true)),
        "ValidatingAdmissionPolicy" => {
            if let Some(spec) = ptr_obj(obj, "spec") {
                // `SetDefaults_ValidatingAdmissionPolicySpec`.
                default_ptr(spec, "failurePolicy", json!("Fail"));
                if let Some(m) = ptr_obj(spec, "matchConstraints") {
                    match_resources(m);
                }
            }
        }
        "ValidatingAdmissionPolicyBinding" => {
            if let Some(m) = ptr_obj(obj, "spec").and_then(|s| ptr_obj(s, "matchResources")) {
                match_resources(m);
            }
        }
        _ => {}
    }
}

/// `SetDefaults_ValidatingWebhook` / `SetDefaults_MutatingWebhook` with the nested rule and
/// service-reference defaults.
fn webhook(w: &mut Obj, mutating: bool) {
    default_ptr(w, "failurePolicy", json!("Fail"));
    default_ptr(w, "matchPolicy", json!("Equivalent"));
    default_ptr(w, "namespaceSelector", json!({}));
    default_ptr(w, "objectSelector", json!({}));
    default_ptr(w, "timeoutSeconds", json!(10));
    if mutating {
        default_ptr(w, "reinvocationPolicy", json!("Never"));
    }
    each_obj(w, "rules", rule);
    if let Some(service) = ptr_obj(w, "clientConfig").and_then(|c| ptr_obj(c, "service")) {
        // `SetDefaults_ServiceReference`.
        default_ptr(service, "port", json!(443));
    }
}

/// `SetDefaults_Rule`: `scope: "*"` (also on the rules embedded in a policy's resource rules).
fn rule(r: &mut Obj) {
    default_ptr(r, "scope", json!("*"));
}

/// `SetDefaults_MatchResources`.
fn match_resources(m: &mut Obj) {
    default_ptr(m, "matchPolicy", json!("Equivalent"));
    default_ptr(m, "namespaceSelector", json!({}));
    default_ptr(m, "objectSelector", json!({}));
    each_obj(m, "resourceRules", rule);
    each_obj(m, "excludeResourceRules", rule);
}
