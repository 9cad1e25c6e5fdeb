//! Access reviews (create-only, never stored), answered by the server's authorizer as
//! upstream's registries do: SelfSubjectAccessReview (`kubectl auth can-i`),
//! SelfSubjectRulesReview (`kubectl auth can-i --list`), SubjectAccessReview,
//! LocalSubjectAccessReview, SelfSubjectReview (`kubectl auth whoami`) and TokenReview (the
//! server's token authenticators, with `spec.audiences` or the API audiences). Who may create
//! them is decided by the pipeline like any other request.

use axum::response::Response;
use http::StatusCode;
use http::request::Parts;
use serde_json::{Map, Value, json};

use super::{json_response, object};
use crate::error::{ApiError, Result};
use crate::pipeline::{AuthorizerHandle, Decision, UserInfo};
use crate::registry::catalog::ResourceInfo;
use crate::request_info::RequestInfo;

/// Review kinds this server answers.
pub(crate) const SERVED: &[&str] = &[
    "TokenReview",
    "SelfSubjectAccessReview",
    "SelfSubjectRulesReview",
    "SubjectAccessReview",
    "LocalSubjectAccessReview",
    "SelfSubjectReview",
];

/// The review resource a request names, if this server answers it (reviews are not in
/// the registry's served set: discovery lists them, OpenAPI does not yet).
pub(super) fn find(info: &RequestInfo) -> Option<&'static ResourceInfo> {
    crate::registry::catalog::BUILTIN.iter().find(|r| {
        r.kind_class == crate::registry::catalog::KindClass::Review
            && SERVED.contains(&r.kind)
            && (r.group, r.version, r.plural)
                == (
                    info.group.as_str(),
                    info.version.as_str(),
                    info.resource.as_str(),
                )
    })
}

fn str_of(v: &Value, field: &str) -> String {
    v.get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The request a review's spec asks about.
fn attributes(spec: &Value) -> Result<RequestInfo> {
    if let Some(ra) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        return Ok(RequestInfo {
            is_resource: true,
            verb: str_of(ra, "verb"),
            group: str_of(ra, "group"),
            version: str_of(ra, "version"),
            namespace: str_of(ra, "namespace"),
            resource: str_of(ra, "resource"),
            subresource: str_of(ra, "subresource"),
            name: str_of(ra, "name"),
            ..RequestInfo::default()
        });
    }
    if let Some(nra) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        return Ok(RequestInfo {
            verb: str_of(nra, "verb"),
            path: str_of(nra, "path"),
            ..RequestInfo::default()
        });
    }
    Err(ApiError::BadRequest(
        "spec.resourceAttributes: Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
    ))
}

async fn access_status(handle: &AuthorizerHandle, user: &UserInfo, attrs: &RequestInfo) -> Value {
    let evaluation = handle.0.evaluate(user, attrs).await;
    let outcome = evaluation.outcome;
    let mut status = json!({ "allowed": outcome.decision == Decision::Allow });
    if outcome.decision == Decision::Deny {
        status["denied"] = json!(true);
    }
    if !outcome.reason.is_empty() {
        status["reason"] = json!(outcome.reason);
    }
    if let Some(err) = evaluation.error {
        status["evaluationError"] = json!(err);
    }
    status
}

fn rules_status(handle: &AuthorizerHandle, user: &UserInfo, namespace: &str) -> Value {
    let rules = handle.0.rules_for(user, namespace);
    let mut resource_rules = Vec::new();
    let mut non_resource_rules = Vec::new();
    for r in &rules.rules {
        if !r.resources.is_empty() {
            let mut v =
                json!({"verbs": r.verbs, "apiGroups": r.api_groups, "resources": r.resources});
            if !r.resource_names.is_empty() {
                v["resourceNames"] = json!(r.resource_names);
            }
            resource_rules.push(v);
        }
        if !r.non_resource_urls.is_empty() {
            non_resource_rules
                .push(json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}));
        }
    }
    let mut status = json!({
        "resourceRules": resource_rules,
        "nonResourceRules": non_resource_rules,
        "incomplete": rules.incomplete || !rules.errors.is_empty(),
    });
    if !rules.errors.is_empty() {
        status["evaluationError"] = json!(crate::authz::rbac::aggregate_errors(&rules.errors));
    }
    status
}

/// The identity a SubjectAccessReview asks about.
fn subject(spec: &Value) -> Result<UserInfo> {
    let name = str_of(spec, "user");
    let groups: Vec<String> = spec
        .get("groups")
        .and_then(|g| serde_json::from_value(g.clone()).ok())
        .unwrap_or_default();
    if name.is_empty() && groups.is_empty() {
        return Err(ApiError::BadRequest(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified"
                .into(),
        ));
    }
    // uid and extra reach the authorizers too (a webhook sees them).
    Ok(UserInfo {
        name,
        groups,
        uid: str_of(spec, "uid"),
        extra: spec
            .get("extra")
            .and_then(|e| serde_json::from_value(e.clone()).ok())
            .unwrap_or_default(),
    })
}

/// The `userInfo` of SelfSubjectReview and TokenReview.
fn user_info(user: &UserInfo) -> Value {
    let mut v = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        v["uid"] = json!(user.uid);
    }
    if !user.extra.is_empty() {
        v["extra"] = json!(user.extra);
    }
    v
}

/// TokenReview's status: the token's user and audiences, or why it was refused.
async fn token_status(parts: &Parts, spec: &Value) -> Result<Value> {
    let authn = parts
        .extensions
        .get::<std::sync::Arc<crate::authn::Authenticator>>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("no authenticator".into()))?;
    let token = str_of(spec, "token");
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(|a| serde_json::from_value(a.clone()).ok())
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences = authn.api_audiences().to_vec();
    }
    Ok(match authn.authenticate_token(&token, &audiences).await {
        Ok(t) => json!({
            "authenticated": true,
            "user": user_info(&t.user),
            "audiences": t.audiences,
        }),
        Err(err) => json!({"user": {}, "error": format!("[invalid bearer token, {err}]")}),
    })
}

/// Answers a POST creating a review of kind `r.kind`.
pub(super) async fn create(
    r: &ResourceInfo,
    info: &RequestInfo,
    parts: &Parts,
    body: &[u8],
) -> Result<Response> {
    let user = parts
        .extensions
        .get::<UserInfo>()
        .cloned()
        .ok_or(ApiError::Unauthorized)?;
    let handle = parts
        .extensions
        .get::<AuthorizerHandle>()
        .cloned()
        .ok_or_else(|| ApiError::Internal("no authorizer".into()))?;
    let mut obj: Map<String, Value> = object::decode(&parts.headers, body)?;
    object::check_type(&mut obj, r)?;
    let spec = obj.get("spec").cloned().unwrap_or_else(|| json!({}));
    let status = match r.kind {
        "SelfSubjectAccessReview" => access_status(&handle, &user, &attributes(&spec)?).await,
        "SubjectAccessReview" => {
            access_status(&handle, &subject(&spec)?, &attributes(&spec)?).await
        }
        "LocalSubjectAccessReview" => {
            let attrs = attributes(&spec)?;
            if attrs.is_resource && attrs.namespace != info.namespace {
                return Err(ApiError::BadRequest(format!(
                    "spec.resourceAttributes.namespace must match namespace: {}",
                    info.namespace
                )));
            }
            access_status(&handle, &subject(&spec)?, &attrs).await
        }
        "SelfSubjectRulesReview" => rules_status(&handle, &user, &str_of(&spec, "namespace")),
        "SelfSubjectReview" => json!({"userInfo": user_info(&user)}),
        "TokenReview" => token_status(parts, &spec).await?,
        _ => return Err(ApiError::MethodNotAllowed),
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .map(std::mem::take)
        .unwrap_or_default();
    let mut meta = meta;
    meta.insert("creationTimestamp".into(), Value::Null);
    obj.insert("metadata".into(), Value::Object(meta));
    obj.insert("status".into(), status);
    Ok(json_response(StatusCode::CREATED, &Value::Object(obj)))
}
