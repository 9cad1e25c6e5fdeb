//! Upstream's field validation for the main fields of the most used kinds
//! (`pkg/apis/core/validation`, `pkg/apis/apps/validation`, `pkg/apis/batch/validation` of
//! kubernetes v1.33), on the JSON form of an object after defaulting.
//!
//! Every problem is reported as upstream's `field.Error` would print it: the field path
//! (`spec.containers[0].image`), the reason (`FieldValueRequired`, …) and the text after the
//! path (`Required value`, `Invalid value: "x": <detail>`, `Unsupported value: "x": supported
//! values: "a", "b"`, `Duplicate value: "x"`, `Not found: "x"`, `Forbidden: <detail>`).
//! Bad values are printed as upstream prints them: strings quoted as Go's `%q`, integers bare,
//! and structs and maps in Go's `%#v` form (`map[string]string{"app":"web"}`,
//! `v1.LabelSelector{MatchLabels:…, MatchExpressions:…}`).
//!
//! - `pod` — `ValidatePodSpec` (containers, ports, volumes, mounts, resources, policies) and
//!   `ValidatePodTemplateSpec`, shared by Pods and every workload template.
//! - `apps` — Deployment, ReplicaSet, StatefulSet, DaemonSet and ReplicationController.
//! - `batch` — Job and CronJob (with the cron schedule parser of `robfig/cron`).
//! - `core` — Pod, PodTemplate, Service, ConfigMap and Secret.
//! - `events` — events.k8s.io/v1 Event (on its core form, as upstream).
//! - `ephemeral` — a Pod's ephemeral containers and the `pods/ephemeralcontainers` update rules.
//! - `pod_update` — what a plain update of a Pod may change (`ValidatePodUpdate`).
//! - `pod_resize` — what a `pods/resize` write may change (`ValidatePodResize`).
//! - `pod_status` — what a `pods/status` write may change (`ValidatePodStatusUpdate`).
//! - `certificates` — certificates.k8s.io/v1 CertificateSigningRequest (create, update,
//!   `status` and `approval`).
//!
//! Metadata (name, labels) is checked elsewhere (`handlers::object`). Kinds not listed have no
//! checks here.

mod apps;
mod batch;
pub mod certificates;
mod core;
mod ephemeral;
mod events;
mod pod;
mod pod_resize;
mod pod_status;
mod pod_update;

use serde_json::{Map, Value};

pub use pod_status::{prepare as prepare_pod_status, qos_class as pod_qos_class};

use crate::error::FieldError;
use crate::registry::catalog::ResourceInfo;

/// A JSON object.
type Obj = Map<String, Value>;

/// Upstream's field validation for `r`'s object `obj` (on update, `old` is the stored object:
/// immutable fields are checked). Returns every problem with upstream's field path, reason and
/// message text, e.g. `FieldError { reason: "FieldValueRequired", field: "spec.containers",
/// message: "Required value" }`.
pub fn validate(
    r: &ResourceInfo,
    obj: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Vec<FieldError> {
    if crate::crd::serve::is_custom(r) || crate::crd::serve::is_crd(r) {
        return crate::crd::serve::validate(r, obj, old);
    }
    match (r.group, r.version) {
        ("", "v1") if r.kind == "Pod" => pod_object(obj, old),
        ("", "v1") => core::validate(r.kind, obj, old),
        ("certificates.k8s.io", "v1") if r.kind == "CertificateSigningRequest" => {
            certificates::validate(obj, old, &current_subresource())
        }
        ("apps", "v1") => apps::validate(r.kind, obj, old),
        ("batch", "v1") => batch::validate(r.kind, obj, old),
        ("events.k8s.io", "v1") => events::validate(r.kind, obj, old),
        _ => Vec::new(),
    }
}

/// The subresource of the request being served (`""` outside a request).
fn current_subresource() -> String {
    crate::admission::current().map_or_else(String::new, |r| r.info.subresource)
}

/// A Pod: its spec, its ephemeral containers, what a plain update may change of it, through
/// `pods/ephemeralcontainers` what may change of those, through `pods/resize` what may change
/// of the containers' resources, and through `pods/status` what may change of its status
/// (`ValidatePodCreate`, `ValidatePodUpdate`, `ValidatePodEphemeralContainersUpdate`,
/// `ValidatePodResize`, `ValidatePodStatusUpdate`).
fn pod_object(obj: &Obj, old: Option<&Obj>) -> Vec<FieldError> {
    if let Some(old) = old
        && current_subresource() == "status"
    {
        // `ValidatePodStatusUpdate`: the spec is the stored one, only the status is checked.
        let mut errs = Vec::new();
        pod_status::update(&mut errs, obj, old);
        return errs;
    }
    let mut errs = core::validate("Pod", obj, old);
    let empty = Obj::new();
    let spec = get_obj(obj, "spec").unwrap_or(&empty);
    ephemeral::containers(&mut errs, spec);
    match old {
        None => ephemeral::create(&mut errs, spec),
        Some(old) => match current_subresource().as_str() {
            "ephemeralcontainers" => ephemeral::update(&mut errs, obj, old),
            "resize" => pod_resize::update(&mut errs, obj, old),
            "" => pod_update::update(&mut errs, obj, old),
            _ => {}
        },
    }
    errs
}

// ---- error constructors (upstream's field.Required, field.Invalid, …) ----

/// `field.Required`: `Required value` (and `: detail`).
fn required(field: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueRequired",
        field: field.to_owned(),
        message: with_detail("Required value".into(), detail),
    }
}

/// `field.Invalid` with an already formatted bad value.
fn invalid(field: &str, value: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueInvalid",
        field: field.to_owned(),
        message: with_detail(format!("Invalid value: {value}"), detail),
    }
}

/// `field.NotSupported`: the value and the quoted supported values.
fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
    let detail = if quoted.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", quoted.join(", "))
    };
    FieldError {
        reason: "FieldValueNotSupported",
        field: field.to_owned(),
        message: with_detail(format!("Unsupported value: {value}"), &detail),
    }
}

/// `field.Duplicate`.
fn duplicate(field: &str, value: &str) -> FieldError {
    FieldError {
        reason: "FieldValueDuplicate",
        field: field.to_owned(),
        message: format!("Duplicate value: {value}"),
    }
}

/// `field.NotFound`.
fn not_found(field: &str, value: &str) -> FieldError {
    FieldError {
        reason: "FieldValueNotFound",
        field: field.to_owned(),
        message: format!("Not found: {value}"),
    }
}

/// `field.Forbidden`.
fn forbidden(field: &str, detail: &str) -> FieldError {
    FieldError {
        reason: "FieldValueForbidden",
        field: field.to_owned(),
        message: with_detail("Forbidden".into(), detail),
    }
}

/// `field.TooLong` with a byte limit.
fn too_long(field: &str, max: usize) -> FieldError {
    FieldError {
        reason: "FieldValueTooLong",
        field: field.to_owned(),
        message: format!("Too long: may not be more than {max} bytes"),
    }
}

fn with_detail(mut s: String, detail: &str) -> String {
    if !detail.is_empty() {
        s.push_str(": ");
        s.push_str(detail);
    }
    s
}

/// `ValidateImmutableField`'s detail.
const IMMUTABLE: &str = "field is immutable";

/// `ValidateNonnegativeField`'s detail.
const NONNEGATIVE: &str = "must be greater than or equal to 0";

// ---- Go value formatting ----

/// Go's `%q` of a string.
fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` of a `map[string]string` (`map[string]string(nil)` when absent).
fn go_string_map(v: Option<&Value>) -> String {
    match v.and_then(Value::as_object) {
        None => "map[string]string(nil)".into(),
        Some(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let parts: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v.as_str().unwrap_or(""))))
                .collect();
            format!("map[string]string{{{}}}", parts.join(", "))
        }
    }
}

/// Go's `%#v` of a `[]string` (`[]string(nil)` when absent).
fn go_string_slice(v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => "[]string(nil)".into(),
        Some(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|s| go_quote(s.as_str().unwrap_or("")))
                .collect();
            format!("[]string{{{}}}", parts.join(", "))
        }
    }
}

/// Go's `%#v` of a `metav1.LabelSelector`.
fn go_label_selector(sel: &Value) -> String {
    let exprs = match sel.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_owned(),
        Some(items) => {
            let parts: Vec<String> = items
                .iter()
                .map(|e| {
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
                        go_quote(e.get("key").and_then(Value::as_str).unwrap_or("")),
                        go_quote(e.get("operator").and_then(Value::as_str).unwrap_or("")),
                        go_string_slice(e.get("values")),
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", parts.join(", "))
        }
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{}}}",
        go_string_map(sel.get("matchLabels")),
        exprs
    )
}

/// Go's `%#v` of an `intstr.IntOrString`.
fn go_int_or_string(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => {
            format!(
                "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
                go_quote(s)
            )
        }
        Some(v) => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            v.as_i64().unwrap_or(0)
        ),
        None => "intstr.IntOrString{Type:0, IntVal:0, StrVal:\"\"}".into(),
    }
}

// ---- JSON access ----

/// `v` without null-valued object fields, at any depth: what a Go struct compares as when
/// decoded (an absent field and `null` — e.g. a template's `creationTimestamp: null`, which Go
/// writes — are the same zero value), for update checks that compare old and new subtrees.
fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_nulls).collect()),
        other => other.clone(),
    }
}

fn get_str<'a>(obj: &'a Obj, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

fn get_obj<'a>(obj: &'a Obj, key: &str) -> Option<&'a Obj> {
    obj.get(key).and_then(Value::as_object)
}

fn get_arr<'a>(obj: &'a Obj, key: &str) -> &'a [Value] {
    obj.get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn get_i64(obj: &Obj, key: &str) -> Option<i64> {
    obj.get(key).and_then(Value::as_i64)
}

/// The objects of the array at `key`, with their indices.
fn objs<'a>(obj: &'a Obj, key: &str) -> impl Iterator<Item = (usize, &'a Obj)> {
    get_arr(obj, key)
        .iter()
        .enumerate()
        .filter_map(|(i, v)| v.as_object().map(|o| (i, o)))
}

/// `ValidateNonnegativeField` of an optional integer field.
fn nonnegative(errs: &mut Vec<FieldError>, obj: &Obj, key: &str, path: &str) {
    if let Some(v) = get_i64(obj, key)
        && v < 0
    {
        errs.push(invalid(
            &format!("{path}.{key}"),
            &v.to_string(),
            NONNEGATIVE,
        ));
    }
}

// ---- string format checks (k8s.io/apimachinery/pkg/util/validation) ----

/// Upstream's `RegexError`.
fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let mut s = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            s.push_str(" or ");
        }
        s.push_str(&format!("'{e}', "));
    }
    s.push_str(&format!("regex used for validation is '{fmt}')"));
    s
}

fn is_label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b.first().is_some_and(|c| c.is_ascii_alphanumeric())
        && b.last().is_some_and(|c| c.is_ascii_alphanumeric())
}

fn is_subdomain_chars(s: &str) -> bool {
    s.split('.').all(is_label_chars)
}

/// `IsDNS1123Label`.
fn dns1123_label_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    if !is_label_chars(s) {
        if is_subdomain_chars(s) {
            errs.push("must not contain dots".to_owned());
        } else {
            errs.push(regex_error(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character",
                "[a-z0-9]([-a-z0-9]*[a-z0-9])?",
                &["my-name", "123-abc"],
            ));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`.
fn dns1123_subdomain_errors(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if !is_subdomain_chars(s) {
        errs.push(regex_error(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*",
            &["example.com"],
        ));
    }
    errs
}

/// The `(e.g. 'MyName',  or 'my.name',  or '123-abc', …)` text of a qualified name's part.
fn qualified_name_regex_error() -> String {
    regex_error(
        "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
        "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]",
        &["MyName", "my.name", "123-abc"],
    )
}

/// `IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the name at most 63
/// alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_owned());
            } else {
                errs.extend(
                    dns1123_subdomain_errors(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            return vec![format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                qualified_name_regex_error()
            )];
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_owned());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_owned());
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let well_formed = name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'));
    if !well_formed {
        errs.push(format!("name part {}", qualified_name_regex_error()));
    }
    errs
}

/// `IsValidLabelValue`: empty, or at most 63 alphanumerics, '-', '_' or '.', starting and
/// ending alphanumeric.
fn label_value_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push("must be no more than 63 characters".to_owned());
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let well_formed = value.is_empty()
        || (value.starts_with(alnum)
            && value.ends_with(alnum)
            && value
                .chars()
                .all(|c| alnum(c) || matches!(c, '-' | '_' | '.')));
    if !well_formed {
        errs.push(regex_error(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character",
            "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?",
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

/// `ValidateDNS1123Label`: one Invalid error per problem.
fn validate_dns_label(errs: &mut Vec<FieldError>, s: &str, path: &str) {
    for msg in dns1123_label_errors(s) {
        errs.push(invalid(path, &go_quote(s), &msg));
    }
}

/// `IsValidPortNum`.
fn port_num_error(port: i64) -> Option<&'static str> {
    (!(1..=65535).contains(&port)).then_some("must be between 1 and 65535, inclusive")
}

/// `IsValidPortName` (IANA_SVC_NAME).
fn port_name_errors(port: &str) -> Vec<&'static str> {
    let mut errs = Vec::new();
    if port.len() > 15 {
        errs.push("must be no more than 15 characters");
    }
    if port.is_empty()
        || !port
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)");
    }
    if !port.bytes().any(|b| b.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)");
    }
    if port.contains("--") {
        errs.push("must not contain consecutive hyphens");
    }
    if port.starts_with('-') || port.ends_with('-') {
        errs.push("must not begin or end with a hyphen");
    }
    errs
}

/// `IsConfigMapKey` (also used for Secret keys).
fn config_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push("must be no more than 253 characters".to_owned());
    }
    if key.is_empty()
        || !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b))
    {
        errs.push(regex_error(
            "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
            "[-._a-zA-Z0-9]+",
            &["key.name", "KEY_NAME", "key-name"],
        ));
    }
    if key == "." {
        errs.push("must not be '.'".to_owned());
    } else if key == ".." {
        errs.push("must not be '..'".to_owned());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".to_owned());
    }
    errs
}

// ---- label selectors ----

/// Whether a `metav1.LabelSelector` has no requirements.
fn selector_is_empty(sel: &Obj) -> bool {
    get_obj(sel, "matchLabels").is_none_or(Map::is_empty)
        && get_arr(sel, "matchExpressions").is_empty()
}

/// Whether `labels` satisfy the selector (`LabelSelectorAsSelector(sel).Matches(labels)`).
/// A missing selector matches nothing; unknown operators match nothing.
fn selector_matches(sel: Option<&Obj>, labels: Option<&Obj>) -> bool {
    let Some(sel) = sel else {
        return false;
    };
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    if let Some(ml) = get_obj(sel, "matchLabels") {
        for (k, v) in ml {
            if label(k) != v.as_str() {
                return false;
            }
        }
    }
    for (_, e) in objs(sel, "matchExpressions") {
        let key = get_str(e, "key");
        let values: Vec<&str> = get_arr(e, "values")
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let ok = match get_str(e, "operator") {
            "In" => label(key).is_some_and(|v| values.contains(&v)),
            "NotIn" => label(key).is_none_or(|v| !values.contains(&v)),
            "Exists" => label(key).is_some(),
            "DoesNotExist" => label(key).is_none(),
            _ => false,
        };
        if !ok {
            return false;
        }
    }
    true
}

/// `ValidateLabelSelector`'s requirement checks (operators and their values).
fn validate_label_selector(errs: &mut Vec<FieldError>, sel: &Obj, path: &str) {
    for (i, e) in objs(sel, "matchExpressions") {
        let p = format!("{path}.matchExpressions[{i}]");
        let op = get_str(e, "operator");
        let n = get_arr(e, "values").len();
        match op {
            "In" | "NotIn" => {
                if n == 0 {
                    errs.push(required(
                        &format!("{p}.values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if n > 0 {
                    errs.push(forbidden(
                        &format!("{p}.values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            _ => errs.push(invalid(
                &format!("{p}.operator"),
                &go_quote(op),
                "not a valid selector operator",
            )),
        }
    }
}

/// Whether every operator of the selector is known (`LabelSelectorAsSelector` succeeds).
fn selector_parses(sel: &Obj) -> bool {
    objs(sel, "matchExpressions").all(|(_, e)| {
        matches!(
            get_str(e, "operator"),
            "In" | "NotIn" | "Exists" | "DoesNotExist"
        )
    })
}

// ---- quantities ----

pub(crate) use lean::quantity::to_f64 as parse_quantity;

/// A quantity as JSON holds it (a string, or a bare number).
fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
