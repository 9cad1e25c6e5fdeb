//! The rules a CRD version's `openAPIV3Schema` must follow when a v1 CRD is created
//! (upstream's `apis/apiextensions/validation.validateCustomResourceDefinitionValidation` with
//! the options of a create: structural schema required, defaults allowed and required to be
//! pruned, valid property types, atomic set items, map-list keys rules):
//!
//! 1. `nullable` at the root, and the root fields allowed with a status subresource;
//! 2. the structural-schema invariants (`schema/validation.go`, sorted as upstream sorts them);
//! 3. when those pass, every `default` (pruned-equal, embedded metadata, value validation);
//! 4. the OpenAPI schema rules (`ValidateCustomResourceDefinitionOpenAPISchema`): unsupported
//!    keywords, `uniqueItems`, `additionalProperties` with `properties`, `x-kubernetes-*`
//!    rules, the static checks of `x-kubernetes-validations` (CEL compilation is a later step).
//!
//! Works on the raw JSON, since several rules are about what is written (a `title` inside
//! `allOf`, `x-kubernetes-preserve-unknown-fields: false`).

use serde_json::{Map, Value};

use super::gofmt::{self, bad_value, quote};
use super::{Structural, meta, prune, validate};
use crate::error::FieldError;

/// Every problem of `schema`, a CRD version's `openAPIV3Schema`. `at` is the field path of the
/// object holding it (`spec.versions[0].schema` for v1, `spec.validation` for v1beta1's
/// top-level schema); errors read `spec.versions[0].schema.openAPIV3Schema.properties[spec].type:
/// Required value: must not be empty for specified object fields`. `status_subresource` says
/// whether the version has the status subresource (it restricts the root).
pub fn structural_errors(schema: &Value, at: &str, status_subresource: bool) -> Vec<FieldError> {
    let root = format!("{at}.openAPIV3Schema");
    let mut errs = Vec::new();
    let Some(o) = schema.as_object() else {
        return errs;
    };
    if status_subresource {
        root_with_status(&mut errs, o, &root);
    }
    if o.get("nullable") == Some(&Value::Bool(true)) {
        errs.push(gofmt::forbidden(
            &format!("{root}.nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut invariants = Vec::new();
    structural_invariants(&mut invariants, o, Level::Root, &root);
    value_validation_completeness(&mut invariants, o, o, &root, &root);
    invariants.sort_by_key(|e| format!("{}: {}", e.field, e.message));
    if invariants.is_empty() {
        let mut root_s = Structural::new(schema);
        root_s.x_embedded_resource = true;
        defaults(&mut errs, &root_s, &root, false);
    } else {
        errs.extend(invariants);
    }
    let ssv = Ssv {
        allow_defaults: true,
        disallow_reason: String::new(),
        inside_meta: false,
    };
    openapi_schema(&mut errs, schema, &root, &ssv, true);
    errs
}

// ---- 1. the root with a status subresource ----

/// JSON names of `allowedFieldsAtRootSchema`.
const ALLOWED_AT_ROOT: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
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
    "required",
    "items",
    "properties",
    "externalDocs",
    "example",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-validations",
];

/// Go's printing of `allowedFieldsAtRootSchema` (`%v` of a `[]string`).
const ALLOWED_AT_ROOT_GO: &str = "[Description Type Format Title Maximum ExclusiveMaximum Minimum ExclusiveMinimum MaxLength MinLength Pattern MaxItems MinItems UniqueItems MultipleOf Required Items Properties ExternalDocs Example XPreserveUnknownFields XValidations]";

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        Value::Number(_) => false,
    }
}

fn root_with_status(errs: &mut Vec<FieldError>, o: &Map<String, Value>, root: &str) {
    for (k, v) in o {
        if is_zero(v) {
            continue;
        }
        if k == "type" {
            if v.as_str() != Some("object") {
                errs.push(gofmt::invalid(
                    &format!("{root}.type"),
                    &bad_value(v),
                    r#"only "object" is allowed as the type at the root of the schema if the status subresource is enabled"#,
                ));
                return;
            }
            continue;
        }
        if !ALLOWED_AT_ROOT.contains(&k.as_str()) {
            errs.push(gofmt::invalid(
                root,
                &bad_value(&Value::Object(o.clone())),
                &format!(
                    "only {ALLOWED_AT_ROOT_GO} fields are allowed at the root of the schema if the status subresource is enabled"
                ),
            ));
            return;
        }
    }
}

// ---- 2. structural invariants ----

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

fn str_of<'a>(o: &'a Map<String, Value>, k: &str) -> &'a str {
    o.get(k).and_then(Value::as_str).unwrap_or("")
}

fn flag(o: &Map<String, Value>, k: &str) -> bool {
    o.get(k) == Some(&Value::Bool(true))
}

fn obj<'a>(o: &'a Map<String, Value>, k: &str) -> Option<&'a Map<String, Value>> {
    o.get(k).and_then(Value::as_object)
}

fn props(o: &Map<String, Value>) -> Vec<(&String, &Map<String, Value>)> {
    let mut v: Vec<_> = obj(o, "properties")
        .map(|p| {
            p.iter()
                .filter_map(|(k, v)| v.as_object().map(|o| (k, o)))
                .collect()
        })
        .unwrap_or_default();
    v.sort_by(|a, b| a.0.cmp(b.0));
    v
}

fn key(path: &str, k: &str) -> String {
    format!("{path}.properties[{k}]")
}

fn structural_invariants(
    errs: &mut Vec<FieldError>,
    o: &Map<String, Value>,
    lvl: Level,
    path: &str,
) {
    let ty = str_of(o, "type");
    let items = obj(o, "items");
    if ty == "array" && items.is_none() {
        errs.push(gofmt::required(
            &format!("{path}.items"),
            "must be specified",
        ));
    }
    if let Some(items) = items {
        structural_invariants(errs, items, Level::Item, &format!("{path}.items"));
    }
    for (k, p) in props(o) {
        structural_invariants(errs, p, Level::Field, &key(path, k));
    }
    if let Some(add) = o.get("additionalProperties") {
        if lvl == Level::Root {
            errs.push(gofmt::forbidden(
                &format!("{path}.additionalProperties"),
                "must not be used at the root",
            ));
        }
        if let Some(add) = add.as_object() {
            structural_invariants(
                errs,
                add,
                Level::Field,
                &format!("{path}.additionalProperties"),
            );
        }
    }
    let int_or_string = flag(o, "x-kubernetes-int-or-string");
    let preserve = flag(o, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(o, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(gofmt::invalid(
            &format!("{path}.x-kubernetes-preserve-unknown-fields"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(gofmt::invalid(
            &format!("{path}.x-kubernetes-embedded-resource"),
            "true",
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(o.get("anyOf"));
    let skip_first_all_of_any_of = o
        .get("allOf")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
        .and_then(Value::as_object)
        .is_some_and(|first| is_int_or_string_any_of(first.get("anyOf")));
    value_validation(errs, o, skip_any_of, skip_first_all_of_any_of, path);
    let check_metadata = lvl == Level::Root || embedded;
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(gofmt::required(
                &format!("{path}.type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(gofmt::invalid(
                &format!("{path}.type"),
                &quote(ty),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(gofmt::required(&format!("{path}.type"), detail));
    }
    if embedded && o.contains_key("additionalProperties") {
        errs.push(gofmt::forbidden(
            &format!("{path}.additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(gofmt::invalid(
            &format!("{path}.type"),
            &quote(ty),
            "must be object at the root",
        ));
    }
    let properties = obj(o, "properties");
    for field in ["kind", "apiVersion"] {
        if let Some(p) = properties.and_then(|p| obj(p, field))
            && check_metadata
            && str_of(p, "type") != "string"
        {
            errs.push(gofmt::invalid(
                &format!("{}.type", key(path, field)),
                &quote(str_of(p, "type")),
                "must be string",
            ));
        }
    }
    if let Some(m) = properties.and_then(|p| obj(p, "metadata")) {
        let mpath = key(path, "metadata");
        if check_metadata && str_of(m, "type") != "object" {
            errs.push(gofmt::invalid(
                &format!("{mpath}.type"),
                &quote(str_of(m, "type")),
                "must be object",
            ));
        }
        if lvl == Level::Root && !metadata_is_implicit(m) {
            errs.push(gofmt::forbidden(
                &mpath,
                "must not specify anything other than name and generateName, but metadata is implicitly specified",
            ));
        }
    }
    if embedded && !preserve && properties.is_none_or(Map::is_empty) {
        errs.push(gofmt::required(
            &format!("{path}.properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// The root's `metadata` schema may only have `type`, a `default` (refused elsewhere) and
/// properties `name` and/or `generateName`.
fn metadata_is_implicit(m: &Map<String, Value>) -> bool {
    m.iter().all(|(k, v)| match k.as_str() {
        "type" | "default" => true,
        "properties" => v
            .as_object()
            .is_some_and(|p| p.is_empty() || p.keys().all(|k| k == "name" || k == "generateName")),
        _ => is_zero(v),
    })
}

/// `anyOf: [{type: integer}, {type: string}]`, the int-or-string pattern.
fn is_int_or_string_any_of(v: Option<&Value>) -> bool {
    let Some(a) = v.and_then(Value::as_array) else {
        return false;
    };
    let only_type = |v: &Value, t: &str| {
        v.as_object()
            .is_some_and(|o| o.len() == 1 && o.get("type").and_then(Value::as_str) == Some(t))
    };
    a.len() == 2 && only_type(&a[0], "integer") && only_type(&a[1], "string")
}

fn value_validation(
    errs: &mut Vec<FieldError>,
    o: &Map<String, Value>,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &str,
) {
    let list = |k: &str| -> Vec<&Map<String, Value>> {
        o.get(k)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_object).collect())
            .unwrap_or_default()
    };
    if !skip_any_of {
        for (i, v) in list("anyOf").into_iter().enumerate() {
            nested(errs, v, false, &format!("{path}.anyOf[{i}]"));
        }
    }
    for (i, v) in list("allOf").into_iter().enumerate() {
        nested(
            errs,
            v,
            skip_first_all_of_any_of && i == 0,
            &format!("{path}.allOf[{i}]"),
        );
    }
    for (i, v) in list("oneOf").into_iter().enumerate() {
        nested(errs, v, false, &format!("{path}.oneOf[{i}]"));
    }
    if let Some(not) = obj(o, "not") {
        nested(errs, not, false, &format!("{path}.not"));
    }
    if let Some(p) = o.get("pattern").and_then(Value::as_str)
        && !p.is_empty()
        && let Err(e) = regex::Regex::new(p)
    {
        errs.push(gofmt::invalid(
            &format!("{path}.pattern"),
            &quote(p),
            &format!(
                "must be a valid regular expression, but isn't: error parsing regexp: {}: `{p}`",
                e.to_string()
                    .lines()
                    .last()
                    .unwrap_or("")
                    .trim()
                    .trim_start_matches("error: ")
            ),
        ));
    }
}

/// A schema inside `allOf`/`anyOf`/`oneOf`/`not`: value validations only.
fn nested(errs: &mut Vec<FieldError>, o: &Map<String, Value>, skip_any_of: bool, path: &str) {
    value_validation(errs, o, skip_any_of, false, path);
    if let Some(items) = obj(o, "items") {
        nested(errs, items, false, &format!("{path}.items"));
    }
    for (k, p) in props(o) {
        nested(errs, p, false, &key(path, k));
    }
    let f = |k: &str| format!("{path}.{k}");
    if !str_of(o, "type").is_empty() {
        errs.push(gofmt::forbidden(
            &f("type"),
            "must be empty to be structural",
        ));
    }
    if o.contains_key("additionalProperties") {
        errs.push(gofmt::forbidden(
            &f("additionalProperties"),
            "must be undefined to be structural",
        ));
    }
    if o.get("default").is_some_and(|d| !d.is_null()) {
        errs.push(gofmt::forbidden(
            &f("default"),
            "must be undefined to be structural",
        ));
    }
    for k in ["title", "description"] {
        if !str_of(o, k).is_empty() {
            errs.push(gofmt::forbidden(&f(k), "must be empty to be structural"));
        }
    }
    if flag(o, "nullable") {
        errs.push(gofmt::forbidden(
            &f("nullable"),
            "must be false to be structural",
        ));
    }
    for k in [
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-int-or-string",
    ] {
        if flag(o, k) {
            errs.push(gofmt::forbidden(&f(k), "must be false to be structural"));
        }
    }
    if o.get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        errs.push(gofmt::forbidden(
            &f("x-kubernetes-list-map-keys"),
            "must be empty to be structural",
        ));
    }
    for k in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if o.get(k).is_some_and(|v| !v.is_null()) {
            errs.push(gofmt::forbidden(
                &f(k),
                "must be undefined to be structural",
            ));
        }
    }
    if o.get("x-kubernetes-validations")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        errs.push(gofmt::forbidden(
            &f("x-kubernetes-validations"),
            "must be empty to be structural",
        ));
    }
    if obj(o, "properties").is_some_and(|p| p.contains_key("metadata")) {
        errs.push(gofmt::forbidden(
            &key(path, "metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// Upstream's `validateStructuralCompleteness` (run on the root only, as upstream): every
/// property and items a value validation mentions must be specified structurally.
fn value_validation_completeness(
    errs: &mut Vec<FieldError>,
    v: &Map<String, Value>,
    s: &Map<String, Value>,
    s_path: &str,
    v_path: &str,
) {
    if let Some(not) = obj(v, "not") {
        nested_completeness(errs, not, Some(s), s_path, &format!("{v_path}.not"));
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        if let Some(a) = v.get(k).and_then(Value::as_array) {
            for (i, x) in a.iter().enumerate() {
                if let Some(x) = x.as_object() {
                    nested_completeness(errs, x, Some(s), s_path, &format!("{v_path}.{k}[{i}]"));
                }
            }
        }
    }
}

fn nested_completeness(
    errs: &mut Vec<FieldError>,
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
) {
    let Some(s) = s else {
        errs.push(gofmt::required(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    value_validation_completeness(errs, v, s, s_path, v_path);
    if let Some(items) = obj(v, "items") {
        nested_completeness(
            errs,
            items,
            obj(s, "items"),
            &format!("{s_path}.items"),
            &format!("{v_path}.items"),
        );
    }
    let s_props = obj(s, "properties");
    for (k, p) in props(v) {
        match s_props.and_then(|sp| obj(sp, k)) {
            None => errs.push(gofmt::required(
                &key(s_path, k),
                &format!("because it is defined in {}", key(v_path, k)),
            )),
            Some(sp) => nested_completeness(errs, p, Some(sp), &key(s_path, k), &key(v_path, k)),
        }
    }
}

// ---- 3. defaults ----

/// Upstream's `defaulting.ValidateDefaults` (without CEL rules and without the metadata
/// coercion of defaults inside `metadata`, which the OpenAPI rules refuse at the root).
fn defaults(errs: &mut Vec<FieldError>, s: &Structural, path: &str, inside_meta: bool) {
    let inside_meta = inside_meta && !s.x_embedded_resource;
    if let Some(d) = &s.default
        && !inside_meta
    {
        let dpath = format!("{path}.default");
        let mut pruned = d.clone();
        prune::prune_value(&mut pruned, s, s.x_embedded_resource);
        if &pruned != d {
            errs.push(gofmt::invalid(
                &dpath,
                &bad_value(d),
                "must not have unknown fields",
            ));
        }
        let meta_errs = meta::validate_embedded_under(s, d, &dpath, s.x_embedded_resource);
        if !meta_errs.is_empty() {
            errs.extend(meta_errs);
        } else {
            errs.extend(validate::validate_under(s, d, &dpath));
        }
    }
    if let Some(items) = &s.items {
        defaults(errs, items, &format!("{path}.items"), inside_meta);
    }
    for (k, p) in &s.properties {
        let sub_meta = inside_meta
            || (s.x_embedded_resource && matches!(k.as_str(), "metadata" | "apiVersion" | "kind"));
        defaults(errs, p, &key(path, k), sub_meta);
    }
}

// ---- 4. OpenAPI schema rules ----

/// Upstream's `specStandardValidatorV3` state.
#[derive(Clone)]
struct Ssv {
    allow_defaults: bool,
    disallow_reason: String,
    inside_meta: bool,
}

impl Ssv {
    fn forbid_defaults(&self, reason: &str) -> Ssv {
        Ssv {
            allow_defaults: false,
            disallow_reason: reason.to_owned(),
            inside_meta: self.inside_meta,
        }
    }
}

const OPENAPI_V3_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];

fn standard(errs: &mut Vec<FieldError>, o: &Map<String, Value>, path: &str, ssv: &Ssv) {
    let f = |k: &str| format!("{path}.{k}");
    let ty = str_of(o, "type");
    if !ty.is_empty() && !OPENAPI_V3_TYPES.contains(&ty) {
        let supported: Vec<String> = OPENAPI_V3_TYPES.iter().map(|s| (*s).to_owned()).collect();
        errs.push(gofmt::not_supported(&f("type"), &quote(ty), &supported));
    }
    if o.get("default").is_some_and(|d| !d.is_null()) && !ssv.allow_defaults {
        let mut detail = "must not be set".to_owned();
        if !ssv.disallow_reason.is_empty() {
            detail.push(' ');
            detail.push_str(&ssv.disallow_reason);
        }
        errs.push(gofmt::forbidden(&f("default"), &detail));
    }
    if !str_of(o, "id").is_empty() {
        errs.push(gofmt::forbidden(&f("id"), "id is not supported"));
    }
    if o.get("additionalItems").is_some_and(|v| !v.is_null()) {
        errs.push(gofmt::forbidden(
            &f("additionalItems"),
            "additionalItems is not supported",
        ));
    }
    for k in ["patternProperties", "definitions"] {
        if obj(o, k).is_some_and(|m| !m.is_empty()) {
            errs.push(gofmt::forbidden(&f(k), &format!("{k} is not supported")));
        }
    }
    if o.get("dependencies").is_some_and(|v| !v.is_null()) {
        errs.push(gofmt::forbidden(
            &f("dependencies"),
            "dependencies is not supported",
        ));
    }
    if o.get("$ref").is_some_and(|v| !v.is_null()) {
        errs.push(gofmt::forbidden(&f("$ref"), "$ref is not supported"));
    }
    if ty == "null" {
        errs.push(gofmt::forbidden(
            &f("type"),
            "type cannot be set to null, use nullable as an alternative",
        ));
    }
    if o.get("items")
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
    {
        errs.push(gofmt::forbidden(
            &f("items"),
            "items must be a schema object and not an array",
        ));
    }
    if ssv.inside_meta && flag(o, "x-kubernetes-embedded-resource") {
        errs.push(gofmt::forbidden(
            &f("x-kubernetes-embedded-resource"),
            "must not be used inside of resource meta",
        ));
    }
}

fn go_string_slice(v: &[&str]) -> String {
    let q: Vec<String> = v.iter().map(|s| quote(s)).collect();
    format!("[]string{{{}}}", q.join(", "))
}

fn openapi_schema(errs: &mut Vec<FieldError>, v: &Value, path: &str, ssv: &Ssv, is_root: bool) {
    let Some(o) = v.as_object() else { return };
    let f = |k: &str| format!("{path}.{k}");
    standard(errs, o, path, ssv);
    if flag(o, "uniqueItems") {
        errs.push(gofmt::forbidden(
            &f("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let properties = props(o);
    if let Some(add) = o.get("additionalProperties") {
        if !properties.is_empty() && (add == &Value::Bool(false) || add.is_object()) {
            errs.push(gofmt::forbidden(
                &f("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if ssv.inside_meta {
            ssv.forbid_defaults("inside additionalProperties applying to object metadata")
        } else {
            ssv.clone()
        };
        openapi_schema(errs, add, &f("additionalProperties"), &sub, false);
    }
    let embedded = flag(o, "x-kubernetes-embedded-resource");
    for (k, p) in &properties {
        let mut sub = ssv.clone();
        if (is_root || embedded) && matches!(k.as_str(), "metadata" | "kind" | "apiVersion") {
            sub.inside_meta = true;
            if is_root {
                sub = sub.forbid_defaults(&format!("in top-level {k}"));
            }
        }
        openapi_schema(
            errs,
            &Value::Object((*p).clone()),
            &key(path, k),
            &sub,
            false,
        );
    }
    if let Some(not) = o.get("not") {
        openapi_schema(errs, not, &f("not"), ssv, false);
    }
    for k in ["allOf", "oneOf", "anyOf"] {
        if let Some(a) = o.get(k).and_then(Value::as_array) {
            for (i, x) in a.iter().enumerate() {
                openapi_schema(errs, x, &format!("{path}.{k}[{i}]"), ssv, false);
            }
        }
    }
    if let Some(defs) = obj(o, "definitions") {
        for (k, x) in defs {
            openapi_schema(errs, x, &format!("{path}.definitions[{k}]"), ssv, false);
        }
    }
    match o.get("items") {
        Some(items @ Value::Object(_)) => openapi_schema(errs, items, &f("items"), ssv, false),
        Some(Value::Array(a)) => {
            for (i, x) in a.iter().enumerate() {
                openapi_schema(errs, x, &format!("{path}.items[{i}]"), ssv, false);
            }
        }
        _ => {}
    }
    if let Some(deps) = obj(o, "dependencies") {
        for (k, x) in deps {
            if x.is_object() {
                openapi_schema(errs, x, &format!("{path}.dependencies[{k}]"), ssv, false);
            }
        }
    }
    list_and_map_rules(errs, o, path);
    validation_rules(errs, o, path);
}

fn list_and_map_rules(errs: &mut Vec<FieldError>, o: &Map<String, Value>, path: &str) {
    let f = |k: &str| format!("{path}.{k}");
    let ty = str_of(o, "type");
    if o.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(gofmt::invalid(
            &f("x-kubernetes-preserve-unknown-fields"),
            "false",
            "must be true or undefined",
        ));
    }
    let map_type = o.get("x-kubernetes-map-type").and_then(Value::as_str);
    if let Some(mt) = map_type {
        if ty != "object" {
            if ty.is_empty() {
                errs.push(gofmt::required(
                    &f("type"),
                    "must be object if x-kubernetes-map-type is specified",
                ));
            } else {
                errs.push(gofmt::invalid(
                    &f("type"),
                    &quote(ty),
                    "must be object if x-kubernetes-map-type is specified",
                ));
            }
        }
        if mt != "atomic" && mt != "granular" {
            errs.push(gofmt::not_supported(
                &f("x-kubernetes-map-type"),
                &quote(mt),
                &["atomic".to_owned(), "granular".to_owned()],
            ));
        }
    }
    let list_type = o.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = obj(o, "items");
    if let Some(lt) = list_type {
        if ty != "array" {
            if ty.is_empty() {
                errs.push(gofmt::required(
                    &f("type"),
                    "must be array if x-kubernetes-list-type is specified",
                ));
            } else {
                errs.push(gofmt::invalid(
                    &f("type"),
                    &quote(ty),
                    "must be array if x-kubernetes-list-type is specified",
                ));
            }
        } else if lt == "set"
            && let Some(is) = items
        {
            let item_list_type = is.get("x-kubernetes-list-type").and_then(Value::as_str);
            let shown = item_list_type.map_or_else(|| quote("null"), quote);
            match str_of(is, "type") {
                "array" if item_list_type.is_some_and(|t| t != "atomic") => {
                    errs.push(gofmt::invalid(
                        &format!("{path}.items.x-kubernetes-list-type"),
                        &shown,
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    ));
                }
                "object"
                    if is.get("x-kubernetes-map-type").and_then(Value::as_str)
                        != Some("atomic") =>
                {
                    errs.push(gofmt::invalid(
                        &format!("{path}.items.x-kubernetes-map-type"),
                        &shown,
                        "must be atomic as item of a list with x-kubernetes-list-type=set",
                    ));
                }
                _ => {}
            }
        }
        if !matches!(lt, "atomic" | "set" | "map") {
            errs.push(gofmt::not_supported(
                &f("x-kubernetes-list-type"),
                &quote(lt),
                &["atomic".to_owned(), "set".to_owned(), "map".to_owned()],
            ));
        }
    }
    let map_keys: Vec<&str> = o
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !map_keys.is_empty() {
        match list_type {
            None => errs.push(gofmt::required(
                &f("x-kubernetes-list-type"),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            Some(lt) if lt != "map" => errs.push(gofmt::invalid(
                &f("x-kubernetes-list-type"),
                &quote(lt),
                "must be map if x-kubernetes-list-map-keys is non-empty",
            )),
            _ => {}
        }
    }
    if list_type == Some("map") {
        if map_keys.is_empty() {
            errs.push(gofmt::required(
                &f("x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match o.get("items") {
            None | Some(Value::Null) => errs.push(gofmt::required(
                &f("items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(Value::Array(a)) => errs.push(gofmt::invalid(
                &f("items"),
                &bad_value(&Value::Array(a.clone())),
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            _ => {}
        }
        if let Some(is) = items {
            let ity = str_of(is, "type");
            if ity != "object" {
                errs.push(gofmt::invalid(
                    &format!("{path}.items.type"),
                    &quote(ity),
                    "must be object if parent array's x-kubernetes-list-type is map",
                ));
            } else {
                let item_props = obj(is, "properties");
                let mut seen: Vec<&str> = Vec::new();
                for k in &map_keys {
                    match item_props.and_then(|p| obj(p, k)) {
                        Some(kp) => {
                            if matches!(str_of(kp, "type"), "array" | "object") {
                                errs.push(gofmt::invalid(
                                    &format!("{}.type", key(&format!("{path}.items"), k)),
                                    &quote(ity),
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                ));
                            }
                        }
                        None => errs.push(gofmt::invalid(
                            &f("x-kubernetes-list-map-keys"),
                            &go_string_slice(&map_keys),
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(k) {
                        errs.push(gofmt::invalid(
                            &f("x-kubernetes-list-map-keys"),
                            &go_string_slice(&map_keys),
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(k);
                }
            }
        }
    }
    // validateMapListKeysMapSet
    if let (Some(is), Some(lt @ ("set" | "map"))) = (items, list_type) {
        if flag(is, "nullable") {
            errs.push(gofmt::forbidden(
                &format!("{path}.items.nullable"),
                &format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
            ));
        }
        if lt == "map" {
            let required: Vec<&str> = is
                .get("required")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let item_props = obj(is, "properties");
            for k in &map_keys {
                let Some(kp) = item_props.and_then(|p| obj(p, k)) else {
                    continue;
                };
                let kpath = key(&format!("{path}.items"), k);
                if !required.contains(k) && kp.get("default").is_none_or(Value::is_null) {
                    errs.push(gofmt::required(
                        &format!("{kpath}.default"),
                        "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
                    ));
                }
                if flag(kp, "nullable") {
                    errs.push(gofmt::forbidden(
                        &format!("{kpath}.nullable"),
                        "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
                    ));
                }
            }
        }
    }
}

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// The static checks of `x-kubernetes-validations` (compiling the rules is the CEL step's).
fn validation_rules(errs: &mut Vec<FieldError>, o: &Map<String, Value>, path: &str) {
    let Some(rules) = o.get("x-kubernetes-validations").and_then(Value::as_array) else {
        return;
    };
    for (i, rule) in rules.iter().enumerate() {
        let r = rule.as_object();
        let get = |k: &str| {
            r.and_then(|r| r.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
        };
        let p = |k: &str| format!("{path}.x-kubernetes-validations[{i}].{k}");
        let (rule_text, message, message_expr, field_path) = (
            get("rule"),
            get("message"),
            get("messageExpression"),
            get("fieldPath"),
        );
        if rule_text.trim().is_empty() {
            errs.push(gofmt::required(&p("rule"), "rule is not specified"));
        } else if !message.is_empty() && message.trim().is_empty() {
            errs.push(gofmt::invalid(
                &p("message"),
                &quote(message),
                "message must be non-empty if specified",
            ));
        } else if has_newlines(message.trim()) {
            errs.push(gofmt::invalid(
                &p("message"),
                &quote(message),
                "message must not contain line breaks",
            ));
        } else if has_newlines(rule_text.trim()) && message.trim().is_empty() {
            errs.push(gofmt::required(
                &p("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !message_expr.is_empty() && message_expr.trim().is_empty() {
            errs.push(gofmt::required(
                &p("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = r.and_then(|r| r.get("reason")).and_then(Value::as_str) {
            let supported = [
                "FieldValueDuplicate",
                "FieldValueForbidden",
                "FieldValueInvalid",
                "FieldValueRequired",
            ];
            if !supported.contains(&reason) {
                let s: Vec<String> = supported.iter().map(|s| (*s).to_owned()).collect();
                errs.push(gofmt::not_supported(&p("reason"), &quote(reason), &s));
            }
        }
        if !field_path.is_empty() && field_path.trim().is_empty() {
            errs.push(gofmt::invalid(
                &p("fieldPath"),
                &quote(field_path),
                "fieldPath must be non-empty if specified",
            ));
        }
        if has_newlines(field_path) {
            errs.push(gofmt::invalid(
                &p("fieldPath"),
                &quote(field_path),
                "fieldPath must not contain line breaks",
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::structural_errors;

    const AT: &str = "spec.versions[0].schema";

    #[allow(clippy::needless_pass_by_value)]
    fn errs(schema: Value) -> Vec<String> {
        structural_errors(&schema, AT, false)
            .into_iter()
            .map(|e| format!("{} {}: {}", e.reason, e.field, e.message))
            .collect()
    }

    #[allow(clippy::needless_pass_by_value)]
    fn root(props: Value) -> Value {
        json!({"type": "object", "properties": props})
    }

    #[test]
    fn structural_rules_match_upstream() {
        let p = "spec.versions[0].schema.openAPIV3Schema";
        let cases: Vec<(Value, Vec<String>)> = vec![
            (
                root(
                    json!({"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}),
                ),
                vec![],
            ),
            (
                root(json!({"spec": {"properties": {"size": {"type": "integer"}}}})),
                vec![format!(
                    "FieldValueRequired {p}.properties[spec].type: Required value: must not be empty for specified object fields"
                )],
            ),
            (
                json!({"properties": {}}),
                vec![format!(
                    "FieldValueRequired {p}.type: Required value: must not be empty at the root"
                )],
            ),
            (
                root(json!({"l": {"type": "array"}})),
                vec![format!(
                    "FieldValueRequired {p}.properties[l].items: Required value: must be specified"
                )],
            ),
            (
                root(json!({"l": {"type": "array", "items": {}}})),
                vec![format!(
                    "FieldValueRequired {p}.properties[l].items.type: Required value: must not be empty for specified array items"
                )],
            ),
            (
                root(
                    json!({"m": {"type": "object", "properties": {"a": {"type": "string"}},
                    "additionalProperties": {"type": "string"}}}),
                ),
                vec![format!(
                    "FieldValueForbidden {p}.properties[m].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
                )],
            ),
            (
                root(
                    json!({"metadata": {"type": "object", "properties": {"labels": {"type": "object"}}}}),
                ),
                vec![format!(
                    "FieldValueForbidden {p}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
                )],
            ),
            (
                root(
                    json!({"metadata": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}}}}),
                ),
                vec![],
            ),
            (
                root(json!({"port": {"x-kubernetes-int-or-string": true,
                    "anyOf": [{"type": "integer"}, {"type": "string"}]}})),
                vec![],
            ),
            (
                root(
                    json!({"v": {"type": "string", "anyOf": [{"type": "string", "description": "d"}]}}),
                ),
                vec![
                    format!(
                        "FieldValueForbidden {p}.properties[v].anyOf[0].description: Forbidden: must be empty to be structural"
                    ),
                    format!(
                        "FieldValueForbidden {p}.properties[v].anyOf[0].type: Forbidden: must be empty to be structural"
                    ),
                ],
            ),
            (
                json!({"type": "object", "properties": {"a": {"type": "string"}},
                    "anyOf": [{"properties": {"b": {"pattern": "x"}}}]}),
                vec![format!(
                    "FieldValueRequired {p}.properties[b]: Required value: because it is defined in {p}.anyOf[0].properties[b]"
                )],
            ),
            (
                root(json!({"t": {"type": "object", "x-kubernetes-embedded-resource": true}})),
                vec![format!(
                    "FieldValueRequired {p}.properties[t].properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
                )],
            ),
            (
                root(json!({"s": {"type": "string", "pattern": "("}})),
                vec![format!(
                    "FieldValueInvalid {p}.properties[s].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't: error parsing regexp: unclosed group: `(`"
                )],
            ),
            (
                root(json!({"n": {"type": "integer", "default": "x"}})),
                vec![format!(
                    r#"FieldValueTypeInvalid {p}.properties[n].default: Invalid value: "string":  in body must be of type integer: "string""#
                )],
            ),
            (
                root(json!({"o": {"type": "object", "default": {"a": 1, "b": 2},
                    "properties": {"a": {"type": "integer", "maximum": 0}}}})),
                vec![
                    format!(
                        r#"FieldValueInvalid {p}.properties[o].default: Invalid value: map[string]interface {{}}{{"a":1, "b":2}}: must not have unknown fields"#
                    ),
                    format!(
                        "FieldValueInvalid {p}.properties[o].default.a: Invalid value: 1: a in body should be less than or equal to 0"
                    ),
                ],
            ),
            (
                root(json!({"metadata": {"type": "object", "default": {}}})),
                vec![format!(
                    "FieldValueForbidden {p}.properties[metadata].default: Forbidden: must not be set in top-level metadata"
                )],
            ),
            (
                root(
                    json!({"l": {"type": "array", "uniqueItems": true, "items": {"type": "string"}}}),
                ),
                vec![format!(
                    "FieldValueForbidden {p}.properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"
                )],
            ),
            (
                root(
                    json!({"l": {"type": "array", "x-kubernetes-list-type": "map",
                    "x-kubernetes-list-map-keys": ["name"],
                    "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}),
                ),
                vec![format!(
                    "FieldValueRequired {p}.properties[l].items.properties[name].default: Required value: this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property"
                )],
            ),
            (
                root(
                    json!({"l": {"type": "array", "x-kubernetes-list-type": "bag", "items": {"type": "string"}}}),
                ),
                vec![format!(
                    r#"FieldValueNotSupported {p}.properties[l].x-kubernetes-list-type: Unsupported value: "bag": supported values: "atomic", "set", "map""#
                )],
            ),
            (
                root(json!({"m": {"type": "string", "x-kubernetes-map-type": "atomic"}})),
                vec![format!(
                    r#"FieldValueInvalid {p}.properties[m].type: Invalid value: "string": must be object if x-kubernetes-map-type is specified"#
                )],
            ),
            (
                root(
                    json!({"x": {"type": "object", "x-kubernetes-preserve-unknown-fields": false}}),
                ),
                vec![format!(
                    "FieldValueInvalid {p}.properties[x].x-kubernetes-preserve-unknown-fields: Invalid value: false: must be true or undefined"
                )],
            ),
            (
                root(json!({"x": {"type": "object", "x-kubernetes-validations": [{"rule": " "}]}})),
                vec![format!(
                    "FieldValueRequired {p}.properties[x].x-kubernetes-validations[0].rule: Required value: rule is not specified"
                )],
            ),
            (
                json!({"type": "object", "nullable": true}),
                vec![format!(
                    "FieldValueForbidden {p}.nullable: Forbidden: nullable cannot be true at the root"
                )],
            ),
            (
                root(json!({"x": {"type": "null"}})),
                vec![
                    format!(
                        r#"FieldValueNotSupported {p}.properties[x].type: Unsupported value: "null": supported values: "array", "boolean", "integer", "number", "object", "string""#
                    ),
                    format!(
                        "FieldValueForbidden {p}.properties[x].type: Forbidden: type cannot be set to null, use nullable as an alternative"
                    ),
                ],
            ),
        ];
        for (schema, want) in cases {
            assert_eq!(errs(schema.clone()), want, "{schema}");
        }
    }

    #[test]
    fn status_subresource_restricts_the_root() {
        let got = structural_errors(
            &json!({"type": "object", "properties": {}, "anyOf": [{"required": ["spec"]}]}),
            AT,
            true,
        );
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].field, "spec.versions[0].schema.openAPIV3Schema");
        assert!(got[0].message.ends_with(
            "fields are allowed at the root of the schema if the status subresource is enabled"
        ));
    }
}
