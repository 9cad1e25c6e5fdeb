//! Escalation checks on writes of Roles, ClusterRoles and their bindings
//! ([`crate::authz::escalation`]), run before the generic create and update paths.

use http::request::Parts;
use serde_json::Value;

use super::{Ctx, Query, Scope, object};
use crate::error::{ApiError, Result};
use crate::pipeline::{AuthorizerHandle, UserInfo};
use crate::registry::catalog::ResourceInfo;
use crate::request_info::RequestInfo;

const RBAC_RESOURCES: &[&str] = &[
    "roles",
    "clusterroles",
    "rolebindings",
    "clusterrolebindings",
];

/// Refuses a create or update of an RBAC object that grants more than the writer holds.
pub(super) fn guard(info: &RequestInfo, parts: &Parts, body: &[u8]) -> Result<()> {
    if info.group != "rbac.authorization.k8s.io"
        || !info.subresource.is_empty()
        || !matches!(info.verb.as_str(), "create" | "update")
        || !RBAC_RESOURCES.contains(&info.resource.as_str())
    {
        return Ok(());
    }
    let (Some(user), Some(handle)) = (
        parts.extensions.get::<UserInfo>(),
        parts.extensions.get::<AuthorizerHandle>(),
    ) else {
        return Err(ApiError::Unauthorized);
    };
    let obj = Value::Object(object::decode(&parts.headers, body)?);
    crate::authz::escalation::check(
        handle.0.as_ref(),
        user,
        &info.resource,
        &info.namespace,
        &obj,
    )
}

/// PATCH of a Role, ClusterRole or binding (every patch type, server-side apply included):
/// the patch is first applied as a dry run and the object it would store is checked as a
/// create or update is. The real patch then runs as usual.
pub(super) async fn guard_patch(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    info: &RequestInfo,
    parts: &Parts,
    body: &[u8],
    query: &Query,
) -> Result<()> {
    if info.group != "rbac.authorization.k8s.io"
        || !info.subresource.is_empty()
        || info.verb != "patch"
        || !RBAC_RESOURCES.contains(&info.resource.as_str())
    {
        return Ok(());
    }
    let (Some(user), Some(handle)) = (
        parts.extensions.get::<UserInfo>(),
        parts.extensions.get::<AuthorizerHandle>(),
    ) else {
        return Err(ApiError::Unauthorized);
    };
    if crate::authz::is_superuser(user) {
        return Ok(());
    }
    let mut dry = query.clone();
    dry.insert("dryRun".into(), "All".into());
    let resp = Box::pin(super::patch(
        ctx,
        r,
        namespace,
        &info.name,
        &parts.headers,
        body,
        &dry,
        Scope::Main,
    ))
    .await?;
    let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
        .await
        .map_err(|e| ApiError::Internal(format!("reading the dry-run patch result: {e}")))?;
    let obj: Value = serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::Internal(format!("decoding the dry-run patch result: {e}")))?;
    crate::authz::escalation::check(
        handle.0.as_ref(),
        user,
        &info.resource,
        &info.namespace,
        &obj,
    )
}
