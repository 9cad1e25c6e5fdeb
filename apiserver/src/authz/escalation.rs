//! Escalation prevention on RBAC writes (upstream's `registry/rbac/*/policybased` storage and
//! `ConfirmNoEscalation`): a Role or ClusterRole may only grant what the writer holds (or
//! the writer has `escalate` on it); a binding may only bind a role whose permissions the
//! writer holds (or the writer has `bind` on it). `system:masters` may do anything.

use serde_json::Value;

use super::rbac::{PolicyRule, RoleRef};
use crate::error::{ApiError, GroupResource};
use crate::pipeline::{Authorizer, Decision, UserInfo};
use crate::request_info::RequestInfo;

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

/// Upstream's `BreakdownRule`: one verb, group, resource (and name) per rule.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let one = |s: &String| vec![s.clone()];
    let mut out = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let base = PolicyRule {
                    api_groups: one(group),
                    resources: one(resource),
                    verbs: one(verb),
                    ..PolicyRule::default()
                };
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for name in &rule.resource_names {
                        out.push(PolicyRule {
                            resource_names: one(name),
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            out.push(PolicyRule {
                non_resource_urls: one(url),
                verbs: one(verb),
                ..PolicyRule::default()
            });
        }
    }
    out
}

fn resource_covers_all(set: &[String], wanted: &[String]) -> bool {
    if has(set, "*") || has_all(set, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(set, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(set, &format!("*/{sub}")))
    })
}

fn url_covers(owner: &str, sub: &str) -> bool {
    owner == sub || (owner.ends_with('*') && sub.starts_with(owner.trim_end_matches('*')))
}

/// Upstream's `ruleCovers`.
fn rule_covers(owner: &PolicyRule, sub: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resource_covers_all(&owner.resources, &sub.resources);
    let urls = sub
        .non_resource_urls
        .iter()
        .all(|u| owner.non_resource_urls.iter().any(|o| url_covers(o, u)));
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && names && urls
}

/// Upstream's `Covers`: the broken-down rules of `servant` no rule of `owner` covers.
pub fn missing(owner: &[PolicyRule], servant: &[PolicyRule]) -> Vec<PolicyRule> {
    let mut out = Vec::new();
    for rule in servant {
        for sub in breakdown(rule) {
            if !owner.iter().any(|o| rule_covers(o, &sub)) {
                out.push(sub);
            }
        }
    }
    out
}

/// Upstream's `CompactRules`: simple rules (one group, one resource, at most one name)
/// that differ only by verb are merged.
fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut out: Vec<PolicyRule> = Vec::new();
    let mut simple: Vec<PolicyRule> = Vec::new();
    for rule in rules {
        let is_simple = rule.api_groups.len() == 1
            && rule.resources.len() == 1
            && rule.non_resource_urls.is_empty()
            && rule.resource_names.len() <= 1;
        if !is_simple {
            out.push(rule);
            continue;
        }
        match simple.iter_mut().find(|s| {
            s.api_groups == rule.api_groups
                && s.resources == rule.resources
                && s.resource_names == rule.resource_names
        }) {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => simple.push(rule),
        }
    }
    out.extend(simple);
    out
}

/// Go's `%q` of a string slice: `["a" "b"]`.
fn go_quoted(items: &[String]) -> String {
    let quoted: Vec<String> = items
        .iter()
        .map(|s| serde_json::to_string(s).unwrap_or_default())
        .collect();
    format!("[{}]", quoted.join(" "))
}

/// Upstream's `CompactString`.
pub fn compact_string(r: &PolicyRule) -> String {
    let mut parts = Vec::new();
    if !r.api_groups.is_empty() {
        parts.push(format!("APIGroups:{}", go_quoted(&r.api_groups)));
    }
    if !r.resources.is_empty() {
        parts.push(format!("Resources:{}", go_quoted(&r.resources)));
    }
    if !r.non_resource_urls.is_empty() {
        parts.push(format!(
            "NonResourceURLs:{}",
            go_quoted(&r.non_resource_urls)
        ));
    }
    if !r.resource_names.is_empty() {
        parts.push(format!("ResourceNames:{}", go_quoted(&r.resource_names)));
    }
    if !r.verbs.is_empty() {
        parts.push(format!("Verbs:{}", go_quoted(&r.verbs)));
    }
    format!("{{{}}}", parts.join(", "))
}

/// Upstream's `ConfirmNoEscalation`: `Err(message)` when `user` (in `namespace`) does not
/// hold every permission of `rules`.
pub fn confirm_no_escalation(
    authorizer: &dyn Authorizer,
    user: &UserInfo,
    namespace: &str,
    rules: &[PolicyRule],
) -> Result<(), String> {
    let owner = authorizer.rules_for(user, namespace);
    let missing = missing(&owner.rules, rules);
    if missing.is_empty() {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let mut msg = format!(
        "user \"{}\" (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_quoted(&user.groups),
        lines.join("\n")
    );
    if !owner.errors.is_empty() {
        msg.push_str(&format!(
            "; resolution errors: [{}]",
            owner.errors.join(" ")
        ));
    }
    Err(msg)
}

fn allowed(authorizer: &dyn Authorizer, user: &UserInfo, attrs: &RequestInfo) -> bool {
    authorizer.authorize(user, attrs) == Decision::Allow
}

fn attrs(verb: &str, resource: &str, namespace: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource: true,
        verb: verb.into(),
        api_prefix: "apis".into(),
        group: RBAC_GROUP.into(),
        version: "v1".into(),
        namespace: namespace.into(),
        resource: resource.into(),
        name: name.into(),
        ..RequestInfo::default()
    }
}

fn forbidden(resource: &str, name: &str, why: &str) -> ApiError {
    let gr = GroupResource::new(RBAC_GROUP, resource);
    ApiError::Forbidden {
        message: format!("{gr} \"{name}\" is forbidden: {why}"),
        resource: gr,
        name: name.into(),
    }
}

fn rules_of(obj: &Value) -> Vec<PolicyRule> {
    obj.get("rules")
        .cloned()
        .and_then(|r| serde_json::from_value(r).ok())
        .unwrap_or_default()
}

/// Checks a create or update of an RBAC object (`obj` is the object to be stored) by
/// `user` in `namespace`; other resources pass.
pub fn check(
    authorizer: &dyn Authorizer,
    user: &UserInfo,
    resource: &str,
    namespace: &str,
    obj: &Value,
) -> Result<(), ApiError> {
    if super::is_superuser(user) {
        return Ok(());
    }
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match resource {
        "roles" | "clusterroles" => {
            if allowed(
                authorizer,
                user,
                &attrs("escalate", resource, namespace, name),
            ) {
                return Ok(());
            }
            confirm_no_escalation(authorizer, user, namespace, &rules_of(obj))
                .map_err(|e| forbidden(resource, name, &e))?;
            let aggregated = obj.get("aggregationRule").is_some_and(Value::is_object);
            if resource == "clusterroles" && aggregated {
                let all = vec!["*".to_owned()];
                let full = [
                    PolicyRule {
                        verbs: all.clone(),
                        api_groups: all.clone(),
                        resources: all.clone(),
                        ..PolicyRule::default()
                    },
                    PolicyRule {
                        verbs: all.clone(),
                        non_resource_urls: all,
                        ..PolicyRule::default()
                    },
                ];
                confirm_no_escalation(authorizer, user, namespace, &full).map_err(|_| {
                    forbidden(
                        resource,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    )
                })?;
            }
            Ok(())
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref: RoleRef = obj
                .get("roleRef")
                .cloned()
                .and_then(|r| serde_json::from_value(r).ok())
                .unwrap_or_default();
            let role_resource = if role_ref.kind == "Role" {
                "roles"
            } else {
                "clusterroles"
            };
            if allowed(
                authorizer,
                user,
                &attrs("bind", role_resource, namespace, &role_ref.name),
            ) {
                return Ok(());
            }
            let rules = authorizer
                .role_ref_rules(&role_ref, namespace)
                .map_err(|e| forbidden(resource, name, &e))?;
            confirm_no_escalation(authorizer, user, namespace, &rules)
                .map_err(|e| forbidden(resource, name, &e))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> PolicyRule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn covers_breaks_rules_down_and_honours_wildcards() {
        let owner = vec![
            rule(
                json!({"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods", "*/log"]}),
            ),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/*"]})),
        ];
        let wanted = vec![
            rule(json!({"verbs": ["get"], "apiGroups": [""], "resources": ["pods", "pods/log"]})),
            rule(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz/etcd"]})),
        ];
        assert!(missing(&owner, &wanted).is_empty());
        let more = vec![rule(
            json!({"verbs": ["create", "delete"], "apiGroups": [""], "resources": ["pods"]}),
        )];
        let lines: Vec<String> = compact(missing(&owner, &more))
            .iter()
            .map(compact_string)
            .collect();
        assert_eq!(
            lines,
            vec!["{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"create\" \"delete\"]}"]
        );
    }
}
