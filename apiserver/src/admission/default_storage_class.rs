//! `DefaultStorageClass` (upstream's `plugin/pkg/admission/storage/storageclass/setdefault`):
//! a PersistentVolumeClaim created without a class (`spec.storageClassName` absent — an
//! empty string asks for no class — and no beta class annotation) gets the default
//! StorageClass, the one annotated `storageclass.kubernetes.io/is-default-class: "true"` (or
//! the beta annotation); with several, the newest, ties broken by name.

use serde_json::{Map, Value, json};

use super::{Attributes, Lookup, MutatingAdmission, Operation};
use crate::error::Result;

/// The plugin.
pub struct DefaultStorageClass;

/// Where StorageClasses are stored.
const PREFIX: &str = "/registry/storage.k8s.io/storageclasses/";
const DEFAULT_MARKS: [&str; 2] = [
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
];
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

fn meta_str<'a>(obj: &'a Map<String, Value>, field: &str) -> &'a str {
    obj.get("metadata")
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// Upstream's `GetDefaultClass`: the newest class marked default (ties: name ascending).
pub fn default_class(classes: &[Map<String, Value>]) -> Option<String> {
    let mut marked: Vec<&Map<String, Value>> = classes
        .iter()
        .filter(|c| {
            let annotations = c.get("metadata").and_then(|m| m.get("annotations"));
            DEFAULT_MARKS.iter().any(|k| {
                annotations.and_then(|a| a.get(*k)).and_then(Value::as_str) == Some("true")
            })
        })
        .collect();
    // RFC 3339 timestamps of one format sort as text.
    marked.sort_by(|a, b| {
        meta_str(b, "creationTimestamp")
            .cmp(meta_str(a, "creationTimestamp"))
            .then_with(|| meta_str(a, "name").cmp(meta_str(b, "name")))
    });
    marked.first().map(|c| meta_str(c, "name").to_owned())
}

impl MutatingAdmission for DefaultStorageClass {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    fn admit(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&mut Map<String, Value>>,
        _old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if !a.is_core("persistentvolumeclaims")
            || !a.subresource.is_empty()
            || a.operation != Operation::Create
        {
            return Ok(());
        }
        let Some(obj) = obj else {
            return Ok(());
        };
        let annotated = obj
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(BETA_CLASS))
            .is_some();
        let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        if annotated || spec.get("storageClassName").is_some_and(|c| !c.is_null()) {
            return Ok(());
        }
        if let Some(class) = default_class(&lookup.list(PREFIX)) {
            spec.insert("storageClassName".into(), json!(class));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, created: &str, default: bool) -> Map<String, Value> {
        let mut c = json!({"metadata": {"name": name, "creationTimestamp": created}});
        if default {
            c["metadata"]["annotations"] =
                json!({"storageclass.kubernetes.io/is-default-class": "true"});
        }
        c.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn the_newest_default_class_wins_and_ties_go_by_name() {
        assert_eq!(
            default_class(&[class("a", "2026-01-01T00:00:00Z", false)]),
            None
        );
        let classes = [
            class("old", "2026-01-01T00:00:00Z", true),
            class("new-b", "2026-02-01T00:00:00Z", true),
            class("new-a", "2026-02-01T00:00:00Z", true),
            class("newest-plain", "2026-03-01T00:00:00Z", false),
        ];
        assert_eq!(default_class(&classes).as_deref(), Some("new-a"));
    }
}
