//! The ReplicaSet and ReplicationController controllers (upstream's
//! `pkg/controller/replicaset`, which serves both): pods from the template with controller
//! owner references, slow-start batches, expectations so nothing is created or deleted twice,
//! adoption and release by selector, upstream's ranking of which pods to delete first, and the
//! status (`replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`,
//! `observedGeneration`, the `ReplicaFailure` condition).

pub(crate) mod pods;
pub(crate) mod rank;

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec, ReplicationController};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::{Context, ReconcileError, reference};
use crate::informer;
use crate::queue::{self, Queue, SyncResult};
use pods::Selector;

/// Upstream's `BurstReplicas`: most pods created or deleted in one sync.
const BURST_REPLICAS: usize = 500;
/// Upstream's `ExpectationsTimeout`.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(300);
/// `--concurrent-replicaset-syncs`.
const WORKERS: usize = 5;

/// What the controller needs from a ReplicaSet or a ReplicationController.
pub(crate) trait Replicated:
    Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
    + crate::informer::Watched
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The owner's `apiVersion` in owner references.
    const API_VERSION: &'static str;
    /// The selector over pods.
    fn selector(&self) -> Selector;
    /// `spec.replicas` (defaulted to 1).
    fn replicas(&self) -> i32;
    /// `spec.template`.
    fn template(&self) -> Option<&PodTemplateSpec>;
    /// `spec.minReadySeconds`.
    fn min_ready_seconds(&self) -> i32;
}

impl Replicated for ReplicaSet {
    const API_VERSION: &'static str = "apps/v1";
    fn selector(&self) -> Selector {
        Selector::from_label_selector(self.spec.as_ref().map(|s| &s.selector))
    }
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.as_ref())
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }
}

impl Replicated for ReplicationController {
    const API_VERSION: &'static str = "v1";
    fn selector(&self) -> Selector {
        Selector::from_map(self.spec.as_ref().and_then(|s| s.selector.as_ref()))
    }
    fn replicas(&self) -> i32 {
        self.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
    }
    fn template(&self) -> Option<&PodTemplateSpec> {
        self.spec.as_ref().and_then(|s| s.template.as_ref())
    }
    fn min_ready_seconds(&self) -> i32 {
        self.spec
            .as_ref()
            .and_then(|s| s.min_ready_seconds)
            .unwrap_or(0)
    }
}

/// Starts the ReplicaSet controller.
pub(crate) fn start_replicaset(ctx: Context, shutdown: CancellationToken) -> crate::LoopFuture {
    Box::pin(run::<ReplicaSet>(ctx, shutdown))
}

/// Starts the ReplicationController controller.
pub(crate) fn start_replicationcontroller(
    ctx: Context,
    shutdown: CancellationToken,
) -> crate::LoopFuture {
    Box::pin(run::<ReplicationController>(ctx, shutdown))
}

/// Pods created or deleted but not yet seen so by the informer (upstream's
/// `UIDTrackingControllerExpectations`, by pod name).
#[derive(Default)]
struct Expect {
    adds: HashSet<String>,
    /// Pods whose creation failed or was skipped do not count; `pending_adds` counts creates
    /// in flight whose names are not known yet.
    pending_adds: usize,
    dels: HashSet<String>,
    at: Option<Instant>,
}

/// Expectations per owner key.
#[derive(Clone, Default)]
struct Expectations(Arc<Mutex<HashMap<String, Expect>>>);

impl Expectations {
    fn with<R>(&self, key: &str, f: impl FnOnce(&mut Expect) -> R) -> R {
        let mut g = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(g.entry(key.to_owned()).or_default())
    }

    /// A pod event: its name is no longer an outstanding create.
    fn observe_pod(&self, owner_key: &str, pod: &str) {
        let mut g = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = g.get_mut(owner_key) {
            e.adds.remove(pod);
        }
    }

    fn forget(&self, key: &str) {
        let mut g = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        g.remove(key);
    }
}

/// Shared state of one controller.
struct Shared<K: Replicated> {
    ctx: Context,
    owners: Store<K>,
    pods: Store<Pod>,
    expectations: Expectations,
}

async fn run<K: Replicated>(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let expectations = Expectations::default();
    let q = queue.clone();
    let owners: Store<K> = ctx
        .informers
        .watch::<K>(
            Box::new(move |_old: Option<&K>, new: Option<&K>| {
                // Deleting an owner: nothing to do but forget; updates and adds sync.
                if let Some(o) = new.or(_old) {
                    q.add(informer::key(o));
                }
            }),
            &shutdown,
        )
        .await;
    let (q, exp, owners_for_pods) = (queue.clone(), expectations.clone(), owners.clone());
    let pods: Store<Pod> = ctx
        .informers
        .watch::<Pod>(
            Box::new(move |old: Option<&Pod>, new: Option<&Pod>| {
                for p in [old, new].into_iter().flatten() {
                    for key in owners_of_pod::<K>(&owners_for_pods, p) {
                        if let Some(n) = &p.metadata.name {
                            exp.observe_pod(&key, n);
                        }
                        q.add(key);
                    }
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { owners.wait_until_ready().await?; pods.wait_until_ready().await } => r?,
    }
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        owners,
        pods,
        expectations,
    });
    for o in shared.owners.state() {
        queue.add(informer::key(o.as_ref()));
    }
    queue::run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
        let s = shared.clone();
        async move { sync(&s, &key).await }
    })
    .await;
    Ok(())
}

/// Owners to wake for a pod: its controller if of kind K, else (orphans) every K in the
/// namespace whose selector matches.
fn owners_of_pod<K: Replicated>(owners: &Store<K>, pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    if let Some(r) = pods::controller_of(&pod.metadata) {
        if r.kind == K::kind(&()) {
            return vec![format!("{ns}/{}", r.name)];
        }
        return Vec::new();
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    owners
        .state()
        .iter()
        .filter(|o| o.meta().namespace.as_deref() == Some(ns.as_str()))
        .filter(|o| o.selector().matches(pod.metadata.labels.as_ref()))
        .map(|o| informer::key(o.as_ref()))
        .collect()
}

/// The status the controller writes.
#[derive(Debug, Default, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReplicaStatus {
    replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    fully_labeled_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    ready_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero")]
    available_replicas: i32,
    #[serde(default, skip_serializing_if = "is_zero64")]
    observed_generation: i64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    conditions: Vec<Value>,
}

fn is_zero(n: &i32) -> bool {
    *n == 0
}

fn is_zero64(n: &i64) -> bool {
    *n == 0
}

/// One sync of the owner at `key` (`syncReplicaSet`).
async fn sync<K: Replicated>(s: &Shared<K>, key: &str) -> SyncResult {
    let sync_started = Instant::now();
    let Some(owner) = informer::get(&s.owners, key) else {
        s.expectations.forget(key);
        return Ok(None);
    };
    let ns = owner.meta().namespace.clone().unwrap_or_default();
    let now = jiff::Timestamp::now();
    let selector = owner.selector();
    let owner_uid = owner.meta().uid.clone().unwrap_or_default();
    let deleting = owner.meta().deletion_timestamp.is_some();

    // Expectations: drop outstanding names the informer has seen.
    let satisfied = s.expectations.with(key, |e| {
        e.adds
            .retain(|n| informer::get(&s.pods, &format!("{ns}/{n}")).is_none());
        e.dels.retain(|n| {
            informer::get(&s.pods, &format!("{ns}/{n}"))
                .is_some_and(|p| p.metadata.deletion_timestamp.is_none())
        });
        let empty = e.adds.is_empty() && e.dels.is_empty() && e.pending_adds == 0;
        let expired = e.at.is_some_and(|t| t.elapsed() > EXPECTATIONS_TIMEOUT);
        empty || expired
    });

    // Claim pods: adopt matching orphans, release owned pods that no longer match.
    let all: Vec<Arc<Pod>> = s
        .pods
        .state()
        .into_iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(ns.as_str()))
        .collect();
    let mut claimed: Vec<Arc<Pod>> = Vec::new();
    let mut adopted_checked: Option<bool> = None;
    let api_pods: Api<Pod> = Api::namespaced(s.ctx.client.clone(), &ns);
    for p in &all {
        let matches = selector.matches(p.metadata.labels.as_ref());
        match pods::controller_of(&p.metadata) {
            Some(r) if r.uid == owner_uid => {
                if matches || deleting {
                    claimed.push(p.clone());
                } else {
                    release(&api_pods, p, &owner_uid).await?;
                }
            }
            Some(_) => {}
            None => {
                if !matches || deleting || p.metadata.deletion_timestamp.is_some() {
                    continue;
                }
                // Before adopting, re-read the owner (upstream's canAdopt).
                if adopted_checked.is_none() {
                    let fresh = Api::<K>::namespaced(s.ctx.client.clone(), &ns)
                        .get_opt(owner.meta().name.as_deref().unwrap_or_default())
                        .await?;
                    adopted_checked = Some(fresh.is_some_and(|f| {
                        f.meta().uid.as_deref() == Some(owner_uid.as_str())
                            && f.meta().deletion_timestamp.is_none()
                    }));
                }
                if adopted_checked == Some(true) && adopt::<K>(&api_pods, p, owner.as_ref()).await?
                {
                    claimed.push(p.clone());
                }
            }
        }
    }
    let active: Vec<&Pod> = claimed
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| pods::is_active(p))
        .collect();

    let mut manage_err: Option<(bool, String)> = None;
    if satisfied && !deleting {
        manage_err = Box::pin(manage_replicas(s, key, owner.as_ref(), &ns, &active, &all)).await;
    }

    // Status.
    let template_labels = owner
        .template()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.as_ref());
    let min_ready = owner.min_ready_seconds();
    let mut status = ReplicaStatus {
        replicas: i32::try_from(active.len()).unwrap_or(i32::MAX),
        fully_labeled_replicas: count(&active, |p| {
            pods::fully_labeled(p.metadata.labels.as_ref(), template_labels)
        }),
        ready_replicas: count(&active, pods::is_ready),
        available_replicas: count(&active, |p| pods::is_available(p, min_ready, now)),
        observed_generation: owner.meta().generation.unwrap_or(0),
        conditions: Vec::new(),
    };
    let mut raw = serde_json::to_value(owner.as_ref())?;
    let old: ReplicaStatus = raw
        .get("status")
        .cloned()
        .map(serde_json::from_value)
        .transpose()?
        .unwrap_or_default();
    status.conditions = old.conditions.clone();
    let has_failure = status
        .conditions
        .iter()
        .any(|c| c["type"] == "ReplicaFailure");
    match &manage_err {
        Some((create, msg)) if !has_failure => status.conditions.push(json!({
            "type": "ReplicaFailure",
            "status": "True",
            "lastTransitionTime": now.to_string(),
            "reason": if *create { "FailedCreate" } else { "FailedDelete" },
            "message": msg,
        })),
        None if has_failure => status.conditions.retain(|c| c["type"] != "ReplicaFailure"),
        _ => {}
    }
    if status != old {
        raw["status"] = serde_json::to_value(&status)?;
        let api = Api::<K>::namespaced(s.ctx.client.clone(), &ns);
        let name = owner.meta().name.clone().unwrap_or_default();
        match api
            .replace_status(
                &name,
                &PostParams::default(),
                &serde_json::from_value::<K>(raw)?,
            )
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(None),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Stale cache: as upstream's updateReplicaSetStatus, read the latest object
                // and try once more with the same status.
                let Some(latest) = api.get_opt(&name).await? else {
                    return Ok(None);
                };
                let mut raw = serde_json::to_value(&latest)?;
                raw["status"] = serde_json::to_value(&status)?;
                match api
                    .replace_status(
                        &name,
                        &PostParams::default(),
                        &serde_json::from_value::<K>(raw)?,
                    )
                    .await
                {
                    Ok(_) => {}
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                        return Ok(Some(Duration::from_millis(200)));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    tracing::trace!(
        replicaset = key,
        satisfied,
        replicas = status.replicas,
        elapsed_us = u64::try_from(sync_started.elapsed().as_micros()).unwrap_or(u64::MAX),
        "synced"
    );
    if let Some((_, msg)) = manage_err {
        return Err(ReconcileError::Other(msg));
    }
    if min_ready > 0
        && status.ready_replicas == owner.replicas()
        && status.available_replicas != owner.replicas()
    {
        return Ok(Some(Duration::from_secs(
            u64::try_from(min_ready).unwrap_or(1),
        )));
    }
    if !satisfied {
        return Ok(Some(Duration::from_secs(30)));
    }
    Ok(None)
}

fn count(pods: &[&Pod], f: impl Fn(&Pod) -> bool) -> i32 {
    i32::try_from(pods.iter().filter(|p| f(p)).count()).unwrap_or(i32::MAX)
}

/// Removes the owner reference with `uid` from `pod` (strategic merge patch with `$patch:
/// delete`, as upstream's `ReleasePod`).
async fn release(api: &Api<Pod>, pod: &Pod, uid: &str) -> Result<(), ReconcileError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {
        "ownerReferences": [{"$patch": "delete", "uid": uid}],
        "uid": pod.metadata.uid,
    }});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 422 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Adds the controller reference to an orphan `pod` (`AdoptPod`); false if it is gone.
async fn adopt<K: Replicated>(
    api: &Api<Pod>,
    pod: &Pod,
    owner: &K,
) -> Result<bool, ReconcileError> {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let r = pods::controller_ref(K::API_VERSION, &K::kind(&()), owner.meta());
    let patch = json!({"metadata": {
        "ownerReferences": [r],
        "uid": pod.metadata.uid,
    }});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 422 => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Creates or deletes pods toward `spec.replicas` (`manageReplicas`); an error is
/// (whether it was a create, message).
async fn manage_replicas<K: Replicated>(
    s: &Shared<K>,
    key: &str,
    owner: &K,
    ns: &str,
    active: &[&Pod],
    all: &[Arc<Pod>],
) -> Option<(bool, String)> {
    let want = usize::try_from(owner.replicas().max(0)).unwrap_or(0);
    let have = active.len();
    let owner_ref = reference(owner);
    let api: Api<Pod> = Api::namespaced(s.ctx.client.clone(), ns);
    if have < want {
        let diff = (want - have).min(BURST_REPLICAS);
        let Some(template) = owner.template() else {
            return Some((true, "no pod template".to_owned()));
        };
        let name = owner.meta().name.clone().unwrap_or_default();
        let cref = pods::controller_ref(K::API_VERSION, &K::kind(&()), owner.meta());
        let pod = pods::pod_from_template(template, ns, &format!("{name}-"), cref);
        // Serialized once for the whole burst; each answer is read for the pod's name only.
        let body = match serde_json::to_vec(&pod) {
            Ok(b) => b,
            Err(e) => return Some((true, e.to_string())),
        };
        let request = kube::core::Request::new(api.resource_url());
        s.expectations.with(key, |e| {
            e.pending_adds += diff;
            e.at = Some(Instant::now());
        });
        // Slow start: batches of 1, 2, 4, ... stop at the first batch with a failure.
        let started = Instant::now();
        let mut remaining = diff;
        let mut batch = 1usize;
        let mut error: Option<String> = None;
        while remaining > 0 {
            let n = batch.min(remaining);
            let pp = PostParams::default();
            // A generated name that collides (409 AlreadyExists) is retried with a new one,
            // as v1.33's apiserver does itself (RetryGenerateName).
            let create = || async {
                let mut tries = 0;
                loop {
                    let req = request
                        .create(&pp, body.clone())
                        .map_err(kube::Error::BuildRequest)?;
                    match s.ctx.client.request::<Created>(req).await {
                        Err(kube::Error::Api(e)) if e.code == 409 && tries < 3 => tries += 1,
                        other => return other,
                    }
                }
            };
            let results = join_all((0..n).map(|_| create())).await;
            let mut failed = false;
            for r in results {
                match r {
                    Ok(p) => {
                        let pname = p.metadata.name;
                        s.expectations.with(key, |e| {
                            e.pending_adds = e.pending_adds.saturating_sub(1);
                            if informer::get(&s.pods, &format!("{ns}/{pname}")).is_none() {
                                e.adds.insert(pname.clone());
                            }
                        });
                        s.ctx
                            .event(
                                &owner_ref,
                                false,
                                "SuccessfulCreate",
                                "Create",
                                format!("Created pod: {pname}"),
                            )
                            .await;
                    }
                    Err(e) => {
                        s.expectations
                            .with(key, |x| x.pending_adds = x.pending_adds.saturating_sub(1));
                        failed = true;
                        if namespace_terminating(&e) {
                            continue;
                        }
                        let msg = match &e {
                            kube::Error::Api(s) => s.message.clone(),
                            other => other.to_string(),
                        };
                        s.ctx
                            .event(
                                &owner_ref,
                                true,
                                "FailedCreate",
                                "Create",
                                format!("Error creating: {msg}"),
                            )
                            .await;
                        error = Some(msg);
                    }
                }
            }
            remaining -= n;
            if failed {
                // The skipped pods are not expected any more.
                s.expectations.with(key, |e| {
                    e.pending_adds = e.pending_adds.saturating_sub(remaining)
                });
                break;
            }
            batch *= 2;
        }
        tracing::debug!(
            replicaset = key,
            pods = diff,
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "created pods"
        );
        return error.map(|m| (true, m));
    }
    if have > want {
        let diff = (have - want).min(BURST_REPLICAS);
        let mut victims: Vec<&Pod> = active.to_vec();
        let related: Vec<&Pod> = all.iter().map(AsRef::as_ref).collect();
        rank::sort_for_deletion(&mut victims, &related, jiff::Timestamp::now());
        victims.truncate(diff);
        let names: Vec<String> = victims
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        s.expectations.with(key, |e| {
            e.dels.extend(names.iter().cloned());
            e.at = Some(Instant::now());
        });
        let dp = DeleteParams::default();
        let results = join_all(names.iter().map(|n| api.delete(n, &dp))).await;
        let mut error = None;
        for (n, r) in names.iter().zip(results) {
            match r {
                Ok(_) => {
                    s.ctx
                        .event(
                            &owner_ref,
                            false,
                            "SuccessfulDelete",
                            "Delete",
                            format!("Deleted pod: {n}"),
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    s.expectations.with(key, |x| x.dels.remove(n));
                }
                Err(e) => {
                    s.expectations.with(key, |x| x.dels.remove(n));
                    let msg = match &e {
                        kube::Error::Api(s) => s.message.clone(),
                        other => other.to_string(),
                    };
                    s.ctx
                        .event(
                            &owner_ref,
                            true,
                            "FailedDelete",
                            "Delete",
                            format!("Error deleting: {msg}"),
                        )
                        .await;
                    error = Some(msg);
                }
            }
        }
        return error.map(|m| (false, m));
    }
    None
}

/// What the controller reads of a pod it created: the name the server generated (the rest
/// of the answer is skipped, not decoded).
#[derive(Deserialize)]
struct Created {
    metadata: CreatedMeta,
}

/// See [`Created`].
#[derive(Deserialize)]
struct CreatedMeta {
    #[serde(default)]
    name: String,
}

/// Whether a create failed because the namespace is being deleted (upstream ignores those).
fn namespace_terminating(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 403 && s.message.contains("because it is being terminated")
        }
        _ => false,
    }
}
