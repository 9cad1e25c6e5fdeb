//! The Job controller (`job`): runs a Job's pods to `completions` with at most `parallelism`
//! active (NonIndexed or Indexed), tracks finished pods through the
//! `batch.kubernetes.io/job-tracking` finalizer and `status.uncountedTerminatedPods`, retries
//! failures with exponential backoff up to `backoffLimit`, honours `podFailurePolicy`,
//! `activeDeadlineSeconds` and `suspend`, and finishes with upstream's conditions
//! (SuccessCriteriaMet → Complete, FailureTarget → Failed). Pods whose Job is gone (deleted,
//! or orphaned by the garbage collector) or finished are released from the finalizer by a
//! second queue of pod keys, as upstream's orphan queue, so they never stay Terminating.
//! Upstream `pkg/controller/job`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::batch::v1::{Job, JobCondition, JobStatus, UncountedTerminatedPods};
use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ObjectFieldSelector, Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::Store;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer, reference};

/// The finalizer that keeps finished pods until the Job has counted them.
pub(crate) const TRACKING_FINALIZER: &str = "batch.kubernetes.io/job-tracking";
/// Annotation and label carrying an Indexed Job pod's index.
const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";
/// Upstream's initial pod-failure backoff (doubling, capped at `MAX_BACKOFF`).
const BASE_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream's cap on the pod-failure backoff.
const MAX_BACKOFF: Duration = Duration::from_secs(360);
/// How long to wait for the cache to show our own creations and deletions.
const EXPECTATIONS_TIMEOUT: Duration = Duration::from_secs(30);
/// Upstream's `--concurrent-job-syncs` default.
const WORKERS: usize = 5;

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Pods created or deleted by a sync that the cache does not show yet (upstream's
/// `ControllerExpectations`).
#[derive(Default)]
struct Expectation {
    /// Names created.
    created: HashSet<String>,
    /// Names deleted.
    deleted: HashSet<String>,
    /// When they were recorded.
    at: Option<Instant>,
}

/// The loop's shared state.
#[derive(Clone)]
struct State {
    /// The controller's context.
    ctx: Context,
    /// Jobs.
    jobs: Store<Job>,
    /// Pods.
    pods: Store<Pod>,
    /// Expectations per job key.
    expectations: Arc<Mutex<HashMap<String, Expectation>>>,
    /// Pods whose finalizer this loop removed, per job key.
    released: Arc<Released>,
    /// Keys of pods that may hold the tracking finalizer for no live Job.
    orphans: Queue,
}

/// Pods whose tracking finalizer a sync removed (and counted) while the pod cache may still
/// show it (upstream's `uidTrackingExpectations`). Without this, a sync that runs before the
/// cache catches up would note such a pod as uncounted again and count it twice.
#[derive(Default)]
struct Released(Mutex<HashMap<String, HashSet<String>>>);

impl Released {
    /// Records that the finalizer of pod `uid` of job `key` was removed.
    fn record(&self, key: &str, uid: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.entry(key.to_owned())
                .or_default()
                .insert(uid.to_owned());
        }
    }

    /// Forgets the pods the cache now shows released (or gone): only uids of `pods` that still
    /// carry the finalizer stay expected.
    fn observe(&self, key: &str, pods: &[&Pod]) {
        let Ok(mut map) = self.0.lock() else {
            return;
        };
        let Some(set) = map.get_mut(key) else {
            return;
        };
        let holding: HashSet<&str> = pods
            .iter()
            .filter(|p| has_tracking_finalizer(p))
            .filter_map(|p| p.metadata.uid.as_deref())
            .collect();
        set.retain(|u| holding.contains(u.as_str()));
        if set.is_empty() {
            map.remove(key);
        }
    }

    /// Whether pod `uid`'s finalizer removal is still to show up in the cache.
    fn pending(&self, key: &str, uid: &str) -> bool {
        self.0
            .lock()
            .is_ok_and(|map| map.get(key).is_some_and(|s| s.contains(uid)))
    }

    /// Forgets job `key` (deleted).
    fn forget(&self, key: &str) {
        if let Ok(mut map) = self.0.lock() {
            map.remove(key);
        }
    }
}

/// Whether the pod still carries the tracking finalizer.
fn has_tracking_finalizer(pod: &Pod) -> bool {
    pod.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == TRACKING_FINALIZER)
}

/// The controlling owner reference of an object.
fn controller_ref(meta: &ObjectMeta) -> Option<&OwnerReference> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
}

/// The controlling owner reference's uid of an object.
fn controller_uid(meta: &ObjectMeta) -> Option<&str> {
    controller_ref(meta).map(|o| o.uid.as_str())
}

/// Whether `pod` holds the tracking finalizer for no live Job (upstream `syncOrphanPod`'s
/// checks): it has no controller, or its controlling Job is gone (`job` is the Job of that
/// name, if any) or finished. Pods controlled by anything but a batch/v1 Job are not ours.
fn orphaned(pod: &Pod, job: Option<&Job>) -> bool {
    if !has_tracking_finalizer(pod) {
        return false;
    }
    let Some(owner) = controller_ref(&pod.metadata) else {
        return true;
    };
    if owner.kind != "Job" || owner.api_version != "batch/v1" {
        return false;
    }
    job.is_none_or(|j| {
        j.metadata.uid.as_deref() != Some(owner.uid.as_str()) || job_finished(j).is_some()
    })
}

/// The key of the Job controlling `pod` (by name), if a Job controls it.
fn job_key_of(pod: &Pod) -> Option<String> {
    let owner = controller_ref(&pod.metadata).filter(|o| o.kind == "Job")?;
    Some(format!(
        "{}/{}",
        pod.metadata.namespace.as_deref()?,
        owner.name
    ))
}

/// The pod's phase.
fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("Pending")
}

/// Whether the pod finished (Succeeded or Failed), or is being deleted without finishing
/// (upstream counts those as failed).
fn finished(pod: &Pod) -> Option<bool> {
    match phase(pod) {
        "Succeeded" => Some(true),
        "Failed" => Some(false),
        _ if pod.metadata.deletion_timestamp.is_some() => Some(false),
        _ => None,
    }
}

/// The pod's completion index (Indexed Jobs).
fn pod_index(pod: &Pod) -> Option<i32> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(INDEX_KEY))
        .or_else(|| pod.metadata.labels.as_ref().and_then(|l| l.get(INDEX_KEY)))
        .and_then(|v| v.parse().ok())
}

/// Parses `status.completedIndexes` (`1,3-5`).
pub(crate) fn parse_indexes(s: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<i32>().ok()),
        }
    }
    out
}

/// Formats a set of indexes as `status.completedIndexes` does (`1,3-5`).
pub(crate) fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut it = set.iter().copied().peekable();
    while let Some(start) = it.next() {
        let mut end = start;
        while it.peek() == Some(&(end + 1)) {
            end += 1;
            it.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

/// Sets (or replaces) condition `type_` in `status`; returns whether anything changed.
fn set_condition(
    status: &mut JobStatus,
    type_: &str,
    cstatus: &str,
    reason: &str,
    message: &str,
) -> bool {
    let now = Some(Time(Timestamp::now()));
    let conds = status.conditions.get_or_insert_with(Vec::new);
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == type_) {
        if c.status == cstatus && c.reason.as_deref() == Some(reason) {
            return false;
        }
        if c.status != cstatus {
            c.last_transition_time = now.clone();
        }
        c.status = cstatus.to_owned();
        c.reason = Some(reason.to_owned());
        c.message = Some(message.to_owned());
        c.last_probe_time = now;
        return true;
    }
    conds.push(JobCondition {
        type_: type_.to_owned(),
        status: cstatus.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_probe_time: now.clone(),
        last_transition_time: now,
    });
    true
}

/// The condition of `type_` if its status is True.
fn condition_true<'a>(status: &'a JobStatus, type_: &str) -> Option<&'a JobCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == "True")
}

/// Whether the Job has finished (Complete or Failed True).
pub(crate) fn job_finished(job: &Job) -> Option<&JobCondition> {
    let st = job.status.as_ref()?;
    condition_true(st, "Complete").or_else(|| condition_true(st, "Failed"))
}

/// What a matching pod failure policy rule says about a failed pod.
#[derive(Debug, PartialEq)]
enum PolicyAction {
    /// Fail the whole Job with this message.
    FailJob(String),
    /// Do not count the failure.
    Ignore,
    /// Count it (the default).
    Count,
}

/// Applies `spec.podFailurePolicy` to a failed pod (upstream `matchPodFailurePolicy`).
fn failure_policy(job: &Job, pod: &Pod) -> PolicyAction {
    let Some(policy) = job
        .spec
        .as_ref()
        .and_then(|s| s.pod_failure_policy.as_ref())
    else {
        return PolicyAction::Count;
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    for (i, rule) in policy.rules.iter().enumerate() {
        let mut matched: Option<String> = None;
        if let Some(req) = &rule.on_exit_codes {
            let statuses = pod
                .status
                .as_ref()
                .map(|s| {
                    s.container_statuses
                        .iter()
                        .flatten()
                        .chain(s.init_container_statuses.iter().flatten())
                        .cloned()
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default();
            for cs in statuses {
                if req.container_name.as_deref().is_some_and(|n| n != cs.name) {
                    continue;
                }
                let Some(code) = cs
                    .state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .map(|t| t.exit_code)
                else {
                    continue;
                };
                if code == 0 {
                    continue;
                }
                let inside = req.values.contains(&code);
                let hit = if req.operator == "NotIn" {
                    !inside
                } else {
                    inside
                };
                if hit {
                    matched = Some(format!(
                        "Container {} for pod {ns}/{name} failed with exit code {code} matching {} rule at index {i}",
                        cs.name, rule.action
                    ));
                    break;
                }
            }
        }
        for pc in rule.on_pod_conditions.iter().flatten() {
            let want = pc.status.as_str();
            let has = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == pc.type_ && c.status == want));
            if has {
                matched = Some(format!(
                    "Pod {ns}/{name} has condition {} matching {} rule at index {i}",
                    pc.type_, rule.action
                ));
                break;
            }
        }
        if let Some(msg) = matched {
            return match rule.action.as_str() {
                "FailJob" => PolicyAction::FailJob(msg),
                "Ignore" => PolicyAction::Ignore,
                _ => PolicyAction::Count,
            };
        }
    }
    PolicyAction::Count
}

/// The pod to create for `job` (with `index` for Indexed Jobs).
fn new_pod(job: &Job, index: Option<i32>) -> Pod {
    let spec = job.spec.clone().unwrap_or_default();
    let PodTemplateSpec {
        metadata,
        spec: pod_spec,
    } = spec.template;
    let mut meta = metadata.unwrap_or_default();
    let name = job.metadata.name.clone().unwrap_or_default();
    meta.name = None;
    meta.generate_name = Some(match index {
        Some(i) => format!("{name}-{i}-"),
        None => format!("{name}-"),
    });
    meta.namespace = job.metadata.namespace.clone();
    meta.finalizers = Some(vec![TRACKING_FINALIZER.to_owned()]);
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: name.clone(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    let mut pod_spec = pod_spec.unwrap_or_default();
    if let Some(i) = index {
        meta.annotations
            .get_or_insert_with(Default::default)
            .insert(INDEX_KEY.to_owned(), i.to_string());
        meta.labels
            .get_or_insert_with(Default::default)
            .insert(INDEX_KEY.to_owned(), i.to_string());
        if pod_spec.hostname.is_none() {
            pod_spec.hostname = Some(format!("{name}-{i}"));
        }
        for c in pod_spec
            .containers
            .iter_mut()
            .chain(pod_spec.init_containers.iter_mut().flatten())
        {
            let env = c.env.get_or_insert_with(Vec::new);
            if !env.iter().any(|e| e.name == "JOB_COMPLETION_INDEX") {
                env.push(EnvVar {
                    name: "JOB_COMPLETION_INDEX".to_owned(),
                    value: None,
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector {
                            api_version: None,
                            field_path: format!("metadata.labels['{INDEX_KEY}']"),
                        }),
                        ..EnvVarSource::default()
                    }),
                });
            }
        }
    }
    Pod {
        metadata: meta,
        spec: Some(pod_spec),
        status: None,
    }
}

impl State {
    /// Whether the cache shows every pod this job's last sync created or deleted.
    fn expectations_met(&self, key: &str, pods: &[Arc<Pod>]) -> bool {
        let Ok(mut map) = self.expectations.lock() else {
            return true;
        };
        let Some(e) = map.get(key) else {
            return true;
        };
        let names: HashMap<&str, &Pod> = pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref().map(|n| (n, p.as_ref())))
            .collect();
        let created = e.created.iter().all(|n| names.contains_key(n.as_str()));
        let deleted = e.deleted.iter().all(|n| {
            names
                .get(n.as_str())
                .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
        });
        let expired = e.at.is_some_and(|t| t.elapsed() > EXPECTATIONS_TIMEOUT);
        if (created && deleted) || expired {
            map.remove(key);
            true
        } else {
            false
        }
    }

    /// Records pods created or deleted by a sync.
    fn expect(&self, key: &str, created: Vec<String>, deleted: Vec<String>) {
        if created.is_empty() && deleted.is_empty() {
            return;
        }
        if let Ok(mut map) = self.expectations.lock() {
            let e = map.entry(key.to_owned()).or_default();
            e.created.extend(created);
            e.deleted.extend(deleted);
            e.at = Some(Instant::now());
        }
    }

    /// Deletes `pods` (active ones being removed), recording events.
    async fn delete_pods(&self, job: &Job, pods: &[&Pod]) -> Vec<String> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), ns);
        let mut deleted = Vec::new();
        for p in pods {
            let Some(name) = p.metadata.name.as_deref() else {
                continue;
            };
            match api.delete(name, &DeleteParams::background()).await {
                Ok(_) => {
                    deleted.push(name.to_owned());
                    self.ctx
                        .event(
                            &reference(job),
                            false,
                            "SuccessfulDelete",
                            "Delete",
                            format!("Deleted pod: {name}"),
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => tracing::warn!(pod = name, error = %e, "job: deleting pod failed"),
            }
        }
        deleted
    }

    /// Removes the tracking finalizer from `pod`; Ok(true) once it is gone (or the pod is).
    async fn remove_finalizer(&self, pod: &Pod) -> Result<bool, kube::Error> {
        let (Some(ns), Some(name)) = (
            pod.metadata.namespace.as_deref(),
            pod.metadata.name.as_deref(),
        ) else {
            return Ok(true);
        };
        let Some(finalizers) = pod.metadata.finalizers.as_ref() else {
            return Ok(true);
        };
        if !finalizers.iter().any(|f| f == TRACKING_FINALIZER) {
            return Ok(true);
        }
        let rest: Vec<&String> = finalizers
            .iter()
            .filter(|f| *f != TRACKING_FINALIZER)
            .collect();
        let patch = json!({"metadata": {
            "finalizers": rest,
            "resourceVersion": pod.metadata.resource_version,
        }});
        let api: Api<Pod> = Api::namespaced(self.ctx.client.clone(), ns);
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Writes `status` to the Job's status subresource.
    async fn write_status(&self, job: &Job, status: JobStatus) -> Result<Job, kube::Error> {
        let ns = job.metadata.namespace.as_deref().unwrap_or_default();
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.ctx.client.clone(), ns);
        let mut j = job.clone();
        j.status = Some(status);
        api.replace_status(name, &PostParams::default(), &j).await
    }
}

/// The backoff before recreating pods after `failures` consecutive failures.
fn backoff(failures: i32) -> Duration {
    if failures <= 0 {
        return Duration::ZERO;
    }
    let exp = u32::try_from(failures - 1).unwrap_or(0).min(16);
    BASE_BACKOFF.saturating_mul(1 << exp).min(MAX_BACKOFF)
}

/// When the latest failed pod of `pods` finished.
fn last_failure(pods: &[&Pod]) -> Option<Timestamp> {
    pods.iter()
        .filter(|p| phase(p) == "Failed")
        .filter_map(|p| {
            let st = p.status.as_ref()?;
            let finished = st
                .container_statuses
                .iter()
                .flatten()
                .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
                .map(|t| t.0)
                .max();
            finished.or_else(|| {
                st.conditions
                    .iter()
                    .flatten()
                    .find(|c| c.type_ == "Ready")
                    .and_then(|c| c.last_transition_time.as_ref())
                    .map(|t| t.0)
            })
        })
        .max()
}

/// Maps API conflicts (a stale cache) to a quick retry.
fn stale(e: kube::Error) -> SyncResult {
    match e {
        kube::Error::Api(ref s) if s.code == 409 || s.code == 404 => {
            Ok(Some(Duration::from_millis(200)))
        }
        e => Err(ReconcileError::Kube(e)),
    }
}

/// Syncs Job `key`.
async fn sync(st: State, key: String) -> SyncResult {
    let Some(job) = informer::get(&st.jobs, &key) else {
        st.released.forget(&key);
        // Upstream's `cleanupPodFinalizers`: the Job's pods go to the orphan queue.
        for p in st.pods.state() {
            if has_tracking_finalizer(&p) && job_key_of(&p).as_deref() == Some(key.as_str()) {
                st.orphans.add(informer::key(p.as_ref()));
            }
        }
        return Ok(None);
    };
    let job = (*job).clone();
    let uid = job.metadata.uid.clone().unwrap_or_default();
    let all: Vec<Arc<Pod>> = st
        .pods
        .state()
        .into_iter()
        .filter(|p| {
            p.metadata.namespace == job.metadata.namespace
                && controller_uid(&p.metadata) == Some(uid.as_str())
        })
        .collect();
    let pods: Vec<&Pod> = all.iter().map(AsRef::as_ref).collect();
    st.released.observe(&key, &pods);
    let spec = job.spec.clone().unwrap_or_default();
    let mut status = job.status.clone().unwrap_or_default();
    let mut uncounted = status.uncounted_terminated_pods.clone().unwrap_or_default();

    // 1. Finished pods still holding our finalizer: note them as uncounted, then release them
    // (a finished Job only releases them).
    let done = job_finished(&job).is_some();
    let mut newly_uncounted = false;
    let mut fail_job: Option<String> = None;
    for p in &pods {
        let Some(succeeded) = finished(p) else {
            continue;
        };
        let Some(puid) = p.metadata.uid.clone() else {
            continue;
        };
        if !succeeded && let PolicyAction::FailJob(msg) = failure_policy(&job, p) {
            fail_job.get_or_insert(msg);
        }
        // Already released and counted by an earlier sync: the cache is behind.
        if !has_tracking_finalizer(p) || st.released.pending(&key, &puid) {
            continue;
        }
        if done {
            st.remove_finalizer(p).await?;
            continue;
        }
        let list = if succeeded {
            uncounted.succeeded.get_or_insert_with(Vec::new)
        } else {
            uncounted.failed.get_or_insert_with(Vec::new)
        };
        if !list.contains(&puid) {
            list.push(puid);
            newly_uncounted = true;
        }
    }
    if newly_uncounted {
        status.uncounted_terminated_pods = Some(uncounted.clone());
        return match st.write_status(&job, status).await {
            Ok(_) => Ok(None),
            Err(e) => stale(e),
        };
    }
    // 2. Release and count the uncounted pods.
    let by_uid: HashMap<&str, &Pod> = pods
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref().map(|u| (u, *p)))
        .collect();
    let mut counted_any = false;
    let mut completed = parse_indexes(status.completed_indexes.as_deref().unwrap_or(""));
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    for succeeded in [true, false] {
        let list = if succeeded {
            uncounted.succeeded.get_or_insert_with(Vec::new)
        } else {
            uncounted.failed.get_or_insert_with(Vec::new)
        };
        let mut keep = Vec::new();
        for puid in list.drain(..) {
            let released = match by_uid.get(puid.as_str()) {
                Some(p) => st.remove_finalizer(p).await?,
                None => true,
            };
            if released {
                st.released.record(&key, &puid);
            }
            if !released {
                keep.push(puid);
                continue;
            }
            counted_any = true;
            let pod = by_uid.get(puid.as_str());
            if succeeded {
                match (indexed, pod.and_then(|p| pod_index(p))) {
                    (true, Some(i)) => {
                        completed.insert(i);
                    }
                    (true, None) => {}
                    (false, _) => status.succeeded = Some(status.succeeded.unwrap_or(0) + 1),
                }
            } else if pod.is_none_or(|p| failure_policy(&job, p) != PolicyAction::Ignore) {
                status.failed = Some(status.failed.unwrap_or(0) + 1);
            }
        }
        *list = keep;
    }
    if indexed {
        status.completed_indexes = Some(format_indexes(&completed));
        status.succeeded = Some(i32::try_from(completed.len()).unwrap_or(i32::MAX));
    }
    if counted_any {
        let empty = |v: &Option<Vec<String>>| v.as_ref().is_none_or(Vec::is_empty);
        status.uncounted_terminated_pods =
            if empty(&uncounted.succeeded) && empty(&uncounted.failed) {
                Some(UncountedTerminatedPods::default())
            } else {
                Some(uncounted)
            };
        return match st.write_status(&job, status).await {
            Ok(_) => Ok(None),
            Err(e) => stale(e),
        };
    }

    // 3. Finished Jobs only tidy up.
    if done {
        return Ok(None);
    }
    let active: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| finished(p).is_none() && p.metadata.deletion_timestamp.is_none())
        .collect();
    let terminating = pods
        .iter()
        .filter(|p| {
            p.metadata.deletion_timestamp.is_some() && !matches!(phase(p), "Succeeded" | "Failed")
        })
        .count();
    let ready = active
        .iter()
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
        })
        .count();
    let to_i32 = |n: usize| i32::try_from(n).unwrap_or(i32::MAX);
    let mut requeue: Option<Duration> = None;
    let succeeded = status.succeeded.unwrap_or(0);
    let failed = status.failed.unwrap_or(0);
    let completions = spec.completions;
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    let suspended = spec.suspend == Some(true);
    let job_ref = reference(&job);

    // Start time.
    if !suspended && status.start_time.is_none() {
        status.start_time = Some(Time(Timestamp::now()));
    }
    if suspended {
        status.start_time = None;
    }

    // Failure and success criteria.
    let mut failure: Option<(String, String)> = condition_true(&status, "FailureTarget").map(|c| {
        (
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        )
    });
    let mut success = condition_true(&status, "SuccessCriteriaMet").is_some();
    if failure.is_none() && !success {
        if let Some(msg) = fail_job {
            failure = Some(("PodFailurePolicy".to_owned(), msg));
        } else if failed > spec.backoff_limit.unwrap_or(6) {
            failure = Some((
                "BackoffLimitExceeded".to_owned(),
                "Job has reached the specified backoff limit".to_owned(),
            ));
        } else if let (Some(deadline), Some(start), false) = (
            spec.active_deadline_seconds,
            status.start_time.as_ref(),
            suspended,
        ) {
            let end = start.0 + k8s_openapi::jiff::SignedDuration::from_secs(deadline);
            let now = Timestamp::now();
            if now >= end {
                failure = Some((
                    "DeadlineExceeded".to_owned(),
                    "Job was active longer than specified deadline".to_owned(),
                ));
            } else {
                let left = end.duration_since(now);
                requeue = Some(
                    Duration::from_secs_f64(left.as_secs_f64().max(0.0))
                        + Duration::from_millis(100),
                );
            }
        }
        if failure.is_none() {
            success = match completions {
                Some(c) => succeeded >= c,
                None => succeeded > 0 && active.is_empty(),
            };
        }
    }

    let mut created_names = Vec::new();
    let mut deleted_names = Vec::new();
    let expectations_met = st.expectations_met(&key, &all);
    if let Some((reason, message)) = &failure {
        if set_condition(&mut status, "FailureTarget", "True", reason, message) {
            st.ctx
                .event(&job_ref, true, reason, "FailJob", message.clone())
                .await;
        }
        deleted_names = st.delete_pods(&job, &active).await;
        if active.is_empty() && terminating == 0 {
            set_condition(&mut status, "Failed", "True", reason, message);
        }
    } else if success {
        if set_condition(
            &mut status,
            "SuccessCriteriaMet",
            "True",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
        ) {
            tracing::debug!(job = %key, "success criteria met");
        }
        // Remaining pods (NonIndexed parallel Jobs) are no longer needed.
        if completions.is_some() {
            deleted_names = st.delete_pods(&job, &active).await;
        }
        if (active.is_empty() || completions.is_some()) && terminating == 0 {
            if set_condition(
                &mut status,
                "Complete",
                "True",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
            ) {
                st.ctx
                    .event(
                        &job_ref,
                        false,
                        "Completed",
                        "Complete",
                        "Job completed".to_owned(),
                    )
                    .await;
            }
            status.completion_time = Some(Time(Timestamp::now()));
        }
    } else if suspended {
        deleted_names = st.delete_pods(&job, &active).await;
        if set_condition(
            &mut status,
            "Suspended",
            "True",
            "JobSuspended",
            "Job suspended",
        ) {
            st.ctx
                .event(
                    &job_ref,
                    false,
                    "Suspended",
                    "Suspend",
                    "Job suspended".to_owned(),
                )
                .await;
        }
    } else if expectations_met && job.metadata.deletion_timestamp.is_none() {
        if condition_true(&status, "Suspended").is_some() {
            set_condition(
                &mut status,
                "Suspended",
                "False",
                "JobResumed",
                "Job resumed",
            );
            st.ctx
                .event(
                    &job_ref,
                    false,
                    "Resumed",
                    "Resume",
                    "Job resumed".to_owned(),
                )
                .await;
        }
        // Which pods to create (or remove, when parallelism went down).
        let want: usize;
        let mut indexes: Vec<Option<i32>> = Vec::new();
        if indexed {
            let c = completions.unwrap_or(1);
            let busy: HashSet<i32> = active.iter().filter_map(|p| pod_index(p)).collect();
            let pending: Vec<i32> = (0..c)
                .filter(|i| !completed.contains(i) && !busy.contains(i))
                .collect();
            let room = usize::try_from(parallelism)
                .unwrap_or(0)
                .saturating_sub(active.len());
            indexes = pending.into_iter().take(room).map(Some).collect();
            want = active.len() + indexes.len();
        } else {
            let w = match completions {
                Some(c) => (c - succeeded).clamp(0, parallelism),
                None if succeeded > 0 => 0,
                None => parallelism,
            };
            want = usize::try_from(w).unwrap_or(0);
            if want > active.len() {
                indexes = vec![None; want - active.len()];
            }
        }
        if active.len() > want && !indexed {
            // Newest first, as upstream's ranking of which pods to delete.
            let mut extra: Vec<&Pod> = active.clone();
            extra.sort_by(|a, b| {
                b.metadata
                    .creation_timestamp
                    .cmp(&a.metadata.creation_timestamp)
            });
            extra.truncate(active.len() - want);
            deleted_names = st.delete_pods(&job, &extra).await;
        }
        if !indexes.is_empty() {
            // Failures delay recreation exponentially.
            let wait = last_failure(&pods).map_or(Duration::ZERO, |t| {
                let since = Timestamp::now().duration_since(t);
                let since = Duration::from_secs_f64(since.as_secs_f64().max(0.0));
                backoff(failed).saturating_sub(since)
            });
            if failed > 0 && !wait.is_zero() {
                requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
            } else {
                let ns = job.metadata.namespace.as_deref().unwrap_or_default();
                let api: Api<Pod> = Api::namespaced(st.ctx.client.clone(), ns);
                for idx in indexes {
                    let pod = new_pod(&job, idx);
                    match api.create(&PostParams::default(), &pod).await {
                        Ok(p) => {
                            let name = p.metadata.name.unwrap_or_default();
                            st.ctx
                                .event(
                                    &job_ref,
                                    false,
                                    "SuccessfulCreate",
                                    "Create",
                                    format!("Created pod: {name}"),
                                )
                                .await;
                            created_names.push(name);
                        }
                        Err(e) => {
                            st.expect(&key, created_names, deleted_names);
                            tracing::warn!(job = %key, error = %e, "job: creating pod failed");
                            st.ctx
                                .event(
                                    &job_ref,
                                    true,
                                    "FailedCreate",
                                    "Create",
                                    format!("Error creating: {e}"),
                                )
                                .await;
                            return Err(ReconcileError::Kube(e));
                        }
                    }
                }
            }
        }
    }
    st.expect(&key, created_names.clone(), deleted_names.clone());

    // Status counters.
    let active_now = (active.len() + created_names.len()).saturating_sub(deleted_names.len());
    status.active = Some(to_i32(active_now));
    status.ready = Some(to_i32(ready));
    status.terminating = Some(to_i32(terminating + deleted_names.len()));
    if status.uncounted_terminated_pods.is_none() {
        status.uncounted_terminated_pods = Some(UncountedTerminatedPods::default());
    }
    if indexed && status.completed_indexes.is_none() {
        status.completed_indexes = Some(String::new());
    }
    if Some(&status) != job.status.as_ref()
        && let Err(e) = st.write_status(&job, status).await
    {
        return stale(e);
    }
    Ok(requeue)
}

/// Releases pod `key` from the tracking finalizer if it is still orphaned (upstream
/// `syncOrphanPod`). A Job the cache does not show is looked up, in case the cache is behind.
async fn sync_orphan(st: State, key: String) -> SyncResult {
    let Some(pod) = informer::get(&st.pods, &key) else {
        return Ok(None);
    };
    let mut job = job_key_of(&pod)
        .and_then(|k| informer::get(&st.jobs, &k))
        .map(|j| (*j).clone());
    if let Some(owner) = controller_ref(&pod.metadata).filter(|o| o.kind == "Job")
        && job
            .as_ref()
            .is_none_or(|j| j.metadata.uid.as_deref() != Some(owner.uid.as_str()))
    {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(st.ctx.client.clone(), ns);
        job = api.get_opt(&owner.name).await?;
    }
    if !orphaned(&pod, job.as_ref()) {
        return Ok(None);
    }
    tracing::debug!(pod = %key, "job: releasing an orphan pod from the tracking finalizer");
    if st.remove_finalizer(&pod).await? {
        Ok(None)
    } else {
        // The cache is behind the pod: look again once it caught up.
        Ok(Some(Duration::from_millis(200)))
    }
}

/// The pod event handler: wakes the controlling Job, and queues pods that may be orphans
/// (upstream's `addPod`/`updatePod`/`deletePod`: a pod without a controller, or a deleted
/// pod whose Job is gone or finished).
fn pod_handler(queue: Queue, orphans: Queue, jobs: Store<Job>) -> informer::Handler<Pod> {
    let by_controller = informer::enqueue_controller::<Pod>("Job", queue);
    Box::new(move |old: Option<&Pod>, new: Option<&Pod>| {
        by_controller(old, new);
        let Some(pod) = new else { return };
        if !has_tracking_finalizer(pod) {
            return;
        }
        // A live pod whose Job the cache does not show yet is not an orphan.
        if controller_ref(&pod.metadata).is_some() && pod.metadata.deletion_timestamp.is_none() {
            return;
        }
        let job = job_key_of(pod).and_then(|k| informer::get(&jobs, &k));
        if orphaned(pod, job.as_deref()) {
            orphans.add(informer::key(pod));
        }
    })
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let orphans = Queue::default();
    let jobs = ctx
        .informers
        .watch::<Job>(informer::enqueue_key(queue.clone()), &shutdown)
        .await;
    let pods = ctx
        .informers
        .watch::<Pod>(
            pod_handler(queue.clone(), orphans.clone(), jobs.clone()),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { jobs.wait_until_ready().await?; pods.wait_until_ready().await } => r?,
    }
    for j in jobs.state() {
        queue.add(informer::key(j.as_ref()));
    }
    let st = State {
        ctx: ctx.clone(),
        jobs,
        pods,
        expectations: Arc::default(),
        released: Arc::default(),
        orphans: orphans.clone(),
    };
    let orphan_st = st.clone();
    tokio::join!(
        run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
            sync(st.clone(), key)
        }),
        run_workers(&ctx, &orphans, 1, &shutdown, move |key| {
            sync_orphan(orphan_st.clone(), key)
        }),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip_as_ranges() {
        let set: BTreeSet<i32> = [0, 1, 2, 4, 6, 7].into_iter().collect();
        assert_eq!(format_indexes(&set), "0-2,4,6-7");
        assert_eq!(parse_indexes("0-2,4,6-7"), set);
        assert_eq!(format_indexes(&BTreeSet::new()), "");
    }

    #[test]
    fn failure_backoff_doubles_from_ten_seconds_up_to_six_minutes() {
        assert_eq!(backoff(0), Duration::ZERO);
        assert_eq!(backoff(1), Duration::from_secs(10));
        assert_eq!(backoff(3), Duration::from_secs(40));
        assert_eq!(backoff(30), Duration::from_secs(360));
    }

    #[test]
    fn indexed_pods_carry_their_index() {
        let job = Job {
            metadata: ObjectMeta {
                name: Some("pi".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            ..Job::default()
        };
        let p = new_pod(&job, Some(3));
        assert_eq!(p.metadata.generate_name.as_deref(), Some("pi-3-"));
        assert_eq!(
            p.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(INDEX_KEY))
                .map(String::as_str),
            Some("3")
        );
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.hostname.as_deref()),
            Some("pi-3")
        );
        assert_eq!(
            p.metadata.finalizers,
            Some(vec![TRACKING_FINALIZER.to_owned()])
        );
    }

    #[test]
    fn pods_of_a_gone_or_finished_job_or_without_a_controller_are_orphans() {
        let job = |uid: &str, finished: bool| Job {
            metadata: ObjectMeta {
                name: Some("j".into()),
                uid: Some(uid.into()),
                ..ObjectMeta::default()
            },
            status: finished.then(|| JobStatus {
                conditions: Some(vec![JobCondition {
                    type_: "Complete".into(),
                    status: "True".into(),
                    ..JobCondition::default()
                }]),
                ..JobStatus::default()
            }),
            ..Job::default()
        };
        let pod = |kind: &str, finalizer: bool| Pod {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                finalizers: finalizer.then(|| vec![TRACKING_FINALIZER.to_owned()]),
                owner_references: (!kind.is_empty()).then(|| {
                    vec![OwnerReference {
                        api_version: if kind == "Job" { "batch/v1" } else { "apps/v1" }.into(),
                        kind: kind.into(),
                        name: "j".into(),
                        uid: "u1".into(),
                        controller: Some(true),
                        block_owner_deletion: None,
                    }]
                }),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let live = job("u1", false);
        // Its Job is alive: not an orphan.
        assert!(!orphaned(&pod("Job", true), Some(&live)));
        // Gone, replaced by a Job of the same name, or finished: orphans.
        assert!(orphaned(&pod("Job", true), None));
        assert!(orphaned(&pod("Job", true), Some(&job("u2", false))));
        assert!(orphaned(&pod("Job", true), Some(&job("u1", true))));
        // No controller (orphaned by the garbage collector): an orphan.
        assert!(orphaned(&pod("", true), None));
        // Another kind's pod, or no finalizer: nothing to do.
        assert!(!orphaned(&pod("ReplicaSet", true), None));
        assert!(!orphaned(&pod("Job", false), None));
        assert_eq!(job_key_of(&pod("Job", true)).as_deref(), Some("ns/j"));
        assert_eq!(job_key_of(&pod("ReplicaSet", true)), None);
    }

    #[test]
    fn released_pods_stay_expected_until_the_cache_shows_them_without_the_finalizer() {
        let pod = |uid: &str, finalizer: bool| Pod {
            metadata: ObjectMeta {
                uid: Some(uid.into()),
                finalizers: finalizer.then(|| vec![TRACKING_FINALIZER.to_owned()]),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let r = Released::default();
        r.record("ns/j", "a");
        r.record("ns/j", "b");
        // The cache is behind: both still show the finalizer.
        let (a, b) = (pod("a", true), pod("b", true));
        r.observe("ns/j", &[&a, &b]);
        assert!(r.pending("ns/j", "a") && r.pending("ns/j", "b"));
        assert!(!r.pending("ns/other", "a"));
        // `a` caught up, `b` is gone: neither is expected any more.
        let a = pod("a", false);
        r.observe("ns/j", &[&a]);
        assert!(!r.pending("ns/j", "a") && !r.pending("ns/j", "b"));
        r.record("ns/j", "c");
        r.forget("ns/j");
        assert!(!r.pending("ns/j", "c"));
    }
}
