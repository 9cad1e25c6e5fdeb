//! The watch cache: per resource, one feeder reads the store's history once, decodes each
//! change once, pre-serialises its watch line once, and keeps a window of recent events
//! that any number of watchers read from. So N watchers of a resource cost one store read
//! and one decode per change, not N (upstream's Cacher does the same job).
//!
//! A watcher whose starting revision is older than the window, or who falls behind it,
//! reads the store's history directly instead (`handlers::watch`), which is correct but
//! costs a decode per watcher.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use bytes::Bytes;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::storage::{Change, Storage};

/// Events kept per resource.
const WINDOW: usize = 10_000;
/// Changes pulled from the store per read.
const PULL: usize = 1024;

/// One decoded change.
#[derive(Debug)]
pub struct CachedEvent {
    /// Store revision of the change.
    pub revision: i64,
    /// The object after the change (for a deletion: its last state).
    pub object: Map<String, Value>,
    /// The object before the change, for updates.
    pub prev: Option<Map<String, Value>>,
    /// Whether the change deleted the object.
    pub deleted: bool,
    /// `{"type":…,"object":…}\n` with the natural type (ADDED/MODIFIED/DELETED), serialised
    /// once for every watcher without selectors.
    pub line: Bytes,
}

/// The window of one resource.
struct Window {
    events: RwLock<VecDeque<Arc<CachedEvent>>>,
    /// The first revision the window fully covers (events from here on are all present).
    start: RwLock<i64>,
    /// The revision the window is complete up to.
    tail: watch::Sender<i64>,
}

/// Decodes a stored object and stamps its resourceVersion.
fn decode(bytes: &[u8], revision: i64) -> Option<Map<String, Value>> {
    let mut obj: Map<String, Value> = serde_json::from_slice(bytes).ok()?;
    if let Some(Value::Object(m)) = obj.get_mut("metadata") {
        m.insert("resourceVersion".into(), json!(revision.to_string()));
    }
    Some(obj)
}

/// A watch line: `{"type":T,"object":O}\n`.
pub fn line(kind: &str, obj: &Map<String, Value>) -> Bytes {
    let mut out = serde_json::to_vec(&json!({ "type": kind, "object": obj })).unwrap_or_default();
    out.push(b'\n');
    Bytes::from(out)
}

/// Windows of every watched resource, created on first use.
pub struct WatchCache {
    storage: Storage,
    windows: Mutex<HashMap<String, Arc<Window>>>,
}

/// A reader's view of one resource's window.
pub struct Subscription {
    window: Arc<Window>,
    tail: watch::Receiver<i64>,
}

impl Subscription {
    /// Events with revision in `(after, …]` currently in the window, or `None` when the
    /// window no longer (or not yet) covers `after + 1`.
    pub fn since(&self, after: i64) -> Option<Vec<Arc<CachedEvent>>> {
        let start = *self
            .window
            .start
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        if after + 1 < start {
            return None;
        }
        let events = self
            .window
            .events
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let from = events.partition_point(|e| e.revision <= after);
        Some(events.iter().skip(from).cloned().collect())
    }

    /// The revision the window is complete up to.
    pub fn tail(&self) -> i64 {
        *self.tail.borrow()
    }

    /// Waits until the window grows; `false` if the feeder stopped.
    pub async fn changed(&mut self) -> bool {
        self.tail.changed().await.is_ok()
    }
}

impl WatchCache {
    /// A cache over `storage`.
    pub fn new(storage: Storage) -> Self {
        WatchCache {
            storage,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Subscribes to the resource whose keys start with `prefix` (the all-namespaces
    /// collection prefix), starting its feeder on first use.
    pub fn subscribe(&self, prefix: &str) -> Subscription {
        let mut windows = self.windows.lock().unwrap_or_else(PoisonError::into_inner);
        let window = windows
            .entry(prefix.to_owned())
            .or_insert_with(|| {
                let current = self.storage.current_revision();
                let (tail, _) = watch::channel(current);
                let window = Arc::new(Window {
                    events: RwLock::new(VecDeque::new()),
                    start: RwLock::new(current + 1),
                    tail,
                });
                tokio::spawn(feed(
                    self.storage.clone(),
                    prefix.to_owned(),
                    Arc::clone(&window),
                ));
                window
            })
            .clone();
        let tail = window.tail.subscribe();
        Subscription { window, tail }
    }
}

/// Reads the store's history for `prefix` into the window, forever.
async fn feed(storage: Storage, prefix: String, window: Arc<Window>) {
    let mut revisions = storage.subscribe();
    let mut next = *window.start.read().unwrap_or_else(PoisonError::into_inner);
    loop {
        let (changes, after) = match storage.changes(&prefix, next, PULL) {
            Ok(c) => c,
            Err(_) => {
                // History was compacted under us: restart the window at the present.
                let now = storage.current_revision();
                let mut events = window
                    .events
                    .write()
                    .unwrap_or_else(PoisonError::into_inner);
                events.clear();
                *window.start.write().unwrap_or_else(PoisonError::into_inner) = now + 1;
                next = now + 1;
                window.tail.send_replace(now);
                continue;
            }
        };
        let decoded: Vec<Arc<CachedEvent>> = changes
            .into_iter()
            .filter_map(|(revision, change)| {
                let event = match change {
                    Change::Put { value, prev, .. } => {
                        let object = decode(&value.value, value.revision)?;
                        let prev = prev.and_then(|p| decode(&p.value, p.revision));
                        let kind = if prev.is_some() { "MODIFIED" } else { "ADDED" };
                        CachedEvent {
                            revision,
                            line: line(kind, &object),
                            object,
                            prev,
                            deleted: false,
                        }
                    }
                    Change::Delete { prev, .. } => {
                        let object = decode(&prev.value, prev.revision)?;
                        CachedEvent {
                            revision,
                            line: line("DELETED", &object),
                            object,
                            prev: None,
                            deleted: true,
                        }
                    }
                };
                Some(Arc::new(event))
            })
            .collect();
        {
            let mut events = window
                .events
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            events.extend(decoded);
            let excess = events.len().saturating_sub(WINDOW);
            if excess > 0 {
                events.drain(..excess);
                if let Some(first) = events.front() {
                    *window.start.write().unwrap_or_else(PoisonError::into_inner) = first.revision;
                }
            }
        }
        next = after;
        window.tail.send_replace(next - 1);
        if next <= *revisions.borrow() {
            continue;
        }
        if revisions.changed().await.is_err() {
            return;
        }
    }
}
