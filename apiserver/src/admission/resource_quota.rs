//! `ResourceQuota` (upstream's `plugin/pkg/admission/resourcequota` with the core
//! evaluators of `pkg/quota/v1/evaluator/core`): a new object is charged to the quotas of
//! its namespace that match it before it is stored. A quota that limits `cpu` or `memory`
//! needs every container to state them ("failed quota: … must specify …"); a quota whose
//! status does not report usage yet refuses ("status unknown for quota"); a charge past
//! `status.hard` is refused ("exceeded quota: …"); else `status.used` grows by the charge
//! (compare-and-swap, not on dry runs). The resourcequota controller recomputes usage.
//!
//! Charged on create: pods (`pods`, `requests.*`/`limits.*`, `cpu`, `memory`), services
//! (`services`, `services.nodeports`, `services.loadbalancers`), persistent volume claims
//! (`persistentvolumeclaims`, `requests.storage`), the object counts `configmaps`,
//! `secrets`, `replicationcontrollers`, `resourcequotas`, and `count/<resource>[.<group>]`
//! for every kind. Quota scopes `Terminating`, `NotTerminating`, `BestEffort`,
//! `NotBestEffort` and `PriorityClass` scope selectors are honoured.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::limit_ranger::nano;
use super::{Attributes, forbidden};
use crate::error::{ApiError, Result};
use crate::storage::{self, Storage};

const PREFIX: &str = "/registry/core/resourcequotas/";
/// Attempts under concurrent quota writes.
const RETRIES: usize = 10;
/// What a container must state when a quota limits it.
const MUST_SPECIFY: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

type Usage = BTreeMap<String, i128>;

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn resource_list(v: Option<&Value>) -> BTreeMap<String, Value> {
    v.and_then(Value::as_object)
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

fn containers<'a>(pod: &'a Map<String, Value>, list: &str) -> Vec<&'a Value> {
    pod.get("spec")
        .and_then(|s| s.get(list))
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default()
}

/// What one container counts for (upstream's `podComputeUsageHelper`).
fn container_usage(c: &Value) -> Usage {
    let res = c.get("resources");
    let mut out = Usage::new();
    for (k, v) in resource_list(res.and_then(|r| r.get("requests"))) {
        let n = nano(&text(&v)).unwrap_or(0);
        out.insert(format!("requests.{k}"), n);
        if k == "cpu" || k == "memory" || k == "ephemeral-storage" {
            out.insert(k, n);
        }
    }
    for (k, v) in resource_list(res.and_then(|r| r.get("limits"))) {
        out.insert(format!("limits.{k}"), nano(&text(&v)).unwrap_or(0));
    }
    out
}

/// A pod's usage: containers summed, raised to the largest init container.
fn pod_usage(pod: &Map<String, Value>) -> Usage {
    let mut sum = Usage::new();
    for c in containers(pod, "containers") {
        for (k, v) in container_usage(c) {
            *sum.entry(k).or_default() += v;
        }
    }
    for c in containers(pod, "initContainers") {
        for (k, v) in container_usage(c) {
            let e = sum.entry(k).or_default();
            *e = (*e).max(v);
        }
    }
    for k in ["pods", "count/pods"] {
        sum.insert(k.into(), 1_000_000_000);
    }
    sum
}

const ONE: i128 = 1_000_000_000;

/// What a new object counts for.
fn usage(group: &str, resource: &str, obj: &Map<String, Value>) -> Usage {
    let mut u = Usage::new();
    let count = if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    };
    u.insert(count, ONE);
    match (group, resource) {
        ("", "pods") => u.extend(pod_usage(obj)),
        ("", "services") => {
            u.insert("services".into(), ONE);
            let spec = obj.get("spec");
            let kind = spec
                .and_then(|s| s.get("type"))
                .and_then(Value::as_str)
                .unwrap_or("ClusterIP");
            let ports = spec
                .and_then(|s| s.get("ports"))
                .and_then(Value::as_array)
                .map_or(0, Vec::len);
            if kind == "LoadBalancer" {
                u.insert("services.loadbalancers".into(), ONE);
            }
            if kind == "NodePort" || kind == "LoadBalancer" {
                u.insert(
                    "services.nodeports".into(),
                    ONE * i128::try_from(ports).unwrap_or(0),
                );
            }
        }
        ("", "persistentvolumeclaims") => {
            u.insert("persistentvolumeclaims".into(), ONE);
            let storage = obj
                .get("spec")
                .and_then(|s| s.get("resources"))
                .and_then(|r| r.get("requests"))
                .and_then(|r| r.get("storage"));
            if let Some(s) = storage {
                u.insert("requests.storage".into(), nano(&text(s)).unwrap_or(0));
            }
        }
        ("", r @ ("configmaps" | "secrets" | "replicationcontrollers" | "resourcequotas")) => {
            u.insert(r.into(), ONE);
        }
        _ => {}
    }
    u
}

fn is_best_effort(pod: &Map<String, Value>) -> bool {
    ["containers", "initContainers"].iter().all(|list| {
        containers(pod, list).iter().all(|c| {
            let res = c.get("resources");
            resource_list(res.and_then(|r| r.get("requests"))).is_empty()
                && resource_list(res.and_then(|r| r.get("limits"))).is_empty()
        })
    })
}

fn is_terminating(pod: &Map<String, Value>) -> bool {
    pod.get("spec")
        .and_then(|s| s.get("activeDeadlineSeconds"))
        .and_then(Value::as_i64)
        .is_some_and(|d| d >= 0)
}

/// Whether a quota's scopes select the object (only pods have scopes).
fn matches(quota: &Map<String, Value>, is_pod: bool, obj: &Map<String, Value>) -> bool {
    let spec = quota.get("spec");
    let scopes: Vec<&str> = spec
        .and_then(|s| s.get("scopes"))
        .and_then(Value::as_array)
        .map(|v| v.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let selector: Vec<&Value> = spec
        .and_then(|s| s.get("scopeSelector"))
        .and_then(|s| s.get("matchExpressions"))
        .and_then(Value::as_array)
        .map(|v| v.iter().collect())
        .unwrap_or_default();
    if scopes.is_empty() && selector.is_empty() {
        return true;
    }
    if !is_pod {
        return false;
    }
    let class = obj
        .get("spec")
        .and_then(|s| s.get("priorityClassName"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let scope_ok = |scope: &str| match scope {
        "Terminating" => is_terminating(obj),
        "NotTerminating" => !is_terminating(obj),
        "BestEffort" => is_best_effort(obj),
        "NotBestEffort" => !is_best_effort(obj),
        _ => false,
    };
    scopes.iter().all(|s| scope_ok(s))
        && selector.iter().all(|e| {
            let name = e.get("scopeName").and_then(Value::as_str).unwrap_or("");
            let op = e.get("operator").and_then(Value::as_str).unwrap_or("");
            let values: Vec<&str> = e
                .get("values")
                .and_then(Value::as_array)
                .map(|v| v.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if name != "PriorityClass" {
                return scope_ok(name);
            }
            match op {
                "In" => values.contains(&class),
                "NotIn" => !values.contains(&class),
                "Exists" => !class.is_empty(),
                "DoesNotExist" => class.is_empty(),
                _ => false,
            }
        })
}

/// Whether a quota's hard resource concerns this kind of object.
fn concerns(group: &str, resource: &str, name: &str) -> bool {
    let count = if group.is_empty() {
        format!("count/{resource}")
    } else {
        format!("count/{resource}.{group}")
    };
    if name == count {
        return true;
    }
    match (group, resource) {
        ("", "pods") => {
            name == "pods"
                || name == "cpu"
                || name == "memory"
                || name == "ephemeral-storage"
                || name.starts_with("requests.")
                || name.starts_with("limits.")
        }
        ("", "services") => name.starts_with("services"),
        ("", "persistentvolumeclaims") => {
            name == "persistentvolumeclaims" || name == "requests.storage"
        }
        ("", r) => name == r,
        _ => false,
    }
}

/// Renders a charged amount in the format of the quantity it adds to.
fn render(n: i128, like: Option<&str>) -> String {
    let binary = like.is_some_and(|l| l.ends_with('i'));
    if binary && n % ONE == 0 {
        let units = n / ONE;
        for (suffix, size) in [
            ("Ei", 60),
            ("Pi", 50),
            ("Ti", 40),
            ("Gi", 30),
            ("Mi", 20),
            ("Ki", 10),
        ] {
            let size: i128 = 1 << size;
            if units != 0 && units % size == 0 {
                return format!("{}{suffix}", units / size);
            }
        }
        return units.to_string();
    }
    let raw = if n % ONE == 0 {
        (n / ONE).to_string()
    } else if n % 1_000_000 == 0 {
        format!("{}m", n / 1_000_000)
    } else {
        format!("{n}n")
    };
    crate::quantity::canonical(&raw).unwrap_or(raw)
}

/// Upstream's `prettyPrint`: sorted `name=quantity` pairs.
fn pretty(pairs: &BTreeMap<String, String>) -> String {
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Why a pod does not state what a quota limits (upstream's pod evaluator constraints).
fn missing(pod: &Map<String, Value>, required: &BTreeSet<String>) -> Option<String> {
    let required: BTreeSet<&str> = required
        .iter()
        .map(String::as_str)
        .filter(|r| MUST_SPECIFY.contains(r))
        .collect();
    if required.is_empty() {
        return None;
    }
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for list in ["containers", "initContainers"] {
        for c in containers(pod, list) {
            let have = container_usage(c);
            let name = c.get("name").and_then(Value::as_str).unwrap_or("");
            for r in &required {
                if !have.contains_key(*r) {
                    missing.entry(r).or_default().insert(name.to_owned());
                }
            }
        }
    }
    if missing.is_empty() {
        return None;
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Some(format!("must specify {}", parts.join("; ")))
}

/// Charges a new object to the matching quotas of its namespace (see the module doc).
pub async fn charge(
    storage: &Storage,
    attrs: &Attributes<'_>,
    obj: &Map<String, Value>,
) -> Result<()> {
    if attrs.namespace.is_empty() || !attrs.subresource.is_empty() {
        return Ok(());
    }
    let is_pod = attrs.is_core("pods");
    let prefix = format!("{PREFIX}{}/", attrs.namespace);
    let store_error = |e: storage::Error| ApiError::Internal(e.to_string());
    for _ in 0..RETRIES {
        let (items, _) = storage.shared_list(&prefix);
        let mut writes = Vec::new();
        let delta = usage(attrs.group, attrs.resource, obj);
        for item in items {
            let Ok(mut quota) = serde_json::from_slice::<Map<String, Value>>(&item.value) else {
                continue;
            };
            if !matches(&quota, is_pod, obj) {
                continue;
            }
            let name = quota
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let status = quota.get("status");
            let hard = resource_list(status.and_then(|s| s.get("hard")));
            let used = resource_list(status.and_then(|s| s.get("used")));
            let restricted: BTreeSet<String> = hard
                .keys()
                .filter(|k| concerns(attrs.group, attrs.resource, k))
                .cloned()
                .collect();
            if restricted.is_empty() {
                continue;
            }
            if is_pod && let Some(why) = missing(obj, &restricted) {
                return Err(forbidden(
                    attrs,
                    Some(obj),
                    format!("failed quota: {name}: {why}"),
                ));
            }
            let unknown: Vec<&str> = restricted
                .iter()
                .filter(|r| !used.contains_key(*r))
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                return Err(forbidden(
                    attrs,
                    Some(obj),
                    format!(
                        "status unknown for quota: {name}, resources: {}",
                        restricted.iter().cloned().collect::<Vec<_>>().join(",")
                    ),
                ));
            }
            let requested: Vec<(&String, i128)> = restricted
                .iter()
                .filter_map(|r| delta.get(r).map(|n| (r, *n)))
                .collect();
            if requested.is_empty() {
                continue;
            }
            let mut exceeded = Vec::new();
            let mut new_used = BTreeMap::new();
            for (r, n) in &requested {
                let before_text = used.get(*r).map(text);
                let before = before_text.as_deref().and_then(nano).unwrap_or(0);
                let limit = hard.get(*r).map(text);
                let after = before + n;
                if after > limit.as_deref().and_then(nano).unwrap_or(0) {
                    exceeded.push((*r).clone());
                }
                new_used.insert(
                    (*r).clone(),
                    render(after, before_text.as_deref().or(limit.as_deref())),
                );
            }
            if !exceeded.is_empty() {
                let pick = |f: &dyn Fn(&str) -> String| {
                    exceeded
                        .iter()
                        .map(|r| (r.clone(), f(r)))
                        .collect::<BTreeMap<_, _>>()
                };
                let requested_text = pick(&|r| {
                    let like = hard.get(r).map(text);
                    render(delta.get(r).copied().unwrap_or(0), like.as_deref())
                });
                let used_text = pick(&|r| {
                    used.get(r)
                        .map(|v| crate::quantity::canonical(&text(v)).unwrap_or_else(|_| text(v)))
                        .unwrap_or_default()
                });
                let hard_text = pick(&|r| {
                    hard.get(r)
                        .map(|v| crate::quantity::canonical(&text(v)).unwrap_or_else(|_| text(v)))
                        .unwrap_or_default()
                });
                return Err(forbidden(
                    attrs,
                    Some(obj),
                    format!(
                        "exceeded quota: {name}, requested: {}, used: {}, limited: {}",
                        pretty(&requested_text),
                        pretty(&used_text),
                        pretty(&hard_text)
                    ),
                ));
            }
            if let Some(st) = quota.get_mut("status").and_then(Value::as_object_mut) {
                let used = st.entry("used").or_insert_with(|| json!({}));
                if let Some(used) = used.as_object_mut() {
                    for (k, v) in new_used {
                        used.insert(k, json!(v));
                    }
                }
            }
            if let Some(m) = quota.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            writes.push((
                String::from_utf8_lossy(&item.key).into_owned(),
                quota,
                item.revision,
            ));
        }
        if attrs.dry_run || writes.is_empty() {
            return Ok(());
        }
        let mut conflict = false;
        for (key, quota, revision) in writes {
            let bytes =
                serde_json::to_vec(&quota).map_err(|e| ApiError::Internal(e.to_string()))?;
            match storage.update(&key, bytes, revision).await {
                Ok(_) => {}
                Err(storage::Error::Conflict | storage::Error::NotFound) => {
                    conflict = true;
                    break;
                }
                Err(e) => return Err(store_error(e)),
            }
        }
        if !conflict {
            return Ok(());
        }
    }
    Err(ApiError::Internal(
        "resource quota evaluation kept conflicting with concurrent quota updates".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_count_requests_limits_and_themselves() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}, "limits": {"cpu": "1"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m"}}}
        ]}});
        let u = usage("", "pods", pod.as_object().unwrap());
        assert_eq!(u["requests.cpu"], 500_000_000);
        assert_eq!(u["cpu"], 500_000_000);
        assert_eq!(u["pods"], ONE);
        assert_eq!(u["limits.cpu"], ONE);
        let required: BTreeSet<String> = ["limits.cpu".to_owned(), "pods".to_owned()].into();
        assert_eq!(
            missing(pod.as_object().unwrap(), &required).as_deref(),
            Some("must specify limits.cpu for: b")
        );
        assert_eq!(render(192 * (1 << 20) * ONE, Some("128Mi")), "192Mi");
        assert_eq!(render(1_500_000_000, Some("1")), "1500m");
    }
}
