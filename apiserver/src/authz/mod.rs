//! Authorization as kube-apiserver does it with `--authorization-mode=RBAC`: the
//! `system:masters` superuser short-circuit, then RBAC over an in-memory index of the
//! store's roles and bindings ([`index`]), then the public health and version paths (what
//! upstream's `system:public-info-viewer` binding grants everyone, kept even before the
//! bootstrap policy exists). [`bootstrap`] reconciles upstream's default policy into the
//! store at start-up; [`escalation`] refuses role and binding writes that grant more than
//! the writer holds.

pub mod bootstrap;
pub mod escalation;
pub mod index;
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

/// The server's authorizer chain: superuser → RBAC → public paths.
pub struct Authz {
    index: Arc<Index>,
    storage: Option<Storage>,
}

impl Authz {
    /// The chain over the store's RBAC objects (starts the index's feeder).
    pub fn new(storage: Storage) -> Authz {
        Authz {
            index: Index::start(storage.clone()),
            storage: Some(storage),
        }
    }

    /// The chain over a fixed index (tests).
    pub fn with_index(index: Arc<Index>) -> Authz {
        Authz {
            index,
            storage: None,
        }
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
        let verdict = self.index.policy().authorize(user, info);
        if verdict.allowed {
            return Outcome {
                decision: Decision::Allow,
                reason: verdict.reason,
            };
        }
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
        let (rules, errors) = self.index.policy().rules_for(user, namespace);
        Rules {
            rules,
            incomplete: false,
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
            applied: self.index.revision(),
        })
    }
}
