//! The CronJob controller (`cronjob`): creates a Job for each scheduled time (schedule in
//! `spec.timeZone` or a `CRON_TZ=` prefix), honours `concurrencyPolicy` (Allow, Forbid,
//! Replace), `startingDeadlineSeconds` and `suspend`, tracks `status.active`,
//! `lastScheduleTime` and `lastSuccessfulTime`, and prunes finished Jobs beyond the history
//! limits. Upstream `pkg/controller/cronjob` (v2).

mod schedule;

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::job::job_finished;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer, reference};
use schedule::Schedule;

/// Annotation with the scheduled time a Job was created for.
const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
/// Upstream gives up listing missed times beyond this many.
const MAX_MISSED: usize = 100;

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The loop's state.
#[derive(Clone)]
struct State {
    /// The controller's context.
    ctx: Context,
    /// CronJobs.
    cronjobs: Store<CronJob>,
    /// Jobs.
    jobs: Store<Job>,
}

/// The Job for scheduled time `at` (upstream `getJobFromTemplate2`).
fn job_for(cj: &CronJob, at: Timestamp) -> Job {
    let spec = cj.spec.clone().unwrap_or_default();
    let tmpl = spec.job_template;
    let mut meta = tmpl.metadata.unwrap_or_default();
    let name = cj.metadata.name.clone().unwrap_or_default();
    meta.name = Some(format!("{name}-{}", at.as_second() / 60));
    meta.generate_name = None;
    meta.namespace = cj.metadata.namespace.clone();
    meta.annotations
        .get_or_insert_with(Default::default)
        .insert(SCHEDULED_ANNOTATION.to_owned(), at.to_string());
    meta.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "CronJob".to_owned(),
        name,
        uid: cj.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }]);
    Job {
        metadata: meta,
        spec: tmpl.spec,
        status: None,
    }
}

/// A reference to `job` as `status.active` lists it.
fn job_ref(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".to_owned()),
        kind: Some("Job".to_owned()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// The schedule and time zone of a CronJob.
fn schedule_of(cj: &CronJob) -> Result<(Schedule, TimeZone), String> {
    let spec = cj.spec.as_ref().ok_or("no spec")?;
    let sched = Schedule::parse(&spec.schedule)?;
    let zone = spec.time_zone.clone().or_else(|| sched.tz.clone());
    let tz = match zone {
        Some(z) => TimeZone::get(&z).map_err(|e| format!("unknown time zone {z}: {e}"))?,
        None => TimeZone::try_system().unwrap_or(TimeZone::UTC),
    };
    Ok((sched, tz))
}

/// Syncs CronJob `key`.
async fn sync(st: State, key: String) -> SyncResult {
    let Some(cj) = informer::get(&st.cronjobs, &key) else {
        return Ok(None);
    };
    if cj.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let ns = cj.metadata.namespace.clone().unwrap_or_default();
    let uid = cj.metadata.uid.clone().unwrap_or_default();
    let spec = cj.spec.clone().unwrap_or_default();
    let cj_ref = reference(cj.as_ref());
    let jobs_api: Api<Job> = Api::namespaced(st.ctx.client.clone(), &ns);
    let mine: Vec<Job> = st
        .jobs
        .state()
        .iter()
        .filter(|j| j.metadata.namespace.as_deref() == Some(ns.as_str()))
        .filter(|j| {
            j.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == uid)
        })
        .map(|j| (**j).clone())
        .collect();
    let old_status = cj.status.clone().unwrap_or_default();
    let mut status = old_status.clone();

    // Active list: running Jobs we own; finished ones leave it.
    let mut active: Vec<ObjectReference> = Vec::new();
    for j in &mine {
        match job_finished(j) {
            None => active.push(job_ref(j)),
            Some(c) => {
                let was_active = old_status
                    .active
                    .iter()
                    .flatten()
                    .any(|a| a.uid == j.metadata.uid);
                if was_active {
                    let name = j.metadata.name.clone().unwrap_or_default();
                    st.ctx
                        .event(
                            &cj_ref,
                            false,
                            "SawCompletedJob",
                            "Complete",
                            format!("Saw completed job: {name}, condition: {}", c.type_),
                        )
                        .await;
                }
                if c.type_ == "Complete" {
                    let done = j
                        .status
                        .as_ref()
                        .and_then(|s| s.completion_time.clone())
                        .or_else(|| c.last_transition_time.clone());
                    if done.as_ref().map(|t| t.0)
                        > status.last_successful_time.as_ref().map(|t| t.0)
                    {
                        status.last_successful_time = done;
                    }
                }
            }
        }
    }

    // History limits: oldest finished Jobs beyond the limits go.
    for (want_complete, limit) in [
        (true, spec.successful_jobs_history_limit.unwrap_or(3)),
        (false, spec.failed_jobs_history_limit.unwrap_or(1)),
    ] {
        let mut finished: Vec<&Job> = mine
            .iter()
            .filter(|j| job_finished(j).is_some_and(|c| (c.type_ == "Complete") == want_complete))
            .filter(|j| j.metadata.deletion_timestamp.is_none())
            .collect();
        finished.sort_by(|a, b| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        });
        let extra = finished
            .len()
            .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
        for j in finished.into_iter().take(extra) {
            let name = j.metadata.name.clone().unwrap_or_default();
            match jobs_api.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {
                    st.ctx
                        .event(
                            &cj_ref,
                            false,
                            "SuccessfulDelete",
                            "Delete",
                            format!("Deleted job {name}"),
                        )
                        .await;
                }
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(ReconcileError::Kube(e)),
            }
        }
    }

    let (sched, tz) = match schedule_of(&cj) {
        Ok(v) => v,
        Err(msg) => {
            st.ctx
                .event(
                    &cj_ref,
                    true,
                    "UnparseableSchedule",
                    "Schedule",
                    format!("unparseable schedule: {:?} : {msg}", spec.schedule),
                )
                .await;
            status.active = (!active.is_empty()).then_some(active);
            write_status(&st, &cj, status, &old_status).await?;
            return Ok(None);
        }
    };
    let now = Timestamp::now();
    let mut requeue = None;
    if spec.suspend != Some(true) {
        // The most recent unmet scheduled time, if any.
        let mut earliest = status
            .last_schedule_time
            .as_ref()
            .map(|t| t.0)
            .or_else(|| cj.metadata.creation_timestamp.as_ref().map(|t| t.0))
            .unwrap_or(now);
        if let Some(d) = spec.starting_deadline_seconds {
            let floor = now - jiff::SignedDuration::from_secs(d);
            if floor > earliest {
                earliest = floor;
            }
        }
        let mut missed = 0usize;
        let mut latest = None;
        let mut t = earliest;
        while let Some(n) = sched.next(t, &tz) {
            if n > now {
                requeue = Some(
                    Duration::try_from(n.duration_since(now)).unwrap_or_default()
                        + Duration::from_millis(100),
                );
                break;
            }
            missed += 1;
            latest = Some(n);
            t = n;
            if missed > MAX_MISSED * 10 {
                break;
            }
        }
        if missed > MAX_MISSED {
            st.ctx
                .event(
                    &cj_ref,
                    true,
                    "TooManyMissedTimes",
                    "Schedule",
                    "too many missed start times. Set or decrease .spec.startingDeadlineSeconds or check clock skew".to_owned(),
                )
                .await;
        }
        if let Some(at) = latest {
            let too_late = spec
                .starting_deadline_seconds
                .is_some_and(|d| at + jiff::SignedDuration::from_secs(d) < now);
            let name = format!(
                "{}-{}",
                cj.metadata.name.as_deref().unwrap_or_default(),
                at.as_second() / 60
            );
            let exists = mine
                .iter()
                .any(|j| j.metadata.name.as_deref() == Some(name.as_str()));
            if too_late {
                st.ctx
                    .event(
                        &cj_ref,
                        true,
                        "MissSchedule",
                        "Schedule",
                        format!("Missed scheduled time to start a job: {at}"),
                    )
                    .await;
            } else if !exists {
                let policy = spec.concurrency_policy.as_deref().unwrap_or("Allow");
                let mut go = true;
                if policy == "Forbid" && !active.is_empty() {
                    go = false;
                    st.ctx
                        .event(
                            &cj_ref,
                            false,
                            "JobAlreadyActive",
                            "Schedule",
                            "Not starting job because prior execution is running and concurrency policy is Forbid".to_owned(),
                        )
                        .await;
                    // Look again when it may have finished: at the next schedule.
                }
                if policy == "Replace" {
                    for a in std::mem::take(&mut active) {
                        let Some(n) = a.name.as_deref() else { continue };
                        match jobs_api.delete(n, &DeleteParams::background()).await {
                            Ok(_) | Err(kube::Error::Api(_)) => {
                                st.ctx
                                    .event(
                                        &cj_ref,
                                        false,
                                        "SuccessfulDelete",
                                        "Delete",
                                        format!("Deleted job {n}"),
                                    )
                                    .await;
                            }
                            Err(e) => return Err(ReconcileError::Kube(e)),
                        }
                    }
                }
                if go {
                    match jobs_api
                        .create(&PostParams::default(), &job_for(&cj, at))
                        .await
                    {
                        Ok(j) => {
                            st.ctx
                                .event(
                                    &cj_ref,
                                    false,
                                    "SuccessfulCreate",
                                    "Create",
                                    format!("Created job {name}"),
                                )
                                .await;
                            active.push(job_ref(&j));
                            status.last_schedule_time = Some(Time(at));
                        }
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            status.last_schedule_time = Some(Time(at));
                        }
                        Err(e) => {
                            st.ctx
                                .event(
                                    &cj_ref,
                                    true,
                                    "FailedCreate",
                                    "Create",
                                    format!("Error creating job: {e}"),
                                )
                                .await;
                            return Err(ReconcileError::Kube(e));
                        }
                    }
                }
            }
        }
    }
    status.active = (!active.is_empty()).then_some(active);
    write_status(&st, &cj, status, &old_status).await?;
    Ok(requeue)
}

/// Writes the CronJob's status if it changed.
async fn write_status(
    st: &State,
    cj: &CronJob,
    status: k8s_openapi::api::batch::v1::CronJobStatus,
    old: &k8s_openapi::api::batch::v1::CronJobStatus,
) -> Result<(), ReconcileError> {
    if &status == old {
        return Ok(());
    }
    let ns = cj.metadata.namespace.as_deref().unwrap_or_default();
    let name = cj.metadata.name.as_deref().unwrap_or_default();
    let api: Api<CronJob> = Api::namespaced(st.ctx.client.clone(), ns);
    let mut c = cj.clone();
    c.status = Some(status);
    match api.replace_status(name, &PostParams::default(), &c).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let cronjobs = ctx
        .informers
        .watch::<CronJob>(informer::enqueue_key(queue.clone()), &shutdown)
        .await;
    let jobs = ctx
        .informers
        .watch::<Job>(
            informer::enqueue_controller("CronJob", queue.clone()),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { cronjobs.wait_until_ready().await?; jobs.wait_until_ready().await } => r?,
    }
    for c in cronjobs.state() {
        queue.add(informer::key(c.as_ref()));
    }
    let st = State {
        ctx: ctx.clone(),
        cronjobs,
        jobs,
    };
    run_workers(&ctx, &queue, 5, &shutdown, move |key| sync(st.clone(), key)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::CronJobSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    #[test]
    fn jobs_are_named_after_the_scheduled_minute_and_owned_by_the_cronjob() {
        let cj = CronJob {
            metadata: ObjectMeta {
                name: Some("tick".into()),
                namespace: Some("ns".into()),
                uid: Some("u".into()),
                ..ObjectMeta::default()
            },
            spec: Some(CronJobSpec {
                schedule: "*/1 * * * *".into(),
                ..CronJobSpec::default()
            }),
            status: None,
        };
        let at: Timestamp = "2024-05-06T07:08:00Z"
            .parse()
            .unwrap_or(Timestamp::UNIX_EPOCH);
        let j = job_for(&cj, at);
        assert_eq!(j.metadata.name.as_deref(), Some("tick-28582988"));
        assert_eq!(
            j.metadata
                .owner_references
                .as_ref()
                .map(|o| o[0].kind.as_str()),
            Some("CronJob")
        );
        assert!(schedule_of(&cj).is_ok());
    }
}
