//! What the API clients' caches hold, for the process's `/metrics`.
//!
//! The controllers, the scheduler and the simulated nodes run in the API server's process
//! under `capstan server` but reach it only through the API: they cannot hand their caches
//! to the server's metrics. Each cache instead takes a [`CacheUsage`] from [`cache`] and keeps
//! its object count and byte estimate there; the API server reads every live one with
//! [`caches`] when `/metrics` is scraped. A cache's entry disappears when its owner drops the
//! last handle (a controller manager that lost its leadership, a stopped informer).

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

/// The object count and byte estimate of one cache.
#[derive(Debug, Default)]
pub struct CacheUsage {
    objects: AtomicI64,
    bytes: AtomicI64,
}

impl CacheUsage {
    /// Records an object added (`bytes` of it).
    pub fn add(&self, bytes: usize) {
        self.objects.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(to_i64(bytes), Ordering::Relaxed);
    }

    /// Records an object removed (`bytes` of it, as it was added).
    pub fn remove(&self, bytes: usize) {
        self.objects.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(to_i64(bytes), Ordering::Relaxed);
    }

    /// Records an object replaced: `old` bytes by `new` bytes.
    pub fn replace(&self, old: usize, new: usize) {
        self.bytes
            .fetch_add(to_i64(new) - to_i64(old), Ordering::Relaxed);
    }

    /// Sets both figures (a cache rebuilt from a new list).
    pub fn set(&self, objects: usize, bytes: usize) {
        self.objects.store(to_i64(objects), Ordering::Relaxed);
        self.bytes.store(to_i64(bytes), Ordering::Relaxed);
    }

    /// Objects held.
    pub fn objects(&self) -> i64 {
        self.objects.load(Ordering::Relaxed)
    }

    /// Bytes held (an estimate: the objects' JSON size, or the cache's own accounting).
    pub fn bytes(&self) -> i64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// One registered cache.
struct Entry {
    component: &'static str,
    kind: String,
    usage: Weak<CacheUsage>,
}

/// Every cache registered in this process.
static REGISTRY: Mutex<Vec<Entry>> = Mutex::new(Vec::new());

/// A new cache of `kind` (e.g. `pods`, `configmaps`) kept by `component` (e.g.
/// `controller-manager`, `garbage-collector`, `scheduler`): report its contents through the
/// returned handle for as long as it is held.
pub fn cache(component: &'static str, kind: impl Into<String>) -> Arc<CacheUsage> {
    let usage = Arc::new(CacheUsage::default());
    let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    registry.retain(|e| e.usage.strong_count() > 0);
    registry.push(Entry {
        component,
        kind: kind.into(),
        usage: Arc::downgrade(&usage),
    });
    usage
}

/// One live cache's figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheFigures {
    /// Who keeps it.
    pub component: &'static str,
    /// What it holds.
    pub kind: String,
    /// Objects held.
    pub objects: i64,
    /// Bytes held (estimate).
    pub bytes: i64,
}

/// Every live cache's figures, summed by component and kind (several controller managers
/// of a test process, several simulated nodes).
pub fn caches() -> Vec<CacheFigures> {
    let mut registry = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
    registry.retain(|e| e.usage.strong_count() > 0);
    let mut out: Vec<CacheFigures> = Vec::new();
    for e in registry.iter() {
        let Some(u) = e.usage.upgrade() else { continue };
        match out
            .iter_mut()
            .find(|f| f.component == e.component && f.kind == e.kind)
        {
            Some(f) => {
                f.objects += u.objects();
                f.bytes += u.bytes();
            }
            None => out.push(CacheFigures {
                component: e.component,
                kind: e.kind.clone(),
                objects: u.objects(),
                bytes: u.bytes(),
            }),
        }
    }
    out.sort_by(|a, b| (a.component, &a.kind).cmp(&(b.component, &b.kind)));
    out
}

/// The length of `value`'s JSON encoding, without building it (0 if it cannot be encoded).
pub fn json_size<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Count(0);
    match serde_json::to_writer(&mut c, value) {
        Ok(()) => c.0,
        Err(_) => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_is_reported_while_held_and_summed_by_kind() {
        let a = cache("test-caches", "widgets");
        let b = cache("test-caches", "widgets");
        a.add(100);
        a.add(50);
        b.add(10);
        a.replace(50, 70);
        a.remove(100);
        let mine: Vec<_> = caches()
            .into_iter()
            .filter(|f| f.component == "test-caches")
            .collect();
        assert_eq!(
            mine,
            vec![CacheFigures {
                component: "test-caches",
                kind: "widgets".into(),
                objects: 2,
                bytes: 80,
            }]
        );
        drop((a, b));
        assert!(caches().iter().all(|f| f.component != "test-caches"));
    }

    #[test]
    fn json_size_is_the_encoded_length() {
        let v = serde_json::json!({"a": [1, 2, "x"]});
        assert_eq!(json_size(&v), serde_json::to_vec(&v).map_or(0, |b| b.len()));
    }
}
