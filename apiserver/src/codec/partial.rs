//! `PartialObjectMetadata` and `PartialObjectMetadataList`: the metadata-only forms
//! metadata clients (client-go's metadata informers, kube-rs `get_metadata`,
//! `list_metadata`, `metadata_watcher`) ask for, as upstream's `asPartialObjectMetadata[List]`
//! build them.

use serde_json::{Map, Value, json};

use super::negotiate::{MetaVersion, not_acceptable_message};
use crate::error::ApiError;

/// Whether `obj` is a list (a `…List` kind with `items`).
pub fn is_list(obj: &Map<String, Value>) -> bool {
    obj.contains_key("items")
        && obj
            .get("kind")
            .and_then(Value::as_str)
            .is_some_and(|k| k.ends_with("List"))
}

/// The metadata-only form of one object: `{"kind":"PartialObjectMetadata","apiVersion":…,
/// "metadata":…}` with the whole of its metadata.
pub fn object_metadata(obj: &Map<String, Value>, version: MetaVersion) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("kind".into(), json!("PartialObjectMetadata"));
    m.insert("apiVersion".into(), json!(version.api_version()));
    m.insert(
        "metadata".into(),
        obj.get("metadata")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new())),
    );
    m
}

/// `obj` as a `PartialObjectMetadata`; a list is upstream's 406.
pub fn to_partial(
    obj: &Map<String, Value>,
    version: MetaVersion,
) -> Result<Map<String, Value>, ApiError> {
    if is_list(obj) {
        return Err(not_acceptable_message(format!(
            "you requested PartialObjectMetadata, but the requested object is a list ({})",
            go_type(obj)
        )));
    }
    Ok(object_metadata(obj, version))
}

/// The list `obj` as a `PartialObjectMetadataList` (its resourceVersion, continue and
/// remainingItemCount kept); anything else is upstream's 406.
pub fn to_partial_list(
    obj: &Map<String, Value>,
    version: MetaVersion,
) -> Result<Map<String, Value>, ApiError> {
    if !is_list(obj) {
        return Err(not_acceptable_message(format!(
            "you requested PartialObjectMetadataList, but the requested object is not a list ({})",
            go_type(obj)
        )));
    }
    let items: Vec<Value> = obj
        .get("items")
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_object)
                .map(|o| Value::Object(object_metadata(o, version)))
                .collect()
        })
        .unwrap_or_default();
    let mut meta = Map::new();
    if let Some(m) = obj.get("metadata").and_then(Value::as_object) {
        for key in ["resourceVersion", "continue", "remainingItemCount"] {
            if let Some(v) = m.get(key).filter(|v| !v.is_null() && **v != json!("")) {
                meta.insert(key.into(), v.clone());
            }
        }
    }
    let mut list = Map::new();
    list.insert("kind".into(), json!("PartialObjectMetadataList"));
    list.insert("apiVersion".into(), json!(version.api_version()));
    list.insert("metadata".into(), Value::Object(meta));
    // Go's nil slice: an empty result is `null`, as upstream writes it.
    list.insert(
        "items".into(),
        if items.is_empty() {
            Value::Null
        } else {
            Value::Array(items)
        },
    );
    Ok(list)
}

/// The Go type upstream names in its 406 messages: the internal type of the object
/// (`*core.Pod`, `*apps.DeploymentList`), `*unstructured.Unstructured[List]` for custom
/// resources.
fn go_type(obj: &Map<String, Value>) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let package = match group {
        "" | "events.k8s.io" => "core",
        "internal.apiserver.k8s.io" => "apiserverinternal",
        g if g.ends_with(".k8s.io") || !g.contains('.') => g.split('.').next().unwrap_or(g),
        _ => {
            let list = if is_list(obj) { "List" } else { "" };
            return format!("*unstructured.Unstructured{list}");
        }
    };
    format!("*{package}.{kind}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_of_an_object_and_a_list() {
        let pod = json!({"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {}});
        let pod = pod.as_object().unwrap();
        let p = to_partial(pod, MetaVersion::V1).unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "p", "labels": {"a": "b"}}})
        );
        let err = to_partial_list(pod, MetaVersion::V1).unwrap_err();
        assert!(
            err.to_string().contains("is not a list (*core.Pod)"),
            "{err}"
        );
        let list = json!({"kind": "DeploymentList", "apiVersion": "apps/v1",
            "metadata": {"resourceVersion": "5", "continue": ""}, "items": [
                {"kind": "Deployment", "metadata": {"name": "d"}, "spec": {}}]});
        let list = list.as_object().unwrap();
        let l = to_partial_list(list, MetaVersion::V1beta1).unwrap();
        assert_eq!(
            Value::Object(l),
            json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1beta1",
                "metadata": {"resourceVersion": "5"}, "items": [
                    {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1beta1",
                     "metadata": {"name": "d"}}]})
        );
        let err = to_partial(list, MetaVersion::V1).unwrap_err();
        assert!(
            err.to_string().contains("is a list (*apps.DeploymentList)"),
            "{err}"
        );
    }
}
