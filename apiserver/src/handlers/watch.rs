//! Watch: a chunked response of newline-delimited JSON events
//! (`{"type":"ADDED|MODIFIED|DELETED|BOOKMARK|ERROR","object":{…}}`), fed from the store's
//! history so a resumed watch misses nothing, with upstream's resourceVersion semantics:
//! unset or "0" start with synthetic ADDED events for the current state; "X" streams
//! changes after X; a compacted X gets an ERROR event with a 410 Status.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use futures_util::Stream;
use serde_json::{Map, Value, json};

use super::{Ctx, Filter, Query, Render, cached_list, object, stored_fields};
use crate::error::{ApiError, Result};
use crate::registry;
use crate::registry::catalog::ResourceInfo;
use crate::storage::Change;
use crate::watch_cache::{CachedEvent, CachedObject, EventKind, event_line};

/// Changes read from history per pull.
const PULL: usize = 512;
/// Chunks a watch may have written ahead of what the response body took.
const OUTBOX: usize = 64;
/// When no `timeoutSeconds` is given (upstream picks 30–60 min around min-request-timeout).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// A watch event line as upstream writes it: `{"type":…,"object":…}` (the object in Go's
/// field order), a newline.
fn event(kind: &str, obj: &Map<String, Value>) -> Bytes {
    let mut line = Vec::with_capacity(256);
    line.extend_from_slice(b"{\"type\":");
    let _ = serde_json::to_writer(&mut line, kind);
    line.extend_from_slice(b",\"object\":");
    line.extend_from_slice(&crate::codec::go_json::object_to_vec(obj));
    line.extend_from_slice(b"}\n");
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
    let consistent = rv.is_empty();
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
    let out = Outbox::default();
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
        out: Arc::clone(&out),
        bookmarks,
        render,
        failed: std::sync::atomic::AtomicBool::new(false),
    };
    let run = async move {
        let _ = tokio::time::timeout(timeout, task.run(start, consistent, send_initial)).await;
    };
    let body = WatchBody {
        run: Some(Box::pin(run)),
        out,
    };
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
        .body(Body::from_stream(body))
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

/// Event lines gathered into one response chunk, up to [`Chunk::MAX`] bytes. The buffer is
/// kept for the watch's life: once the response has taken a chunk's bytes the next chunk
/// reuses the allocation instead of asking for fresh pages.
#[derive(Default)]
struct Chunk {
    lines: Vec<Bytes>,
    size: usize,
    buf: bytes::BytesMut,
}

impl Chunk {
    /// Bytes past which a chunk is sent without waiting for the rest of the batch.
    const MAX: usize = 256 * 1024;

    /// Adds `line`; returns the chunk to send when it is full.
    fn push(&mut self, line: Bytes) -> Option<Bytes> {
        self.size += line.len();
        self.lines.push(line);
        if self.size >= Self::MAX {
            self.take()
        } else {
            None
        }
    }

    /// The gathered lines as one chunk (a single line is passed on uncopied).
    fn take(&mut self) -> Option<Bytes> {
        let size = std::mem::take(&mut self.size);
        match self.lines.len() {
            0 => None,
            1 => self.lines.pop(),
            _ => {
                self.buf.reserve(size);
                for l in self.lines.drain(..) {
                    self.buf.extend_from_slice(&l);
                }
                Some(self.buf.split().freeze())
            }
        }
    }
}

/// What a watch wrote and the response body has not taken yet (at most about [`OUTBOX`]).
type Outbox = Arc<Mutex<VecDeque<Bytes>>>;

/// The response body of a watch, which runs the watch itself: each poll hands out what the
/// watch wrote, and only when nothing is left polls the watch for more. The watch cache's
/// notification thus wakes the task that writes to the connection directly (no task of
/// its own and no channel between them: one wake-up less per watcher and event, which
/// is what a fan-out to many watchers pays); a client that leaves drops the watch with it.
struct WatchBody<F> {
    run: Option<Pin<Box<F>>>,
    out: Outbox,
}

impl<F: Future<Output = ()>> Stream for WatchBody<F> {
    type Item = std::result::Result<Bytes, Infallible>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            let next = this
                .out
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop_front();
            if let Some(chunk) = next {
                return Poll::Ready(Some(Ok(chunk)));
            }
            let Some(run) = this.run.as_mut() else {
                return Poll::Ready(None);
            };
            match run.as_mut().poll(cx) {
                Poll::Ready(()) => this.run = None,
                Poll::Pending => {
                    let empty = this
                        .out
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .is_empty();
                    if empty {
                        return Poll::Pending;
                    }
                }
            }
        }
    }
}

/// Waits until the body took enough of the outbox. Needs no waker: the body polls the watch
/// again only once the outbox is empty, and it is polled again after handing out a chunk.
struct Drained<'a>(&'a Outbox);

impl Future for Drained<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<()> {
        let len = self.0.lock().unwrap_or_else(PoisonError::into_inner).len();
        if len < OUTBOX {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

struct WatchTask {
    ctx: Arc<Ctx>,
    r: &'static ResourceInfo,
    prefix: String,
    /// The namespace watched ("" = all).
    namespace: String,
    filter: Filter,
    out: Outbox,
    bookmarks: bool,
    /// Table-typed event objects when the client negotiated a Table.
    render: Render,
    /// Set when an event could not be converted (a CRD's conversion webhook failed): the
    /// watch ends there, as upstream's does when encoding an event fails.
    failed: std::sync::atomic::AtomicBool,
}

impl WatchTask {
    /// An event line for the stored object `stored`: the object itself (converted to the
    /// served form), or a one-row Table of it. A conversion webhook converts each event on
    /// its own; when it fails the line is empty and the watch ends.
    async fn ev(&self, kind: &str, stored: &Map<String, Value>) -> Bytes {
        let converted;
        let obj = if registry::convert::needs_webhook(self.r) {
            let r = self.r;
            match crate::crd::conversion::from_storage_one(&self.ctx, r, stored.clone()).await {
                Ok(o) => {
                    converted = o;
                    &converted
                }
                Err(e) => {
                    tracing::warn!(err = %e, resource = r.plural, "watch event conversion failed");
                    self.failed
                        .store(true, std::sync::atomic::Ordering::Relaxed);
                    return Bytes::new();
                }
            }
        } else if registry::convert::is_converted(self.r) {
            converted = registry::convert::from_storage(self.r, stored.clone());
            &converted
        } else {
            stored
        };
        if let Some(version) = self.render.meta {
            return event(kind, &crate::codec::partial::object_metadata(obj, version));
        }
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

    /// Whether events are built from the decoded object rather than the stored bytes (a
    /// Table, metadata only, or a converted resource).
    fn reencodes(&self) -> bool {
        self.render.table || self.render.meta.is_some() || registry::convert::is_converted(self.r)
    }

    /// Writes `line` to the response (waiting while the body is [`OUTBOX`] chunks behind);
    /// false once the watch must end. A client that left drops the watch instead.
    async fn send(&self, line: Bytes) -> bool {
        let full = {
            let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
            out.push_back(line);
            out.len() >= OUTBOX
        };
        if full {
            Drained(&self.out).await;
        }
        !self.failed.load(std::sync::atomic::Ordering::Relaxed)
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
        match self.render.meta {
            Some(version) => crate::codec::partial::object_metadata(&m, version),
            None => m,
        }
    }

    async fn gone(&self, rv: i64) {
        let status = ApiError::Gone(format!("too old resource version: {rv}")).status();
        if let Value::Object(obj) = status {
            let _ = self.send(event("ERROR", &obj)).await;
        }
    }

    /// An event line for a cached object: the stored bytes spliced, or (for a Table or a
    /// converted resource) built from the decoded object.
    async fn cached_ev(&self, kind: &str, obj: &CachedObject) -> Option<Bytes> {
        if self.reencodes() {
            let m = obj.to_map()?;
            return Some(self.ev(kind, &m).await);
        }
        Some(event_line(kind, obj))
    }

    /// Synthetic ADDED events for the current state (resourceVersion unset: consistent, "0":
    /// any); returns the revision they reflect, or `None` when the watch must end.
    async fn initial_events(&self, consistent: bool) -> Option<i64> {
        let min = if consistent {
            self.ctx.storage.linearizable_revision().await.ok()?
        } else {
            0
        };
        if let Some(snap) = cached_list::snapshot(&self.ctx, self.r, &self.namespace, min).await {
            for o in &snap.objects {
                if !self.filter.matches_meta(o.meta()) {
                    continue;
                }
                if let Some(line) = self.cached_ev("ADDED", o).await
                    && !self.send(line).await
                {
                    return None;
                }
            }
            return Some(snap.revision);
        }
        let page = self.ctx.storage.list(&self.prefix, None, 0, 0).await.ok()?;
        for (_, stored) in page.items {
            let Ok(obj) = object::from_stored(&stored.value, stored.revision) else {
                continue;
            };
            if self.filter.matches(&obj) && !self.send(self.ev("ADDED", &obj).await).await {
                return None;
            }
        }
        Some(page.revision)
    }

    async fn run(self, start: Option<i64>, consistent: bool, send_initial: bool) {
        let mut revisions = self.ctx.storage.subscribe();
        let mut next = match start {
            Some(rv) => rv + 1,
            None => {
                // Synthetic ADDED events for the current state, then changes after it.
                let Some(revision) = self.initial_events(consistent).await else {
                    return;
                };
                if send_initial
                    && !self
                        .send(event("BOOKMARK", &self.bookmark(revision, true)))
                        .await
                {
                    return;
                }
                revision + 1
            }
        };
        let mut bookmark_tick = tokio::time::interval(Duration::from_secs(60));
        bookmark_tick.tick().await;
        let mut cache = self
            .ctx
            .watch_cache
            .subscribe(&registry::prefix(self.r, ""), &stored_fields(self.r));
        let mut chunk = Chunk::default();
        loop {
            // Reading the window marks it seen, so `changed` below wakes for anything newer.
            let from_cache = match cache.since(next - 1) {
                Some((events, covered)) => {
                    // The events that arrived together leave in one chunk: one frame, one
                    // TLS record and one write instead of one per event.
                    for e in events {
                        if let Some(line) = self.cached_line(&e).await
                            && let Some(full) = chunk.push(line)
                            && !self.send(full).await
                        {
                            return;
                        }
                        next = e.revision + 1;
                    }
                    if let Some(rest) = chunk.take()
                        && !self.send(rest).await
                    {
                        return;
                    }
                    next = next.max(covered + 1);
                    true
                }
                None => {
                    // Older than the cache's window (or the cache is not built yet): read
                    // the store's history directly.
                    match self.replay_store(next).await {
                        Some(after) => next = after,
                        None => return,
                    }
                    if next <= *revisions.borrow_and_update() {
                        continue;
                    }
                    false
                }
            };
            tokio::select! {
                changed = cache.changed() => if !changed { return },
                _ = revisions.changed(), if !from_cache => {},
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
    async fn cached_line(&self, e: &CachedEvent) -> Option<Bytes> {
        if !self.namespace.is_empty() && *e.object.meta().namespace != *self.namespace {
            return None;
        }
        if self.filter.is_empty() {
            if self.reencodes() {
                return self.cached_ev(e.kind.as_str(), &e.object).await;
            }
            return Some(e.line());
        }
        let now = self.filter.matches_meta(e.object.meta());
        let kind = if e.kind == EventKind::Deleted {
            if !now {
                return None;
            }
            EventKind::Deleted
        } else {
            let before = e
                .prev
                .as_ref()
                .is_some_and(|p| self.filter.matches_meta(p.meta()));
            match (before, now) {
                (false, true) => EventKind::Added,
                (true, true) => EventKind::Modified,
                (true, false) => EventKind::Deleted,
                (false, false) => return None,
            }
        };
        if kind == e.kind && !self.reencodes() {
            // The same line every watcher without selectors gets: shared, not rebuilt.
            return Some(e.line());
        }
        self.cached_ev(kind.as_str(), &e.object).await
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
                        (false, true) => self.ev("ADDED", &obj).await,
                        (true, true) => self.ev("MODIFIED", &obj).await,
                        (true, false) => self.ev("DELETED", &obj).await,
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
                    self.ev("DELETED", &obj).await
                }
            };
            if !self.send(line).await {
                return None;
            }
        }
        Some(after)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_gather_lines_and_pass_a_single_one_on() {
        let mut c = Chunk::default();
        assert!(c.take().is_none());
        assert!(c.push(Bytes::from_static(b"a\n")).is_none());
        assert_eq!(c.take().as_deref(), Some(&b"a\n"[..]));
        assert!(c.push(Bytes::from_static(b"a\n")).is_none());
        assert!(c.push(Bytes::from_static(b"b\n")).is_none());
        assert_eq!(c.take().as_deref(), Some(&b"a\nb\n"[..]));
        let big = Bytes::from(vec![b'x'; Chunk::MAX]);
        assert_eq!(c.push(big).map(|b| b.len()), Some(Chunk::MAX));
        assert!(c.take().is_none());
    }
}
