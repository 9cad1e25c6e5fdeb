//! LISTs served from the watch cache: a full list (no `limit`, no `continue`) with
//! resourceVersion unset (consistent: the cache first catches up to the store's current
//! revision), "0" (any) or "N" (not older than N) is answered from the cache's objects,
//! writing their stored bytes into the response instead of decoding and re-encoding each.
//! Everything else (pages, exact revisions, a cache not built yet) reads the store.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde_json::{Map, Value, json};

use super::{Ctx, Filter, Query, Render, stored_fields, table_response};
use crate::error::Result;
use crate::registry::{self, catalog::ResourceInfo};
use crate::watch_cache::{CachedObject, Meta, Snapshot};

/// How long a read waits for the cache to catch up before it reads the store instead.
const CATCH_UP: Duration = Duration::from_secs(3);

impl Filter {
    /// Whether a cached object's selectable fields match.
    pub(super) fn matches_meta(&self, meta: &Meta) -> bool {
        self.labels.matches_lookup(|k| meta.label(k))
            && self.fields.matches_lookup(|f| meta.field(f))
    }
}

/// The cached objects of `r` in `namespace` ("" = all) at a revision of at least `min`, or
/// `None` when the store must be read instead.
pub(super) async fn snapshot(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    min: i64,
) -> Option<Snapshot> {
    ctx.watch_cache
        .snapshot(
            &registry::prefix(r, ""),
            &stored_fields(r),
            &registry::prefix(r, namespace),
            min,
            CATCH_UP,
        )
        .await
}

/// The lowest revision a read with these parameters may be served at, or `None` when the
/// cache cannot serve it.
async fn min_revision(ctx: &Ctx, q: &Query) -> Result<Option<i64>> {
    let rv = q.get("resourceVersion").map_or("", String::as_str);
    let rv_match = q.get("resourceVersionMatch").map_or("", String::as_str);
    Ok(match (rv, rv_match) {
        ("", "") => Some(
            ctx.storage
                .linearizable_revision()
                .await
                .map_err(super::storage_error)?,
        ),
        ("", _) | (_, "Exact") => None,
        ("0", "" | "NotOlderThan") => Some(0),
        (rv, "" | "NotOlderThan") => rv
            .parse::<i64>()
            .ok()
            .filter(|n| *n <= ctx.storage.current_revision()),
        _ => None,
    })
}

/// Answers a LIST from the cache when it can (`Ok(None)`: read the store).
pub(super) async fn list(
    ctx: &Ctx,
    r: &ResourceInfo,
    namespace: &str,
    q: &Query,
    filter: &Filter,
    render: &Render,
) -> Result<Option<Response>> {
    let paged = q.get("continue").is_some_and(|c| !c.is_empty())
        || q.get("limit")
            .and_then(|l| l.parse::<i64>().ok())
            .is_some_and(|l| l > 0);
    if paged {
        return Ok(None);
    }
    let Some(min) = min_revision(ctx, q).await? else {
        return Ok(None);
    };
    let Some(snap) = snapshot(ctx, r, namespace, min).await else {
        return Ok(None);
    };
    let items = snap
        .objects
        .iter()
        .filter(|o| filter.is_empty() || filter.matches_meta(o.meta()));
    // A resource served as a conversion of its stored objects decodes and converts each.
    let converted = registry::convert::is_converted(r);
    if render.table || converted {
        let objects: Vec<Map<String, Value>> = if registry::convert::needs_webhook(r) {
            // One review for the whole list, as upstream's webhook converter.
            let stored = items.filter_map(|o| o.to_map()).collect();
            crate::crd::conversion::from_storage(ctx, r, stored).await?
        } else {
            items
                .filter_map(|o| o.to_map())
                .map(|o| registry::convert::from_storage(r, o))
                .collect()
        };
        let metadata = json!({ "resourceVersion": snap.revision.to_string() });
        if !render.table {
            let list = json!({
                "kind": format!("{}List", r.kind),
                "apiVersion": registry::api_version(r),
                "metadata": metadata,
                "items": objects,
            });
            return Ok(Some(super::json_response(StatusCode::OK, &list)));
        }
        return Ok(Some(table_response(&crate::tables::to_table(
            r,
            &objects,
            metadata,
            render.include,
        ))));
    }
    let mut head = Vec::with_capacity(128);
    head.extend_from_slice(b"{\"kind\":");
    serde_json::to_writer(&mut head, &format!("{}List", r.kind)).unwrap_or_default();
    head.extend_from_slice(b",\"apiVersion\":");
    serde_json::to_writer(&mut head, &registry::api_version(r)).unwrap_or_default();
    head.extend_from_slice(b",\"metadata\":{\"resourceVersion\":\"");
    head.extend_from_slice(snap.revision.to_string().as_bytes());
    head.extend_from_slice(b"\"},\"items\":[");
    let objects: Vec<Arc<CachedObject>> = items.cloned().collect();
    // Built-in types' items carry no kind/apiVersion (custom resources' do), as upstream.
    let typed = !crate::crd::serve::is_custom(r);
    let mut resp = (
        StatusCode::OK,
        [(http::header::CONTENT_TYPE, "application/json")],
        Body::from_stream(futures_util::stream::iter(
            ListChunks::new(head, objects, typed).map(Ok::<_, std::convert::Infallible>),
        )),
    )
        .into_response();
    resp.extensions_mut().insert(crate::codec::Streamed);
    Ok(Some(resp))
}

/// Bytes a streamed list body gathers before it hands a chunk to the connection.
const CHUNK: usize = 64 * 1024;

/// A cached LIST's body written lazily, one chunk of about [`CHUNK`] bytes at a time, so a
/// list of 100k objects never exists as one buffer: the snapshot's objects are shared with
/// the cache (`Arc`s) and each is written out when the connection asks for more.
struct ListChunks {
    /// The list's opening bytes, until the first chunk takes them.
    head: Option<Vec<u8>>,
    objects: std::vec::IntoIter<Arc<CachedObject>>,
    /// Items are written without `kind` and `apiVersion` (a built-in type's list).
    typed: bool,
    first: bool,
    done: bool,
}

impl ListChunks {
    fn new(head: Vec<u8>, objects: Vec<Arc<CachedObject>>, typed: bool) -> ListChunks {
        ListChunks {
            head: Some(head),
            objects: objects.into_iter(),
            typed,
            first: true,
            done: false,
        }
    }
}

impl Iterator for ListChunks {
    type Item = Bytes;

    fn next(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        let mut out = self.head.take().unwrap_or_default();
        out.reserve(CHUNK);
        while out.len() < CHUNK {
            let Some(o) = self.objects.next() else {
                // Go's encoder ends the document with a newline.
                out.extend_from_slice(b"]}\n");
                self.done = true;
                break;
            };
            if !self.first {
                out.push(b',');
            }
            self.first = false;
            if self.typed {
                o.write_item_json(&mut out);
            } else {
                o.write_json(&mut out);
            }
        }
        Some(Bytes::from(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_join_into_one_document() {
        let head = b"{\"items\":[".to_vec();
        let empty: Vec<u8> = ListChunks::new(head.clone(), Vec::new(), true)
            .flatten()
            .collect();
        assert_eq!(empty, b"{\"items\":[]}\n");

        // 200 objects of ~1 KiB: several chunks, each about CHUNK bytes, one document.
        let objects: Vec<Arc<CachedObject>> = (0..200)
            .map(|i| {
                let raw = format!(
                    r#"{{"metadata":{{"name":"cm-{i}"}},"data":{{"v":"{}"}}}}"#,
                    "x".repeat(1000)
                );
                Arc::new(CachedObject::decode(Bytes::from(raw), 7 + i, &[]).unwrap())
            })
            .collect();
        let chunks: Vec<Bytes> = ListChunks::new(head, objects, false).collect();
        assert!(chunks.len() >= 3, "{} chunks", chunks.len());
        assert!(chunks[..chunks.len() - 1].iter().all(|c| c.len() >= CHUNK));
        let body: Vec<u8> = chunks.concat();
        assert!(body.ends_with(b"]}\n"));
        let list: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let items = list["items"].as_array().unwrap();
        assert_eq!(items.len(), 200);
        assert_eq!(items[199]["metadata"]["name"], "cm-199");
        assert_eq!(items[199]["metadata"]["resourceVersion"], "206");
    }
}
