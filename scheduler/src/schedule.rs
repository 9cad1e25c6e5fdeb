//! The scheduling loop (upstream's `scheduleOne`): pop the next pod, run the algorithm under
//! the cache lock, assume the pod on its node and bind asynchronously (many bindings in
//! flight), or run preemption and report the failure. Watch handlers feed the cache and
//! queue and move unschedulable pods back on the events that could help them.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, ReplicationController, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::bind::{Writer, pod_ref};
use crate::cache::{Cache, NodeChange, Nominated, PodInfo, pod_key};
use crate::framework::resources::pod_requests;
use crate::framework::selector::Selector;
use crate::framework::{FitError, Outcome, PodCtx, Rng, schedule_pod};
use crate::metrics::Metrics;
use crate::preemption::{self, Pdb};
use crate::queue::Queue;

/// Cache and queue, under one lock.
#[derive(Default)]
pub struct State {
    /// The cluster view.
    pub cache: Cache,
    /// Pending pods.
    pub queue: Queue,
    next_start: usize,
}

/// The running scheduler.
pub struct Scheduler {
    state: Mutex<State>,
    wake: Notify,
    profiles: Vec<String>,
    percentage: u32,
    writer: Writer,
    metrics: Arc<Metrics>,
    pdbs: Store<PodDisruptionBudget>,
    owners: Owners,
    /// Claims, volumes and classes (VolumeBinding).
    volumes: crate::volumes::Volumes,
    /// Nodes and pods have been listed once.
    synced: Mutex<(bool, bool)>,
    /// Bounds the bindings (and failure reports) in flight.
    in_flight: Arc<Semaphore>,
    /// Bounds the events being written, so they never starve bindings.
    events: Arc<Semaphore>,
}

/// Bindings and failure reports in flight at most.
pub const MAX_IN_FLIGHT: usize = 256;
/// Events being written at most.
pub const MAX_EVENTS_IN_FLIGHT: usize = 32;
/// How long the scheduling loop runs attempts back to back before it yields the thread.
const SLICE: Duration = Duration::from_millis(2);

fn is_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

impl Scheduler {
    /// A scheduler for `profiles` (scheduler names).
    pub fn new(
        writer: Writer,
        profiles: Vec<String>,
        percentage: u32,
        metrics: Arc<Metrics>,
        pdbs: Store<PodDisruptionBudget>,
        owners: Owners,
        volumes: crate::volumes::Volumes,
    ) -> Arc<Scheduler> {
        Arc::new(Scheduler {
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            profiles,
            percentage,
            writer,
            metrics,
            pdbs,
            owners,
            volumes,
            synced: Mutex::new((false, false)),
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
            events: Arc::new(Semaphore::new(MAX_EVENTS_IN_FLIGHT)),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn responsible(&self, pod: &Pod) -> bool {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler");
        self.profiles.iter().any(|p| p == name)
    }

    fn profile_of(pod: &Pod) -> String {
        pod.spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| "default-scheduler".into())
    }

    /// Applies one pod from the watch.
    fn on_pod(&self, st: &mut State, pod: Pod) {
        let key = pod_key(&pod);
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .filter(|n| !n.is_empty());
        if is_terminal(&pod) {
            st.queue.delete(&key);
            st.cache.nominated.remove(&key);
            if st.cache.remove_pod(&key).is_some() {
                st.queue.move_unschedulable(None);
            }
            return;
        }
        if let Some(node) = node {
            st.queue.delete(&key);
            let info = PodInfo::new(&pod, &node);
            let affinity_relevant = !info.labels.is_empty();
            st.cache.set_pod(info);
            if affinity_relevant && st.queue.has_unschedulable() {
                st.queue
                    .move_unschedulable(Some(&["InterPodAffinity", "PodTopologySpread"]));
            }
            return;
        }
        if !self.responsible(&pod) {
            return;
        }
        if st.cache.assumed.contains(&key) {
            return;
        }
        let gated = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty());
        if pod.metadata.deletion_timestamp.is_some() || gated {
            st.queue.delete(&key);
            st.cache.nominated.remove(&key);
            return;
        }
        match pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty())
        {
            Some(n) => {
                let requests = pod
                    .spec
                    .as_ref()
                    .map(|s| pod_requests(s).requests)
                    .unwrap_or_default();
                st.cache.nominated.insert(
                    key.clone(),
                    Nominated {
                        node: n,
                        priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
                        requests,
                    },
                );
            }
            None => {
                st.cache.nominated.remove(&key);
            }
        }
        if st.queue.add_or_update(&key, Arc::new(pod)) {
            self.wake.notify_one();
        }
    }

    fn on_pod_delete(&self, st: &mut State, key: &str) {
        st.queue.delete(key);
        st.cache.nominated.remove(key);
        if st.cache.remove_pod(key).is_some() && st.queue.move_unschedulable(None) > 0 {
            self.wake.notify_one();
        }
    }

    fn on_node(&self, st: &mut State, node: &Node) {
        if st.cache.upsert_node(node) != NodeChange::Unchanged
            && st.queue.move_unschedulable(None) > 0
        {
            self.wake.notify_one();
        }
    }

    /// Watches pods until `shutdown`; they are decoded without their managed fields
    /// ([`lean::LeanPod`]), which the scheduler never reads.
    pub async fn watch_pods(self: Arc<Self>, api: Api<lean::LeanPod>, shutdown: CancellationToken) {
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut seen: Option<HashSet<String>> = None;
        loop {
            let ev = tokio::select! {
                _ = shutdown.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(error = %e, "pod watch failed; retrying");
                    continue;
                }
            };
            let mut st = self.lock();
            match ev {
                Event::Init => seen = Some(HashSet::new()),
                Event::InitApply(pod) => {
                    let pod = Pod::from(pod);
                    if let Some(s) = seen.as_mut() {
                        s.insert(pod_key(&pod));
                    }
                    self.on_pod(&mut st, pod);
                }
                Event::InitDone => {
                    if let Some(s) = seen.take() {
                        let gone: Vec<String> = st
                            .cache
                            .pods
                            .keys()
                            .filter(|k| !s.contains(*k) && !st.cache.assumed.contains(*k))
                            .cloned()
                            .collect();
                        for k in gone {
                            self.on_pod_delete(&mut st, &k);
                        }
                    }
                    drop(st);
                    self.mark_synced(false);
                }
                Event::Apply(pod) => self.on_pod(&mut st, Pod::from(pod)),
                Event::Delete(pod) => self.on_pod_delete(&mut st, &pod_key(&Pod::from(pod))),
            }
        }
    }

    /// Watches nodes until `shutdown`.
    pub async fn watch_nodes(self: Arc<Self>, api: Api<Node>, shutdown: CancellationToken) {
        let mut stream = watcher::watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut seen: Option<HashSet<String>> = None;
        loop {
            let ev = tokio::select! {
                _ = shutdown.cancelled() => return,
                ev = stream.next() => ev,
            };
            let Some(ev) = ev else { return };
            let ev = match ev {
                Ok(ev) => ev,
                Err(e) => {
                    tracing::warn!(error = %e, "node watch failed; retrying");
                    continue;
                }
            };
            let mut st = self.lock();
            match ev {
                Event::Init => seen = Some(HashSet::new()),
                Event::InitApply(node) => {
                    if let Some(s) = seen.as_mut() {
                        s.insert(node.metadata.name.clone().unwrap_or_default());
                    }
                    self.on_node(&mut st, &node);
                }
                Event::InitDone => {
                    if let Some(s) = seen.take() {
                        for name in st.cache.node_names() {
                            if !s.contains(&name) {
                                st.cache.remove_node(&name);
                            }
                        }
                    }
                    drop(st);
                    self.mark_synced(true);
                }
                Event::Apply(node) => self.on_node(&mut st, &node),
                Event::Delete(node) => {
                    st.cache
                        .remove_node(node.metadata.name.as_deref().unwrap_or(""));
                }
            }
        }
    }

    fn mark_synced(&self, nodes: bool) {
        let mut s = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        if nodes {
            s.0 = true;
        } else {
            s.1 = true;
        }
        if s.0 && s.1 {
            self.wake.notify_one();
        }
    }

    fn is_synced(&self) -> bool {
        let s = self.synced.lock().unwrap_or_else(|e| e.into_inner());
        s.0 && s.1
    }

    fn pdbs(&self) -> Vec<Pdb> {
        self.pdbs
            .state()
            .iter()
            .map(|p| Pdb {
                namespace: p.metadata.namespace.clone().unwrap_or_default(),
                selector: Selector::new(p.spec.as_ref().and_then(|s| s.selector.as_ref())),
                allowed: i64::from(
                    p.status
                        .as_ref()
                        .map(|s| s.disruptions_allowed)
                        .unwrap_or(0),
                ),
            })
            .collect()
    }

    /// The scheduling loop; runs until `shutdown`.
    pub async fn run_loop(self: Arc<Self>, shutdown: CancellationToken) {
        let mut rng = Rng::seeded();
        let mut last_gauge: Option<Instant> = None;
        let mut slice = Instant::now();
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            if !self.is_synced() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = self.wake.notified() => {}
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
                continue;
            }
            let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
                return;
            };
            let next = {
                let mut st = self.lock();
                let now = Instant::now();
                st.queue.flush(now);
                if last_gauge.is_none_or(|t| now.duration_since(t) > Duration::from_secs(1)) {
                    last_gauge = Some(now);
                    self.metrics.set_pending(st.queue.pending());
                }
                match st.queue.pop() {
                    Some(p) => Ok(p),
                    None => Err(st.queue.next_wakeup()),
                }
            };
            match next {
                Ok((key, qp)) => {
                    self.schedule_one(key, qp, &mut rng, permit);
                    // Let watch handlers and binding tasks run between attempts, every
                    // SLICE: yielding after each pod would queue the loop behind every
                    // other task of a busy runtime once per pod (one task among thousands).
                    if slice.elapsed() >= SLICE {
                        tokio::task::yield_now().await;
                        slice = Instant::now();
                    }
                }
                Err(wakeup) => {
                    let sleep = wakeup
                        .map(|t| t.saturating_duration_since(Instant::now()))
                        .unwrap_or(Duration::from_secs(1))
                        .min(Duration::from_secs(1));
                    tokio::select! {
                        _ = shutdown.cancelled() => return,
                        _ = self.wake.notified() => {}
                        _ = tokio::time::sleep(sleep) => {}
                    }
                }
            }
        }
    }

    fn schedule_one(
        self: &Arc<Self>,
        key: String,
        qp: crate::queue::QueuedPod,
        rng: &mut Rng,
        permit: OwnedSemaphorePermit,
    ) {
        let started = Instant::now();
        let pod = qp.pod.clone();
        let Some(spec) = pod.spec.as_ref() else {
            self.lock().queue.delete(&key);
            return;
        };
        let profile = Self::profile_of(&pod);
        let mut ctx = PodCtx::new(&pod, spec);
        if ctx.spread.is_empty()
            && let Some(sel) = self.owners.default_selector(&pod)
        {
            ctx.set_default_spread(&sel);
        }
        let rejected = match self.volumes.pre_filter(&pod) {
            Ok(v) => {
                ctx.volumes = v.map(Arc::new);
                None
            }
            Err(status) => Some(status),
        };
        let mut st = self.lock();
        let pct = self.percentage;
        let outcome = match rejected {
            // A PreFilter rejection stands for every node (upstream's absent-nodes status).
            Some(status) => Outcome::NoFit(FitError {
                num_all_nodes: st.cache.nodes.len(),
                node_status: st
                    .cache
                    .nodes
                    .iter()
                    .map(|n| (n.name.clone(), status.clone()))
                    .collect(),
                absent_reason: None,
                post_filter_msg: None,
                pre_filter_msg: Some(status.reasons.join(", ")),
            }),
            None => {
                let State {
                    cache, next_start, ..
                } = &mut *st;
                schedule_pod(&ctx, cache, next_start, pct, rng)
            }
        };
        match outcome {
            Outcome::Fit { node } => {
                // VolumeBinding's plan for the node, carried out in PreBind.
                let actions = match (&ctx.volumes, st.cache.node(&node)) {
                    (Some(v), Some(info)) => {
                        crate::volumes::Volumes::plan(v, info).unwrap_or_default()
                    }
                    _ => Vec::new(),
                };
                let mut info = ctx.info.clone();
                info.node = node.clone();
                st.cache.assume(info);
                st.queue.delete(&key);
                drop(st);
                let this = self.clone();
                tokio::spawn(async move {
                    this.bind(key, qp, node, actions, profile, started, permit)
                        .await;
                });
            }
            Outcome::NoFit(mut fit) => {
                let pdbs = if fit.node_status.is_empty() {
                    vec![]
                } else {
                    self.pdbs()
                };
                let mut nominate = None;
                if !fit.node_status.is_empty() {
                    self.metrics.preemption_attempts.inc();
                    match preemption::preempt(&ctx, &st.cache, &fit, &pdbs, rng) {
                        preemption::Outcome::NotEligible(m)
                        | preemption::Outcome::NoCandidate(m) => {
                            fit.post_filter_msg = Some(m);
                        }
                        preemption::Outcome::Preempt(c) => {
                            st.cache.nominated.insert(
                                key.clone(),
                                Nominated {
                                    node: c.node.clone(),
                                    priority: ctx.priority(),
                                    requests: ctx.info.requests.clone(),
                                },
                            );
                            self.metrics
                                .preemption_victims
                                .observe(c.victims.len() as f64);
                            nominate = Some(c);
                        }
                    }
                }
                let plugins = fit.plugins();
                st.queue.unschedulable(&key, plugins);
                drop(st);
                let message = fit.message();
                tracing::debug!(pod = %key, %message, "unable to schedule pod");
                self.metrics
                    .attempt("unschedulable", &profile, started.elapsed().as_secs_f64());
                let this = self.clone();
                tokio::spawn(async move {
                    this.report_failure(pod, message, nominate, profile).await;
                    drop(permit);
                });
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn bind(
        self: Arc<Self>,
        key: String,
        qp: crate::queue::QueuedPod,
        node: String,
        actions: Vec<crate::volumes::Action>,
        profile: String,
        started: Instant,
        permit: OwnedSemaphorePermit,
    ) {
        let pod = &qp.pod;
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        // PreBind (VolumeBinding), then the binding; an error says whether to retry (not
        // when the pod is gone or already bound) and what FailedScheduling reports.
        let result: Result<(), (bool, String)> = async {
            if !actions.is_empty() {
                self.volumes
                    .pre_bind(self.writer.client(), ns, &node, actions)
                    .await
                    .map_err(|why| {
                        (
                            true,
                            format!("running PreBind plugin \"VolumeBinding\": {why}"),
                        )
                    })?;
            }
            self.writer.bind(ns, name, uid, &node).await.map_err(|e| {
                let gone = matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 409);
                (!gone, format!("Binding rejected: {e}"))
            })
        }
        .await;
        drop(permit);
        let Ok(_events) = self.events.clone().acquire_owned().await else {
            return;
        };
        match result {
            Ok(()) => {
                self.metrics
                    .attempt("scheduled", &profile, started.elapsed().as_secs_f64());
                self.metrics
                    .pod_duration
                    .get_or_create(&vec![("attempts".to_owned(), qp.attempts.to_string())])
                    .observe(qp.initial.elapsed().as_secs_f64());
                self.writer
                    .event(
                        &pod_ref(ns, name, uid),
                        false,
                        "Scheduled",
                        "Binding",
                        format!("Successfully assigned {ns}/{name} to {node}"),
                    )
                    .await;
            }
            Err((retry, message)) => {
                self.metrics
                    .attempt("error", &profile, started.elapsed().as_secs_f64());
                tracing::warn!(pod = %key, %node, error = %message, "binding failed");
                self.forget_assumed(&key, &qp, retry);
                if retry {
                    self.writer
                        .event(
                            &pod_ref(ns, name, uid),
                            true,
                            "FailedScheduling",
                            "Scheduling",
                            message,
                        )
                        .await;
                }
            }
        }
    }

    /// Drops a pod assumed on a node whose binding failed, queues it again with backoff
    /// (`retry`) and gives parked pods another chance, as the freed room may fit them.
    fn forget_assumed(&self, key: &str, qp: &crate::queue::QueuedPod, retry: bool) {
        {
            let mut st = self.lock();
            if st.cache.assumed.contains(key) {
                st.cache.remove_pod(key);
                if retry {
                    st.queue
                        .backoff(key, qp.pod.clone(), qp.attempts, qp.initial);
                }
                st.queue.move_unschedulable(None);
            }
        }
        self.wake.notify_one();
    }

    /// Claims, volumes or classes changed: pods parked by VolumeBinding try again.
    pub fn volumes_changed(&self) {
        let moved = self
            .lock()
            .queue
            .move_unschedulable(Some(&[crate::volumes::PLUGIN]));
        if moved > 0 {
            self.wake.notify_one();
        }
    }

    async fn report_failure(
        self: Arc<Self>,
        pod: Arc<Pod>,
        message: String,
        nominate: Option<preemption::Candidate>,
        profile: String,
    ) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        if let Some(c) = &nominate {
            for v in &c.victims {
                if v.terminating {
                    continue;
                }
                if let Err(e) = self.writer.preempt_victim(v, &profile, uid, &c.node).await {
                    tracing::warn!(victim = %v.key, error = %e, "preempting victim failed");
                }
            }
        }
        if let Err(e) = self
            .writer
            .mark_unschedulable(&pod, &message, nominate.as_ref().map(|c| c.node.as_str()))
            .await
        {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "updating pod status failed");
        }
        self.writer
            .event(
                &pod_ref(ns, name, uid),
                true,
                "FailedScheduling",
                "Scheduling",
                message,
            )
            .await;
    }
}

/// Starts a reflector of every `K` in the cluster; returns its store.
pub fn reflect<K>(client: kube::Client, shutdown: CancellationToken) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    reflect_notify(client, shutdown, None)
}

/// [`reflect`], waking `changed` whenever an object is added, changed or deleted.
pub fn reflect_notify<K>(
    client: kube::Client,
    shutdown: CancellationToken,
    changed: Option<Arc<Notify>>,
) -> Store<K>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let api: Api<K> = Api::all(client);
    let stream = reflector::reflector(writer, watcher::watcher(api, watcher::Config::default()))
        .default_backoff()
        .touched_objects();
    tokio::spawn(async move {
        let mut stream = stream.boxed();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                ev = stream.next() => match ev {
                    None => return,
                    Some(Err(e)) => tracing::debug!(error = %e, "watch failed"),
                    Some(Ok(_)) => {
                        if let Some(n) = &changed {
                            n.notify_one();
                        }
                    }
                }
            }
        }
    });
    reader
}

/// The objects PodTopologySpread's system-default constraints derive a pod's selector from
/// (upstream's `helper.DefaultSelector`): Services selecting it and its controlling
/// ReplicaSet, StatefulSet or ReplicationController.
#[derive(Clone)]
pub struct Owners {
    /// Services.
    pub services: Store<Service>,
    /// ReplicaSets.
    pub replica_sets: Store<ReplicaSet>,
    /// StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
    /// ReplicationControllers.
    pub controllers: Store<ReplicationController>,
}

impl Owners {
    /// Starts the reflectors.
    pub fn start(client: &kube::Client, shutdown: &CancellationToken) -> Owners {
        Owners {
            services: reflect(client.clone(), shutdown.clone()),
            replica_sets: reflect(client.clone(), shutdown.clone()),
            stateful_sets: reflect(client.clone(), shutdown.clone()),
            controllers: reflect(client.clone(), shutdown.clone()),
        }
    }

    /// The default selector for `pod`: empty when nothing selects it.
    pub fn default_selector(&self, pod: &Pod) -> Option<LabelSelector> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let empty = BTreeMap::new();
        let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
        let mut match_labels: BTreeMap<String, String> = BTreeMap::new();
        let mut exprs = Vec::new();
        let mut merge_map = |sel: &BTreeMap<String, String>| {
            for (k, v) in sel {
                match_labels.insert(k.clone(), v.clone());
            }
        };
        for svc in self.services.state() {
            if svc.metadata.namespace.as_deref() != Some(ns) {
                continue;
            }
            if let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref())
                && !sel.is_empty()
                && sel.iter().all(|(k, v)| labels.get(k) == Some(v))
            {
                merge_map(sel);
            }
        }
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        if let Some(o) = owner {
            let sel = match o.kind.as_str() {
                "ReplicaSet" => self
                    .replica_sets
                    .get(&reflector::ObjectRef::new(&o.name).within(ns))
                    .and_then(|r| r.spec.as_ref().map(|s| s.selector.clone())),
                "StatefulSet" => self
                    .stateful_sets
                    .get(&reflector::ObjectRef::new(&o.name).within(ns))
                    .and_then(|r| r.spec.as_ref().map(|s| s.selector.clone())),
                "ReplicationController" => {
                    if let Some(sel) = self
                        .controllers
                        .get(&reflector::ObjectRef::new(&o.name).within(ns))
                        .and_then(|r| r.spec.as_ref().and_then(|s| s.selector.clone()))
                    {
                        merge_map(&sel);
                    }
                    None
                }
                _ => None,
            };
            if let Some(sel) = sel {
                for (k, v) in sel.match_labels.iter().flatten() {
                    match_labels.insert(k.clone(), v.clone());
                }
                exprs.extend(sel.match_expressions.iter().flatten().cloned());
            }
        }
        if match_labels.is_empty() && exprs.is_empty() {
            return None;
        }
        Some(LabelSelector {
            match_labels: Some(match_labels),
            match_expressions: Some(exprs),
        })
    }
}
