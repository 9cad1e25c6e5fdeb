//! Discovery with the extension servers' groups merged in (upstream's aggregated discovery
//! manager and `apisHandler`): the local documents are built as before; each available
//! remote APIService adds its group version — in aggregated `/apis` with the resources its
//! server reported to the last availability check, in the legacy `APIGroupList` and
//! `/apis/<group>` by its priorities. A server that is down or unchecked is left out, so
//! clients discover everything else instead of failing. Groups are placed by
//! `groupPriorityMinimum` (highest first, then by name), versions by `versionPriority`.

use std::collections::HashMap;

use axum::response::{IntoResponse, Response};
use http::{HeaderMap, HeaderValue, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha512};

use super::table::{ApiService, Snapshot};
use crate::handlers::Ctx;

/// A remote group: name, priority, versions with their discovery entries.
type RemoteGroup<'a> = (String, i64, Vec<(&'a ApiService, Option<&'a Value>)>);

/// The available remote group versions with a discovery entry, grouped: (group, priority,
/// versions ordered by priority with their entries).
fn remote_groups<'a>(
    snapshot: &'a Snapshot,
    entries: &'a HashMap<String, Value>,
) -> Vec<RemoteGroup<'a>> {
    let mut groups: Vec<RemoteGroup<'a>> = Vec::new();
    for svc in snapshot.remote().filter(|s| s.available) {
        let entry = entries.get(&svc.name);
        match groups.iter_mut().find(|(g, _, _)| *g == svc.group) {
            Some((_, p, vs)) => {
                *p = (*p).max(svc.group_priority);
                vs.push((svc, entry));
            }
            None => groups.push((svc.group.clone(), svc.group_priority, vec![(svc, entry)])),
        }
    }
    for (_, _, vs) in &mut groups {
        vs.sort_by(|a, b| {
            b.0.version_priority
                .cmp(&a.0.version_priority)
                .then_with(|| a.0.version.cmp(&b.0.version))
        });
    }
    groups
}

/// Priority of a group already in a document (from its APIServices; CRDs' 1000 otherwise).
fn priority_of(snapshot: &Snapshot, group: &str) -> i64 {
    snapshot
        .services
        .iter()
        .filter(|s| s.group == group)
        .map(|s| s.group_priority)
        .max()
        .unwrap_or(1000)
}

/// Inserts `item` (group `name`, priority `p`) into `items` by priority then name.
fn insert_ordered(
    items: &mut Vec<Value>,
    item: Value,
    name: &str,
    p: i64,
    snapshot: &Snapshot,
    name_of: fn(&Value) -> &str,
) {
    let at = items
        .iter()
        .position(|i| {
            let other = name_of(i);
            let q = priority_of(snapshot, other);
            q < p || (q == p && other > name)
        })
        .unwrap_or(items.len());
    items.insert(at, item);
}

fn legacy_group(group: &str, versions: &[(&ApiService, Option<&Value>)]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|(s, _)| json!({ "groupVersion": format!("{group}/{}", s.version), "version": s.version }))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": vs, "preferredVersion": preferred })
}

/// `/apis/<group>` of a group served only by extension servers (`None`: none available).
pub fn group_document(
    snapshot: &Snapshot,
    entries: &HashMap<String, Value>,
    group: &str,
) -> Option<Response> {
    let groups = remote_groups(snapshot, entries);
    let (_, _, versions) = groups.iter().find(|(g, _, _)| g == group)?;
    let mut doc = legacy_group(group, versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some((StatusCode::OK, axum::Json(doc)).into_response())
}

/// `GET /apis` with the extension servers' groups.
pub async fn apis(
    ctx: &Ctx,
    snapshot: &Snapshot,
    entries: &HashMap<String, Value>,
    headers: &HeaderMap,
) -> Response {
    let groups = remote_groups(snapshot, entries);
    if groups.is_empty() {
        return crate::discovery::apis(ctx, headers);
    }
    let mut local_headers = headers.clone();
    local_headers.remove(http::header::IF_NONE_MATCH);
    let local = crate::discovery::apis(ctx, &local_headers);
    if local.status() != StatusCode::OK {
        return local;
    }
    let (parts, body) = local.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return crate::error::ApiError::Internal("discovery".into()).into_response();
    };
    let Ok(mut doc) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    let aggregated = doc["kind"] == "APIGroupDiscoveryList";
    if aggregated {
        let mut items = doc["items"].as_array().cloned().unwrap_or_default();
        for (group, p, versions) in &groups {
            let vs: Vec<Value> = versions.iter().filter_map(|(_, e)| e.cloned()).collect();
            if vs.is_empty() {
                continue;
            }
            let item =
                json!({ "metadata": { "name": group, "creationTimestamp": null }, "versions": vs });
            insert_ordered(&mut items, item, group, *p, snapshot, |i| {
                i["metadata"]["name"].as_str().unwrap_or("")
            });
        }
        doc["items"] = Value::Array(items);
    } else {
        let mut items = doc["groups"].as_array().cloned().unwrap_or_default();
        for (group, p, versions) in &groups {
            insert_ordered(
                &mut items,
                legacy_group(group, versions),
                group,
                *p,
                snapshot,
                |i| i["name"].as_str().unwrap_or(""),
            );
        }
        doc["groups"] = Value::Array(items);
    }
    let body = serde_json::to_vec(&doc).unwrap_or_default();
    let mut out = parts.headers;
    out.remove(http::header::CONTENT_LENGTH);
    if aggregated {
        let hash: String = Sha512::digest(&body)
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect();
        let etag = format!("\"{hash}\"");
        if let Ok(v) = HeaderValue::from_str(&etag) {
            out.insert(http::header::ETAG, v);
        }
        if headers
            .get(http::header::IF_NONE_MATCH)
            .is_some_and(|v| v.as_bytes() == etag.as_bytes())
        {
            out.remove(http::header::CONTENT_TYPE);
            return (StatusCode::NOT_MODIFIED, out).into_response();
        }
    }
    (StatusCode::OK, out, body).into_response()
}
