//! Authorization as kube-apiserver does it with `--authorization-mode`: the `system:masters`
//! superuser short-circuit (always first, as upstream's privileged-group authorizer), then the
//! configured modes in order — `Node` (the node authorizer for kubelet identities, [`node`]),
//! `RBAC` (an in-memory index of the store's roles and bindings, [`index`], plus the public
//! health and version paths that upstream's `system:public-info-viewer` binding grants
//! everyone, kept even before the bootstrap policy exists), `Webhook` (a remote
//! SubjectAccessReview service, [`webhook`] over [`client`]), `AlwaysAllow`, `AlwaysDeny`. The
//! first authorizer that allows or denies decides; when none does, the request is refused
//! with every reason (and fails with a 500 when an authorizer met an error). Without the
//! flag the chain is `Node,RBAC`, as kubeadm sets it up (upstream's own default,
//! `AlwaysAllow`, is not kept). [`bootstrap`] reconciles upstream's default policy into the
//! store at start-up; [`escalation`] refuses role and binding writes that grant more than the
//! writer holds.

pub mod bootstrap;
pub mod client;
pub mod config;
pub mod escalation;
pub mod index;
pub mod node;
pub mod rbac;
pub mod webhook;

use std::path::PathBuf;
use std::sync::Arc;

use crate::pipeline::{
    self, Authorizer, Decision, Evaluation, EvaluationFuture, Outcome, Rules, SyncPoint, UserInfo,
};
use crate::request_info::RequestInfo;
use crate::storage::Storage;
use index::Index;
use rbac::PolicyRule;

/// Upstream's superuser group.
pub const MASTERS: &str = "system:masters";

/// Whether `user` is a superuser.
pub fn is_superuser(user: &UserInfo) -> bool {
    user.groups.iter().any(|g| g == MASTERS)
}

/// Authorization flags of `capstan server`, named after kube-apiserver's.
#[derive(Debug, Clone, Default)]
pub struct AuthzConfig {
    /// `--authorization-mode`, in order (empty: `Node,RBAC`).
    pub modes: Vec<String>,
    /// `--authorization-webhook-config-file`: the kubeconfig of the `Webhook` mode's service.
    pub webhook_config_file: Option<PathBuf>,
    /// `--authorization-webhook-version` and the cache TTLs.
    pub webhook: webhook::WebhookOptions,
    /// Whether any `--authorization-webhook-*` flag was given (they exclude
    /// `--authorization-config`).
    pub webhook_flags_set: bool,
    /// `--authorization-config`: an AuthorizationConfiguration file ([`config`]).
    pub authorization_config: Option<PathBuf>,
}

/// One authorizer of the chain.
enum Step {
    Node,
    Rbac,
    Webhook(Box<webhook::WebhookAuthorizer>),
    AlwaysAllow,
    AlwaysDeny,
}

/// The chain an AuthorizationConfiguration file names.
fn configured_steps(path: &std::path::Path) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for spec in config::load(path)? {
        steps.push(match spec {
            config::AuthorizerSpec::Node => Step::Node,
            config::AuthorizerSpec::Rbac => Step::Rbac,
            config::AuthorizerSpec::AlwaysAllow => Step::AlwaysAllow,
            config::AuthorizerSpec::AlwaysDeny => Step::AlwaysDeny,
            config::AuthorizerSpec::Webhook(w) => {
                let client = client::WebhookClient::from_kubeconfig(&w.kubeconfig)
                    .map_err(|e| format!("authorizer {:?}: {e}", w.name))?;
                let options = webhook::WebhookOptions {
                    version: w.version,
                    authorized_ttl: w.authorized_ttl,
                    unauthorized_ttl: w.unauthorized_ttl,
                    timeout: w.timeout,
                    deny_on_failure: w.deny_on_failure,
                    match_conditions: w.match_conditions,
                };
                Step::Webhook(Box::new(
                    webhook::WebhookAuthorizer::new(client, options)
                        .map_err(|e| format!("authorizer {:?}: {e}", w.name))?,
                ))
            }
        });
    }
    Ok(steps)
}

/// The chain `modes` (or the `--authorization-config` file) names, with upstream's checks
/// and messages.
fn steps(cfg: &AuthzConfig) -> Result<Vec<Step>, String> {
    if let Some(path) = &cfg.authorization_config {
        if !cfg.modes.is_empty() || cfg.webhook_flags_set || cfg.webhook_config_file.is_some() {
            return Err("--authorization-config can not be specified when --authorization-mode or --authorization-webhook-* flags are defined".into());
        }
        return configured_steps(path);
    }
    let default = ["Node".to_owned(), "RBAC".to_owned()];
    let modes = if cfg.modes.is_empty() {
        &default[..]
    } else {
        &cfg.modes[..]
    };
    let mut seen = std::collections::HashSet::new();
    let mut steps = Vec::new();
    for mode in modes {
        let mode = mode.trim();
        if !seen.insert(mode) {
            return Err(format!(
                "authorization-mode {mode:?} has mode specified more than once"
            ));
        }
        steps.push(match mode {
            "Node" => Step::Node,
            "RBAC" => Step::Rbac,
            "AlwaysAllow" => Step::AlwaysAllow,
            "AlwaysDeny" => Step::AlwaysDeny,
            "Webhook" => {
                let path = cfg.webhook_config_file.as_ref().ok_or(
                    "authorization-mode Webhook's authorization config file not passed",
                )?;
                let client = client::WebhookClient::from_kubeconfig(path)?;
                Step::Webhook(Box::new(webhook::WebhookAuthorizer::new(
                    client,
                    cfg.webhook.clone(),
                )?))
            }
            other => {
                return Err(format!(
                    "authorization-mode {other:?} is not a valid mode (Node, RBAC, Webhook, AlwaysAllow, AlwaysDeny)"
                ));
            }
        });
    }
    if cfg.webhook_config_file.is_some() && !seen.contains("Webhook") {
        return Err(
            "cannot specify --authorization-webhook-config-file without mode Webhook".into(),
        );
    }
    Ok(steps)
}

/// The server's authorizer chain: superuser, then the configured modes.
pub struct Authz {
    index: Arc<Index>,
    node: node::NodeAuthorizer,
    steps: Vec<Step>,
    storage: Option<Storage>,
    /// The revision both the RBAC index and the node graph have reached.
    applied: tokio::sync::watch::Receiver<i64>,
}

/// Publishes the lower of two followers' revisions.
fn lowest(
    mut a: tokio::sync::watch::Receiver<i64>,
    mut b: tokio::sync::watch::Receiver<i64>,
) -> tokio::sync::watch::Receiver<i64> {
    let (tx, rx) = tokio::sync::watch::channel((*a.borrow()).min(*b.borrow()));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                r = a.changed() => if r.is_err() { return },
                r = b.changed() => if r.is_err() { return },
            }
            let low = (*a.borrow_and_update()).min(*b.borrow_and_update());
            if tx.send(low).is_err() {
                return;
            }
        }
    });
    rx
}

impl Authz {
    /// The chain over the store's RBAC objects and pods (starts the index's and the node
    /// graph's feeders).
    pub fn new(storage: Storage) -> Authz {
        let index = Index::start(storage.clone());
        let graph = node::Graph::start(storage.clone());
        let applied = lowest(index.revision(), graph.revision());
        Authz {
            index,
            node: node::NodeAuthorizer::new(graph),
            steps: vec![Step::Node, Step::Rbac],
            storage: Some(storage),
            applied,
        }
    }

    /// The chain `cfg` configures (`--authorization-mode` and the webhook flags), or why
    /// the flags are refused.
    pub fn from_config(storage: Storage, cfg: &AuthzConfig) -> Result<Authz, String> {
        let steps = steps(cfg)?;
        Ok(Authz {
            steps,
            ..Authz::new(storage)
        })
    }

    /// The chain over a fixed index and an empty node graph (tests).
    pub fn with_index(index: Arc<Index>) -> Authz {
        let applied = index.revision();
        Authz {
            index,
            node: node::NodeAuthorizer::new(node::Graph::empty()),
            steps: vec![Step::Node, Step::Rbac],
            storage: None,
            applied,
        }
    }
}

/// Upstream's union of reasons: every non-empty reason, one per line.
fn join_reasons(a: &str, b: &str) -> String {
    match (a.is_empty(), b.is_empty()) {
        (true, _) => b.to_owned(),
        (_, true) => a.to_owned(),
        _ => format!("{a}\n{b}"),
    }
}

/// Rules granting everything (superusers, `AlwaysAllow`).
fn all_rules() -> Vec<PolicyRule> {
    let all = vec!["*".to_owned()];
    vec![
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
    ]
}

fn allow(reason: String) -> Outcome {
    Outcome {
        decision: Decision::Allow,
        reason,
    }
}

fn no_opinion(reason: String) -> Outcome {
    Outcome {
        decision: Decision::NoOpinion,
        reason,
    }
}

/// Upstream's aggregate of several errors: one alone, else `[a, b]`.
fn aggregate(errors: &[String]) -> Option<String> {
    match errors {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

/// Upstream's union: the first decision wins; else no opinion with every reason and error.
#[derive(Default)]
struct Union {
    reasons: String,
    errors: Vec<String>,
}

impl Union {
    /// Records one authorizer's answer; the final evaluation when it decided.
    fn step(&mut self, outcome: Outcome, error: Option<String>) -> Option<Evaluation> {
        if outcome.decision != Decision::NoOpinion {
            return Some(Evaluation { outcome, error });
        }
        self.reasons = join_reasons(&self.reasons, &outcome.reason);
        self.errors.extend(error);
        None
    }

    fn finish(self) -> Evaluation {
        Evaluation {
            error: aggregate(&self.errors),
            outcome: no_opinion(self.reasons),
        }
    }
}

impl Authz {
    /// The answer of a local (non-webhook) step.
    fn local(&self, step: &Step, user: &UserInfo, info: &RequestInfo) -> Outcome {
        match step {
            Step::Node => self
                .node
                .decide(user, info)
                .unwrap_or_else(|| no_opinion(String::new())),
            Step::Rbac => {
                let verdict = self.index.policy().authorize(user, info);
                if verdict.allowed
                    || (!info.is_resource && info.verb == "get" && pipeline::is_public(&info.path))
                {
                    allow(if verdict.allowed {
                        verdict.reason
                    } else {
                        String::new()
                    })
                } else {
                    no_opinion(verdict.reason)
                }
            }
            Step::AlwaysAllow => allow(String::new()),
            // Upstream's AlwaysDeny has no opinion: a later authorizer may still allow.
            Step::AlwaysDeny => no_opinion("Everything is forbidden.".into()),
            Step::Webhook(hook) => hook
                .cached(user, info)
                .unwrap_or_else(|| no_opinion(String::new())),
        }
    }
}

impl Authorizer for Authz {
    fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Outcome {
        if is_superuser(user) {
            return allow(String::new());
        }
        let mut union = Union::default();
        for step in &self.steps {
            if let Some(done) = union.step(self.local(step, user, info), None) {
                return done.outcome;
            }
        }
        union.finish().outcome
    }

    fn evaluate<'a>(&'a self, user: &'a UserInfo, info: &'a RequestInfo) -> EvaluationFuture<'a> {
        Box::pin(async move {
            if is_superuser(user) {
                return Evaluation {
                    outcome: allow(String::new()),
                    error: None,
                };
            }
            let mut union = Union::default();
            for step in &self.steps {
                let (outcome, error) = match step {
                    Step::Webhook(hook) => {
                        let Evaluation { outcome, error } = hook.evaluate(user, info).await;
                        (outcome, error)
                    }
                    local => (self.local(local, user, info), None),
                };
                if let Some(done) = union.step(outcome, error) {
                    return done;
                }
            }
            union.finish()
        })
    }

    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        if is_superuser(user) {
            return Rules {
                rules: all_rules(),
                ..Rules::default()
            };
        }
        let mut all = Rules::default();
        for step in &self.steps {
            match step {
                // Upstream's node authorizer cannot list what a node may do.
                Step::Node if node::node_identity(user).is_some() => {
                    all.incomplete = true;
                    all.errors
                        .push("node authorizer does not support user rule resolution".into());
                }
                Step::Node | Step::AlwaysDeny => {}
                Step::Rbac => {
                    let (rules, errors) = self.index.policy().rules_for(user, namespace);
                    all.rules.extend(rules);
                    all.errors.extend(errors);
                }
                Step::Webhook(_) => {
                    all.incomplete = true;
                    all.errors.push(webhook::NO_RULES.into());
                }
                Step::AlwaysAllow => all.rules.extend(all_rules()),
            }
        }
        all
    }

    fn role_ref_rules(
        &self,
        role_ref: &rbac::RoleRef,
        namespace: &str,
    ) -> Result<Vec<PolicyRule>, String> {
        self.index
            .policy()
            .role_ref_rules(role_ref, namespace)
            .map(|r| r.as_ref().clone())
    }

    fn sync(&self) -> Option<SyncPoint> {
        let storage = self.storage.as_ref()?;
        Some(SyncPoint {
            target: storage.current_revision(),
            applied: self.applied.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn chain(modes: &[&str]) -> Authz {
        let cfg = AuthzConfig {
            modes: modes.iter().map(|m| (*m).to_owned()).collect(),
            ..AuthzConfig::default()
        };
        Authz {
            steps: steps(&cfg).unwrap(),
            ..Authz::with_index(Index::fixed(rbac::Policy::default(), 0))
        }
    }

    fn bob() -> UserInfo {
        UserInfo {
            name: "bob".into(),
            groups: vec!["system:authenticated".into()],
            ..UserInfo::default()
        }
    }

    #[test]
    fn the_first_decision_wins_and_always_deny_has_no_opinion() {
        let pods = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/a/pods", None);
        let decide = |modes: &[&str]| chain(modes).decide(&bob(), &pods);
        assert_eq!(decide(&["RBAC"]).decision, Decision::NoOpinion);
        assert_eq!(decide(&["RBAC", "AlwaysAllow"]).decision, Decision::Allow);
        assert_eq!(
            decide(&["AlwaysDeny"]),
            no_opinion("Everything is forbidden.".into())
        );
        assert_eq!(
            decide(&["AlwaysDeny", "AlwaysAllow"]).decision,
            Decision::Allow
        );
        let masters = UserInfo {
            groups: vec![MASTERS.into()],
            ..bob()
        };
        assert_eq!(
            chain(&["AlwaysDeny"]).decide(&masters, &pods).decision,
            Decision::Allow
        );
        // The public paths stay part of RBAC.
        let health = RequestInfo::parse(&Method::GET, "/healthz", None);
        assert_eq!(
            chain(&["RBAC"]).decide(&bob(), &health).decision,
            Decision::Allow
        );
        assert_eq!(
            chain(&["AlwaysDeny"]).decide(&bob(), &health).decision,
            Decision::NoOpinion
        );
    }

    #[test]
    fn modes_are_checked_as_upstream() {
        let err = |modes: &[&str]| {
            steps(&AuthzConfig {
                modes: modes.iter().map(|m| (*m).to_owned()).collect(),
                ..AuthzConfig::default()
            })
            .err()
            .unwrap()
        };
        assert!(err(&["RBAC", "RBAC"]).contains("more than once"));
        assert!(err(&["ABAC"]).contains("not a valid mode"));
        assert!(err(&["Webhook"]).contains("config file not passed"));
        let both = AuthzConfig {
            modes: vec!["RBAC".into()],
            authorization_config: Some("/x".into()),
            ..AuthzConfig::default()
        };
        assert!(
            steps(&both)
                .err()
                .unwrap()
                .starts_with("--authorization-config")
        );
        let orphan = AuthzConfig {
            webhook_config_file: Some("/x".into()),
            ..AuthzConfig::default()
        };
        assert!(
            steps(&orphan)
                .err()
                .unwrap()
                .contains("without mode Webhook")
        );
    }

    #[test]
    fn rules_are_the_union_of_the_chain() {
        let allow_all = chain(&["RBAC", "AlwaysAllow"]).rules_for(&bob(), "a");
        assert_eq!(allow_all.rules, all_rules());
        assert!(!allow_all.incomplete);
        let deny = chain(&["AlwaysDeny"]).rules_for(&bob(), "a");
        assert!(deny.rules.is_empty() && !deny.incomplete);
    }

    #[tokio::test]
    async fn evaluations_aggregate_reasons_and_errors() {
        let mut union = Union::default();
        assert!(
            union
                .step(no_opinion("a".into()), Some("e1".into()))
                .is_none()
        );
        assert!(
            union
                .step(no_opinion(String::new()), Some("e2".into()))
                .is_none()
        );
        assert!(union.step(no_opinion("b".into()), None).is_none());
        let done = union.finish();
        assert_eq!(done.outcome, no_opinion("a\nb".into()));
        assert_eq!(done.error.as_deref(), Some("[e1, e2]"));
        let pods = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/a/pods", None);
        let e = chain(&["RBAC", "AlwaysAllow"])
            .evaluate(&bob(), &pods)
            .await;
        assert_eq!(e.outcome.decision, Decision::Allow);
        assert_eq!(e.error, None);
    }
}
