//! `StorageObjectInUseProtection` (upstream's `plugin/pkg/admission/storage/
//! storageobjectinuseprotection`): a new PersistentVolumeClaim gets the
//! `kubernetes.io/pvc-protection` finalizer, so it is not removed while a pod uses it; the
//! `pvc-protection` controller takes the finalizer off once no pod does. (PersistentVolumes'
//! `kubernetes.io/pv-protection` is not added: no pv-protection controller runs yet.)

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation};
use crate::error::Result;

/// The plugin.
pub struct StorageObjectInUseProtection;

/// The finalizer the plugin adds to claims.
pub const PVC_PROTECTION: &str = "kubernetes.io/pvc-protection";

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
        if !a.is_core("persistentvolumeclaims")
            || !a.subresource.is_empty()
            || !matches!(a.operation, Operation::Create)
        {
            return Ok(());
        }
        if let Some(obj) = obj {
            add_finalizer(obj, PVC_PROTECTION);
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
