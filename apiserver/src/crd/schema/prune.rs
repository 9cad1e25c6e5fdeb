//! Pruning of unknown fields (upstream's `schema/pruning/algorithm.go` with the resource root
//! treated as an embedded resource), followed by the removal of `null`s the schema neither
//! allows nor defaults (`defaulting.PruneNonNullableNullsWithoutDefaults`), as upstream's
//! schema coercer does when decoding a custom resource.

use serde_json::{Map, Value};

use super::{Structural, meta};

/// Removes from custom resource `obj` every field its schema does not specify (unless
/// `x-kubernetes-preserve-unknown-fields`), keeping `apiVersion`, `kind` and `metadata` of the
/// root and of embedded resources (an embedded resource's `metadata` is cut down to
/// ObjectMeta's fields; the root's is left to the generic metadata handling), then drops
/// `null` values that are neither `nullable` nor defaulted.
///
/// Returns the removed fields' paths, sorted, in upstream's form (`spec.foo`,
/// `spec.items[0].bar`), for `unknown field "spec.foo"` warnings or strict-validation errors.
pub fn prune(schema: &Structural, obj: &mut Value) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut root = schema.clone();
    root.x_embedded_resource = true;
    prune_node(obj, Some(&root), "", true, &mut unknown);
    prune_nulls(obj, Some(schema));
    unknown.sort();
    unknown
}

/// Upstream's `pruning.Prune(x, s, is_resource_root)` alone (no null removal); returns the
/// removed paths.
pub(super) fn prune_value(x: &mut Value, s: &Structural, is_resource_root: bool) -> Vec<String> {
    let mut unknown = Vec::new();
    if is_resource_root {
        let mut root = s.clone();
        root.x_embedded_resource = true;
        prune_node(x, Some(&root), "", true, &mut unknown);
    } else {
        prune_node(x, Some(s), "", false, &mut unknown);
    }
    unknown
}

fn is_meta_field(k: &str) -> bool {
    matches!(k, "apiVersion" | "kind" | "metadata")
}

fn key_path(parent: &str, k: &str) -> String {
    if parent.is_empty() {
        k.to_owned()
    } else {
        format!("{parent}.{k}")
    }
}

fn prune_node(
    x: &mut Value,
    s: Option<&Structural>,
    path: &str,
    root: bool,
    unknown: &mut Vec<String>,
) {
    if let Some(s) = s
        && s.x_preserve_unknown_fields
    {
        skip_prune(x, s, path, root, unknown);
        return;
    }
    match x {
        Value::Object(o) => {
            let Some(s) = s else {
                for k in std::mem::take(o).keys() {
                    unknown.push(key_path(path, k));
                }
                return;
            };
            if s.x_embedded_resource && !root {
                unknown.extend(meta::prune_embedded_metadata(path, o));
            }
            let keys: Vec<String> = o.keys().cloned().collect();
            for k in keys {
                if s.x_embedded_resource && is_meta_field(&k) {
                    continue;
                }
                let child_schema = if let Some(p) = s.properties.get(&k) {
                    Some(Some(p))
                } else {
                    s.additional_properties.as_ref().map(|a| match a {
                        super::AdditionalProperties::Schema(add) => Some(add.as_ref()),
                        super::AdditionalProperties::Bool(_) => None,
                    })
                };
                match child_schema {
                    Some(cs) => {
                        if let Some(v) = o.get_mut(&k) {
                            prune_node(v, cs, &key_path(path, &k), false, unknown);
                        }
                    }
                    None => {
                        if !is_meta_field(&k) || !path.is_empty() {
                            unknown.push(key_path(path, &k));
                        }
                        o.remove(&k);
                    }
                }
            }
        }
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for (i, v) in a.iter_mut().enumerate() {
                prune_node(v, items, &format!("{path}[{i}]"), false, unknown);
            }
        }
        _ => {}
    }
}

/// Inside `x-kubernetes-preserve-unknown-fields`: unknown fields stay, specified ones are
/// pruned by their own schemas.
fn skip_prune(x: &mut Value, s: &Structural, path: &str, root: bool, unknown: &mut Vec<String>) {
    match x {
        Value::Object(o) => {
            if s.x_embedded_resource && !root {
                unknown.extend(meta::prune_embedded_metadata(path, o));
            }
            for (k, v) in o.iter_mut() {
                if s.x_embedded_resource && is_meta_field(k) {
                    continue;
                }
                if let Some(p) = s.properties.get(k) {
                    prune_node(v, Some(p), &key_path(path, k), false, unknown);
                } else if let Some(a) = &s.additional_properties {
                    let add = match a {
                        super::AdditionalProperties::Schema(add) => Some(add.as_ref()),
                        super::AdditionalProperties::Bool(_) => None,
                    };
                    prune_node(v, add, &key_path(path, k), false, unknown);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = s.items.as_deref() {
                for (i, v) in a.iter_mut().enumerate() {
                    skip_prune(v, items, &format!("{path}[{i}]"), false, unknown);
                }
            }
        }
        _ => {}
    }
}

/// Upstream's `PruneNonNullableNullsWithoutDefaults`.
pub(super) fn prune_nulls(x: &mut Value, s: Option<&Structural>) {
    match x {
        Value::Object(o) => prune_nulls_object(o, s),
        Value::Array(a) => {
            let items = s.and_then(|s| s.items.as_deref());
            for v in a {
                prune_nulls(v, items);
            }
        }
        _ => {}
    }
}

fn prune_nulls_object(o: &mut Map<String, Value>, s: Option<&Structural>) {
    o.retain(|k, v| {
        let fs = s.and_then(|s| s.field(k));
        if v.is_null() && fs.is_some_and(|fs| !fs.nullable && fs.default.is_none()) {
            return false;
        }
        prune_nulls(v, fs);
        true
    });
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::Structural;
    use super::prune;

    #[test]
    fn prunes_unknown_fields_and_reports_their_paths() {
        let schema = Structural::new(&json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "size": {"type": "integer"},
                    "items": {"type": "array", "items": {"type": "object",
                        "properties": {"name": {"type": "string"}}}},
                    "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                        "properties": {"typed": {"type": "object", "properties": {}}}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object"}}}
                }},
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        }));
        let mut obj = json!({
            "apiVersion": "example.com/v1", "kind": "Widget",
            "metadata": {"name": "w", "whatever": 1},
            "spec": {
                "size": 3, "foo": "x",
                "items": [{"name": "a", "extra": 1}, {"name": "b"}],
                "free": {"anything": {"deep": true}, "typed": {"gone": 1}},
                "labels": {"a": "b"},
                "template": {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p", "bogus": 1}, "spec": {"x": 1}, "junk": 2}
            },
            "status": {"ready": true, "other": 1},
            "extra": {"a": 1}
        });
        let unknown = prune(&schema, &mut obj);
        assert_eq!(
            unknown,
            vec![
                "extra",
                "spec.foo",
                "spec.free.typed.gone",
                "spec.items[0].extra",
                "spec.template.junk",
                "spec.template.metadata.bogus",
                "spec.template.spec.x",
                "status.other",
            ]
        );
        assert_eq!(
            obj,
            json!({
                "apiVersion": "example.com/v1", "kind": "Widget",
                "metadata": {"name": "w", "whatever": 1},
                "spec": {
                    "size": 3,
                    "items": [{"name": "a"}, {"name": "b"}],
                    "free": {"anything": {"deep": true}, "typed": {}},
                    "labels": {"a": "b"},
                    "template": {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "p"}, "spec": {}}
                },
                "status": {"ready": true}
            })
        );
    }

    #[test]
    fn drops_nulls_that_are_neither_nullable_nor_defaulted() {
        let schema = Structural::new(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "a": {"type": "string"},
                "b": {"type": "string", "nullable": true},
                "c": {"type": "string", "default": "x"}
            }}}
        }));
        let mut obj = json!({"spec": {"a": null, "b": null, "c": null}});
        assert!(prune(&schema, &mut obj).is_empty());
        assert_eq!(obj, json!({"spec": {"b": null, "c": null}}));
    }
}
