//! Watch: a chunked response of newline-delimited JSON events
//! (`{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{…}}`), fed from the store's
//! history so a resumed watch misses nothing, with upstream's resourceVersion semantics:
//! unset or "0" start with synthetic ADDED events for the current state; "X" streams
//! changes after X; a compacted X gets an ERROR event with a 410 Status.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::{Ctx, Filter, Query, Render, object};
use crate::error::{ApiError, Result};
use crate::registry;
use crate::registry::catalog::ResourceInfo;
use crate::storage::Change;
use crate::watch_cache::CachedEvent;

/// Changes read from history per pull.
const PULL: usize = 512;
/// When no `timeoutSeconds` is given (upstream picks 30–60 min around min-request-timeout).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

fn event(kind: &str, obj: &Map<String, Value>) -> Bytes {
    let mut line = serde_json::to_vec(&json!({ "type": kind, "object": obj })).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

/// Starts a watch; the response streams until the client leaves or the timeout passes.
pub(super) fn watch(
    ctx: &Arc<Ctx>,
    r: &'static ResourceInfo,
    namespace: &str,
    name: &str,
    q: &Query,
    render: Render,
) -> Result<Response> {
    let mut filter = Filter::from_query(r, q)?;
    if !name.is_empty() {
        // Watching a single object by URL is a watch with a name field selector.
        filter = Filter::from_query(r, &single_name_query(q, name))?;
    }
    let rv = q.get("resourceVersion").cloned().unwrap_or_default();
    let start = if rv.is_empty() || rv == "0" {
        None
    } else {
        Some(object::parse_rv(&rv)?)
    };
    let send_initial = q.get("sendInitialEvents").is_some_and(|v| v == "true");
    if send_initial && start.is_some() {
        return Err(ApiError::Invalid {
            group: "meta.k8s.io".into(),
            kind: "ListOptions".into(),
            name: String::new(),
            causes: vec![crate::error::FieldError {
                reason: "FieldValueForbidden",
                field: "sendInitialEvents".into(),
                message: "Forbidden: sendInitialEvents is forbidden for watch unless resourceVersion is unset or 0"
                    .into(),
            }],
        });
    }
    let bookmarks = q.get("allowWatchBookmarks").is_some_and(|v| v == "true");
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(64);
    let task = WatchTask {
        ctx: Arc::clone(ctx),
        r,
        prefix: registry::prefix(r, namespace),
        namespace: if r.namespaced {
            namespace.to_owned()
        } else {
            String::new()
        },
        filter,
        tx,
        bookmarks,
        render,
    };
    tokio::spawn(async move {
        let _ = tokio::time::timeout(timeout, task.run(start, send_initial)).await;
    });
    Response::builder()
        .status(200)
        .header(
            http::header::CONTENT_TYPE,
            if render.table {
                crate::tables::TABLE_CONTENT_TYPE
            } else {
                "application/json"
            },
        )
        .header(http::header::CACHE_CONTROL, "no-cache, private")
        .body(Body::from_stream(ReceiverStream::new(rx)))
        .map_err(|e| ApiError::Internal(e.to_string()))
}

fn single_name_query(q: &Query, name: &str) -> Query {
    let mut q = q.clone();
    let sel = q.get("fieldSelector").cloned().unwrap_or_default();
    let extra = format!("metadata.name={name}");
    q.insert(
        "fieldSelector".into(),
        if sel.is_empty() {
            extra
        } else {
            format!("{sel},{extra}")
        },
    );
    q
}

struct WatchTask {
    ctx: Arc<Ctx>,
    r: &'static ResourceInfo,
    prefix: String,
    /// The namespace watched ("" = all).
    namespace: String,
    filter: Filter,
    tx: mpsc::Sender<Result<Bytes, Infallible>>,
    bookmarks: bool,
    /// Table-typed event objects when the client negotiated a Table.
    render: Render,
}

impl WatchTask {
    /// An event line for `obj`: the object itself, or a one-row Table of it.
    fn ev(&self, kind: &str, obj: &Map<String, Value>) -> Bytes {
        if self.render.table {
            let meta = json!({ "resourceVersion": object::meta_str(obj, "resourceVersion") });
            if let Value::Object(t) = crate::tables::to_table(
                self.r,
                std::slice::from_ref(obj),
                meta,
                self.render.include,
            ) {
                return event(kind, &t);
            }
        }
        event(kind, obj)
    }

    async fn send(&self, line: Bytes) -> bool {
        self.tx.send(Ok(line)).await.is_ok()
    }

    fn bookmark(&self, revision: i64, initial_end: bool) -> Map<String, Value> {
        let mut meta = json!({ "resourceVersion": revision.to_string() });
        if initial_end {
            meta["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
        }
        let mut m = Map::new();
        m.insert("kind".into(), json!(self.r.kind));
        m.insert("apiVersion".into(), json!(registry::api_version(self.r)));
        m.insert("metadata".into(), meta);
        m
    }

    async fn gone(&self, rv: i64) {
        let status = ApiError::Gone(format!("too old resource version: {rv}")).status();
        if let Value::Object(obj) = status {
            let _ = self.send(event("ERROR", &obj)).await;
        }
    }

    async fn run(self, start: Option<i64>, send_initial: bool) {
        let mut revisions = self.ctx.storage.subscribe();
        let mut next = match start {
            Some(rv) => rv + 1,
            None => {
                // Synthetic ADDED events for the current state, then changes after it.
                let page = match self.ctx.storage.list(&self.prefix, None, 0, 0).await {
                    Ok(p) => p,
                    Err(_) => return,
                };
                for (_, stored) in page.items {
                    let Ok(obj) = object::from_stored(&stored.value, stored.revision) else {
                        continue;
                    };
                    if self.filter.matches(&obj) && !self.send(self.ev("ADDED", &obj)).await {
                        return;
                    }
                }
                if send_initial
                    && !self
                        .send(event("BOOKMARK", &self.bookmark(page.revision, true)))
                        .await
                {
                    return;
                }
                page.revision + 1
            }
        };
        let mut bookmark_tick = tokio::time::interval(Duration::from_secs(60));
        bookmark_tick.tick().await;
        let mut cache = self
            .ctx
            .watch_cache
            .subscribe(&registry::prefix(self.r, ""));
        loop {
            match cache.since(next - 1) {
                Some(events) => {
                    for e in events {
                        if let Some(line) = self.cached_line(&e)
                            && !self.send(line).await
                        {
                            return;
                        }
                        next = e.revision + 1;
                    }
                    next = next.max(cache.tail() + 1);
                }
                None => {
                    // Older than the cache's window: read the store's history directly.
                    match self.replay_store(next).await {
                        Some(after) => next = after,
                        None => return,
                    }
                    if next <= *revisions.borrow() {
                        continue;
                    }
                }
            }
            if cache.since(next - 1).is_some_and(|e| !e.is_empty()) {
                continue;
            }
            tokio::select! {
                changed = cache.changed() => if !changed { return },
                () = self.tx.closed() => return,
                _ = revisions.changed() => {},
                _ = bookmark_tick.tick(), if self.bookmarks => {
                    let b = self.bookmark(next - 1, false);
                    if !self.send(event("BOOKMARK", &b)).await {
                        return;
                    }
                }
            }
        }
    }

    /// The line a cached event becomes for this watcher, if any: the shared pre-serialised
    /// line when no selector is involved, else ADDED/MODIFIED/DELETED by whether the object
    /// matched before and after the change.
    fn cached_line(&self, e: &CachedEvent) -> Option<Bytes> {
        if !self.namespace.is_empty() && object::meta_str(&e.object, "namespace") != self.namespace
        {
            return None;
        }
        if self.render.table {
            let kind = if e.deleted {
                "DELETED"
            } else if e.prev.is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            };
            if self.filter.is_empty() {
                return Some(self.ev(kind, &e.object));
            }
        } else if self.filter.is_empty() {
            return Some(e.line.clone());
        }
        let now = self.filter.matches(&e.object);
        if e.deleted {
            return now.then(|| self.ev("DELETED", &e.object));
        }
        let before = e.prev.as_ref().is_some_and(|p| self.filter.matches(p));
        match (before, now) {
            (false, true) => Some(self.ev("ADDED", &e.object)),
            (true, true) => Some(self.ev("MODIFIED", &e.object)),
            (true, false) => Some(self.ev("DELETED", &e.object)),
            (false, false) => None,
        }
    }

    /// Sends one batch of changes read from the store's history; returns the revision to
    /// continue from, or `None` when the watch must end (client gone, or 410 sent).
    async fn replay_store(&self, next: i64) -> Option<i64> {
        let (changes, after) = match self.ctx.storage.changes(&self.prefix, next, PULL) {
            Ok(c) => c,
            Err(crate::storage::Error::Store(store::StoreError::Compacted)) => {
                self.gone(next - 1).await;
                return None;
            }
            Err(_) => return None,
        };
        for (_, change) in changes {
            let line = match change {
                Change::Put { value, prev, .. } => {
                    let Ok(obj) = object::from_stored(&value.value, value.revision) else {
                        continue;
                    };
                    let now = self.filter.matches(&obj);
                    let before = prev
                        .and_then(|p| object::from_stored(&p.value, p.revision).ok())
                        .is_some_and(|p| self.filter.matches(&p));
                    // An object that starts matching the selectors is ADDED, one that
                    // stops matching is DELETED, as upstream's watch cache does.
                    match (before, now) {
                        (false, true) => self.ev("ADDED", &obj),
                        (true, true) => self.ev("MODIFIED", &obj),
                        (true, false) => self.ev("DELETED", &obj),
                        (false, false) => continue,
                    }
                }
                Change::Delete { prev, .. } => {
                    let Ok(obj) = object::from_stored(&prev.value, prev.revision) else {
                        continue;
                    };
                    if !self.filter.matches(&obj) {
                        continue;
                    }
                    self.ev("DELETED", &obj)
                }
            };
            if !self.send(line).await {
                return None;
            }
        }
        Some(after)
    }
}
