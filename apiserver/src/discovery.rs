//! Discovery documents, built from the registry: aggregated v2 on `/api` and `/apis` (when
//! the client asks for it, with the exact content type kubectl checks), and the legacy
//! `APIVersions`, `APIGroupList`, `APIGroup` and per-version `APIResourceList` documents.

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, StatusCode};
use serde_json::{Value, json};

use crate::error::{ApiError, Result};
use crate::handlers::Ctx;
use crate::registry::SERVED_SUBRESOURCES;
use crate::registry::catalog::ResourceInfo;
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

fn aggregated(ctx: &Ctx, core: bool) -> Value {
    let items: Vec<Value> = ctx
        .registry
        .discovery_groups()
        .into_iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(group, versions)| {
            let versions: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> =
                        ctx.registry.discovery_in_version(group, v).into_iter().map(aggregated_resource).collect();
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

/// `GET /api`.
pub fn api(ctx: &Ctx, headers: &HeaderMap, server_address: &str) -> Response {
    if wants_aggregated(headers) {
        return with_type(&aggregated(ctx, true), AGGREGATED_V2);
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
        return with_type(&aggregated(ctx, false), AGGREGATED_V2);
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
