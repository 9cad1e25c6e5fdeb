//! The last step of every resource response: the negotiated [`Output`] applied to the JSON a
//! handler wrote.
//!
//! Handlers write plain JSON (objects, lists, Tables, Status errors). When the client asked
//! for exactly that, the body passes through untouched (it already ends with the newline Go's
//! `json.Encoder` writes; one is added when it does not). Otherwise the body is decoded once
//! and rewritten here, in one place:
//! - `as=PartialObjectMetadata[List]` becomes the metadata-only form ([`super::partial`]);
//!   `as=Table` of a verb that answered with an object (create, update, patch, delete)
//!   becomes a one-row Table;
//! - YAML ([`super::yaml`]) or indented JSON (no trailing newline, as Go's `MarshalIndent`);
//!   JSON in Go's field order ([`super::go_json`]), errors' Status included.
//!
//! Errors are negotiated again without conversions, as upstream's `ErrorNegotiated` does;
//! when nothing is acceptable they are written as indented JSON (upstream's `WriteRawJSON`).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value, json};

use super::negotiate::{self, Convert, Media, MetaVersion, Output, Restrictions};
use crate::error::ApiError;
use crate::registry::catalog::ResourceInfo;

/// The negotiated outputs of one request: for its answer and for an error.
#[derive(Debug, Clone, Copy)]
pub struct Negotiated {
    /// The answer's output.
    pub output: Output,
    /// An error's output; `None`: indented JSON.
    pub error: Option<Output>,
}

impl Negotiated {
    /// Negotiates a resource request. `Err` is the 406 to answer, itself negotiated.
    pub fn resource(
        accept: &str,
        query: Option<&str>,
        user_agent: &str,
        custom: bool,
        watch: bool,
    ) -> Result<Negotiated, Negotiated> {
        let pretty = negotiate::pretty_by_request(query, user_agent);
        let restrictions = if custom {
            Restrictions::CustomDefault
        } else {
            Restrictions::Default
        };
        let error = negotiate::negotiate(accept, pretty, restrictions);
        match negotiate::negotiate_resource(accept, pretty, custom, watch) {
            Ok(output) => Ok(Negotiated { output, error }),
            Err(_) => Err(Negotiated {
                output: error.unwrap_or(PLAIN),
                error,
            }),
        }
    }

    /// Plain JSON for everything.
    pub fn plain() -> Negotiated {
        Negotiated {
            output: PLAIN,
            error: Some(PLAIN),
        }
    }
}

const PLAIN: Output = Output {
    media: Media::Json,
    pretty: false,
    convert: None,
};

/// Applies `neg` to a handler's response (see the module doc). `r` is the resource (for a
/// Table of a single object).
pub async fn finish(resp: Response, neg: &Negotiated, r: Option<&ResourceInfo>) -> Response {
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json || resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        return resp;
    }
    let failed = !resp.status().is_success();
    let out = if failed { neg.error } else { Some(neg.output) };
    if !failed
        && out.is_some_and(|o| o.is_plain())
        && resp.extensions().get::<super::Streamed>().is_some()
    {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(err = %e, "response body unreadable");
            return ApiError::Internal(e.to_string()).into_response();
        }
    };
    if out.is_some_and(|o| o.is_plain()) {
        parts.headers.remove(header::CONTENT_LENGTH);
        if failed && let Ok(status) = serde_json::from_slice::<Value>(&bytes) {
            // An error's Status, in Go's field order (small: written again here).
            let mut body = super::go_json::to_vec(&status);
            body.push(b'\n');
            return Response::from_parts(parts, Body::from(body));
        }
        return Response::from_parts(parts, Body::from(with_newline(bytes)));
    }
    let Ok(Value::Object(mut obj)) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let mut status = parts.status;
    let mut out = out;
    if !failed
        && let Some(convert) = neg.output.convert
        && obj.get("kind").and_then(Value::as_str) != Some("Status")
    {
        match apply(convert, obj, r) {
            Ok(converted) => obj = converted,
            Err(e) => {
                status = e.code();
                out = neg.error;
                obj = match e.status() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
            }
        }
    }
    let (body, media) = match out {
        Some(Output {
            media: Media::Protobuf { json_fallback },
            ..
        }) => {
            let (code, body, media) = super::protobuf_encode::answer(&obj, json_fallback, status);
            status = code;
            (body, media)
        }
        _ => encode(&Value::Object(obj), out),
    };
    parts.status = status;
    parts.headers.remove(header::CONTENT_LENGTH);
    parts
        .headers
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    Response::from_parts(parts, Body::from(body))
}

/// `body` ending with a newline (the bytes passed on when they already do).
fn with_newline(body: Bytes) -> Bytes {
    if body.is_empty() || body.ends_with(b"\n") {
        return body;
    }
    let mut v = Vec::with_capacity(body.len() + 1);
    v.extend_from_slice(&body);
    v.push(b'\n');
    Bytes::from(v)
}

/// Converts a successful answer as the client asked.
fn apply(
    convert: Convert,
    obj: Map<String, Value>,
    r: Option<&ResourceInfo>,
) -> Result<Map<String, Value>, ApiError> {
    match convert {
        Convert::PartialObjectMetadata(v) => super::partial::to_partial(&obj, v),
        Convert::PartialObjectMetadataList(v) => super::partial::to_partial_list(&obj, v),
        Convert::Table(v) => Ok(table(obj, v, r)),
    }
}

/// An answer as a Table: Tables (get, list) pass; an object (create, update, patch, delete)
/// becomes a one-row Table, a list (deletecollection) a Table of its items.
fn table(
    obj: Map<String, Value>,
    version: MetaVersion,
    r: Option<&ResourceInfo>,
) -> Map<String, Value> {
    let mut table = match (obj.get("kind").and_then(Value::as_str), r) {
        (Some("Table"), _) | (_, None) => obj,
        (_, Some(r)) => {
            let (objects, meta) = if super::partial::is_list(&obj) {
                let items = obj
                    .get("items")
                    .and_then(Value::as_array)
                    .map(|i| i.iter().filter_map(|o| o.as_object().cloned()).collect())
                    .unwrap_or_default();
                (items, obj.get("metadata").cloned().unwrap_or(json!({})))
            } else {
                let rv = obj
                    .get("metadata")
                    .and_then(|m| m.get("resourceVersion"))
                    .cloned()
                    .unwrap_or(json!(""));
                (vec![obj], json!({ "resourceVersion": rv }))
            };
            match crate::tables::to_table(r, &objects, meta, crate::tables::IncludeObject::Metadata)
            {
                Value::Object(t) => t,
                _ => Map::new(),
            }
        }
    };
    if version == MetaVersion::V1beta1 {
        set_meta_version(&mut table, version);
    }
    table
}

/// Rewrites a v1 Table (and its rows' metadata objects) as `version`.
fn set_meta_version(table: &mut Map<String, Value>, version: MetaVersion) {
    table.insert("apiVersion".into(), json!(version.api_version()));
    if let Some(rows) = table.get_mut("rows").and_then(Value::as_array_mut) {
        for row in rows {
            if let Some(o) = row.get_mut("object").and_then(Value::as_object_mut)
                && o.get("kind").and_then(Value::as_str) == Some("PartialObjectMetadata")
            {
                o.insert("apiVersion".into(), json!(version.api_version()));
            }
        }
    }
}

/// Encodes `value` for `out` (`None`: indented JSON); returns the body and its media type.
pub fn encode(value: &Value, out: Option<Output>) -> (Vec<u8>, &'static str) {
    match out {
        Some(Output {
            media: Media::Yaml, ..
        }) => (super::yaml::to_yaml(value).into_bytes(), "application/yaml"),
        Some(Output { pretty: false, .. }) => {
            let mut v = super::go_json::to_vec(value);
            v.push(b'\n');
            (v, "application/json")
        }
        _ => (super::go_json::to_vec_pretty(value), "application/json"),
    }
}
