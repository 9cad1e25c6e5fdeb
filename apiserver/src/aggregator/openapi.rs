//! OpenAPI of the extension servers merged into this server's (kube-aggregator's OpenAPI v2
//! aggregation controller and v3 spec proxier):
//!
//! - each availability round, every passing extension server's `/openapi/v3` root and
//!   `/openapi/v2` document (with `If-None-Match` on its last `ETag`) are downloaded as
//!   `system:aggregator` in `system:masters`, through the proxy client (front-proxy client
//!   certificate);
//! - `/openapi/v3` lists, next to the local group versions, each available APIService's
//!   `apis/<group>/<version>` with the `serverRelativeURL` its server published;
//!   `/openapi/v3/apis/<group>/<version>` of such a group version is proxied to its server
//!   with the caller's identity (upstream's `handleGroupVersion`);
//! - `/openapi/v2` is the local document with each server's paths under
//!   `/apis/<group>/<version>` and its definitions added (a definition whose name is taken by
//!   a different schema is renamed `<name>_v2`, `_v3`, … with its references, as upstream's
//!   merge does); JSON or gnostic protobuf as the local one, with its own `ETag`. The merged
//!   document is kept until the local one or a remote one changes.
//!
//! A server that does not pass its availability check is left out of both.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode, header};
use http_body_util::BodyExt as _;
use serde_json::{Map, Value};
use sha2::{Digest, Sha512};

use super::Aggregator;
use super::client::Endpoint;
use super::table::ApiService;
use crate::pipeline::UserInfo;

/// How long one download waits.
const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(5);

/// What one extension server published.
#[derive(Debug, Clone, Default)]
pub struct Remote {
    /// Its v3 root's entry for the APIService's group version (`{"serverRelativeURL": …}`).
    pub v3_entry: Option<Value>,
    /// Its v2 document.
    pub v2: Option<Arc<Value>>,
    /// The v2 document's `ETag`.
    pub v2_etag: Option<String>,
    /// A number that changes with each new v2 document (the merge cache's key).
    pub v2_generation: u64,
}

/// The source of [`Remote::v2_generation`].
static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A merged v2 document: JSON, its hash, its protobuf encoding (made on first use).
struct Merged {
    key: String,
    json: bytes::Bytes,
    hash: String,
    proto: OnceLock<(bytes::Bytes, String)>,
}

/// The downloaded documents by APIService name, and the last merged v2 document.
#[derive(Default)]
pub struct Specs {
    remotes: RwLock<HashMap<String, Remote>>,
    merged: Mutex<Option<Arc<Merged>>>,
}

impl Specs {
    fn remotes(&self) -> HashMap<String, Remote> {
        self.remotes
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Keeps only the APIServices in `names` (those passing this round).
    pub fn retain(&self, names: &[String]) {
        self.remotes
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|k, _| names.contains(k));
    }
}

fn sha512_hex(body: &[u8]) -> String {
    Sha512::digest(body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect()
}

/// The v3 index key of a group version.
fn gv_key(svc: &ApiService) -> String {
    if svc.group.is_empty() {
        format!("api/{}", svc.version)
    } else {
        format!("apis/{}/{}", svc.group, svc.version)
    }
}

/// `GET path` on the server as `system:aggregator`: status, headers, body.
async fn download(
    agg: &Aggregator,
    ep: &Endpoint,
    path: &str,
    if_none_match: Option<&str>,
) -> Result<(StatusCode, HeaderMap, bytes::Bytes), String> {
    let exchange = async {
        let sender = agg.client.connect(ep, false).await?;
        let authority = format!("{}:{}", ep.server_name, ep.port);
        let uri = if sender.is_h2() {
            format!("https://{authority}{path}")
        } else {
            path.to_owned()
        };
        let mut req = http::Request::get(uri)
            .header("x-remote-user", "system:aggregator")
            .header("x-remote-group", "system:masters")
            .header(header::ACCEPT, "application/json");
        if let Some(etag) = if_none_match {
            req = req.header(header::IF_NONE_MATCH, etag);
        }
        if !sender.is_h2() {
            req = req.header(header::HOST, authority);
        }
        let req = req.body(Body::empty()).map_err(|e| e.to_string())?;
        let resp = sender.send(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
        Ok((parts.status, parts.headers, body))
    };
    tokio::time::timeout(DOWNLOAD_TIMEOUT, exchange)
        .await
        .map_err(|_| format!("downloading {path}: timed out"))?
}

/// Downloads the server's v3 root and v2 document for `svc` (reached at `ep`), keeping what
/// was known when a download fails.
pub async fn refresh(agg: &Aggregator, svc: &ApiService, ep: &Endpoint) {
    let mut remote = agg
        .openapi
        .remotes
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .get(&svc.name)
        .cloned()
        .unwrap_or_default();
    match download(agg, ep, "/openapi/v3", None).await {
        Ok((status, _, body)) if status.is_success() => {
            let root: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            remote.v3_entry = root["paths"].get(gv_key(svc)).cloned();
        }
        Ok((StatusCode::NOT_FOUND, _, _)) => remote.v3_entry = None,
        Ok((status, _, _)) => {
            tracing::debug!(apiservice = %svc.name, %status, "OpenAPI v3 root not downloaded");
        }
        Err(e) => {
            tracing::debug!(apiservice = %svc.name, err = %e, "OpenAPI v3 root not downloaded")
        }
    }
    match download(agg, ep, "/openapi/v2", remote.v2_etag.as_deref()).await {
        Ok((StatusCode::NOT_MODIFIED, _, _)) => {}
        Ok((status, headers, body)) if status.is_success() => {
            match serde_json::from_slice::<Value>(&body) {
                Ok(v) if v.is_object() => {
                    remote.v2 = Some(Arc::new(v));
                    remote.v2_generation =
                        GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    remote.v2_etag = headers
                        .get(header::ETAG)
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                }
                _ => tracing::debug!(apiservice = %svc.name, "OpenAPI v2 document is not JSON"),
            }
        }
        Ok((StatusCode::NOT_FOUND, _, _)) => {
            remote.v2 = None;
            remote.v2_etag = None;
        }
        Ok((status, _, _)) => {
            tracing::debug!(apiservice = %svc.name, %status, "OpenAPI v2 not downloaded");
        }
        Err(e) => tracing::debug!(apiservice = %svc.name, err = %e, "OpenAPI v2 not downloaded"),
    }
    agg.openapi
        .remotes
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .insert(svc.name.clone(), remote);
}

/// Whether `path` is one this module may answer.
pub fn is_openapi_path(path: &str) -> bool {
    path == "/openapi/v2" || path == "/openapi/v3" || path.starts_with("/openapi/v3/")
}

/// Answers a GET of an OpenAPI path: merged with the extension servers' documents when any
/// is known, else as the local handler does.
pub async fn serve(agg: Arc<Aggregator>, req: Request, next: Next) -> Response {
    let snapshot = agg.table.snapshot(&agg.ctx.storage);
    let remotes = agg.openapi.remotes();
    let available: Vec<(&ApiService, &Remote)> = snapshot
        .remote()
        .filter(|s| s.available)
        .filter_map(|s| remotes.get(&s.name).map(|r| (s, r)))
        .collect();
    if available.is_empty() {
        return next.run(req).await;
    }
    let path = req.uri().path().to_owned();
    if path == "/openapi/v3" {
        return v3_root(req, next, &available).await;
    }
    if let Some(key) = path.strip_prefix("/openapi/v3/") {
        let Some((svc, _)) = available
            .iter()
            .find(|(s, r)| gv_key(s) == key && r.v3_entry.is_some())
        else {
            return next.run(req).await;
        };
        let ep = match super::available::endpoint_of(&agg, svc) {
            Ok(ep) => ep,
            Err(_) => {
                return super::proxy::plain_error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "service unavailable",
                );
            }
        };
        let Some(user) = req.extensions().get::<UserInfo>().cloned() else {
            return super::proxy::plain_error(StatusCode::INTERNAL_SERVER_ERROR, "missing user");
        };
        return super::proxy::forward(&agg.client, &ep, &user, req).await;
    }
    v2(&agg, req, next, &available).await
}

/// Runs the local handler for `req` and returns its response, buffered.
async fn local(
    req: Request,
    next: Next,
) -> Result<(http::response::Parts, bytes::Bytes), Response> {
    let resp = next.run(req).await;
    if resp.status() != StatusCode::OK {
        return Err(resp);
    }
    let (parts, body) = resp.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => Ok((parts, b)),
        Err(_) => Err(crate::error::ApiError::Internal("openapi".into()).into_response()),
    }
}

/// `/openapi/v3`: the local index with the extension servers' group versions.
async fn v3_root(mut req: Request, next: Next, available: &[(&ApiService, &Remote)]) -> Response {
    req.headers_mut().remove(header::IF_NONE_MATCH);
    let (mut parts, body) = match local(req, next).await {
        Ok(l) => l,
        Err(resp) => return resp,
    };
    let Ok(index) = serde_json::from_slice::<Value>(&body) else {
        return Response::from_parts(parts, Body::from(body));
    };
    let mut paths: BTreeMap<String, Value> = index["paths"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    for (svc, remote) in available {
        if let Some(entry) = &remote.v3_entry {
            paths.insert(gv_key(svc), entry.clone());
        }
    }
    let merged = serde_json::json!({ "paths": paths });
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(merged.to_string()))
}

/// Replaces `#/definitions/<old>` references in `v` by the renamed definitions.
fn rename_refs(v: &mut Value, renamed: &HashMap<String, String>) {
    match v {
        Value::Object(map) => {
            for (k, item) in map.iter_mut() {
                if k == "$ref"
                    && let Some(new) = item
                        .as_str()
                        .and_then(|r| r.strip_prefix("#/definitions/"))
                        .and_then(|name| renamed.get(name))
                {
                    *item = Value::String(format!("#/definitions/{new}"));
                } else {
                    rename_refs(item, renamed);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| rename_refs(i, renamed)),
        _ => {}
    }
}

/// Adds `remote`'s paths under `/apis/<group>/<version>` and its definitions (and
/// parameters) to `into`; conflicting definitions are renamed.
pub fn merge_v2(into: &mut Value, remote: &Value, svc: &ApiService) {
    let prefix = if svc.group.is_empty() {
        format!("/api/{}", svc.version)
    } else {
        format!("/apis/{}/{}", svc.group, svc.version)
    };
    let mut definitions = remote["definitions"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut paths: Map<String, Value> = remote["paths"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(p, _)| *p == &prefix || p.starts_with(&format!("{prefix}/")))
        .map(|(p, v)| (p.clone(), v.clone()))
        .collect();
    let existing = into["definitions"].as_object().cloned().unwrap_or_default();
    let mut renamed = HashMap::new();
    for (name, def) in &definitions {
        match existing.get(name) {
            Some(e) if e != def => {
                let mut n = 2;
                let new = loop {
                    let candidate = format!("{name}_v{n}");
                    if !existing.contains_key(&candidate) && !definitions.contains_key(&candidate) {
                        break candidate;
                    }
                    n += 1;
                };
                renamed.insert(name.clone(), new);
            }
            _ => {}
        }
    }
    if !renamed.is_empty() {
        let mut defs = Value::Object(std::mem::take(&mut definitions));
        rename_refs(&mut defs, &renamed);
        let mut ps = Value::Object(std::mem::take(&mut paths));
        rename_refs(&mut ps, &renamed);
        definitions = match defs {
            Value::Object(m) => m
                .into_iter()
                .map(|(k, v)| (renamed.get(&k).cloned().unwrap_or(k), v))
                .collect(),
            _ => Map::new(),
        };
        paths = match ps {
            Value::Object(m) => m,
            _ => Map::new(),
        };
    }
    for (section, items) in [("definitions", definitions), ("paths", paths)] {
        if !into[section].is_object() {
            into[section] = Value::Object(Map::new());
        }
        if let Some(target) = into[section].as_object_mut() {
            for (k, v) in items {
                target.entry(k).or_insert(v);
            }
        }
    }
    if let Some(params) = remote["parameters"].as_object() {
        if !into["parameters"].is_object() {
            into["parameters"] = Value::Object(Map::new());
        }
        if let Some(target) = into["parameters"].as_object_mut() {
            for (k, v) in params {
                target.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
}

/// `/openapi/v2`: the local document with the extension servers' paths and definitions.
async fn v2(
    agg: &Aggregator,
    mut req: Request,
    next: Next,
    available: &[(&ApiService, &Remote)],
) -> Response {
    let with_v2: Vec<(&ApiService, &Arc<Value>, u64)> = available
        .iter()
        .filter_map(|(s, r)| r.v2.as_ref().map(|v| (*s, v, r.v2_generation)))
        .collect();
    if with_v2.is_empty() {
        return next.run(req).await;
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let if_none_match = req
        .headers()
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(content_type) = crate::openapi::negotiate_v2(accept.as_deref()) else {
        return next.run(req).await;
    };
    let protobuf = content_type != "application/json";
    req.headers_mut().remove(header::IF_NONE_MATCH);
    req.headers_mut()
        .insert(header::ACCEPT, HeaderValue::from_static("application/json"));
    let (parts, body) = match local(req, next).await {
        Ok(l) => l,
        Err(resp) => return resp,
    };
    let local_etag = parts
        .headers
        .get(header::ETAG)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let key = with_v2
        .iter()
        .fold(local_etag, |mut k, (s, _, generation)| {
            k.push_str(&format!("|{}@{generation}", s.name));
            k
        });
    let cached = agg
        .openapi
        .merged
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
        .filter(|m| m.key == key);
    let merged = match cached {
        Some(m) => m,
        None => {
            let Ok(mut doc) = serde_json::from_slice::<Value>(&body) else {
                return Response::from_parts(parts, Body::from(body));
            };
            for (svc, remote, _) in &with_v2 {
                merge_v2(&mut doc, remote, svc);
            }
            let json = serde_json::to_vec(&doc).unwrap_or_default();
            let hash = sha512_hex(&json);
            let m = Arc::new(Merged {
                key,
                json: json.into(),
                hash,
                proto: OnceLock::new(),
            });
            *agg.openapi
                .merged
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&m));
            tracing::info!(
                apiservices = with_v2.len(),
                bytes = m.json.len(),
                "merged extension servers into the OpenAPI v2 document"
            );
            m
        }
    };
    let (body, hash) = if protobuf {
        let (b, h) = merged.proto.get_or_init(|| {
            let value: Value = serde_json::from_slice(&merged.json).unwrap_or(Value::Null);
            let encoded = crate::openapi::encode_v2_protobuf(&value);
            let hash = sha512_hex(&encoded);
            (encoded.into(), hash)
        });
        (b.clone(), h.clone())
    } else {
        (merged.json.clone(), merged.hash.clone())
    };
    let mut headers = parts.headers;
    headers.remove(header::CONTENT_LENGTH);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(if protobuf {
            "application/octet-stream"
        } else {
            "application/json"
        }),
    );
    let etag = format!("\"{hash}\"");
    if let Ok(v) = HeaderValue::from_str(&etag) {
        headers.insert(header::ETAG, v);
    }
    if if_none_match.as_deref().is_some_and(|inm| {
        inm.split(',')
            .any(|t| t.trim() == "*" || t.trim().trim_start_matches("W/") == etag)
    }) {
        headers.remove(header::CONTENT_TYPE);
        return (StatusCode::NOT_MODIFIED, headers).into_response();
    }
    (StatusCode::OK, headers, Body::from(body)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn remote_paths_of_the_group_version_and_definitions_merge_with_conflicts_renamed() {
        let svc = ApiService::parse(&json!({
            "metadata": { "name": "v1.w.example" },
            "spec": { "group": "w.example", "version": "v1", "service": { "name": "s", "namespace": "n" } }
        }))
        .unwrap();
        let mut local = json!({
            "paths": { "/api/v1/pods": {} },
            "definitions": { "Shared": { "type": "string" }, "Same": { "type": "integer" } }
        });
        let remote = json!({
            "paths": {
                "/apis/w.example/v1/things": { "get": { "schema": { "$ref": "#/definitions/Shared" } } },
                "/version": {}
            },
            "definitions": {
                "Shared": { "type": "object" },
                "Same": { "type": "integer" },
                "Thing": { "properties": { "s": { "$ref": "#/definitions/Shared" } } }
            }
        });
        merge_v2(&mut local, &remote, &svc);
        assert!(local["paths"].get("/version").is_none());
        assert_eq!(
            local["paths"]["/apis/w.example/v1/things"]["get"]["schema"]["$ref"],
            "#/definitions/Shared_v2"
        );
        assert_eq!(local["definitions"]["Shared"]["type"], "string");
        assert_eq!(local["definitions"]["Shared_v2"]["type"], "object");
        assert_eq!(
            local["definitions"]["Thing"]["properties"]["s"]["$ref"],
            "#/definitions/Shared_v2"
        );
        assert!(local["definitions"].get("Same_v2").is_none());
    }
}
