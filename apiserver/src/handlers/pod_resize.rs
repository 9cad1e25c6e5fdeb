//! `pods/resize` (GET/PUT/PATCH, what `kubectl patch --subresource resize` writes): a write
//! changes the `resources` and `resizePolicy` of a pod's containers and init containers and
//! nothing else (upstream's `podResizeStrategy`); `validation::pod_resize` judges the change.
//! The node the pod runs on actuates it and reports the new resources in the status.

use serde_json::{Map, Value};

/// Upstream's `dropNonResizeUpdates`: the stored pod with the written containers' resources
/// and resize policies (and the written metadata's managedFields entry). When containers were
/// added, removed, renamed or reordered the written list stays as it is, for validation to
/// refuse.
pub(super) fn prepare_for_update(new: &mut Map<String, Value>, old: &Map<String, Value>) {
    let written = |key: &str| new.get("spec").and_then(|s| s.get(key)).cloned();
    let containers = merged(written("containers"), old, "containers");
    let inits = merged(written("initContainers"), old, "initContainers");
    *new = super::object::stored_with_managed_fields(new, old);
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        for (key, list) in [("containers", containers), ("initContainers", inits)] {
            match list {
                Some(l) => spec.insert(key.into(), l),
                None => spec.remove(key),
            };
        }
    }
}

/// The stored `key` list with each written container's `resources` and `resizePolicy`, or the
/// written list itself when the two do not pair up by position and name.
fn merged(written: Option<Value>, old: &Map<String, Value>, key: &str) -> Option<Value> {
    let stored = old.get("spec").and_then(|s| s.get(key)).cloned();
    let (Some(Value::Array(new_list)), Some(Value::Array(mut old_list))) =
        (written.clone(), stored.clone())
    else {
        return match (&written, &stored) {
            // Nothing written where the stored pod has containers (or the reverse):
            // validation sees the difference.
            (None | Some(Value::Null), None) => None,
            _ => written.filter(|w| !w.is_null()),
        };
    };
    if new_list.len() != old_list.len() {
        return Some(Value::Array(new_list));
    }
    for (after, before) in new_list.iter().zip(old_list.iter_mut()) {
        let Some(before) = before
            .as_object_mut()
            .filter(|b| b.get("name") == after.get("name"))
        else {
            return Some(Value::Array(new_list));
        };
        for field in ["resources", "resizePolicy"] {
            match after.get(field) {
                Some(v) if !v.is_null() => before.insert(field.into(), v.clone()),
                _ => before.remove(field),
            };
        }
    }
    Some(Value::Array(old_list))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_resources_change() {
        let old = json!({"metadata": {"name": "p", "labels": {"a": "b"}, "resourceVersion": "5"},
            "spec": {"containers": [{"name": "c", "image": "x",
                "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Running"}});
        let mut new = json!({"metadata": {"name": "p", "labels": {"changed": "yes"}},
            "spec": {"containers": [{"name": "c", "image": "changed",
                "resources": {"requests": {"cpu": "200m"}}}]},
            "status": {"phase": "Failed"}});
        let (Some(old), Some(new_map)) = (old.as_object(), new.as_object_mut()) else {
            panic!("objects");
        };
        prepare_for_update(new_map, old);
        assert_eq!(new_map["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(new_map["spec"]["containers"][0]["image"], "x");
        assert_eq!(
            new_map["spec"]["containers"][0]["resources"]["requests"]["cpu"],
            "200m"
        );
        assert_eq!(new_map["status"]["phase"], "Running");
    }

    #[test]
    fn renamed_containers_stay_for_validation() {
        let old = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let mut new = json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "d", "image": "x"}]}});
        let (Some(old), Some(new_map)) = (old.as_object(), new.as_object_mut()) else {
            panic!("objects");
        };
        prepare_for_update(new_map, old);
        assert_eq!(new_map["spec"]["containers"][0]["name"], "d");
    }
}
