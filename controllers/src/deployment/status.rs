//! Deployment status and conditions (upstream's `calculateStatus`, `syncRolloutStatus`,
//! `progress.go`).

use super::*;

/// `calculateStatus`.
pub(super) fn calculate_status(
    d: &Deployment,
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
) -> DeploymentStatus {
    let all: Vec<&ReplicaSet> = new.into_iter().chain(old.iter()).collect();
    let available: i32 = all.iter().map(|r| rs_status(r).2).sum();
    let total: i32 = all.iter().map(|r| rs_replicas(r)).sum();
    let unavailable = (total - available).max(0);
    let mut st = d.status.clone().unwrap_or_default();
    st.observed_generation = d.metadata.generation;
    st.replicas = Some(all.iter().map(|r| rs_status(r).0).sum());
    st.updated_replicas = Some(new.map_or(0, |n| rs_status(n).0));
    st.ready_replicas = Some(all.iter().map(|r| rs_status(r).1).sum());
    st.available_replicas = Some(available);
    st.unavailable_replicas = Some(unavailable);
    for f in [
        &mut st.replicas,
        &mut st.updated_replicas,
        &mut st.ready_replicas,
        &mut st.available_replicas,
        &mut st.unavailable_replicas,
    ] {
        if *f == Some(0) {
            *f = None;
        }
    }
    if available >= replicas(d) - max_unavailable(d) {
        set_condition(
            &mut st,
            new_condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".to_owned(),
            ),
        );
    } else {
        set_condition(
            &mut st,
            new_condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".to_owned(),
            ),
        );
    }
    st
}

/// Status for deleted or paused/scaled deployments (`syncDeploymentStatus`).
pub(super) async fn sync_status_only(
    s: &Shared,
    d: &mut Deployment,
    rs_list: &[ReplicaSet],
) -> SyncResult {
    let (new, old) = Box::pin(new_and_old(s, d, rs_list, false)).await?;
    sync_status_only_with(s, d, new.as_ref(), &old).await
}

pub(super) async fn sync_status_only_with(
    s: &Shared,
    d: &mut Deployment,
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
) -> SyncResult {
    let st = calculate_status(d, new, old);
    write_status(s, d, st).await?;
    Ok(None)
}

/// `syncRolloutStatus`: status, Progressing (ReplicaSetUpdated, NewReplicaSetAvailable,
/// ProgressDeadlineExceeded) and ReplicaFailure conditions; requeues stuck rollouts.
pub(super) async fn sync_rollout_status(
    s: &Shared,
    d: &mut Deployment,
    new: Option<&ReplicaSet>,
    old: &[ReplicaSet],
) -> SyncResult {
    let mut st = calculate_status(d, new, old);
    let deadline = progress_deadline(d);
    if deadline.is_none() {
        remove_condition(&mut st, "Progressing");
    }
    let cur = condition(&st, "Progressing").cloned();
    let is_complete = st.replicas == st.updated_replicas
        && cur.as_ref().and_then(|c| c.reason.as_deref()) == Some("NewReplicaSetAvailable");
    if deadline.is_some() && !is_complete {
        let new_name = new.map(name_of).unwrap_or_default();
        if complete(d, &st) {
            set_condition(
                &mut st,
                new_condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{new_name}\" has successfully progressed."),
                ),
            );
        } else if progressing(d, &st) {
            let msg = if new.is_some() {
                format!("ReplicaSet \"{new_name}\" is progressing.")
            } else {
                "Replica set is progressing.".to_owned()
            };
            let mut c = new_condition("Progressing", "True", "ReplicaSetUpdated", msg);
            if let Some(cur) = cur.as_ref().filter(|c| c.status == "True") {
                c.last_transition_time = cur.last_transition_time.clone();
            }
            remove_condition(&mut st, "Progressing");
            set_condition(&mut st, c);
        } else if timed_out(d, &st) {
            set_condition(
                &mut st,
                new_condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                ),
            );
        }
    }
    // ReplicaFailure mirrors the ReplicaSets' failures.
    let failure = new.into_iter().chain(old.iter()).find_map(|r| {
        r.status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
            .cloned()
    });
    match failure {
        Some(f) => set_condition(
            &mut st,
            new_condition(
                "ReplicaFailure",
                &f.status,
                f.reason.as_deref().unwrap_or_default(),
                f.message.unwrap_or_default(),
            ),
        ),
        None => remove_condition(&mut st, "ReplicaFailure"),
    }
    let unchanged = d.status.as_ref() == Some(&st);
    write_status(s, d, st.clone()).await?;
    if unchanged || !complete(d, &st) {
        return Ok(requeue_stuck(d, &st));
    }
    Ok(None)
}

/// `requeueStuckDeployment`: when to look again so the progress deadline is noticed.
pub(super) fn requeue_stuck(d: &Deployment, st: &DeploymentStatus) -> Option<Duration> {
    let deadline = progress_deadline(d)?;
    let c = condition(st, "Progressing")?;
    if complete(d, st) || c.reason.as_deref() == Some("ProgressDeadlineExceeded") {
        return None;
    }
    let from = c.last_update_time.as_ref()?.0;
    let at = from + jiff::SignedDuration::from_secs(i64::from(deadline));
    let left = at.duration_since(jiff::Timestamp::now());
    if left.is_negative() {
        return Some(Duration::from_millis(100));
    }
    Some(Duration::try_from(left).unwrap_or_default() + Duration::from_secs(1))
}
