//! client-go's rate-limited work queue, for controllers that keep their own informers: a key
//! is queued at most once, is never processed by two workers at once (a key added while being
//! processed is queued again when done), and failures are retried with per-key exponential
//! backoff (5 ms doubling up to 1000 s, `DefaultControllerRateLimiter`'s item limiter).

use std::collections::{HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, ReconcileError};

#[derive(Default)]
struct Inner {
    queue: VecDeque<String>,
    dirty: HashSet<String>,
    processing: HashSet<String>,
    failures: HashMap<String, u32>,
    shut: bool,
}

/// A de-duplicating work queue of object keys (`namespace/name`, or `name`).
#[derive(Clone, Default)]
pub(crate) struct Queue {
    inner: Arc<Mutex<Inner>>,
    notify: Arc<Notify>,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues `key` unless it is queued already.
    pub(crate) fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut g = self.lock();
        if g.shut || !g.dirty.insert(key.clone()) {
            return;
        }
        if g.processing.contains(&key) {
            return;
        }
        g.queue.push_back(key);
        drop(g);
        self.notify.notify_one();
    }

    /// Queues `key` after `delay`.
    pub(crate) fn add_after(&self, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let q = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            q.add(key);
        });
    }

    /// Queues `key` after its backoff, which doubles with each consecutive failure.
    pub(crate) fn add_rate_limited(&self, key: impl Into<String>) {
        let key = key.into();
        let n = {
            let mut g = self.lock();
            let n = g.failures.entry(key.clone()).or_insert(0);
            *n += 1;
            *n - 1
        };
        let delay = Duration::from_millis(5)
            .saturating_mul(1u32.checked_shl(n.min(31)).unwrap_or(u32::MAX))
            .min(Duration::from_secs(1000));
        self.add_after(key, delay);
    }

    /// Clears `key`'s failure count.
    pub(crate) fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// The next key to process (None once shut down); call `done` after processing it.
    pub(crate) async fn get(&self) -> Option<String> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut g = self.lock();
                if g.shut {
                    return None;
                }
                if let Some(k) = g.queue.pop_front() {
                    g.dirty.remove(&k);
                    g.processing.insert(k.clone());
                    let more = !g.queue.is_empty();
                    drop(g);
                    if more {
                        self.notify.notify_one();
                    }
                    return Some(k);
                }
            }
            notified.await;
        }
    }

    /// Marks `key` processed; queues it again if it was added meanwhile.
    pub(crate) fn done(&self, key: &str) {
        let mut g = self.lock();
        g.processing.remove(key);
        if g.dirty.contains(key) {
            g.queue.push_back(key.to_owned());
            drop(g);
            self.notify.notify_one();
        }
    }

    /// Stops handing out keys.
    pub(crate) fn shut_down(&self) {
        self.lock().shut = true;
        self.notify.notify_waiters();
    }
}

/// What a sync returns: `Some(d)` asks to look again after `d`.
pub(crate) type SyncResult = Result<Option<Duration>, ReconcileError>;

/// Runs `workers` workers calling `sync` for each key until `shutdown`; failed keys are
/// retried with backoff, successful ones forgotten.
pub(crate) async fn run_workers<F, Fut>(
    ctx: &Context,
    queue: &Queue,
    workers: usize,
    shutdown: &CancellationToken,
    sync: F,
) where
    F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = SyncResult> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..workers.max(1) {
        let (q, sync, ctx) = (queue.clone(), sync.clone(), ctx.clone());
        set.spawn(async move {
            while let Some(key) = q.get().await {
                let result = sync(key.clone()).await;
                ctx.metrics.reconciled(ctx.name, result.is_ok());
                match result {
                    Ok(again) => {
                        q.forget(&key);
                        if let Some(d) = again {
                            q.add_after(key.clone(), d);
                        }
                    }
                    Err(e) => {
                        if matches!(&e, ReconcileError::Kube(kube::Error::Api(s)) if s.code == 409) {
                            tracing::debug!(controller = ctx.name, key = %key, error = %e, "conflict; requeued");
                        } else {
                            tracing::warn!(controller = ctx.name, key = %key, error = %e, "sync failed; requeued");
                        }
                        q.add_rate_limited(key.clone());
                    }
                }
                q.done(&key);
            }
        });
    }
    shutdown.cancelled().await;
    queue.shut_down();
    while set.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::Queue;

    #[tokio::test]
    async fn keys_are_deduplicated_and_requeued_after_processing() {
        let q = Queue::default();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        // Added while processing: not handed out until done.
        q.add("a");
        assert_eq!(q.get().await.as_deref(), Some("b"));
        q.done("b");
        q.done("a");
        assert_eq!(q.get().await.as_deref(), Some("a"));
        q.done("a");
        q.shut_down();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test]
    async fn failures_back_off_and_forget_resets() {
        let q = Queue::default();
        q.add_rate_limited("k");
        let got = tokio::time::timeout(std::time::Duration::from_secs(1), q.get()).await;
        assert_eq!(got.ok().flatten().as_deref(), Some("k"));
        q.done("k");
        assert_eq!(q.lock().failures.get("k"), Some(&1));
        q.forget("k");
        assert!(q.lock().failures.is_empty());
    }
}
