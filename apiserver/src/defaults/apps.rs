//! apps/v1 defaults (`pkg/apis/apps/v1/defaults.go` and its generated defaulters).

use serde_json::json;

use super::{Obj, default_ptr, default_str, each_obj, pod, ptr_obj, pvc, str_of, struct_obj};

/// Defaults an apps/v1 object of kind `kind`.
pub(super) fn apply(kind: &str, obj: &mut Obj) {
    let defaults: fn(&mut Obj) = match kind {
        "Deployment" => deployment,
        "ReplicaSet" => replica_set,
        "StatefulSet" => stateful_set,
        "DaemonSet" => daemon_set,
        _ => return,
    };
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    defaults(spec);
    if let Some(template) = struct_obj(spec, "template") {
        pod::template(template);
    }
}

/// `SetDefaults_ReplicaSet`.
fn replica_set(spec: &mut Obj) {
    default_ptr(spec, "replicas", json!(1));
}

/// `SetDefaults_Deployment`.
fn deployment(spec: &mut Obj) {
    default_ptr(spec, "replicas", json!(1));
    if let Some(strategy) = struct_obj(spec, "strategy") {
        default_str(strategy, "type", "RollingUpdate");
        if str_of(strategy, "type") == "RollingUpdate" {
            default_ptr(strategy, "rollingUpdate", json!({}));
            if let Some(rolling) = ptr_obj(strategy, "rollingUpdate") {
                default_ptr(rolling, "maxUnavailable", json!("25%"));
                default_ptr(rolling, "maxSurge", json!("25%"));
            }
        }
    }
    default_ptr(spec, "revisionHistoryLimit", json!(10));
    default_ptr(spec, "progressDeadlineSeconds", json!(600));
}

/// `SetDefaults_DaemonSet`.
fn daemon_set(spec: &mut Obj) {
    if let Some(strategy) = struct_obj(spec, "updateStrategy") {
        default_str(strategy, "type", "RollingUpdate");
        if str_of(strategy, "type") == "RollingUpdate" {
            default_ptr(strategy, "rollingUpdate", json!({}));
            if let Some(rolling) = ptr_obj(strategy, "rollingUpdate") {
                default_ptr(rolling, "maxUnavailable", json!(1));
                default_ptr(rolling, "maxSurge", json!(0));
            }
        }
    }
    default_ptr(spec, "revisionHistoryLimit", json!(10));
}

/// `SetDefaults_StatefulSet`, and the PersistentVolumeClaim defaults of the volume claim
/// templates (including their `status.phase: Pending`).
fn stateful_set(spec: &mut Obj) {
    default_str(spec, "podManagementPolicy", "OrderedReady");
    if let Some(strategy) = struct_obj(spec, "updateStrategy") {
        // `rollingUpdate` is only created along with a defaulted type: an explicit
        // `type: RollingUpdate` without it keeps it absent.
        if super::is_empty_str(strategy.get("type")) {
            strategy.insert("type".into(), json!("RollingUpdate"));
            default_ptr(strategy, "rollingUpdate", json!({}));
        }
        if str_of(strategy, "type") == "RollingUpdate"
            && let Some(rolling) = ptr_obj(strategy, "rollingUpdate")
        {
            default_ptr(rolling, "partition", json!(0));
        }
    }
    default_ptr(spec, "persistentVolumeClaimRetentionPolicy", json!({}));
    if let Some(policy) = ptr_obj(spec, "persistentVolumeClaimRetentionPolicy") {
        default_str(policy, "whenDeleted", "Retain");
        default_str(policy, "whenScaled", "Retain");
    }
    default_ptr(spec, "replicas", json!(1));
    default_ptr(spec, "revisionHistoryLimit", json!(10));
    each_obj(spec, "volumeClaimTemplates", pvc);
}
