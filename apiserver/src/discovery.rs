//! Discovery documents, built from the registry: aggregated v2 on `/api` and `/apis` (when
//! the client asks for it, with the exact content type kubectl checks), and the legacy
//! `APIVersions`, `APIGroupList`, `APIGroup` and per-version `APIResourceList` documents.
//!
//! The aggregated documents carry upstream's `ETag` (the quoted upper-case hex SHA-512 of the
//! document; `Cache-Control: public`, `Vary: Accept`) and answer a matching `If-None-Match`
//! with 304, so kubectl's discovery cache refreshes when CRDs change. They are kept per
//! [`crate::registry::Registry::custom_generation`] and built again when it moves. The legacy
//! documents have no `ETag`, as upstream's.

use std::sync::{Mutex, PoisonError};

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::catalog::ResourceInfo;
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

fn aggregated_resource(r: &ResourceInfo) -> Value {
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .filter(|s| SERVED_SUBRESOURCES.contains(&s.name))
        .map(|s| {
            json!({
                "subresource": s.name,
                "responseKind": { "group": s.group, "version": s.version, "kind": s.kind },
                "verbs": s.verbs,
            })
        })
        .collect();
    let mut v = json!({
        "resource": r.plural,
        "responseKind": { "group": r.group, "version": r.version, "kind": r.kind },
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": verbs(r),
    });
    if !r.short_names.is_empty() {
        v["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        v["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        v["subresources"] = json!(subresources);
    }
    v
}

fn aggregated(registry: &Registry, core: bool) -> Value {
    let items: Vec<Value> = registry
        .discovery_groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> =
                        registry.discovery_in_version(group, v).into_iter().map(aggregated_resource).collect();
                    json!({ "version": v, "resources": resources, "freshness": "Current" })
                })
                .collect();
            json!({ "metadata": { "name": group, "creationTimestamp": null }, "versions": versions })
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

fn with_type(value: &Value, content_type: &'static str) -> Response {
    let mut resp = (StatusCode::OK, axum::Json(value)).into_response();
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    resp
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
    /// `"<SHA-512, upper-case hex>"`.
    etag: String,
}

/// The aggregated documents last built (one per registry and root).
static AGGREGATED_CACHE: Mutex<Vec<Aggregated>> = Mutex::new(Vec::new());

/// The aggregated document of `/api` (`core`) or `/apis` and its ETag, from the cache when
/// the custom resources have not changed since it was built.
fn aggregated_cached(reg: &Registry, core: bool) -> (bytes::Bytes, String) {
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
            return (a.body.clone(), a.etag.clone());
        }
    }
    let body: bytes::Bytes = serde_json::to_vec(&aggregated(reg, core))
        .unwrap_or_default()
        .into();
    let hash: String = Sha512::digest(&body)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect();
    let etag = format!("\"{hash}\"");
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
        etag: etag.clone(),
    });
    (body, etag)
}

/// The aggregated document of `/api` or `/apis` as upstream's `ServeHTTPWithETag` answers:
/// `ETag`, `Vary: Accept`, `Cache-Control: public`, and 304 without a body when
/// `If-None-Match` is exactly the ETag.
fn serve_aggregated(registry: &Registry, headers: &HeaderMap, core: bool) -> Response {
    let (body, etag) = aggregated_cached(registry, core);
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
    out.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(AGGREGATED_V2),
    );
    (StatusCode::OK, out, body).into_response()
}

/// `GET /api`.
pub fn api(ctx: &Ctx, headers: &HeaderMap, server_address: &str) -> Response {
    if wants_aggregated(headers) {
        return serve_aggregated(&ctx.registry, headers, true);
    }
    let doc = json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{ "clientCIDR": "0.0.0.0/0", "serverAddress": server_address }],
    });
    with_type(&doc, "application/json")
}

fn api_group(group: &str, versions: &[&str]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({ "groupVersion": group_version(group, v), "version": v }))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": vs, "preferredVersion": preferred })
}

/// `GET /apis`.
pub fn apis(ctx: &Ctx, headers: &HeaderMap) -> Response {
    if wants_aggregated(headers) {
        return serve_aggregated(&ctx.registry, headers, false);
    }
    let groups: Vec<Value> = ctx
        .registry
        .discovery_groups()
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| api_group(g, &vs))
        .collect();
    with_type(
        &json!({ "kind": "APIGroupList", "apiVersion": "v1", "groups": groups }),
        "application/json",
    )
}

fn resource_list(ctx: &Ctx, group: &str, version: &str) -> Value {
    let mut resources = Vec::new();
    for r in ctx.registry.discovery_in_version(group, version) {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": verbs(r),
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        resources.push(entry);
        for s in r
            .subresources
            .iter()
            .filter(|s| SERVED_SUBRESOURCES.contains(&s.name))
        {
            let mut sub = json!({
                "name": format!("{}/{}", r.plural, s.name),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": s.kind,
                "verbs": s.verbs,
            });
            if s.group != r.group || s.version != r.version {
                sub["group"] = json!(s.group);
                sub["version"] = json!(s.version);
            }
            resources.push(sub);
        }
    }
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": resources,
    })
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
            let mut doc = api_group(&info.group, &versions);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
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
        let hash: String = Sha512::digest(&body)
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
