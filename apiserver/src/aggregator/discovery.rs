//! Discovery with the extension servers' groups merged in (upstream's aggregated discovery
//! manager and `apisHandler`): the local documents are built as before; each available
//! remote APIService adds its group version — in aggregated `/apis` with the resources its
//! server reported to the last availability check, in the legacy `APIGroupList` and
//! `/apis/<group>` by its priorities. A server that is down or unchecked is left out, so
//! clients discover everything else instead of failing. Groups are placed by
//! `groupPriorityMinimum` (highest first, then by name), versions by `versionPriority`.
//! In aggregated `/apis`, a remote group version whose server was checked and is not
//! available stays listed as upstream's discovery manager leaves it after a failed fetch:
//! `{"version": …, "freshness": "Stale"}` without resources (clients report it as a failed
//! group instead of losing it silently).

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
    with_stale: bool,
) -> Vec<RemoteGroup<'a>> {
    let mut groups: Vec<RemoteGroup<'a>> = Vec::new();
    for svc in snapshot
        .remote()
        .filter(|s| s.available || (with_stale && s.checked))
    {
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

/// Where a group `name` of priority `p` goes among `names` (priority, then name).
fn position(names: &[String], name: &str, p: i64, snapshot: &Snapshot) -> usize {
    names
        .iter()
        .position(|other| {
            let q = priority_of(snapshot, other);
            q < p || (q == p && other.as_str() > name)
        })
        .unwrap_or(names.len())
}

/// Object keys in the order Go's discovery structs declare them (every key these documents
/// use; others after, by name).
const KEY_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "name",
    "creationTimestamp",
    "resource",
    "subresource",
    "groupVersion",
    "group",
    "version",
    "responseKind",
    "resources",
    "scope",
    "singularResource",
    "verbs",
    "shortNames",
    "categories",
    "subresources",
    "freshness",
    "versions",
    "preferredVersion",
];

/// `v` as JSON with object keys in [`KEY_ORDER`] (and `{group, version, kind}` as Go's
/// `GroupVersionKind`), so merged documents read as upstream writes them.
fn write_ordered(v: &Value, out: &mut String) {
    match v {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            let rank = |k: &str| {
                if k == "kind" && map.contains_key("group") {
                    return KEY_ORDER.len();
                }
                KEY_ORDER
                    .iter()
                    .position(|o| *o == k)
                    .unwrap_or(KEY_ORDER.len() + 1)
            };
            keys.sort_by(|a, b| rank(a).cmp(&rank(b)).then_with(|| a.cmp(b)));
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String((*k).clone()).to_string());
                out.push(':');
                write_ordered(&map[k.as_str()], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_ordered(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn ordered(v: &Value) -> String {
    let mut out = String::new();
    write_ordered(v, &mut out);
    out
}

/// Byte offsets in `body` of the array after `"<key>":[`: the start of each element and the
/// closing bracket.
fn array_elements(body: &[u8], key: &str) -> Option<(Vec<usize>, usize)> {
    let needle = format!("\"{key}\":[");
    let open = body
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())?
        + needle.len();
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let mut starts = Vec::new();
    let mut expecting = true;
    for (i, &b) in body.iter().enumerate().skip(open) {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        if expecting && depth == 0 && !b.is_ascii_whitespace() && b != b']' {
            starts.push(i);
            expecting = false;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' => depth = depth.checked_sub(1)?,
            b']' if depth == 0 => return Some((starts, i)),
            b']' => depth -= 1,
            b',' if depth == 0 => expecting = true,
            _ => {}
        }
    }
    None
}

/// Inserts each (index among the original elements, JSON text) into the array under `key`,
/// leaving every original byte as it was.
fn splice(body: &[u8], key: &str, mut inserts: Vec<(usize, String)>) -> Option<Vec<u8>> {
    let (starts, close) = array_elements(body, key)?;
    inserts.sort_by_key(|(at, _)| *at);
    let mut out =
        Vec::with_capacity(body.len() + inserts.iter().map(|(_, t)| t.len() + 1).sum::<usize>());
    let mut copied = 0;
    for (at, text) in inserts {
        if at < starts.len() {
            out.extend_from_slice(&body[copied..starts[at]]);
            copied = starts[at];
            out.extend_from_slice(text.as_bytes());
            out.push(b',');
        } else {
            out.extend_from_slice(&body[copied..close]);
            copied = close;
            if !starts.is_empty() || out.last() != Some(&b'[') {
                out.push(b',');
            }
            out.extend_from_slice(text.as_bytes());
        }
    }
    out.extend_from_slice(&body[copied..]);
    Some(out)
}

fn legacy_group(group: &str, versions: &[(&ApiService, Option<&Value>)]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|(s, _)| json!({ "groupVersion": format!("{group}/{}", s.version), "version": s.version }))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(Value::Null);
    json!({ "name": group, "versions": vs, "preferredVersion": preferred })
}

/// `/apis/<group>` of a group served only by extension servers, as JSON (`None`: none
/// available); the caller negotiates the form the client asked for (YAML, protobuf, indented).
pub fn group_document(
    snapshot: &Snapshot,
    entries: &HashMap<String, Value>,
    group: &str,
) -> Option<Response> {
    let groups = remote_groups(snapshot, entries, false);
    let (_, _, versions) = groups.iter().find(|(g, _, _)| g == group)?;
    let mut doc = legacy_group(group, versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(
        (
            StatusCode::OK,
            [(http::header::CONTENT_TYPE, "application/json")],
            format!("{}\n", ordered(&doc)),
        )
            .into_response(),
    )
}

/// `GET /apis` with the extension servers' groups, in the negotiated form (YAML, protobuf,
/// indented JSON for `?pretty=true` and curl-like agents; see
/// [`crate::discovery::negotiated`]).
pub async fn apis(
    ctx: &Ctx,
    snapshot: &Snapshot,
    entries: &HashMap<String, Value>,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Response {
    let resp = spliced_apis(ctx, snapshot, entries, headers).await;
    crate::discovery::negotiated(resp, headers, query).await
}

async fn spliced_apis(
    ctx: &Ctx,
    snapshot: &Snapshot,
    entries: &HashMap<String, Value>,
    headers: &HeaderMap,
) -> Response {
    let groups = remote_groups(snapshot, entries, true);
    if groups.is_empty() {
        return crate::discovery::apis(ctx, headers);
    }
    let mut local_headers = headers.clone();
    local_headers.remove(http::header::IF_NONE_MATCH);
    // Spliced as JSON; a protobuf client gets the result encoded at the end.
    let wants_protobuf = crate::discovery::aggregated_in_protobuf(headers);
    if wants_protobuf {
        local_headers.insert(
            http::header::ACCEPT,
            HeaderValue::from_static(crate::discovery::AGGREGATED_V2),
        );
    }
    let local = crate::discovery::apis(ctx, &local_headers);
    if local.status() != StatusCode::OK {
        return local;
    }
    let (parts, body) = local.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, usize::MAX).await else {
        return crate::error::ApiError::Internal("discovery".into()).into_response();
    };
    let Ok(doc) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    // The local document's bytes stay as they are; the remote groups are spliced in.
    let aggregated = doc["kind"] == "APIGroupDiscoveryList";
    let (key, names): (&str, Vec<String>) = if aggregated {
        let names = doc["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| i["metadata"]["name"].as_str().unwrap_or("").to_owned())
            .collect();
        ("items", names)
    } else {
        let names = doc["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|i| i["name"].as_str().unwrap_or("").to_owned())
            .collect();
        ("groups", names)
    };
    let mut inserts = Vec::new();
    for (group, p, versions) in &groups {
        let item = if aggregated {
            let vs: Vec<Value> = versions
                .iter()
                .filter_map(|(s, e)| {
                    if s.available {
                        e.cloned()
                    } else {
                        Some(json!({ "version": s.version, "freshness": "Stale" }))
                    }
                })
                .collect();
            if vs.is_empty() {
                continue;
            }
            json!({ "metadata": { "name": group, "creationTimestamp": null }, "versions": vs })
        } else {
            let live: Vec<_> = versions
                .iter()
                .filter(|(s, _)| s.available)
                .cloned()
                .collect();
            if live.is_empty() {
                continue;
            }
            legacy_group(group, &live)
        };
        inserts.push((position(&names, group, *p, snapshot), ordered(&item)));
    }
    let Some(body) = splice(&bytes, key, inserts) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
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
        if wants_protobuf
            && let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(&body)
            && let Ok(pb) = crate::codec::protobuf_encode::encode_object(&doc)
        {
            out.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(crate::discovery::AGGREGATED_V2_PROTOBUF),
            );
            return (StatusCode::OK, out, pb).into_response();
        }
    }
    (StatusCode::OK, out, body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_groups_are_spliced_without_touching_local_bytes() {
        let body = br#"{"kind":"APIGroupList","apiVersion":"v1","groups":[{"name":"a","x":"]"},{"name":"b"}]}
"#;
        let out = splice(
            body,
            "groups",
            vec![
                (1, "{\"name\":\"r\"}".into()),
                (2, "{\"name\":\"z\"}".into()),
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"kind\":\"APIGroupList\",\"apiVersion\":\"v1\",\"groups\":[{\"name\":\"a\",\"x\":\"]\"},{\"name\":\"r\"},{\"name\":\"b\"},{\"name\":\"z\"}]}\n"
        );
        let empty = splice(br#"{"items":[]}"#, "items", vec![(0, "1".into())]).unwrap();
        assert_eq!(empty, br#"{"items":[1]}"#);
        let v = json!({ "versions": [1], "metadata": { "creationTimestamp": null, "name": "g" },
                        "responseKind": { "kind": "K", "version": "v", "group": "g" } });
        assert_eq!(
            ordered(&v),
            r#"{"metadata":{"name":"g","creationTimestamp":null},"responseKind":{"group":"g","version":"v","kind":"K"},"versions":[1]}"#
        );
    }
}
