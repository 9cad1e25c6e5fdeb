//! The structural schema of a CRD version (upstream's `apiextensions-apiserver/pkg/apiserver/schema`,
//! v1.33) and what custom resources go through with it:
//!
//! - [`Structural`] — `schema.openAPIV3Schema` parsed once (types, properties, value
//!   validations, `x-kubernetes-*` extensions, compiled `pattern`s).
//! - [`structural_errors`] — the structural-schema rules a CRD's schema must follow, with
//!   upstream's field paths and messages (used when a CRD is created or updated).
//! - [`validate`] — OpenAPI v3 validation of a custom resource as kube-openapi's validator does
//!   it, reported as `apiextensions-apiserver` turns those results into field errors, plus the
//!   embedded-resource checks (`x-kubernetes-embedded-resource`).
//! - [`prune`] — removal of unknown fields; returns their paths for `unknown field "…"`.
//! - [`default`] — `default`s applied as upstream's structural defaulting.
//! - [`Structural::list_semantics`] — list type, map keys and map type at a path (server-side
//!   apply).
//!
//! Pure functions over `serde_json::Value`; nothing here touches storage or HTTP.

mod default;
mod format;
mod gofmt;
mod meta;
mod prune;
mod structural;
mod validate;

use std::collections::BTreeMap;

use serde_json::Value;

pub use default::default;
pub use prune::prune;
pub use structural::structural_errors;
pub use validate::validate;

/// A structural schema node: one `JSONSchemaProps` of a CRD's `openAPIV3Schema`.
///
/// Parsing is lenient (a malformed keyword is ignored); [`structural_errors`] is what reports
/// malformed schemas. `allOf`/`anyOf`/`oneOf`/`not` are parsed into the same type and only used
/// for value validation, as upstream.
#[derive(Debug, Clone, Default)]
pub struct Structural {
    /// `type` (`object`, `array`, `string`, `integer`, `number`, `boolean`), empty when unset.
    pub type_: String,
    /// `format`, as written (`date-time`, `int32`, …).
    pub format: String,
    /// `description`.
    pub description: String,
    /// `nullable`.
    pub nullable: bool,
    /// `default`, when set (a JSON `null` default counts as unset, as upstream).
    pub default: Option<Value>,
    /// `properties`.
    pub properties: BTreeMap<String, Structural>,
    /// `additionalProperties` (a boolean or a schema).
    pub additional_properties: Option<AdditionalProperties>,
    /// `items` (only the single-schema form).
    pub items: Option<Box<Structural>>,
    /// `required`.
    pub required: Vec<String>,
    /// `enum`.
    pub enum_: Option<Vec<Value>>,
    /// `pattern`, compiled (`None` when unset or when it does not compile).
    pub pattern: Option<Pattern>,
    /// `minimum`.
    pub minimum: Option<f64>,
    /// `exclusiveMinimum`.
    pub exclusive_minimum: bool,
    /// `maximum`.
    pub maximum: Option<f64>,
    /// `exclusiveMaximum`.
    pub exclusive_maximum: bool,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
    /// `minLength` (in characters).
    pub min_length: Option<i64>,
    /// `maxLength` (in characters).
    pub max_length: Option<i64>,
    /// `minItems`.
    pub min_items: Option<i64>,
    /// `maxItems`.
    pub max_items: Option<i64>,
    /// `uniqueItems`.
    pub unique_items: bool,
    /// `minProperties`.
    pub min_properties: Option<i64>,
    /// `maxProperties`.
    pub max_properties: Option<i64>,
    /// `allOf` (value validation only).
    pub all_of: Vec<Structural>,
    /// `anyOf` (value validation only).
    pub any_of: Vec<Structural>,
    /// `oneOf` (value validation only).
    pub one_of: Vec<Structural>,
    /// `not` (value validation only).
    pub not: Option<Box<Structural>>,
    /// `x-kubernetes-preserve-unknown-fields`.
    pub x_preserve_unknown_fields: bool,
    /// `x-kubernetes-embedded-resource`.
    pub x_embedded_resource: bool,
    /// `x-kubernetes-int-or-string`.
    pub x_int_or_string: bool,
    /// `x-kubernetes-list-type` (`atomic`, `set`, `map`).
    pub x_list_type: Option<String>,
    /// `x-kubernetes-list-map-keys`.
    pub x_list_map_keys: Vec<String>,
    /// `x-kubernetes-map-type` (`atomic`, `granular`).
    pub x_map_type: Option<String>,
    /// `x-kubernetes-validations`, the raw rules (evaluated by the CEL step).
    pub x_validations: Vec<Value>,
}

/// `additionalProperties`: `true`/`false`, or a schema for every value.
#[derive(Debug, Clone)]
pub enum AdditionalProperties {
    /// `additionalProperties: true|false`.
    Bool(bool),
    /// `additionalProperties: {…}`.
    Schema(Box<Structural>),
}

/// A compiled `pattern` with its source text.
#[derive(Debug, Clone)]
pub struct Pattern {
    /// The pattern as written in the schema.
    pub source: String,
    /// The compiled expression (Go's RE2 syntax is a subset of the `regex` crate's).
    pub regex: regex::Regex,
}

/// One step of a path into a schema, for [`Structural::list_semantics`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathStep<'a> {
    /// An object field (a property, or any key of a map with `additionalProperties`).
    Field(&'a str),
    /// Any element of a list.
    Item,
}

/// How server-side apply merges the value at a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ListSemantics<'a> {
    /// `x-kubernetes-list-type`; `None` means upstream's default (`atomic`).
    pub list_type: Option<&'a str>,
    /// `x-kubernetes-list-map-keys` (for `list_type == Some("map")`).
    pub list_map_keys: &'a [String],
    /// `x-kubernetes-map-type`; `None` means upstream's default (`granular`).
    pub map_type: Option<&'a str>,
}

impl Structural {
    /// Parses a `JSONSchemaProps` (a CRD version's `schema.openAPIV3Schema`). Anything that is
    /// not an object gives an empty schema.
    pub fn new(schema: &Value) -> Structural {
        let Some(o) = schema.as_object() else {
            return Structural::default();
        };
        let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let b = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
        let f = |k: &str| o.get(k).and_then(Value::as_f64);
        let i = |k: &str| o.get(k).and_then(as_int);
        let list = |k: &str| -> Vec<Structural> {
            o.get(k)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Structural::new).collect())
                .unwrap_or_default()
        };
        let strings = |k: &str| -> Vec<String> {
            o.get(k)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let pattern = o.get("pattern").and_then(Value::as_str).and_then(|p| {
            regex::Regex::new(p).ok().map(|regex| Pattern {
                source: p.to_owned(),
                regex,
            })
        });
        Structural {
            type_: s("type"),
            format: s("format"),
            description: s("description"),
            nullable: b("nullable"),
            default: o.get("default").filter(|v| !v.is_null()).cloned(),
            properties: o
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| {
                    p.iter()
                        .map(|(k, v)| (k.clone(), Structural::new(v)))
                        .collect()
                })
                .unwrap_or_default(),
            additional_properties: match o.get("additionalProperties") {
                Some(Value::Bool(b)) => Some(AdditionalProperties::Bool(*b)),
                Some(v @ Value::Object(_)) => {
                    Some(AdditionalProperties::Schema(Box::new(Structural::new(v))))
                }
                _ => None,
            },
            items: o
                .get("items")
                .filter(|v| v.is_object())
                .map(|v| Box::new(Structural::new(v))),
            required: strings("required"),
            enum_: o.get("enum").and_then(Value::as_array).cloned(),
            pattern,
            minimum: f("minimum"),
            exclusive_minimum: b("exclusiveMinimum"),
            maximum: f("maximum"),
            exclusive_maximum: b("exclusiveMaximum"),
            multiple_of: f("multipleOf"),
            min_length: i("minLength"),
            max_length: i("maxLength"),
            min_items: i("minItems"),
            max_items: i("maxItems"),
            unique_items: b("uniqueItems"),
            min_properties: i("minProperties"),
            max_properties: i("maxProperties"),
            all_of: list("allOf"),
            any_of: list("anyOf"),
            one_of: list("oneOf"),
            not: o
                .get("not")
                .filter(|v| v.is_object())
                .map(|v| Box::new(Structural::new(v))),
            x_preserve_unknown_fields: b("x-kubernetes-preserve-unknown-fields"),
            x_embedded_resource: b("x-kubernetes-embedded-resource"),
            x_int_or_string: b("x-kubernetes-int-or-string"),
            x_list_type: o
                .get("x-kubernetes-list-type")
                .and_then(Value::as_str)
                .map(str::to_owned),
            x_list_map_keys: strings("x-kubernetes-list-map-keys"),
            x_map_type: o
                .get("x-kubernetes-map-type")
                .and_then(Value::as_str)
                .map(str::to_owned),
            x_validations: o
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
        }
    }

    /// The schema of field `key` of an object of this schema: its property, else the
    /// `additionalProperties` schema.
    pub fn field(&self, key: &str) -> Option<&Structural> {
        self.properties
            .get(key)
            .or(match &self.additional_properties {
                Some(AdditionalProperties::Schema(s)) => Some(s),
                _ => None,
            })
    }

    /// The schema at `path` below this one, if the schema describes it.
    pub fn at(&self, path: &[PathStep<'_>]) -> Option<&Structural> {
        let mut s = self;
        for step in path {
            s = match step {
                PathStep::Field(k) => s.field(k)?,
                PathStep::Item => s.items.as_deref()?,
            };
        }
        Some(s)
    }

    /// List type, list map keys and map type of the value at `path` (`None` when the schema
    /// does not describe that path).
    pub fn list_semantics(&self, path: &[PathStep<'_>]) -> Option<ListSemantics<'_>> {
        let s = self.at(path)?;
        Some(ListSemantics {
            list_type: s.x_list_type.as_deref(),
            list_map_keys: &s.x_list_map_keys,
            map_type: s.x_map_type.as_deref(),
        })
    }

    /// The `additionalProperties` schema, if it is one.
    fn additional_schema(&self) -> Option<&Structural> {
        match &self.additional_properties {
            Some(AdditionalProperties::Schema(s)) => Some(s),
            _ => None,
        }
    }
}

/// An integer keyword (`minLength: 3`, also written `3.0`).
fn as_int(v: &Value) -> Option<i64> {
    v.as_i64().or_else(|| {
        v.as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.2e18)
            .map(|f| f as i64)
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn list_semantics_follow_properties_items_and_additional_properties() {
        let s = Structural::new(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "properties": {
                "ports": {"type": "array", "x-kubernetes-list-type": "map",
                          "x-kubernetes-list-map-keys": ["port", "protocol"],
                          "items": {"type": "object", "properties": {
                              "labels": {"type": "object", "x-kubernetes-map-type": "atomic",
                                         "additionalProperties": {"type": "string"}}}}},
                "tags": {"type": "object", "additionalProperties": {
                    "type": "array", "x-kubernetes-list-type": "set",
                    "items": {"type": "string"}}}}}}
        }));
        let ports = s
            .list_semantics(&[PathStep::Field("spec"), PathStep::Field("ports")])
            .unwrap();
        assert_eq!(ports.list_type, Some("map"));
        assert_eq!(ports.list_map_keys, ["port", "protocol"]);
        let labels = s
            .list_semantics(&[
                PathStep::Field("spec"),
                PathStep::Field("ports"),
                PathStep::Item,
                PathStep::Field("labels"),
            ])
            .unwrap();
        assert_eq!(labels.map_type, Some("atomic"));
        assert_eq!(labels.list_type, None);
        let tag = s
            .list_semantics(&[
                PathStep::Field("spec"),
                PathStep::Field("tags"),
                PathStep::Field("anything"),
            ])
            .unwrap();
        assert_eq!(tag.list_type, Some("set"));
        assert!(
            s.list_semantics(&[PathStep::Field("spec"), PathStep::Field("nope")])
                .is_none()
        );
    }

    #[test]
    fn parsing_keeps_every_keyword() {
        let s = Structural::new(&json!({
            "type": "string", "format": "date-time", "nullable": true, "default": "x",
            "enum": ["x", "y"], "pattern": "^x", "minLength": 1, "maxLength": 3.0,
            "x-kubernetes-validations": [{"rule": "self.size() > 0"}]
        }));
        assert_eq!(s.type_, "string");
        assert_eq!(s.format, "date-time");
        assert!(s.nullable);
        assert_eq!(s.default, Some(json!("x")));
        assert_eq!(s.enum_.as_ref().map(Vec::len), Some(2));
        assert_eq!(s.pattern.as_ref().map(|p| p.source.as_str()), Some("^x"));
        assert_eq!((s.min_length, s.max_length), (Some(1), Some(3)));
        assert_eq!(s.x_validations.len(), 1);
    }
}
