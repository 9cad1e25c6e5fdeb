//! `StorageObjectInUseProtection` (upstream's `plugin/pkg/admission/storage/
//! storageobjectinuseprotection`): a new PersistentVolumeClaim gets the
//! `kubernetes.io/pvc-protection` finalizer, so it is not removed while a pod uses it (the
//! `persistentvolumeclaim-protection` controller takes it off once no pod does), and a new
//! PersistentVolume gets `kubernetes.io/pv-protection`, so it is not removed while bound (the
//! `persistentvolume-protection` controller takes it off once it is not).

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation};
use crate::error::Result;

/// The plugin.
pub struct StorageObjectInUseProtection;

/// The finalizer the plugin adds to claims.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";
/// The finalizer the plugin adds to volumes.
pub const PV_PROTECTION: &str = "kubernetes.io/pv-protection";

impl MutatingAdmission for StorageObjectInUseProtection {
    fn name(&self) -> &'static str {
        "StorageObjectInUseProtection"
    }

    fn admit(
        &self,
        _lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if !a.subresource.is_empty() || !matches!(a.operation, Operation::Create) {
            return Ok(());
        }
        let finalizer = if a.is_core("persistentvolumeclaims") {
            PVC_PROTECTION
        } else if a.is_core("persistentvolumes") {
            PV_PROTECTION
        } else {
            return Ok(());
        };
        if let Some(obj) = obj {
            add_finalizer(obj, finalizer);
        }
        Ok(())
    }
}

/// Appends `finalizer` to `obj`'s `metadata.finalizers` unless it is there.
fn add_finalizer(obj: &mut Map<String, Value>, finalizer: &str) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let list = meta.entry("finalizers").or_insert_with(|| json!([]));
    if list.is_null() {
        *list = json!([]);
    }
    if let Some(items) = list.as_array_mut()
        && !items.iter().any(|f| f.as_str() == Some(finalizer))
    {
        items.push(json!(finalizer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_finalizer_is_added_once() {
        let mut pvc = json!({"metadata": {"name": "d", "finalizers": ["x"]}})
            .as_object()
            .cloned()
            .unwrap_or_default();
        add_finalizer(&mut pvc, PVC_PROTECTION);
        add_finalizer(&mut pvc, PVC_PROTECTION);
        assert_eq!(
            pvc["metadata"]["finalizers"],
            json!(["x", "kubernetes.io/pvc-protection"])
        );
    }
}
