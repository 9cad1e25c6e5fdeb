//! Auditing, as kube-apiserver's `--audit-policy-file` and `--audit-log-path` do it: every
//! request the policy selects becomes `audit.k8s.io/v1` `Event` JSON lines, one per stage
//! (`RequestReceived`, `ResponseStarted` for long-running requests such as watches,
//! `ResponseComplete`, `Panic`), with the audit ID (also the `Audit-Id` response header of
//! every request), user, impersonated user, source IPs, user agent, object reference,
//! response status, the request and response bodies the level asks for, and the
//! authorization decision and reason as annotations.
//!
//! Two tier-1 layers: [`init`] (outermost after request info: the audit ID, and the event of
//! a request whose authentication failed) and [`record`] (after authentication: evaluates the
//! policy with the user and writes the events). Later stages add to the request's
//! [`AuditHandle`]: impersonation its user, authorization its decision. `policy` evaluates
//! the rules; `sink` is the non-blocking, rotating log writer.

pub mod policy;
pub mod sink;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::{FutureExt as _, StreamExt as _};
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde::Serialize;
use serde_json::Value;

use crate::error::ApiError;
use crate::pipeline::{PeerIdentity, UserInfo};
use crate::request_info::RequestInfo;
use policy::{Decision, Level, Policy, Stage};

/// The header carrying the audit ID (request and response).
pub const AUDIT_ID_HEADER: &str = "audit-id";
/// Upstream's limit on the recorded User-Agent.
const MAX_USER_AGENT: usize = 1024;
/// Subresources whose requests are long-running (upstream's `BasicLongRunningRequestCheck`).
const LONG_RUNNING_SUBRESOURCES: &[&str] = &["attach", "exec", "proxy", "log", "portforward"];

/// The audit flags.
#[derive(Debug, Clone, Default)]
pub struct AuditConfig {
    /// `--audit-policy-file`: the `audit.k8s.io/v1` Policy (no auditing without one).
    pub policy_file: Option<PathBuf>,
    /// `--audit-log-path`: the log file, `-` for standard output (no auditing without one).
    pub log_path: Option<String>,
    /// `--audit-log-maxsize`: megabytes before the file is rotated (0: 100, as upstream).
    pub log_max_size_mb: u64,
    /// `--audit-log-maxbackup`: rotated files kept (0: all).
    pub log_max_backups: usize,
    /// `--audit-log-maxage`: days a rotated file is kept (0: forever).
    pub log_max_age_days: u64,
}

/// The policy and the log: what [`init`] and [`record`] share.
#[derive(Debug)]
pub struct Auditor {
    policy: Policy,
    sink: sink::Sink,
}

impl Auditor {
    /// The auditor for `cfg`, or `None` when the policy file or the log path is missing (as
    /// upstream, which audits only with both).
    pub fn from_config(cfg: &AuditConfig) -> Result<Option<Arc<Auditor>>, String> {
        let (Some(policy_file), Some(log_path)) = (&cfg.policy_file, &cfg.log_path) else {
            return Ok(None);
        };
        let policy = Policy::load(policy_file)?;
        let sink = sink::Sink::open(
            log_path,
            sink::Rotation {
                max_size_mb: cfg.log_max_size_mb,
                max_backups: cfg.log_max_backups,
                max_age_days: cfg.log_max_age_days,
            },
        )?;
        tracing::info!(
            policy = %policy_file.display(),
            log = %log_path,
            rules = policy.rules.len(),
            "auditing requests"
        );
        Ok(Some(Arc::new(Auditor { policy, sink })))
    }

    /// Writes `event` at `stage` unless the decision omits that stage.
    fn emit(&self, event: &mut Event, stage: Stage, decision: &Decision) {
        if decision.omit_stages.contains(&stage) {
            return;
        }
        event.stage = stage.as_str();
        event.stage_timestamp = if stage == Stage::RequestReceived {
            event.request_received_timestamp.clone()
        } else {
            micro_time(jiff::Timestamp::now())
        };
        match serde_json::to_vec(event) {
            Ok(line) => self.sink.send(line),
            Err(e) => tracing::warn!(err = %e, "encoding an audit event"),
        }
    }
}

/// The remote address of a request's connection (put in its extensions by the server).
#[derive(Debug, Clone, Copy)]
pub struct RemoteAddr(pub SocketAddr);

/// A request's audit state, shared by the pipeline's stages through its extensions.
#[derive(Debug, Clone)]
pub struct AuditHandle(Arc<Mutex<HandleState>>);

#[derive(Debug)]
struct HandleState {
    id: String,
    received: jiff::Timestamp,
    /// Authentication succeeded ([`record`] saw the request).
    authenticated: bool,
    annotations: BTreeMap<String, String>,
    impersonated: Option<UserInfo>,
}

impl AuditHandle {
    fn new(id: String) -> Self {
        AuditHandle(Arc::new(Mutex::new(HandleState {
            id,
            received: jiff::Timestamp::now(),
            authenticated: false,
            annotations: BTreeMap::new(),
            impersonated: None,
        })))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, HandleState> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The request's audit ID.
    pub fn id(&self) -> String {
        self.state().id.clone()
    }

    /// Adds an annotation to the request's events (the first value of a key wins, as
    /// upstream's `AddAuditAnnotation`).
    pub fn add_annotation(&self, key: &str, value: &str) {
        self.state()
            .annotations
            .entry(key.to_owned())
            .or_insert_with(|| value.to_owned());
    }

    /// Records the authorizer's decision: `authorization.k8s.io/decision` (`allow` or
    /// `forbid`) and `authorization.k8s.io/reason`.
    pub fn record_authorization(&self, allowed: bool, reason: &str) {
        let decision = if allowed { "allow" } else { "forbid" };
        self.add_annotation("authorization.k8s.io/decision", decision);
        self.add_annotation("authorization.k8s.io/reason", reason);
    }

    /// Records the user the request impersonates.
    pub fn record_impersonation(&self, user: &UserInfo) {
        self.state().impersonated = Some(user.clone());
    }
}

/// `user` / `impersonatedUser` of an event (`authentication.k8s.io/v1` `UserInfo`).
#[derive(Debug, Clone, Serialize, Default)]
struct EventUser {
    #[serde(skip_serializing_if = "String::is_empty")]
    username: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    uid: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    groups: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    extra: BTreeMap<String, Vec<String>>,
}

impl From<&UserInfo> for EventUser {
    fn from(u: &UserInfo) -> Self {
        EventUser {
            username: u.name.clone(),
            uid: u.uid.clone(),
            groups: u.groups.clone(),
            extra: u.extra.clone(),
        }
    }
}

/// `objectRef` of an event.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct ObjectRef {
    #[serde(skip_serializing_if = "String::is_empty")]
    resource: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    namespace: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    uid: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    api_group: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    api_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    resource_version: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    subresource: String,
}

impl ObjectRef {
    /// Completes the reference from the request's object, as upstream's `LogRequestObject`:
    /// namespace, name, uid and resourceVersion the URL did not give.
    fn complete_from(&mut self, object: &Value) {
        let Some(meta) = object.get("metadata") else {
            return;
        };
        let text = |k: &str| meta.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        for (field, key) in [
            (&mut self.namespace, "namespace"),
            (&mut self.name, "name"),
            (&mut self.uid, "uid"),
            (&mut self.resource_version, "resourceVersion"),
        ] {
            if field.is_empty() {
                *field = text(key);
            }
        }
    }
}

/// `responseStatus` of an event: the bounded fields of a `metav1.Status`, in its order.
#[derive(Debug, Clone, Serialize, Default)]
struct ResponseStatus {
    metadata: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "String::is_empty")]
    status: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    message: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    details: Option<Value>,
    #[serde(skip_serializing_if = "is_zero")]
    code: u16,
}

fn is_zero(code: &u16) -> bool {
    *code == 0
}

impl ResponseStatus {
    fn code(code: u16) -> Self {
        ResponseStatus {
            code,
            ..ResponseStatus::default()
        }
    }

    /// From a `Status` response body.
    fn of_status(status: &Value, code: u16) -> Self {
        let text = |k: &str| {
            status
                .get(k)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        ResponseStatus {
            metadata: serde_json::Map::new(),
            status: text("status"),
            message: text("message"),
            reason: text("reason"),
            details: status.get("details").filter(|d| !d.is_null()).cloned(),
            code: status
                .get("code")
                .and_then(Value::as_u64)
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(code),
        }
    }
}

/// An `audit.k8s.io/v1` Event, fields in upstream's order.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
struct Event {
    kind: &'static str,
    api_version: &'static str,
    level: &'static str,
    #[serde(rename = "auditID")]
    audit_id: String,
    stage: &'static str,
    #[serde(rename = "requestURI")]
    request_uri: String,
    verb: String,
    user: EventUser,
    #[serde(skip_serializing_if = "Option::is_none")]
    impersonated_user: Option<EventUser>,
    #[serde(rename = "sourceIPs", skip_serializing_if = "Vec::is_empty")]
    source_ips: Vec<String>,
    #[serde(skip_serializing_if = "String::is_empty")]
    user_agent: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    object_ref: Option<ObjectRef>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_status: Option<ResponseStatus>,
    #[serde(skip_serializing_if = "Option::is_none")]
    request_object: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_object: Option<Value>,
    request_received_timestamp: String,
    stage_timestamp: String,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
}

/// What an event needs from the request, taken before the request moves on.
struct RequestFacts {
    request_uri: String,
    user_agent: String,
    source_ips: Vec<String>,
}

impl RequestFacts {
    fn of(req: &Request) -> Self {
        let headers = req.headers();
        let mut user_agent = header(headers, "user-agent");
        if user_agent.len() > MAX_USER_AGENT {
            let mut cut = MAX_USER_AGENT;
            while !user_agent.is_char_boundary(cut) {
                cut -= 1;
            }
            user_agent.truncate(cut);
            user_agent.push_str("...TRUNCATED");
        }
        RequestFacts {
            request_uri: req
                .uri()
                .path_and_query()
                .map(|p| p.as_str().to_owned())
                .unwrap_or_else(|| req.uri().path().to_owned()),
            user_agent,
            source_ips: source_ips(headers, req.extensions().get::<RemoteAddr>()),
        }
    }
}

fn header(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

/// Upstream's `utilnet.SourceIPs`: `X-Forwarded-For`, then `X-Real-Ip`, then the
/// connection's address, each once.
fn source_ips(headers: &HeaderMap, remote: Option<&RemoteAddr>) -> Vec<String> {
    let mut ips: Vec<String> = header(headers, "x-forwarded-for")
        .split(',')
        .map(str::trim)
        .filter(|s| s.parse::<std::net::IpAddr>().is_ok())
        .map(str::to_owned)
        .collect();
    let real = header(headers, "x-real-ip");
    if real.parse::<std::net::IpAddr>().is_ok() && !ips.contains(&real) {
        ips.push(real);
    }
    if let Some(RemoteAddr(addr)) = remote {
        let ip = addr.ip().to_canonical().to_string();
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    ips
}

/// Upstream's `MicroTime` JSON form: RFC 3339 in UTC with microseconds.
fn micro_time(t: jiff::Timestamp) -> String {
    t.to_zoned(jiff::tz::TimeZone::UTC)
        .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
        .to_string()
}

fn new_event(
    handle: &AuditHandle,
    decision: &Decision,
    facts: RequestFacts,
    info: &RequestInfo,
    user: Option<&UserInfo>,
) -> Event {
    let (id, received) = {
        let s = handle.state();
        (s.id.clone(), s.received)
    };
    Event {
        kind: "Event",
        api_version: "audit.k8s.io/v1",
        level: decision.level.as_str(),
        audit_id: id,
        stage: "",
        request_uri: facts.request_uri,
        verb: info.verb.clone(),
        user: user.map(EventUser::from).unwrap_or_default(),
        impersonated_user: None,
        source_ips: facts.source_ips,
        user_agent: facts.user_agent,
        object_ref: info.is_resource.then(|| ObjectRef {
            resource: info.resource.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            uid: String::new(),
            api_group: info.group.clone(),
            api_version: info.version.clone(),
            resource_version: String::new(),
            subresource: info.subresource.clone(),
        }),
        response_status: None,
        request_object: None,
        response_object: None,
        request_received_timestamp: micro_time(received),
        stage_timestamp: String::new(),
        annotations: BTreeMap::new(),
    }
}

/// Outermost audit stage: takes the request's audit ID (its `Audit-ID` header, else a new
/// UUID), answers it in the `Audit-Id` header, and when authentication refuses the request
/// (401) writes upstream's failed-authentication event (stage `ResponseStarted`, no user).
pub async fn init(auditor: Option<Arc<Auditor>>, mut req: Request, next: Next) -> Response {
    let id = Some(header(req.headers(), AUDIT_ID_HEADER))
        .filter(|id| !id.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let handle = AuditHandle::new(id.clone());
    req.extensions_mut().insert(handle.clone());
    let failed = auditor.as_ref().map(|_| {
        (
            RequestFacts::of(&req),
            req.extensions().get::<RequestInfo>().cloned(),
            auth_methods(&req),
        )
    });
    let mut response = next.run(req).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(AUDIT_ID_HEADER, value);
    }
    let authenticated = handle.state().authenticated;
    if let (Some(auditor), Some((facts, Some(info), methods))) = (auditor, failed)
        && response.status() == StatusCode::UNAUTHORIZED
        && !authenticated
    {
        let decision = auditor.policy.evaluate(None, &info);
        if decision.level > Level::None {
            let mut event = new_event(&handle, &decision, facts, &info, None);
            event.response_status = Some(ResponseStatus {
                message: methods,
                ..ResponseStatus::code(401)
            });
            auditor.emit(&mut event, Stage::ResponseStarted, &decision);
        }
    }
    response
}

/// Upstream's `getAuthMethods`: which credentials a refused request carried.
fn auth_methods(req: &Request) -> String {
    let mut methods = Vec::new();
    let auth = header(req.headers(), "authorization");
    let mut parts = auth.trim().split(' ');
    match parts.next().map(str::to_ascii_lowercase).as_deref() {
        Some("basic") => methods.push("basic"),
        Some("bearer") if parts.next().is_some() => methods.push("bearer"),
        _ => {}
    }
    let token_param = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .any(|p| p.starts_with("access_token=") && p.len() > "access_token=".len());
    if token_param {
        methods.push("access_token");
    }
    if req
        .extensions()
        .get::<PeerIdentity>()
        .is_some_and(|p| p.0.is_some())
    {
        methods.push("x509");
    }
    if methods.is_empty() {
        "Authentication failed, no credentials provided".into()
    } else {
        format!("Authentication failed, attempted: {}", methods.join(", "))
    }
}

/// Audit stage after authentication: evaluates the policy for the user and the request and
/// writes its events (see the module doc); the request's body is read for levels `Request`
/// and above, the response's for `RequestResponse` (and for errors, whose Status is the
/// event's `responseStatus`).
pub async fn record(auditor: Option<Arc<Auditor>>, req: Request, next: Next) -> Response {
    let (Some(auditor), Some(handle), Some(info)) = (
        auditor,
        req.extensions().get::<AuditHandle>().cloned(),
        req.extensions().get::<RequestInfo>().cloned(),
    ) else {
        return next.run(req).await;
    };
    handle.state().authenticated = true;
    let user = req.extensions().get::<UserInfo>().cloned();
    let decision = auditor.policy.evaluate(user.as_ref(), &info);
    if decision.level == Level::None {
        return next.run(req).await;
    }
    let facts = RequestFacts::of(&req);
    let mut event = new_event(&handle, &decision, facts, &info, user.as_ref());
    auditor.emit(&mut event, Stage::RequestReceived, &decision);

    // Creates and updates complete the object reference from their body (any level);
    // `Request` and above record the body (patches: the patch document).
    let writes_object = matches!(*req.method(), Method::POST | Method::PUT);
    let req =
        if writes_object || (decision.level >= Level::Request && *req.method() == Method::PATCH) {
            let (parts, body) = req.into_parts();
            let bytes = match axum::body::to_bytes(body, crate::handlers::MAX_BODY).await {
                Ok(b) => b,
                Err(_) => {
                    let response = ApiError::TooLarge(crate::handlers::MAX_BODY).into_response();
                    return complete(&auditor, event, &handle, &decision, response).await;
                }
            };
            let object = request_object(&parts.method, &parts.headers, &bytes);
            if let (true, Some(object), Some(reference)) =
                (writes_object, &object, event.object_ref.as_mut())
            {
                reference.complete_from(object);
            }
            if decision.level >= Level::Request {
                event.request_object =
                    object.map(|v| strip_managed_fields(v, decision.omit_managed_fields));
            }
            Request::from_parts(parts, Body::from(bytes))
        } else {
            req
        };

    let long_running =
        info.verb == "watch" || LONG_RUNNING_SUBRESOURCES.contains(&info.subresource.as_str());
    let response = match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            take_handle_state(&mut event, &handle);
            event.response_status = Some(ResponseStatus {
                status: "Failure".into(),
                message: format!("APIServer panic'd: {message}"),
                reason: "InternalError".into(),
                ..ResponseStatus::code(500)
            });
            auditor.emit(&mut event, Stage::Panic, &decision);
            tracing::error!(%message, "request handler panicked");
            return ApiError::Internal(format!("APIServer panic'd: {message}")).into_response();
        }
    };
    if long_running {
        take_handle_state(&mut event, &handle);
        event.response_status = Some(ResponseStatus::code(response.status().as_u16()));
        auditor.emit(&mut event, Stage::ResponseStarted, &decision);
        let guard = CompleteOnDrop {
            auditor: Arc::clone(&auditor),
            event,
            decision,
        };
        let (parts, body) = response.into_parts();
        let stream = body.into_data_stream().map(move |chunk| {
            let _ = &guard;
            chunk
        });
        return Response::from_parts(parts, Body::from_stream(stream));
    }
    complete(&auditor, event, &handle, &decision, response).await
}

/// Copies what later stages recorded (annotations, impersonated user) into `event`.
fn take_handle_state(event: &mut Event, handle: &AuditHandle) {
    let s = handle.state();
    event.annotations = s.annotations.clone();
    event.impersonated_user = s.impersonated.as_ref().map(EventUser::from);
}

/// Writes the `ResponseComplete` event of a finished response and gives the response back.
async fn complete(
    auditor: &Auditor,
    mut event: Event,
    handle: &AuditHandle,
    decision: &Decision,
    response: Response,
) -> Response {
    take_handle_state(&mut event, handle);
    let code = response.status().as_u16();
    let verb = event.verb.as_str();
    let read_body = decision.level >= Level::RequestResponse
        || code >= 400
        || verb == "delete"
        || verb == "deletecollection";
    if !read_body {
        event.response_status = Some(ResponseStatus::code(code));
        auditor.emit(&mut event, Stage::ResponseComplete, decision);
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(err = %e, "reading a response body for the audit log");
            bytes::Bytes::new()
        }
    };
    // The log holds JSON whatever the client was answered in (a protobuf answer is decoded).
    let value: Option<Value> = if bytes.starts_with(b"k8s\0") {
        crate::codec::decode_protobuf(&bytes)
            .ok()
            .map(Value::Object)
    } else {
        serde_json::from_slice(&bytes).ok()
    };
    let status = value
        .as_ref()
        .filter(|v| v.get("kind").and_then(Value::as_str) == Some("Status"));
    event.response_status = Some(match status {
        Some(s) => ResponseStatus::of_status(s, code),
        None => ResponseStatus::code(code),
    });
    if decision.level >= Level::RequestResponse {
        event.response_object =
            value.map(|v| strip_managed_fields(v, decision.omit_managed_fields));
    }
    auditor.emit(&mut event, Stage::ResponseComplete, decision);
    Response::from_parts(parts, Body::from(bytes))
}

/// Writes the `ResponseComplete` event of a long-running request when its body ends (the
/// stream finished or the client went away).
struct CompleteOnDrop {
    auditor: Arc<Auditor>,
    event: Event,
    decision: Decision,
}

impl Drop for CompleteOnDrop {
    fn drop(&mut self) {
        self.auditor
            .emit(&mut self.event, Stage::ResponseComplete, &self.decision);
    }
}

/// The request body as the event records it: the decoded object (JSON, YAML apply
/// configurations, Kubernetes protobuf), or the patch document.
fn request_object(method: &Method, headers: &HeaderMap, body: &[u8]) -> Option<Value> {
    if body.is_empty() {
        return None;
    }
    let ctype = header(headers, "content-type");
    let base = ctype.split(';').next().unwrap_or("").trim();
    if base == crate::codec::PROTOBUF {
        return crate::codec::decode_protobuf(body).ok().map(Value::Object);
    }
    if *method == Method::PATCH && base == "application/apply-patch+yaml" {
        return crate::apply::parse_config(body).ok().map(Value::Object);
    }
    serde_json::from_slice(body).ok()
}

/// Drops `metadata.managedFields` from an object or a list's items when the policy says so.
fn strip_managed_fields(mut value: Value, omit: bool) -> Value {
    if !omit {
        return value;
    }
    fn strip(v: &mut Value) {
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("managedFields");
        }
    }
    strip(&mut value);
    if let Some(items) = value.get_mut("items").and_then(Value::as_array_mut) {
        items.iter_mut().for_each(strip);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A router with the audit layers around `handler`, as the server orders them (a fixed
    /// user stands in for authentication).
    fn audited(
        dir: &std::path::Path,
        handler: axum::routing::MethodRouter,
    ) -> (axum::Router, PathBuf) {
        let policy = dir.join("policy.yaml");
        std::fs::write(
            &policy,
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: RequestResponse\n",
        )
        .unwrap();
        let log = dir.join("audit.log");
        let auditor = Auditor::from_config(&AuditConfig {
            policy_file: Some(policy),
            log_path: Some(log.to_str().unwrap().to_owned()),
            ..AuditConfig::default()
        })
        .unwrap();
        let (a, b) = (auditor.clone(), auditor);
        let app = axum::Router::new()
            .route("/api/v1/namespaces", handler)
            .layer(axum::middleware::from_fn(move |req, next| {
                record(a.clone(), req, next)
            }))
            .layer(axum::middleware::from_fn(
                |mut req: Request, next: Next| async move {
                    req.extensions_mut().insert(UserInfo {
                        name: "alice".into(),
                        ..UserInfo::default()
                    });
                    next.run(req).await
                },
            ))
            .layer(axum::middleware::from_fn(move |req, next| {
                init(b.clone(), req, next)
            }))
            .layer(axum::middleware::from_fn(crate::pipeline::request_info));
        (app, log)
    }

    async fn logged(log: &std::path::Path, lines: usize) -> Vec<Value> {
        for _ in 0..300 {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            if text.lines().count() >= lines {
                return text
                    .lines()
                    .map(|l| serde_json::from_str(l).unwrap())
                    .collect();
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        panic!("audit log has fewer than {lines} lines");
    }

    #[tokio::test]
    async fn a_panicking_handler_is_audited_at_the_panic_stage() {
        use tower::ServiceExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (app, log) = audited(
            dir.path(),
            axum::routing::get(|| async {
                if true {
                    panic!("boom");
                }
                "unreachable"
            }),
        );
        let request = Request::get("/api/v1/namespaces")
            .header(AUDIT_ID_HEADER, "given-id")
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(response.headers()[AUDIT_ID_HEADER], "given-id");
        let events = logged(&log, 2).await;
        assert_eq!(events[0]["stage"], "RequestReceived");
        assert_eq!(events[1]["stage"], "Panic");
        assert_eq!(events[1]["auditID"], "given-id");
        assert_eq!(events[1]["responseStatus"]["code"], 500);
        assert_eq!(
            events[1]["responseStatus"]["message"],
            "APIServer panic'd: boom"
        );
    }

    #[tokio::test]
    async fn request_and_response_bodies_are_recorded() {
        use tower::ServiceExt as _;
        let dir = tempfile::tempdir().unwrap();
        let (app, log) = audited(
            dir.path(),
            axum::routing::post(|body: String| async move {
                (
                    StatusCode::CREATED,
                    [("content-type", "application/json")],
                    body,
                )
            }),
        );
        let request = Request::post("/api/v1/namespaces")
            .header("content-type", "application/json")
            .body(Body::from(
                r#"{"kind":"Namespace","metadata":{"name":"n1"}}"#,
            ))
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::CREATED);
        // The handler still got the body the audit layer read.
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        assert_eq!(
            &body[..],
            br#"{"kind":"Namespace","metadata":{"name":"n1"}}"#
        );
        let events = logged(&log, 2).await;
        let done = &events[1];
        assert_eq!(done["stage"], "ResponseComplete");
        assert_eq!(done["objectRef"]["name"], "n1");
        assert_eq!(done["requestObject"]["metadata"]["name"], "n1");
        assert_eq!(done["responseObject"]["kind"], "Namespace");
        assert_eq!(done["responseStatus"], json!({"metadata": {}, "code": 201}));
    }

    #[test]
    fn micro_time_has_six_fraction_digits() {
        let t: jiff::Timestamp = "2026-01-02T03:04:05.123Z".parse().unwrap();
        assert_eq!(micro_time(t), "2026-01-02T03:04:05.123000Z");
    }

    #[test]
    fn source_ips_list_forwarded_then_the_peer_once() {
        let mut headers = HeaderMap::new();
        headers.insert(
            "x-forwarded-for",
            HeaderValue::from_static("10.0.0.1, bogus, 10.0.0.2"),
        );
        let peer = RemoteAddr("127.0.0.1:5555".parse().unwrap());
        assert_eq!(
            source_ips(&headers, Some(&peer)),
            ["10.0.0.1", "10.0.0.2", "127.0.0.1"]
        );
        assert_eq!(source_ips(&HeaderMap::new(), Some(&peer)), ["127.0.0.1"]);
    }

    #[test]
    fn events_serialize_in_upstreams_shape() {
        let handle = AuditHandle::new("id-1".into());
        handle.record_authorization(true, "RBAC: allowed");
        let info = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/ns/pods/p", None);
        let user = UserInfo {
            name: "alice".into(),
            groups: vec!["system:authenticated".into()],
            ..UserInfo::default()
        };
        let decision = Decision {
            level: Level::Metadata,
            ..Decision::default()
        };
        let facts = RequestFacts {
            request_uri: "/api/v1/namespaces/ns/pods/p".into(),
            user_agent: "kubectl/v1.33.0".into(),
            source_ips: vec!["127.0.0.1".into()],
        };
        let mut event = new_event(&handle, &decision, facts, &info, Some(&user));
        take_handle_state(&mut event, &handle);
        event.stage = "ResponseComplete";
        let v = serde_json::to_value(&event).unwrap();
        assert_eq!(v["kind"], "Event");
        assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
        assert_eq!(v["auditID"], "id-1");
        assert_eq!(v["verb"], "get");
        assert_eq!(
            v["user"],
            json!({"username": "alice", "groups": ["system:authenticated"]})
        );
        assert_eq!(
            v["objectRef"],
            json!({"resource": "pods", "namespace": "ns", "name": "p", "apiVersion": "v1"})
        );
        assert_eq!(v["annotations"]["authorization.k8s.io/decision"], "allow");
        assert!(v.get("impersonatedUser").is_none() && v.get("requestObject").is_none());
        event.response_status = Some(ResponseStatus::of_status(
            &json!({"kind": "Status", "status": "Failure", "message": "m", "reason": "NotFound", "code": 404}),
            404,
        ));
        let text = serde_json::to_string(&event).unwrap();
        assert!(
            text.contains(r#""responseStatus":{"metadata":{},"status":"Failure","message":"m","reason":"NotFound","code":404}"#),
            "{text}"
        );
        assert!(text.starts_with(r#"{"kind":"Event","apiVersion":"audit.k8s.io/v1","level":"Metadata","auditID":"id-1","stage":"ResponseComplete""#), "{text}");
    }
}
