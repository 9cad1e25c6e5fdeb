//! The watch cache (upstream's Cacher): per resource, the current objects and a window of
//! recent changes, kept up to date by one feeder that reads the store's history once and
//! decodes each change once for every reader.
//!
//! - Objects are held as the stored JSON bytes, shared with the store (no second copy, no
//!   parsed tree), plus the few fields selectors read ([`CachedObject`]); lists and watch
//!   events are written by splicing `metadata.resourceVersion` into those bytes.
//! - LISTs are served from a [`Snapshot`]: for a consistent read (resourceVersion unset) the
//!   caller asks for the store's current revision first and the snapshot waits until the
//!   cache has caught up to it (upstream's ConsistentListFromCache).
//! - Watchers read the window through a [`Subscription`]; an event's line for watchers
//!   without selectors is serialised once and shared by all of them.
//!
//! A resource's cache is built on first use (a snapshot of the store, decoded on a blocking
//! thread); until it is ready, and for revisions older than its window, callers read the
//! store instead, which is correct but costs a decode per reader.

mod feed;
mod object;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock, Weak};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::watch;

pub use object::{CachedObject, Meta, stamp_revision};

use crate::storage::{Storage, prefix_end};

/// Events kept per resource.
const WINDOW: usize = 10_000;

/// How many of the newest events keep their serialised line: watchers read events within
/// moments of their arrival, so older lines are dropped (rebuilt on demand for a watch that
/// starts far back) instead of holding a second copy of every object in the window.
const LINES_KEPT: usize = 1_000;

/// A resource's cache that nobody has listed or watched for this long is dropped (its
/// feeder stops); the next reader builds it again from the store.
const IDLE: Duration = Duration::from_secs(600);

/// What a change did to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Updated.
    Modified,
    /// Deleted.
    Deleted,
}

impl EventKind {
    /// The watch event type.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Added => "ADDED",
            EventKind::Modified => "MODIFIED",
            EventKind::Deleted => "DELETED",
        }
    }
}

/// One change, decoded once.
#[derive(Debug)]
pub struct CachedEvent {
    /// Store revision of the change.
    pub revision: i64,
    /// What the change did.
    pub kind: EventKind,
    /// The object after the change (for a deletion: its last state at the deletion's
    /// revision).
    pub object: Arc<CachedObject>,
    /// The object before the change, for updates.
    pub prev: Option<Arc<CachedObject>>,
    line: OnceLock<Bytes>,
}

impl CachedEvent {
    /// `{"type":…,"object":…}\n` with the natural type: serialised on first use, then
    /// shared by every watcher without selectors.
    pub fn line(&self) -> Bytes {
        self.line
            .get_or_init(|| event_line(self.kind.as_str(), &self.object))
            .clone()
    }
}

/// A watch line: `{"type":T,"object":O}\n`.
pub fn event_line(kind: &str, obj: &CachedObject) -> Bytes {
    let mut out = Vec::with_capacity(obj.json_len() + 32);
    out.extend_from_slice(b"{\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\",\"object\":");
    obj.write_json(&mut out);
    out.extend_from_slice(b"}\n");
    Bytes::from(out)
}

/// The cached state of one resource.
#[derive(Default)]
struct State {
    /// Whether the first snapshot has been loaded.
    ready: bool,
    /// Current objects by storage key.
    objects: BTreeMap<Bytes, Arc<CachedObject>>,
    /// Recent changes in revision order.
    events: VecDeque<Arc<CachedEvent>>,
    /// Every change with a revision from here on is in `events`.
    start: i64,
    /// The revision `objects` reflect: every change up to it is applied.
    revision: i64,
}

/// One resource's cache.
struct Resource {
    /// Storage prefix of the resource (all namespaces).
    prefix: String,
    /// Selectable fields beyond name and namespace.
    fields: Vec<&'static str>,
    state: RwLock<State>,
    /// The revision the cache is complete up to (moves after `state` changed).
    tail: watch::Sender<i64>,
    /// Milliseconds since the cache's epoch of the last list or watch that used it.
    last_used: AtomicU64,
    /// Set when the cache was dropped for idleness: its feeder stops.
    evicted: AtomicBool,
}

impl Resource {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The current objects of a resource (under a key prefix) at one revision.
#[derive(Debug)]
pub struct Snapshot {
    /// The revision the objects are at.
    pub revision: i64,
    /// The objects in key order.
    pub objects: Vec<Arc<CachedObject>>,
}

/// What one resource's cache holds, for `/metrics`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceUsage {
    /// The resource's storage prefix (all namespaces), e.g. `/registry/configmaps/`.
    pub prefix: String,
    /// Current objects.
    pub objects: usize,
    /// Events in the window.
    pub events: usize,
    /// Bytes the cache adds to the store's: per object its decoded metadata and map entry
    /// (the JSON itself is shared with the store's values, counted there), plus the
    /// window's serialised event lines and previous or deleted versions' metadata.
    pub bytes: usize,
}

/// Caches of every listed or watched resource, created on first use and dropped after
/// [`IDLE`] without readers.
pub struct WatchCache {
    storage: Storage,
    resources: Arc<Mutex<HashMap<String, Arc<Resource>>>>,
    /// The clock `Resource::last_used` counts from.
    epoch: Instant,
    /// How long an unused cache is kept.
    idle: Duration,
    /// Whether the sweeper dropping idle caches runs.
    sweeping: AtomicBool,
}

/// A reader's view of one resource's window.
pub struct Subscription {
    resource: Arc<Resource>,
    tail: watch::Receiver<i64>,
    storage: Storage,
}

impl Subscription {
    /// Events with revision in `(after, …]` currently in the window and the revision the
    /// window is complete up to, or `None` when the window does not (or not yet) cover
    /// `after + 1`, or the store has compacted that revision (the window never serves
    /// history the store no longer has, so such a watch gets the store's 410 whether or not
    /// the window still holds it). Marks the window as seen: [`Subscription::changed`] then
    /// waits for anything newer.
    pub fn since(&mut self, after: i64) -> Option<(Vec<Arc<CachedEvent>>, i64)> {
        self.tail.borrow_and_update();
        let compacted = self.storage.compacted_revision();
        let state = self.resource.read();
        if !state.ready || after + 1 < state.start.max(compacted) {
            return None;
        }
        let from = state.events.partition_point(|e| e.revision <= after);
        let events = state.events.range(from..).cloned().collect();
        Some((events, state.revision))
    }

    /// Waits until the window grows; `false` if the feeder stopped.
    pub async fn changed(&mut self) -> bool {
        self.tail.changed().await.is_ok()
    }
}

impl WatchCache {
    /// A cache over `storage`.
    pub fn new(storage: Storage) -> Self {
        Self::with_idle(storage, IDLE)
    }

    /// A cache over `storage` whose unused resources are dropped after `idle`.
    pub fn with_idle(storage: Storage, idle: Duration) -> Self {
        WatchCache {
            storage,
            resources: Arc::new(Mutex::new(HashMap::new())),
            epoch: Instant::now(),
            idle,
            sweeping: AtomicBool::new(false),
        }
    }

    fn now_ms(epoch: Instant) -> u64 {
        u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// The cache of the resource stored under `prefix` (the all-namespaces prefix), whose
    /// selectable fields beyond name and namespace are `fields`; its feeder starts on first
    /// use.
    fn resource(&self, prefix: &str, fields: &[&'static str]) -> Arc<Resource> {
        if !self.sweeping.swap(true, Ordering::Relaxed) {
            tokio::spawn(sweep(
                Arc::downgrade(&self.resources),
                self.epoch,
                self.idle,
            ));
        }
        let now = Self::now_ms(self.epoch);
        let mut resources = self
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let resource = resources
            .entry(prefix.to_owned())
            .or_insert_with(|| {
                let (tail, _) = watch::channel(0);
                let resource = Arc::new(Resource {
                    prefix: prefix.to_owned(),
                    fields: fields
                        .iter()
                        .copied()
                        .filter(|f| !matches!(*f, "metadata.name" | "metadata.namespace"))
                        .collect(),
                    state: RwLock::new(State::default()),
                    tail,
                    last_used: AtomicU64::new(now),
                    evicted: AtomicBool::new(false),
                });
                tokio::spawn(feed::run(self.storage.clone(), Arc::clone(&resource)));
                resource
            })
            .clone();
        resource.last_used.store(now, Ordering::Relaxed);
        resource
    }

    /// Storage prefixes of the resources cached now.
    pub fn cached(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .keys()
            .cloned()
            .collect();
        out.sort();
        out
    }

    /// What every resource's cache holds (a walk of each under its read lock).
    pub fn usage(&self) -> Vec<ResourceUsage> {
        let resources: Vec<Arc<Resource>> = self
            .resources
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect();
        let mut out: Vec<ResourceUsage> = resources
            .iter()
            .map(|r| {
                let state = r.read();
                let objects: usize = state
                    .objects
                    .iter()
                    .map(|(k, o)| k.len() + 64 + o.own_bytes())
                    .sum();
                let window: usize = state
                    .events
                    .iter()
                    .map(|e| {
                        let object = if e.kind == EventKind::Deleted {
                            e.object.own_bytes()
                        } else {
                            0
                        };
                        let prev = e.prev.as_ref().map_or(0, |p| p.own_bytes());
                        let line = e.line.get().map_or(0, Bytes::len);
                        object + prev + line + std::mem::size_of::<CachedEvent>()
                    })
                    .sum();
                ResourceUsage {
                    prefix: r.prefix.clone(),
                    objects: state.objects.len(),
                    events: state.events.len(),
                    bytes: objects + window,
                }
            })
            .collect();
        out.sort_by(|a, b| a.prefix.cmp(&b.prefix));
        out
    }

    /// Subscribes to the window of the resource stored under `prefix` (see
    /// [`WatchCache::snapshot`] for `fields`).
    pub fn subscribe(&self, prefix: &str, fields: &[&'static str]) -> Subscription {
        let resource = self.resource(prefix, fields);
        let tail = resource.tail.subscribe();
        Subscription {
            resource,
            tail,
            storage: self.storage.clone(),
        }
    }

    /// The objects whose keys start with `key_prefix` of the resource stored under `prefix`
    /// (selectable fields `fields`), at a revision of at least `min`: waits up to `wait` for
    /// the cache to be built and to catch up. `None` when it did not in time (the caller
    /// reads the store instead).
    pub async fn snapshot(
        &self,
        prefix: &str,
        fields: &[&'static str],
        key_prefix: &str,
        min: i64,
        wait: Duration,
    ) -> Option<Snapshot> {
        let resource = self.resource(prefix, fields);
        let mut tail = resource.tail.subscribe();
        let end = prefix_end(key_prefix.as_bytes());
        let take = async {
            loop {
                tail.borrow_and_update();
                {
                    let state = resource.read();
                    if state.ready && state.revision >= min {
                        let bounds = (
                            Bound::Included(key_prefix.as_bytes()),
                            Bound::Excluded(end.as_slice()),
                        );
                        let objects = state
                            .objects
                            .range::<[u8], _>(bounds)
                            .map(|(_, o)| Arc::clone(o))
                            .collect();
                        return Some(Snapshot {
                            revision: state.revision,
                            objects,
                        });
                    }
                }
                if tail.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(wait, take).await.ok().flatten()
    }
}

/// Every `idle / 4`, drops the caches nobody holds a subscription to and nobody listed
/// for `idle` (upstream's cacher keeps every resource forever; here a resource nobody reads
/// costs nothing). Ends when the [`WatchCache`] is dropped.
async fn sweep(
    resources: Weak<Mutex<HashMap<String, Arc<Resource>>>>,
    epoch: Instant,
    idle: Duration,
) {
    let period = (idle / 4).max(Duration::from_millis(10));
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    loop {
        tokio::time::sleep(period).await;
        let Some(resources) = resources.upgrade() else {
            return;
        };
        let now = WatchCache::now_ms(epoch);
        let mut map = resources.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|prefix, r| {
            // Held by the map and its feeder only: no subscription, no reader in flight
            // (readers clone the `Arc` under this lock).
            let unused = Arc::strong_count(r) <= 2
                && now.saturating_sub(r.last_used.load(Ordering::Relaxed)) >= idle_ms;
            if unused {
                tracing::debug!(prefix = %prefix, "watch cache: dropped an unused resource");
                r.evicted.store(true, Ordering::Relaxed);
                // Wakes nobody but lets the feeder see `evicted` at its next change.
                r.tail.send_modify(|_| {});
            }
            !unused
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const PREFIX: &str = "/registry/core/configmaps/";

    fn cm(ns: &str, name: &str, app: &str) -> Vec<u8> {
        let v = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns, "labels": {"app": app}}});
        serde_json::to_vec(&v).unwrap()
    }

    fn rv(obj: &CachedObject) -> String {
        obj.to_map().unwrap()["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lists_and_events_follow_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = store::StoreConfig::new("t", dir.path());
        let (node, _driver) = store::node::Node::start(&cfg).unwrap();
        let storage = Storage::new(node);
        let key = |ns: &str, n: &str| format!("{PREFIX}{ns}/{n}");
        let x = storage
            .create(&key("a", "x"), cm("a", "x", "web"))
            .await
            .unwrap();
        let y = storage
            .create(&key("b", "y"), cm("b", "y", "db"))
            .await
            .unwrap();
        let cache = WatchCache::new(storage.clone());
        let wait = Duration::from_secs(5);

        // A consistent snapshot of one namespace, resourceVersions stamped.
        let now = storage.linearizable_revision().await.unwrap();
        let snap = cache
            .snapshot(PREFIX, &[], &format!("{PREFIX}b/"), now, wait)
            .await
            .unwrap();
        assert!(snap.revision >= now);
        assert_eq!(snap.objects.len(), 1);
        assert_eq!(rv(&snap.objects[0]), y.to_string());
        assert_eq!(snap.objects[0].meta().label("app"), Some("db"));

        // An update and a deletion reach subscribers with their previous state.
        let mut sub = cache.subscribe(PREFIX, &[]);
        let (events, covered) = sub.since(snap.revision).unwrap();
        assert!(events.is_empty());
        let updated = storage
            .update(&key("b", "y"), cm("b", "y", "web"), y)
            .await
            .unwrap();
        let gone = storage.delete(&key("a", "x"), x).await.unwrap();
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let (events, _) = sub.since(covered).unwrap();
            seen = events;
            if seen.len() < 2 {
                assert!(sub.changed().await);
            }
        }
        assert_eq!(seen[0].kind, EventKind::Modified);
        assert_eq!(seen[0].revision, updated);
        let prev = seen[0].prev.as_ref().unwrap();
        assert_eq!(prev.meta().label("app"), Some("db"));
        let line: Value = serde_json::from_slice(&seen[0].line()).unwrap();
        assert_eq!(line["type"], "MODIFIED");
        assert_eq!(
            line["object"]["metadata"]["resourceVersion"],
            updated.to_string()
        );
        assert_eq!(seen[1].kind, EventKind::Deleted);
        assert_eq!(rv(&seen[1].object), gone.to_string());

        // A resource nobody subscribes to or lists is dropped after the idle time; one
        // with a subscription stays.
        let idle = WatchCache::with_idle(storage.clone(), Duration::from_millis(200));
        let other = "/registry/core/secrets/";
        idle.snapshot(PREFIX, &[], PREFIX, 0, wait).await.unwrap();
        idle.snapshot(other, &[], other, 0, wait).await.unwrap();
        let held = idle.subscribe(PREFIX, &[]);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while idle.cached().len() > 1 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{:?}",
                idle.cached()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(idle.cached(), vec![PREFIX.to_owned()]);
        drop(held);
        // Built again on the next read, complete.
        let again = idle.snapshot(other, &[], other, 0, wait).await.unwrap();
        assert!(again.objects.is_empty());
        let cms = idle.snapshot(PREFIX, &[], PREFIX, 0, wait).await.unwrap();
        assert_eq!(cms.objects.len(), 1, "x was deleted above");

        // History the store compacted is not served from the window.
        storage.compact(gone).await.unwrap();
        assert!(sub.since(covered).is_none());
        assert!(sub.since(gone - 1).is_some());
    }
}
