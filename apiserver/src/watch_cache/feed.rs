//! The feeder of one resource's cache: loads a snapshot of the store, then follows the
//! store's history, decoding each change once and applying it to the objects and the window.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;

use super::{CachedEvent, CachedObject, EventKind, LINES_KEPT, Resource, WINDOW};
use crate::storage::{SharedChange, SharedItem, Storage};

/// Changes pulled from the store per read.
const PULL: usize = 1024;

/// Loads the resource, then follows the store's history forever (until the store stops).
pub(super) async fn run(storage: Storage, resource: Arc<Resource>) {
    let mut revisions = storage.subscribe();
    let Some(mut next) = load(&storage, &resource).await else {
        return;
    };
    loop {
        if resource.evicted.load(Ordering::Relaxed) {
            return;
        }
        match storage.shared_changes(&resource.prefix, next, PULL) {
            Ok((changes, after)) => {
                apply(&resource, changes, after - 1, storage.compacted_revision());
                next = after;
            }
            Err(_) => {
                // History was compacted under us: start again from a new snapshot.
                match load(&storage, &resource).await {
                    Some(n) => next = n,
                    None => return,
                }
                continue;
            }
        }
        if next <= *revisions.borrow_and_update() {
            continue;
        }
        if revisions.changed().await.is_err() {
            return;
        }
    }
}

/// Snapshots of at most this many objects are decoded on the runtime thread (well under a
/// millisecond); larger ones on a blocking thread. At start-up every resource loads a near
/// empty snapshot: decoding them inline keeps the cached objects out of short-lived blocking
/// threads, whose allocator pages would otherwise stay behind, mostly empty, after the
/// threads exit (issue 26: idle RSS).
const INLINE_DECODE: usize = 256;

/// Replaces the cache's state with a snapshot of the store (a large one decoded on a
/// blocking thread); returns the revision to follow history from.
async fn load(storage: &Storage, resource: &Arc<Resource>) -> Option<i64> {
    let (items, revision) = storage.shared_list(&resource.prefix);
    let objects = if items.len() <= INLINE_DECODE {
        decode(items, &resource.fields)
    } else {
        let r = Arc::clone(resource);
        tokio::task::spawn_blocking(move || decode(items, &r.fields))
            .await
            .ok()?
    };
    {
        let mut state = resource.write();
        state.objects = objects;
        state.events.clear();
        state.start = revision + 1;
        state.revision = revision;
        state.ready = true;
    }
    resource.tail.send_replace(revision);
    Some(revision + 1)
}

/// The cached objects of a snapshot's items.
fn decode(items: Vec<SharedItem>, fields: &[&'static str]) -> BTreeMap<Bytes, Arc<CachedObject>> {
    items
        .into_iter()
        .filter_map(|item| {
            let obj = CachedObject::decode(item.value, item.revision, fields)?;
            Some((item.key, Arc::new(obj)))
        })
        .collect()
}

/// Applies `changes` (decoding new values before taking the lock), records that the cache
/// is complete up to `revision`, and drops events the store has compacted away.
fn apply(resource: &Resource, changes: Vec<SharedChange>, revision: i64, compacted: i64) {
    let decoded: Vec<(SharedChange, Option<CachedObject>)> = changes
        .into_iter()
        .map(|c| {
            let obj = c
                .value
                .clone()
                .and_then(|v| CachedObject::decode(v, c.revision, &resource.fields));
            (c, obj)
        })
        .collect();
    {
        let mut state = resource.write();
        let before = state.events.len();
        for (change, obj) in decoded {
            let prev = state.objects.get(&change.key).cloned().or_else(|| {
                let (value, rev) = change.prev.clone()?;
                CachedObject::decode(value, rev, &resource.fields).map(Arc::new)
            });
            let event = match (change.value.is_some(), obj) {
                (true, Some(obj)) => {
                    let obj = Arc::new(obj);
                    state.objects.insert(change.key, Arc::clone(&obj));
                    CachedEvent {
                        revision: change.revision,
                        kind: if prev.is_some() {
                            EventKind::Modified
                        } else {
                            EventKind::Added
                        },
                        object: obj,
                        prev,
                        line: OnceLock::new(),
                    }
                }
                (true, None) => {
                    // Not a JSON object: nothing a Kubernetes client could read.
                    state.objects.remove(&change.key);
                    continue;
                }
                (false, _) => {
                    state.objects.remove(&change.key);
                    let Some(last) = prev else { continue };
                    CachedEvent {
                        revision: change.revision,
                        kind: EventKind::Deleted,
                        object: Arc::new(last.at_revision(change.revision)),
                        prev: None,
                        line: OnceLock::new(),
                    }
                }
            };
            state.events.push_back(Arc::new(event));
        }
        // Events that just fell out of the newest LINES_KEPT drop their serialised line.
        let len = state.events.len();
        let aged = before.saturating_sub(LINES_KEPT)..len.saturating_sub(LINES_KEPT);
        for i in aged {
            if let Some(e) = state.events.get_mut(i)
                && e.line.get().is_some()
            {
                *e = Arc::new(CachedEvent {
                    revision: e.revision,
                    kind: e.kind,
                    object: Arc::clone(&e.object),
                    prev: e.prev.clone(),
                    line: OnceLock::new(),
                });
            }
        }
        let excess = state.events.len().saturating_sub(WINDOW);
        if excess > 0 {
            let dropped: Vec<_> = state.events.drain(..excess).collect();
            if let Some(last) = dropped.last() {
                // A revision is either wholly in the window or not at all.
                let cut = last.revision;
                while state.events.front().is_some_and(|e| e.revision == cut) {
                    state.events.pop_front();
                }
                state.start = cut + 1;
            }
        }
        while state.events.front().is_some_and(|e| e.revision < compacted) {
            state.events.pop_front();
        }
        state.start = state.start.max(compacted);
        state.revision = state.revision.max(revision);
    }
    resource.tail.send_replace(revision);
}
