//! autoscaling defaults (`pkg/apis/autoscaling/v1/defaults.go`,
//! `pkg/apis/autoscaling/v2/defaults.go`).
//!
//! Both versions default `minReplicas` to 1. autoscaling/v2 also gives an HPA without metrics
//! the CPU target autoscaling/v1 always implied (80 % average utilization), and fills every
//! unset field of a `behavior` the client sent with the controller's built-in rules (scale up:
//! no stabilization window, the larger of 4 pods or 100 % per 15 s; scale down: 100 % per 15 s,
//! with the window left unset so the controller's `--horizontal-pod-autoscaler-downscale-
//! stabilization` applies). An HPA without `behavior` keeps none: the controller uses the same
//! rules then. autoscaling/v1 has no metrics field; its conversion to the stored v2 form adds
//! the CPU target instead (`registry::convert`).

use serde_json::{Value, json};

use super::{Obj, default_ptr, is_unset, struct_obj};

/// `autoscaling.DefaultCPUUtilization`: the CPU target of an HPA that names no metric.
pub(crate) const DEFAULT_CPU_UTILIZATION: i64 = 80;

/// Defaults an autoscaling object of `version` and `kind`.
pub(super) fn apply(version: &str, kind: &str, obj: &mut Obj) {
    if kind != "HorizontalPodAutoscaler" {
        return;
    }
    let Some(spec) = struct_obj(obj, "spec") else {
        return;
    };
    default_ptr(spec, "minReplicas", json!(1));
    if version == "v2" {
        v2_spec(spec);
    }
}

/// `SetDefaults_HorizontalPodAutoscaler` (v2) after `minReplicas`: the CPU metric when there
/// is none, then `SetDefaults_HorizontalPodAutoscalerBehavior`.
pub(crate) fn v2_spec(spec: &mut Obj) {
    let no_metrics = match spec.get("metrics") {
        None | Some(Value::Null) => true,
        Some(Value::Array(items)) => items.is_empty(),
        Some(_) => false,
    };
    if no_metrics {
        spec.insert("metrics".into(), json!([default_cpu_metric()]));
    }
    if let Some(behavior) = spec.get_mut("behavior").and_then(Value::as_object_mut) {
        scaling_rules(behavior, "scaleUp", scale_up_rules());
        scaling_rules(behavior, "scaleDown", scale_down_rules());
    }
}

/// The v2 metric autoscaling/v1 implies: CPU at 80 % average utilization.
pub(crate) fn default_cpu_metric() -> Value {
    json!({
        "type": "Resource",
        "resource": {
            "name": "cpu",
            "target": { "type": "Utilization", "averageUtilization": DEFAULT_CPU_UTILIZATION },
        },
    })
}

/// `defaultHPAScaleUpRules`.
fn scale_up_rules() -> Obj {
    let Value::Object(rules) = json!({
        "stabilizationWindowSeconds": 0,
        "selectPolicy": "Max",
        "policies": [
            { "type": "Pods", "value": 4, "periodSeconds": 15 },
            { "type": "Percent", "value": 100, "periodSeconds": 15 },
        ],
    }) else {
        return Obj::new();
    };
    rules
}

/// `defaultHPAScaleDownRules` (no stabilization window: the controller's flag decides).
fn scale_down_rules() -> Obj {
    let Value::Object(rules) = json!({
        "selectPolicy": "Max",
        "policies": [{ "type": "Percent", "value": 100, "periodSeconds": 15 }],
    }) else {
        return Obj::new();
    };
    rules
}

/// `GenerateHPAScale{Up,Down}Rules`: the rules at `key` with each unset field (`null` or
/// absent: pointers and a nil slice in Go) taken from `defaults`. Fields the client set, an
/// empty `policies: []` among them, are kept.
fn scaling_rules(behavior: &mut Obj, key: &str, defaults: Obj) {
    if is_unset(behavior.get(key)) {
        behavior.insert(key.to_owned(), Value::Object(defaults));
        return;
    }
    let Some(rules) = behavior.get_mut(key).and_then(Value::as_object_mut) else {
        return; // not an object: left for decoding to reject
    };
    for (field, value) in defaults {
        if is_unset(rules.get(&field)) {
            rules.insert(field, value);
        }
    }
}
