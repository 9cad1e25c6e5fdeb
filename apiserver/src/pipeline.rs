//! Tier 1 of the request pipeline: HTTP-level stages that run before anything is decoded, in
//! this order — request info → authentication → authorization. Each stage is a tower layer
//! (axum `from_fn` middleware) added in [`layer`]; object-level stages (admission,
//! validation, storage) run later, in the handlers.
//!
//! Architecture invariant: only this module reads credentials.

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

/// Who is making a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserInfo {
    /// User name (`system:anonymous` for unauthenticated requests).
    pub name: String,
    /// Groups, including `system:authenticated` / `system:unauthenticated`.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The anonymous user.
    pub fn anonymous() -> Self {
        UserInfo {
            name: "system:anonymous".into(),
            groups: vec!["system:unauthenticated".into()],
        }
    }
}

/// Paths anyone may read without credentials (upstream's `system:public-info-viewer`).
const PUBLIC_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

fn is_public(path: &str) -> bool {
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

/// Authentication: x509 client certificates (CN = user, O = groups); no credentials means
/// `system:anonymous`, which may only reach the public health and version paths (401
/// elsewhere).
pub async fn authenticate(mut req: Request, next: Next) -> Response {
    let peer = req
        .extensions()
        .get::<PeerIdentity>()
        .cloned()
        .unwrap_or_default();
    let user = match peer.0 {
        Some(mut user) => {
            if !user.groups.iter().any(|g| g == "system:authenticated") {
                user.groups.push("system:authenticated".into());
            }
            user
        }
        None if is_public(req.uri().path()) => UserInfo::anonymous(),
        None => return ApiError::Unauthorized.into_response(),
    };
    req.extensions_mut().insert(user);
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

/// Decides whether a user may do what a request asks.
pub trait Authorizer: Send + Sync {
    /// The decision for `user` doing `info`.
    fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Decision;
}

/// Discovery paths every authenticated user may read (upstream's `system:discovery` role).
const DISCOVERY_PATHS: &[&str] = &["/api", "/apis", "/openapi", "/version"];

fn is_discovery(path: &str) -> bool {
    DISCOVERY_PATHS
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// `system:masters` may do everything; public paths are open to everyone and discovery to
/// every authenticated user (upstream's bootstrap `system:public-info-viewer` and
/// `system:discovery`). Until RBAC lands every other request is denied (secure by default).
#[derive(Debug, Default)]
pub struct MastersOnly;

impl Authorizer for MastersOnly {
    fn authorize(&self, user: &UserInfo, info: &RequestInfo) -> Decision {
        if user.groups.iter().any(|g| g == "system:masters") {
            return Decision::Allow;
        }
        if !info.is_resource && info.verb == "get" {
            let authenticated = user.groups.iter().any(|g| g == "system:authenticated");
            if is_public(&info.path) || (authenticated && is_discovery(&info.path)) {
                return Decision::Allow;
            }
        }
        Decision::NoOpinion
    }
}

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

/// Authorization middleware over an [`Authorizer`].
pub async fn authorize(authorizer: Arc<dyn Authorizer>, req: Request, next: Next) -> Response {
    let (Some(user), Some(info)) = (
        req.extensions().get::<UserInfo>(),
        req.extensions().get::<RequestInfo>(),
    ) else {
        return ApiError::Unauthorized.into_response();
    };
    match authorizer.authorize(user, info) {
        Decision::Allow => next.run(req).await,
        Decision::Deny | Decision::NoOpinion => forbidden(user, info).into_response(),
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
            groups: vec![],
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

    #[test]
    fn masters_may_do_anything_and_others_nothing() {
        let info = RequestInfo::parse(
            &Method::DELETE,
            "/apis/apps/v1/namespaces/x/deployments/y",
            None,
        );
        let admin = UserInfo {
            name: "admin".into(),
            groups: vec!["system:masters".into()],
        };
        assert_eq!(MastersOnly.authorize(&admin, &info), Decision::Allow);
        assert_eq!(
            MastersOnly.authorize(&UserInfo::anonymous(), &info),
            Decision::NoOpinion
        );
    }
}
