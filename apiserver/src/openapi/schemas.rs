//! `components.schemas`: the k8s-openapi types' JSON Schemas (schemars output in its OpenAPI 3.0
//! dialect), with what upstream adds on top: the `x-kubernetes-group-version-kind` extension on
//! every served kind and its list, and the `<Kind>List` schemas (k8s-openapi has one generic
//! `List<T>` without a schema of its own).
//!
//! The patch and list/map extensions (`x-kubernetes-patch-merge-key`, `-patch-strategy`,
//! `-list-type`, `-list-map-keys`, `-map-type`) are not in k8s-openapi's schemars output; they
//! are added from upstream's Go struct tags and markers by `extensions`.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::autoscaling::v1::Scale;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_openapi::schemars::JsonSchema;
use k8s_openapi::schemars::generate::SchemaSettings;
use serde_json::{Map, Value, json};

use super::kinds::KindType;

/// Where schemas live in an OpenAPI v3 document; every `$ref` starts with this.
pub(crate) const REF_PREFIX: &str = "#/components/schemas/";

/// `{"$ref": "#/components/schemas/<name>"}`.
pub(crate) fn reference(name: &str) -> Value {
    json!({ "$ref": format!("{REF_PREFIX}{name}") })
}

/// Names of the apimachinery schemas the operations use.
pub(crate) struct MetaNames {
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.Status`.
    pub(crate) status: String,
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions`.
    pub(crate) delete_options: String,
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.Patch`.
    pub(crate) patch: String,
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent`.
    pub(crate) watch_event: String,
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList`.
    pub(crate) api_resource_list: String,
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta`.
    pub(crate) object_meta: String,
    /// `io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta`.
    pub(crate) list_meta: String,
    /// `io.k8s.api.autoscaling.v1.Scale` (custom resources' `scale` subresource).
    pub(crate) scale: String,
}

impl MetaNames {
    fn new() -> Self {
        MetaNames {
            status: meta::Status::schema_name().into_owned(),
            delete_options: meta::DeleteOptions::schema_name().into_owned(),
            patch: meta::Patch::schema_name().into_owned(),
            watch_event: meta::WatchEvent::<meta::Status>::schema_name().into_owned(),
            api_resource_list: meta::APIResourceList::schema_name().into_owned(),
            object_meta: meta::ObjectMeta::schema_name().into_owned(),
            list_meta: meta::ListMeta::schema_name().into_owned(),
            scale: Scale::schema_name().into_owned(),
        }
    }
}

/// Every schema any document needs, by name.
pub(crate) struct Definitions {
    /// The schemas.
    pub(crate) schemas: Map<String, Value>,
    /// Names of the shared apimachinery schemas.
    pub(crate) meta: MetaNames,
}

/// The `x-kubernetes-group-version-kind` value of a schema (a list, as upstream writes it on
/// schemas; operations carry a single object).
fn gvk_list(group: &str, version: &str, kind: &str) -> Value {
    json!([{ "group": group, "kind": kind, "version": version }])
}

/// Generates the schemas of `kinds` and of everything they reference.
pub(crate) fn generate(kinds: &[KindType]) -> Definitions {
    let mut generator = SchemaSettings::openapi3()
        .with(|s| s.meta_schema = None)
        .into_generator();
    for k in kinds {
        (k.add)(&mut generator);
    }
    generator.subschema_for::<meta::Status>();
    generator.subschema_for::<meta::DeleteOptions>();
    generator.subschema_for::<meta::Patch>();
    generator.subschema_for::<meta::WatchEvent<meta::Status>>();
    generator.subschema_for::<meta::APIResourceList>();
    generator.subschema_for::<meta::ListMeta>();
    generator.subschema_for::<meta::ObjectMeta>();
    generator.subschema_for::<Scale>();
    let mut schemas = generator.take_definitions(true);
    super::extensions::add(&mut schemas);
    super::enums::add(&mut schemas);
    let list_meta = meta::ListMeta::schema_name();

    for k in kinds {
        let name = (k.schema_name)();
        if let Some(Value::Object(schema)) = schemas.get_mut(name.as_ref()) {
            schema.insert(
                "x-kubernetes-group-version-kind".to_owned(),
                gvk_list(k.group, k.version, k.kind),
            );
            // k8s-openapi makes `metadata` of a top-level kind non-optional in Rust; upstream's
            // schemas do not require it (`kubectl explain` would print it as required).
            drop_required(schema, "metadata");
        }
        let list_kind = format!("{}List", k.kind);
        schemas.insert(
            format!("{name}List"),
            json!({
                "description": format!("{list_kind} is a list of {}.", k.kind),
                "type": "object",
                "properties": {
                    "apiVersion": {
                        "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources",
                        "type": "string",
                    },
                    "items": {
                        "description": format!("Items is the list of {}.", k.kind),
                        "type": "array",
                        "items": reference(&name),
                    },
                    "kind": {
                        "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds",
                        "type": "string",
                    },
                    "metadata": {
                        "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
                        "allOf": [reference(&list_meta)],
                    },
                },
                "required": ["items"],
                "x-kubernetes-group-version-kind": gvk_list(k.group, k.version, &list_kind),
            }),
        );
    }
    Definitions {
        schemas,
        meta: MetaNames::new(),
    }
}

fn drop_required(schema: &mut Map<String, Value>, field: &str) {
    let now_empty = match schema.get_mut("required") {
        Some(Value::Array(required)) => {
            required.retain(|f| f != field);
            required.is_empty()
        }
        _ => false,
    };
    if now_empty {
        schema.remove("required");
    }
}

/// Collects the name of every schema `value` refers to.
pub(crate) fn refs_in(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                if k == "$ref" {
                    if let Some(name) = v.as_str().and_then(|r| r.strip_prefix(REF_PREFIX)) {
                        out.push(name.to_owned());
                    }
                } else {
                    refs_in(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| refs_in(v, out)),
        _ => {}
    }
}

/// The schemas reachable from `roots`, sorted by name (as upstream's documents are).
pub(crate) fn closure(
    schemas: &Map<String, Value>,
    roots: impl IntoIterator<Item = String>,
) -> BTreeMap<String, Value> {
    let mut seen = BTreeSet::new();
    let mut todo: Vec<String> = roots.into_iter().collect();
    let mut out = BTreeMap::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = schemas.get(&name) {
            refs_in(schema, &mut todo);
            out.insert(name, schema.clone());
        }
    }
    out
}
