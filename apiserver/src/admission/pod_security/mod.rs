//! `PodSecurity` (upstream's `plugin/pkg/admission/security/podsecurity` over
//! `k8s.io/pod-security-admission`): the Pod Security Standards, chosen per namespace
//! by the `pod-security.kubernetes.io/{enforce,audit,warn}[-version]` labels.
//!
//! Pods are checked on create and on updates that change images or seccomp annotations
//! (not for `status`, `binding`, `eviction`, … subresources): enforce violations are
//! refused (403), warn violations become `Warning` headers, audit violations audit
//! annotations. Workload resources get warn and audit checks of their pod template,
//! never enforced. Namespace creates and updates must carry valid labels (422), and a
//! stricter enforce level returns warnings about the existing pods that violate it.
//! Upstream's default policy (no admission configuration file) applies:
//! `privileged:latest` for every mode, no exemptions.

pub mod checks;
pub mod levels;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Attributes, Lookup, Operation, ValidatingAdmission, forbidden};
use crate::error::{ApiError, Result};
use levels::{Level, Policy, policy_from_labels};

/// The plugin.
pub struct PodSecurity;

/// Upstream's `namespaceMaxPodsToCheck`.
const MAX_PODS_TO_CHECK: usize = 3000;

/// Pod subresources that are never evaluated (upstream's `ignoredPodSubresources`).
const IGNORED_POD_SUBRESOURCES: &[&str] = &[
    "exec",
    "attach",
    "binding",
    "eviction",
    "log",
    "portforward",
    "proxy",
    "status",
];

/// Where the pod template of a workload resource `(group, resource)` is, or `None` for
/// resources without one.
fn template_path(group: &str, resource: &str) -> Option<&'static [&'static str]> {
    match (group, resource) {
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&["spec", "template"]),
        ("batch", "cronjobs") => Some(&["spec", "jobTemplate", "spec", "template"]),
        ("", "podtemplates") => Some(&["template"]),
        _ => None,
    }
}

/// The value at `path` in `obj`, if set.
fn value_at<'a>(obj: &'a Map<String, Value>, path: &[&str]) -> Option<&'a Value> {
    let (first, rest) = path.split_first()?;
    let mut cur = obj.get(*first)?;
    for p in rest {
        cur = cur.get(p)?;
    }
    (!cur.is_null()).then_some(cur)
}

/// The labels of namespace `obj`.
fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
        .collect()
}

/// The stored namespace's policy, and whether its labels had errors (then recorded as
/// upstream's `pod-security.kubernetes.io/error` audit annotation).
fn namespace_policy(lookup: &Lookup<'_>, namespace: &str) -> Result<(Policy, bool)> {
    let ns = lookup
        .get(&format!("/registry/core/namespaces/{namespace}"))?
        .ok_or_else(|| ApiError::Internal(format!("failed to lookup namespace {namespace}")))?;
    let (policy, errs) = policy_from_labels(&labels_of(&Value::Object(ns)));
    if !errs.is_empty() {
        let parts: Vec<String> = errs
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        let aggregate = match parts.as_slice() {
            [one] => one.clone(),
            many => format!("[{}]", many.join(", ")),
        };
        super::audit_annotation(
            "pod-security.kubernetes.io/error",
            &format!("Failed to parse policy: {aggregate}"),
        );
    }
    Ok((policy, !errs.is_empty()))
}

impl ValidatingAdmission for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    fn validate(
        &self,
        lookup: &Lookup<'_>,
        a: &Attributes<'_>,
        obj: Option<&Map<String, Value>>,
        old: Option<&Map<String, Value>>,
    ) -> Result<()> {
        if !matches!(a.operation, Operation::Create | Operation::Update) {
            return Ok(());
        }
        let Some(obj) = obj else { return Ok(()) };
        if a.is_core("namespaces") {
            return validate_namespace(lookup, a, obj, old);
        }
        if a.is_core("pods") {
            if IGNORED_POD_SUBRESOURCES.contains(&a.subresource) {
                return Ok(());
            }
            if let (Operation::Update, Some(old)) = (a.operation, old)
                && !significant_pod_update(obj, old)
            {
                return Ok(());
            }
            let (policy, label_errors) = namespace_policy(lookup, a.namespace)?;
            if !label_errors
                && policy.enforce.level == Level::Privileged
                && policy.warn.level == Level::Privileged
                && policy.audit.level == Level::Privileged
            {
                return Ok(());
            }
            let (meta, spec) = (obj.get("metadata"), obj.get("spec"));
            return evaluate(a, Some(obj), policy, meta, spec, true);
        }
        let Some(path) = template_path(a.group, a.resource) else {
            return Ok(());
        };
        if !a.subresource.is_empty() {
            return Ok(());
        }
        let Some(template) = value_at(obj, path) else {
            return Ok(());
        };
        let (policy, label_errors) = namespace_policy(lookup, a.namespace)?;
        if !label_errors
            && policy.warn.level == Level::Privileged
            && policy.audit.level == Level::Privileged
        {
            return Ok(());
        }
        let (meta, spec) = (template.get("metadata"), template.get("spec"));
        evaluate(a, Some(obj), policy, meta, spec, false)
    }
}

/// Upstream's `EvaluatePod`: enforce (when `enforce`), audit and warn on the pod-like
/// pod-like `meta` and `spec` (a pod's or a pod template's).
fn evaluate(
    a: &Attributes<'_>,
    obj: Option<&Map<String, Value>>,
    policy: Policy,
    meta: Option<&Value>,
    spec: Option<&Value>,
    enforce: bool,
) -> Result<()> {
    let empty = Value::Object(Map::new());
    let meta = meta.unwrap_or(&empty);
    let spec = spec.unwrap_or(&empty);
    let run = |lv| checks::evaluate(lv, meta, spec);
    let mut refused = None;
    if enforce {
        super::audit_annotation(
            "pod-security.kubernetes.io/enforce-policy",
            &policy.enforce.to_string(),
        );
        let result = run(policy.enforce);
        if !result.allowed() {
            refused = Some(format!(
                "violates PodSecurity {:?}: {}",
                policy.enforce.to_string(),
                result.detail()
            ));
        }
    }
    let audit = run(policy.audit);
    if !audit.allowed() {
        super::audit_annotation(
            "pod-security.kubernetes.io/audit-violations",
            &format!(
                "would violate PodSecurity {:?}: {}",
                policy.audit.to_string(),
                audit.detail()
            ),
        );
    }
    if let Some(why) = refused {
        return Err(forbidden(a, obj, why));
    }
    let warn = run(policy.warn);
    if !warn.allowed() {
        super::warn(format!(
            "would violate PodSecurity {:?}: {}",
            policy.warn.to_string(),
            warn.detail()
        ));
    }
    Ok(())
}

/// Upstream's `isSignificantPodUpdate`: only image, container-set and seccomp-annotation
/// changes are evaluated.
fn significant_pod_update(pod: &Map<String, Value>, old: &Map<String, Value>) -> bool {
    const SECCOMP_POD: &str = "seccomp.security.alpha.kubernetes.io/pod";
    const SECCOMP_CONTAINER: &str = "container.seccomp.security.alpha.kubernetes.io/";
    let annotation = |o: &Map<String, Value>, k: &str| {
        o.get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    if annotation(pod, SECCOMP_POD) != annotation(old, SECCOMP_POD) {
        return true;
    }
    let list = |o: &Map<String, Value>, k: &str| -> Vec<Value> {
        o.get("spec")
            .and_then(|s| s.get(k))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let container_changed = |c: &Value, oc: &Value| {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("");
        let key = format!("{SECCOMP_CONTAINER}{name}");
        c.get("image") != oc.get("image") || annotation(pod, &key) != annotation(old, &key)
    };
    for k in ["containers", "initContainers"] {
        let (new, prev) = (list(pod, k), list(old, k));
        if new.len() != prev.len() || new.iter().zip(&prev).any(|(c, o)| container_changed(c, o)) {
            return true;
        }
    }
    let prev = list(old, "ephemeralContainers");
    list(pod, "ephemeralContainers").iter().any(|c| {
        match prev.iter().find(|o| o.get("name") == c.get("name")) {
            None => true,
            Some(o) => container_changed(c, o),
        }
    })
}

/// Upstream's `ValidateNamespace`: valid labels on create (and on update when they
/// changed), and warnings about existing pods when enforce becomes stricter.
fn validate_namespace(
    lookup: &Lookup<'_>,
    a: &Attributes<'_>,
    obj: &Map<String, Value>,
    old: Option<&Map<String, Value>>,
) -> Result<()> {
    if !a.subresource.is_empty() {
        return Ok(());
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or(a.name)
        .to_owned();
    let invalid = |causes| ApiError::Invalid {
        group: String::new(),
        kind: "Namespace".to_owned(),
        name: name.clone(),
        causes,
    };
    let (new_policy, new_errs) = policy_from_labels(&labels_of(&Value::Object(obj.clone())));
    match (a.operation, old) {
        (Operation::Create, _) => {
            if !new_errs.is_empty() {
                return Err(invalid(new_errs));
            }
            Ok(())
        }
        (Operation::Update, Some(old)) => {
            let (old_policy, old_errs) =
                policy_from_labels(&labels_of(&Value::Object(old.clone())));
            if !new_errs.is_empty() && (old_errs.is_empty() || new_errs != old_errs) {
                return Err(invalid(new_errs));
            }
            let (new_e, old_e) = (new_policy.enforce, old_policy.enforce);
            if new_e == old_e
                || new_e.level == Level::Privileged
                || (new_e.version == old_e.version && new_e.level <= old_e.level)
            {
                return Ok(());
            }
            for w in pods_in_namespace_warnings(lookup, &name, new_e) {
                super::warn(w);
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Upstream's `EvaluatePodsInNamespace`: one warning line per distinct set of reasons,
/// naming the lexically first pod with it and how many others share it.
fn pods_in_namespace_warnings(
    lookup: &Lookup<'_>,
    namespace: &str,
    enforce: levels::LevelVersion,
) -> Vec<String> {
    let mut pods = lookup.list(&format!("/registry/core/pods/{namespace}/"));
    let total = pods.len();
    pods.truncate(MAX_PODS_TO_CHECK);
    let empty = Value::Object(Map::new());
    // reason → (first pod name, count), in first-seen order.
    let mut seen: Vec<(String, String, usize)> = Vec::new();
    for pod in &pods {
        let meta = pod.get("metadata").unwrap_or(&empty);
        let spec = pod.get("spec").unwrap_or(&empty);
        let r = checks::evaluate(enforce, meta, spec);
        if r.allowed() {
            continue;
        }
        let reason = r.reasons();
        let pod_name = meta
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        match seen.iter_mut().find(|(r, _, _)| *r == reason) {
            Some((_, first, count)) => {
                *count += 1;
                if pod_name < *first {
                    *first = pod_name;
                }
            }
            None => seen.push((reason, pod_name, 1)),
        }
    }
    let mut warnings = Vec::new();
    if pods.len() < total {
        warnings.push(format!(
            "new PodSecurity enforce level only checked against the first {} of {total} existing pods",
            pods.len()
        ));
    }
    if !seen.is_empty() {
        warnings.push(format!(
            "existing pods in namespace {namespace:?} violate the new PodSecurity enforce level {:?}",
            enforce.to_string()
        ));
    }
    let mut lines: Vec<String> = seen
        .into_iter()
        .map(|(reason, first, count)| match count {
            1 => format!("{first}: {reason}"),
            2 => format!("{first} (and 1 other pod): {reason}"),
            n => format!("{first} (and {} other pods): {reason}", n - 1),
        })
        .collect();
    lines.sort();
    warnings.extend(lines);
    warnings
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn templates_are_found_where_upstream_looks() {
        let cj =
            json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": []}}}}}});
        let path = template_path("batch", "cronjobs").unwrap();
        assert!(value_at(cj.as_object().unwrap(), path).is_some());
        let path = template_path("apps", "deployments").unwrap();
        assert!(value_at(json!({}).as_object().unwrap(), path).is_none());
        assert!(template_path("", "configmaps").is_none());
    }

    #[test]
    fn only_image_and_container_changes_are_significant() {
        let old = json!({"spec": {"containers": [{"name": "c", "image": "a"}]}});
        let same = json!({"metadata": {"labels": {"x": "y"}},
            "spec": {"containers": [{"name": "c", "image": "a"}]}});
        let new_image = json!({"spec": {"containers": [{"name": "c", "image": "b"}]}});
        let o = old.as_object().unwrap();
        assert!(!significant_pod_update(same.as_object().unwrap(), o));
        assert!(significant_pod_update(new_image.as_object().unwrap(), o));
    }
}
