//! Tier 1 of the request pipeline: HTTP-level stages that run before anything is decoded, in
//! this order — request info → authentication → authorization. Each stage is a tower layer
//! (axum `from_fn` middleware) added in [`layer`]; object-level stages (admission,
//! validation, storage) run later, in the handlers.
//!
//! Architecture invariant: only this module and [`crate::authn`] read credentials.

use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::error::{ApiError, GroupResource};
use crate::request_info::RequestInfo;

/// The identity a TLS connection presented (its verified client certificate), attached to
/// every request of that connection by the server's accept loop.
#[derive(Debug, Clone, Default)]
pub struct PeerIdentity(pub Option<UserInfo>);

/// Set on a connection's requests when its client certificate did not verify against the
/// client CA (why). Upstream's x509 authenticator fails such a request with 401 unless a
/// bearer token authenticates it.
#[derive(Debug, Clone)]
pub struct InvalidClientCert(pub String);

/// Who is making a request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (`system:anonymous` for unauthenticated requests).
    pub name: String,
    /// Groups, including `system:authenticated` / `system:unauthenticated`.
    pub groups: Vec<String>,
    /// Unique id (empty when the authenticator gives none).
    pub uid: String,
    /// Extra attributes (service-account tokens: `authentication.kubernetes.io/…`).
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The anonymous user.
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
            ..UserInfo::default()
        }
    }
}

/// Paths anyone may read without credentials (upstream's `system:public-info-viewer`).
const PUBLIC_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

pub(crate) fn is_public(path: &str) -> bool {
    PUBLIC_PATHS
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// Parses [`RequestInfo`] once and stores it in the request.
pub async fn request_info(mut req: Request, next: Next) -> Response {
    let info = RequestInfo::parse(req.method(), req.uri().path(), req.uri().query());
    req.extensions_mut().insert(info);
    next.run(req).await
}

/// Authentication ([`crate::authn`]): x509 client certificates (CN = user, O = groups), then
/// bearer tokens (token file, service-account JWTs); no credentials means `system:anonymous`
/// (group `system:unauthenticated`) when `--anonymous-auth` is on, and authorization decides;
/// a refused token, or no credentials without anonymous auth, is a 401. The authenticator is
/// left in the request's extensions for TokenRequest and TokenReview.
pub async fn authenticate(
    authn: Arc<crate::authn::Authenticator>,
    mut req: Request,
    next: Next,
) -> Response {
    let peer = req
        .extensions()
        .get::<PeerIdentity>()
        .cloned()
        .unwrap_or_default();
    let front_proxy = req
        .extensions()
        .get::<crate::authn::requestheader::FrontProxy>()
        .is_some();
    let proxied = authn.authenticate_proxied(front_proxy, req.headers_mut());
    let user = match proxied {
        Some(user) => user,
        None => match authn.authenticate(peer.0, req.headers()).await {
            Ok(user) => user,
            Err(err) => return err.into_response(),
        },
    };
    // Anonymous is only for requests without credentials: a certificate that failed
    // verification is a failed credential.
    if let Some(InvalidClientCert(why)) = req.extensions().get::<InvalidClientCert>()
        && user == UserInfo::anonymous()
    {
        // Upstream logs each such request ("Unable to authenticate the request").
        tracing::warn!(reason = %why, "Unable to authenticate the request: client certificate");
        return crate::error::ApiError::Unauthorized.into_response();
    }
    req.extensions_mut().insert(user);
    req.extensions_mut().insert(authn);
    next.run(req).await
}

/// The decision of an authorizer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// The request may proceed.
    Allow,
    /// The request is refused.
    Deny,
    /// This authorizer has nothing to say.
    NoOpinion,
}

/// A decision with upstream's reason (`RBAC: allowed by …`), as access reviews report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The decision.
    pub decision: Decision,
    /// Why (may be empty).
    pub reason: String,
}

/// The rules a user holds in a namespace (upstream's `RulesFor`).
#[derive(Debug, Clone, Default)]
pub struct Rules {
    /// Resource and non-resource rules.
    pub rules: Vec<crate::authz::rbac::PolicyRule>,
    /// Whether the list may be missing rules.
    pub incomplete: bool,
    /// Errors met while resolving (empty when none).
    pub errors: Vec<String>,
}

/// Where an authorizer's state must be before it decides: `applied` must reach `target`
/// (the store revision when the request arrived), so a client's own earlier writes count.
pub struct SyncPoint {
    /// The store revision to reach.
    pub target: i64,
    /// The revision the authorizer's state is at.
    pub applied: tokio::sync::watch::Receiver<i64>,
}

/// How long a request waits for the authorizer's state to catch up.
const SYNC_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// A decision with the error met while reaching it (upstream's third return value: an
/// authorizer that could not decide, such as an unreachable webhook, has no opinion and an
/// error; the request then fails with a 500 unless another authorizer allows it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evaluation {
    /// The decision and its reason.
    pub outcome: Outcome,
    /// The evaluation error, if any.
    pub error: Option<String>,
}

/// A boxed future of an [`Evaluation`].
pub type EvaluationFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Evaluation> + Send + 'a>>;

/// Decides whether a user may do what a request asks.
pub trait Authorizer: Send + Sync {
    /// The decision and its reason for `user` doing `info`, from what is known without
    /// waiting on a remote service (a webhook authorizer answers from its cache only).
    fn decide(&self, user: &UserInfo, info: &RequestInfo) -> Outcome;

    /// The decision for `user` doing `info`, remote authorizers included, with the
    /// evaluation error if any: what requests and access reviews are answered with.
    fn evaluate<'a>(&'a self, user: &'a UserInfo, info: &'a RequestInfo) -> EvaluationFuture<'a> {
        let outcome = self.decide(user, info);
        Box::pin(std::future::ready(Evaluation {
            outcome,
            error: None,
        }))
    }

    /// The decision for `user` doing `info`.
    fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Decision {
        self.decide(user, info).decision
    }

    /// The rules `user` holds in `namespace`.
    fn rules_for(&self, _user: &UserInfo, _namespace: &str) -> Rules {
        Rules {
            incomplete: true,
            ..Rules::default()
        }
    }

    /// The rules a binding's role reference grants in `namespace`, or why it cannot be
    /// resolved.
    fn role_ref_rules(
        &self,
        role_ref: &crate::authz::rbac::RoleRef,
        _namespace: &str,
    ) -> Result<Vec<crate::authz::rbac::PolicyRule>, String> {
        Err(format!("{} \"{}\" not found", role_ref.kind, role_ref.name))
    }

    /// The state to wait for before deciding, if the authorizer follows the store.
    fn sync(&self) -> Option<SyncPoint> {
        None
    }
}

/// The authorizer of the server, in every request's extensions (access reviews and
/// escalation checks ask it).
#[derive(Clone)]
pub struct AuthorizerHandle(pub Arc<dyn Authorizer>);

/// Upstream's Forbidden message for a denied request.
pub fn forbidden(user: &UserInfo, info: &RequestInfo) -> ApiError {
    if !info.is_resource {
        return ApiError::Forbidden {
            resource: GroupResource::default(),
            name: String::new(),
            message: format!(
                "forbidden: User \"{}\" cannot {} path \"{}\"",
                user.name, info.verb, info.path
            ),
        };
    }
    let resource = GroupResource::new(&info.group, &info.resource);
    let full = if info.subresource.is_empty() {
        info.resource.clone()
    } else {
        format!("{}/{}", info.resource, info.subresource)
    };
    let subject = if info.name.is_empty() {
        resource.to_string()
    } else {
        format!("{resource} \"{}\"", info.name)
    };
    let scope = if info.namespace.is_empty() {
        "at the cluster scope".to_owned()
    } else {
        format!("in the namespace \"{}\"", info.namespace)
    };
    ApiError::Forbidden {
        message: format!(
            "{subject} is forbidden: User \"{}\" cannot {} resource \"{full}\" in API group \"{}\" {scope}",
            user.name, info.verb, info.group
        ),
        resource,
        name: info.name.clone(),
    }
}

async fn wait_sync(authorizer: &dyn Authorizer) {
    if let Some(mut sync) = authorizer.sync() {
        let target = sync.target;
        let _ = tokio::time::timeout(SYNC_WAIT, sync.applied.wait_for(|r| *r >= target)).await;
    }
}

fn impersonate_attrs(group: &str, resource: &str, namespace: &str, name: &str) -> RequestInfo {
    RequestInfo {
        is_resource: true,
        verb: "impersonate".into(),
        api_prefix: if group.is_empty() { "api" } else { "apis" }.into(),
        group: group.into(),
        version: "v1".into(),
        namespace: namespace.into(),
        resource: resource.into(),
        name: name.into(),
        ..RequestInfo::default()
    }
}

/// Impersonation (`Impersonate-User`, `Impersonate-Group`, `Impersonate-Uid`), after
/// authentication: each requested attribute needs the `impersonate` verb on `users`,
/// `serviceaccounts`, `groups` or `uids` (upstream's `WithImpersonation`); the request then
/// runs as the impersonated user.
pub async fn impersonate(
    authorizer: Arc<dyn Authorizer>,
    mut req: Request,
    next: Next,
) -> Response {
    let headers = req.headers();
    let values = |name: &str| -> Vec<String> {
        headers
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(str::to_owned)
            .collect()
    };
    let users = values("impersonate-user");
    let groups = values("impersonate-group");
    let uids = values("impersonate-uid");
    if users.is_empty() && groups.is_empty() && uids.is_empty() {
        return next.run(req).await;
    }
    let Some(acting) = req.extensions().get::<UserInfo>().cloned() else {
        return ApiError::Unauthorized.into_response();
    };
    let Some(name) = users.first().cloned() else {
        return ApiError::Internal(format!(
            "requested {:?} without impersonating a user",
            groups.iter().chain(&uids).collect::<Vec<_>>()
        ))
        .into_response();
    };
    wait_sync(authorizer.as_ref()).await;
    let mut checks = Vec::new();
    let sa = name
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'));
    match sa {
        Some((ns, sa_name)) => checks.push(impersonate_attrs("", "serviceaccounts", ns, sa_name)),
        None => checks.push(impersonate_attrs("", "users", "", &name)),
    }
    for g in &groups {
        checks.push(impersonate_attrs("", "groups", "", g));
    }
    for u in &uids {
        checks.push(impersonate_attrs("authentication.k8s.io", "uids", "", u));
    }
    for attrs in &checks {
        let evaluation = authorizer.evaluate(&acting, attrs).await;
        if evaluation.outcome.decision != Decision::Allow {
            if let Some(err) = evaluation.error {
                return ApiError::Internal(err).into_response();
            }
            return forbidden(&acting, attrs).into_response();
        }
    }
    let mut new_groups = groups.clone();
    if let (Some((ns, _)), true) = (sa, groups.is_empty()) {
        new_groups.push("system:serviceaccounts".into());
        new_groups.push(format!("system:serviceaccounts:{ns}"));
    }
    if name != "system:anonymous" && !new_groups.iter().any(|g| g == "system:authenticated") {
        new_groups.push("system:authenticated".into());
    }
    let impersonated = UserInfo {
        name,
        groups: new_groups,
        uid: uids.first().cloned().unwrap_or_default(),
        ..UserInfo::default()
    };
    if let Some(audit) = req.extensions().get::<crate::audit::AuditHandle>() {
        audit.record_impersonation(&impersonated);
    }
    req.extensions_mut().insert(impersonated);
    next.run(req).await
}

/// Upstream's Forbidden message with the authorizers' reason appended (`…: reason`).
fn with_reason(err: ApiError, reason: &str) -> ApiError {
    match err {
        ApiError::Forbidden {
            resource,
            name,
            message,
        } if !reason.is_empty() => ApiError::Forbidden {
            resource,
            name,
            message: format!("{message}: {reason}"),
        },
        other => other,
    }
}

/// Authorization middleware over an [`Authorizer`].
pub async fn authorize(authorizer: Arc<dyn Authorizer>, req: Request, next: Next) -> Response {
    let (Some(user), Some(info)) = (
        req.extensions().get::<UserInfo>(),
        req.extensions().get::<RequestInfo>(),
    ) else {
        return ApiError::Unauthorized.into_response();
    };
    wait_sync(authorizer.as_ref()).await;
    let Evaluation { outcome, error } = authorizer.evaluate(user, info).await;
    if let Some(audit) = req.extensions().get::<crate::audit::AuditHandle>() {
        audit.record_authorization(outcome.decision == Decision::Allow, &outcome.reason);
    }
    if let (Some(err), false) = (error, outcome.decision == Decision::Allow) {
        // Upstream's WithAuthorization: an evaluation error is an internal error.
        return ApiError::Internal(err).into_response();
    }
    match outcome.decision {
        Decision::Allow => {
            let mut req = req;
            req.extensions_mut()
                .insert(AuthorizerHandle(Arc::clone(&authorizer)));
            next.run(req).await
        }
        Decision::Deny | Decision::NoOpinion => {
            with_reason(forbidden(user, info), &outcome.reason).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn forbidden_messages_read_like_upstream() {
        let alice = UserInfo {
            name: "alice".into(),
            ..UserInfo::default()
        };
        let info = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/default/pods", None);
        assert_eq!(
            forbidden(&alice, &info).to_string(),
            "pods is forbidden: User \"alice\" cannot list resource \"pods\" in API group \"\" in the namespace \"default\""
        );
        let nodes = RequestInfo::parse(&Method::GET, "/api/v1/nodes/n1", None);
        assert_eq!(
            forbidden(&alice, &nodes).to_string(),
            "nodes \"n1\" is forbidden: User \"alice\" cannot get resource \"nodes\" in API group \"\" at the cluster scope"
        );
    }
}
