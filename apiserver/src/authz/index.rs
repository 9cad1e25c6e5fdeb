//! The in-memory RBAC index: every Role, ClusterRole, RoleBinding and ClusterRoleBinding,
//! loaded from the store and kept current by following the store's history under
//! `/registry/rbac.authorization.k8s.io/` (one feeder, like the watch cache's). Readers take
//! the current [`Policy`] without locking the feeder; [`Index::revision`] tells how far it
//! is, so the authorizer can wait for the writes a client has already seen.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;

use super::rbac::{Binding, Policy, Role};
use crate::storage::Storage;

/// Storage prefix of every RBAC object.
pub const PREFIX: &str = "/registry/rbac.authorization.k8s.io/";

/// Changes pulled from the store per read.
const PULL: usize = 1024;

/// The RBAC objects, current up to [`Index::revision`].
pub struct Index {
    policy: RwLock<Arc<Policy>>,
    revision: watch::Sender<i64>,
}

impl Index {
    /// An index over `storage`; its feeder runs until the store stops.
    pub fn start(storage: Storage) -> Arc<Index> {
        let (revision, _) = watch::channel(0);
        let index = Arc::new(Index {
            policy: RwLock::new(Arc::new(Policy::default())),
            revision,
        });
        tokio::spawn(feed(storage, Arc::clone(&index)));
        index
    }

    /// An index holding `policy` (tests).
    pub fn fixed(policy: Policy, revision: i64) -> Arc<Index> {
        let (tx, _) = watch::channel(revision);
        Arc::new(Index {
            policy: RwLock::new(Arc::new(policy)),
            revision: tx,
        })
    }

    /// The current policy.
    pub fn policy(&self) -> Arc<Policy> {
        Arc::clone(&self.policy.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// A receiver of the store revision the index is complete up to.
    pub fn revision(&self) -> watch::Receiver<i64> {
        self.revision.subscribe()
    }

    fn publish(&self, objects: &BTreeMap<Bytes, Bytes>, revision: i64) {
        let policy = Arc::new(build(objects));
        *self.policy.write().unwrap_or_else(PoisonError::into_inner) = policy;
        self.revision.send_replace(revision);
    }
}

/// Builds the policy from stored objects keyed
/// `/registry/rbac.authorization.k8s.io/<plural>/[<ns>/]<name>`, decoding each (an object
/// that does not decode is left out).
fn build(objects: &BTreeMap<Bytes, Bytes>) -> Policy {
    let mut cluster_roles = BTreeMap::new();
    let mut roles = BTreeMap::new();
    let mut crbs = BTreeMap::new();
    let mut rbs = BTreeMap::new();
    for (key, value) in objects {
        let Ok(obj) = serde_json::from_slice::<Value>(value) else {
            continue;
        };
        let obj = &obj;
        let key = String::from_utf8_lossy(key);
        let Some(rest) = key.strip_prefix(PREFIX) else {
            continue;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        match parts.as_slice() {
            ["clusterroles", name] => {
                cluster_roles.insert((*name).to_owned(), Role::from_json(obj));
            }
            ["roles", ns, name] => {
                roles.insert(((*ns).to_owned(), (*name).to_owned()), Role::from_json(obj));
            }
            ["clusterrolebindings", name] => {
                crbs.insert((*name).to_owned(), Binding::from_json(obj));
            }
            ["rolebindings", ns, name] => {
                let mut b = Binding::from_json(obj);
                b.namespace = (*ns).to_owned();
                rbs.insert(((*ns).to_owned(), (*name).to_owned()), b);
            }
            _ => {}
        }
    }
    Policy::new(cluster_roles, roles, crbs, rbs)
}

/// Loads every RBAC object; returns them and the revision they are at. The feeder keeps the
/// stored bytes (shared with the store, so they cost nothing of their own) rather than
/// decoded JSON trees, and decodes them when it rebuilds the policy: RBAC changes are rare,
/// the trees weighed ≈ 0.7 MB at idle (issue 26).
fn load(storage: &Storage) -> (BTreeMap<Bytes, Bytes>, i64) {
    let (items, revision) = storage.shared_list(PREFIX);
    let objects = items.into_iter().map(|i| (i.key, i.value)).collect();
    (objects, revision)
}

async fn feed(storage: Storage, index: Arc<Index>) {
    let mut revisions = storage.subscribe();
    let (mut objects, revision) = load(&storage);
    index.publish(&objects, revision);
    let mut next = revision + 1;
    loop {
        match storage.shared_changes(PREFIX, next, PULL) {
            Ok((changes, after)) => {
                let changed = !changes.is_empty();
                for c in changes {
                    match c.value {
                        Some(value) => {
                            objects.insert(c.key, value);
                        }
                        None => {
                            objects.remove(&c.key);
                        }
                    }
                }
                if changed {
                    index.publish(&objects, after - 1);
                } else {
                    index.revision.send_replace(after - 1);
                }
                next = after;
            }
            Err(_) => {
                // History compacted under us: reload.
                let (o, r) = load(&storage);
                objects = o;
                index.publish(&objects, r);
                next = r + 1;
                continue;
            }
        }
        if next <= *revisions.borrow_and_update() {
            continue;
        }
        if revisions.changed().await.is_err() {
            return;
        }
    }
}
