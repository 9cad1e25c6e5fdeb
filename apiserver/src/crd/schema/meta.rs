//! Embedded resources (`x-kubernetes-embedded-resource: true`), as upstream's
//! `schema/objectmeta`: `apiVersion` and `kind` are required and checked, the embedded
//! `metadata` is validated as ObjectMeta (name, generateName, namespace, labels,
//! annotation keys) and, when pruning, cut down to ObjectMeta's own fields.

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::Structural;
use super::gofmt::{self, bad_value, quote};
use super::validate::child;
use crate::error::FieldError;

/// The fields of `metav1.ObjectMeta`.
pub(super) const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// Upstream's `objectmeta.Validate(nil, obj, schema, false)`: every embedded resource below the
/// root (the root's own type and metadata are checked by the generic path). Field paths use
/// `field.Path` printing: map keys as `[key]`.
pub(super) fn validate_embedded(s: &Structural, obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk(&mut errs, "", obj, s);
    errs
}

/// `objectmeta.Validate(prefix, v, s, is_resource_root)` for a CRD `default`: like
/// [`validate_embedded`], with `v` itself an embedded resource when `is_resource_root`.
pub(super) fn validate_embedded_under(
    s: &Structural,
    v: &Value,
    prefix: &str,
    is_resource_root: bool,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if is_resource_root && let Value::Object(o) = v {
        embedded(&mut errs, prefix, o);
        for (k, x) in o {
            if let Some(p) = s.properties.get(k) {
                walk(&mut errs, &child(prefix, k), x, p);
            } else if let Some(add) = s.additional_schema() {
                walk(&mut errs, &format!("{prefix}[{k}]"), x, add);
            }
        }
    } else {
        walk(&mut errs, prefix, v, s);
    }
    errs
}

fn walk(errs: &mut Vec<FieldError>, path: &str, x: &Value, s: &Structural) {
    match x {
        Value::Object(o) => {
            if s.x_embedded_resource {
                embedded(errs, path, o);
            }
            for (k, v) in o {
                if let Some(p) = s.properties.get(k) {
                    walk(errs, &child(path, k), v, p);
                } else if let Some(add) = s.additional_schema() {
                    walk(errs, &format!("{path}[{k}]"), v, add);
                }
            }
        }
        Value::Array(a) => {
            if let Some(items) = &s.items {
                for (i, v) in a.iter().enumerate() {
                    walk(errs, &format!("{path}[{i}]"), v, items);
                }
            }
        }
        _ => {}
    }
}

fn embedded(errs: &mut Vec<FieldError>, path: &str, o: &Map<String, Value>) {
    let api_version_path = child(path, "apiVersion");
    let kind_path = child(path, "kind");
    match o.get("apiVersion") {
        None => errs.push(gofmt::required(&api_version_path, "must not be empty")),
        Some(Value::String(v)) if v.is_empty() => {
            errs.push(gofmt::invalid(
                &api_version_path,
                &quote(v),
                "must not be empty",
            ));
        }
        Some(Value::String(v)) => {
            if v != "/" && v.matches('/').count() > 1 {
                errs.push(gofmt::invalid(
                    &api_version_path,
                    &quote(v),
                    &format!("unexpected GroupVersion string: {v}"),
                ));
            }
        }
        Some(other) => errs.push(gofmt::invalid(
            &api_version_path,
            &bad_value(other),
            "must be a string",
        )),
    }
    match o.get("kind") {
        None => errs.push(gofmt::required(&kind_path, "must not be empty")),
        Some(Value::String(v)) if v.is_empty() => {
            errs.push(gofmt::invalid(&kind_path, &quote(v), "must not be empty"));
        }
        Some(Value::String(v)) => {
            let msgs = dns1035_label(&v.to_lowercase());
            if !msgs.is_empty() {
                errs.push(gofmt::invalid(
                    &kind_path,
                    &quote(v),
                    &format!(
                        "may have mixed case, but should otherwise match: {}",
                        msgs.join(",")
                    ),
                ));
            }
        }
        Some(other) => errs.push(gofmt::invalid(
            &kind_path,
            &bad_value(other),
            "must be a string",
        )),
    }
    if let Some(m) = o.get("metadata") {
        object_meta(errs, &child(path, "metadata"), m);
    }
}

/// Go's JSON name of a value's type in `cannot unmarshal` errors.
fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Decoding into ObjectMeta, then `ValidateObjectMeta` with path-segment names.
fn object_meta(errs: &mut Vec<FieldError>, path: &str, m: &Value) {
    let Value::Object(o) = m else {
        if !m.is_null() {
            errs.push(gofmt::invalid(
                path,
                &bad_value(m),
                &format!(
                    "json: cannot unmarshal {} into Go value of type v1.ObjectMeta",
                    json_type(m)
                ),
            ));
        }
        return;
    };
    for (k, want) in [
        ("name", "string"),
        ("generateName", "string"),
        ("namespace", "string"),
        ("labels", "map[string]string"),
        ("annotations", "map[string]string"),
    ] {
        let Some(v) = o.get(k) else { continue };
        let ok = match want {
            "string" => v.is_string() || v.is_null(),
            _ => {
                v.is_null()
                    || v.as_object()
                        .is_some_and(|m| m.values().all(|x| x.is_string() || x.is_null()))
            }
        };
        if !ok {
            let (field, got) = match v.as_object() {
                Some(m) => {
                    let bad = m.iter().find(|(_, x)| !x.is_string() && !x.is_null());
                    (
                        format!("ObjectMeta.{k}"),
                        bad.map_or("object", |(_, x)| json_type(x)),
                    )
                }
                None => (format!("ObjectMeta.{k}"), json_type(v)),
            };
            let want = if want == "string" { "string" } else { want };
            let want = if v.is_object() { "string" } else { want };
            errs.push(gofmt::invalid(
                path,
                &bad_value(m),
                &format!(
                    "json: cannot unmarshal {got} into Go struct field {field} of type {want}"
                ),
            ));
            return;
        }
    }
    let s = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
    let generate_name = s("generateName");
    if !generate_name.is_empty() {
        for msg in path_segment(generate_name, true) {
            errs.push(gofmt::invalid(
                &child(path, "generateName"),
                &quote(generate_name),
                &msg,
            ));
        }
    }
    let name = s("name");
    if !name.is_empty() {
        for msg in path_segment(name, false) {
            errs.push(gofmt::invalid(&child(path, "name"), &quote(name), &msg));
        }
    }
    let namespace = s("namespace");
    if !namespace.is_empty() {
        for msg in dns1123_label(namespace) {
            errs.push(gofmt::invalid(
                &child(path, "namespace"),
                &quote(namespace),
                &msg,
            ));
        }
    }
    if let Some(labels) = o.get("labels").and_then(Value::as_object) {
        let lp = child(path, "labels");
        for (k, v) in labels {
            for msg in qualified_name(k) {
                errs.push(gofmt::invalid(&lp, &quote(k), &msg));
            }
            let v = v.as_str().unwrap_or("");
            for msg in label_value(v) {
                errs.push(gofmt::invalid(&lp, &quote(v), &msg));
            }
        }
    }
    if let Some(annotations) = o.get("annotations").and_then(Value::as_object) {
        let ap = child(path, "annotations");
        for k in annotations.keys() {
            for msg in qualified_name(&k.to_lowercase()) {
                errs.push(gofmt::invalid(&ap, &quote(k), &msg));
            }
        }
    }
}

/// Upstream's `path.ValidatePathSegmentName`.
fn path_segment(name: &str, prefix: bool) -> Vec<String> {
    if !prefix {
        for bad in [".", ".."] {
            if name == bad {
                return vec![format!("may not be '{bad}'")];
            }
        }
    }
    ["/", "%"]
        .iter()
        .filter(|c| name.contains(*c))
        .map(|c| format!("may not contain '{c}'"))
        .collect()
}

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str("or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

fn anchored(fmt: &str) -> Option<Regex> {
    Regex::new(&format!("^(?:{fmt})$")).ok()
}

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";

static QUALIFIED_NAME: LazyLock<Option<Regex>> = LazyLock::new(|| anchored(QUALIFIED_NAME_FMT));
static LABEL_VALUE: LazyLock<Option<Regex>> = LazyLock::new(|| anchored(LABEL_VALUE_FMT));
static DNS1123_LABEL: LazyLock<Option<Regex>> = LazyLock::new(|| anchored(DNS1123_LABEL_FMT));
static DNS1123_SUBDOMAIN: LazyLock<Option<Regex>> =
    LazyLock::new(|| anchored(DNS1123_SUBDOMAIN_FMT));
static DNS1035_LABEL: LazyLock<Option<Regex>> = LazyLock::new(|| anchored(DNS1035_LABEL_FMT));

fn is(r: &Option<Regex>, s: &str) -> bool {
    r.as_ref().is_some_and(|r| r.is_match(s))
}

/// `IsDNS1035Label`.
pub(super) fn dns1035_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is(&DNS1035_LABEL, s) {
        errs.push(regex_error(
            "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character",
            DNS1035_LABEL_FMT,
            &["my-name", "abc-123"],
        ));
    }
    errs
}

/// `IsDNS1123Label`.
fn dns1123_label(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is(&DNS1123_LABEL, s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
            DNS1123_LABEL_FMT,
            &["my-name", "123-abc"],
        ));
    }
    errs
}

/// `IsDNS1123Subdomain`.
fn dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !is(&DNS1123_SUBDOMAIN, s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// `IsQualifiedName`.
fn qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(
                    QUALIFIED_NAME_MSG,
                    QUALIFIED_NAME_FMT,
                    &["MyName", "my.name", "123-abc"]
                )
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    if !is(&QUALIFIED_NAME, name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_MSG,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// `IsValidLabelValue`.
fn label_value(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is(&LABEL_VALUE, v) {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            LABEL_VALUE_FMT,
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// Cuts an embedded resource's `metadata` down to ObjectMeta's fields (upstream decodes it into
/// ObjectMeta and back); returns the dropped fields' paths under `path`.
pub(super) fn prune_embedded_metadata(path: &str, o: &mut Map<String, Value>) -> Vec<String> {
    let Some(Value::Object(m)) = o.get_mut("metadata") else {
        return Vec::new();
    };
    let unknown: Vec<String> = m
        .keys()
        .filter(|k| !OBJECT_META_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    let mut out = Vec::new();
    for k in unknown {
        m.remove(&k);
        out.push(format!("{}.{k}", child(path, "metadata")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_checks_use_upstream_text() {
        assert_eq!(path_segment("..", false), vec!["may not be '..'"]);
        assert_eq!(
            path_segment("a/b%", true),
            vec!["may not contain '/'", "may not contain '%'"]
        );
        assert_eq!(
            dns1035_label("1abc"),
            vec![
                "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name', or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
            ]
        );
        assert_eq!(qualified_name("example.com/app"), Vec::<String>::new());
        assert_eq!(
            qualified_name("/app"),
            vec!["prefix part must be non-empty"]
        );
        assert_eq!(label_value("ok_value"), Vec::<String>::new());
        assert_eq!(label_value("-bad").len(), 1);
    }

    #[test]
    fn embedded_kind_must_be_a_dns_label_in_any_case() {
        let mut errs = Vec::new();
        embedded(
            &mut errs,
            "spec.t",
            serde_json::json!({"apiVersion": "a/b/c", "kind": "My_Kind"})
                .as_object()
                .unwrap(),
        );
        let got: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        assert_eq!(
            got[0],
            r#"spec.t.apiVersion: Invalid value: "a/b/c": unexpected GroupVersion string: a/b/c"#
        );
        assert!(got[1].starts_with(
            r#"spec.t.kind: Invalid value: "My_Kind": may have mixed case, but should otherwise match: a DNS-1035 label"#
        ));
    }
}
