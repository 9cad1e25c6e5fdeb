//! RBAC evaluation over a [`Policy`] (upstream's `plugin/pkg/auth/authorizer/rbac`): rule
//! matching (verbs, API groups, resources with `resource/subresource` and `*/subresource`,
//! resource names, non-resource URLs with a trailing `*`), ClusterRoleBindings then
//! RoleBindings of the request's namespace, subjects (User, Group, ServiceAccount), and the
//! reasons upstream gives (`RBAC: allowed by ClusterRoleBinding "x" of ClusterRole "y" to
//! User "alice"`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::pipeline::UserInfo;
use crate::request_info::RequestInfo;

/// One rule of a Role or ClusterRole (`rbac.authorization.k8s.io/v1` PolicyRule).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyRule {
    /// Verbs (`*` for all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verbs: Vec<String>,
    /// API groups (`""` core, `*` all).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub api_groups: Vec<String>,
    /// Resources, `resource/subresource`, `*/subresource` or `*`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<String>,
    /// Object names (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub resource_names: Vec<String>,
    /// Non-resource URLs (a trailing `*` matches any suffix).
    #[serde(rename = "nonResourceURLs", skip_serializing_if = "Vec::is_empty")]
    pub non_resource_urls: Vec<String>,
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

impl PolicyRule {
    /// Whether the rule allows the request described by `info` (upstream's `RuleAllows`).
    pub fn allows(&self, info: &RequestInfo) -> bool {
        if !(has(&self.verbs, "*") || has(&self.verbs, &info.verb)) {
            return false;
        }
        if !info.is_resource {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == info.path
                    || (u.ends_with('*') && info.path.starts_with(u.trim_end_matches('*')))
            });
        }
        if !(has(&self.api_groups, "*") || has(&self.api_groups, &info.group)) {
            return false;
        }
        let combined = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!info.subresource.is_empty()
                    && r.len() == info.subresource.len() + 2
                    && r.starts_with("*/")
                    && r.ends_with(&info.subresource))
        });
        resource && (self.resource_names.is_empty() || has(&self.resource_names, &info.name))
    }
}

/// A binding's subject.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// `rbac.authorization.k8s.io` for users and groups, `""` for service accounts.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub api_group: String,
    /// Name.
    pub name: String,
    /// Namespace of a service account.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
}

impl Subject {
    /// Whether the subject is `user` (upstream's `appliesToUser`); `namespace` is the
    /// binding's, the default for service accounts.
    pub fn applies_to(&self, user: &UserInfo, namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = if self.namespace.is_empty() {
                    namespace
                } else {
                    &self.namespace
                };
                !ns.is_empty() && user.name == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }

    /// Upstream's `describeSubject`.
    fn describe(&self, binding_namespace: &str) -> String {
        if self.kind == "ServiceAccount" {
            let ns = if self.namespace.is_empty() {
                binding_namespace
            } else {
                &self.namespace
            };
            return format!("{} \"{}/{}\"", self.kind, self.name, ns);
        }
        format!("{} \"{}\"", self.kind, self.name)
    }
}

/// The role a binding grants.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RoleRef {
    /// Always `rbac.authorization.k8s.io`.
    pub api_group: String,
    /// `Role` or `ClusterRole`.
    pub kind: String,
    /// Role name.
    pub name: String,
}

/// A label selector of an aggregation rule (`matchLabels` and `matchExpressions`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must equal.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<Requirement>,
}

/// One `matchExpressions` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Requirement {
    /// Label key.
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// Values for `In`/`NotIn`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

impl LabelSelector {
    /// Whether `labels` match (an empty selector matches nothing in aggregation, as upstream).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.match_labels.is_empty() && self.match_expressions.is_empty() {
            return false;
        }
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| {
                let value = labels.get(&r.key);
                match r.operator.as_str() {
                    "In" => value.is_some_and(|v| r.values.contains(v)),
                    "NotIn" => value.is_none_or(|v| !r.values.contains(v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            })
    }
}

/// A Role or ClusterRole.
#[derive(Debug, Clone, Default)]
pub struct Role {
    /// Name.
    pub name: String,
    /// Labels (aggregation selects by them).
    pub labels: BTreeMap<String, String>,
    /// Stored rules.
    pub rules: Vec<PolicyRule>,
    /// `aggregationRule.clusterRoleSelectors`, for aggregated ClusterRoles.
    pub aggregation: Option<Vec<LabelSelector>>,
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Debug, Clone, Default)]
pub struct Binding {
    /// Name.
    pub name: String,
    /// Namespace ("" for ClusterRoleBindings).
    pub namespace: String,
    /// The role granted.
    pub role_ref: RoleRef,
    /// Who it is granted to.
    pub subjects: Vec<Subject>,
}

fn field<T: serde::de::DeserializeOwned + Default>(obj: &Value, name: &str) -> T {
    obj.get(name)
        .cloned()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_default()
}

impl Role {
    /// Reads a stored Role or ClusterRole.
    pub fn from_json(obj: &Value) -> Role {
        let meta = obj.get("metadata").cloned().unwrap_or(Value::Null);
        let aggregation = obj
            .get("aggregationRule")
            .filter(|a| a.is_object())
            .map(|a| field::<Vec<LabelSelector>>(a, "clusterRoleSelectors"));
        Role {
            name: field(&meta, "name"),
            labels: field(&meta, "labels"),
            rules: field(obj, "rules"),
            aggregation,
        }
    }
}

impl Binding {
    /// Reads a stored RoleBinding or ClusterRoleBinding.
    pub fn from_json(obj: &Value) -> Binding {
        let meta = obj.get("metadata").cloned().unwrap_or(Value::Null);
        Binding {
            name: field(&meta, "name"),
            namespace: field(&meta, "namespace"),
            role_ref: field(obj, "roleRef"),
            subjects: field(obj, "subjects"),
        }
    }
}

/// Every role and binding, with aggregated ClusterRoles' rules computed.
#[derive(Debug, Default)]
pub struct Policy {
    /// ClusterRoles by name.
    pub cluster_roles: BTreeMap<String, Role>,
    /// Roles by (namespace, name).
    pub roles: BTreeMap<(String, String), Role>,
    /// ClusterRoleBindings by name.
    pub cluster_role_bindings: BTreeMap<String, Binding>,
    /// RoleBindings by (namespace, name).
    pub role_bindings: BTreeMap<(String, String), Binding>,
    /// Effective rules of each ClusterRole (aggregation applied).
    effective: HashMap<String, Arc<Vec<PolicyRule>>>,
}

/// The outcome of evaluating a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Whether a rule allows it.
    pub allowed: bool,
    /// Upstream's reason (`RBAC: allowed by …`), empty when denied without errors.
    pub reason: String,
}

impl Policy {
    /// Builds the policy and computes aggregated ClusterRoles (as upstream's
    /// clusterrole-aggregation controller does: the union of the rules of every
    /// ClusterRole an aggregation selector matches, recursively).
    pub fn new(
        cluster_roles: BTreeMap<String, Role>,
        roles: BTreeMap<(String, String), Role>,
        cluster_role_bindings: BTreeMap<String, Binding>,
        role_bindings: BTreeMap<(String, String), Binding>,
    ) -> Policy {
        let mut effective = HashMap::new();
        for name in cluster_roles.keys() {
            let mut seen = HashSet::new();
            let rules = aggregate(&cluster_roles, name, &mut seen);
            effective.insert(name.clone(), Arc::new(rules));
        }
        Policy {
            cluster_roles,
            roles,
            cluster_role_bindings,
            role_bindings,
            effective,
        }
    }

    /// The rules a binding's role reference grants, or upstream's not-found error.
    pub fn role_ref_rules(
        &self,
        role_ref: &RoleRef,
        namespace: &str,
    ) -> Result<Arc<Vec<PolicyRule>>, String> {
        match role_ref.kind.as_str() {
            "ClusterRole" => self.effective.get(&role_ref.name).cloned().ok_or_else(|| {
                format!(
                    "clusterrole.rbac.authorization.k8s.io \"{}\" not found",
                    role_ref.name
                )
            }),
            "Role" => self
                .roles
                .get(&(namespace.to_owned(), role_ref.name.clone()))
                .map(|r| Arc::new(r.rules.clone()))
                .ok_or_else(|| {
                    format!(
                        "role.rbac.authorization.k8s.io \"{}\" not found",
                        role_ref.name
                    )
                }),
            other => Err(format!("unsupported role reference kind: \"{other}\"")),
        }
    }

    /// Visits the rules granted to `user` in `namespace` ("" = cluster-wide only), with a
    /// description of where each comes from; stops when `visit` returns `false`. Returns
    /// the resolution errors met.
    fn visit(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&dyn Fn() -> String, &PolicyRule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        for b in self.cluster_role_bindings.values() {
            let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, "")) else {
                continue;
            };
            match self.role_ref_rules(&b.role_ref, "") {
                Ok(rules) => {
                    let source = || {
                        format!(
                            "ClusterRoleBinding \"{}\" of {} \"{}\" to {}",
                            b.name,
                            b.role_ref.kind,
                            b.role_ref.name,
                            subject.describe("")
                        )
                    };
                    for rule in rules.iter() {
                        if !visit(&source, rule) {
                            return errors;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        if namespace.is_empty() {
            return errors;
        }
        let from = (namespace.to_owned(), String::new());
        for ((ns, _), b) in self.role_bindings.range(from..) {
            if ns != namespace {
                break;
            }
            let Some(subject) = b.subjects.iter().find(|s| s.applies_to(user, ns)) else {
                continue;
            };
            match self.role_ref_rules(&b.role_ref, ns) {
                Ok(rules) => {
                    let source = || {
                        format!(
                            "RoleBinding \"{}/{}\" of {} \"{}\" to {}",
                            b.name,
                            ns,
                            b.role_ref.kind,
                            b.role_ref.name,
                            subject.describe(ns)
                        )
                    };
                    for rule in rules.iter() {
                        if !visit(&source, rule) {
                            return errors;
                        }
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        errors
    }

    /// Upstream's `RBACAuthorizer.Authorize`.
    pub fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Verdict {
        let mut verdict = Verdict::default();
        let errors = self.visit(user, &info.namespace, |source, rule| {
            if rule.allows(info) {
                verdict.allowed = true;
                verdict.reason = format!("RBAC: allowed by {}", source());
                return false;
            }
            true
        });
        if !verdict.allowed && !errors.is_empty() {
            verdict.reason = format!("RBAC: {}", aggregate_errors(&errors));
        }
        verdict
    }

    /// Every rule granted to `user` in `namespace` and the resolution errors met
    /// (upstream's `RulesFor`).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<String>) {
        let mut rules = Vec::new();
        let errors = self.visit(user, namespace, |_, rule| {
            rules.push(rule.clone());
            true
        });
        (rules, errors)
    }
}

/// Go's `utilerrors.NewAggregate(...).Error()`: one error as is, several as `[a, b]`.
pub fn aggregate_errors(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

fn aggregate(
    roles: &BTreeMap<String, Role>,
    name: &str,
    seen: &mut HashSet<String>,
) -> Vec<PolicyRule> {
    let Some(role) = roles.get(name) else {
        return Vec::new();
    };
    let Some(selectors) = &role.aggregation else {
        return role.rules.clone();
    };
    if !seen.insert(name.to_owned()) {
        return Vec::new();
    }
    let mut out: Vec<PolicyRule> = Vec::new();
    for (other, candidate) in roles {
        if other == name || !selectors.iter().any(|s| s.matches(&candidate.labels)) {
            continue;
        }
        for rule in aggregate(roles, other, seen) {
            if !out.contains(&rule) {
                out.push(rule);
            }
        }
    }
    seen.remove(name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;
    use serde_json::json;

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..UserInfo::default()
        }
    }

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    fn req(method: &Method, path: &str) -> RequestInfo {
        RequestInfo::parse(method, path, None)
    }

    #[test]
    fn rules_match_verbs_groups_resources_subresources_and_names() {
        let r = rule(
            json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "pods/log"]}),
        );
        assert!(r.allows(&req(&Method::GET, "/api/v1/namespaces/d/pods")));
        assert!(r.allows(&req(&Method::GET, "/api/v1/namespaces/d/pods/p/log")));
        assert!(!r.allows(&req(&Method::GET, "/api/v1/namespaces/d/pods/p/exec")));
        assert!(!r.allows(&req(&Method::DELETE, "/api/v1/namespaces/d/pods/p")));
        assert!(!r.allows(&req(&Method::GET, "/apis/apps/v1/namespaces/d/pods")));
        let scale = rule(json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*/scale"]}));
        assert!(scale.allows(&req(
            &Method::PUT,
            "/apis/apps/v1/namespaces/d/deployments/w/scale"
        )));
        assert!(!scale.allows(&req(
            &Method::PUT,
            "/apis/apps/v1/namespaces/d/deployments/w"
        )));
        let named = rule(
            json!({"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}),
        );
        assert!(named.allows(&req(&Method::GET, "/api/v1/namespaces/d/configmaps/a")));
        assert!(!named.allows(&req(&Method::GET, "/api/v1/namespaces/d/configmaps/b")));
        assert!(!named.allows(&req(&Method::GET, "/api/v1/namespaces/d/configmaps")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let r = rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz", "/apis/*"]}));
        assert!(r.allows(&req(&Method::GET, "/healthz")));
        assert!(!r.allows(&req(&Method::GET, "/healthz/etcd")));
        assert!(r.allows(&req(&Method::GET, "/apis/apps")));
        assert!(!r.allows(&req(&Method::POST, "/healthz")));
        assert!(!r.allows(&req(&Method::GET, "/api/v1/pods")));
    }

    fn policy() -> Policy {
        let role = |name: &str, labels: Value, rules: Value, agg: Option<Value>| {
            let mut obj = json!({"metadata": {"name": name, "labels": labels}, "rules": rules});
            if let Some(a) = agg {
                obj["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": a}]});
            }
            (name.to_owned(), Role::from_json(&obj))
        };
        let cluster_roles = BTreeMap::from([
            role(
                "view",
                json!({"agg-edit": "true"}),
                Value::Null,
                Some(json!({"agg-view": "true"})),
            ),
            role(
                "edit",
                json!({}),
                Value::Null,
                Some(json!({"agg-edit": "true"})),
            ),
            role(
                "pods-reader",
                json!({"agg-view": "true"}),
                json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]),
                None,
            ),
            role(
                "pods-writer",
                json!({"agg-edit": "true"}),
                json!([{"verbs": ["create"], "apiGroups": [""], "resources": ["pods"]}]),
                None,
            ),
        ]);
        let binding = |name: &str, ns: &str, kind: &str, role: &str, subjects: Value| {
            Binding::from_json(&json!({
                "metadata": {"name": name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
                "subjects": subjects,
            }))
        };
        let roles = BTreeMap::from([(
            ("team".to_owned(), "secrets".to_owned()),
            Role::from_json(&json!({"metadata": {"name": "secrets"},
                "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"]}]})),
        )]);
        let crbs = BTreeMap::from([(
            "devs-view".to_owned(),
            binding(
                "devs-view",
                "",
                "ClusterRole",
                "view",
                json!([{"kind": "Group", "name": "devs"}]),
            ),
        )]);
        let rbs = BTreeMap::from([
            (
                ("team".to_owned(), "alice-edit".to_owned()),
                binding(
                    "alice-edit",
                    "team",
                    "ClusterRole",
                    "edit",
                    json!([{"kind": "User", "name": "alice"}]),
                ),
            ),
            (
                ("team".to_owned(), "sa-secrets".to_owned()),
                binding(
                    "sa-secrets",
                    "team",
                    "Role",
                    "secrets",
                    json!([{"kind": "ServiceAccount", "name": "bot"}]),
                ),
            ),
            (
                ("team".to_owned(), "dangling".to_owned()),
                binding(
                    "dangling",
                    "team",
                    "Role",
                    "missing",
                    json!([{"kind": "User", "name": "bob"}]),
                ),
            ),
        ]);
        Policy::new(cluster_roles, roles, crbs, rbs)
    }

    #[test]
    fn bindings_grant_aggregated_roles_with_upstream_reasons() {
        let p = policy();
        let alice = user("alice", &["devs"]);
        let get = req(&Method::GET, "/api/v1/namespaces/other/pods/x");
        assert_eq!(
            p.authorize(&alice, &get).reason,
            "RBAC: allowed by ClusterRoleBinding \"devs-view\" of ClusterRole \"view\" to Group \"devs\""
        );
        let create = req(&Method::POST, "/api/v1/namespaces/team/pods");
        assert_eq!(
            p.authorize(&alice, &create).reason,
            "RBAC: allowed by RoleBinding \"alice-edit/team\" of ClusterRole \"edit\" to User \"alice\""
        );
        assert!(
            !p.authorize(&alice, &req(&Method::POST, "/api/v1/namespaces/other/pods"))
                .allowed
        );
        let bot = user("system:serviceaccount:team:bot", &[]);
        let secret = req(&Method::GET, "/api/v1/namespaces/team/secrets/s");
        assert_eq!(
            p.authorize(&bot, &secret).reason,
            "RBAC: allowed by RoleBinding \"sa-secrets/team\" of Role \"secrets\" to ServiceAccount \"bot/team\""
        );
        let bob = user("bob", &[]);
        assert_eq!(
            p.authorize(&bob, &secret),
            Verdict {
                allowed: false,
                reason: "RBAC: role.rbac.authorization.k8s.io \"missing\" not found".into()
            }
        );
        let (rules, errors) = p.rules_for(&alice, "team");
        assert_eq!(rules.len(), 3);
        assert!(errors.is_empty());
    }
}
