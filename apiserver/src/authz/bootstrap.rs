//! Upstream's bootstrap RBAC policy (`policy.json`, our representation of kube-apiserver
//! v1.33's defaults), reconciled into the store at start-up as the `rbac/bootstrap-roles`
//! post-start hook does: missing objects are created, labelled
//! `kubernetes.io/bootstrapping: rbac-defaults` and annotated
//! `rbac.authorization.kubernetes.io/autoupdate: "true"`; existing objects with autoupdate
//! "true" get the rules, aggregation selectors and subjects they lack.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::rbac::PolicyRule;
use crate::storage::{self, Storage};

const POLICY: &str = include_str!("policy.json");
const GROUP: &str = "rbac.authorization.k8s.io";
const API_VERSION: &str = "rbac.authorization.k8s.io/v1";
const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

/// A rule in the data file: comma-separated lists.
#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawRule {
    v: String,
    g: Option<String>,
    r: Option<String>,
    n: Option<String>,
    u: Option<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawRole {
    namespace: String,
    name: String,
    labels: Map<String, Value>,
    aggregate: Option<String>,
    rules: Vec<RawRule>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default)]
struct RawBinding {
    namespace: String,
    name: String,
    role: String,
    subjects: Vec<String>,
}

#[derive(Debug, Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawPolicy {
    cluster_roles: Vec<RawRole>,
    cluster_role_bindings: Vec<RawBinding>,
    controllers: Vec<RawRole>,
    roles: Vec<RawRole>,
    role_bindings: Vec<RawBinding>,
}

fn list(s: &Option<String>) -> Vec<String> {
    s.as_deref()
        .map(|s| s.split(',').map(str::to_owned).collect())
        .unwrap_or_default()
}

fn verbs(v: &str) -> Vec<String> {
    const READ: &[&str] = &["get", "list", "watch"];
    const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
    let mut out = Vec::new();
    for verb in v.split(',') {
        match verb {
            "@read" => out.extend(READ.iter().map(|s| (*s).to_owned())),
            "@write" => out.extend(WRITE.iter().map(|s| (*s).to_owned())),
            "@rw" => out.extend(READ.iter().chain(WRITE).map(|s| (*s).to_owned())),
            other => out.push(other.to_owned()),
        }
    }
    out
}

fn rule(r: &RawRule) -> PolicyRule {
    PolicyRule {
        verbs: verbs(&r.v),
        api_groups: list(&r.g),
        resources: list(&r.r),
        resource_names: list(&r.n),
        non_resource_urls: list(&r.u),
    }
}

fn subject(s: &str) -> Value {
    let (kind, name) = s.split_once(':').unwrap_or(("User", s));
    if kind == "ServiceAccount" {
        let (ns, name) = name.split_once('/').unwrap_or(("default", name));
        return json!({"kind": kind, "name": name, "namespace": ns});
    }
    json!({"apiGroup": GROUP, "kind": kind, "name": name})
}

fn metadata(name: &str, namespace: &str, labels: &Map<String, Value>) -> Value {
    let mut labels = labels.clone();
    labels.insert("kubernetes.io/bootstrapping".into(), json!("rbac-defaults"));
    let mut meta = json!({
        "name": name,
        "labels": labels,
        "annotations": { AUTOUPDATE: "true" },
    });
    if !namespace.is_empty() {
        meta["namespace"] = json!(namespace);
    }
    meta
}

fn role_object(kind: &str, r: &RawRole) -> Value {
    let rules: Vec<PolicyRule> = r.rules.iter().map(rule).collect();
    let mut obj = json!({
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata(&r.name, &r.namespace, &r.labels),
        "rules": rules,
    });
    if let Some(label) = &r.aggregate {
        obj["aggregationRule"] =
            json!({"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]});
    }
    obj
}

fn binding_object(kind: &str, role_kind: &str, b: &RawBinding) -> Value {
    let subjects: Vec<Value> = b.subjects.iter().map(|s| subject(s)).collect();
    let mut obj = json!({
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": metadata(&b.name, &b.namespace, &Map::new()),
        "roleRef": {"apiGroup": GROUP, "kind": role_kind, "name": b.role},
    });
    if !subjects.is_empty() {
        obj["subjects"] = json!(subjects);
    }
    obj
}

/// Every object of the bootstrap policy with its storage key, in creation order.
pub fn objects() -> Vec<(String, Value)> {
    let Ok(p) = serde_json::from_str::<RawPolicy>(POLICY) else {
        return Vec::new();
    };
    let prefix = super::index::PREFIX;
    let mut out = Vec::new();
    for r in &p.cluster_roles {
        out.push((
            format!("{prefix}clusterroles/{}", r.name),
            role_object("ClusterRole", r),
        ));
    }
    for c in &p.controllers {
        let name = format!("system:controller:{}", c.name);
        let role = RawRole {
            name: name.clone(),
            rules: c.rules.iter().map(clone_rule).collect(),
            ..RawRole::default()
        };
        out.push((
            format!("{prefix}clusterroles/{name}"),
            role_object("ClusterRole", &role),
        ));
    }
    for b in &p.cluster_role_bindings {
        out.push((
            format!("{prefix}clusterrolebindings/{}", b.name),
            binding_object("ClusterRoleBinding", "ClusterRole", b),
        ));
    }
    for c in &p.controllers {
        let name = format!("system:controller:{}", c.name);
        let b = RawBinding {
            name: name.clone(),
            role: name.clone(),
            subjects: vec![format!("ServiceAccount:kube-system/{}", c.name)],
            ..RawBinding::default()
        };
        out.push((
            format!("{prefix}clusterrolebindings/{name}"),
            binding_object("ClusterRoleBinding", "ClusterRole", &b),
        ));
    }
    for r in &p.roles {
        out.push((
            format!("{prefix}roles/{}/{}", r.namespace, r.name),
            role_object("Role", r),
        ));
    }
    for b in &p.role_bindings {
        out.push((
            format!("{prefix}rolebindings/{}/{}", b.namespace, b.name),
            binding_object("RoleBinding", "Role", b),
        ));
    }
    out
}

fn clone_rule(r: &RawRule) -> RawRule {
    RawRule {
        v: r.v.clone(),
        g: r.g.clone(),
        r: r.r.clone(),
        n: r.n.clone(),
        u: r.u.clone(),
    }
}

fn now() -> String {
    let ts = jiff::Timestamp::now();
    jiff::Timestamp::from_second(ts.as_second()).map_or_else(|_| ts.to_string(), |t| t.to_string())
}

/// Adds to `existing` what `wanted` has and it lacks (labels, annotations, rules,
/// aggregation selectors, subjects); `true` when something changed.
fn merge(existing: &mut Value, wanted: &Value) -> bool {
    let mut changed = false;
    for field in ["labels", "annotations"] {
        if let Some(want) = wanted["metadata"][field].as_object() {
            let meta = &mut existing["metadata"];
            if !meta[field].is_object() {
                meta[field] = json!({});
            }
            for (k, v) in want {
                if meta[field].get(k).is_none() {
                    meta[field][k] = v.clone();
                    changed = true;
                }
            }
        }
    }
    let mut append = |path: &str| {
        let Some(want) = wanted.pointer(path).and_then(Value::as_array) else {
            return;
        };
        let Some(have) = pointer_array(existing, path) else {
            return;
        };
        for item in want {
            if !have.contains(item) {
                have.push(item.clone());
                changed = true;
            }
        }
    };
    append("/rules");
    append("/aggregationRule/clusterRoleSelectors");
    append("/subjects");
    changed
}

/// The array at `path` (one or two levels), created empty if absent.
fn pointer_array<'a>(obj: &'a mut Value, path: &str) -> Option<&'a mut Vec<Value>> {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let mut cur = obj;
    for (i, part) in parts.iter().enumerate() {
        let map = cur.as_object_mut()?;
        let last = i + 1 == parts.len();
        let entry = map
            .entry((*part).to_owned())
            .or_insert_with(|| if last { json!([]) } else { json!({}) });
        if entry.is_null() {
            *entry = if last { json!([]) } else { json!({}) };
        }
        cur = entry;
    }
    cur.as_array_mut()
}

/// Creates or updates the bootstrap policy in the store.
pub async fn reconcile(storage: &Storage) -> Result<(), storage::Error> {
    for (key, wanted) in objects() {
        match storage.get(&key).await? {
            None => {
                let mut obj = wanted;
                obj["metadata"]["uid"] = json!(uuid::Uuid::new_v4().to_string());
                obj["metadata"]["creationTimestamp"] = json!(now());
                let bytes = serde_json::to_vec(&obj).unwrap_or_default();
                match storage.create(&key, bytes).await {
                    Ok(_) | Err(storage::Error::AlreadyExists) => {}
                    Err(e) => return Err(e),
                }
            }
            Some(stored) => {
                let Ok(mut existing) = serde_json::from_slice::<Value>(&stored.value) else {
                    continue;
                };
                if existing["metadata"]["annotations"][AUTOUPDATE] != json!("true") {
                    continue;
                }
                if merge(&mut existing, &wanted) {
                    let bytes = serde_json::to_vec(&existing).unwrap_or_default();
                    match storage.update(&key, bytes, stored.revision).await {
                        Ok(_) | Err(storage::Error::Conflict) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_has_upstreams_defaults() {
        let objs = objects();
        let get = |k: &str| {
            objs.iter()
                .find(|(key, _)| key.ends_with(k))
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert!(objs.len() > 80, "{}", objs.len());
        let admin = get("clusterroles/cluster-admin");
        assert_eq!(admin["rules"][0]["verbs"], json!(["*"]));
        assert_eq!(
            admin["metadata"]["labels"]["kubernetes.io/bootstrapping"],
            "rbac-defaults"
        );
        let view = get("clusterroles/view");
        assert_eq!(
            view["aggregationRule"]["clusterRoleSelectors"][0]["matchLabels"]["rbac.authorization.k8s.io/aggregate-to-view"],
            "true"
        );
        let gc = get("clusterrolebindings/system:controller:generic-garbage-collector");
        assert_eq!(
            gc["subjects"][0],
            json!({"kind": "ServiceAccount", "name": "generic-garbage-collector", "namespace": "kube-system"})
        );
        let edit = get("clusterroles/system:aggregate-to-edit");
        assert!(edit["rules"][0]["verbs"] == json!(["get", "list", "watch"]));
    }

    #[test]
    fn merging_adds_missing_rules_and_subjects_only() {
        let mut existing = json!({"metadata": {"name": "x"}, "rules": [{"verbs": ["get"]}]});
        let wanted = json!({"metadata": {"labels": {"a": "b"}}, "rules": [{"verbs": ["get"]}, {"verbs": ["list"]}]});
        assert!(merge(&mut existing, &wanted));
        assert_eq!(existing["rules"].as_array().unwrap().len(), 2);
        assert_eq!(existing["metadata"]["labels"]["a"], "b");
        assert!(!merge(&mut existing, &wanted));
    }
}
