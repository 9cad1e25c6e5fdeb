//! storage.k8s.io/v1 defaults (`pkg/apis/storage/v1/defaults.go`), with v1.33's feature gates
//! (`CSIVolumeFSGroupPolicy` and `CSIInlineVolume` GA, `SELinuxMountReadWriteOncePod` beta and on).

use serde_json::{Value, json};

use super::{Obj, default_ptr, struct_obj};

/// Defaults a storage.k8s.io/v1 object of kind `kind`.
pub(super) fn apply(kind: &str, obj: &mut Obj) {
    match kind {
        "StorageClass" => {
            // `SetDefaults_StorageClass`.
            default_ptr(obj, "reclaimPolicy", json!("Delete"));
            default_ptr(obj, "volumeBindingMode", json!("Immediate"));
        }
        "CSIDriver" => csi_driver(obj),
        _ => {}
    }
}

/// `SetDefaults_CSIDriver`.
fn csi_driver(obj: &mut Obj) {
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    default_ptr(spec, "attachRequired", json!(true));
    default_ptr(spec, "podInfoOnMount", json!(false));
    default_ptr(spec, "storageCapacity", json!(false));
    default_ptr(spec, "fsGroupPolicy", json!("ReadWriteOnceWithFSType"));
    let no_modes = match spec.get("volumeLifecycleModes") {
        None | Some(Value::Null) => true,
        Some(Value::Array(a)) => a.is_empty(),
        Some(_) => false,
    };
    if no_modes {
        spec.insert("volumeLifecycleModes".into(), json!(["Persistent"]));
    }
    default_ptr(spec, "requiresRepublish", json!(false));
    default_ptr(spec, "seLinuxMount", json!(false));
}
