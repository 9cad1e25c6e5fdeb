//! The audit policy (`--audit-policy-file`, `audit.k8s.io/v1` `Policy`, YAML or JSON) and its
//! evaluation, as upstream's `policy.Checker`: the first rule whose users, userGroups, verbs
//! and resources/namespaces or nonResourceURLs all match decides the level and the stages to
//! omit (the rule's, plus the policy's); no rule matching means level `None`.

use std::collections::BTreeSet;
use std::path::Path;

use serde::Deserialize;

use crate::pipeline::UserInfo;
use crate::request_info::RequestInfo;

/// How much of a request is recorded, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Default)]
pub enum Level {
    /// Nothing.
    #[default]
    None,
    /// Metadata (user, verb, resource, response code), no bodies.
    Metadata,
    /// Metadata and the request body.
    Request,
    /// Metadata, request and response bodies.
    RequestResponse,
}

impl Level {
    /// The level as the Event's `level` field writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::None => "None",
            Level::Metadata => "Metadata",
            Level::Request => "Request",
            Level::RequestResponse => "RequestResponse",
        }
    }
}

/// A stage of a request at which an event is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
pub enum Stage {
    /// As soon as the request is received, before it is handled.
    RequestReceived,
    /// When the response headers are sent, for long-running requests (watches).
    ResponseStarted,
    /// When the response is complete.
    ResponseComplete,
    /// When handling the request panicked.
    Panic,
}

impl Stage {
    /// The stage as the Event's `stage` field writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::RequestReceived => "RequestReceived",
            Stage::ResponseStarted => "ResponseStarted",
            Stage::ResponseComplete => "ResponseComplete",
            Stage::Panic => "Panic",
        }
    }
}

/// A group of resources a rule matches (`audit.k8s.io/v1` `GroupResources`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupResources {
    /// The API group (`""` is the core group).
    #[serde(default)]
    pub group: String,
    /// Resources (`pods`, `pods/log`, `*/status`, `pods/*`, `*`); empty means all of the group.
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names; empty means all.
    #[serde(default)]
    pub resource_names: Vec<String>,
}

/// One rule of the policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// The level of matching requests.
    pub level: Level,
    /// User names; empty means any.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups (any of the user's); empty means any.
    #[serde(default)]
    pub user_groups: Vec<String>,
    /// Verbs; empty means any.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// Resources; a rule with resources or namespaces matches resource requests only.
    #[serde(default)]
    pub resources: Vec<GroupResources>,
    /// Namespaces (`""` for cluster-scoped resources).
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Non-resource paths (`/healthz`, `/api*`, `*`); matches non-resource requests only.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
    /// Stages not to record for matching requests.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Whether to drop `metadata.managedFields` from recorded bodies (the policy's
    /// setting when unset).
    #[serde(default)]
    pub omit_managed_fields: Option<bool>,
}

/// The policy.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// `audit.k8s.io/v1`.
    #[serde(default)]
    pub api_version: String,
    /// `Policy`.
    #[serde(default)]
    pub kind: String,
    /// The rules, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Stages omitted for every request.
    #[serde(default)]
    pub omit_stages: Vec<Stage>,
    /// Drop `metadata.managedFields` from recorded bodies.
    #[serde(default)]
    pub omit_managed_fields: bool,
}

/// What the policy decides for one request.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// The level.
    pub level: Level,
    /// Stages not recorded.
    pub omit_stages: BTreeSet<Stage>,
    /// Whether recorded bodies lose `metadata.managedFields`.
    pub omit_managed_fields: bool,
}

impl Policy {
    /// Reads and checks a policy file (YAML or JSON), with upstream's requirements: the
    /// `audit.k8s.io/v1` `Policy` kind and at least one rule.
    pub fn load(path: &Path) -> Result<Policy, String> {
        let text = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        Policy::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parses and checks a policy document.
    pub fn parse(text: &[u8]) -> Result<Policy, String> {
        let value: serde_json::Value = match serde_json::from_slice(text) {
            Ok(v) => v,
            Err(_) => serde_saphyr::from_slice(text).map_err(|e| format!("invalid YAML: {e}"))?,
        };
        let policy: Policy =
            serde_json::from_value(value).map_err(|e| format!("invalid audit policy: {e}"))?;
        if policy.kind != "Policy" || policy.api_version != "audit.k8s.io/v1" {
            return Err(format!(
                "expected an audit.k8s.io/v1 Policy, got {}, Kind={}",
                policy.api_version, policy.kind
            ));
        }
        if policy.rules.is_empty() {
            return Err("loaded illegal policy with 0 rules".into());
        }
        Ok(policy)
    }

    /// The level and omitted stages for `user` (none for failed authentication) doing `info`.
    pub fn evaluate(&self, user: Option<&UserInfo>, info: &RequestInfo) -> Decision {
        let omit_policy: BTreeSet<Stage> = self.omit_stages.iter().copied().collect();
        for rule in &self.rules {
            if rule.matches(user, info) {
                let mut omit = omit_policy;
                omit.extend(rule.omit_stages.iter().copied());
                return Decision {
                    level: rule.level,
                    omit_stages: omit,
                    omit_managed_fields: rule
                        .omit_managed_fields
                        .unwrap_or(self.omit_managed_fields),
                };
            }
        }
        Decision {
            level: Level::None,
            omit_stages: omit_policy,
            omit_managed_fields: self.omit_managed_fields,
        }
    }
}

impl Rule {
    fn matches(&self, user: Option<&UserInfo>, info: &RequestInfo) -> bool {
        if !self.users.is_empty() && !user.is_some_and(|u| self.users.contains(&u.name)) {
            return false;
        }
        if !self.user_groups.is_empty()
            && !user.is_some_and(|u| u.groups.iter().any(|g| self.user_groups.contains(g)))
        {
            return false;
        }
        if !self.verbs.is_empty() && !self.verbs.contains(&info.verb) {
            return false;
        }
        if !self.namespaces.is_empty() || !self.resources.is_empty() {
            return self.matches_resource(info);
        }
        if !self.non_resource_urls.is_empty() {
            return !info.is_resource
                && self
                    .non_resource_urls
                    .iter()
                    .any(|spec| path_matches(&info.path, spec));
        }
        true
    }

    fn matches_resource(&self, info: &RequestInfo) -> bool {
        if !info.is_resource {
            return false;
        }
        if !self.namespaces.is_empty() && !self.namespaces.contains(&info.namespace) {
            return false;
        }
        if self.resources.is_empty() {
            return true;
        }
        let combined = if info.subresource.is_empty() {
            info.resource.clone()
        } else {
            format!("{}/{}", info.resource, info.subresource)
        };
        self.resources.iter().any(|gr| {
            if gr.group != info.group {
                return false;
            }
            if gr.resources.is_empty() {
                return true;
            }
            if !gr.resource_names.is_empty() && !gr.resource_names.contains(&info.name) {
                return false;
            }
            gr.resources.iter().any(|res| {
                res == "*"
                    || *res == combined
                    || (!info.subresource.is_empty()
                        && res.strip_prefix("*/") == Some(info.subresource.as_str()))
                    || res.strip_suffix("/*") == Some(info.resource.as_str())
            })
        })
    }
}

/// `*`, an exact path, or a prefix ending in `*`.
fn path_matches(path: &str, spec: &str) -> bool {
    spec == "*"
        || spec == path
        || spec
            .strip_suffix('*')
            .is_some_and(|prefix| path.starts_with(prefix.trim_end_matches('*')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  users: ["system:kube-proxy"]
- level: None
  nonResourceURLs: ["/healthz*", "/version"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
    resourceNames: ["watched"]
- level: Request
  verbs: ["create", "update", "patch"]
  resources:
  - group: ""
    resources: ["pods/*", "*/status"]
  - group: apps
- level: Metadata
  userGroups: ["system:authenticated"]
  namespaces: ["kube-system", ""]
  omitStages: [ResponseStarted]
- level: Metadata
"#;

    fn info(method: &Method, path: &str) -> RequestInfo {
        RequestInfo::parse(method, path, None)
    }

    fn user(name: &str, groups: &[&str]) -> UserInfo {
        UserInfo {
            name: name.into(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
            ..UserInfo::default()
        }
    }

    #[test]
    fn first_matching_rule_decides_as_upstreams_checker() {
        let p = Policy::parse(POLICY.as_bytes()).unwrap();
        let alice = user("alice", &["system:authenticated"]);
        let level =
            |u: Option<&UserInfo>, m: Method, path: &str| p.evaluate(u, &info(&m, path)).level;
        let proxy = user("system:kube-proxy", &[]);
        assert_eq!(
            level(Some(&proxy), Method::GET, "/api/v1/pods"),
            Level::None
        );
        assert_eq!(
            level(Some(&alice), Method::GET, "/healthz/etcd"),
            Level::None
        );
        assert_eq!(level(Some(&alice), Method::GET, "/version"), Level::None);
        assert_eq!(
            level(Some(&alice), Method::GET, "/versions"),
            Level::Metadata
        );
        assert_eq!(
            level(
                Some(&alice),
                Method::GET,
                "/api/v1/namespaces/a/configmaps/watched"
            ),
            Level::RequestResponse
        );
        assert_eq!(
            level(
                Some(&alice),
                Method::GET,
                "/api/v1/namespaces/a/configmaps/other"
            ),
            Level::Metadata
        );
        assert_eq!(
            level(
                Some(&alice),
                Method::POST,
                "/api/v1/namespaces/a/pods/p/eviction"
            ),
            Level::Request
        );
        assert_eq!(
            level(
                Some(&alice),
                Method::PUT,
                "/api/v1/namespaces/a/services/s/status"
            ),
            Level::Request
        );
        assert_eq!(
            level(
                Some(&alice),
                Method::POST,
                "/apis/apps/v1/namespaces/a/deployments"
            ),
            Level::Request
        );
        // `pods/*` also matches `pods` itself (upstream's suffix rule).
        assert_eq!(
            level(Some(&alice), Method::POST, "/api/v1/namespaces/a/pods"),
            Level::Request
        );
        assert_eq!(
            level(Some(&alice), Method::POST, "/api/v1/namespaces/a/secrets"),
            Level::Metadata
        );
        let d = p.evaluate(Some(&alice), &info(&Method::GET, "/api/v1/nodes"));
        assert_eq!(d.level, Level::Metadata);
        assert_eq!(
            d.omit_stages,
            BTreeSet::from([Stage::RequestReceived, Stage::ResponseStarted])
        );
        // Without a user (failed authentication) user and group rules never match.
        let d = p.evaluate(None, &info(&Method::GET, "/api/v1/nodes"));
        assert_eq!(
            (d.level, d.omit_stages),
            (Level::Metadata, BTreeSet::from([Stage::RequestReceived]))
        );
    }

    #[test]
    fn bad_policies_are_refused() {
        assert!(Policy::parse(b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: []\n").is_err());
        assert!(
            Policy::parse(b"apiVersion: v1\nkind: ConfigMap\nrules: [{level: None}]\n").is_err()
        );
        assert!(
            Policy::parse(b"apiVersion: audit.k8s.io/v1\nkind: Policy\nrules: [{level: Loud}]\n")
                .is_err()
        );
    }
}
