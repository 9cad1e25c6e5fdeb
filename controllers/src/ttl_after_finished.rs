//! The TTL-after-finished controller (`ttl-after-finished`): deletes a finished Job (Complete
//! or Failed) `spec.ttlSecondsAfterFinished` seconds after it finished, with foreground
//! propagation so its pods go first. Upstream `pkg/controller/ttlafterfinished`.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::job::job_finished;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// When `job` expires: its finish time plus its TTL (None: it has no TTL or has not finished).
fn expires_at(job: &Job) -> Option<Timestamp> {
    let ttl = job.spec.as_ref()?.ttl_seconds_after_finished?;
    let cond = job_finished(job)?;
    let finished = job
        .status
        .as_ref()
        .and_then(|s| s.completion_time.as_ref())
        .filter(|_| cond.type_ == "Complete")
        .or(cond.last_transition_time.as_ref())
        .map(|t| t.0)?;
    Some(finished + SignedDuration::from_secs(i64::from(ttl)))
}

/// Deletes Job `key` if its TTL ran out, else asks to look again then.
async fn sync(ctx: Context, jobs: Store<Job>, key: String) -> SyncResult {
    let Some(job) = informer::get(&jobs, &key) else {
        return Ok(None);
    };
    if job.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let Some(at) = expires_at(&job) else {
        return Ok(None);
    };
    let now = Timestamp::now();
    if at > now {
        let left = Duration::try_from(at.duration_since(now)).unwrap_or_default();
        return Ok(Some(left + Duration::from_millis(100)));
    }
    let (ns, name) = informer::split_key(&key);
    let api: Api<Job> = Api::namespaced(ctx.client.clone(), ns.unwrap_or_default());
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::foreground()
    };
    tracing::info!(job = %key, "ttl-after-finished: deleting expired job");
    match api.delete(name, &dp).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(None),
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let jobs = ctx
        .informers
        .watch::<Job>(
            Box::new(move |_old, new: Option<&Job>| {
                if let Some(j) = new.filter(|j| expires_at(j).is_some()) {
                    q.add(informer::key(j));
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = jobs.wait_until_ready() => r?,
    }
    for j in jobs.state() {
        queue.add(informer::key(j.as_ref()));
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, 5, &shutdown, move |key| {
        sync(c.clone(), jobs.clone(), key)
    })
    .await;
    Ok(())
}
