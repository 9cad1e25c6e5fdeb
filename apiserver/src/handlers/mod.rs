//! Resource handlers: one generic code path for every resource in the registry.
//!
//! `dispatch` reads the [`RequestInfo`] parsed by the pipeline, finds the resource, and runs
//! the verb: decode → prepare (server-owned metadata) → validate → storage → encode.

mod apply;
mod cached_list;
mod component_status;
mod csr;
mod delete;
mod dry_run;
mod ephemeral_containers;
mod eviction;
mod freshness;
pub mod kubelet_proxy;
mod node_proxy;
mod object;
mod pod_resize;
mod rbac_writes;
mod review;
mod service;
pub(crate) mod service_repair;
mod strategy;
mod subresources;
mod watch;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Map, Value, json};

use crate::codec::negotiate::{Convert, MetaVersion};
use crate::codec::respond::Negotiated;
use crate::error::{ApiError, GroupResource, Result};
use crate::registry::catalog::ResourceInfo;
use crate::registry::{self, Registry};
use crate::request_info::RequestInfo;
use crate::storage::{self, Storage};

/// Largest accepted request body (upstream's 3 MiB limit).
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// Attempts of an unconditional update (patch without resourceVersion) under contention.
const PATCH_RETRIES: usize = 5;
/// The message upstream gives with a 410 for an expired continue token.
const EXPIRED_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";
const MODIFIED: &str =
    "the object has been modified; please apply your changes to the latest version and try again";

/// What the handlers share.
pub struct Ctx {
    /// The served resources.
    pub registry: Registry,
    /// The store.
    pub storage: Storage,
    /// `host:port` clients reach this server at (for `/api`'s serverAddressByClientCIDRs).
    pub address: String,
    /// Where Service cluster IPs come from.
    pub service_range: service::ServiceRange,
    /// Decoded recent events per resource, shared by all watchers.
    pub watch_cache: crate::watch_cache::WatchCache,
    /// The enabled admission plugins.
    pub admission: crate::admission::Chain,
}

pub use service::ServiceRange;

/// A random suffix for generated names (upstream's alphabet, five characters).
pub(crate) fn generated_name_suffix() -> String {
    object::name_suffix()
}

fn is_service(r: &ResourceInfo) -> bool {
    r.group.is_empty() && r.plural == "services"
}

type Query = HashMap<String, String>;

fn parse_query(q: Option<&str>) -> Query {
    let mut out = HashMap::new();
    for pair in q.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        out.insert(decode_component(k), decode_component(v));
    }
    out
}

/// Percent-decodes one query component (`+` is a space).
pub(crate) fn decode_component(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether the request is a dry run (`dryRun=All`, from the query or a DELETE's body: see
/// [`dry_run::gather`]).
fn dry_run(q: &Query) -> bool {
    q.get("dryRun").is_some_and(|v| v == "All")
}

/// The `resourceVersion` query parameter (`""` when absent).
fn query_rv(q: &Query) -> &str {
    q.get("resourceVersion").map_or("", String::as_str)
}

/// A JSON response as Go's `json.Encoder` writes it: fields in struct order
/// (`codec::go_json`), a newline at the end.
fn json_response(code: StatusCode, value: &Value) -> Response {
    let mut body = crate::codec::go_json::to_vec(value);
    body.push(b'\n');
    (
        code,
        [(http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
}

/// Decodes an object through its kind's type and applies `fieldValidation`
/// (Strict: unknown fields are a 400; Warn — the default — and Ignore: they are dropped,
/// Warn also returns a warning per field).
fn field_validation(
    r: &ResourceInfo,
    obj: Map<String, Value>,
    q: &Query,
) -> Result<(Map<String, Value>, Vec<String>)> {
    field_validation_against(r, obj, None, q)
}

/// [`field_validation`] of a write that changes `old` (a patch or an apply): only the
/// top-level fields it changed are decoded (`typed::decode_changed`). Served conversions
/// (events.k8s.io) decode whole.
fn field_validation_against(
    r: &ResourceInfo,
    obj: Map<String, Value>,
    old: Option<&Map<String, Value>>,
    q: &Query,
) -> Result<(Map<String, Value>, Vec<String>)> {
    let mode = q.get("fieldValidation").map_or("Warn", String::as_str);
    let cannot = |e: &str| {
        ApiError::BadRequest(format!(
            "{} in version \"{}\" cannot be handled as a {}: {e}",
            r.kind, r.version, r.kind
        ))
    };
    let typed = &crate::registry::typed::decode_changed;
    let decoded = if crate::crd::serve::is_custom(r) {
        // A custom resource is pruned by its CRD's structural schema instead.
        crate::crd::serve::prune(r, obj)
    } else {
        match old.filter(|_| !registry::convert::is_converted(r)) {
            Some(old) => typed(r.group, r.version, r.kind, obj, old),
            None => crate::registry::typed::decode(r.group, r.version, r.kind, obj),
        }
        .map_err(|e| cannot(&e))?
    };
    let unknown: Vec<String> = decoded
        .unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    match mode {
        "Strict" if !unknown.is_empty() => Err(cannot(&format!(
            "strict decoding error: {}",
            unknown.join(", ")
        ))),
        "Strict" | "Ignore" => Ok((decoded.object, Vec::new())),
        "Warn" => Ok((decoded.object, unknown)),
        other => Err(ApiError::BadRequest(format!(
            "fieldValidation must be one of Ignore, Warn, Strict; got {other:?}"
        ))),
    }
}

/// Adds `Warning: 299 - "<text>"` headers, which kubectl prints.
fn with_warnings(mut resp: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let escaped = w.replace('\\', "\\\\").replace('"', "\\\"");
        if let Ok(v) = http::HeaderValue::from_str(&format!("299 - \"{escaped}\"")) {
            resp.headers_mut().append(http::header::WARNING, v);
        }
    }
    resp
}

fn object_response(code: StatusCode, obj: Map<String, Value>) -> Response {
    json_response(code, &Value::Object(obj))
}

/// Entry point for `/api/...` and `/apis/...` resource requests.
pub async fn dispatch(State(ctx): State<Arc<Ctx>>, req: Request) -> Response {
    let admission = crate::admission::Request {
        user: req
            .extensions()
            .get::<crate::pipeline::UserInfo>()
            .cloned()
            .unwrap_or_default(),
        info: req
            .extensions()
            .get::<RequestInfo>()
            .cloned()
            .unwrap_or_else(|| {
                RequestInfo::parse(req.method(), req.uri().path(), req.uri().query())
            }),
        warnings: crate::admission::Warnings::default(),
        audit: req.extensions().get::<crate::audit::AuditHandle>().cloned(),
        authorizer: req
            .extensions()
            .get::<crate::pipeline::AuthorizerHandle>()
            .cloned(),
    };
    let warnings = admission.warnings.clone();
    let (neg, r, streaming) = negotiate(&ctx, &admission.info, &req);
    let resp = match neg {
        Ok(neg) => {
            let render = Render {
                table: matches!(neg.output.convert, Some(Convert::Table(_))),
                meta: match neg.output.convert {
                    Some(Convert::PartialObjectMetadata(v)) => Some(v),
                    _ => None,
                },
                include: if matches!(neg.output.convert, Some(Convert::Table(_))) {
                    crate::tables::IncludeObject::from_query(
                        parse_query(req.uri().query())
                            .get("includeObject")
                            .map(String::as_str),
                    )
                } else {
                    crate::tables::IncludeObject::default()
                },
            };
            let served = Box::pin(crate::admission::scope(admission, serve(&ctx, req, render)));
            let resp = match served.await {
                Ok(resp) => resp,
                Err(err) => err.into_response(),
            };
            if streaming {
                crate::codec::protobuf_encode::streaming(resp, &neg, r).await
            } else {
                crate::codec::respond::finish(resp, &neg, r).await
            }
        }
        Err((neg, err)) => crate::codec::respond::finish(err.into_response(), &neg, r).await,
    };
    with_warnings(resp, &warnings.take())
}

/// Negotiates the response of a request (see `codec::negotiate`): the outputs, or the 406
/// to answer; the resource; whether the response streams (watches, logs, exec, proxies),
/// which is passed on as the handler wrote it.
#[allow(clippy::type_complexity)]
fn negotiate(
    ctx: &Ctx,
    info: &RequestInfo,
    req: &Request,
) -> (
    std::result::Result<Negotiated, (Negotiated, ApiError)>,
    Option<&'static ResourceInfo>,
    bool,
) {
    let header = |name: http::header::HeaderName| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let (accept, user_agent) = (
        header(http::header::ACCEPT),
        header(http::header::USER_AGENT),
    );
    let query = req.uri().query();
    let watch = info.verb == "watch";
    let streaming = watch
        || matches!(
            info.subresource.as_str(),
            "log" | "exec" | "attach" | "portforward" | "proxy"
        );
    let r = if info.is_resource {
        ctx.registry
            .find(&info.group, &info.version, &info.resource)
            .or_else(|| review::find(info))
    } else {
        None
    };
    let Some(r) = r else {
        // Discovery and unknown paths: no conversions (upstream's default restrictions).
        let pretty = crate::codec::negotiate::pretty_by_request(query, user_agent);
        let out = crate::codec::negotiate::negotiate(
            accept,
            pretty,
            crate::codec::negotiate::Restrictions::Default,
        );
        let neg = Negotiated {
            output: out.unwrap_or(Negotiated::plain().output),
            error: out,
        };
        return (Ok(neg), None, streaming);
    };
    let custom = crate::crd::serve::is_custom(r);
    let neg = Negotiated::resource(accept, query, user_agent, custom, watch).map_err(|neg| {
        let err = crate::codec::negotiate::negotiate_resource(accept, false, custom, watch)
            .err()
            .unwrap_or(ApiError::Internal("negotiation".into()));
        (neg, err)
    });
    (neg, Some(r), streaming)
}

async fn serve(ctx: &Arc<Ctx>, req: Request, render: Render) -> Result<Response> {
    let info = req
        .extensions()
        .get::<RequestInfo>()
        .cloned()
        .unwrap_or_else(|| RequestInfo::parse(req.method(), req.uri().path(), req.uri().query()));
    if !info.is_resource {
        return crate::discovery::serve_group_version(ctx, &info);
    }
    let r = ctx
        .registry
        .find(&info.group, &info.version, &info.resource)
        .or_else(|| review::find(&info))
        .ok_or(ApiError::NoRoute)?;
    let mut query = parse_query(req.uri().query());
    let (parts, body) = req.into_parts();
    let body = match parts.method {
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE => read_body(body).await?,
        _ => Vec::new(),
    };
    dry_run::gather(&info.verb, &parts.headers, &body, &mut query)?;
    // A deprecated custom version warns on every request (upstream's deprecation filter).
    if let Some(warning) = crate::crd::serve::deprecation_warning(r) {
        crate::admission::warn(warning);
    }
    let namespace = if r.namespaced {
        info.namespace.as_str()
    } else {
        ""
    };
    if r.namespaced && namespace.is_empty() && !info.name.is_empty() {
        return Err(ApiError::NoRoute);
    }
    rbac_writes::guard(&info, &parts, &body)?;
    rbac_writes::guard_patch(ctx, r, namespace, &info, &parts, &body, &query).await?;
    match (info.subresource.as_str(), info.verb.as_str()) {
        ("", _) if component_status::is(r) => {
            component_status::serve(ctx, r, &info, &query, &render).await
        }
        ("", "create") if r.kind_class == registry::catalog::KindClass::Review => {
            review::create(r, &info, &parts, &body).await
        }
        ("", "get") => {
            freshness::wait_for(ctx, query_rv(&query)).await?;
            get(ctx, r, namespace, &info.name, &render).await
        }
        ("", "list") => {
            freshness::wait_for(ctx, query_rv(&query)).await?;
            list(ctx, r, namespace, &query, &render).await
        }
        ("", "watch") => watch::watch(ctx, r, namespace, &info.name, &query, render),
        ("", "create") => create(ctx, r, namespace, &parts.headers, &body, &query).await,
        ("", "update") => {
            update(
                ctx,
                r,
                namespace,
                &info.name,
                &parts.headers,
                &body,
                &query,
                Scope::Main,
            )
            .await
        }
        ("", "patch") => {
            patch(
                ctx,
                r,
                namespace,
                &info.name,
                &parts.headers,
                &body,
                &query,
                Scope::Main,
            )
            .await
        }
        ("", "delete") => {
            delete::delete(ctx, r, namespace, &info.name, &parts.headers, &body, &query).await
        }
        ("", "deletecollection") => {
            delete::delete_collection(ctx, r, namespace, &parts.headers, &body, &query).await
        }
        ("approval", "get") if csr::is(r) => get(ctx, r, namespace, &info.name, &render).await,
        ("approval", "update" | "patch") if csr::is(r) => {
            csr::write(ctx, r, &info, &parts, &body, &query, Scope::Approval).await
        }
        ("status", "update" | "patch") if csr::is(r) => {
            csr::write(ctx, r, &info, &parts, &body, &query, Scope::Status).await
        }
        (sub @ ("ephemeralcontainers" | "resize"), verb) if ephemeral_containers::is(r) => {
            let scope = if sub == "resize" {
                Scope::Resize
            } else {
                Scope::EphemeralContainers
            };
            match verb {
                "get" => get(ctx, r, namespace, &info.name, &render).await,
                "update" => {
                    let h = &parts.headers;
                    update(ctx, r, namespace, &info.name, h, &body, &query, scope).await
                }
                "patch" => {
                    let h = &parts.headers;
                    patch(ctx, r, namespace, &info.name, h, &body, &query, scope).await
                }
                _ => Err(ApiError::MethodNotAllowed),
            }
        }
        ("status", "get") if has_status(r) => get(ctx, r, namespace, &info.name, &render).await,
        ("status", "update") if has_status(r) => {
            update(
                ctx,
                r,
                namespace,
                &info.name,
                &parts.headers,
                &body,
                &query,
                Scope::Status,
            )
            .await
        }
        ("status", "patch") if has_status(r) => {
            patch(
                ctx,
                r,
                namespace,
                &info.name,
                &parts.headers,
                &body,
                &query,
                Scope::Status,
            )
            .await
        }
        ("finalize", "update") if r.subresource("finalize").is_some() => {
            update(
                ctx,
                r,
                namespace,
                &info.name,
                &parts.headers,
                &body,
                &query,
                Scope::Finalize,
            )
            .await
        }
        ("scale", verb) if r.subresource("scale").is_some() => {
            subresources::scale(
                ctx,
                r,
                namespace,
                &info.name,
                verb,
                &parts.headers,
                &body,
                &query,
            )
            .await
        }
        ("token", "create") if r.kind == "ServiceAccount" => {
            let authn = parts.extensions.get::<Arc<crate::authn::Authenticator>>();
            let authn = authn.ok_or_else(|| ApiError::Internal("no authenticator".into()))?;
            let mut req = object::decode(&parts.headers, &body)?;
            ctx.admission.admit(
                crate::admission::Operation::Create,
                r.group,
                r.plural,
                namespace,
                &info.name,
                dry_run(&query),
                Some(&mut req),
                None,
            )?;
            ctx.admission
                .admit_subresource_create(r, namespace, &info.name, dry_run(&query), &mut req)
                .await?;
            let req = Value::Object(req);
            crate::authn::token_request(&ctx.storage, authn, namespace, &info.name, &req).await
        }
        ("log", "get") | ("exec" | "attach" | "portforward", "get" | "create") | ("proxy", _)
            if r.kind == "Pod" && r.subresource(&info.subresource).is_some() =>
        {
            if info.subresource != "log" {
                let (kind, options) = connect_options(&info.subresource, parts.uri.query());
                ctx.admission
                    .connect_webhooks(r, namespace, &info.name, kind, options)
                    .await?;
            }
            node_proxy::pod(
                ctx,
                r,
                namespace,
                &info.name,
                &info.subresource,
                &query,
                &parts,
            )
            .await
        }
        ("proxy", _) if r.kind == "Node" => {
            let (_, options) = connect_options("proxy", parts.uri.query());
            ctx.admission
                .connect_webhooks(r, "", &info.name, "NodeProxyOptions", options)
                .await?;
            node_proxy::node(ctx, r, &info.name, &parts).await
        }
        ("eviction", "create") if r.subresource("eviction").is_some() => {
            eviction::evict(ctx, r, namespace, &info.name, &parts.headers, &body, &query).await
        }
        ("binding", "create") if r.subresource("binding").is_some() => {
            subresources::bind(ctx, r, namespace, &info.name, &parts.headers, &body, &query).await
        }
        ("", _) => Err(ApiError::MethodNotAllowed),
        _ => Err(ApiError::NoRoute),
    }
}

/// The options object of a CONNECT (`PodExecOptions`, …) as admission webhooks see it,
/// from the raw query: `command` and `ports` are lists of every value given (upstream's
/// `[]string` / `[]int32`, so `sh -c 'echo hi'` stays three words), the others take their
/// last value.
fn connect_options(
    subresource: &str,
    raw_query: Option<&str>,
) -> (&'static str, Map<String, Value>) {
    let kind = match subresource {
        "exec" => "PodExecOptions",
        "attach" => "PodAttachOptions",
        "portforward" => "PodPortForwardOptions",
        _ => "PodProxyOptions",
    };
    let mut options = Map::new();
    for pair in raw_query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let (k, v) = (decode_component(k), decode_component(v));
        let value = match k.as_str() {
            "stdin" | "stdout" | "stderr" | "tty" => json!(v == "true" || v == "1"),
            "command" | "ports" => {
                let item = match k.as_str() {
                    "ports" => v.parse::<i64>().map_or_else(|_| json!(v), |p| json!(p)),
                    _ => json!(v),
                };
                let list = options.entry(k).or_insert_with(|| json!([]));
                if let Some(items) = list.as_array_mut() {
                    items.push(item);
                }
                continue;
            }
            "container" | "path" => json!(v),
            _ => continue,
        };
        options.insert(k, value);
    }
    (kind, options)
}

fn has_status(r: &ResourceInfo) -> bool {
    r.subresources.iter().any(|s| s.name == "status")
}

async fn read_body(body: Body) -> Result<Vec<u8>> {
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| ApiError::TooLarge(MAX_BODY))?;
    Ok(bytes.to_vec())
}

async fn load(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
) -> Result<(Map<String, Value>, i64)> {
    let key = registry::key(r, namespace, name);
    match ctx.storage.get(&key).await.map_err(storage_error)? {
        Some(stored) => Ok((
            crate::crd::conversion::from_storage_one(
                ctx,
                r,
                object::from_stored(&stored.value, stored.revision)?,
            )
            .await?,
            stored.revision,
        )),
        None => Err(ApiError::NotFound {
            resource: object::group_resource(r),
            name: name.into(),
        }),
    }
}

fn storage_error(e: storage::Error) -> ApiError {
    match e {
        storage::Error::Store(s) => s.into(),
        other => ApiError::Internal(other.to_string()),
    }
}

/// How reads are rendered: plain objects, or a server-side Table when the client asks.
#[derive(Clone, Copy)]
pub(crate) struct Render {
    pub(crate) table: bool,
    /// Watch events carry `PartialObjectMetadata` objects of this version (other verbs are
    /// converted by `codec::respond`).
    pub(crate) meta: Option<MetaVersion>,
    pub(crate) include: crate::tables::IncludeObject,
}

fn table_response(value: &Value) -> Response {
    let mut resp = json_response(StatusCode::OK, value);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(crate::tables::TABLE_CONTENT_TYPE),
    );
    resp
}

async fn get(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    render: &Render,
) -> Result<Response> {
    if !render.table && !registry::convert::is_converted(r) && !registry::convert::needs_webhook(r)
    {
        // The stored bytes (already in Go's field order) with the resourceVersion spliced
        // in: no decoding and encoding again.
        let key = registry::key(r, namespace, name);
        let stored = ctx.storage.get(&key).await.map_err(storage_error)?;
        let Some(stored) = stored else {
            return Err(ApiError::NotFound {
                resource: object::group_resource(r),
                name: name.into(),
            });
        };
        if let Some(mut json) = crate::watch_cache::stamp_revision(stored.value, stored.revision) {
            json.push(b'\n');
            return Ok((
                StatusCode::OK,
                [(http::header::CONTENT_TYPE, "application/json")],
                json,
            )
                .into_response());
        }
    }
    let (obj, rev) = load(ctx, r, namespace, name).await?;
    if render.table {
        let meta = json!({ "resourceVersion": rev.to_string() });
        return Ok(table_response(&crate::tables::to_table(
            r,
            &[obj],
            meta,
            render.include,
        )));
    }
    Ok(object_response(StatusCode::OK, obj))
}

/// A continue token: the revision of the first page and the last key returned.
fn encode_continue(revision: i64, last_key: &str) -> String {
    let token = json!({ "rv": revision, "start": last_key });
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(i64, String)> {
    let bad = || ApiError::BadRequest(format!("invalid continue token: {token}"));
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v.get("rv").and_then(Value::as_i64).ok_or_else(bad)?;
    let start = v.get("start").and_then(Value::as_str).ok_or_else(bad)?;
    Ok((rv, start.to_owned()))
}

/// The field labels a resource's field selectors accept, as upstream's field label
/// conversion functions list them (`metadata.name` and `metadata.namespace` for kinds
/// without one). Values are upstream's field sets (`selector::field_value`).
fn selectable_fields(r: &ResourceInfo) -> Vec<&'static str> {
    let mut f = vec!["metadata.name", "metadata.namespace"];
    match (r.group, r.plural) {
        ("", "pods") => f.extend([
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ]),
        ("", "events") => f.extend([
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ]),
        ("events.k8s.io", "events") => f.extend([
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ]),
        ("", "secrets") => f.push("type"),
        ("", "services") => f.extend(["spec.clusterIP", "spec.type"]),
        // Nodes and namespaces: no metadata.namespace.
        ("", "nodes") => f = vec!["metadata.name", "spec.unschedulable"],
        ("", "namespaces") => f = vec!["metadata.name", "status.phase"],
        ("", "replicationcontrollers") => f.push("status.replicas"),
        ("apps", "replicasets") => f.push("status.replicas"),
        ("batch", "jobs") => f.push("status.successful"),
        ("certificates.k8s.io", "certificatesigningrequests") => f.push("spec.signerName"),
        // A custom resource's `selectableFields` (GA in v1.32), e.g. `.spec.color`.
        _ => {
            if let Some(c) = registry::custom::lookup(r) {
                f.extend(
                    c.selectable_fields
                        .iter()
                        .map(|p| registry::custom::intern(p.trim_start_matches('.'))),
                );
            }
        }
    }
    f
}

/// Field labels old clients send that upstream's conversion renames (`spec.host` of v1
/// pods is `spec.nodeName`).
fn legacy_field_label(r: &ResourceInfo, label: &str) -> Option<&'static str> {
    match (r.group, r.plural, label) {
        ("", "pods", "spec.host") => Some("spec.nodeName"),
        _ => None,
    }
}

/// Selectable fields of the stored form of `r`'s objects (what its watch cache records),
/// plus the JSON paths their values are read from where those differ from the label
/// (`status.successful` is a Job's `status.succeeded`, `status.podIP` the first of
/// `status.podIPs`, an Event's `source` its `source.component`).
fn stored_fields(r: &ResourceInfo) -> Vec<&'static str> {
    let stored = registry::convert::storage_resource(r).unwrap_or(r);
    let mut f = selectable_fields(stored);
    if (stored.group, stored.plural) == ("batch", "jobs") {
        f.push("status.succeeded");
    }
    f
}

/// Selectors of a list or watch request; field labels are those of the stored form (see
/// `registry::convert`), so filters match stored objects, before any conversion.
pub(crate) struct Filter {
    labels: crate::selector::LabelSelector,
    fields: crate::selector::FieldSelector,
}

impl Filter {
    pub(crate) fn from_query(r: &ResourceInfo, q: &Query) -> Result<Filter> {
        let labels = crate::selector::LabelSelector::parse(
            q.get("labelSelector").map_or("", String::as_str),
        )?;
        let mut allowed = selectable_fields(r);
        allowed.extend(
            ["spec.host"]
                .iter()
                .filter(|l| legacy_field_label(r, l).is_some()),
        );
        let fields = crate::selector::FieldSelector::parse(
            q.get("fieldSelector").map_or("", String::as_str),
            &allowed,
        )?
        .map_fields(|f| legacy_field_label(r, f).unwrap_or(f))
        .map_fields(|f| registry::convert::field_label_to_storage(r, f));
        Ok(Filter { labels, fields })
    }

    pub(crate) fn matches(&self, obj: &Map<String, Value>) -> bool {
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .unwrap_or(&Value::Null);
        self.labels.matches(labels) && self.fields.matches(obj)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.labels == crate::selector::LabelSelector::default()
            && self.fields == crate::selector::FieldSelector::default()
    }
}

async fn list(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    q: &Query,
    render: &Render,
) -> Result<Response> {
    let filter = Filter::from_query(r, q)?;
    if let Some(resp) = cached_list::list(ctx, r, namespace, q, &filter, render).await? {
        return Ok(resp);
    }
    let limit: i64 = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    let rv = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let rv_match = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    let prefix = registry::prefix(r, namespace);
    let (mut revision, mut start) = (0i64, None::<String>);
    if let Some(token) = q.get("continue").filter(|t| !t.is_empty()) {
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::BadRequest(
                "specifying resource version is not allowed when using continue".into(),
            ));
        }
        let (rev, key) = decode_continue(token)?;
        revision = rev;
        start = Some(format!("{key}\u{0}"));
    } else if !rv.is_empty() && rv != "0" {
        let wanted = object::parse_rv(rv)?;
        if rv_match == "Exact" || (rv_match.is_empty() && limit > 0) {
            revision = wanted;
        }
    } else if !rv_match.is_empty() && rv.is_empty() {
        return Err(ApiError::BadRequest(
            "resourceVersionMatch is forbidden unless resourceVersion is provided".into(),
        ));
    }
    let webhook = registry::convert::needs_webhook(r);
    let mut items = Vec::new();
    let mut last_key = None;
    let mut more = false;
    let mut remaining = 0;
    loop {
        let page = match ctx
            .storage
            .list(&prefix, start.as_deref(), revision, limit.max(0))
            .await
        {
            Ok(p) => p,
            Err(storage::Error::Store(store::StoreError::Compacted))
                if q.contains_key("continue") =>
            {
                return Err(ApiError::Gone(EXPIRED_CONTINUE.into()));
            }
            Err(storage::Error::Store(store::StoreError::Compacted)) => {
                return Err(ApiError::Gone(format!("too old resource version: {rv}")));
            }
            Err(storage::Error::Store(store::StoreError::FutureRevision)) => {
                return Err(ApiError::Timeout(format!(
                    "Too large resource version: {rv}, current: {}",
                    ctx.storage.current_revision()
                )));
            }
            Err(e) => return Err(storage_error(e)),
        };
        // Every page of one list reads the same snapshot.
        revision = page.revision;
        let fetched = page.items.len();
        let mut consumed = 0;
        for (key, stored) in page.items {
            consumed += 1;
            let obj = object::from_stored(&stored.value, stored.revision)?;
            last_key = Some(key);
            if filter.matches(&obj) {
                // A conversion webhook converts the whole list in one review, below.
                items.push(Value::Object(if webhook {
                    obj
                } else {
                    registry::convert::from_storage(r, obj)
                }));
                if limit > 0 && items.len() as i64 >= limit {
                    break;
                }
            }
        }
        let left = (fetched - consumed) as i64 + page.remaining.max(0);
        if limit > 0 && items.len() as i64 >= limit {
            more = left > 0;
            remaining = left;
            break;
        }
        if left <= 0 || fetched == 0 {
            break;
        }
        start = last_key.as_ref().map(|k| format!("{k}\u{0}"));
    }
    if webhook {
        let objects = items
            .into_iter()
            .filter_map(|v| match v {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .collect();
        items = crate::crd::conversion::from_storage(ctx, r, objects)
            .await?
            .into_iter()
            .map(Value::Object)
            .collect();
    }
    let mut metadata = json!({ "resourceVersion": revision.to_string() });
    if let Some(k) = last_key.as_ref().filter(|_| more) {
        metadata["continue"] = json!(encode_continue(revision, k));
        if filter.is_empty() && remaining > 0 {
            metadata["remainingItemCount"] = json!(remaining);
        }
    }
    if render.table {
        let objects: Vec<Map<String, Value>> = items
            .into_iter()
            .filter_map(|v| match v {
                Value::Object(m) => Some(m),
                _ => None,
            })
            .collect();
        return Ok(table_response(&crate::tables::to_table(
            r,
            &objects,
            metadata,
            render.include,
        )));
    }
    if !crate::crd::serve::is_custom(r) {
        // Built-in types' list items carry no kind/apiVersion (the list does), as upstream.
        for item in &mut items {
            if let Value::Object(m) = item {
                m.remove("kind");
                m.remove("apiVersion");
            }
        }
    }
    let list = json!({
        "kind": format!("{}List", r.kind),
        "apiVersion": registry::api_version(r),
        "metadata": metadata,
        "items": items,
    });
    Ok(json_response(StatusCode::OK, &list))
}

/// Checks that the namespace of a new object exists and is not terminating.
async fn check_namespace(ctx: &Ctx, namespace: &str) -> Result<()> {
    let Some(ns) = ctx.registry.find("", "v1", "namespaces") else {
        return Ok(());
    };
    // Like upstream's NamespaceLifecycle admission, this reads local (cached) state.
    let key = registry::key(ns, "", namespace);
    let Some(stored) = ctx.storage.get_local(&key).map_err(storage_error)? else {
        return Err(ApiError::NotFound {
            resource: object::group_resource(ns),
            name: namespace.into(),
        });
    };
    let obj = object::from_stored(&stored.value, stored.revision)?;
    if obj
        .get("status")
        .and_then(|s| s.get("phase"))
        .and_then(Value::as_str)
        == Some("Terminating")
    {
        return Err(ApiError::Forbidden {
            resource: GroupResource::default(),
            name: String::new(),
            message: format!(
                "unable to create new content in namespace {namespace} because it is being terminated"
            ),
        });
    }
    Ok(())
}

async fn create(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
) -> Result<Response> {
    crate::crd::serve::check_create(r)?;
    let mut obj = object::decode(headers, body)?;
    object::check_type(&mut obj, r)?;
    let (mut obj, warnings) = field_validation(r, obj, q)?;
    crate::defaults::apply(r, &mut obj);
    crate::quantity::canonicalize(r, &mut obj)?;
    let body_ns = object::meta_str(&obj, "namespace").to_owned();
    if r.namespaced {
        if !body_ns.is_empty() && body_ns != namespace {
            return Err(ApiError::BadRequest(
                "the namespace of the provided object does not match the namespace sent on the request".into(),
            ));
        }
        if let Some(m) = object::meta(&mut obj) {
            m.insert("namespace".into(), json!(namespace));
        }
    } else if let Some(m) = object::meta(&mut obj) {
        m.remove("namespace");
    }
    // With a generated name, a collision in storage is retried with a new name (upstream's
    // RetryGenerateName, GA in v1.32).
    let mut generate_name = None;
    if object::meta_str(&obj, "name").is_empty() {
        let generate = object::meta_str(&obj, "generateName").to_owned();
        if !generate.is_empty() {
            let name = format!("{generate}{}", object::name_suffix());
            if let Some(m) = object::meta(&mut obj) {
                m.insert("name".into(), json!(name));
            }
            generate_name = Some(generate);
        }
    }
    // Upstream's create handler records the request's fields (as decoded and defaulted)
    // before admission and the strategy's PrepareForCreate: what those set (a Job's
    // generated selector, a Namespace's `spec.finalizers`, admission's finalizers) is owned
    // by no manager.
    crate::apply::record_update(r, &mut obj, &Map::new(), q, headers);
    object::prepare_for_create(r, &mut obj);
    strategy::prepare_for_create(r, &mut obj);
    // Upstream also defaults when decoding from storage: status cleared above reads back
    // with its defaults (e.g. PVC status.phase).
    crate::defaults::apply(r, &mut obj);
    if r.namespaced {
        check_namespace(ctx, namespace).await?;
    }
    ctx.admission
        .settle(
            crate::admission::Operation::Create,
            r.group,
            r.plural,
            namespace,
            &obj,
        )
        .await;
    ctx.admission.admit(
        crate::admission::Operation::Create,
        r.group,
        r.plural,
        namespace,
        "",
        dry_run(q),
        Some(&mut obj),
        None,
    )?;
    ctx.admission
        .admit_webhooks(
            crate::admission::Operation::Create,
            r,
            namespace,
            "",
            dry_run(q),
            Some(&mut obj),
            None,
        )
        .await?;
    // Upstream's pod strategy sets the QoS class on the admitted pod (`qos.ComputePodQOS`).
    if r.group.is_empty() && r.plural == "pods" {
        let qos = crate::validation::pod_qos_class(&obj);
        if let Some(status) = obj.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("qosClass".into(), json!(qos));
        }
    }
    // A Service's cluster IP and node ports are allocated before validation and validating
    // admission (upstream's `BeginCreate`): webhooks and policies see them, and a dry run
    // answers with the addresses a real create would get, reserving nothing.
    let taken = if is_service(r) {
        if generate_name.is_none() {
            ensure_absent(ctx, r, namespace, object::meta_str(&obj, "name")).await?;
        }
        service::allocate(ctx, &ctx.service_range, &mut obj, dry_run(q)).await?
    } else {
        Vec::new()
    };
    let created = create_admitted(ctx, r, namespace, q, obj, warnings, generate_name).await;
    if created.is_err() {
        service::release(ctx, &taken).await;
    }
    created
}

/// The rest of a create once mutating admission has run (and a Service has its
/// addresses): validation, validating admission, quota, then the write.
async fn create_admitted(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    q: &Query,
    mut obj: Map<String, Value>,
    warnings: Vec<String>,
    generate_name: Option<String>,
) -> Result<Response> {
    object::validate(r, &obj, true, None)?;
    ctx.admission.validate(
        crate::admission::Operation::Create,
        r.group,
        r.plural,
        namespace,
        "",
        dry_run(q),
        Some(&obj),
        None,
    )?;
    // With validating webhooks configured, the object is encoded once: their reviews carry
    // its stored JSON (in Go's field order, as upstream's do) and the store writes the same
    // bytes.
    let mut encoded = if ctx.admission.has_validating_webhooks() {
        stored_json(r, &obj)
    } else {
        None
    };
    ctx.admission
        .validate_webhooks(
            crate::admission::Operation::Create,
            r,
            namespace,
            "",
            dry_run(q),
            Some(&obj),
            encoded.as_deref(),
            None,
        )
        .await?;
    ctx.admission
        .charge(
            crate::admission::Operation::Create,
            r.group,
            r.plural,
            namespace,
            dry_run(q),
            &obj,
        )
        .await?;
    if dry_run(q) {
        // Upstream's dry-run storage still checks the key: a dry-run create of an existing
        // name is the same 409 AlreadyExists as a real one.
        ensure_absent(ctx, r, namespace, object::meta_str(&obj, "name")).await?;
        return Ok(with_warnings(
            object_response(StatusCode::CREATED, obj),
            &warnings,
        ));
    }
    let mut attempts = 1;
    let (rev, stored) = loop {
        let name = object::meta_str(&obj, "name").to_owned();
        // A generated name tried again changes the object: encoded anew.
        let bytes = encoded.take();
        let exists = match store_new(ctx, r, namespace, &name, &mut obj, bytes).await {
            Ok(done) => break done,
            Err(ApiError::AlreadyExists { resource, name }) => {
                ApiError::AlreadyExists { resource, name }
            }
            Err(e) => return Err(e),
        };
        match &generate_name {
            Some(generate) if attempts < GENERATE_NAME_ATTEMPTS => {
                attempts += 1;
                let name = format!("{generate}{}", object::name_suffix());
                if let Some(m) = object::meta(&mut obj) {
                    m.insert("name".into(), json!(name));
                }
            }
            _ => return Err(exists),
        }
    };
    // The answer is the stored JSON with its resourceVersion spliced in, when the stored
    // form is the served one: the object is not written out a second time.
    if let Some(mut json) = stored.and_then(|b| crate::watch_cache::stamp_revision(b, rev)) {
        json.push(b'\n');
        let resp = (
            StatusCode::CREATED,
            [(http::header::CONTENT_TYPE, "application/json")],
            json,
        )
            .into_response();
        return Ok(with_warnings(resp, &warnings));
    }
    let mut obj = crate::crd::conversion::round_trip(ctx, r, obj).await?;
    if let Some(m) = object::meta(&mut obj) {
        m.insert("resourceVersion".into(), json!(rev.to_string()));
    }
    Ok(with_warnings(
        object_response(StatusCode::CREATED, obj),
        &warnings,
    ))
}

/// 409 AlreadyExists when an object named `name` is stored.
async fn ensure_absent(ctx: &Ctx, r: &ResourceInfo, namespace: &str, name: &str) -> Result<()> {
    let key = registry::key(r, namespace, name);
    if ctx
        .storage
        .get(&key)
        .await
        .map_err(storage_error)?
        .is_some()
    {
        return Err(ApiError::AlreadyExists {
            resource: object::group_resource(r),
            name: name.to_owned(),
        });
    }
    Ok(())
}

/// Storage attempts of a create with `generateName` (upstream's
/// `maxNameGenerationCreateAttempts`).
const GENERATE_NAME_ATTEMPTS: usize = 8;

/// Writes a new object named `name`; AlreadyExists when the name is taken. Returns the
/// revision and, when the stored JSON is the object as served (not converted, no
/// resourceVersion of its own), those bytes.
async fn store_new(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    obj: &mut Map<String, Value>,
    encoded: Option<Vec<u8>>,
) -> Result<(i64, Option<Vec<u8>>)> {
    let key = registry::key(r, namespace, name);
    let exists = || ApiError::AlreadyExists {
        resource: object::group_resource(r),
        name: name.to_owned(),
    };
    let (bytes, answer) = match encoded {
        Some(bytes) => served_copy(bytes, obj),
        None => encode_for_storage(ctx, r, obj).await?,
    };
    match ctx.storage.create(&key, bytes).await {
        Ok(rev) => Ok((rev, answer)),
        Err(storage::Error::AlreadyExists) => Err(exists()),
        Err(e) => Err(storage_error(e)),
    }
}

/// `obj` encoded as stored and, when that is also the form served (no conversion, no
/// resourceVersion of its own), a copy for the answer, with room for the resourceVersion
/// that `watch_cache::stamp_revision` splices in once the write has its revision. A CRD's
/// conversion webhook converts first; nothing is stored when it fails.
async fn encode_for_storage(
    ctx: &Ctx,
    r: &ResourceInfo,
    obj: &Map<String, Value>,
) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
    if registry::convert::needs_webhook(r) {
        let stored = crate::crd::conversion::to_storage(ctx, r, obj.clone()).await?;
        return Ok((object::encode(&stored)?, None));
    }
    let stored = registry::convert::storage_form(r, obj);
    if matches!(stored, std::borrow::Cow::Borrowed(_)) {
        return Ok(served_copy(object::encode(obj)?, obj));
    }
    Ok((object::encode(&stored)?, None))
}

/// `bytes` (the stored JSON of `obj`, which is also its served form) and, unless `obj`
/// has a resourceVersion of its own, a copy for the answer with room for the revision.
fn served_copy(bytes: Vec<u8>, obj: &Map<String, Value>) -> (Vec<u8>, Option<Vec<u8>>) {
    let served = obj
        .get("metadata")
        .and_then(|m| m.get("resourceVersion"))
        .is_none();
    let answer = served.then(|| {
        let mut copy = Vec::with_capacity(bytes.len() + 48);
        copy.extend_from_slice(&bytes);
        copy
    });
    (bytes, answer)
}

/// The stored JSON of `obj` when its stored form is the object itself (no conversion);
/// None otherwise.
fn stored_json(r: &ResourceInfo, obj: &Map<String, Value>) -> Option<Vec<u8>> {
    if registry::convert::needs_webhook(r) {
        return None;
    }
    match registry::convert::storage_form(r, obj) {
        std::borrow::Cow::Borrowed(_) => object::encode(obj).ok(),
        std::borrow::Cow::Owned(_) => None,
    }
}

/// Which part of an object a PUT or PATCH may change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    /// The object itself: everything but status (and, for namespaces, `spec.finalizers`).
    Main,
    /// The `status` subresource: status only.
    Status,
    /// A namespace's `finalize` subresource: everything but status, `spec.finalizers` included.
    Finalize,
    /// A CSR's `approval` subresource: `status.conditions` only.
    Approval,
    /// A pod's `ephemeralcontainers` subresource: `spec.ephemeralContainers` only.
    EphemeralContainers,
    /// A pod's `resize` subresource: the containers' `resources` and `resizePolicy` only.
    Resize,
}

impl Scope {
    /// Carries from `old` what this scope may not change, after the generic update rules.
    fn carry_over(self, r: &ResourceInfo, new: &mut Map<String, Value>, old: &Map<String, Value>) {
        let is_namespace = r.group.is_empty() && r.plural == "namespaces";
        match self {
            Scope::Main if is_namespace => {
                let kept = old.get("spec").and_then(|s| s.get("finalizers")).cloned();
                if let Some(spec) = new
                    .entry("spec")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    match kept {
                        Some(f) => spec.insert("finalizers".into(), f),
                        None => spec.remove("finalizers"),
                    };
                }
            }
            Scope::Finalize => {
                match old.get("status") {
                    Some(st) => new.insert("status".into(), st.clone()),
                    None => new.remove("status"),
                };
                // An empty list serializes as absent, as Go's omitempty does.
                if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut)
                    && spec
                        .get("finalizers")
                        .and_then(Value::as_array)
                        .is_some_and(Vec::is_empty)
                {
                    spec.remove("finalizers");
                }
            }
            _ => {}
        }
    }
}

/// Stores `new` over the object last read at `expected`, applying update rules.
#[allow(clippy::too_many_arguments)]
async fn store_update(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    mut new: Map<String, Value>,
    old: &Map<String, Value>,
    expected: i64,
    scope: Scope,
    q: &Query,
) -> Result<Written> {
    object::check_type(&mut new, r)?;
    if object::meta_str(&new, "name") != name {
        return Err(ApiError::BadRequest(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            object::meta_str(&new, "name")
        )));
    }
    if let Some(m) = object::meta(&mut new).filter(|_| r.namespaced) {
        m.insert("namespace".into(), json!(namespace));
    }
    // What an approval writes, before the generic rules put the stored status back.
    let approval = (scope == Scope::Approval)
        .then(|| new.get("status").and_then(|s| s.get("conditions")).cloned())
        .flatten();
    if scope == Scope::Status {
        // The status subresource changes status only.
        let status = new.remove("status");
        // managedFields as recorded for this status write (`apply::record`).
        let managed = object::meta(&mut new).and_then(|m| m.remove("managedFields"));
        // Upstream's pod status strategy resets only the spec, `deletionTimestamp` and
        // `ownerReferences`: the request's labels, annotations and finalizers stand (a
        // terminating pod whose last finalizer goes is then deleted, below). Other kinds keep
        // the stored metadata (most of upstream's status strategies reset it).
        const POD_STATUS_META: [&str; 3] = ["labels", "annotations", "finalizers"];
        let pod_meta = (r.group.is_empty() && r.plural == "pods")
            .then(|| object::meta(&mut new).map(|m| POD_STATUS_META.map(|field| m.remove(field))))
            .flatten();
        new = old.clone();
        if let (Some(values), Some(m)) = (pod_meta, object::meta(&mut new)) {
            for (field, value) in POD_STATUS_META.into_iter().zip(values) {
                match value {
                    Some(v) => m.insert(field.into(), v),
                    None => m.remove(field),
                };
            }
        }
        match status {
            Some(s) => {
                new.insert("status".into(), s);
            }
            None => {
                new.remove("status");
            }
        }
        if r.group.is_empty() && r.plural == "pods" {
            crate::validation::prepare_pod_status(&mut new, old);
        }
        if r.group.is_empty() && r.plural == "persistentvolumes" {
            strategy::pv_status_transition(&mut new, old);
        }
        if let Some(m) = object::meta(&mut new) {
            m.remove("resourceVersion");
            match managed {
                Some(f) => m.insert("managedFields".into(), f),
                None => m.remove("managedFields"),
            };
        }
    } else {
        if is_service(r) {
            service::carry_over(&mut new, old)?;
        }
        object::prepare_for_update(r, &mut new, old);
        scope.carry_over(r, &mut new, old);
        if is_service(r) {
            service::clear_load_balancer_status(&mut new);
        }
        if scope == Scope::EphemeralContainers {
            ephemeral_containers::prepare_for_update(&mut new, old);
        }
        if scope == Scope::Resize {
            pod_resize::prepare_for_update(&mut new, old);
        }
        if r.group.is_empty() && r.plural == "pods" {
            object::pod_generation(&mut new, old);
        }
    }
    if csr::is(r) {
        csr::prepare_for_update(scope, &mut new, old, approval);
    }
    ctx.admission.admit(
        crate::admission::Operation::Update,
        r.group,
        r.plural,
        namespace,
        name,
        dry_run(q),
        Some(&mut new),
        Some(old),
    )?;
    ctx.admission
        .admit_webhooks(
            crate::admission::Operation::Update,
            r,
            namespace,
            name,
            dry_run(q),
            Some(&mut new),
            Some(old),
        )
        .await?;
    // Custom resources are validated whole on status updates too (upstream: schema and CEL).
    // CSRs too (what a status write may change is part of their validation).
    // Pods too (`ValidatePodStatusUpdate`, `crate::validation::pod_status`).
    let fields = scope != Scope::Status
        || crate::crd::serve::is_custom(r)
        || csr::is(r)
        || (r.group.is_empty() && r.plural == "pods");
    object::validate(r, &new, fields, Some(old))?;
    if csr::is(r) {
        csr::admit(scope, &new, old).await?;
    }
    ctx.admission.validate(
        crate::admission::Operation::Update,
        r.group,
        r.plural,
        namespace,
        name,
        dry_run(q),
        Some(&new),
        Some(old),
    )?;
    ctx.admission
        .validate_webhooks(
            crate::admission::Operation::Update,
            r,
            namespace,
            name,
            dry_run(q),
            Some(&new),
            None,
            Some(old),
        )
        .await?;
    if dry_run(q) {
        if let Some(m) = object::meta(&mut new) {
            m.insert("resourceVersion".into(), json!(expected.to_string()));
        }
        return Ok(Written::object(new));
    }
    // An object being deleted whose last finalizer is removed goes away now (a status write
    // changes finalizers of pods only).
    let key = registry::key(r, namespace, name);
    if delete::delete_during_update(r, &new, old) {
        let rev = ctx
            .storage
            .delete(&key, expected)
            .await
            .map_err(|e| conflict_or(e, r, name))?;
        // A Service deleted this way (its last finalizer removed, as a load balancer's
        // cleanup does) frees its addresses as a DELETE does.
        if is_service(r) {
            service::release(ctx, &service::held_keys(old)).await;
        }
        if let Some(m) = object::meta(&mut new) {
            m.insert("resourceVersion".into(), json!(rev.to_string()));
        }
        return Ok(Written::object(new));
    }
    // Unchanged objects are not written, unless stored under an old encryption key.
    if object::same_but_resource_version(&new, old) && !ctx.storage.stale(&key) {
        if let Some(m) = object::meta(&mut new) {
            m.insert("resourceVersion".into(), json!(expected.to_string()));
        }
        return Ok(Written::object(new));
    }
    // Node ports and cluster IPs the new type needs; the old type's released once stored.
    let service_keys = if is_service(r) && scope != Scope::Status {
        service::allocate_update(ctx, &ctx.service_range, &mut new, old).await?
    } else {
        service::UpdateKeys::default()
    };
    let written = match encode_for_storage(ctx, r, &new).await {
        Ok((bytes, answer)) => ctx
            .storage
            .update(&key, bytes, expected)
            .await
            .map(|rev| (rev, answer))
            .map_err(|e| conflict_or(e, r, name)),
        Err(e) => Err(e),
    };
    service::settle(ctx, &service_keys, written.is_ok()).await;
    let (rev, answer) = written?;
    let mut new = crate::crd::conversion::round_trip(ctx, r, new).await?;
    if let Some(m) = object::meta(&mut new) {
        m.insert("resourceVersion".into(), json!(rev.to_string()));
    }
    Ok(Written {
        json: answer.and_then(|b| crate::watch_cache::stamp_revision(b, rev)),
        object: new,
    })
}

/// An object as an update left it: the object as served, and — when the stored JSON is the
/// served form (no conversion) — that JSON with its new resourceVersion spliced in, so the
/// answer is not serialized a second time.
struct Written {
    object: Map<String, Value>,
    json: Option<Vec<u8>>,
}

impl Written {
    /// An object that was not written (dry run, unchanged, deleted).
    fn object(object: Map<String, Value>) -> Self {
        Written { object, json: None }
    }

    /// The answer: the spliced stored JSON when there is one, else the object encoded.
    fn response(self, code: StatusCode) -> Response {
        match self.json {
            Some(json) => (
                code,
                [(http::header::CONTENT_TYPE, "application/json")],
                json,
            )
                .into_response(),
            None => object_response(code, self.object),
        }
    }
}

fn conflict_or(e: storage::Error, r: &ResourceInfo, name: &str) -> ApiError {
    match e {
        storage::Error::Conflict => ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: MODIFIED.into(),
        },
        storage::Error::NotFound => ApiError::NotFound {
            resource: object::group_resource(r),
            name: name.into(),
        },
        other => storage_error(other),
    }
}

#[allow(clippy::too_many_arguments)]
async fn update(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
    scope: Scope,
) -> Result<Response> {
    let mut new = object::decode(headers, body)?;
    object::check_type(&mut new, r)?;
    let (mut new, warnings) = field_validation(r, new, q)?;
    crate::defaults::apply(r, &mut new);
    crate::quantity::canonicalize(r, &mut new)?;
    let (old, current) = load(ctx, r, namespace, name).await?;
    let wanted = object::meta_str(&new, "resourceVersion");
    let expected = if wanted.is_empty() {
        current
    } else {
        object::parse_rv(wanted)?
    };
    if expected != current {
        return Err(ApiError::Conflict {
            resource: object::group_resource(r),
            name: name.into(),
            detail: MODIFIED.into(),
        });
    }
    apply::record(r, &mut new, &old, q, headers, scope);
    let stored = store_update(ctx, r, namespace, name, new, &old, expected, scope, q).await?;
    Ok(with_warnings(stored.response(StatusCode::OK), &warnings))
}

#[allow(clippy::too_many_arguments)]
async fn patch(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    name: &str,
    headers: &HeaderMap,
    body: &[u8],
    q: &Query,
    scope: Scope,
) -> Result<Response> {
    let ctype = headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_owned();
    if ctype == "application/apply-patch+yaml" {
        return apply::apply(ctx, r, namespace, name, body, q, scope).await;
    }
    let patch: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::BadRequest(format!("error decoding patch: {e}")))?;
    for _ in 0..PATCH_RETRIES {
        let (old, current) = load(ctx, r, namespace, name).await?;
        let doc = match ctype.as_str() {
            "application/merge-patch+json" => {
                let mut doc = Value::Object(old.clone());
                json_patch::merge(&mut doc, &patch);
                doc
            }
            // Custom resources have no strategy markers: upstream answers 415.
            "application/strategic-merge-patch+json" if crate::crd::serve::is_custom(r) => {
                return Err(ApiError::UnsupportedMediaType(
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
                ));
            }
            "application/strategic-merge-patch+json" => {
                Value::Object(crate::patch::strategic_merge(r, old.clone(), &patch)?)
            }
            "application/json-patch+json" => {
                let ops = apply::decode_json_patch(&patch)?;
                let mut doc = Value::Object(old.clone());
                crate::patch::json_patch(&mut doc, &ops)
                    .map_err(|e| apply::json_patch_error(&ops, &e))?;
                doc
            }
            _ => {
                return Err(ApiError::UnsupportedMediaType(
                    "application/json-patch+json, application/merge-patch+json".into(),
                ));
            }
        };
        let Value::Object(mut new) = doc else {
            return Err(ApiError::BadRequest(
                "the patch did not produce an object".into(),
            ));
        };
        apply::check_patched_type(r, &mut new, ctype.ends_with("strategic-merge-patch+json"))?;
        object::check_type(&mut new, r)?;
        let (mut new, warnings) = field_validation_against(r, new, Some(&old), q)?;
        crate::defaults::apply(r, &mut new);
        crate::quantity::canonicalize(r, &mut new)?;
        let wanted = object::meta_str(&new, "resourceVersion").to_owned();
        let conditional = !wanted.is_empty() && wanted != current.to_string();
        if conditional {
            return Err(ApiError::Conflict {
                resource: object::group_resource(r),
                name: name.into(),
                detail: MODIFIED.into(),
            });
        }
        apply::record(r, &mut new, &old, q, headers, scope);
        match store_update(ctx, r, namespace, name, new, &old, current, scope, q).await {
            Err(ApiError::Conflict { .. }) => continue,
            Ok(stored) => {
                return Ok(with_warnings(stored.response(StatusCode::OK), &warnings));
            }
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::Conflict {
        resource: object::group_resource(r),
        name: name.into(),
        detail: MODIFIED.into(),
    })
}

/// Creates the namespaces every cluster starts with, if missing.
pub async fn bootstrap(ctx: &Ctx) -> Result<()> {
    let Some(ns) = ctx.registry.find("", "v1", "namespaces") else {
        return Ok(());
    };
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        let mut obj = Map::new();
        obj.insert("apiVersion".into(), json!("v1"));
        obj.insert("kind".into(), json!("Namespace"));
        obj.insert(
            "metadata".into(),
            json!({ "name": name, "labels": { "kubernetes.io/metadata.name": name } }),
        );
        object::prepare_for_create(ns, &mut obj);
        match ctx
            .storage
            .create(&registry::key(ns, "", name), object::encode(&obj)?)
            .await
        {
            Ok(_) | Err(storage::Error::AlreadyExists) => {}
            Err(e) => return Err(storage_error(e)),
        }
    }
    crate::authz::bootstrap::reconcile(&ctx.storage)
        .await
        .map_err(storage_error)?;
    crate::admission::priority::bootstrap(&ctx.storage).await?;
    bootstrap_kubernetes_service(ctx).await
}

/// The `default/kubernetes` Service (first IP of the service range, port 443 → this
/// server) and its Endpoints, as kube-apiserver maintains them.
async fn bootstrap_kubernetes_service(ctx: &Ctx) -> Result<()> {
    let (Some(svc), Some(eps)) = (
        ctx.registry.find("", "v1", "services"),
        ctx.registry.find("", "v1", "endpoints"),
    ) else {
        return Ok(());
    };
    let (host, port) = ctx
        .address
        .rsplit_once(':')
        .unwrap_or((ctx.address.as_str(), "6443"));
    let port: u16 = port.parse().unwrap_or(6443);
    let key = registry::key(svc, "default", "kubernetes");
    if ctx
        .storage
        .get(&key)
        .await
        .map_err(storage_error)?
        .is_none()
    {
        let ip = service::kubernetes_service_ip(&ctx.service_range).to_string();
        let mut obj = json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": { "component": "apiserver", "provider": "kubernetes" }
            },
            "spec": {
                "type": "ClusterIP",
                "clusterIP": ip,
                "sessionAffinity": "None",
                "internalTrafficPolicy": "Cluster",
                "ports": [{ "name": "https", "port": 443, "protocol": "TCP", "targetPort": port }]
            }
        })
        .as_object()
        .cloned()
        .unwrap_or_default();
        object::prepare_for_create(svc, &mut obj);
        let taken = service::allocate(ctx, &ctx.service_range, &mut obj, false).await?;
        if let Err(e) = ctx.storage.create(&key, object::encode(&obj)?).await {
            service::release(ctx, &taken).await;
            if !matches!(e, storage::Error::AlreadyExists) {
                return Err(storage_error(e));
            }
        }
    }
    let mut endpoints = json!({
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": { "endpointslice.kubernetes.io/skip-mirror": "true" }
        },
        "subsets": [{
            "addresses": [{ "ip": host }],
            "ports": [{ "name": "https", "port": port, "protocol": "TCP" }]
        }]
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    object::prepare_for_create(eps, &mut endpoints);
    let eps_key = registry::key(eps, "default", "kubernetes");
    match ctx
        .storage
        .create(&eps_key, object::encode(&endpoints)?)
        .await
    {
        Ok(_) | Err(storage::Error::AlreadyExists) => {}
        Err(e) => return Err(storage_error(e)),
    }
    bootstrap_kubernetes_slice(ctx, host, port).await
}

/// The `default/kubernetes` EndpointSlice, which kube-apiserver's endpoint reconciler
/// writes itself (the EndpointSlice controller skips Services without a selector).
async fn bootstrap_kubernetes_slice(ctx: &Ctx, host: &str, port: u16) -> Result<()> {
    let Some(slices) = ctx
        .registry
        .find("discovery.k8s.io", "v1", "endpointslices")
    else {
        return Ok(());
    };
    let address_type = if host.contains(':') { "IPv6" } else { "IPv4" };
    let mut slice = json!({
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": { "kubernetes.io/service-name": "kubernetes" }
        },
        "addressType": address_type,
        "endpoints": [{ "addresses": [host], "conditions": { "ready": true } }],
        "ports": [{ "name": "https", "port": port, "protocol": "TCP" }]
    })
    .as_object()
    .cloned()
    .unwrap_or_default();
    object::prepare_for_create(slices, &mut slice);
    let key = registry::key(slices, "default", "kubernetes");
    match ctx.storage.create(&key, object::encode(&slice)?).await {
        Ok(_) | Err(storage::Error::AlreadyExists) => Ok(()),
        Err(e) => Err(storage_error(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_options_keep_every_command_word() {
        let (kind, o) = connect_options(
            "exec",
            Some(
                "command=sh&command=-c&command=echo+hi%3B+exit+3&stdout=true&tty=false&container=c",
            ),
        );
        assert_eq!(kind, "PodExecOptions");
        assert_eq!(o["command"], json!(["sh", "-c", "echo hi; exit 3"]));
        assert_eq!(o["stdout"], json!(true));
        assert_eq!(o["tty"], json!(false));
        assert_eq!(o["container"], json!("c"));
        let (kind, o) = connect_options("portforward", Some("ports=80&ports=8080"));
        assert_eq!(kind, "PodPortForwardOptions");
        assert_eq!(o["ports"], json!([80, 8080]));
        assert!(connect_options("attach", None).1.is_empty());
    }

    #[test]
    fn query_components_are_percent_decoded() {
        let q = parse_query(Some("labelSelector=app%3Dweb%2Ctier+in+(a)&limit=5"));
        assert_eq!(q["labelSelector"], "app=web,tier in (a)");
        assert_eq!(q["limit"], "5");
    }

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "/registry/core/pods/default/a");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "/registry/core/pods/default/a".into())
        );
        assert!(decode_continue("!!").is_err());
    }
}
