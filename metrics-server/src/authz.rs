//! Delegated authorization (upstream's `DelegatingAuthorizerConfig`, as metrics-server runs
//! it): each request of the user the proxy named is put to the main API server as a
//! `SubjectAccessReview` — resource attributes for `nodes`/`pods` of `metrics.k8s.io`,
//! non-resource attributes (`get <path>`) for discovery — instead of trusting the proxy's
//! own decision. As upstream's defaults: the health paths are always allowed, members of
//! `system:masters` are allowed without a review, and decisions are cached (allowed and
//! denied alike) for 10 s.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// How long a decision is kept (upstream's `--authorization-webhook-cache-*-ttl` defaults for
/// delegated authorization).
const CACHE_TTL: Duration = Duration::from_secs(10);
/// Decisions kept at most (the cache is emptied when full).
const CACHE_MAX: usize = 4096;

/// What is asked about a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Attributes {
    /// A `metrics.k8s.io/v1beta1` resource.
    Resource {
        /// `get`, `list` or `watch`.
        verb: String,
        /// `nodes` or `pods`.
        resource: String,
        /// The namespace (pods), empty for all or for nodes.
        namespace: String,
        /// The object's name, empty for collections.
        name: String,
    },
    /// A non-resource path (discovery).
    Path {
        /// The request path.
        path: String,
    },
}

impl Attributes {
    /// Upstream's `Forbidden` message for a refused request (`reason` from the review).
    pub(crate) fn forbidden_message(&self, user: &str, reason: &str) -> String {
        let tail = if reason.is_empty() {
            String::new()
        } else {
            format!(": {reason}")
        };
        match self {
            Attributes::Resource {
                verb,
                resource,
                namespace,
                name,
            } => {
                let scope = if namespace.is_empty() {
                    "at the cluster scope".to_owned()
                } else {
                    format!("in the namespace \"{namespace}\"")
                };
                let subject = if name.is_empty() {
                    format!("{resource}.metrics.k8s.io")
                } else {
                    format!("{resource}.metrics.k8s.io \"{name}\"")
                };
                format!(
                    "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"metrics.k8s.io\" {scope}{tail}"
                )
            }
            Attributes::Path { path } => {
                format!("forbidden: User \"{user}\" cannot get path \"{path}\"{tail}")
            }
        }
    }
}

/// The user a request is of.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct User {
    /// `X-Remote-User`.
    pub(crate) name: String,
    /// `X-Remote-Group`.
    pub(crate) groups: Vec<String>,
    /// `X-Remote-Extra-*`.
    pub(crate) extra: BTreeMap<String, Vec<String>>,
}

type Key = (User, Attributes);

/// The authorizer: the API client and the decision cache.
pub(crate) struct Authorizer {
    client: kube::Client,
    cache: Mutex<HashMap<Key, (bool, String, Instant)>>,
}

impl Authorizer {
    /// An authorizer asking through `client`.
    pub(crate) fn new(client: kube::Client) -> Self {
        Authorizer {
            client,
            cache: Mutex::default(),
        }
    }

    /// Whether `user` may do `attrs`, and the review's reason; a failed review is a denial.
    pub(crate) async fn authorize(&self, user: &User, attrs: &Attributes) -> (bool, String) {
        if user.groups.iter().any(|g| g == "system:masters") {
            return (true, String::new());
        }
        let key = (user.clone(), attrs.clone());
        if let Some((allowed, reason, at)) = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            && at.elapsed() < CACHE_TTL
        {
            return (*allowed, reason.clone());
        }
        let mut spec = SubjectAccessReviewSpec {
            user: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            extra: (!user.extra.is_empty()).then(|| user.extra.clone()),
            ..SubjectAccessReviewSpec::default()
        };
        match attrs {
            Attributes::Resource {
                verb,
                resource,
                namespace,
                name,
            } => {
                spec.resource_attributes = Some(ResourceAttributes {
                    group: Some("metrics.k8s.io".into()),
                    version: Some("v1beta1".into()),
                    resource: Some(resource.clone()),
                    verb: Some(verb.clone()),
                    namespace: (!namespace.is_empty()).then(|| namespace.clone()),
                    name: (!name.is_empty()).then(|| name.clone()),
                    ..ResourceAttributes::default()
                });
            }
            Attributes::Path { path } => {
                spec.non_resource_attributes = Some(NonResourceAttributes {
                    path: Some(path.clone()),
                    verb: Some("get".into()),
                });
            }
        }
        let review = SubjectAccessReview {
            spec,
            ..SubjectAccessReview::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let (allowed, reason) = match api.create(&PostParams::default(), &review).await {
            Ok(r) => {
                let status = r.status.unwrap_or_default();
                (
                    status.allowed && !status.denied.unwrap_or(false),
                    status.reason.unwrap_or_default(),
                )
            }
            Err(e) => {
                tracing::warn!(err = %e, user = %user.name, "SubjectAccessReview failed");
                return (false, "authorization check failed".into());
            }
        };
        let mut cache = self
            .cache
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, (allowed, reason.clone(), Instant::now()));
        (allowed, reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_read_as_upstream() {
        let nodes = Attributes::Resource {
            verb: "list".into(),
            resource: "nodes".into(),
            namespace: String::new(),
            name: String::new(),
        };
        assert_eq!(
            nodes.forbidden_message("alice", ""),
            "nodes.metrics.k8s.io is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
        );
        let pod = Attributes::Resource {
            verb: "get".into(),
            resource: "pods".into(),
            namespace: "default".into(),
            name: "web".into(),
        };
        assert_eq!(
            pod.forbidden_message("bob", "no"),
            "pods.metrics.k8s.io \"web\" is forbidden: User \"bob\" cannot get resource \"pods\" in API group \"metrics.k8s.io\" in the namespace \"default\": no"
        );
    }
}
