//! The `x-kubernetes-*` schema extensions upstream publishes for the built-in types, from the
//! Go struct tags and comment markers recorded in `proto/patch_fields.txt` (see
//! `patch::schema`): on a property, `x-kubernetes-patch-strategy`,
//! `x-kubernetes-patch-merge-key`, `x-kubernetes-list-type`, `x-kubernetes-list-map-keys`
//! and `x-kubernetes-map-type` (from `+mapType`/`+structType` on the field); on a type's own
//! schema, `x-kubernetes-map-type` from its `+structType` marker.
//!
//! As in upstream's documents the extensions sit on the property schema itself, next to its
//! `type`/`items` or its `allOf: [{$ref}]` wrapper.

use serde_json::{Map, Value};

use crate::patch::schema::{self, FieldMeta};

/// The Go type (`apps/v1.DeploymentSpec`) of a schema name (`io.k8s.api.apps.v1.DeploymentSpec`).
pub(crate) fn go_type(schema_name: &str) -> Option<String> {
    let (package, ty) = if let Some(rest) = schema_name.strip_prefix("io.k8s.api.") {
        let (package, ty) = rest.rsplit_once('.')?;
        (package.replacen('.', "/", 1), ty)
    } else {
        let ty = schema_name.strip_prefix("io.k8s.apimachinery.pkg.apis.meta.v1.")?;
        ("meta/v1".to_owned(), ty)
    };
    Some(format!("{package}.{ty}"))
}

/// The extensions of one field, in upstream's (alphabetical) order.
fn field_extensions(meta: &FieldMeta) -> Vec<(&'static str, Value)> {
    let mut out = Vec::new();
    if let Some(keys) = meta.list_keys {
        let keys = keys
            .split(',')
            .map(|k| Value::String(k.to_owned()))
            .collect();
        out.push(("x-kubernetes-list-map-keys", Value::Array(keys)));
    }
    if let Some(list_type) = meta.list_type {
        out.push(("x-kubernetes-list-type", list_type.into()));
    }
    if let Some(map_type) = meta.map_type {
        out.push(("x-kubernetes-map-type", map_type.into()));
    }
    if let Some(key) = meta.merge_key {
        out.push(("x-kubernetes-patch-merge-key", key.into()));
    }
    if let Some(strategy) = meta.strategy_tag {
        out.push(("x-kubernetes-patch-strategy", strategy.into()));
    }
    out
}

/// Adds the extensions to every schema of a built-in type in `schemas`.
pub(crate) fn add(schemas: &mut Map<String, Value>) {
    for (name, schema) in schemas.iter_mut() {
        let (Some(ty), Value::Object(schema)) = (go_type(name), schema) else {
            continue;
        };
        if let Some(struct_type) = schema::struct_type(&ty) {
            schema.insert("x-kubernetes-map-type".to_owned(), struct_type.into());
        }
        let Some(Value::Object(properties)) = schema.get_mut("properties") else {
            continue;
        };
        for (field, meta) in schema::fields_of(&ty) {
            if let Some(Value::Object(property)) = properties.get_mut(field) {
                let extensions = field_extensions(&meta);
                if !extensions.is_empty() {
                    wrap_ref(property);
                }
                for (k, v) in extensions {
                    property.insert(k.to_owned(), v);
                }
            }
        }
    }
}

/// A bare `{$ref}` gets siblings only inside an `allOf` wrapper (as upstream writes it).
fn wrap_ref(property: &mut Map<String, Value>) {
    if let Some(r) = property.remove("$ref") {
        let mut inner = Map::new();
        inner.insert("$ref".to_owned(), r);
        property.insert("allOf".to_owned(), Value::Array(vec![Value::Object(inner)]));
    }
}

#[cfg(test)]
mod tests {
    use super::go_type;

    #[test]
    fn schema_names_map_to_go_types() {
        assert_eq!(
            go_type("io.k8s.api.apps.v1.DeploymentSpec").as_deref(),
            Some("apps/v1.DeploymentSpec")
        );
        assert_eq!(
            go_type("io.k8s.api.admissionregistration.v1.MatchResources").as_deref(),
            Some("admissionregistration/v1.MatchResources")
        );
        assert_eq!(
            go_type("io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector").as_deref(),
            Some("meta/v1.LabelSelector")
        );
        assert_eq!(
            go_type("io.k8s.apimachinery.pkg.runtime.RawExtension"),
            None
        );
    }
}
