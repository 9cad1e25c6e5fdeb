//! The scheduling queue, as upstream's `internal/queue`: an active queue ordered by priority
//! then age, a backoff queue (1 s doubling up to 10 s per failed attempt) and the
//! unschedulable pods, which cluster events (node added or changed, pod deleted, …) move
//! back, and which are retried anyway after five minutes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

/// First backoff after a failed attempt.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest backoff.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// Unschedulable pods are retried after this long even without an event.
pub const MAX_UNSCHEDULABLE: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    /// In the active heap with this sequence number.
    Active(u64),
    /// Waiting in the backoff heap until this instant.
    Backoff(Instant),
    /// Parked as unschedulable since this instant.
    Unschedulable(Instant),
    /// Popped, being scheduled or bound.
    InFlight,
}

/// A pod waiting to be scheduled.
#[derive(Debug, Clone)]
pub struct QueuedPod {
    /// The pod as last seen.
    pub pod: Arc<Pod>,
    /// Scheduling attempts so far.
    pub attempts: u32,
    /// When the pod first entered the queue.
    pub initial: Instant,
    /// When the last attempt failed.
    last_failure: Option<Instant>,
    /// Hash of the fields whose change makes a retry worthwhile.
    spec_hash: u64,
    /// Plugins that rejected it last time.
    pub plugins: Vec<&'static str>,
    place: Where,
}

/// Hash of a pod's spec and labels (status changes, including our own, do not count).
pub fn spec_hash(pod: &Pod) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    serde_json::to_string(&pod.spec)
        .unwrap_or_default()
        .hash(&mut h);
    pod.metadata.labels.hash(&mut h);
    h.finish()
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The queue.
#[derive(Debug, Default)]
pub struct Queue {
    pods: HashMap<String, QueuedPod>,
    active: BinaryHeap<(i32, Reverse<u64>, String)>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    seq: u64,
    last_flush: Option<Instant>,
    /// Keys of the pods parked as unschedulable.
    parked: std::collections::HashSet<String>,
}

/// Counts for `scheduler_pending_pods`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pending {
    /// Active queue length.
    pub active: i64,
    /// Backoff queue length.
    pub backoff: i64,
    /// Unschedulable pods.
    pub unschedulable: i64,
}

impl Queue {
    fn activate(&mut self, key: &str) {
        self.seq += 1;
        let seq = self.seq;
        self.parked.remove(key);
        if let Some(q) = self.pods.get_mut(key) {
            q.place = Where::Active(seq);
            self.active
                .push((priority(&q.pod), Reverse(seq), key.to_owned()));
        }
    }

    fn backoff_until(q: &QueuedPod) -> Option<Instant> {
        let last = q.last_failure?;
        let shift = q.attempts.saturating_sub(1).min(8);
        let d = (INITIAL_BACKOFF * (1u32 << shift)).min(MAX_BACKOFF);
        Some(last + d)
    }

    /// Moves `key` to the active queue, or to backoff if its backoff has not expired.
    fn requeue(&mut self, key: &str, now: Instant) {
        let Some(q) = self.pods.get(key) else { return };
        match Self::backoff_until(q) {
            Some(until) if until > now => {
                self.seq += 1;
                let seq = self.seq;
                self.parked.remove(key);
                if let Some(q) = self.pods.get_mut(key) {
                    q.place = Where::Backoff(until);
                }
                self.backoff.push(Reverse((until, seq, key.to_owned())));
            }
            _ => self.activate(key),
        }
    }

    /// Adds a pending pod, or updates it; an unschedulable pod whose spec changed is retried.
    pub fn add_or_update(&mut self, key: &str, pod: Arc<Pod>) -> bool {
        let hash = spec_hash(&pod);
        match self.pods.get_mut(key) {
            Some(q) => {
                let changed = q.spec_hash != hash;
                q.pod = pod;
                q.spec_hash = hash;
                if changed && matches!(q.place, Where::Unschedulable(_)) {
                    self.requeue(key, Instant::now());
                    return true;
                }
                false
            }
            None => {
                self.pods.insert(
                    key.to_owned(),
                    QueuedPod {
                        pod,
                        attempts: 0,
                        initial: Instant::now(),
                        last_failure: None,
                        spec_hash: hash,
                        plugins: vec![],
                        place: Where::InFlight,
                    },
                );
                self.activate(key);
                true
            }
        }
    }

    /// Forgets a pod (deleted, bound or no longer ours).
    pub fn delete(&mut self, key: &str) -> Option<QueuedPod> {
        self.parked.remove(key);
        self.pods.remove(key)
    }

    /// True when the queue holds `key` in any state.
    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Moves expired backoffs to the active queue, and pods unschedulable for too long.
    pub fn flush(&mut self, now: Instant) {
        while let Some(Reverse((until, _, key))) = self.backoff.peek().cloned() {
            if until > now {
                break;
            }
            self.backoff.pop();
            if self.pods.get(&key).map(|q| q.place) == Some(Where::Backoff(until)) {
                self.activate(&key);
            }
        }
        if self
            .last_flush
            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(30))
        {
            self.last_flush = Some(now);
            let stale: Vec<String> = self
                .parked
                .iter()
                .filter_map(|k| self.pods.get_key_value(k))
                .filter(|(_, q)| {
                    matches!(q.place, Where::Unschedulable(since) if now.duration_since(since) > MAX_UNSCHEDULABLE)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for k in stale {
                self.activate(&k);
            }
        }
    }

    /// When the next backoff expires.
    pub fn next_wakeup(&self) -> Option<Instant> {
        self.backoff.peek().map(|Reverse((t, _, _))| *t)
    }

    /// Takes the highest-priority, oldest active pod (marking it in flight).
    pub fn pop(&mut self) -> Option<(String, QueuedPod)> {
        while let Some((_, Reverse(seq), key)) = self.active.pop() {
            if let Some(q) = self.pods.get_mut(&key)
                && q.place == Where::Active(seq)
            {
                q.place = Where::InFlight;
                q.attempts += 1;
                return Some((key, q.clone()));
            }
        }
        None
    }

    /// Parks an in-flight pod as unschedulable (rejected by `plugins`).
    pub fn unschedulable(&mut self, key: &str, plugins: Vec<&'static str>) {
        let now = Instant::now();
        if let Some(q) = self.pods.get_mut(key) {
            q.last_failure = Some(now);
            q.plugins = plugins;
            q.place = Where::Unschedulable(now);
            self.parked.insert(key.to_owned());
        }
    }

    /// Puts a pod back after an error (or a failed binding), with backoff; re-adds it when
    /// it had already left the queue.
    pub fn backoff(&mut self, key: &str, pod: Arc<Pod>, attempts: u32, initial: Instant) {
        let now = Instant::now();
        let q = self
            .pods
            .entry(key.to_owned())
            .or_insert_with(|| QueuedPod {
                spec_hash: spec_hash(&pod),
                pod,
                attempts,
                initial,
                last_failure: None,
                plugins: vec![],
                place: Where::InFlight,
            });
        q.last_failure = Some(now);
        self.requeue(key, now);
    }

    /// A cluster event: moves unschedulable pods back (all of them, or only those rejected
    /// by one of `plugins`).
    pub fn move_unschedulable(&mut self, plugins: Option<&[&str]>) -> usize {
        let now = Instant::now();
        let keys: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, q)| matches!(q.place, Where::Unschedulable(_)))
            .filter(|(_, q)| plugins.is_none_or(|ps| q.plugins.iter().any(|p| ps.contains(p))))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &keys {
            self.requeue(k, now);
        }
        keys.len()
    }

    /// True when some pod is parked as unschedulable.
    pub fn has_unschedulable(&self) -> bool {
        !self.parked.is_empty()
    }

    /// Pending pods by queue.
    pub fn pending(&self) -> Pending {
        let mut p = Pending::default();
        for q in self.pods.values() {
            match q.place {
                Where::Active(_) | Where::InFlight => p.active += 1,
                Where::Backoff(_) => p.backoff += 1,
                Where::Unschedulable(_) => p.unschedulable += 1,
            }
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, prio: i32) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                priority: Some(prio),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn higher_priority_first_then_fifo() {
        let mut q = Queue::default();
        q.add_or_update("a", pod("a", 0));
        q.add_or_update("b", pod("b", 10));
        q.add_or_update("c", pod("c", 0));
        let order: Vec<String> = std::iter::from_fn(|| q.pop().map(|(k, _)| k)).collect();
        assert_eq!(order, vec!["b", "a", "c"]);
    }

    #[test]
    fn unschedulable_pods_wait_for_an_event_then_back_off() {
        let mut q = Queue::default();
        q.add_or_update("a", pod("a", 0));
        assert!(q.pop().is_some());
        q.unschedulable("a", vec!["NodeResourcesFit"]);
        assert!(q.pop().is_none());
        // A pod-affinity related event does not help a resources failure.
        assert_eq!(q.move_unschedulable(Some(&["InterPodAffinity"])), 0);
        assert_eq!(q.move_unschedulable(None), 1);
        // Still within its 1 s backoff: in the backoff queue, not active.
        assert_eq!(q.pending().backoff, 1);
        assert!(q.pop().is_none());
        q.flush(Instant::now() + Duration::from_secs(2));
        assert!(q.pop().is_some());
    }

    #[test]
    fn a_spec_change_retries_an_unschedulable_pod_but_a_status_change_does_not() {
        let mut q = Queue::default();
        q.add_or_update("a", pod("a", 0));
        q.pop();
        q.unschedulable("a", vec![]);
        let mut same = (*pod("a", 0)).clone();
        same.status = Some(Default::default());
        assert!(!q.add_or_update("a", Arc::new(same)));
        assert!(q.add_or_update("a", pod("a", 5)));
    }
}
