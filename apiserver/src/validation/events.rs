//! events.k8s.io/v1 Event (pkg/apis/core/validation/events.go): `ValidateEventCreate` and
//! `ValidateEventUpdate` with the strict rules of events.k8s.io/v1. Upstream validates the
//! internal (core) form, so field paths are core's (`involvedObject.namespace`, `message`,
//! `firstTimestamp`, …) even for requests through events.k8s.io.

use serde_json::Value;

use super::{
    IMMUTABLE, Obj, dns1123_subdomain_errors, get_i64, get_obj, get_str, go_quote, invalid,
    required,
};
use crate::error::FieldError;
use crate::registry::{catalog, convert};

const REPORTING_INSTANCE_LIMIT: usize = 128;
const ACTION_LIMIT: usize = 128;
const REASON_LIMIT: usize = 128;
const NOTE_LIMIT: usize = 1024;

/// Validates an events.k8s.io/v1 Event (`old`: the stored object on update), both in the
/// served form.
pub(super) fn validate(kind: &str, obj: &Obj, old: Option<&Obj>) -> Vec<FieldError> {
    let Some(r) = catalog::find("events.k8s.io", "v1", "events").filter(|_| kind == "Event") else {
        return Vec::new();
    };
    let new = convert::to_storage(r, obj.clone());
    let mut errs = legacy(&new);
    match old {
        None => create(&mut errs, &new),
        Some(old) => update(&mut errs, &new, &convert::to_storage(r, old.clone())),
    }
    errs
}

fn is_set(obj: &Obj, key: &str) -> bool {
    !matches!(obj.get(key), None | Some(Value::Null))
        && obj.get(key).and_then(Value::as_str) != Some("")
}

fn empty_invalid(field: &str, detail: &str) -> FieldError {
    invalid(field, &go_quote(""), detail)
}

/// `legacyValidateEvent`: namespaces agree; events with an eventTime name their reporter,
/// action and reason within upstream's limits.
fn legacy(e: &Obj) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let ns = get_obj(e, "metadata").map_or("", |m| get_str(m, "namespace"));
    let involved_ns = get_obj(e, "involvedObject").map_or("", |o| get_str(o, "namespace"));
    let mismatch = || {
        invalid(
            "involvedObject.namespace",
            &go_quote(involved_ns),
            "does not match event.namespace",
        )
    };
    if !is_set(e, "eventTime") {
        if (involved_ns.is_empty() && !ns.is_empty() && ns != "default")
            || (!involved_ns.is_empty() && ns != involved_ns)
        {
            errs.push(mismatch());
        }
    } else {
        if involved_ns.is_empty() && ns != "default" && ns != "kube-system" {
            errs.push(mismatch());
        }
        let controller = get_str(e, "reportingComponent");
        if controller.is_empty() {
            errs.push(required("reportingController", ""));
        }
        for msg in qualified_name_errors(controller) {
            errs.push(invalid("reportingController", &go_quote(controller), &msg));
        }
        let lengths = [
            ("reportingInstance", REPORTING_INSTANCE_LIMIT),
            ("action", ACTION_LIMIT),
            ("reason", REASON_LIMIT),
        ];
        for (field, limit) in lengths {
            let v = get_str(e, field);
            if v.is_empty() {
                errs.push(required(field, ""));
            } else if v.len() > limit {
                errs.push(empty_invalid(
                    field,
                    &format!("can have at most {limit} characters"),
                ));
            }
        }
        if get_str(e, "message").len() > NOTE_LIMIT {
            errs.push(empty_invalid(
                "message",
                &format!("can have at most {NOTE_LIMIT} characters"),
            ));
        }
    }
    for msg in dns1123_subdomain_errors(ns) {
        errs.push(invalid("namespace", &go_quote(ns), &msg));
    }
    errs
}

/// `validateV1EventSeries`.
fn series(errs: &mut Vec<FieldError>, e: &Obj) {
    let Some(s) = get_obj(e, "series") else {
        return;
    };
    if get_i64(s, "count").unwrap_or(0) < 2 {
        errs.push(empty_invalid("series.count", "should be at least 2"));
    }
    if !is_set(s, "lastObservedTime") {
        errs.push(required("series.lastObservedTime", ""));
    }
}

/// The strict rules for events created through events.k8s.io/v1.
fn create(errs: &mut Vec<FieldError>, e: &Obj) {
    series(errs, e);
    if !is_set(e, "eventTime") {
        errs.push(required("eventTime", ""));
    }
    let ty = get_str(e, "type");
    if ty != "Normal" && ty != "Warning" {
        errs.push(empty_invalid("type", &format!("has invalid value: {ty}")));
    }
    for field in ["firstTimestamp", "lastTimestamp"] {
        if is_set(e, field) {
            errs.push(empty_invalid(field, "needs to be unset"));
        }
    }
    if get_i64(e, "count").unwrap_or(0) != 0 {
        errs.push(empty_invalid("count", "needs to be unset"));
    }
    let source = get_obj(e, "source");
    let part = |k| source.map_or("", |s| get_str(s, k));
    if !part("component").is_empty() || !part("host").is_empty() {
        errs.push(empty_invalid("source", "needs to be unset"));
    }
}

/// The strict rules for events updated through events.k8s.io/v1: a changed series is valid,
/// everything else but metadata is immutable.
fn update(errs: &mut Vec<FieldError>, e: &Obj, old: &Obj) {
    if e.get("series") != old.get("series") {
        series(errs, e);
    }
    const IMMUTABLE_FIELDS: &[&str] = &[
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    ];
    for field in IMMUTABLE_FIELDS {
        let (now, was) = (e.get(*field), old.get(*field));
        // Go compares zero values: an absent field equals an empty one.
        let zero = |v: Option<&Value>| match v {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(Value::Number(n)) => n.as_i64() == Some(0),
            Some(Value::Object(m)) => m.is_empty(),
            _ => false,
        };
        if now == was || (zero(now) && zero(was)) {
            continue;
        }
        let shown = match now {
            Some(Value::String(s)) => go_quote(s),
            Some(v) => v.to_string(),
            None => go_quote(""),
        };
        let path = if *field == "reportingComponent" {
            "reportingController"
        } else {
            field
        };
        errs.push(invalid(path, &shown, IMMUTABLE));
    }
}

/// `validation.IsQualifiedName`: `[prefix/]name`, the prefix a DNS subdomain, the name at
/// most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric.
fn qualified_name_errors(value: &str) -> Vec<String> {
    if value.is_empty() {
        return Vec::new();
    }
    let mut errs = Vec::new();
    let (prefix, name) = match value.split_once('/') {
        Some((p, n)) if !n.contains('/') => (Some(p), n),
        Some(_) => {
            return vec![
                "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into(),
            ];
        }
        None => (None, value),
    };
    if let Some(p) = prefix {
        if p.is_empty() {
            errs.push("prefix part must be non-empty".into());
        } else {
            errs.extend(
                dns1123_subdomain_errors(p)
                    .into_iter()
                    .map(|m| format!("prefix part {m}")),
            );
        }
    }
    if name.is_empty() {
        errs.push("name part must be non-empty".into());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".into());
    }
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let well_formed = name.starts_with(alnum)
        && name.ends_with(alnum)
        && name
            .chars()
            .all(|c| alnum(c) || matches!(c, '-' | '_' | '.'));
    if !name.is_empty() && !well_formed {
        errs.push("name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')".into());
    }
    errs
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn good() -> Obj {
        obj(json!({
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": { "name": "e", "namespace": "default" },
            "eventTime": "2024-01-02T03:04:05.000000Z",
            "regarding": { "kind": "Pod", "namespace": "default", "name": "p" },
            "reportingController": "example.com/ctl",
            "reportingInstance": "ctl-1",
            "action": "Testing",
            "reason": "Tested",
            "type": "Normal",
            "note": "hello",
        }))
    }

    fn fields(errs: &[FieldError]) -> Vec<&str> {
        errs.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn a_complete_event_is_valid() {
        assert!(validate("Event", &good(), None).is_empty());
    }

    #[test]
    fn create_requires_the_new_fields() {
        let mut e = good();
        for k in [
            "eventTime",
            "reportingController",
            "reportingInstance",
            "action",
        ] {
            e.remove(k);
        }
        e.insert("type".into(), json!("Odd"));
        e.insert("deprecatedCount".into(), json!(3));
        let errs = validate("Event", &e, None);
        assert_eq!(fields(&errs), ["eventTime", "type", "count"]);
        assert_eq!(
            errs[1].message,
            "Invalid value: \"\": has invalid value: Odd"
        );

        let mut e = good();
        e.remove("action");
        e.insert("reportingController".into(), json!("bad name!"));
        e.insert("series".into(), json!({ "count": 1 }));
        let errs = validate("Event", &e, None);
        assert_eq!(
            fields(&errs),
            [
                "reportingController",
                "action",
                "series.count",
                "series.lastObservedTime"
            ]
        );
        assert_eq!(errs[1].message, "Required value");
    }

    #[test]
    fn namespaces_must_agree() {
        let mut e = good();
        e.insert(
            "regarding".into(),
            json!({ "kind": "Pod", "namespace": "other", "name": "p" }),
        );
        let errs = validate("Event", &e, None);
        assert_eq!(fields(&errs), Vec::<&str>::new());
        let mut e = good();
        e.insert(
            "metadata".into(),
            json!({ "name": "e", "namespace": "ns1" }),
        );
        e.insert("regarding".into(), json!({ "kind": "Node", "name": "n" }));
        assert_eq!(
            fields(&validate("Event", &e, None)),
            ["involvedObject.namespace"]
        );
    }

    #[test]
    fn updates_may_change_the_series_only() {
        let old = good();
        let mut new = good();
        new.insert(
            "series".into(),
            json!({ "count": 2, "lastObservedTime": "2024-01-02T03:05:05.000000Z" }),
        );
        assert!(validate("Event", &new, Some(&old)).is_empty());
        new.insert("note".into(), json!("changed"));
        let errs = validate("Event", &new, Some(&old));
        assert_eq!(fields(&errs), ["message"]);
        assert_eq!(
            errs[0].message,
            "Invalid value: \"changed\": field is immutable"
        );
    }
}
