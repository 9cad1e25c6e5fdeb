//! Escalation checks on writes of Roles, ClusterRoles and their bindings
//! ([`crate::authz::escalation`]), run before the generic create and update paths.

use http::request::Parts;
use serde_json::Value;

use super::object;
use crate::error::{ApiError, Result};
use crate::pipeline::{AuthorizerHandle, UserInfo};
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
