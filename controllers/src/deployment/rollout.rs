//! Rolling updates, Recreate, proportional scaling and history cleanup (upstream's
//! `rolling.go`, `recreate.go`, `sync.go`).

use super::*;

/// `NewRSNewReplicas`.
pub(super) fn new_rs_new_replicas(
    d: &Deployment,
    all: &[ReplicaSet],
    new: Option<&ReplicaSet>,
) -> i32 {
    if !is_rolling(d) {
        return replicas(d);
    }
    let cur = new.map_or(0, rs_replicas);
    let total: i32 = all.iter().map(rs_replicas).sum::<i32>() + cur;
    let max_total = replicas(d) + max_surge(d);
    if total >= max_total {
        return cur;
    }
    let up = (max_total - total).min(replicas(d) - cur);
    cur + up.max(0)
}

/// Scales `rs` to `to`, refreshing its replicas annotations (`scaleReplicaSet`); records
/// ScalingReplicaSet when the size changes. Returns the updated ReplicaSet.
pub(super) async fn scale_rs(
    s: &Shared,
    d: &Deployment,
    rs: &ReplicaSet,
    to: i32,
) -> Result<(bool, ReplicaSet), ReconcileError> {
    let from = rs_replicas(rs);
    let mut copy = rs.clone();
    let ann_changed = set_replicas_annotations(&mut copy, replicas(d), replicas(d) + max_surge(d));
    if from == to && !ann_changed {
        return Ok((false, copy));
    }
    if let Some(spec) = copy.spec.as_mut() {
        spec.replicas = Some(to);
    }
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(s.ctx.client.clone(), &ns);
    let updated = api
        .replace(&name_of(&copy), &PostParams::default(), &copy)
        .await?;
    if from != to {
        let dir = if to > from { "up" } else { "down" };
        s.ctx
            .event(
                &reference(d),
                false,
                "ScalingReplicaSet",
                "Scale",
                format!(
                    "Scaled {dir} replica set {} from {from} to {to}",
                    name_of(rs)
                ),
            )
            .await;
    }
    Ok((from != to, updated))
}

pub(super) fn by_creation(list: &mut [ReplicaSet]) {
    list.sort_by(|a, b| {
        let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
        let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
        ta.cmp(&tb)
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
}

/// `rolloutRolling`.
pub(super) async fn rollout_rolling(
    s: &Shared,
    d: &mut Deployment,
    rs_list: &[ReplicaSet],
) -> SyncResult {
    let (new, mut old) = Box::pin(new_and_old(s, d, rs_list, true)).await?;
    let mut new = new;
    // Scale up the new ReplicaSet.
    if let Some(n) = new.clone() {
        let want = replicas(d);
        let cur = rs_replicas(&n);
        let target = if cur > want {
            want
        } else {
            new_rs_new_replicas(d, &old, Some(&n))
        };
        if target != cur {
            let (scaled, updated) = scale_rs(s, d, &n, target).await?;
            new = Some(updated);
            if scaled {
                return sync_rollout_status(s, d, new.as_ref(), &old).await;
            }
        }
    }
    // Scale down old ReplicaSets.
    if reconcile_old(s, d, new.as_ref(), &mut old).await? {
        return sync_rollout_status(s, d, new.as_ref(), &old).await;
    }
    if d.status.as_ref().is_some_and(|st| complete(d, st)) {
        cleanup(s, d, &old).await?;
    }
    sync_rollout_status(s, d, new.as_ref(), &old).await
}

/// `reconcileOldReplicaSets`: true if anything was scaled down.
pub(super) async fn reconcile_old(
    s: &Shared,
    d: &Deployment,
    new: Option<&ReplicaSet>,
    old: &mut [ReplicaSet],
) -> Result<bool, ReconcileError> {
    let old_pods: i32 = old.iter().map(rs_replicas).sum();
    if old_pods == 0 {
        return Ok(false);
    }
    let all_pods = old_pods + new.map_or(0, rs_replicas);
    let min_available = replicas(d) - max_unavailable(d);
    let new_unavailable = new.map_or(0, |n| rs_replicas(n) - rs_status(n).2);
    let mut max_scaled_down = all_pods - min_available - new_unavailable;
    if max_scaled_down <= 0 {
        return Ok(false);
    }
    by_creation(old);
    // Clean up unhealthy replicas first.
    let mut cleaned = 0;
    let mut scaled_any = false;
    for rs in old.iter_mut() {
        if cleaned >= max_scaled_down {
            break;
        }
        let r = rs_replicas(rs);
        if r == 0 {
            continue;
        }
        let unhealthy = r - rs_status(rs).2;
        if unhealthy <= 0 {
            continue;
        }
        let down = (max_scaled_down - cleaned).min(unhealthy);
        let (scaled, updated) = scale_rs(s, d, rs, r - down).await?;
        *rs = updated;
        scaled_any |= scaled;
        cleaned += down;
    }
    max_scaled_down -= cleaned;
    let _ = max_scaled_down;
    // Then scale down as far as availability allows.
    let available: i32 =
        old.iter().map(|rs| rs_status(rs).2).sum::<i32>() + new.map_or(0, |n| rs_status(n).2);
    if available > min_available {
        let total = available - min_available;
        let mut done = 0;
        for rs in old.iter_mut() {
            if done >= total {
                break;
            }
            let r = rs_replicas(rs);
            if r == 0 {
                continue;
            }
            let down = r.min(total - done);
            let (scaled, updated) = scale_rs(s, d, rs, r - down).await?;
            *rs = updated;
            scaled_any |= scaled;
            done += down;
        }
    }
    Ok(scaled_any)
}

/// `rolloutRecreate`.
pub(super) async fn rollout_recreate(
    s: &Shared,
    d: &mut Deployment,
    rs_list: &[ReplicaSet],
) -> SyncResult {
    let (new, mut old) = Box::pin(new_and_old(s, d, rs_list, false)).await?;
    let mut scaled = false;
    for rs in old.iter_mut() {
        if rs_replicas(rs) > 0 {
            let (sc, updated) = scale_rs(s, d, rs, 0).await?;
            *rs = updated;
            scaled |= sc;
        }
    }
    if scaled {
        return sync_rollout_status(s, d, new.as_ref(), &old).await;
    }
    // Wait for old pods to stop running (listed from the API: no pod informer is kept just
    // for this; the deployment is looked at again every second while they run).
    let old_uids: Vec<String> = old.iter().filter_map(|r| r.metadata.uid.clone()).collect();
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let pod_api: Api<Pod> = Api::namespaced(s.ctx.client.clone(), &ns);
    let lp = ListParams::default().labels(&selector_string(
        &d.spec
            .as_ref()
            .map(|sp| sp.selector.clone())
            .unwrap_or_default(),
    ));
    let listed = pod_api.list(&lp).await?;
    let old_running = listed.items.iter().any(|p| {
        pods::controller_of(&p.metadata).is_some_and(|r| old_uids.contains(&r.uid))
            && !matches!(
                p.status.as_ref().and_then(|st| st.phase.as_deref()),
                Some("Failed" | "Succeeded")
            )
    });
    if old_running {
        let again = sync_rollout_status(s, d, new.as_ref(), &old).await?;
        return Ok(Some(again.map_or(Duration::from_secs(1), |a| {
            a.min(Duration::from_secs(1))
        })));
    }
    let new = match new {
        Some(n) => Some(n),
        None => Box::pin(new_and_old(s, d, rs_list, true)).await?.0,
    };
    let mut new = new;
    if let Some(n) = new.clone()
        && rs_replicas(&n) != replicas(d)
    {
        let (_, updated) = scale_rs(s, d, &n, replicas(d)).await?;
        new = Some(updated);
    }
    if d.status.as_ref().is_some_and(|st| complete(d, st)) {
        cleanup(s, d, &old).await?;
    }
    sync_rollout_status(s, d, new.as_ref(), &old).await
}

/// `sync`: scaling and paused deployments.
pub(super) async fn sync_scale(
    s: &Shared,
    d: &mut Deployment,
    rs_list: &[ReplicaSet],
) -> SyncResult {
    let (new, mut old) = Box::pin(new_and_old(s, d, rs_list, false)).await?;
    let new = scale(s, d, new, &mut old).await?;
    let paused = d.spec.as_ref().and_then(|sp| sp.paused).unwrap_or(false);
    if paused {
        cleanup(s, d, &old).await?;
    }
    sync_status_only_with(s, d, new.as_ref(), &old).await
}

/// `scale`: proportional scaling of active ReplicaSets.
pub(super) async fn scale(
    s: &Shared,
    d: &Deployment,
    new: Option<ReplicaSet>,
    old: &mut [ReplicaSet],
) -> Result<Option<ReplicaSet>, ReconcileError> {
    let want = replicas(d);
    let mut all: Vec<ReplicaSet> = new.iter().cloned().chain(old.iter().cloned()).collect();
    let active: Vec<usize> = (0..all.len())
        .filter(|i| rs_replicas(&all[*i]) > 0)
        .collect();
    // Exactly one active (or none: the newest) takes the whole size.
    let target_idx = if active.len() == 1 {
        Some(active[0])
    } else if active.is_empty() {
        if new.is_some() {
            Some(0)
        } else {
            (0..all.len()).max_by_key(|i| all[*i].metadata.creation_timestamp.as_ref().map(|t| t.0))
        }
    } else {
        None
    };
    let new_name = new.as_ref().map(name_of);
    if let Some(i) = target_idx {
        if rs_replicas(&all[i]) != want || desired_replicas_annotation(&all[i]) != Some(want) {
            let (_, updated) = scale_rs(s, d, &all[i], want).await?;
            all[i] = updated;
        }
    } else if let Some(n) = new.as_ref().filter(|n| {
        rs_replicas(n) == want
            && desired_replicas_annotation(n) == Some(want)
            && rs_status(n).2 == want
    }) {
        // Saturated: old ones go to zero.
        let _ = n;
        for rs in all.iter_mut().skip(1) {
            if rs_replicas(rs) > 0 {
                let (_, updated) = scale_rs(s, d, rs, 0).await?;
                *rs = updated;
            }
        }
    } else if is_rolling(d) {
        let mut act: Vec<ReplicaSet> = all.iter().filter(|r| rs_replicas(r) > 0).cloned().collect();
        let current: i32 = act.iter().map(rs_replicas).sum();
        let allowed = if want > 0 { want + max_surge(d) } else { 0 };
        let to_add = allowed - current;
        // Larger first; newer first on ties when scaling up, older when scaling down.
        act.sort_by(|a, b| {
            let ta = a.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let tb = b.metadata.creation_timestamp.as_ref().map(|t| t.0);
            rs_replicas(b)
                .cmp(&rs_replicas(a))
                .then_with(|| if to_add > 0 { tb.cmp(&ta) } else { ta.cmp(&tb) })
        });
        let mut added = 0;
        let mut sizes: Vec<i32> = Vec::new();
        for rs in &act {
            let mut size = rs_replicas(rs);
            if to_add != 0 && to_add != added {
                let frac = fraction(d, rs);
                let allowed_left = to_add - added;
                let prop = if to_add > 0 {
                    frac.min(allowed_left)
                } else {
                    frac.max(allowed_left)
                };
                size += prop;
                added += prop;
            }
            sizes.push(size);
        }
        if to_add != added && !sizes.is_empty() {
            sizes[0] = (sizes[0] + to_add - added).max(0);
        }
        for (rs, size) in act.iter().zip(sizes) {
            let (_, updated) = scale_rs(s, d, rs, size).await?;
            if let Some(slot) = all
                .iter_mut()
                .find(|r| r.metadata.uid == updated.metadata.uid)
            {
                *slot = updated;
            }
        }
    }
    let new = new_name.and_then(|n| all.iter().find(|r| name_of(*r) == n).cloned());
    let olds: Vec<ReplicaSet> = all
        .into_iter()
        .filter(|r| Some(name_of(r)) != new.as_ref().map(name_of))
        .collect();
    for (slot, rs) in old.iter_mut().zip(olds) {
        *slot = rs;
    }
    Ok(new)
}

/// `getReplicaSetFraction`.
pub(super) fn fraction(d: &Deployment, rs: &ReplicaSet) -> i32 {
    let want = replicas(d);
    if want == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = want + max_surge(d);
    let annotated = max_replicas_annotation(rs)
        .unwrap_or_else(|| d.status.as_ref().and_then(|st| st.replicas).unwrap_or(0));
    if annotated == 0 {
        return 0;
    }
    let size = f64::from(rs_replicas(rs)) * f64::from(deployment_replicas) / f64::from(annotated);
    #[allow(clippy::cast_possible_truncation)]
    let rounded = size.round() as i32;
    rounded - rs_replicas(rs)
}

/// `cleanupDeployment`: deletes old, scaled-down ReplicaSets beyond `revisionHistoryLimit`.
pub(super) async fn cleanup(
    s: &Shared,
    d: &Deployment,
    old: &[ReplicaSet],
) -> Result<(), ReconcileError> {
    let Some(limit) = d.spec.as_ref().and_then(|sp| sp.revision_history_limit) else {
        return Ok(());
    };
    let mut cleanable: Vec<&ReplicaSet> = old
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .collect();
    let diff = i32::try_from(cleanable.len()).unwrap_or(i32::MAX) - limit;
    if diff <= 0 {
        return Ok(());
    }
    cleanable.sort_by_key(|r| revision(r.metadata.annotations.as_ref()));
    let ns = d.metadata.namespace.clone().unwrap_or_default();
    let api: Api<ReplicaSet> = Api::namespaced(s.ctx.client.clone(), &ns);
    for rs in cleanable
        .into_iter()
        .take(usize::try_from(diff).unwrap_or(0))
    {
        let st = rs.status.as_ref();
        if st.is_some_and(|st| st.replicas != 0)
            || rs_replicas(rs) != 0
            || rs.metadata.generation.unwrap_or(0)
                > st.and_then(|st| st.observed_generation).unwrap_or(0)
        {
            continue;
        }
        match api.delete(&name_of(rs), &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
