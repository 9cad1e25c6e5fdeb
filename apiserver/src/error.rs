//! [`ApiError`]: every failure the API server reports, and the one place that turns it into a
//! `metav1.Status` response with upstream's code, reason and message.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Value, json};

/// A resource named as Kubernetes names it in messages: `deployments.apps`, `pods`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupResource {
    /// API group ("" for core).
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A group and plural resource.
    pub fn new(group: &str, resource: &str) -> Self {
        GroupResource {
            group: group.into(),
            resource: resource.into(),
        }
    }
}

impl std::fmt::Display for GroupResource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}", self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// One field-level problem of an Invalid error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// `FieldValueInvalid`, `FieldValueRequired`, `FieldValueNotSupported`, …
    pub reason: &'static str,
    /// Path such as `metadata.name`.
    pub field: String,
    /// Upstream-style text, e.g. `Invalid value: "A": a lowercase RFC 1123 subdomain …`.
    pub message: String,
}

/// Everything that can go wrong serving a request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    /// 400.
    #[error("{0}")]
    BadRequest(String),
    /// 401: no valid credentials.
    #[error("Unauthorized")]
    Unauthorized,
    /// 403 with upstream's full message.
    #[error("{message}")]
    Forbidden {
        /// The resource (empty for non-resource URLs).
        resource: GroupResource,
        /// The object name, if any.
        name: String,
        /// The complete message.
        message: String,
    },
    /// 404.
    #[error("{resource} \"{name}\" not found")]
    NotFound {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
    },
    /// 404 for a path that names no resource.
    #[error("the server could not find the requested resource")]
    NoRoute,
    /// 409: create of an existing object.
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
    },
    /// 409: stale resourceVersion (or other precondition).
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {detail}")]
    Conflict {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
        /// Why, e.g. "the object has been modified; please apply your changes to the latest version and try again".
        detail: String,
    },
    /// 409: a server-side apply conflicts with other field managers.
    #[error("{message}")]
    ApplyConflict {
        /// The resource.
        resource: GroupResource,
        /// The object name.
        name: String,
        /// `Apply failed with 1 conflict: conflict with "m" using apps/v1: .spec.replicas`.
        message: String,
        /// One `FieldManagerConflict` per field.
        causes: Vec<FieldError>,
    },
    /// 410: the resourceVersion or continue token is too old.
    #[error("{0}")]
    Gone(String),
    /// 422 with field causes.
    #[error("{} \"{name}\" is invalid: {}", qualified_kind(kind, group), summarize(.causes))]
    Invalid {
        /// API group of the kind.
        group: String,
        /// The kind, e.g. `ConfigMap`.
        kind: String,
        /// The object name.
        name: String,
        /// The problems.
        causes: Vec<FieldError>,
    },
    /// 422 about no object: upstream's `NewGenericServerResponse(422, …)`, as for a JSON
    /// patch that cannot be applied; the reason is an `UnexpectedServerResponse` cause.
    #[error("the server rejected our request due to an error in our request")]
    Unprocessable(String),
    /// 405.
    #[error("the server does not allow this method on the requested resource")]
    MethodNotAllowed,
    /// 405 with a message of its own (e.g. `create not allowed while custom resource
    /// definition is terminating`).
    #[error("{0}")]
    NotAllowed(String),
    /// 406.
    #[error("{0}")]
    NotAcceptable(String),
    /// 413.
    #[error("the request body is too large (limit {0} bytes)")]
    TooLarge(usize),
    /// 415.
    #[error("the body of the request was in an unknown format - accepted media types include: {0}")]
    UnsupportedMediaType(String),
    /// 429 with Retry-After.
    #[error("too many requests, please try again later")]
    TooManyRequests,
    /// 500, logged.
    #[error("{0}")]
    Internal(String),
    /// 503 (e.g. the store has no leader).
    #[error("{0}")]
    ServiceUnavailable(String),
    /// 504.
    #[error("{0}")]
    Timeout(String),
    /// 504 for a read at a resourceVersion the server has not reached (after waiting for it),
    /// with upstream's `ResourceVersionTooLarge` cause and `retryAfterSeconds: 1`.
    #[error("Timeout: Too large resource version: {requested}, current: {current}")]
    TooLargeResourceVersion {
        /// The resourceVersion asked for.
        requested: i64,
        /// The store's revision.
        current: i64,
    },
    /// Any `metav1.Status` handed on as is, for errors whose code, reason or details come
    /// from elsewhere: a denying admission webhook's own status (upstream's `ToStatusErr`),
    /// a ValidatingAdmissionPolicy denial with the validation's reason, or a plain Go error
    /// that upstream's `ErrorToAPIStatus` turns into a 500 with no reason.
    ///
    /// Serialised like every other Status; `reason` is left out when empty (Go's
    /// `omitempty`), and a `code` that is no HTTP status answers 500.
    #[error("{message}")]
    Status {
        /// The HTTP status code (and `Status.code`).
        code: u16,
        /// `Status.reason`; empty for upstream's `StatusReasonUnknown`.
        reason: String,
        /// `Status.message`.
        message: String,
        /// `Status.details`, verbatim.
        details: Option<Value>,
    },
}

/// `Kind.group` as upstream's `GroupKind.String()` prints it (`Deployment.apps`, `ConfigMap`).
fn qualified_kind(kind: &str, group: &str) -> String {
    if group.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}.{group}")
    }
}

fn summarize(causes: &[FieldError]) -> String {
    let parts: Vec<String> = causes
        .iter()
        .map(|c| format!("{}: {}", c.field, c.message))
        .collect();
    if parts.len() == 1 {
        parts[0].clone()
    } else {
        format!("[{}]", parts.join(", "))
    }
}

impl ApiError {
    /// The HTTP status code.
    pub fn code(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::NotFound { .. } | ApiError::NoRoute => StatusCode::NOT_FOUND,
            ApiError::AlreadyExists { .. }
            | ApiError::Conflict { .. }
            | ApiError::ApplyConflict { .. } => StatusCode::CONFLICT,
            ApiError::Gone(_) => StatusCode::GONE,
            ApiError::Invalid { .. } | ApiError::Unprocessable(_) => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            ApiError::MethodNotAllowed | ApiError::NotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::NotAcceptable(_) => StatusCode::NOT_ACCEPTABLE,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ApiError::TooManyRequests => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::ServiceUnavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Timeout(_) | ApiError::TooLargeResourceVersion { .. } => {
                StatusCode::GATEWAY_TIMEOUT
            }
            ApiError::Status { code, .. } => {
                StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
        }
    }

    /// The `Status.reason` (empty: none, left out of the Status body).
    pub fn reason(&self) -> &str {
        match self {
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::Unauthorized => "Unauthorized",
            ApiError::Forbidden { .. } => "Forbidden",
            ApiError::NotFound { .. } | ApiError::NoRoute => "NotFound",
            ApiError::AlreadyExists { .. } => "AlreadyExists",
            ApiError::Conflict { .. } | ApiError::ApplyConflict { .. } => "Conflict",
            ApiError::Gone(_) => "Expired",
            ApiError::Invalid { .. } | ApiError::Unprocessable(_) => "Invalid",
            ApiError::MethodNotAllowed | ApiError::NotAllowed(_) => "MethodNotAllowed",
            ApiError::NotAcceptable(_) => "NotAcceptable",
            ApiError::TooLarge(_) => "RequestEntityTooLarge",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::TooManyRequests => "TooManyRequests",
            ApiError::Internal(_) => "InternalError",
            ApiError::ServiceUnavailable(_) => "ServiceUnavailable",
            ApiError::Timeout(_) | ApiError::TooLargeResourceVersion { .. } => "Timeout",
            ApiError::Status { reason, .. } => reason,
        }
    }

    /// The `metav1.Status` object for this error.
    pub fn status(&self) -> Value {
        let details = match self {
            ApiError::NotFound { resource, name }
            | ApiError::AlreadyExists { resource, name }
            | ApiError::Conflict { resource, name, .. }
            | ApiError::Forbidden { resource, name, .. } => {
                let mut d = json!({ "kind": resource.resource });
                if !name.is_empty() {
                    d["name"] = json!(name);
                }
                if !resource.group.is_empty() {
                    d["group"] = json!(resource.group);
                }
                Some(d)
            }
            ApiError::Invalid {
                group,
                kind,
                name,
                causes,
            } => {
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                    .collect();
                let mut d = json!({ "name": name, "kind": kind, "causes": causes });
                if !group.is_empty() {
                    d["group"] = json!(group);
                }
                Some(d)
            }
            ApiError::ApplyConflict {
                resource,
                name,
                causes,
                ..
            } => {
                let causes: Vec<Value> = causes
                    .iter()
                    .map(|c| json!({ "reason": c.reason, "message": c.message, "field": c.field }))
                    .collect();
                let mut d = json!({ "name": name, "kind": resource.resource, "causes": causes });
                if !resource.group.is_empty() {
                    d["group"] = json!(resource.group);
                }
                Some(d)
            }
            ApiError::Unprocessable(m) => Some(json!({
                "causes": [{ "reason": "UnexpectedServerResponse", "message": m }],
            })),
            ApiError::TooManyRequests => Some(json!({ "retryAfterSeconds": 1 })),
            ApiError::TooLargeResourceVersion { .. } => Some(json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
                "retryAfterSeconds": 1,
            })),
            ApiError::Status { details, .. } => details.clone(),
            _ => None,
        };
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.to_string(),
            "reason": self.reason(),
            "code": self.code().as_u16(),
        });
        if self.reason().is_empty()
            && let Some(fields) = status.as_object_mut()
        {
            fields.remove("reason");
        }
        if let Some(d) = details {
            status["details"] = d;
        }
        status
    }
}

impl From<store::StoreError> for ApiError {
    fn from(err: store::StoreError) -> Self {
        use store::StoreError as E;
        match err {
            E::Compacted => ApiError::Gone("too old resource version".into()),
            E::NoLeader | E::Stopped => ApiError::ServiceUnavailable(err.to_string()),
            E::Timeout | E::TimeoutDueToLeaderFail => ApiError::Timeout(err.to_string()),
            E::RequestTooLarge => ApiError::TooLarge(1_572_864),
            other => {
                tracing::error!(err = %other, "storage error");
                ApiError::Internal(format!("storage error: {other}"))
            }
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if matches!(self, ApiError::Internal(_))
            || matches!(self, ApiError::Status { .. } if self.code().is_server_error())
        {
            tracing::error!(err = %self, "internal error");
        }
        let mut resp = (self.code(), axum::Json(self.status())).into_response();
        if matches!(
            self,
            ApiError::TooManyRequests | ApiError::TooLargeResourceVersion { .. }
        ) {
            resp.headers_mut().insert(
                http::header::RETRY_AFTER,
                http::HeaderValue::from_static("1"),
            );
        }
        resp
    }
}

/// Result with [`ApiError`].
pub type Result<T, E = ApiError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_reads_like_upstream() {
        let e = ApiError::NotFound {
            resource: GroupResource::new("apps", "deployments"),
            name: "x".into(),
        };
        assert_eq!(e.to_string(), "deployments.apps \"x\" not found");
        let s = e.status();
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "deployments");
        assert_eq!(s["details"]["group"], "apps");
    }

    #[test]
    fn conflict_message_carries_the_upstream_sentence() {
        let e = ApiError::Conflict {
            resource: GroupResource::new("", "configmaps"),
            name: "c".into(),
            detail: "the object has been modified; please apply your changes to the latest version and try again".into(),
        };
        assert!(e.to_string().starts_with(
            "Operation cannot be fulfilled on configmaps \"c\": the object has been modified"
        ));
    }

    #[test]
    fn status_is_handed_on_as_given() {
        let e = ApiError::Status {
            code: 418,
            reason: "Teapot".into(),
            message: "admission webhook \"x\" denied the request: short and stout".into(),
            details: Some(json!({ "name": "n", "causes": [{ "message": "m" }] })),
        };
        assert_eq!(e.code(), StatusCode::IM_A_TEAPOT);
        assert_eq!(e.reason(), "Teapot");
        assert_eq!(
            e.status(),
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "admission webhook \"x\" denied the request: short and stout",
                "reason": "Teapot",
                "code": 418,
                "details": { "name": "n", "causes": [{ "message": "m" }] },
            })
        );
    }

    #[test]
    fn status_without_reason_or_details_omits_them() {
        let e = ApiError::Status {
            code: 500,
            reason: String::new(),
            message: "conversion webhook for x failed: boom".into(),
            details: None,
        };
        assert_eq!(e.to_string(), "conversion webhook for x failed: boom");
        assert_eq!(
            e.status(),
            json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "conversion webhook for x failed: boom",
                "code": 500,
            })
        );
    }

    #[test]
    fn status_with_no_http_code_answers_500() {
        let e = ApiError::Status {
            code: 42,
            reason: "Odd".into(),
            message: "m".into(),
            details: None,
        };
        assert_eq!(e.code(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.status()["code"], 500);
        let resp = e.into_response();
        assert_eq!(resp.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
