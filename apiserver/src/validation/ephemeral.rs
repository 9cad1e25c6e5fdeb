//! Ephemeral containers (`validateEphemeralContainers` and
//! `ValidatePodEphemeralContainersUpdate` of pkg/apis/core/validation): each is a container
//! (name, image, policies, mounts) whose name is unique among every container of the pod,
//! whose `targetContainerName` names a regular or init container, and which sets none of the
//! fields reserved to workload containers (ports, resources, probes, lifecycle, …) nor mount
//! subpaths. Through `pods/ephemeralcontainers` existing ones may be neither removed nor
//! changed; a pod is never created with them.

use std::collections::HashSet;

use serde_json::Value;

use super::{Obj, duplicate, forbidden, get_obj, get_str, go_quote, not_found, objs, pod};
use crate::error::FieldError;

/// The container fields an ephemeral container may not set, in the Go struct's order.
const DISALLOWED: &[&str] = &[
    "ports",
    "resources",
    "resizePolicy",
    "restartPolicy",
    "livenessProbe",
    "readinessProbe",
    "startupProbe",
    "lifecycle",
];

const NOT_FOR_EPHEMERAL: &str = "cannot be set for an Ephemeral Container";

/// Whether a JSON value is Go's zero value (absent, null, empty string, list or object).
fn is_zero(v: Option<&Value>) -> bool {
    match v {
        None | Some(Value::Null) => true,
        Some(Value::String(s)) => s.is_empty(),
        Some(Value::Array(a)) => a.is_empty(),
        Some(Value::Object(o)) => o.values().all(|v| is_zero(Some(v))),
        Some(Value::Bool(b)) => !b,
        Some(Value::Number(n)) => n.as_f64() == Some(0.0),
    }
}

/// `validateEphemeralContainers` for the pod spec `spec`.
pub(super) fn containers(errs: &mut Vec<FieldError>, spec: &Obj) {
    let path = "spec.ephemeralContainers";
    let mut others: HashSet<&str> = HashSet::new();
    for list in ["containers", "initContainers"] {
        others.extend(objs(spec, list).map(|(_, c)| get_str(c, "name")));
    }
    let volumes = pod::volume_names(spec);
    let mut seen: HashSet<&str> = HashSet::new();
    for (i, c) in objs(spec, "ephemeralContainers") {
        let p = format!("{path}[{i}]");
        pod::container(errs, c, &volumes, &p);
        let name = get_str(c, "name");
        if others.contains(name) || !seen.insert(name) {
            errs.push(duplicate(&format!("{p}.name"), &go_quote(name)));
        }
        let target = get_str(c, "targetContainerName");
        if !target.is_empty() && !others.contains(target) {
            errs.push(not_found(
                &format!("{p}.targetContainerName"),
                &go_quote(target),
            ));
        }
        for field in DISALLOWED {
            if !is_zero(c.get(*field)) {
                errs.push(forbidden(&format!("{p}.{field}"), NOT_FOR_EPHEMERAL));
            }
        }
        for (j, m) in objs(c, "volumeMounts") {
            for field in ["subPath", "subPathExpr"] {
                if !get_str(m, field).is_empty() {
                    errs.push(forbidden(
                        &format!("{p}.volumeMounts[{j}].{field}"),
                        NOT_FOR_EPHEMERAL,
                    ));
                }
            }
        }
    }
}

/// `ValidatePodCreate`'s rule: no ephemeral containers on create.
pub(super) fn create(errs: &mut Vec<FieldError>, spec: &Obj) {
    if objs(spec, "ephemeralContainers").next().is_some() {
        errs.push(forbidden(
            "spec.ephemeralContainers",
            "cannot be set on create",
        ));
    }
}

/// `ValidatePodEphemeralContainersUpdate`'s rules on what changed: static (mirror) pods take
/// none, existing ephemeral containers stay as they are (matched by name, as patches do not
/// keep order).
pub(super) fn update(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    let mirror = get_obj(old, "metadata")
        .and_then(|m| get_obj(m, "annotations"))
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if mirror {
        errs.clear();
        errs.push(forbidden(
            "",
            "static pods do not support ephemeral containers",
        ));
        return;
    }
    let empty = Obj::new();
    let new_spec = get_obj(new, "spec").unwrap_or(&empty);
    let old_spec = get_obj(old, "spec").unwrap_or(&empty);
    let path = "spec.ephemeralContainers";
    for (_, before) in objs(old_spec, "ephemeralContainers") {
        let name = get_str(before, "name");
        match objs(new_spec, "ephemeralContainers").find(|(_, c)| get_str(c, "name") == name) {
            None => errs.push(forbidden(
                path,
                &format!(
                    "existing ephemeral containers {} may not be removed\n",
                    go_quote(name)
                ),
            )),
            Some((_, after)) if after != before => errs.push(forbidden(
                &format!("{path}.{name}"),
                &format!(
                    "existing ephemeral containers {} may not be changed\n",
                    go_quote(name)
                ),
            )),
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Obj {
        match v {
            Value::Object(m) => m,
            _ => Obj::new(),
        }
    }

    fn messages(errs: &[FieldError]) -> Vec<String> {
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    fn ec(extra: Value) -> Value {
        let mut c = json!({"name": "dbg", "image": "busybox", "imagePullPolicy": "IfNotPresent",
            "terminationMessagePolicy": "File"});
        if let (Some(c), Value::Object(extra)) = (c.as_object_mut(), extra) {
            c.extend(extra);
        }
        c
    }

    #[test]
    fn ephemeral_containers_take_no_ports_probes_or_taken_names() {
        let spec = obj(json!({
            "containers": [{"name": "app", "image": "x"}],
            "ephemeralContainers": [
                ec(json!({"ports": [{"containerPort": 80}], "readinessProbe": {"exec": {"command": ["true"]}}})),
                ec(json!({"name": "app", "targetContainerName": "nope"})),
            ]
        }));
        let mut errs = Vec::new();
        containers(&mut errs, &spec);
        let errs = messages(&errs);
        assert!(errs.contains(&"spec.ephemeralContainers[0].ports: Forbidden: cannot be set for an Ephemeral Container".to_owned()), "{errs:?}");
        assert!(errs.contains(&"spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an Ephemeral Container".to_owned()));
        assert!(
            errs.contains(&"spec.ephemeralContainers[1].name: Duplicate value: \"app\"".to_owned())
        );
        assert!(errs.contains(
            &"spec.ephemeralContainers[1].targetContainerName: Not found: \"nope\"".to_owned()
        ));
    }

    #[test]
    fn existing_ephemeral_containers_stay() {
        let old = obj(
            json!({"spec": {"ephemeralContainers": [ec(json!({})), ec(json!({"name": "two"}))]}}),
        );
        let new = obj(json!({"spec": {"ephemeralContainers": [ec(json!({"image": "alpine"}))]}}));
        let mut errs = Vec::new();
        update(&mut errs, &new, &old);
        let errs = messages(&errs);
        assert_eq!(
            errs,
            vec![
                "spec.ephemeralContainers.dbg: Forbidden: existing ephemeral containers \"dbg\" may not be changed\n".to_owned(),
                "spec.ephemeralContainers: Forbidden: existing ephemeral containers \"two\" may not be removed\n".to_owned(),
            ]
        );
    }
}
