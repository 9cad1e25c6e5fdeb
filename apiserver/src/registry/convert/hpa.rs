//! `autoscaling/v1` HorizontalPodAutoscaler ↔ the stored `autoscaling/v2` form, as upstream
//! converts through its internal type (`pkg/apis/autoscaling/v1/conversion.go`).
//!
//! v1 has one metric field, `targetCPUUtilizationPercentage`: the first CPU `Resource` metric
//! with a utilization target. Everything else v2 holds travels in annotations whose values are
//! JSON, so a v1 client that reads, edits and writes back an HPA loses nothing:
//!
//! - `autoscaling.alpha.kubernetes.io/metrics` — the other spec metrics, in v1's older metric
//!   form (`targetAverageValue`, `metricName`, …);
//! - `autoscaling.alpha.kubernetes.io/current-metrics` — every status metric, same form;
//! - `autoscaling.alpha.kubernetes.io/behavior` — `spec.behavior`, marshalled (as upstream
//!   does, with a TODO) from Go's *internal* type, which has no JSON tags: its keys are the Go
//!   field names (`ScaleUp`, `StabilizationWindowSeconds`, …) and unset pointers are `null`;
//! - `autoscaling.alpha.kubernetes.io/conditions` — `status.conditions`.
//!
//! Going to v2, those annotations are read back (and always removed), and an HPA without any
//! metric gets the CPU target autoscaling/v1 always implied (80 %). Going to v1, annotations of
//! that name already on the stored object are replaced by the ones the conversion produces.
//! The annotation values are written with Go's field order; values copied through (selectors,
//! quantities, times) keep serde's key order.

use serde_json::{Map, Value, json};

use crate::defaults::autoscaling::{default_cpu_metric, v2_spec as v2_spec_defaults};

/// The other spec metrics (v1 `MetricSpec` list).
pub const METRIC_SPECS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/metrics";
/// Every status metric (v1 `MetricStatus` list).
pub const METRIC_STATUSES_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/current-metrics";
/// `status.conditions` (v1 `HorizontalPodAutoscalerCondition` list).
pub const CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";
/// `spec.behavior` (Go's internal `HorizontalPodAutoscalerBehavior`).
pub const BEHAVIOR_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/behavior";

/// The annotations only conversion writes (`DropRoundTripHorizontalPodAutoscalerAnnotations`).
const ROUND_TRIP: [&str; 4] = [
    METRIC_SPECS_ANNOTATION,
    METRIC_STATUSES_ANNOTATION,
    CONDITIONS_ANNOTATION,
    BEHAVIOR_ANNOTATION,
];

type Obj = Map<String, Value>;

/// The object at `key`, if there is one.
fn get_obj<'a>(obj: &'a Obj, key: &str) -> Option<&'a Obj> {
    obj.get(key).and_then(Value::as_object)
}

/// The value at `key` unless absent or `null`.
fn present<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

/// The string at `key`, `""` when absent.
fn str_at<'a>(obj: &'a Obj, key: &str) -> &'a str {
    obj.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A Go `resource.Quantity` value field (not a pointer): `"0"` when unset.
fn quantity(v: Option<&Value>) -> Value {
    v.filter(|v| !v.is_null())
        .cloned()
        .unwrap_or_else(|| json!("0"))
}

/// Inserts `value` at `key` when it is there (not `None` or `null`).
fn put(obj: &mut Obj, key: &str, value: Option<&Value>) {
    if let Some(v) = value.filter(|v| !v.is_null()) {
        obj.insert(key.to_owned(), v.clone());
    }
}

/// JSON text of an object whose fields are written in the given order (Go's struct order);
/// `None` fields are left out (`omitempty`).
fn ordered(fields: &[(&str, Option<String>)]) -> String {
    let body: Vec<String> = fields
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{}:{v}", Value::from(*k))))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// JSON text of a value.
fn text(v: &Value) -> String {
    v.to_string()
}

/// JSON text of a present value (`None` when absent or `null`).
fn text_of(obj: &Obj, key: &str) -> Option<String> {
    present(obj, key).map(text)
}

/// A Go string field without `omitempty`: always written.
fn text_str(obj: &Obj, key: &str) -> Option<String> {
    Some(text(&Value::from(str_at(obj, key))))
}

/// A Go string field with `omitempty`.
fn text_nonempty(obj: &Obj, key: &str) -> Option<String> {
    let s = str_at(obj, key);
    (!s.is_empty()).then(|| text(&Value::from(s)))
}

/// v1 `CrossVersionObjectReference` text of a v2 reference.
fn reference_text(r: &Obj) -> String {
    ordered(&[
        ("kind", text_str(r, "kind")),
        ("name", text_str(r, "name")),
        ("apiVersion", text_nonempty(r, "apiVersion")),
    ])
}

/// Whether a v2 spec metric is the one v1 carries in `targetCPUUtilizationPercentage`.
fn is_cpu_utilization(metric: &Obj) -> bool {
    str_at(metric, "type") == "Resource"
        && get_obj(metric, "resource").is_some_and(|r| {
            str_at(r, "name") == "cpu"
                && get_obj(r, "target").is_some_and(|t| present(t, "averageUtilization").is_some())
        })
}

// ---- v2 → v1 -------------------------------------------------------------------------------

/// A stored autoscaling/v2 HPA as autoscaling/v1 serves it.
pub fn to_v1(mut obj: Obj) -> Obj {
    let empty = Obj::new();
    let spec = obj.remove("spec").and_then(into_obj).unwrap_or_default();
    let status = obj.remove("status").and_then(into_obj).unwrap_or_default();
    let metrics: Vec<&Obj> = array(&spec, "metrics");
    let current: Vec<&Obj> = array(&status, "currentMetrics");
    let conditions: Vec<&Obj> = array(&status, "conditions");

    let mut annotations: Vec<(&str, String)> = Vec::new();
    let others: Vec<String> = metrics
        .iter()
        .filter(|m| !is_cpu_utilization(m))
        .map(|m| metric_spec_v1(m))
        .collect();
    if !others.is_empty() {
        annotations.push((METRIC_SPECS_ANNOTATION, format!("[{}]", others.join(","))));
    }
    if !current.is_empty() {
        let list: Vec<String> = current.iter().map(|m| metric_status_v1(m)).collect();
        annotations.push((METRIC_STATUSES_ANNOTATION, format!("[{}]", list.join(","))));
    }
    if let Some(behavior) = get_obj(&spec, "behavior") {
        annotations.push((BEHAVIOR_ANNOTATION, behavior_internal(behavior)));
    }
    if !conditions.is_empty() {
        let list: Vec<String> = conditions.iter().map(|c| condition_text(c)).collect();
        annotations.push((CONDITIONS_ANNOTATION, format!("[{}]", list.join(","))));
    }
    set_round_trip_annotations(&mut obj, annotations);

    let mut v1_spec = Obj::new();
    put(&mut v1_spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    put(&mut v1_spec, "minReplicas", spec.get("minReplicas"));
    put(&mut v1_spec, "maxReplicas", spec.get("maxReplicas"));
    // The first CPU Resource metric decides, whatever its target type.
    if let Some(cpu) = metrics.iter().find(|m| {
        str_at(m, "type") == "Resource"
            && get_obj(m, "resource").is_some_and(|r| str_at(r, "name") == "cpu")
    }) {
        let target = get_obj(cpu, "resource").and_then(|r| get_obj(r, "target"));
        put(
            &mut v1_spec,
            "targetCPUUtilizationPercentage",
            target.and_then(|t| present(t, "averageUtilization")),
        );
    }
    obj.insert("spec".into(), Value::Object(v1_spec));

    let mut v1_status = Obj::new();
    put(
        &mut v1_status,
        "observedGeneration",
        status.get("observedGeneration"),
    );
    put(&mut v1_status, "lastScaleTime", status.get("lastScaleTime"));
    v1_status.insert(
        "currentReplicas".into(),
        present(&status, "currentReplicas")
            .cloned()
            .unwrap_or(json!(0)),
    );
    v1_status.insert(
        "desiredReplicas".into(),
        present(&status, "desiredReplicas")
            .cloned()
            .unwrap_or(json!(0)),
    );
    // The last CPU Resource status metric with a utilization.
    for m in &current {
        let r = get_obj(m, "resource").unwrap_or(&empty);
        if str_at(m, "type") == "Resource" && str_at(r, "name") == "cpu" {
            let utilization = get_obj(r, "current").and_then(|c| present(c, "averageUtilization"));
            put(
                &mut v1_status,
                "currentCPUUtilizationPercentage",
                utilization,
            );
        }
    }
    obj.insert("status".into(), Value::Object(v1_status));
    obj.insert("apiVersion".into(), json!("autoscaling/v1"));
    obj
}

fn into_obj(v: Value) -> Option<Obj> {
    match v {
        Value::Object(m) => Some(m),
        _ => None,
    }
}

/// The objects of the array at `key`.
fn array<'a>(obj: &'a Obj, key: &str) -> Vec<&'a Obj> {
    obj.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_object).collect())
        .unwrap_or_default()
}

/// Replaces the round-trip annotations of `obj` with `new` (removing `annotations` when that
/// leaves it empty and it was only there for them).
fn set_round_trip_annotations(obj: &mut Obj, new: Vec<(&str, String)>) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    let had = meta
        .get("annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| ROUND_TRIP.iter().any(|k| a.contains_key(*k)));
    if !had && new.is_empty() {
        return;
    }
    let annotations = meta
        .entry("annotations")
        .or_insert_with(|| Value::Object(Obj::new()));
    if !annotations.is_object() {
        *annotations = Value::Object(Obj::new());
    }
    let Some(map) = annotations.as_object_mut() else {
        return;
    };
    for k in ROUND_TRIP {
        map.remove(k);
    }
    for (k, v) in new {
        map.insert(k.to_owned(), Value::String(v));
    }
    if map.is_empty() {
        meta.remove("annotations");
    }
}

/// v1 `MetricSpec` text of a v2 spec metric.
fn metric_spec_v1(m: &Obj) -> String {
    let empty = Obj::new();
    let source = |key: &str| get_obj(m, key).unwrap_or(&empty);
    let target = |s: &Obj| get_obj(s, "target").cloned().unwrap_or_default();
    let ident = |s: &Obj| get_obj(s, "metric").cloned().unwrap_or_default();
    let mut fields = vec![("type", text_str(m, "type"))];
    if let Some(s) = get_obj(m, "object") {
        let (t, id) = (target(s), ident(s));
        let described = get_obj(s, "describedObject").unwrap_or(&empty);
        fields.push((
            "object",
            Some(ordered(&[
                ("target", Some(reference_text(described))),
                ("metricName", text_str(&id, "name")),
                ("targetValue", Some(text(&quantity(t.get("value"))))),
                ("selector", text_of(&id, "selector")),
                ("averageValue", text_of(&t, "averageValue")),
            ])),
        ));
    }
    if get_obj(m, "pods").is_some() {
        let s = source("pods");
        let (t, id) = (target(s), ident(s));
        fields.push((
            "pods",
            Some(ordered(&[
                ("metricName", text_str(&id, "name")),
                (
                    "targetAverageValue",
                    Some(text(&quantity(t.get("averageValue")))),
                ),
                ("selector", text_of(&id, "selector")),
            ])),
        ));
    }
    for key in ["resource", "containerResource"] {
        if let Some(s) = get_obj(m, key) {
            let t = target(s);
            let mut inner = vec![
                ("name", text_str(s, "name")),
                (
                    "targetAverageUtilization",
                    text_of(&t, "averageUtilization"),
                ),
                ("targetAverageValue", text_of(&t, "averageValue")),
            ];
            if key == "containerResource" {
                inner.push(("container", text_str(s, "container")));
            }
            fields.push((key, Some(ordered(&inner))));
        }
    }
    if let Some(s) = get_obj(m, "external") {
        let (t, id) = (target(s), ident(s));
        fields.push((
            "external",
            Some(ordered(&[
                ("metricName", text_str(&id, "name")),
                ("metricSelector", text_of(&id, "selector")),
                ("targetValue", text_of(&t, "value")),
                ("targetAverageValue", text_of(&t, "averageValue")),
            ])),
        ));
    }
    ordered(&fields)
}

/// v1 `MetricStatus` text of a v2 status metric.
fn metric_status_v1(m: &Obj) -> String {
    let empty = Obj::new();
    let current = |s: &Obj| get_obj(s, "current").cloned().unwrap_or_default();
    let ident = |s: &Obj| get_obj(s, "metric").cloned().unwrap_or_default();
    let mut fields = vec![("type", text_str(m, "type"))];
    if let Some(s) = get_obj(m, "object") {
        let (c, id) = (current(s), ident(s));
        let described = get_obj(s, "describedObject").unwrap_or(&empty);
        fields.push((
            "object",
            Some(ordered(&[
                ("target", Some(reference_text(described))),
                ("metricName", text_str(&id, "name")),
                ("currentValue", Some(text(&quantity(c.get("value"))))),
                ("selector", text_of(&id, "selector")),
                ("averageValue", text_of(&c, "averageValue")),
            ])),
        ));
    }
    if let Some(s) = get_obj(m, "pods") {
        let (c, id) = (current(s), ident(s));
        fields.push((
            "pods",
            Some(ordered(&[
                ("metricName", text_str(&id, "name")),
                (
                    "currentAverageValue",
                    Some(text(&quantity(c.get("averageValue")))),
                ),
                ("selector", text_of(&id, "selector")),
            ])),
        ));
    }
    for key in ["resource", "containerResource"] {
        if let Some(s) = get_obj(m, key) {
            let c = current(s);
            let mut inner = vec![
                ("name", text_str(s, "name")),
                (
                    "currentAverageUtilization",
                    text_of(&c, "averageUtilization"),
                ),
                (
                    "currentAverageValue",
                    Some(text(&quantity(c.get("averageValue")))),
                ),
            ];
            if key == "containerResource" {
                inner.push(("container", text_str(s, "container")));
            }
            fields.push((key, Some(ordered(&inner))));
        }
    }
    if let Some(s) = get_obj(m, "external") {
        let (c, id) = (current(s), ident(s));
        fields.push((
            "external",
            Some(ordered(&[
                ("metricName", text_str(&id, "name")),
                ("metricSelector", text_of(&id, "selector")),
                ("currentValue", Some(text(&quantity(c.get("value"))))),
                ("currentAverageValue", text_of(&c, "averageValue")),
            ])),
        ));
    }
    ordered(&fields)
}

/// v1 `HorizontalPodAutoscalerCondition` text (a zero `lastTransitionTime` is Go's `null`).
fn condition_text(c: &Obj) -> String {
    ordered(&[
        ("type", text_str(c, "type")),
        ("status", text_str(c, "status")),
        (
            "lastTransitionTime",
            Some(text_of(c, "lastTransitionTime").unwrap_or_else(|| "null".into())),
        ),
        ("reason", text_nonempty(c, "reason")),
        ("message", text_nonempty(c, "message")),
    ])
}

/// Go's internal `HorizontalPodAutoscalerBehavior` marshalled without JSON tags.
fn behavior_internal(b: &Obj) -> String {
    let rules = |key: &str| match get_obj(b, key) {
        None => "null".to_owned(),
        Some(r) => {
            let policies = match r.get("policies") {
                Some(Value::Array(items)) => {
                    let list: Vec<String> = items
                        .iter()
                        .filter_map(Value::as_object)
                        .map(|p| {
                            ordered(&[
                                ("Type", text_str(p, "type")),
                                ("Value", Some(text(p.get("value").unwrap_or(&json!(0))))),
                                (
                                    "PeriodSeconds",
                                    Some(text(p.get("periodSeconds").unwrap_or(&json!(0)))),
                                ),
                            ])
                        })
                        .collect();
                    format!("[{}]", list.join(","))
                }
                _ => "null".to_owned(),
            };
            let or_null = |k: &str| Some(text_of(r, k).unwrap_or_else(|| "null".into()));
            ordered(&[
                (
                    "StabilizationWindowSeconds",
                    or_null("stabilizationWindowSeconds"),
                ),
                ("SelectPolicy", or_null("selectPolicy")),
                ("Policies", Some(policies)),
                ("Tolerance", or_null("tolerance")),
            ])
        }
    };
    ordered(&[
        ("ScaleUp", Some(rules("scaleUp"))),
        ("ScaleDown", Some(rules("scaleDown"))),
    ])
}

// ---- v1 → v2 -------------------------------------------------------------------------------

/// An autoscaling/v1 HPA in the stored autoscaling/v2 form.
pub fn to_v2(mut obj: Obj) -> Obj {
    let annotations = obj
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let parsed = |key: &str| -> Option<Value> {
        annotations
            .get(key)
            .and_then(Value::as_str)
            .and_then(|s| serde_json::from_str(s).ok())
    };
    let spec = obj.remove("spec").and_then(into_obj).unwrap_or_default();
    let status = obj.remove("status").and_then(into_obj).unwrap_or_default();

    let mut v2_spec = Obj::new();
    put(&mut v2_spec, "scaleTargetRef", spec.get("scaleTargetRef"));
    put(&mut v2_spec, "minReplicas", spec.get("minReplicas"));
    put(&mut v2_spec, "maxReplicas", spec.get("maxReplicas"));
    let mut metrics: Vec<Value> = match parsed(METRIC_SPECS_ANNOTATION) {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_object)
            .map(metric_spec_v2)
            .collect(),
        _ => Vec::new(),
    };
    if let Some(cpu) = present(&spec, "targetCPUUtilizationPercentage") {
        metrics.push(json!({
            "type": "Resource",
            "resource": { "name": "cpu", "target": { "type": "Utilization", "averageUtilization": cpu } },
        }));
    }
    if metrics.is_empty() {
        metrics.push(default_cpu_metric());
    }
    v2_spec.insert("metrics".into(), Value::Array(metrics));
    if let Some(Value::Object(b)) = parsed(BEHAVIOR_ANNOTATION) {
        let behavior = behavior_v2(&b);
        if !behavior.is_empty() {
            v2_spec.insert("behavior".into(), Value::Object(behavior));
        }
    }
    // Upstream stores this and applies the v2 defaults whenever it reads it back; here the
    // stored form is the defaulted one.
    v2_spec_defaults(&mut v2_spec);
    obj.insert("spec".into(), Value::Object(v2_spec));

    let mut v2_status = Obj::new();
    put(
        &mut v2_status,
        "observedGeneration",
        status.get("observedGeneration"),
    );
    put(&mut v2_status, "lastScaleTime", status.get("lastScaleTime"));
    if let Some(n) = present(&status, "currentReplicas").filter(|n| n.as_i64() != Some(0)) {
        v2_status.insert("currentReplicas".into(), n.clone());
    }
    v2_status.insert(
        "desiredReplicas".into(),
        present(&status, "desiredReplicas")
            .cloned()
            .unwrap_or(json!(0)),
    );
    match parsed(METRIC_STATUSES_ANNOTATION) {
        Some(Value::Array(items)) => {
            let list: Vec<Value> = items
                .iter()
                .filter_map(Value::as_object)
                .map(metric_status_v2)
                .collect();
            v2_status.insert("currentMetrics".into(), Value::Array(list));
        }
        _ => {
            if let Some(cpu) = present(&status, "currentCPUUtilizationPercentage") {
                v2_status.insert(
                    "currentMetrics".into(),
                    json!([{ "type": "Resource", "resource": { "name": "cpu", "current": { "averageUtilization": cpu } } }]),
                );
            }
        }
    }
    if let Some(Value::Array(items)) = parsed(CONDITIONS_ANNOTATION) {
        let list: Vec<Value> = items
            .into_iter()
            .filter(Value::is_object)
            .map(|mut c| {
                if let Some(c) = c.as_object_mut() {
                    c.retain(|_, v| !v.is_null() && v.as_str() != Some(""));
                }
                c
            })
            .collect();
        v2_status.insert("conditions".into(), Value::Array(list));
    }
    obj.insert("status".into(), Value::Object(v2_status));
    set_round_trip_annotations(&mut obj, Vec::new());
    obj.insert("apiVersion".into(), json!("autoscaling/v2"));
    obj
}

/// A v1 `CrossVersionObjectReference` as v2's.
fn reference_v2(r: Option<&Value>) -> Value {
    let mut out = Obj::new();
    if let Some(r) = r.and_then(Value::as_object) {
        out.insert("kind".into(), json!(str_at(r, "kind")));
        out.insert("name".into(), json!(str_at(r, "name")));
        put(&mut out, "apiVersion", r.get("apiVersion"));
    }
    Value::Object(out)
}

/// A `MetricIdentifier` of a v1 name and selector.
fn identifier(name: Option<&Value>, selector: Option<&Value>) -> Value {
    let mut id = Obj::new();
    id.insert(
        "name".into(),
        name.cloned().unwrap_or_else(|| Value::from("")),
    );
    put(&mut id, "selector", selector);
    Value::Object(id)
}

/// A v2 spec metric of a v1 `MetricSpec`.
fn metric_spec_v2(m: &Obj) -> Value {
    let mut out = Obj::new();
    out.insert("type".into(), json!(str_at(m, "type")));
    if let Some(s) = get_obj(m, "object") {
        let mut target = Obj::new();
        let kind = if present(s, "averageValue").is_some() {
            "AverageValue"
        } else {
            "Value"
        };
        target.insert("type".into(), json!(kind));
        target.insert("value".into(), quantity(s.get("targetValue")));
        put(&mut target, "averageValue", s.get("averageValue"));
        out.insert(
            "object".into(),
            json!({
                "describedObject": reference_v2(s.get("target")),
                "target": target,
                "metric": identifier(s.get("metricName"), s.get("selector")),
            }),
        );
    }
    if let Some(s) = get_obj(m, "pods") {
        out.insert(
            "pods".into(),
            json!({
                "metric": identifier(s.get("metricName"), s.get("selector")),
                "target": { "type": "AverageValue", "averageValue": quantity(s.get("targetAverageValue")) },
            }),
        );
    }
    for key in ["resource", "containerResource"] {
        if let Some(s) = get_obj(m, key) {
            let mut target = Obj::new();
            let kind = if present(s, "targetAverageUtilization").is_some() {
                "Utilization"
            } else {
                "AverageValue"
            };
            target.insert("type".into(), json!(kind));
            put(&mut target, "averageValue", s.get("targetAverageValue"));
            put(
                &mut target,
                "averageUtilization",
                s.get("targetAverageUtilization"),
            );
            let mut source = Obj::new();
            source.insert("name".into(), json!(str_at(s, "name")));
            source.insert("target".into(), Value::Object(target));
            if key == "containerResource" {
                source.insert("container".into(), json!(str_at(s, "container")));
            }
            out.insert(key.into(), Value::Object(source));
        }
    }
    if let Some(s) = get_obj(m, "external") {
        let mut target = Obj::new();
        let kind = if present(s, "targetValue").is_some() {
            "Value"
        } else {
            "AverageValue"
        };
        target.insert("type".into(), json!(kind));
        put(&mut target, "value", s.get("targetValue"));
        put(&mut target, "averageValue", s.get("targetAverageValue"));
        out.insert(
            "external".into(),
            json!({
                "metric": identifier(s.get("metricName"), s.get("metricSelector")),
                "target": target,
            }),
        );
    }
    Value::Object(out)
}

/// A v2 status metric of a v1 `MetricStatus`.
fn metric_status_v2(m: &Obj) -> Value {
    let mut out = Obj::new();
    out.insert("type".into(), json!(str_at(m, "type")));
    if let Some(s) = get_obj(m, "object") {
        let mut current = Obj::new();
        current.insert("value".into(), quantity(s.get("currentValue")));
        put(&mut current, "averageValue", s.get("averageValue"));
        out.insert(
            "object".into(),
            json!({
                "describedObject": reference_v2(s.get("target")),
                "current": current,
                "metric": identifier(s.get("metricName"), s.get("selector")),
            }),
        );
    }
    if let Some(s) = get_obj(m, "pods") {
        out.insert(
            "pods".into(),
            json!({
                "metric": identifier(s.get("metricName"), s.get("selector")),
                "current": { "averageValue": quantity(s.get("currentAverageValue")) },
            }),
        );
    }
    for key in ["resource", "containerResource"] {
        if let Some(s) = get_obj(m, key) {
            let mut current = Obj::new();
            current.insert(
                "averageValue".into(),
                quantity(s.get("currentAverageValue")),
            );
            put(
                &mut current,
                "averageUtilization",
                s.get("currentAverageUtilization"),
            );
            let mut source = Obj::new();
            source.insert("name".into(), json!(str_at(s, "name")));
            source.insert("current".into(), Value::Object(current));
            if key == "containerResource" {
                source.insert("container".into(), json!(str_at(s, "container")));
            }
            out.insert(key.into(), Value::Object(source));
        }
    }
    if let Some(s) = get_obj(m, "external") {
        let mut current = Obj::new();
        current.insert("value".into(), quantity(s.get("currentValue")));
        put(&mut current, "averageValue", s.get("currentAverageValue"));
        out.insert(
            "external".into(),
            json!({
                "metric": identifier(s.get("metricName"), s.get("metricSelector")),
                "current": current,
            }),
        );
    }
    Value::Object(out)
}

/// The field of `obj` named `name`, matched case-insensitively as Go's `encoding/json` does.
fn go_field<'a>(obj: &'a Obj, name: &str) -> Option<&'a Value> {
    obj.get(name)
        .or_else(|| {
            obj.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .filter(|v| !v.is_null())
}

/// `spec.behavior` of the internal-type JSON in the behavior annotation; empty when it sets
/// neither direction (upstream then leaves `behavior` unset).
fn behavior_v2(b: &Obj) -> Obj {
    let mut out = Obj::new();
    for (go, json_name) in [("ScaleUp", "scaleUp"), ("ScaleDown", "scaleDown")] {
        let Some(r) = go_field(b, go).and_then(Value::as_object) else {
            continue;
        };
        let mut rules = Obj::new();
        put(
            &mut rules,
            "stabilizationWindowSeconds",
            go_field(r, "StabilizationWindowSeconds"),
        );
        put(&mut rules, "selectPolicy", go_field(r, "SelectPolicy"));
        if let Some(Value::Array(items)) = go_field(r, "Policies") {
            let list: Vec<Value> = items
                .iter()
                .filter_map(Value::as_object)
                .map(|p| {
                    json!({
                        "type": go_field(p, "Type").cloned().unwrap_or(json!("")),
                        "value": go_field(p, "Value").cloned().unwrap_or(json!(0)),
                        "periodSeconds": go_field(p, "PeriodSeconds").cloned().unwrap_or(json!(0)),
                    })
                })
                .collect();
            rules.insert("policies".into(), Value::Array(list));
        }
        put(&mut rules, "tolerance", go_field(r, "Tolerance"));
        out.insert(json_name.into(), Value::Object(rules));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::catalog;
    use crate::registry::convert::{from_storage, is_converted, stored_as, to_storage};

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    fn v1() -> &'static crate::registry::catalog::ResourceInfo {
        catalog::find("autoscaling", "v1", "horizontalpodautoscalers").unwrap()
    }

    fn annotation(o: &Obj, key: &str) -> Value {
        let text = o["metadata"]["annotations"][key].as_str().unwrap();
        serde_json::from_str(text).unwrap()
    }

    #[test]
    fn v1_hpas_are_stored_as_v2_under_the_same_keys() {
        assert!(is_converted(v1()));
        assert_eq!(stored_as(v1()), ("autoscaling", "horizontalpodautoscalers"));
        let v2 = catalog::find("autoscaling", "v2", "horizontalpodautoscalers").unwrap();
        assert!(!is_converted(v2));
        assert_eq!(
            crate::registry::key(v1(), "ns", "web"),
            crate::registry::key(v2, "ns", "web")
        );
    }

    #[test]
    fn a_v1_cpu_target_becomes_a_resource_utilization_metric_and_back() {
        let served = obj(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                     "minReplicas": 2, "maxReplicas": 5, "targetCPUUtilizationPercentage": 50},
            "status": {"currentReplicas": 2, "desiredReplicas": 3, "currentCPUUtilizationPercentage": 61,
                       "lastScaleTime": "2024-01-02T03:04:05Z", "observedGeneration": 4},
        }));
        let stored = to_storage(v1(), served.clone());
        assert_eq!(
            Value::Object(stored.clone()),
            json!({
                "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "web", "namespace": "default"},
                "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                         "minReplicas": 2, "maxReplicas": 5,
                         "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                             "target": {"type": "Utilization", "averageUtilization": 50}}}]},
                "status": {"currentReplicas": 2, "desiredReplicas": 3, "lastScaleTime": "2024-01-02T03:04:05Z",
                           "observedGeneration": 4,
                           "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu",
                               "current": {"averageUtilization": 61}}}]},
            })
        );
        let back = from_storage(v1(), stored);
        // The status metric's raw value travels in the current-metrics annotation.
        assert_eq!(
            annotation(&back, METRIC_STATUSES_ANNOTATION),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "currentAverageUtilization": 61, "currentAverageValue": "0"}}])
        );
        assert_eq!(back["spec"], served["spec"]);
        assert_eq!(back["status"], served["status"]);
        assert_eq!(back["apiVersion"], json!("autoscaling/v1"));
    }

    #[test]
    fn a_v1_hpa_without_a_target_gets_upstreams_implicit_80_percent() {
        let stored = to_storage(
            v1(),
            obj(
                json!({"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                "metadata": {"name": "web"}, "spec": {"maxReplicas": 3, "minReplicas": 1,
                "scaleTargetRef": {"kind": "Deployment", "name": "web"}}}),
            ),
        );
        assert_eq!(
            stored["spec"]["metrics"],
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": 80}}}])
        );
        let back = from_storage(v1(), stored);
        assert_eq!(back["spec"]["targetCPUUtilizationPercentage"], json!(80));
        assert_eq!(
            back["status"],
            json!({"currentReplicas": 0, "desiredReplicas": 0})
        );
        assert!(back["metadata"].get("annotations").is_none());
    }

    fn rich_v2() -> Obj {
        obj(json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "namespace": "default", "annotations": {"mine": "kept",
                CONDITIONS_ANNOTATION: "stale"}},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "minReplicas": 1, "maxReplicas": 10,
                "metrics": [
                    {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "100Mi"}}},
                    {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "10"}}},
                    {"type": "Object", "object": {"describedObject": {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "name": "main"},
                        "metric": {"name": "hits"}, "target": {"type": "Value", "value": "2k"}}},
                    {"type": "External", "external": {"metric": {"name": "queue", "selector": {"matchLabels": {"q": "a"}}},
                        "target": {"type": "AverageValue", "averageValue": "30"}}},
                    {"type": "ContainerResource", "containerResource": {"name": "cpu", "container": "app",
                        "target": {"type": "Utilization", "averageUtilization": 60}}},
                ],
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                        {"type": "Pods", "value": 4, "periodSeconds": 15},
                        {"type": "Percent", "value": 100, "periodSeconds": 15}]},
                    "scaleDown": {"stabilizationWindowSeconds": 120, "selectPolicy": "Min", "policies": [
                        {"type": "Percent", "value": 10, "periodSeconds": 60}]},
                },
            },
            "status": {
                "currentReplicas": 3, "desiredReplicas": 4,
                "currentMetrics": [
                    {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 90, "averageValue": "450m"}}},
                    {"type": "Pods", "pods": {"metric": {"name": "qps"}, "current": {"averageValue": "12"}}},
                ],
                "conditions": [
                    {"type": "AbleToScale", "status": "True", "lastTransitionTime": "2024-01-02T03:04:05Z",
                     "reason": "ReadyForNewScale", "message": "recommended size matches current size"},
                ],
            },
        }))
    }

    #[test]
    fn v2_only_fields_travel_in_upstreams_annotations() {
        let v1 = from_storage(v1(), rich_v2());
        assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], json!(70));
        assert_eq!(v1["status"]["currentCPUUtilizationPercentage"], json!(90));
        assert_eq!(v1["metadata"]["annotations"]["mine"], json!("kept"));
        assert_eq!(
            annotation(&v1, METRIC_SPECS_ANNOTATION),
            json!([
                {"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}},
                {"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}},
                {"type": "Object", "object": {"target": {"kind": "Ingress", "name": "main", "apiVersion": "networking.k8s.io/v1"},
                    "metricName": "hits", "targetValue": "2k"}},
                {"type": "External", "external": {"metricName": "queue", "metricSelector": {"matchLabels": {"q": "a"}},
                    "targetAverageValue": "30"}},
                {"type": "ContainerResource", "containerResource": {"name": "cpu", "targetAverageUtilization": 60, "container": "app"}},
            ])
        );
        // Go's field order, as upstream writes it.
        let metrics = v1["metadata"]["annotations"][METRIC_SPECS_ANNOTATION]
            .as_str()
            .unwrap();
        assert!(metrics.starts_with(
            r#"[{"type":"Resource","resource":{"name":"memory","targetAverageValue":"100Mi"}}"#
        ));
        assert_eq!(
            v1["metadata"]["annotations"][BEHAVIOR_ANNOTATION],
            json!(concat!(
                r#"{"ScaleUp":{"StabilizationWindowSeconds":0,"SelectPolicy":"Max","Policies":"#,
                r#"[{"Type":"Pods","Value":4,"PeriodSeconds":15},{"Type":"Percent","Value":100,"PeriodSeconds":15}],"#,
                r#""Tolerance":null},"ScaleDown":{"StabilizationWindowSeconds":120,"SelectPolicy":"Min","#,
                r#""Policies":[{"Type":"Percent","Value":10,"PeriodSeconds":60}],"Tolerance":null}}"#
            ))
        );
        assert_eq!(
            v1["metadata"]["annotations"][CONDITIONS_ANNOTATION],
            json!(concat!(
                r#"[{"type":"AbleToScale","status":"True","lastTransitionTime":"2024-01-02T03:04:05Z","#,
                r#""reason":"ReadyForNewScale","message":"recommended size matches current size"}]"#
            ))
        );
        assert_eq!(
            annotation(&v1, METRIC_STATUSES_ANNOTATION),
            json!([
                {"type": "Resource", "resource": {"name": "cpu", "currentAverageUtilization": 90, "currentAverageValue": "450m"}},
                {"type": "Pods", "pods": {"metricName": "qps", "currentAverageValue": "12"}},
            ])
        );
    }

    #[test]
    fn v2_to_v1_to_v2_loses_nothing() {
        let original = rich_v2();
        let back = to_storage(v1(), from_storage(v1(), original.clone()));
        let mut expected = original;
        // The conversion's annotations never reach storage; the CPU target moves to the end
        // (v1 keeps it in its own field), and the Object target gains its value as upstream's.
        expected["metadata"]["annotations"] = json!({"mine": "kept"});
        let metrics = expected["spec"]["metrics"].as_array_mut().unwrap();
        let cpu = metrics.remove(1);
        metrics.push(cpu);
        assert_eq!(back["metadata"], expected["metadata"]);
        assert_eq!(back["spec"], expected["spec"]);
        assert_eq!(
            back["status"]["conditions"],
            expected["status"]["conditions"]
        );
        assert_eq!(
            back["status"]["currentMetrics"],
            expected["status"]["currentMetrics"]
        );
    }

    #[test]
    fn a_behavior_annotation_is_read_case_insensitively_and_defaulted() {
        let served = obj(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "annotations": {
                BEHAVIOR_ANNOTATION: r#"{"scaleDown":{"stabilizationWindowSeconds":30}}"#}},
            "spec": {"maxReplicas": 3, "minReplicas": 1, "targetCPUUtilizationPercentage": 40,
                "scaleTargetRef": {"kind": "Deployment", "name": "web"}},
        }));
        let stored = to_storage(v1(), served);
        assert!(stored["metadata"].get("annotations").is_none());
        assert_eq!(
            stored["spec"]["behavior"],
            json!({
                "scaleDown": {"stabilizationWindowSeconds": 30, "selectPolicy": "Max",
                    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
                "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                    {"type": "Pods", "value": 4, "periodSeconds": 15},
                    {"type": "Percent", "value": 100, "periodSeconds": 15}]},
            })
        );
    }

    #[test]
    fn unreadable_or_empty_annotations_are_dropped() {
        let served = obj(json!({
            "apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "web", "annotations": {
                BEHAVIOR_ANNOTATION: "{}", METRIC_SPECS_ANNOTATION: "abc",
                CONDITIONS_ANNOTATION: "", METRIC_STATUSES_ANNOTATION: "[]", "x": "y"}},
            "spec": {"maxReplicas": 3, "scaleTargetRef": {"kind": "Deployment", "name": "web"}},
        }));
        let stored = to_storage(v1(), served);
        assert_eq!(stored["metadata"]["annotations"], json!({"x": "y"}));
        assert!(stored["spec"].get("behavior").is_none());
        assert_eq!(
            stored["spec"]["metrics"][0]["resource"]["name"],
            json!("cpu")
        );
    }
}
