//! Discovery documents, built from the registry: aggregated v2 on `/api` and `/apis` (when
//! the client asks for it, with the exact content type kubectl checks), and the legacy
//! `APIVersions`, `APIGroupList`, `APIGroup` and per-version `APIResourceList` documents.
//!
//! The aggregated documents carry upstream's `ETag` (the quoted upper-case hex SHA-512 of the
//! document; `Cache-Control: public`, `Vary: Accept`) and answer a matching `If-None-Match`
//! with 304, so kubectl's discovery cache refreshes when CRDs change. They are kept per
//! [`crate::registry::Registry::custom_generation`] and built again when it moves. The legacy
//! documents have no `ETag`, as upstream's. A client whose first aggregated clause is
//! `application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList`
//! (client-go's protobuf clients) gets the `apidiscovery/v2` message in the `k8s\0`
//! envelope, encoded once per build, with the JSON's ETag (as upstream).
//!
//! The legacy documents are negotiated as upstream's `WriteObjectNegotiated` does ([`negotiated`]):
//! JSON, YAML, or protobuf (meta/v1's `APIVersions`, `APIGroupList`, `APIGroup`,
//! `APIResourceList` in the `k8s\0` envelope; `/api` and `/api/v1` with an empty
//! `apiVersion`, as upstream's stripVersionEncoder writes them).
//!
//! Documents are written as Go writes upstream's structs: keys in struct order
//! (`{"name":…,"singularName":…,"namespaced":…,"kind":…,"verbs":[…],"shortNames":[…],
//! "categories":[…],"storageVersionHash":…}`), a newline at the end. `storageVersionHash` is
//! upstream's: base64 of the first 8 bytes of the SHA-256 of `group/version/kind` of the
//! version objects are stored at, on stored resources only (not subresources, reviews or
//! virtual resources); aggregated v2 documents have no such field.

use std::sync::{Mutex, PoisonError};

use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256, Sha512};

use crate::codec::ordered::Ordered;

use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::catalog::{KindClass, ResourceInfo};
use crate::registry::{Registry, SERVED_SUBRESOURCES};
use crate::request_info::RequestInfo;

/// Content type of aggregated discovery v2.
pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Verbs the generic handlers implement.
const SERVED_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn verbs(r: &ResourceInfo) -> Vec<&'static str> {
    r.verbs
        .iter()
        .copied()
        .filter(|v| SERVED_VERBS.contains(v))
        .collect()
}

/// Content type of aggregated discovery v2 in protobuf.
pub const AGGREGATED_V2_PROTOBUF: &str =
    "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Whether the first Accept clause naming aggregated discovery v2 is its protobuf form
/// (client-go's protobuf clients list it before the JSON one).
pub fn aggregated_in_protobuf(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .and_then(|a| {
            a.split(',')
                .find(|t| t.contains("as=APIGroupDiscoveryList") && t.contains("v=v2;"))
        })
        .is_some_and(|t| t.trim_start().starts_with(crate::codec::PROTOBUF))
}

fn wants_aggregated(headers: &HeaderMap) -> bool {
    headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| {
            a.split(',')
                .any(|t| t.contains("as=APIGroupDiscoveryList") && t.contains("v=v2;"))
        })
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

fn strs(items: &[&str]) -> Ordered {
    Ordered::Value(json!(items))
}

/// A `GroupVersionKind` (`{"group":…,"version":…,"kind":…}`).
fn gvk(group: &str, version: &str, kind: &str) -> Ordered {
    Ordered::object(vec![
        ("group", group.into()),
        ("version", version.into()),
        ("kind", kind.into()),
    ])
}

/// An `APIResourceDiscovery` of aggregated discovery v2, in its struct's order.
fn aggregated_resource(r: &ResourceInfo) -> Ordered {
    let subresources: Vec<Ordered> = r
        .subresources
        .iter()
        .filter(|s| SERVED_SUBRESOURCES.contains(&s.name))
        .map(|s| {
            Ordered::object(vec![
                ("subresource", s.name.into()),
                ("responseKind", gvk(s.group, s.version, s.kind)),
                ("verbs", strs(s.verbs)),
            ])
        })
        .collect();
    let mut v = Ordered::object(vec![
        ("resource", r.plural.into()),
        ("responseKind", gvk(r.group, r.version, r.kind)),
        (
            "scope",
            if r.namespaced {
                "Namespaced"
            } else {
                "Cluster"
            }
            .into(),
        ),
        ("singularResource", r.singular.into()),
        ("verbs", strs(&verbs(r))),
    ]);
    if !r.short_names.is_empty() {
        v.push("shortNames", strs(r.short_names));
    }
    if !r.categories.is_empty() {
        v.push("categories", strs(r.categories));
    }
    if !subresources.is_empty() {
        v.push("subresources", Ordered::Array(subresources));
    }
    v
}

fn aggregated(registry: &Registry, core: bool) -> Ordered {
    let items: Vec<Ordered> = registry
        .discovery_groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Ordered> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Ordered> = registry
                        .discovery_in_version(group, v)
                        .into_iter()
                        .map(aggregated_resource)
                        .collect();
                    Ordered::object(vec![
                        ("version", (*v).into()),
                        ("resources", Ordered::Array(resources)),
                        ("freshness", "Current".into()),
                    ])
                })
                .collect();
            Ordered::object(vec![
                (
                    "metadata",
                    Ordered::object(vec![
                        ("name", group.into()),
                        ("creationTimestamp", Ordered::Value(Value::Null)),
                    ]),
                ),
                ("versions", Ordered::Array(versions)),
            ])
        })
        .collect();
    Ordered::object(vec![
        ("kind", "APIGroupDiscoveryList".into()),
        ("apiVersion", "apidiscovery.k8s.io/v2".into()),
        ("metadata", Ordered::object(Vec::new())),
        ("items", Ordered::Array(items)),
    ])
}

/// A JSON response as Go's encoder writes it: the bytes and a newline.
fn with_type(doc: &Ordered, content_type: &'static str) -> Response {
    let mut body = doc.to_vec();
    body.push(b'\n');
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    resp
}

/// Upstream's `StorageVersionHash`: base64 of the first 8 bytes of the SHA-256 of
/// `group/version/kind` of the version `r`'s objects are stored at (events.k8s.io events
/// are core v1 Events, autoscaling/v1 HPAs autoscaling/v2 ones, a custom resource its CRD's
/// storage version). `None` for resources that are not stored (reviews, virtual ones).
pub fn storage_version_hash(r: &ResourceInfo) -> Option<String> {
    let (group, version, kind) = match r.kind_class {
        KindClass::Review | KindClass::Virtual => return None,
        KindClass::Custom { storage_version } => (r.group, storage_version, r.kind),
        KindClass::Stored => match crate::registry::convert::storage_resource(r) {
            Some(s) => (s.group, s.version, s.kind),
            None => (r.group, r.version, r.kind),
        },
    };
    let digest = Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    Some(base64::engine::general_purpose::STANDARD.encode(&digest[..8]))
}

/// One serialized aggregated document and its ETag.
struct Aggregated {
    /// Which registry (its address) it was built from.
    registry: usize,
    /// The registry's custom generation it was built at.
    generation: u64,
    /// `/api` (true) or `/apis`.
    core: bool,
    body: bytes::Bytes,
    /// The same document in protobuf (`None` if it could not be encoded).
    protobuf: Option<bytes::Bytes>,
    /// `"<SHA-512, upper-case hex>"`.
    etag: String,
}

/// The aggregated documents last built (one per registry and root).
static AGGREGATED_CACHE: Mutex<Vec<Aggregated>> = Mutex::new(Vec::new());

/// The aggregated document of `/api` (`core`) or `/apis` and its ETag, from the cache when
/// the custom resources have not changed since it was built.
fn aggregated_cached(reg: &Registry, core: bool) -> (bytes::Bytes, Option<bytes::Bytes>, String) {
    let registry = reg as *const Registry as usize;
    let generation = reg.custom_generation();
    {
        let cache = AGGREGATED_CACHE
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(a) = cache
            .iter()
            .find(|a| a.registry == registry && a.core == core && a.generation == generation)
        {
            return (a.body.clone(), a.protobuf.clone(), a.etag.clone());
        }
    }
    // The ETag hashes the document as `json.Marshal` writes it; the body adds the newline
    // of Go's encoder.
    let mut json = aggregated(reg, core).to_vec();
    let hash: String = Sha512::digest(&json)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let etag = format!("\"{hash}\"");
    // The protobuf form (upstream's ETag is the JSON's for both), encoded once per build.
    let protobuf = match serde_json::from_slice::<Value>(&json) {
        Ok(Value::Object(doc)) => match crate::codec::protobuf_encode::encode_object(&doc) {
            Ok(b) => Some(bytes::Bytes::from(b)),
            Err(e) => {
                tracing::warn!(err = %e, "aggregated discovery not encodable as protobuf");
                None
            }
        },
        _ => None,
    };
    json.push(b'\n');
    let body = bytes::Bytes::from(json);
    let mut cache = AGGREGATED_CACHE
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    cache.retain(|a| !(a.registry == registry && a.core == core));
    // A process serves one registry; tests may build a few. Keep the cache bounded anyway.
    if cache.len() >= 16 {
        cache.remove(0);
    }
    cache.push(Aggregated {
        registry,
        generation,
        core,
        body: body.clone(),
        protobuf: protobuf.clone(),
        etag: etag.clone(),
    });
    (body, protobuf, etag)
}

/// The aggregated document of `/api` or `/apis` as upstream's `ServeHTTPWithETag` answers:
/// `ETag`, `Vary: Accept`, `Cache-Control: public`, and 304 without a body when
/// `If-None-Match` is exactly the ETag.
fn serve_aggregated(registry: &Registry, headers: &HeaderMap, core: bool) -> Response {
    let (json, protobuf, etag) = aggregated_cached(registry, core);
    let mut out = HeaderMap::new();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        out.insert(http::header::ETAG, v);
    }
    out.insert(http::header::VARY, HeaderValue::from_static("Accept"));
    out.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("public"),
    );
    let matches = headers
        .get(http::header::IF_NONE_MATCH)
        .is_some_and(|v| v.as_bytes() == etag.as_bytes());
    if matches {
        return (StatusCode::NOT_MODIFIED, out).into_response();
    }
    let (body, content_type) = match protobuf {
        Some(pb) if aggregated_in_protobuf(headers) => (pb, AGGREGATED_V2_PROTOBUF),
        _ => (json, AGGREGATED_V2),
    };
    out.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    (StatusCode::OK, out, body).into_response()
}

/// The legacy `/api` or `/apis` document in the form the request negotiated, as upstream's
/// `WriteObjectNegotiated` with the default restrictions: indented JSON for `?pretty=true`
/// and curl/wget/browser agents, YAML for `Accept: application/yaml`, protobuf when asked.
/// The aggregated documents keep their own content type.
pub async fn negotiated(resp: Response, headers: &HeaderMap, query: Option<&str>) -> Response {
    use crate::codec::negotiate::{self, Restrictions};
    use crate::codec::respond::{self, Negotiated};
    let aggregated = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_none_or(|v| {
            v.as_bytes() == AGGREGATED_V2.as_bytes()
                || v.as_bytes() == AGGREGATED_V2_PROTOBUF.as_bytes()
        });
    if aggregated || !resp.status().is_success() {
        return resp;
    }
    let header = |name: http::header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    };
    let pretty = negotiate::pretty_by_request(query, header(http::header::USER_AGENT));
    let out = negotiate::negotiate(header(http::header::ACCEPT), pretty, Restrictions::Default);
    let neg = Negotiated {
        output: out.unwrap_or(Negotiated::plain().output),
        error: out,
    };
    respond::finish(resp, &neg, None).await
}

/// `GET /api`.
pub fn api(ctx: &Ctx, headers: &HeaderMap, server_address: &str) -> Response {
    if wants_aggregated(headers) {
        return serve_aggregated(&ctx.registry, headers, true);
    }
    let doc = Ordered::object(vec![
        ("kind", "APIVersions".into()),
        ("versions", strs(&["v1"])),
        (
            "serverAddressByClientCIDRs",
            Ordered::Array(vec![Ordered::object(vec![
                ("clientCIDR", "0.0.0.0/0".into()),
                ("serverAddress", server_address.into()),
            ])]),
        ),
    ]);
    with_type(&doc, "application/json")
}

/// An `APIGroup`; `typed`: with its `kind` and `apiVersion` (the `/apis/<group>` document).
fn api_group(group: &str, versions: &[&str], typed: bool) -> Ordered {
    let version = |v: &str| {
        Ordered::object(vec![
            ("groupVersion", group_version(group, v).into()),
            ("version", v.into()),
        ])
    };
    let mut doc = Ordered::object(Vec::new());
    if typed {
        doc.push("kind", "APIGroup".into());
        doc.push("apiVersion", "v1".into());
    }
    doc.push("name", group.into());
    doc.push(
        "versions",
        Ordered::Array(versions.iter().map(|v| version(v)).collect()),
    );
    if let Some(preferred) = versions.first() {
        doc.push("preferredVersion", version(preferred));
    }
    doc
}

/// `GET /apis`.
pub fn apis(ctx: &Ctx, headers: &HeaderMap) -> Response {
    if wants_aggregated(headers) {
        return serve_aggregated(&ctx.registry, headers, false);
    }
    let groups: Vec<Ordered> = ctx
        .registry
        .discovery_groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| api_group(g, &vs, false))
        .collect();
    let doc = Ordered::object(vec![
        ("kind", "APIGroupList".into()),
        ("apiVersion", "v1".into()),
        ("groups", Ordered::Array(groups)),
    ]);
    with_type(&doc, "application/json")
}

/// An `APIResourceList`, each `APIResource` in its struct's order.
fn resource_list(ctx: &Ctx, group: &str, version: &str) -> Ordered {
    let mut resources = Vec::new();
    for r in ctx.registry.discovery_in_version(group, version) {
        let mut entry = Ordered::object(vec![
            ("name", r.plural.into()),
            ("singularName", r.singular.into()),
            ("namespaced", r.namespaced.into()),
            ("kind", r.kind.into()),
            ("verbs", strs(&verbs(r))),
        ]);
        if !r.short_names.is_empty() {
            entry.push("shortNames", strs(r.short_names));
        }
        if !r.categories.is_empty() {
            entry.push("categories", strs(r.categories));
        }
        if let Some(hash) = storage_version_hash(r) {
            entry.push("storageVersionHash", hash.into());
        }
        resources.push(entry);
        for s in r
            .subresources
            .iter()
            .filter(|s| SERVED_SUBRESOURCES.contains(&s.name))
        {
            let mut sub = Ordered::object(vec![
                ("name", format!("{}/{}", r.plural, s.name).into()),
                ("singularName", "".into()),
                ("namespaced", r.namespaced.into()),
            ]);
            if s.group != r.group || s.version != r.version {
                sub.push("group", s.group.into());
                sub.push("version", s.version.into());
            }
            sub.push("kind", s.kind.into());
            sub.push("verbs", strs(s.verbs));
            resources.push(sub);
        }
    }
    // The core group's document has no apiVersion: upstream writes `/api/v1` through its
    // stripVersionEncoder (`keepUnversioned("")`), JSON and protobuf alike.
    let mut doc = Ordered::object(vec![("kind", "APIResourceList".into())]);
    if !group.is_empty() {
        doc.push("apiVersion", "v1".into());
    }
    doc.push("groupVersion", group_version(group, version).into());
    doc.push("resources", Ordered::Array(resources));
    doc
}

/// `GET /api/v1`, `GET /apis/<group>` and `GET /apis/<group>/<version>`.
pub fn serve_group_version(ctx: &Ctx, info: &RequestInfo) -> Result<Response> {
    if info.verb != "get" && info.verb != "head" {
        return Err(ApiError::MethodNotAllowed);
    }
    let groups = ctx.registry.discovery_groups();
    let versions = groups
        .iter()
        .find(|(g, _)| *g == info.group)
        .map(|(_, vs)| vs.clone())
        .ok_or(ApiError::NoRoute)?;
    if info.version.is_empty() {
        if info.api_prefix == "apis" && !info.group.is_empty() {
            let doc = api_group(&info.group, &versions, true);
            return Ok(with_type(&doc, "application/json"));
        }
        return Err(ApiError::NoRoute);
    }
    if !versions.contains(&info.version.as_str()) {
        return Err(ApiError::NoRoute);
    }
    Ok(with_type(
        &resource_list(ctx, &info.group, &info.version),
        "application/json",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(
        registry: &Registry,
        core: bool,
        inm: Option<&str>,
    ) -> (StatusCode, HeaderMap, Vec<u8>) {
        let mut headers = HeaderMap::new();
        headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static(AGGREGATED_V2),
        );
        if let Some(inm) = inm {
            headers.insert(
                http::header::IF_NONE_MATCH,
                HeaderValue::from_str(inm).unwrap(),
            );
        }
        let resp = serve_aggregated(registry, &headers, core);
        let status = resp.status();
        let headers = resp.headers().clone();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, headers, body.to_vec())
    }

    fn etag(headers: &HeaderMap) -> String {
        headers[http::header::ETAG].to_str().unwrap().to_owned()
    }

    #[tokio::test]
    async fn aggregated_discovery_has_an_etag_that_follows_the_custom_resources() {
        let registry = Registry::builtin();
        let (status, headers, body) = get(&registry, false, None).await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(headers[http::header::CONTENT_TYPE], AGGREGATED_V2);
        assert_eq!(headers[http::header::VARY], "Accept");
        assert_eq!(headers[http::header::CACHE_CONTROL], "public");
        let first = etag(&headers);
        assert_eq!(body.last(), Some(&b'\n'));
        let hash: String = Sha512::digest(&body[..body.len() - 1])
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        assert_eq!(first, format!("\"{hash}\""));
        // `/api` has its own.
        let (_, core_headers, _) = get(&registry, true, None).await;
        assert_ne!(etag(&core_headers), first);

        // A matching If-None-Match is a 304 without a body; another one gets the document.
        let (status, headers, body) = get(&registry, false, Some(&first)).await;
        assert_eq!(status, StatusCode::NOT_MODIFIED);
        assert!(body.is_empty());
        assert_eq!(etag(&headers), first);
        let (status, _, _) = get(&registry, false, Some("\"stale\"")).await;
        assert_eq!(status, StatusCode::OK);

        // A CRD served: a new document and ETag; the old ETag no longer matches.
        let crd = json!({
            "metadata": { "name": "gizmos.etag.example.com", "uid": "u1" },
            "spec": {
                "group": "etag.example.com", "scope": "Cluster",
                "names": { "plural": "gizmos", "kind": "Gizmo" },
                "versions": [{ "name": "v1", "served": true, "storage": true }],
            },
            "status": {
                "acceptedNames": { "plural": "gizmos", "singular": "gizmo", "kind": "Gizmo" },
                "conditions": [{ "type": "Established", "status": "True" }],
            },
        });
        assert!(registry.set_custom(crate::registry::custom::versions_of(&crd)));
        let (status, headers, body) = get(&registry, false, Some(&first)).await;
        assert_eq!(status, StatusCode::OK);
        assert_ne!(etag(&headers), first);
        let doc: Value = serde_json::from_slice(&body).unwrap();
        assert!(
            doc["items"]
                .as_array()
                .unwrap()
                .iter()
                .any(|g| g["metadata"]["name"] == "etag.example.com"),
            "{doc}"
        );
        registry.set_custom(Vec::new());
    }
}
