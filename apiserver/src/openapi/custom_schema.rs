//! The published schema of a custom resource, from its CRD version's `openAPIV3Schema`, as
//! upstream's `apiextensions-apiserver/pkg/controller/openapi/builder` publishes it.
//!
//! - Only what a structural schema keeps is published (`example`, `externalDocs`, `$schema`,
//!   … are dropped; `x-kubernetes-*` flags that are false are omitted); a schema upstream
//!   could not make structural (an unknown `type`, an untyped field, an array without
//!   `items`) is published as if there were none.
//! - `x-kubernetes-int-or-string` fields are unfolded into `anyOf: [integer, string]`.
//! - `apiVersion`, `kind` and `metadata` (a reference to `ObjectMeta`) are set at the root
//!   and on every `x-kubernetes-embedded-resource` object, which also require `apiVersion`
//!   and `kind`; the root carries `x-kubernetes-group-version-kind` and, when the version has
//!   `selectableFields`, `x-kubernetes-selectable-fields`.
//! - Without a schema, the kind is a bare `type: object`.
//!
//! For Swagger 2.0 (`/openapi/v2`, what older kubectl validates against) upstream's
//! `ToStructuralOpenAPIV2` applies on top: `allOf`/`anyOf`/`oneOf`/`not` are dropped; a
//! nullable field loses its `type`, `properties` and `items` (and is no longer required by its
//! parent); a field preserving unknown fields loses `properties` and `items`; an array left
//! without `items` loses its `type`; a root preserving unknown fields is a bare
//! `type: object`; embedded resources that preserve unknown fields get no added properties;
//! and `default` values are pruned (kube-openapi's `PruneDefaults`).

use serde_json::{Map, Value, json};

use super::schemas::reference;

/// The keys a structural schema keeps (`Structural.ToKubeOpenAPI`).
const KEPT: &[&str] = &[
    "description",
    "type",
    "title",
    "default",
    "nullable",
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "items",
    "additionalProperties",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Keys that are omitted when false (Go `omitempty` booleans).
const FALSE_OMITTED: &[&str] = &[
    "nullable",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "uniqueItems",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
];

const TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

/// TypeMeta's `apiVersion` description.
const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
/// TypeMeta's `kind` description.
const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
/// An embedded resource's `apiVersion` description.
const EMBEDDED_API_VERSION_DESCRIPTION: &str = "apiVersion defines the versioned schema of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
/// An embedded resource's `kind` description.
const EMBEDDED_KIND_DESCRIPTION: &str = "kind is a string value representing the type of this object. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";
/// `PartialObjectMetadata`'s `metadata` description.
const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";
/// `PartialObjectMetadataList`'s `metadata` description.
const LIST_METADATA_DESCRIPTION: &str = "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// Which document a schema is for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Dialect {
    /// OpenAPI v3 (`/openapi/v3/...`).
    V3,
    /// Swagger 2.0 (`/openapi/v2`); references are still written with the v3 prefix and
    /// rewritten by `v2::convert`.
    V2,
}

/// The schema name of a custom kind: upstream's `ToRESTFriendlyName("<group>/<version>/<kind>")`
/// — the group's labels reversed — e.g. `com.example.v1.Widget`.
pub(crate) fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.rsplit('.').collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// What the kind schema is built from.
pub(crate) struct KindInput<'a> {
    /// API group.
    pub(crate) group: &'a str,
    /// Version.
    pub(crate) version: &'a str,
    /// Kind.
    pub(crate) kind: &'a str,
    /// `openAPIV3Schema`, if any.
    pub(crate) schema: Option<&'a Value>,
    /// `selectableFields[].jsonPath`.
    pub(crate) selectable_fields: &'a [String],
    /// `ObjectMeta`'s schema name.
    pub(crate) object_meta: &'a str,
}

/// A reference with a description: v3 wraps it in `allOf` (references have no siblings
/// there), v2 keeps upstream's `{$ref, description}`.
fn described_ref(name: &str, description: &str, dialect: Dialect) -> Value {
    match dialect {
        Dialect::V3 => json!({ "allOf": [reference(name)], "description": description }),
        Dialect::V2 => {
            let mut r = reference(name);
            if let Some(map) = r.as_object_mut() {
                map.insert("description".to_owned(), json!(description));
            }
            r
        }
    }
}

/// The published schema of a custom kind.
pub(crate) fn kind_schema(input: &KindInput<'_>, dialect: Dialect) -> Value {
    let structural = input
        .schema
        .filter(|s| is_structural(s, true))
        .map(|s| unfold(clean(s)));
    let root_preserves = structural
        .as_ref()
        .is_some_and(|s| s["x-kubernetes-preserve-unknown-fields"] == true);
    let mut out = match structural {
        Some(_) if dialect == Dialect::V2 && root_preserves => json!({ "type": "object" }),
        None => json!({ "type": "object" }),
        Some(mut s) => {
            if dialect == Dialect::V2 {
                to_v2(&mut s);
                prune_defaults(&mut s);
            }
            set_type_meta(&mut s, API_VERSION_DESCRIPTION, KIND_DESCRIPTION);
            set_property(
                &mut s,
                "metadata",
                described_ref(input.object_meta, METADATA_DESCRIPTION, dialect),
            );
            add_embedded(&mut s, input.object_meta, dialect, true);
            s
        }
    };
    if let Some(map) = out.as_object_mut() {
        map.insert(
            "x-kubernetes-group-version-kind".to_owned(),
            json!([{ "group": input.group, "kind": input.kind, "version": input.version }]),
        );
        if !input.selectable_fields.is_empty() {
            let fields: Vec<Value> = input
                .selectable_fields
                .iter()
                .map(|p| json!({ "fieldPath": p.strip_prefix('.').unwrap_or(p) }))
                .collect();
            map.insert(
                "x-kubernetes-selectable-fields".to_owned(),
                Value::Array(fields),
            );
        }
    }
    out
}

/// The `<Kind>List` schema (upstream's `buildListSchema`).
pub(crate) fn list_schema(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    list_meta: &str,
    dialect: Dialect,
) -> Value {
    let list_kind = format!("{kind}List");
    json!({
        "description": format!("{list_kind} is a list of {kind}"),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": { "description": API_VERSION_DESCRIPTION, "type": "string" },
            "kind": { "description": KIND_DESCRIPTION, "type": "string" },
            "items": {
                "description": format!("List of {plural}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md"),
                "type": "array",
                "items": reference(&definition_name(group, version, kind)),
            },
            "metadata": described_ref(list_meta, LIST_METADATA_DESCRIPTION, dialect),
        },
        "x-kubernetes-group-version-kind": [{ "group": group, "kind": list_kind, "version": version }],
    })
}

/// Whether upstream would make `s` a structural schema to publish: known types only, every
/// field typed (unless it is int-or-string or preserves unknown fields), arrays with `items`.
/// Value validations (`allOf`, …) are not looked into beyond their types.
fn is_structural(s: &Value, typed_required: bool) -> bool {
    let Some(map) = s.as_object() else {
        return false;
    };
    let ty = map.get("type").and_then(Value::as_str).unwrap_or("");
    if !ty.is_empty() && !TYPES.contains(&ty) {
        return false;
    }
    if map.get("type").is_some_and(|t| !t.is_string()) {
        return false;
    }
    let flagged = |k: &str| map.get(k) == Some(&Value::Bool(true));
    if typed_required
        && ty.is_empty()
        && !flagged("x-kubernetes-int-or-string")
        && !flagged("x-kubernetes-preserve-unknown-fields")
    {
        return false;
    }
    if ty == "array" && !map.get("items").is_some_and(Value::is_object) {
        return false;
    }
    if let Some(props) = map.get("properties") {
        let Some(props) = props.as_object() else {
            return false;
        };
        if !props.values().all(|p| is_structural(p, true)) {
            return false;
        }
    }
    if let Some(items) = map.get("items")
        && !is_structural(items, true)
    {
        return false;
    }
    if let Some(additional) = map.get("additionalProperties").filter(|a| a.is_object())
        && !is_structural(additional, true)
    {
        return false;
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        if let Some(list) = map.get(junctor).and_then(Value::as_array)
            && !list.iter().all(|n| is_structural(n, false))
        {
            return false;
        }
    }
    if let Some(not) = map.get("not")
        && !is_structural(not, false)
    {
        return false;
    }
    true
}

/// `s` with only what a structural schema keeps, recursively.
fn clean(s: &Value) -> Value {
    let Some(map) = s.as_object() else {
        return s.clone();
    };
    let mut out = Map::new();
    for (k, v) in map {
        if !KEPT.contains(&k.as_str()) {
            continue;
        }
        if FALSE_OMITTED.contains(&k.as_str()) && v == &Value::Bool(false) {
            continue;
        }
        let v = match k.as_str() {
            "properties" => Value::Object(
                v.as_object()
                    .map(|p| p.iter().map(|(n, s)| (n.clone(), clean(s))).collect())
                    .unwrap_or_default(),
            ),
            "items" | "not" => clean(v),
            "additionalProperties" if v.is_object() => clean(v),
            "maximum" | "minimum" | "multipleOf" => go_number(v),
            "allOf" | "anyOf" | "oneOf" => {
                Value::Array(v.as_array().into_iter().flatten().map(clean).collect())
            }
            _ => v.clone(),
        };
        out.insert(k.clone(), v);
    }
    Value::Object(out)
}

/// A number as Go's `encoding/json` writes a `float64`: integral values without a fraction
/// (`0`, not `0.0`, however the CRD was stored).
fn go_number(v: &Value) -> Value {
    match v.as_f64() {
        Some(f) if v.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
        _ => v.clone(),
    }
}

/// Whether `list` is `[{type: integer}, {type: string}]` (the int-or-string pattern).
fn is_int_or_string_any_of(list: Option<&Value>) -> bool {
    let Some(list) = list.and_then(Value::as_array) else {
        return false;
    };
    list.len() == 2
        && list[0] == json!({ "type": "integer" })
        && list[1] == json!({ "type": "string" })
}

/// Upstream's `Structural.Unfold`: an `x-kubernetes-int-or-string` field gets
/// `anyOf: [{type: integer}, {type: string}]` (or, when it has another `anyOf`, that pattern
/// first in `allOf`), unless it has the pattern already.
fn unfold(mut s: Value) -> Value {
    visit_structural(&mut s, &mut |map| {
        if map.get("x-kubernetes-int-or-string") != Some(&Value::Bool(true)) {
            return;
        }
        if is_int_or_string_any_of(map.get("anyOf")) {
            return;
        }
        let first_all_of = map
            .get("allOf")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .map(|f| f.get("anyOf"));
        if let Some(first) = first_all_of
            && is_int_or_string_any_of(first)
        {
            return;
        }
        let pattern = json!([{ "type": "integer" }, { "type": "string" }]);
        if map.get("anyOf").is_none() {
            map.insert("anyOf".to_owned(), pattern);
        } else {
            let mut all_of = vec![json!({ "anyOf": pattern })];
            if let Some(Value::Array(rest)) = map.remove("allOf") {
                all_of.extend(rest);
            }
            map.insert("allOf".to_owned(), Value::Array(all_of));
        }
    });
    s
}

/// Calls `f` on `s` and then on every schema below it through `properties`, `items` and
/// `additionalProperties` (not into value validations), parents first.
fn visit_structural(s: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>)) {
    let Some(map) = s.as_object_mut() else {
        return;
    };
    f(map);
    if let Some(props) = map.get_mut("properties").and_then(Value::as_object_mut) {
        for p in props.values_mut() {
            visit_structural(p, f);
        }
    }
    if let Some(items) = map.get_mut("items") {
        visit_structural(items, f);
    }
    if let Some(additional) = map.get_mut("additionalProperties") {
        visit_structural(additional, f);
    }
}

/// Upstream's `ToStructuralOpenAPIV2`, applied top-down.
fn to_v2(s: &mut Value) {
    visit_structural(s, &mut |map| {
        for junctor in ["allOf", "oneOf", "anyOf", "not"] {
            map.remove(junctor);
        }
        if map.remove("nullable") == Some(Value::Bool(true)) {
            map.remove("type");
            map.remove("items");
            map.remove("properties");
        }
        if map.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)) {
            map.remove("items");
            map.remove("properties");
        }
        if map.get("items").is_none() && map.get("type").and_then(Value::as_str) == Some("array") {
            map.remove("type");
        }
        let nullable_props: Vec<String> = map
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .filter(|(_, v)| v["nullable"] == true)
                    .map(|(k, _)| k.clone())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(Value::Array(required)) = map.get_mut("required") {
            required.retain(|r| {
                !r.as_str()
                    .is_some_and(|r| nullable_props.iter().any(|n| n == r))
            });
        }
        if map
            .get("additionalProperties")
            .is_some_and(|a| a["nullable"] == true)
        {
            map.remove("required");
        }
        if map
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(Vec::is_empty)
        {
            map.remove("required");
        }
    });
}

/// Removes every `default` (kube-openapi's `PruneDefaults` on the v2 definitions).
fn prune_defaults(s: &mut Value) {
    visit_structural(s, &mut |map| {
        map.remove("default");
    });
}

fn set_property(s: &mut Value, name: &str, value: Value) {
    let Some(map) = s.as_object_mut() else {
        return;
    };
    let props = map
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(props) = props.as_object_mut() {
        props.insert(name.to_owned(), value);
    }
}

fn set_type_meta(s: &mut Value, api_version: &str, kind: &str) {
    set_property(
        s,
        "apiVersion",
        json!({ "description": api_version, "type": "string" }),
    );
    set_property(s, "kind", json!({ "description": kind, "type": "string" }));
}

/// Upstream's `addEmbeddedProperties`: every `x-kubernetes-embedded-resource` object below
/// the root gets `apiVersion`, `kind` and `metadata`, and requires `apiVersion` and `kind` (in
/// v2 not when it preserves unknown fields).
fn add_embedded(s: &mut Value, object_meta: &str, dialect: Dialect, root: bool) {
    let Some(map) = s.as_object_mut() else {
        return;
    };
    if let Some(props) = map.get_mut("properties").and_then(Value::as_object_mut) {
        for p in props.values_mut() {
            add_embedded(p, object_meta, dialect, false);
        }
    }
    if let Some(items) = map.get_mut("items") {
        add_embedded(items, object_meta, dialect, false);
    }
    if let Some(additional) = map.get_mut("additionalProperties") {
        add_embedded(additional, object_meta, dialect, false);
    }
    let flagged = |k: &str| map.get(k) == Some(&Value::Bool(true));
    if root
        || (dialect == Dialect::V2 && flagged("x-kubernetes-preserve-unknown-fields"))
        || !flagged("x-kubernetes-embedded-resource")
    {
        return;
    }
    set_type_meta(
        s,
        EMBEDDED_API_VERSION_DESCRIPTION,
        EMBEDDED_KIND_DESCRIPTION,
    );
    set_property(
        s,
        "metadata",
        described_ref(object_meta, METADATA_DESCRIPTION, dialect),
    );
    let Some(map) = s.as_object_mut() else {
        return;
    };
    let required = map
        .entry("required")
        .or_insert_with(|| Value::Array(Vec::new()));
    if let Some(required) = required.as_array_mut() {
        for field in ["kind", "apiVersion"] {
            if !required.iter().any(|r| r == field) {
                required.push(json!(field));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

    fn build(schema: Option<&Value>, dialect: Dialect) -> Value {
        let fields = vec![".spec.color".to_owned()];
        kind_schema(
            &KindInput {
                group: "bar.k8s.io",
                version: "v1",
                kind: "Foo",
                schema,
                selectable_fields: &fields,
                object_meta: OBJECT_META,
            },
            dialect,
        )
    }

    #[test]
    fn definition_names_reverse_the_group() {
        assert_eq!(
            definition_name("example.com", "v1", "Widget"),
            "com.example.v1.Widget"
        );
        assert_eq!(
            definition_name("bar.k8s.io", "v1beta1", "Foo"),
            "io.k8s.bar.v1beta1.Foo"
        );
    }

    #[test]
    fn without_a_schema_the_kind_is_a_bare_object() {
        for dialect in [Dialect::V3, Dialect::V2] {
            let s = build(None, dialect);
            assert_eq!(s["type"], "object");
            assert!(s.get("properties").is_none(), "{s}");
            assert_eq!(
                s["x-kubernetes-group-version-kind"],
                json!([{ "group": "bar.k8s.io", "kind": "Foo", "version": "v1" }])
            );
            assert_eq!(
                s["x-kubernetes-selectable-fields"],
                json!([{ "fieldPath": "spec.color" }])
            );
        }
    }

    #[test]
    fn v3_adds_type_meta_and_object_meta_and_keeps_validation() {
        let s = build(
            Some(&json!({
                "type": "object",
                "description": "A widget.",
                "example": { "spec": {} },
                "properties": {
                    "metadata": { "type": "object" },
                    "spec": {
                        "type": "object",
                        "nullable": true,
                        "x-kubernetes-preserve-unknown-fields": false,
                        "properties": {
                            "size": { "type": "integer", "description": "How big.", "default": 1, "minimum": 0.0, "maximum": 2.5 },
                            "port": { "x-kubernetes-int-or-string": true },
                        },
                    },
                },
            })),
            Dialect::V3,
        );
        assert_eq!(s["description"], "A widget.");
        assert!(s.get("example").is_none());
        assert_eq!(s["properties"]["apiVersion"]["type"], "string");
        assert_eq!(s["properties"]["kind"]["type"], "string");
        assert_eq!(
            s["properties"]["metadata"],
            json!({
                "allOf": [{ "$ref": format!("#/components/schemas/{OBJECT_META}") }],
                "description": METADATA_DESCRIPTION,
            })
        );
        let spec = &s["properties"]["spec"];
        assert_eq!(spec["nullable"], true);
        assert!(spec.get("x-kubernetes-preserve-unknown-fields").is_none());
        assert_eq!(spec["properties"]["size"]["default"], 1);
        assert_eq!(spec["properties"]["size"]["minimum"], json!(0));
        assert!(spec["properties"]["size"]["minimum"].is_u64());
        assert_eq!(spec["properties"]["size"]["maximum"], 2.5);
        assert_eq!(
            spec["properties"]["port"]["anyOf"],
            json!([{ "type": "integer" }, { "type": "string" }])
        );
    }

    #[test]
    fn v2_strips_what_swagger_and_kubectl_cannot_take() {
        let s = build(
            Some(&json!({
                "type": "object",
                "required": ["spec", "opt"],
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {
                            "foo": { "type": "string", "oneOf": [{ "pattern": "a" }, { "pattern": "b" }], "default": "a" },
                            "free": { "type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": { "a": { "type": "string" } } },
                            "port": { "x-kubernetes-int-or-string": true },
                            "list": { "type": "array", "items": { "type": "string" } },
                        },
                    },
                    "opt": { "type": "object", "nullable": true, "properties": { "a": { "type": "string" } } },
                },
            })),
            Dialect::V2,
        );
        let spec = &s["properties"]["spec"]["properties"];
        assert_eq!(spec["foo"], json!({ "type": "string" }));
        assert_eq!(
            spec["free"],
            json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
        );
        assert_eq!(spec["port"], json!({ "x-kubernetes-int-or-string": true }));
        assert_eq!(spec["list"]["type"], "array");
        assert_eq!(s["properties"]["opt"], json!({}));
        assert_eq!(s["required"], json!(["spec"]));
        assert_eq!(
            s["properties"]["metadata"],
            json!({ "$ref": format!("#/components/schemas/{OBJECT_META}"), "description": METADATA_DESCRIPTION })
        );
    }

    #[test]
    fn a_root_preserving_unknown_fields_is_bare_in_v2_only() {
        let schema = json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true });
        let v2 = build(Some(&schema), Dialect::V2);
        assert!(v2.get("properties").is_none(), "{v2}");
        let v3 = build(Some(&schema), Dialect::V3);
        assert_eq!(v3["x-kubernetes-preserve-unknown-fields"], true);
        assert!(v3["properties"]["metadata"].is_object(), "{v3}");
    }

    #[test]
    fn non_structural_schemas_are_published_as_none() {
        for bad in [
            json!({ "type": "object", "properties": { "spec": { "type": "bug" } } }),
            json!({ "type": "object", "properties": { "foo": { "type": "array" } } }),
            json!({ "type": "object", "properties": { "foo": { "description": "untyped" } } }),
        ] {
            let s = build(Some(&bad), Dialect::V3);
            assert!(s.get("properties").is_none(), "{bad} → {s}");
        }
    }

    #[test]
    fn embedded_resources_get_type_and_object_meta() {
        let schema = json!({
            "type": "object",
            "properties": {
                "template": { "type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true },
            },
        });
        let v3 = build(Some(&schema), Dialect::V3);
        let t = &v3["properties"]["template"];
        assert_eq!(t["properties"]["kind"]["type"], "string");
        assert!(t["properties"]["metadata"]["allOf"].is_array());
        assert_eq!(t["required"], json!(["kind", "apiVersion"]));
        let v2 = build(Some(&schema), Dialect::V2);
        let t = &v2["properties"]["template"];
        assert!(t.get("properties").is_none(), "{t}");
    }

    #[test]
    fn list_schema_is_upstreams() {
        let l = list_schema(
            "example.com",
            "v1",
            "Widget",
            "widgets",
            "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta",
            Dialect::V3,
        );
        assert_eq!(l["description"], "WidgetList is a list of Widget");
        assert_eq!(
            l["properties"]["items"]["items"],
            json!({ "$ref": "#/components/schemas/com.example.v1.Widget" })
        );
        assert_eq!(
            l["x-kubernetes-group-version-kind"],
            json!([{ "group": "example.com", "kind": "WidgetList", "version": "v1" }])
        );
        assert_eq!(l["required"], json!(["items"]));
    }
}
