//! Authorization as kube-apiserver does it with `--authorization-mode=Node,RBAC` (as
//! kubeadm sets it up): the `system:masters` superuser short-circuit, then the node
//! authorizer for kubelet identities ([`node`]), then RBAC over an in-memory index of the
//! store's roles and bindings ([`index`]), then the public health and version paths (what
//! upstream's `system:public-info-viewer` binding grants everyone, kept even before the
//! bootstrap policy exists). [`bootstrap`] reconciles upstream's default policy into the
//! store at start-up; [`escalation`] refuses role and binding writes that grant more than
//! the writer holds.

pub mod bootstrap;
pub mod escalation;
pub mod index;
pub mod node;
pub mod rbac;

use std::sync::Arc;

use crate::pipeline::{self, Authorizer, Decision, Outcome, Rules, SyncPoint, UserInfo};
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

/// The server's authorizer chain: superuser → Node → RBAC → public paths.
pub struct Authz {
    index: Arc<Index>,
    node: node::NodeAuthorizer,
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
            storage: Some(storage),
            applied,
        }
    }

    /// The chain over a fixed index and an empty node graph (tests).
    pub fn with_index(index: Arc<Index>) -> Authz {
        let applied = index.revision();
        Authz {
            index,
            node: node::NodeAuthorizer::new(node::Graph::empty()),
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

impl Authorizer for Authz {
    fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Outcome {
        if is_superuser(user) {
            return Outcome {
                decision: Decision::Allow,
                reason: String::new(),
            };
        }
        let node = self.node.decide(user, info);
        if let Some(outcome) = node.as_ref().filter(|o| o.decision != Decision::NoOpinion) {
            return outcome.clone();
        }
        let node_reason = node.map(|o| o.reason).unwrap_or_default();
        let verdict = self.index.policy().authorize(user, info);
        if verdict.allowed {
            return Outcome {
                decision: Decision::Allow,
                reason: verdict.reason,
            };
        }
        let verdict = rbac::Verdict {
            reason: join_reasons(&node_reason, &verdict.reason),
            ..verdict
        };
        if !info.is_resource && info.verb == "get" && pipeline::is_public(&info.path) {
            return Outcome {
                decision: Decision::Allow,
                reason: String::new(),
            };
        }
        Outcome {
            decision: Decision::NoOpinion,
            reason: verdict.reason,
        }
    }

    fn rules_for(&self, user: &UserInfo, namespace: &str) -> Rules {
        if is_superuser(user) {
            let all = vec!["*".to_owned()];
            return Rules {
                rules: vec![
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
                ],
                ..Rules::default()
            };
        }
        let (rules, mut errors) = self.index.policy().rules_for(user, namespace);
        // Upstream's node authorizer cannot list what a node may do.
        let is_node = node::node_identity(user).is_some();
        if is_node {
            errors.insert(
                0,
                "node authorizer does not support user rule resolution".into(),
            );
        }
        Rules {
            rules,
            incomplete: is_node,
            errors,
        }
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
