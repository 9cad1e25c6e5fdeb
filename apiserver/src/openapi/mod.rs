//! OpenAPI documents of the served resources, generated at start-up from the k8s-openapi types
//! (their schemars JSON Schemas) and the registry: the v3 index (`/openapi/v3`), one v3
//! document per group version (`/openapi/v3/api/v1`, `/openapi/v3/apis/<group>/<version>`),
//! and a Swagger 2.0 document converted from them (`/openapi/v2`, JSON or gnostic protobuf).
//!
//! kubectl needs the v3 documents for `apply`/`create`/`edit`/`diff` (its server-side
//! validation gate: the kind's `patch` operation must list `fieldValidation`) and for
//! `explain` (schemas with `x-kubernetes-group-version-kind`). It caches the documents by URL,
//! so the caching headers follow kube-openapi's `handler3`: the index links each document with
//! `?hash=<SHA-512 of the document>`; a matching hash is answered as immutable for a year, a
//! stale one with a 301 to the current URL.
//!
//! Custom resources (the served versions of established CRDs) get documents of their own,
//! built when the custom set changes (`custom`, with each kind's schema from its CRD by
//! `custom_schema`); the built-in documents stay as built at start-up, and with no custom
//! resources served nothing else is looked at.
//!
//! Module map: `kinds` (kind → k8s-openapi type), `schemas` (`components.schemas`),
//! `extensions` (the `x-kubernetes-*` patch/list/map extensions), `enums` (`enum` values of
//! `+enum` string fields), `paths`
//! (operations), `v2` (the Swagger 2.0 conversion), `v2_proto` (its protobuf encoding).

mod custom;
mod custom_schema;
mod enums;
mod extensions;
mod kinds;
mod paths;
mod schemas;
#[cfg(test)]
mod tests;
mod v2;
mod v2_proto;

use std::collections::BTreeMap;
use std::time::Instant;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::{self, HeaderMap, HeaderValue};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha512};

use crate::registry::Registry;

/// The content type of the documents.
const JSON: &str = "application/json";
/// What kube-openapi's `http.ServeContent` labels the protobuf v2 document with: it sets no
/// type, so Go sniffs the binary body. (The negotiated media type itself, with its `@`, is
/// no valid `Content-Type`: client-go's `mime.ParseMediaType` rejects it.)
const OCTET_STREAM: &str = "application/octet-stream";
/// The media types clients ask for the protobuf v2 document with (current and older spelling).
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
const V2_PROTOBUF_OLD: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// One serialized document and its hash (kube-openapi's: upper-case hex SHA-512).
struct Document {
    body: bytes::Bytes,
    hash: String,
}

impl Document {
    fn new(value: &Value) -> Self {
        Self::from_bytes(serde_json::to_vec(value).unwrap_or_default())
    }

    fn from_bytes(body: Vec<u8>) -> Self {
        let hash = Sha512::digest(&body)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        Document {
            body: body.into(),
            hash,
        }
    }
}

/// OpenAPI documents for the served resources, built once at start-up.
pub struct OpenApi {
    /// The v3 index (`/openapi/v3`).
    index: bytes::Bytes,
    /// When the documents were built: the v2 document's `Last-Modified` (kube-openapi's
    /// `lastModified`, set when the spec is built, as `http.ServeContent` sends it).
    last_modified: String,
    /// v3 documents by index key: `api/v1`, `apis/apps/v1`, …
    v3: BTreeMap<String, Document>,
    /// The Swagger 2.0 document.
    v2: Document,
    /// Its protobuf encoding (`openapi.v2.Document`), built on first request.
    v2_proto: std::sync::OnceLock<Document>,
    /// The apimachinery schemas custom resources' documents reference (`ObjectMeta`,
    /// `ListMeta`, `Status`, `DeleteOptions`, `Patch`, `WatchEvent`, autoscaling/v1 `Scale`)
    /// and everything they reference.
    meta_defs: Map<String, Value>,
    /// Their names.
    meta: schemas::MetaNames,
    /// The documents of the custom resources last served.
    custom: custom::Cache,
}

impl std::fmt::Debug for OpenApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenApi")
            .field("v3", &self.v3.keys().collect::<Vec<_>>())
            .field(
                "v3_bytes",
                &self.v3.values().map(|d| d.body.len()).sum::<usize>(),
            )
            .field("v2_bytes", &self.v2.body.len())
            .finish()
    }
}

/// The index key of a group version: `api/v1` or `apis/<group>/<version>`.
fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3/<key>?hash=<hash>`.
fn hash_url(key: &str, hash: &str) -> String {
    format!("/openapi/v3/{key}?hash={hash}")
}

impl OpenApi {
    /// Builds the v3 index and per-group-version documents, and the v2 document, for
    /// `registry`.
    pub fn build(registry: &Registry) -> OpenApi {
        let started = Instant::now();
        let known = kinds::all();
        // The served resources with their types; a resource without a known type is left out
        // of the documents (a unit test keeps this from happening).
        let mut served = Vec::new();
        // componentstatuses is computed, not stored, but documented as upstream does.
        let computed = registry.find("", "v1", "componentstatuses");
        for r in registry.resources().iter().copied().chain(computed) {
            match known
                .iter()
                .find(|k| (k.group, k.version, k.kind) == (r.group, r.version, r.kind))
            {
                Some(k) => served.push((r, *k)),
                None => tracing::warn!(
                    group = r.group,
                    version = r.version,
                    kind = r.kind,
                    "no k8s-openapi type for a served kind; left out of OpenAPI"
                ),
            }
        }
        let kind_types: Vec<_> = served.iter().map(|(_, k)| *k).collect();
        let defs = schemas::generate(&kind_types);
        let meta_defs: Map<String, Value> = schemas::closure(
            &defs.schemas,
            [
                &defs.meta.object_meta,
                &defs.meta.list_meta,
                &defs.meta.status,
                &defs.meta.delete_options,
                &defs.meta.patch,
                &defs.meta.watch_event,
                &defs.meta.scale,
            ]
            .map(String::clone),
        )
        .into_iter()
        .collect();

        let mut v3_values: BTreeMap<String, Value> = BTreeMap::new();
        for (group, versions) in registry.groups() {
            for version in versions {
                let mut paths = Map::new();
                paths::add_resource_list(&mut paths, group, version, &defs.meta);
                let mut roots = vec![
                    defs.meta.status.clone(),
                    defs.meta.delete_options.clone(),
                    defs.meta.patch.clone(),
                    defs.meta.watch_event.clone(),
                    defs.meta.api_resource_list.clone(),
                ];
                for (r, k) in served
                    .iter()
                    .filter(|(r, _)| r.group == group && r.version == version)
                {
                    let name = (k.schema_name)();
                    paths::add_resource(&mut paths, r, &name, &defs.meta);
                    roots.push(format!("{name}List"));
                    roots.push(name.into_owned());
                }
                let components = schemas::closure(&defs.schemas, roots);
                v3_values.insert(
                    gv_key(group, version),
                    json!({
                        "openapi": "3.0.0",
                        "info": { "title": "Kubernetes", "version": "unversioned" },
                        "paths": paths,
                        "components": { "schemas": components },
                    }),
                );
            }
        }
        let v2 = Document::new(&v2::convert(v3_values.values()));
        let v3: BTreeMap<String, Document> = v3_values
            .iter()
            .map(|(k, v)| (k.clone(), Document::new(v)))
            .collect();
        let index_paths: Map<String, Value> = v3
            .iter()
            .map(|(k, d)| {
                (
                    k.clone(),
                    json!({ "serverRelativeURL": hash_url(k, &d.hash) }),
                )
            })
            .collect();
        let index = serde_json::to_vec(&json!({ "paths": index_paths }))
            .unwrap_or_default()
            .into();
        let api = OpenApi {
            index,
            last_modified: http_date(),
            v3,
            v2,
            v2_proto: std::sync::OnceLock::new(),
            meta_defs,
            meta: defs.meta,
            custom: std::sync::Mutex::new(None),
        };
        tracing::info!(
            elapsed_ms = started.elapsed().as_millis() as u64,
            documents = api.v3.len(),
            v3_bytes = api.v3.values().map(|d| d.body.len()).sum::<usize>(),
            v2_bytes = api.v2.body.len(),
            "built the OpenAPI documents"
        );
        api
    }

    /// Handles GET `/openapi/v3`, `/openapi/v3/<api/v1 | apis/<g>/<v>>[?hash=H]`, and
    /// `/openapi/v2` (request path, query, `Accept` header) with a complete response, as
    /// kube-openapi does: GV documents carry `ETag: "<HASH>"`; with a matching `hash` they are
    /// `Cache-Control: public, immutable` with a one-year `Expires`, with a stale one a 301 to
    /// the current URL; without `hash`, `Cache-Control: no-cache, private`. `/openapi/v2` is
    /// JSON or, when the `Accept` prefers it, gnostic protobuf with its own ETag. An `Accept`
    /// that admits none of the served forms gets 406; an unknown document 404.
    /// The documents include the custom resources being served
    /// (`registry::custom::served`).
    pub fn serve(&self, path: &str, query: Option<&str>, accept: Option<&str>) -> Response {
        self.serve_with(&crate::registry::custom::served(), path, query, accept)
    }

    /// [`OpenApi::serve`] with `served` as the custom resources.
    fn serve_with(
        &self,
        served: &[crate::registry::custom::Served],
        path: &str,
        query: Option<&str>,
        accept: Option<&str>,
    ) -> Response {
        let custom = (!served.is_empty()).then(|| self.custom_docs(served));
        let custom = custom.as_deref();
        let document = match path {
            "/openapi/v3" => None,
            "/openapi/v2" => Some(("", custom.map_or(&self.v2, |c| c.v2(self)))),
            _ => match path.strip_prefix("/openapi/v3/").and_then(|key| {
                self.v3
                    .get_key_value(key)
                    .or_else(|| custom.and_then(|c| c.v3.get_key_value(key)))
            }) {
                Some((key, doc)) => Some((key.as_str(), doc)),
                None => return not_found(),
            },
        };
        let index = custom.map_or(&self.index, |c| &c.index);
        let last_modified = custom.map_or(&self.last_modified, |c| &c.last_modified);
        let v2 = path == "/openapi/v2";
        let content_type = if v2 {
            match negotiate_v2(accept) {
                Some(t) => t,
                None => return plain(StatusCode::NOT_ACCEPTABLE, "406 Not Acceptable\n"),
            }
        } else if accepts_json(accept) {
            JSON
        } else {
            return plain(StatusCode::NOT_ACCEPTABLE, "406 Not Acceptable\n");
        };
        let protobuf = content_type != JSON;
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(if protobuf { OCTET_STREAM } else { JSON }),
        );
        headers.insert(header::VARY, HeaderValue::from_static("Accept"));
        let Some((key, doc)) = document else {
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache, private"),
            );
            return (StatusCode::OK, headers, Body::from(index.clone())).into_response();
        };
        let proto_doc = protobuf.then(|| match custom {
            Some(c) => c.v2_protobuf(self),
            None => self.v2_protobuf(),
        });
        let doc = proto_doc.unwrap_or(doc);
        if let Ok(etag) = HeaderValue::from_str(&format!("\"{}\"", doc.hash)) {
            headers.insert(header::ETAG, etag);
        }
        if v2 && let Ok(modified) = HeaderValue::from_str(last_modified) {
            headers.insert(header::LAST_MODIFIED, modified);
        }
        let hash = if key.is_empty() {
            None // v2 has no hash URLs.
        } else {
            query_param(query, "hash")
        };
        match hash {
            Some(h) if h == doc.hash => {
                headers.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("public, immutable"),
                );
                if let Some(expires) =
                    one_year_from_now().and_then(|e| HeaderValue::from_str(&e).ok())
                {
                    headers.insert(header::EXPIRES, expires);
                }
            }
            Some(_) => {
                let mut redirect = HeaderMap::new();
                if let Ok(location) = HeaderValue::from_str(&hash_url(key, &doc.hash)) {
                    redirect.insert(header::LOCATION, location);
                }
                redirect.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("no-cache, private"),
                );
                return (StatusCode::MOVED_PERMANENTLY, redirect).into_response();
            }
            None => {
                headers.insert(
                    header::CACHE_CONTROL,
                    HeaderValue::from_static("no-cache, private"),
                );
            }
        }
        (StatusCode::OK, headers, Body::from(doc.body.clone())).into_response()
    }

    /// [`OpenApi::serve`] with `If-None-Match`: a response whose `ETag` is listed there (or
    /// `*`) becomes a 304 without body, as Go's `http.ServeContent` answers in kube-openapi.
    pub fn serve_conditional(
        &self,
        path: &str,
        query: Option<&str>,
        accept: Option<&str>,
        if_none_match: Option<&str>,
    ) -> Response {
        self.serve_conditional_with(
            &crate::registry::custom::served(),
            path,
            query,
            accept,
            if_none_match,
        )
    }

    /// [`OpenApi::serve_conditional`] with `served` as the custom resources.
    fn serve_conditional_with(
        &self,
        served: &[crate::registry::custom::Served],
        path: &str,
        query: Option<&str>,
        accept: Option<&str>,
        if_none_match: Option<&str>,
    ) -> Response {
        let resp = self.serve_with(served, path, query, accept);
        let (Some(inm), Some(etag)) = (if_none_match, resp.headers().get(header::ETAG)) else {
            return resp;
        };
        if resp.status() != StatusCode::OK || !etag_matches(inm, etag.as_bytes()) {
            return resp;
        }
        let mut headers = HeaderMap::new();
        for name in [
            header::ETAG,
            header::CACHE_CONTROL,
            header::VARY,
            header::EXPIRES,
            header::LAST_MODIFIED,
        ] {
            if let Some(v) = resp.headers().get(&name) {
                headers.insert(name, v.clone());
            }
        }
        (StatusCode::NOT_MODIFIED, headers).into_response()
    }

    /// The protobuf v2 document and its own hash (kube-openapi caches the encoding and its
    /// ETag separately from the JSON's), encoded on first use from the JSON document.
    fn v2_protobuf(&self) -> &Document {
        self.v2_proto.get_or_init(|| {
            let started = Instant::now();
            let value: Value = serde_json::from_slice(&self.v2.body).unwrap_or(Value::Null);
            let encoded = Document::from_bytes(v2_proto::encode(&value));
            tracing::info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                bytes = encoded.body.len(),
                "encoded the OpenAPI v2 document as protobuf"
            );
            encoded
        })
    }
}

/// The gnostic protobuf encoding of a Swagger 2.0 document (the aggregator's merged one).
pub(crate) fn encode_v2_protobuf(doc: &Value) -> Vec<u8> {
    v2_proto::encode(doc)
}

/// Whether `If-None-Match` (a list of entity tags, weak or strong, or `*`) lists `etag`.
fn etag_matches(if_none_match: &str, etag: &[u8]) -> bool {
    if_none_match.split(',').any(|t| {
        let t = t.trim();
        t == "*" || t.trim_start_matches("W/").as_bytes() == etag
    })
}

/// The content type `/openapi/v2` answers `accept` with, as kube-openapi's handler negotiates:
/// the clauses by descending quality (header order among equals), the first one matching
/// JSON or one of the protobuf types (wildcards match JSON first); no header means JSON;
/// `None` is a 406.
pub(crate) fn negotiate_v2(accept: Option<&str>) -> Option<&'static str> {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return Some(JSON);
    };
    let mut clauses: Vec<(f32, String)> = accept
        .split(',')
        .map(|clause| {
            let mut parts = clause.split(';');
            let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .find_map(|p| {
                    p.trim()
                        .strip_prefix("q=")
                        .map(str::trim)
                        .map(str::to_owned)
                })
                .and_then(|q| q.parse::<f32>().ok())
                .unwrap_or(1.0);
            (q, range)
        })
        .filter(|(q, _)| *q > 0.0)
        .collect();
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0));
    clauses.iter().find_map(|(_, range)| match range.as_str() {
        "application/json" | "application/*" | "*/*" => Some(JSON),
        // As kube-openapi: both spellings are accepted, the answer is always labelled with
        // the one Go's mime parser accepts (an `@` makes kubectl's validation fail).
        V2_PROTOBUF | V2_PROTOBUF_OLD => Some(V2_PROTOBUF_OLD),
        _ => None,
    })
}

fn plain(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        body,
    )
        .into_response()
}

/// Go's `http.NotFound`, as kube-openapi answers an unknown group version.
fn not_found() -> Response {
    plain(StatusCode::NOT_FOUND, "404 page not found\n")
}

/// Whether `accept` admits `application/json` (`application/json`, `application/*`, `*/*`, or
/// no header at all); clauses with `q=0` admit nothing.
fn accepts_json(accept: Option<&str>) -> bool {
    let Some(accept) = accept.map(str::trim).filter(|a| !a.is_empty()) else {
        return true;
    };
    accept.split(',').any(|clause| {
        let mut parts = clause.split(';');
        let range = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let refused = parts.any(|p| {
            p.trim()
                .strip_prefix("q=")
                .and_then(|q| q.trim().parse::<f32>().ok())
                .is_some_and(|q| q <= 0.0)
        });
        !refused && matches!(range.as_str(), "application/json" | "application/*" | "*/*")
    })
}

/// The (undecoded) value of query parameter `name`.
fn query_param<'a>(query: Option<&'a str>, name: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// The current time in HTTP date format (RFC 1123, GMT).
fn http_date() -> String {
    jiff::Timestamp::now()
        .to_zoned(jiff::tz::TimeZone::UTC)
        .strftime("%a, %d %b %Y %H:%M:%S GMT")
        .to_string()
}

/// A one-year `Expires` value in HTTP date format (RFC 1123, GMT).
fn one_year_from_now() -> Option<String> {
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let later = now.checked_add(jiff::Span::new().years(1)).ok()?;
    Some(later.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string())
}
