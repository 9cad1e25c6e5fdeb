//! `ValidatePodResize` (pkg/apis/core/validation): what a write through `pods/resize` may
//! change. The strategy (`handlers::pod_resize`) already kept everything but the containers'
//! `resources` and `resizePolicy`; here: no resize of pods with pod-level resources, of static
//! or Windows pods; the QoS class stays; a pod whose running container reports no
//! `resources` runs on a node without resize support; requests and limits may not be removed;
//! a memory limit may only shrink (or appear) with the `RestartContainer` policy; only cpu and
//! memory of regular and restartable init containers change, never a plain init container's.

use serde_json::Value;

use super::{Obj, forbidden, get_arr, get_obj, get_str, go_quote, invalid, objs};
use crate::error::FieldError;

/// Appends the resize errors of `new` over `old` (after the generic metadata and spec checks).
pub(super) fn update(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj) {
    let empty = Obj::new();
    let new_spec = get_obj(new, "spec").unwrap_or(&empty);
    let old_spec = get_obj(old, "spec").unwrap_or(&empty);
    let pod_level = |spec: &Obj| {
        get_obj(spec, "resources").is_some_and(|r| {
            ["requests", "limits"]
                .iter()
                .any(|k| get_obj(r, k).is_some_and(|m| !m.is_empty()))
        })
    };
    let refuse = |errs: &mut Vec<FieldError>, detail: &str| {
        errs.clear();
        errs.push(forbidden("", detail));
    };
    if pod_level(old_spec) || pod_level(new_spec) {
        return refuse(errs, "pods with pod-level resources cannot be resized");
    }
    let mirror = get_obj(old, "metadata")
        .and_then(|m| get_obj(m, "annotations"))
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    if mirror {
        return refuse(errs, "static pods cannot be resized");
    }
    if get_obj(old_spec, "os").is_some_and(|os| get_str(os, "name") == "windows") {
        return refuse(errs, "windows pods cannot be resized");
    }
    let old_status = get_obj(old, "status").unwrap_or(&empty);
    let stored_qos = get_str(old_status, "qosClass");
    let old_qos = if stored_qos.is_empty() {
        super::pod_qos_class(old)
    } else {
        stored_qos
    };
    if old_qos != super::pod_qos_class(new) {
        let shown = get_obj(new, "status").map_or("", |s| get_str(s, "qosClass"));
        errs.push(invalid(
            "spec",
            &go_quote(shown),
            "Pod QOS Class may not change as a result of resizing",
        ));
    }
    if !resize_supported(old_status) {
        errs.push(forbidden(
            "spec",
            "Pod running on node without support for resize",
        ));
    }
    let new_containers = get_arr(new_spec, "containers");
    let new_inits = get_arr(new_spec, "initContainers");
    if new_containers.len() != get_arr(old_spec, "containers").len()
        || new_inits.len() != get_arr(old_spec, "initContainers").len()
    {
        // Containers were added or removed: the comparison below cannot pair them.
        errs.push(forbidden("spec", CPU_MEMORY_ONLY));
        return;
    }
    for (ix, before) in objs(old_spec, "initContainers") {
        if restartable(before)
            && let Some(after) = new_inits.get(ix).and_then(Value::as_object)
        {
            container(
                errs,
                after,
                before,
                &format!("spec.initContainers[{ix}].resources"),
            );
        }
    }
    for (ix, before) in objs(old_spec, "containers") {
        if let Some(after) = new_containers.get(ix).and_then(Value::as_object) {
            container(
                errs,
                after,
                before,
                &format!("spec.containers[{ix}].resources"),
            );
        }
    }
    let mut other_changed = false;
    for (ix, before) in objs(old_spec, "containers") {
        let Some(after) = new_containers.get(ix).and_then(Value::as_object) else {
            continue;
        };
        if !same_but_cpu_memory(after, before) {
            errs.push(forbidden("spec", CPU_MEMORY_ONLY));
            other_changed = true;
        }
    }
    for (ix, before) in objs(old_spec, "initContainers") {
        let Some(after) = new_inits.get(ix).and_then(Value::as_object) else {
            continue;
        };
        if restartable(before) {
            if !same_but_cpu_memory(after, before) {
                errs.push(forbidden(
                    "spec",
                    "only cpu and memory resources for sidecar containers are mutable",
                ));
                other_changed = true;
            }
        } else if after != before {
            errs.push(forbidden(
                "spec",
                "resources for non-sidecar init containers are immutable",
            ));
            other_changed = true;
        }
    }
    if !errs.is_empty() || other_changed {
        return;
    }
    // The rest of the spec: the strategy kept it, so a difference means containers were
    // renamed or reordered.
    let rest = |spec: &Obj| {
        let mut s = spec.clone();
        s.remove("containers");
        s.remove("initContainers");
        s
    };
    if rest(new_spec) != rest(old_spec) {
        errs.push(forbidden("spec", CPU_MEMORY_ONLY));
    }
}

const CPU_MEMORY_ONLY: &str = "only cpu and memory resources are mutable";

/// `isPodResizeRequestSupported`: the first running container reports its `resources`.
fn resize_supported(status: &Obj) -> bool {
    for (_, c) in objs(status, "containerStatuses") {
        if get_obj(c, "state").is_some_and(|s| s.contains_key("running")) {
            return c.get("resources").is_some_and(|r| !r.is_null());
        }
    }
    true
}

/// An init container with `restartPolicy: Always` (a sidecar).
fn restartable(c: &Obj) -> bool {
    get_str(c, "restartPolicy") == "Always"
}

/// A container's requests or limits (empty when absent).
fn list<'a>(c: &'a Obj, which: &str) -> Option<&'a Obj> {
    get_obj(c, "resources").and_then(|r| get_obj(r, which))
}

/// `validateContainerResize`: nothing removed; memory limits shrink or appear only with the
/// `RestartContainer` policy for memory.
fn container(errs: &mut Vec<FieldError>, new: &Obj, old: &Obj, path: &str) {
    for (which, what) in [
        ("requests", "resource requests"),
        ("limits", "resource limits"),
    ] {
        let after = list(new, which);
        if list(old, which)
            .into_iter()
            .flat_map(|m| m.keys())
            .any(|k| !after.is_some_and(|a| a.contains_key(k)))
        {
            errs.push(forbidden(
                &format!("{path}.{which}"),
                &format!("{what} cannot be removed"),
            ));
        }
    }
    let memory_policy = objs(new, "resizePolicy")
        .find(|(_, p)| get_str(p, "resourceName") == "memory")
        .map_or("", |(_, p)| get_str(p, "restartPolicy"));
    if memory_policy != "NotRequired" && !memory_policy.is_empty() {
        return;
    }
    let limit = |c: &Obj| {
        list(c, "limits")
            .and_then(|l| l.get("memory"))
            .map(|q| super::parse_quantity(&super::quantity_text(q)))
    };
    let field = format!("{path}.limits[memory]");
    match (limit(new), limit(old)) {
        (Some(Some(n)), Some(Some(o))) if n < o => errs.push(forbidden(
            &field,
            "memory limits cannot be decreased unless resizePolicy is RestartContainer",
        )),
        (Some(_), None) => errs.push(forbidden(
            &field,
            "memory limits cannot be added unless resizePolicy is RestartContainer",
        )),
        _ => {}
    }
}

/// `dropCPUMemoryResourcesFromContainer` then equality: `new` with the old cpu and memory
/// requests and limits equals `old`.
fn same_but_cpu_memory(new: &Obj, old: &Obj) -> bool {
    let mut munged = new.clone();
    munged.remove("resources");
    let mut base = old.clone();
    base.remove("resources");
    if munged != base {
        return false;
    }
    // A list the old container did not have is not compared (upstream munges it to nil).
    ["requests", "limits"].iter().all(|which| {
        if list(old, which).is_none() {
            return true;
        }
        let strip = |m: Option<&Obj>| {
            let mut m = m.cloned().unwrap_or_default();
            m.remove("cpu");
            m.remove("memory");
            m
        };
        strip(list(new, which)) == strip(list(old, which))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(res: &Value) -> Value {
        json!({"metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "x", "resources": res}]},
            "status": {"qosClass": "Burstable", "containerStatuses": [
                {"name": "c", "state": {"running": {}}, "resources": {}}]}})
    }

    fn errors(new: &Value, old: &Value) -> Vec<String> {
        let mut errs = Vec::new();
        let (Some(n), Some(o)) = (new.as_object(), old.as_object()) else {
            panic!("objects");
        };
        update(&mut errs, n, o);
        errs.iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect()
    }

    #[test]
    fn cpu_request_may_change() {
        let old = pod(&json!({"requests": {"cpu": "100m"}}));
        let new = pod(&json!({"requests": {"cpu": "200m"}}));
        assert!(errors(&new, &old).is_empty());
    }

    #[test]
    fn qos_class_may_not_change() {
        let old = pod(&json!({"requests": {"cpu": "100m"}}));
        let new = pod(&json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "100m"}}));
        let mut new = new;
        new["spec"]["containers"][0]["resources"]["requests"]["memory"] = json!("1Gi");
        new["spec"]["containers"][0]["resources"]["limits"]["memory"] = json!("1Gi");
        let errs = errors(&new, &old);
        assert!(errs.iter().any(|e| e
            == "spec: Invalid value: \"Burstable\": Pod QOS Class may not change as a result of resizing"));
    }

    #[test]
    fn other_resources_and_removals_refused() {
        let old = pod(&json!({"requests": {"cpu": "100m", "ephemeral-storage": "1Gi"}}));
        let new = pod(&json!({"requests": {"cpu": "100m", "ephemeral-storage": "2Gi"}}));
        assert_eq!(
            errors(&new, &old),
            ["spec: Forbidden: only cpu and memory resources are mutable"]
        );
        let new = pod(&json!({"requests": {"ephemeral-storage": "1Gi"}}));
        assert!(errors(&new, &old).contains(
            &"spec.containers[0].resources.requests: Forbidden: resource requests cannot be removed"
                .to_owned()
        ));
    }

    #[test]
    fn node_without_resize_support() {
        let mut old_without = pod(&json!({"requests": {"cpu": "100m"}}));
        if let Some(s) = old_without["status"]["containerStatuses"][0].as_object_mut() {
            s.remove("resources");
        }
        let new = pod(&json!({"requests": {"cpu": "200m"}}));
        assert_eq!(
            errors(&new, &old_without),
            ["spec: Forbidden: Pod running on node without support for resize"]
        );
    }

    #[test]
    fn pod_level_resources_static_pods_and_plain_init_containers_refused() {
        let old = pod(&json!({"requests": {"cpu": "100m"}}));
        let new = pod(&json!({"requests": {"cpu": "200m"}}));
        let mut pod_level = old.clone();
        pod_level["spec"]["resources"] = json!({"requests": {"cpu": "1"}});
        assert_eq!(
            errors(&new, &pod_level),
            [": Forbidden: pods with pod-level resources cannot be resized"]
        );
        let mut mirror = old.clone();
        mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
        assert_eq!(
            errors(&new, &mirror),
            [": Forbidden: static pods cannot be resized"]
        );
        let mut with_init = old;
        with_init["spec"]["initContainers"] = json!([{"name": "i", "image": "x", "resources": {"requests": {"cpu": "1"}}},
                   {"name": "s", "image": "x", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "1"}}}]);
        let mut new_init = with_init.clone();
        new_init["spec"]["initContainers"][1]["resources"]["requests"]["cpu"] = json!("2");
        assert!(errors(&new_init, &with_init).is_empty());
        new_init["spec"]["initContainers"][0]["resources"]["requests"]["cpu"] = json!("2");
        assert_eq!(
            errors(&new_init, &with_init),
            ["spec: Forbidden: resources for non-sidecar init containers are immutable"]
        );
    }

    #[test]
    fn memory_limit_decrease_needs_restart_policy() {
        let old = pod(&json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "2Gi"}}));
        let new = pod(&json!({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}));
        let errs = errors(&new, &old);
        assert!(errs.iter().any(|e| e.starts_with(
            "spec.containers[0].resources.limits[memory]: Forbidden: memory limits cannot be decreased"
        )));
        let mut new = new;
        new["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        let mut old = old;
        old["spec"]["containers"][0]["resizePolicy"] =
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]);
        // Burstable stays Burstable (requests 1Gi == limits 1Gi but no cpu): no errors.
        assert!(
            errors(&new, &old)
                .iter()
                .all(|e| !e.contains("memory limits"))
        );
    }
}
