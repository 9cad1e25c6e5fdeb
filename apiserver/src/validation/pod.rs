//! `ValidatePodSpec` and `ValidatePodTemplateSpec` (pkg/apis/core/validation): containers,
//! ports, volumes and mounts, resources and the pod-level policies.

use std::collections::HashSet;

use serde_json::Value;

use super::{
    Obj, duplicate, forbidden, get_arr, get_i64, get_obj, get_str, go_quote, invalid,
    label_value_errors, not_found, not_supported, objs, parse_quantity, port_name_errors,
    port_num_error, qualified_name_errors, quantity_text, required, validate_dns_label,
};
use crate::error::FieldError;

/// `ValidatePodTemplateSpec`: the template's spec at `path.spec` (labels are checked by the
/// caller's selector rules).
pub(super) fn template(errs: &mut Vec<FieldError>, template: Option<&Obj>, path: &str) {
    let spec = template.and_then(|t| get_obj(t, "spec"));
    pod_spec(errs, spec.unwrap_or(&Obj::new()), &format!("{path}.spec"));
}

/// `ValidatePodSpec` for the spec at `path`.
pub(super) fn pod_spec(errs: &mut Vec<FieldError>, spec: &Obj, path: &str) {
    let volumes = validate_volumes(errs, spec, &format!("{path}.volumes"));

    // Regular containers.
    let cpath = format!("{path}.containers");
    if get_arr(spec, "containers").is_empty() {
        errs.push(required(&cpath, ""));
    }
    let mut names: HashSet<&str> = HashSet::new();
    for (i, c) in objs(spec, "containers") {
        let p = format!("{cpath}[{i}]");
        container(errs, c, &volumes, &p);
        let name = get_str(c, "name");
        if !names.insert(name) {
            errs.push(duplicate(&format!("{p}.name"), &go_quote(name)));
        }
    }
    // Init containers: names unique across both lists.
    for (i, c) in objs(spec, "initContainers") {
        let p = format!("{path}.initContainers[{i}]");
        container(errs, c, &volumes, &p);
        let name = get_str(c, "name");
        if !names.insert(name) {
            errs.push(duplicate(&format!("{p}.name"), &go_quote(name)));
        }
    }

    policy(
        errs,
        get_str(spec, "restartPolicy"),
        &format!("{path}.restartPolicy"),
        &["Always", "OnFailure", "Never"],
        "",
    );
    policy(
        errs,
        get_str(spec, "dnsPolicy"),
        &format!("{path}.dnsPolicy"),
        &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        "",
    );
    if let Some(v) = get_i64(spec, "activeDeadlineSeconds")
        && !(1..=i64::from(i32::MAX)).contains(&v)
    {
        errs.push(invalid(
            &format!("{path}.activeDeadlineSeconds"),
            &v.to_string(),
            "must be between 1 and 2147483647, inclusive",
        ));
    }
    for key in ["hostname", "subdomain"] {
        let v = get_str(spec, key);
        if !v.is_empty() {
            validate_dns_label(errs, v, &format!("{path}.{key}"));
        }
    }
    tolerations(errs, spec, &format!("{path}.tolerations"));
}

/// The effects a taint (and a toleration) may name.
const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];

/// `ValidateTolerations`: the key a qualified name, an empty key only with `Exists`,
/// `tolerationSeconds` only with `NoExecute`, the value a label value with `Equal` (or no
/// operator) and empty with `Exists`, and the effect a known one when set.
pub(super) fn tolerations(errs: &mut Vec<FieldError>, spec: &Obj, path: &str) {
    for (i, t) in objs(spec, "tolerations") {
        let p = format!("{path}[{i}]");
        let key = get_str(t, "key");
        let operator = get_str(t, "operator");
        let value = get_str(t, "value");
        let effect = get_str(t, "effect");
        if !key.is_empty() {
            for m in qualified_name_errors(key) {
                errs.push(invalid(&format!("{p}.key"), &go_quote(key), &m));
            }
        }
        if key.is_empty() && operator != "Exists" {
            errs.push(invalid(
                &format!("{p}.operator"),
                &go_quote(operator),
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if !is_unset(t.get("tolerationSeconds")) && effect != "NoExecute" {
            errs.push(invalid(
                &format!("{p}.effect"),
                &go_quote(effect),
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match operator {
            "Equal" | "" => {
                let msgs = label_value_errors(value);
                if !msgs.is_empty() {
                    errs.push(invalid(
                        &format!("{p}.operator"),
                        &go_quote(value),
                        &msgs.join(";"),
                    ));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(invalid(
                        &format!("{p}.operator"),
                        &go_quote(value),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(not_supported(
                &format!("{p}.operator"),
                &go_quote(other),
                &["Equal", "Exists"],
            )),
        }
        if !effect.is_empty() && !TAINT_EFFECTS.contains(&effect) {
            errs.push(not_supported(
                &format!("{p}.effect"),
                &go_quote(effect),
                TAINT_EFFECTS,
            ));
        }
    }
}

/// A required enum-like string: `Required value` when empty, else `Unsupported value`.
fn policy(errs: &mut Vec<FieldError>, value: &str, path: &str, supported: &[&str], detail: &str) {
    if value.is_empty() {
        errs.push(required(path, detail));
    } else if !supported.contains(&value) {
        errs.push(not_supported(path, &go_quote(value), supported));
    }
}

/// The names of the pod spec's volumes.
pub(super) fn volume_names(spec: &Obj) -> HashSet<&str> {
    objs(spec, "volumes")
        .map(|(_, v)| get_str(v, "name"))
        .collect()
}

/// `ValidateVolumes`: names required, DNS-1123 labels and unique. Returns the volume names.
fn validate_volumes<'a>(errs: &mut Vec<FieldError>, spec: &'a Obj, path: &str) -> HashSet<&'a str> {
    let mut names = HashSet::new();
    for (i, v) in objs(spec, "volumes") {
        let p = format!("{path}[{i}].name");
        let name = get_str(v, "name");
        if name.is_empty() {
            errs.push(required(&p, ""));
        } else {
            validate_dns_label(errs, name, &p);
        }
        if !names.insert(name) {
            errs.push(duplicate(&p, &go_quote(name)));
        }
    }
    names
}

/// `validateContainerCommon` and the regular/init checks: name, image, policies, ports,
/// env names, volume mounts, resources.
pub(super) fn container(errs: &mut Vec<FieldError>, c: &Obj, volumes: &HashSet<&str>, path: &str) {
    let name = get_str(c, "name");
    if name.is_empty() {
        errs.push(required(&format!("{path}.name"), ""));
    } else {
        validate_dns_label(errs, name, &format!("{path}.name"));
    }
    if get_str(c, "image").is_empty() {
        errs.push(required(&format!("{path}.image"), ""));
    }
    let tmp = get_str(c, "terminationMessagePolicy");
    policy(
        errs,
        tmp,
        &format!("{path}.terminationMessagePolicy"),
        &["File", "FallbackToLogsOnError"],
        "must be 'File' or 'FallbackToLogsOnError'",
    );
    ports(errs, c, &format!("{path}.ports"));
    for (i, e) in objs(c, "env") {
        if get_str(e, "name").is_empty() {
            errs.push(required(&format!("{path}.env[{i}].name"), ""));
        }
    }
    volume_mounts(errs, c, volumes, &format!("{path}.volumeMounts"));
    policy(
        errs,
        get_str(c, "imagePullPolicy"),
        &format!("{path}.imagePullPolicy"),
        &["Always", "IfNotPresent", "Never"],
        "",
    );
    if let Some(res) = get_obj(c, "resources") {
        resources(errs, res, &format!("{path}.resources"));
    }
}

/// `validateContainerPorts`.
fn ports(errs: &mut Vec<FieldError>, c: &Obj, path: &str) {
    let mut names = HashSet::new();
    for (i, p) in objs(c, "ports") {
        let ip = format!("{path}[{i}]");
        let name = get_str(p, "name");
        if !name.is_empty() {
            let msgs = port_name_errors(name);
            if !msgs.is_empty() {
                for m in msgs {
                    errs.push(invalid(&format!("{ip}.name"), &go_quote(name), m));
                }
            } else if !names.insert(name) {
                errs.push(duplicate(&format!("{ip}.name"), &go_quote(name)));
            }
        }
        match get_i64(p, "containerPort").unwrap_or(0) {
            0 => errs.push(required(&format!("{ip}.containerPort"), "")),
            port => {
                if let Some(m) = port_num_error(port) {
                    errs.push(invalid(
                        &format!("{ip}.containerPort"),
                        &port.to_string(),
                        m,
                    ));
                }
            }
        }
        let host = get_i64(p, "hostPort").unwrap_or(0);
        if host != 0
            && let Some(m) = port_num_error(host)
        {
            errs.push(invalid(&format!("{ip}.hostPort"), &host.to_string(), m));
        }
        policy(
            errs,
            get_str(p, "protocol"),
            &format!("{ip}.protocol"),
            &["SCTP", "TCP", "UDP"],
            "",
        );
    }
}

/// `ValidateVolumeMounts`: name required and naming a volume, mountPath required and unique.
fn volume_mounts(errs: &mut Vec<FieldError>, c: &Obj, volumes: &HashSet<&str>, path: &str) {
    let mut mount_points = HashSet::new();
    for (i, m) in objs(c, "volumeMounts") {
        let ip = format!("{path}[{i}]");
        let name = get_str(m, "name");
        if name.is_empty() {
            errs.push(required(&format!("{ip}.name"), ""));
        }
        if !volumes.contains(name) {
            errs.push(not_found(&format!("{ip}.name"), &go_quote(name)));
        }
        let mount_path = get_str(m, "mountPath");
        if mount_path.is_empty() {
            errs.push(required(&format!("{ip}.mountPath"), ""));
        }
        if !mount_points.insert(mount_path) {
            errs.push(invalid(
                &format!("{ip}.mountPath"),
                &go_quote(mount_path),
                "must be unique",
            ));
        }
    }
}

/// Standard container resources and whether over-commit (request < limit) is allowed.
fn resource_kind(name: &str) -> Option<bool> {
    if matches!(name, "cpu" | "memory" | "ephemeral-storage") {
        return Some(true);
    }
    if name.starts_with("hugepages-") {
        return Some(false);
    }
    if name.contains('/') {
        // Native (`kubernetes.io/…`) resources may over-commit; extended ones may not.
        let native = !name.contains('/') || name.contains("kubernetes.io/");
        return Some(native && !name.contains("/hugepages-"));
    }
    None
}

/// `ValidateResourceRequirements` for a container: resource names, non-negative quantities,
/// requests not above limits (equal for resources that cannot over-commit).
fn resources(errs: &mut Vec<FieldError>, res: &Obj, path: &str) {
    let limits = get_obj(res, "limits");
    let requests = get_obj(res, "requests");
    for (key, map) in [("limits", limits), ("requests", requests)] {
        for (name, q) in map.into_iter().flatten() {
            let p = format!("{path}.{key}[{name}]");
            if resource_kind(name).is_none() {
                errs.push(invalid(
                    &p,
                    name,
                    "must be a standard resource for containers",
                ));
            }
            if parse_quantity(&quantity_text(q)).is_some_and(|v| v < 0.0) {
                errs.push(invalid(
                    &p,
                    &go_quote(&quantity_text(q)),
                    super::NONNEGATIVE,
                ));
            }
        }
    }
    let (Some(limits), Some(requests)) = (limits, requests) else {
        return;
    };
    for (name, q) in requests {
        let Some(limit) = limits.get(name) else {
            continue;
        };
        let (req_s, lim_s) = (quantity_text(q), quantity_text(limit));
        let (Some(req), Some(lim)) = (parse_quantity(&req_s), parse_quantity(&lim_s)) else {
            continue;
        };
        let overcommit = resource_kind(name).unwrap_or(false);
        let p = format!("{path}.requests");
        if req != lim && !overcommit {
            errs.push(invalid(
                &p,
                &go_quote(&req_s),
                &format!("must be equal to {name} limit of {lim_s}"),
            ));
        } else if req > lim {
            errs.push(invalid(
                &p,
                &go_quote(&req_s),
                &format!("must be less than or equal to {name} limit of {lim_s}"),
            ));
        }
    }
}

/// The workload rules on a template's pod spec (`ValidatePodTemplateSpecForReplicaSet` and
/// friends): `restartPolicy` must be `Always`, and `activeDeadlineSeconds` is not allowed.
pub(super) fn always_restart(
    errs: &mut Vec<FieldError>,
    template: Option<&Obj>,
    path: &str,
    deadline: Deadline,
) {
    let spec = template.and_then(|t| get_obj(t, "spec"));
    let restart = spec.map_or("", |s| get_str(s, "restartPolicy"));
    if restart != "Always" {
        errs.push(not_supported(
            &format!("{path}.spec.restartPolicy"),
            &go_quote(restart),
            &["Always"],
        ));
    }
    if let Some(v) = spec
        .and_then(|s| s.get("activeDeadlineSeconds"))
        .filter(|v| !v.is_null())
    {
        let p = format!("{path}.spec.activeDeadlineSeconds");
        match deadline {
            Deadline::Forbidden(kind) => {
                errs.push(forbidden(
                    &p,
                    &format!("activeDeadlineSeconds in {kind} is not Supported"),
                ));
            }
            Deadline::DaemonSet => errs.push(invalid(
                &p,
                &v.as_i64().unwrap_or(0).to_string(),
                "activeDeadlineSeconds must be nil for DaemonSet",
            )),
        }
    }
}

/// How a workload rejects `activeDeadlineSeconds` on its template.
#[derive(Clone, Copy)]
pub(super) enum Deadline {
    /// `Forbidden: activeDeadlineSeconds in <kind> is not Supported`.
    Forbidden(&'static str),
    /// DaemonSet's `Invalid value: …: activeDeadlineSeconds must be nil for DaemonSet`.
    DaemonSet,
}

/// Whether the object at `v` is absent or JSON `null`.
pub(super) fn is_unset(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}
