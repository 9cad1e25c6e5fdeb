//! `pods/ephemeralcontainers` (GET/PUT/PATCH, what `kubectl debug` writes): a write changes a
//! pod's `spec.ephemeralContainers` and nothing else (upstream's
//! `podEphemeralContainersStrategy`); `validation::ephemeral` judges what changed. No kubelet
//! runs here, so nothing starts the container: attaching to it answers the clear 400 of
//! `node_proxy`.

use serde_json::{Map, Value};

use crate::registry::catalog::ResourceInfo;

/// Whether `r` is core/v1 pods.
pub(super) fn is(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "pods"
}

/// Upstream's `dropNonEphemeralContainerUpdates`: the stored pod with the written
/// ephemeral containers (and the written metadata's server-owned fields, which the generic
/// update rules already carried over).
pub(super) fn prepare_for_update(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    let ephemeral = new
        .get("spec")
        .and_then(|s| s.get("ephemeralContainers"))
        .cloned();
    *new = super::object::stored_with_managed_fields(new, old);
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        match ephemeral {
            Some(e) if !e.is_null() => spec.insert("ephemeralContainers".into(), e),
            _ => spec.remove("ephemeralContainers"),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_ephemeral_containers_change() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "b"}, "resourceVersion": "5"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}, "status": {"phase": "Running"}});
        let mut new = json!({"metadata": {"name": "p", "labels": {"changed": "yes"}},
            "spec": {"containers": [{"name": "c", "image": "changed"}],
                     "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]},
            "status": {"phase": "Failed"}});
        let (Some(old), Some(new_map)) = (old.as_object(), new.as_object_mut()) else {
            panic!("objects");
        };
        prepare_for_update(new_map, old);
        assert_eq!(new_map["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(new_map["spec"]["containers"][0]["image"], "x");
        assert_eq!(new_map["spec"]["ephemeralContainers"][0]["name"], "dbg");
        assert_eq!(new_map["status"]["phase"], "Running");
    }
}
