//! apps/v1 workloads (pkg/apis/apps/validation) and the selector/template rules shared with
//! ReplicationController and Job.

use serde_json::Value;

use super::pod::{self, Deadline};
use super::{
    IMMUTABLE, Obj, forbidden, get_obj, get_str, go_int_or_string, go_label_selector, go_quote,
    go_string_map, invalid, nonnegative, not_supported, required, selector_is_empty,
    selector_matches, selector_parses, validate_label_selector,
};
use crate::error::FieldError;

/// Validates an apps/v1 object of kind `kind`.
pub(super) fn validate(kind: &str, obj: &Obj, old: Option<&Obj>) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let empty = Obj::new();
    let spec = get_obj(obj, "spec").unwrap_or(&empty);
    let old_spec = old.map(|o| get_obj(o, "spec").unwrap_or(&empty));
    match kind {
        "Deployment" => deployment(&mut errs, spec),
        "ReplicaSet" => replica_set(&mut errs, spec),
        "StatefulSet" => stateful_set(&mut errs, spec, old_spec),
        "DaemonSet" => daemon_set(&mut errs, spec),
        _ => return errs,
    }
    if let Some(old_spec) = old_spec
        && kind != "StatefulSet"
    {
        immutable_selector(&mut errs, spec, old_spec, "spec.selector");
    }
    errs
}

/// `ValidateImmutableField` of a label selector.
pub(super) fn immutable_selector(
    errs: &mut Vec<FieldError>,
    spec: &Obj,
    old_spec: &Obj,
    path: &str,
) {
    let new = spec.get("selector").filter(|v| !v.is_null());
    let old = old_spec.get("selector").filter(|v| !v.is_null());
    if !selector_equal(new, old) {
        let shown = new.map_or_else(|| "null".to_owned(), go_label_selector);
        errs.push(invalid(path, &shown, IMMUTABLE));
    }
}

/// Semantic equality of two selectors (empty maps and lists equal absent ones).
fn selector_equal(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn norm(v: Option<&Value>) -> Option<Value> {
        let mut m = v?.as_object()?.clone();
        m.retain(|_, v| match v {
            Value::Null => false,
            Value::Object(o) => !o.is_empty(),
            Value::Array(a) => !a.is_empty(),
            _ => true,
        });
        Some(Value::Object(m))
    }
    norm(a) == norm(b)
}

/// The selector rules of a workload: required, requirement syntax, not empty
/// (`empty selector is invalid for <what>`). Returns the selector when it parses.
fn selector<'a>(errs: &mut Vec<FieldError>, spec: &'a Obj, what: &str) -> Option<&'a Obj> {
    let Some(sel) = get_obj(spec, "selector") else {
        errs.push(required("spec.selector", ""));
        return None;
    };
    validate_label_selector(errs, sel, "spec.selector");
    if selector_is_empty(sel) {
        errs.push(invalid(
            "spec.selector",
            &go_label_selector(&Value::Object(sel.clone())),
            &format!("empty selector is invalid for {what}"),
        ));
    }
    Some(sel)
}

/// `selector` does not match template `labels` (skipped for an empty selector, which matches
/// everything; a missing selector matches nothing).
pub(super) fn template_labels_match(
    errs: &mut Vec<FieldError>,
    sel: Option<&Obj>,
    template: Option<&Obj>,
    path: &str,
) {
    if sel.is_some_and(|s| !selector_parses(s)) {
        return;
    }
    if sel.is_some_and(selector_is_empty) {
        return;
    }
    let labels = template
        .and_then(|t| get_obj(t, "metadata"))
        .and_then(|m| m.get("labels"))
        .filter(|v| !v.is_null());
    if !selector_matches(sel, labels.and_then(Value::as_object)) {
        errs.push(invalid(
            &format!("{path}.metadata.labels"),
            &go_string_map(labels),
            "`selector` does not match template `labels`",
        ));
    }
}

/// `ValidatePodTemplateSpecForReplicaSet`: labels match, pod template valid, restart policy
/// `Always`, no `activeDeadlineSeconds`.
fn replica_set_template(errs: &mut Vec<FieldError>, spec: &Obj, sel: Option<&Obj>) {
    let template = get_obj(spec, "template");
    template_labels_match(errs, sel, template, "spec.template");
    pod::template(errs, template, "spec.template");
    pod::always_restart(
        errs,
        template,
        "spec.template",
        Deadline::Forbidden("ReplicaSet"),
    );
}

/// `ValidateDeploymentSpec`.
fn deployment(errs: &mut Vec<FieldError>, spec: &Obj) {
    nonnegative(errs, spec, "replicas", "spec");
    let sel = selector(errs, spec, "deployment");
    if sel.is_none_or(selector_parses) {
        replica_set_template(errs, spec, sel);
    } else if let Some(s) = sel {
        errs.push(invalid(
            "spec.selector",
            &go_label_selector(&Value::Object(s.clone())),
            "invalid label selector",
        ));
    }
    deployment_strategy(errs, get_obj(spec, "strategy"));
    nonnegative(errs, spec, "minReadySeconds", "spec");
    nonnegative(errs, spec, "revisionHistoryLimit", "spec");
    if let Some(p) = spec.get("progressDeadlineSeconds").and_then(Value::as_i64) {
        if p < 0 {
            errs.push(invalid(
                "spec.progressDeadlineSeconds",
                &p.to_string(),
                super::NONNEGATIVE,
            ));
        }
        let min_ready = spec
            .get("minReadySeconds")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        if p <= min_ready {
            errs.push(invalid(
                "spec.progressDeadlineSeconds",
                &p.to_string(),
                "must be greater than minReadySeconds",
            ));
        }
    }
}

/// `ValidateDeploymentStrategy`.
fn deployment_strategy(errs: &mut Vec<FieldError>, strategy: Option<&Obj>) {
    let empty = Obj::new();
    let strategy = strategy.unwrap_or(&empty);
    let rolling = get_obj(strategy, "rollingUpdate");
    match get_str(strategy, "type") {
        "Recreate" => {
            if rolling.is_some() {
                errs.push(forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" => match rolling {
            None => errs.push(required(
                "spec.strategy.rollingUpdate",
                "this should be defaulted and never be nil",
            )),
            Some(r) => rolling_update_deployment(errs, r, "spec.strategy.rollingUpdate"),
        },
        other => {
            let ru = if rolling.is_some() {
                "(*apps.RollingUpdateDeployment)(0xc000000000)"
            } else {
                "(*apps.RollingUpdateDeployment)(nil)"
            };
            errs.push(not_supported(
                "spec.strategy",
                &format!(
                    "apps.DeploymentStrategy{{Type:{}, RollingUpdate:{ru}}}",
                    go_quote(other)
                ),
                &["Recreate", "RollingUpdate"],
            ));
        }
    }
}

/// An int-or-percent value: `Some(n)` for an int or a valid percent, and whether it is a
/// percent.
fn int_or_percent(v: Option<&Value>) -> (i64, bool) {
    match v {
        Some(Value::String(s)) => match s.strip_suffix('%') {
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                (n.parse().unwrap_or(i64::MAX), true)
            }
            // `IntValue()` of a non-percent string is its integer parse (0 when invalid).
            _ => (s.parse().unwrap_or(0), false),
        },
        Some(v) => (v.as_i64().unwrap_or(0), false),
        None => (0, false),
    }
}

/// `ValidatePositiveIntOrPercent`.
fn positive_int_or_percent(errs: &mut Vec<FieldError>, v: Option<&Value>, path: &str) {
    match v {
        Some(Value::String(s)) => {
            let ok = s
                .strip_suffix('%')
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                errs.push(invalid(
                    path,
                    &go_int_or_string(v),
                    "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                ));
            }
        }
        Some(Value::Number(n)) => {
            let n = n.as_i64().unwrap_or(0);
            if n < 0 {
                errs.push(invalid(path, &n.to_string(), super::NONNEGATIVE));
            }
        }
        _ => {}
    }
}

/// `IsNotMoreThan100Percent`.
fn not_more_than_100(errs: &mut Vec<FieldError>, v: Option<&Value>, path: &str) {
    let (n, percent) = int_or_percent(v);
    if percent && n > 100 {
        errs.push(invalid(
            path,
            &go_int_or_string(v),
            "must not be greater than 100%",
        ));
    }
}

/// `ValidateRollingUpdateDeployment`.
fn rolling_update_deployment(errs: &mut Vec<FieldError>, r: &Obj, path: &str) {
    let unavailable = r.get("maxUnavailable").filter(|v| !v.is_null());
    let surge = r.get("maxSurge").filter(|v| !v.is_null());
    let pu = format!("{path}.maxUnavailable");
    positive_int_or_percent(errs, unavailable, &pu);
    positive_int_or_percent(errs, surge, &format!("{path}.maxSurge"));
    if int_or_percent(unavailable).0 == 0 && int_or_percent(surge).0 == 0 {
        errs.push(invalid(
            &pu,
            &go_int_or_string(unavailable),
            "may not be 0 when `maxSurge` is 0",
        ));
    }
    not_more_than_100(errs, unavailable, &pu);
}

/// `ValidateReplicaSetSpec`.
fn replica_set(errs: &mut Vec<FieldError>, spec: &Obj) {
    nonnegative(errs, spec, "replicas", "spec");
    nonnegative(errs, spec, "minReadySeconds", "spec");
    let sel = selector(errs, spec, "deployment");
    if sel.is_none_or(selector_parses) {
        replica_set_template(errs, spec, sel);
    } else if let Some(s) = sel {
        errs.push(invalid(
            "spec.selector",
            &go_label_selector(&Value::Object(s.clone())),
            "invalid label selector",
        ));
    }
}

/// `ValidateStatefulSetSpec` (the pod spec itself is not validated upstream), and on update
/// `ValidateStatefulSetUpdate`'s rule that only some spec fields may change.
fn stateful_set(errs: &mut Vec<FieldError>, spec: &Obj, old_spec: Option<&Obj>) {
    match get_str(spec, "podManagementPolicy") {
        "" => errs.push(required("spec.podManagementPolicy", "")),
        "OrderedReady" | "Parallel" => {}
        other => errs.push(invalid(
            "spec.podManagementPolicy",
            &go_quote(other),
            "must be 'OrderedReady' or 'Parallel'",
        )),
    }
    let empty = Obj::new();
    let strategy = get_obj(spec, "updateStrategy").unwrap_or(&empty);
    let rolling = get_obj(strategy, "rollingUpdate");
    match get_str(strategy, "type") {
        "" => errs.push(required("spec.updateStrategy", "")),
        "OnDelete" => {
            if rolling.is_some() {
                errs.push(invalid(
                    "spec.updateStrategy.rollingUpdate",
                    "apps.RollingUpdateStatefulSetStrategy{}",
                    "only allowed for updateStrategy 'RollingUpdate'",
                ));
            }
        }
        "RollingUpdate" => {
            if let Some(r) = rolling {
                nonnegative(errs, r, "partition", "spec.updateStrategy.rollingUpdate");
            }
        }
        other => {
            let ru = if rolling.is_some() {
                "(*apps.RollingUpdateStatefulSetStrategy)(0xc000000000)"
            } else {
                "(*apps.RollingUpdateStatefulSetStrategy)(nil)"
            };
            errs.push(invalid(
                "spec.updateStrategy",
                &format!(
                    "apps.StatefulSetUpdateStrategy{{Type:{}, RollingUpdate:{ru}}}",
                    go_quote(other)
                ),
                "must be 'RollingUpdate' or 'OnDelete'",
            ));
        }
    }
    if let Some(policy) = get_obj(spec, "persistentVolumeClaimRetentionPolicy") {
        for key in ["whenDeleted", "whenScaled"] {
            let v = get_str(policy, key);
            if v != "Retain" && v != "Delete" {
                errs.push(not_supported(
                    &format!("spec.persistentVolumeClaimRetentionPolicy.{key}"),
                    &go_quote(v),
                    &["Retain", "Delete"],
                ));
            }
        }
    }
    nonnegative(errs, spec, "replicas", "spec");
    nonnegative(errs, spec, "minReadySeconds", "spec");
    let sel = selector(errs, spec, "statefulset");
    let template = get_obj(spec, "template");
    if sel.is_none_or(selector_parses) {
        template_labels_match(errs, sel, template, "spec.template");
    } else if let Some(s) = sel {
        errs.push(invalid(
            "spec.selector",
            &go_label_selector(&Value::Object(s.clone())),
            "",
        ));
    }
    pod::always_restart(
        errs,
        template,
        "spec.template",
        Deadline::Forbidden("StatefulSet"),
    );

    if let Some(old_spec) = old_spec {
        const MUTABLE: [&str; 6] = [
            "replicas",
            "template",
            "updateStrategy",
            "minReadySeconds",
            "ordinals",
            "persistentVolumeClaimRetentionPolicy",
        ];
        let strip = |s: &Obj| -> Value {
            let mut s = s.clone();
            for k in MUTABLE {
                s.remove(k);
            }
            super::without_nulls(&Value::Object(s))
        };
        if strip(spec) != strip(old_spec) {
            errs.push(forbidden(
                "spec",
                "updates to statefulset spec for fields other than 'replicas', 'ordinals', 'template', 'updateStrategy', 'persistentVolumeClaimRetentionPolicy' and 'minReadySeconds' are forbidden",
            ));
        }
    }
}

/// `ValidateDaemonSetSpec`.
fn daemon_set(errs: &mut Vec<FieldError>, spec: &Obj) {
    let sel = get_obj(spec, "selector");
    if let Some(s) = sel {
        validate_label_selector(errs, s, "spec.selector");
    }
    let template = get_obj(spec, "template");
    if sel.is_none_or(selector_parses) {
        // A missing selector matches nothing; an empty one everything.
        let labels = template
            .and_then(|t| get_obj(t, "metadata"))
            .and_then(|m| m.get("labels"))
            .filter(|v| !v.is_null());
        let matches = match sel {
            Some(s) if super::selector_is_empty(s) => true,
            s => super::selector_matches(s, labels.and_then(Value::as_object)),
        };
        if !matches {
            errs.push(invalid(
                "spec.template.metadata.labels",
                &go_string_map(labels),
                "`selector` does not match template `labels`",
            ));
        }
    }
    if let Some(s) = sel
        && selector_is_empty(s)
    {
        errs.push(invalid(
            "spec.selector",
            &go_label_selector(&Value::Object(s.clone())),
            "empty selector is invalid for daemonset",
        ));
    }
    pod::template(errs, template, "spec.template");
    pod::always_restart(errs, template, "spec.template", Deadline::DaemonSet);
    nonnegative(errs, spec, "minReadySeconds", "spec");
    nonnegative(errs, spec, "templateGeneration", "spec");

    let empty = Obj::new();
    let strategy = get_obj(spec, "updateStrategy").unwrap_or(&empty);
    let path = "spec.updateStrategy";
    match get_str(strategy, "type") {
        "OnDelete" => {}
        "RollingUpdate" => match get_obj(strategy, "rollingUpdate") {
            None => errs.push(required(&format!("{path}.rollingUpdate"), "")),
            Some(r) => rolling_update_daemon_set(errs, r, &format!("{path}.rollingUpdate")),
        },
        other => {
            let ru = if get_obj(strategy, "rollingUpdate").is_some() {
                "(*apps.RollingUpdateDaemonSet)(0xc000000000)"
            } else {
                "(*apps.RollingUpdateDaemonSet)(nil)"
            };
            errs.push(not_supported(
                path,
                &format!(
                    "apps.DaemonSetUpdateStrategy{{Type:{}, RollingUpdate:{ru}}}",
                    go_quote(other)
                ),
                &["RollingUpdate", "OnDelete"],
            ));
        }
    }
    nonnegative(errs, spec, "revisionHistoryLimit", "spec");
}

/// `ValidateRollingUpdateDaemonSet`.
fn rolling_update_daemon_set(errs: &mut Vec<FieldError>, r: &Obj, path: &str) {
    let unavailable = r.get("maxUnavailable").filter(|v| !v.is_null());
    let surge = r.get("maxSurge").filter(|v| !v.is_null());
    let (pu, ps) = (format!("{path}.maxUnavailable"), format!("{path}.maxSurge"));
    positive_int_or_percent(errs, unavailable, &pu);
    positive_int_or_percent(errs, surge, &ps);
    not_more_than_100(errs, unavailable, &pu);
    not_more_than_100(errs, surge, &ps);
    let has_unavailable = int_or_percent(unavailable).0 != 0;
    let has_surge = int_or_percent(surge).0 != 0;
    if has_unavailable && has_surge {
        errs.push(invalid(
            &ps,
            &go_int_or_string(surge),
            "may not be set when maxUnavailable is non-zero",
        ));
    } else if !has_unavailable && !has_surge {
        errs.push(required(&pu, "cannot be 0 when maxSurge is 0"));
    }
}

/// `ValidateReplicationControllerSpec` (core/v1; its selector is a plain map and mutable).
pub(super) fn replication_controller(errs: &mut Vec<FieldError>, spec: &Obj) {
    nonnegative(errs, spec, "minReadySeconds", "spec");
    let sel = get_obj(spec, "selector");
    if sel.is_none_or(serde_json::Map::is_empty) {
        errs.push(required("spec.selector", ""));
    }
    nonnegative(errs, spec, "replicas", "spec");
    let Some(template) = get_obj(spec, "template") else {
        errs.push(required("spec.template", ""));
        return;
    };
    if let Some(sel) = sel.filter(|s| !s.is_empty()) {
        let labels = get_obj(template, "metadata")
            .and_then(|m| m.get("labels"))
            .filter(|v| !v.is_null());
        let matches = sel
            .iter()
            .all(|(k, v)| labels.and_then(|l| l.get(k)).and_then(Value::as_str) == v.as_str());
        if !matches {
            errs.push(invalid(
                "spec.template.metadata.labels",
                &go_string_map(labels),
                "`selector` does not match template `labels`",
            ));
        }
    }
    pod::template(errs, Some(template), "spec.template");
    pod::always_restart(
        errs,
        Some(template),
        "spec.template",
        Deadline::Forbidden("ReplicationController"),
    );
}
