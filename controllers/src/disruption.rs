//! The disruption controller (`disruption`): keeps each PodDisruptionBudget's status —
//! `expectedPods`, `desiredHealthy`, `currentHealthy`, `disruptionsAllowed`,
//! `observedGeneration`, the `DisruptionAllowed` condition — from its pods and, for
//! `maxUnavailable` and percentage `minAvailable`, the scale of the pods' controllers
//! (Deployments through their ReplicaSets, ReplicaSets, ReplicationControllers, StatefulSets).
//! The eviction API reads it. Upstream `pkg/controller/disruption`.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::replicaset::pods::Selector;
use crate::{Context, LoopFuture, informer};

/// How long an eviction's entry in `disruptedPods` counts (upstream's `DeletionTimeout`).
const DELETION_TIMEOUT: Duration = Duration::from_secs(120);
/// Periodic resync, so expired `disruptedPods` entries are dropped.
const RESYNC: Duration = Duration::from_secs(30);

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Resolves an int-or-percent against `total` (rounding up, as upstream).
fn scaled(v: &IntOrString, total: i32) -> Result<i32, String> {
    match v {
        IntOrString::Int(n) => Ok(*n),
        IntOrString::String(s) => {
            let pct = s
                .strip_suffix('%')
                .and_then(|p| p.parse::<i64>().ok())
                .ok_or_else(|| format!("invalid value for IntOrString: invalid value {s:?}"))?;
            let n = (pct * i64::from(total) + 99) / 100;
            Ok(i32::try_from(n).unwrap_or(i32::MAX))
        }
    }
}

/// Whether the pod counts as healthy (Ready and not being deleted).
fn healthy(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The scale (`spec.replicas`) of the workload controlling `pod`, with its uid (so each
/// controller counts once).
async fn controller_scale(
    client: &kube::Client,
    pod: &Pod,
) -> Result<Option<(String, i32)>, kube::Error> {
    let Some(owner) = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
    else {
        return Ok(None);
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let group = owner.api_version.split('/').next().unwrap_or_default();
    match (owner.kind.as_str(), group) {
        ("ReplicaSet", "apps") => {
            let rs = Api::<ReplicaSet>::namespaced(client.clone(), ns)
                .get(&owner.name)
                .await?;
            if rs.metadata.uid.as_deref() != Some(owner.uid.as_str()) {
                return Ok(None);
            }
            let dep = rs
                .metadata
                .owner_references
                .iter()
                .flatten()
                .find(|o| o.controller == Some(true) && o.kind == "Deployment");
            if let Some(d) = dep {
                let d = Api::<Deployment>::namespaced(client.clone(), ns)
                    .get(&d.name)
                    .await?;
                let replicas = d.spec.and_then(|s| s.replicas).unwrap_or(1);
                return Ok(Some((d.metadata.uid.unwrap_or_default(), replicas)));
            }
            let replicas = rs.spec.and_then(|s| s.replicas).unwrap_or(1);
            Ok(Some((owner.uid.clone(), replicas)))
        }
        ("StatefulSet", "apps") => {
            let s = Api::<StatefulSet>::namespaced(client.clone(), ns)
                .get(&owner.name)
                .await?;
            Ok(Some((
                owner.uid.clone(),
                s.spec.and_then(|s| s.replicas).unwrap_or(1),
            )))
        }
        ("ReplicationController", _) => {
            let rc = Api::<ReplicationController>::namespaced(client.clone(), ns)
                .get(&owner.name)
                .await?;
            Ok(Some((
                owner.uid.clone(),
                rc.spec.and_then(|s| s.replicas).unwrap_or(1),
            )))
        }
        _ => Ok(None),
    }
}

/// Sets the DisruptionAllowed condition in `status`.
fn set_condition(
    status: &mut PodDisruptionBudgetStatus,
    allowed: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) {
    let conds = status.conditions.get_or_insert_with(Vec::new);
    let st = if allowed { "True" } else { "False" };
    if let Some(c) = conds.iter_mut().find(|c| c.type_ == "DisruptionAllowed") {
        if c.status != st {
            c.last_transition_time = Time(Timestamp::now());
        }
        c.status = st.to_owned();
        c.reason = reason.to_owned();
        c.message = message.to_owned();
        c.observed_generation = generation;
        return;
    }
    conds.push(Condition {
        type_: "DisruptionAllowed".to_owned(),
        status: st.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::now()),
    });
}

/// The loop's state.
#[derive(Clone)]
struct State {
    /// The controller's context.
    ctx: Context,
    /// Budgets.
    pdbs: Store<PodDisruptionBudget>,
    /// Pods.
    pods: Store<Pod>,
}

/// Computes (expected, desiredHealthy) for `pdb` over `pods`.
async fn expectations(
    st: &State,
    pdb: &PodDisruptionBudget,
    pods: &[&Pod],
) -> Result<(i32, i32), String> {
    let spec = pdb.spec.clone().unwrap_or_default();
    if let (Some(IntOrString::Int(min)), None) = (&spec.min_available, &spec.max_unavailable) {
        return Ok((i32::try_from(pods.len()).unwrap_or(i32::MAX), *min));
    }
    // maxUnavailable, or a percentage minAvailable: the controllers' scale decides.
    let mut seen = HashSet::new();
    let mut expected = 0i32;
    for pod in pods {
        match controller_scale(&st.ctx.client, pod).await {
            Ok(Some((uid, n))) => {
                if seen.insert(uid) {
                    expected += n;
                }
            }
            Ok(None) => {
                return Err(format!(
                    "found no controllers for pod {:?}",
                    pod.metadata.name.as_deref().unwrap_or_default()
                ));
            }
            Err(e) => return Err(e.to_string()),
        }
    }
    let desired = match (&spec.max_unavailable, &spec.min_available) {
        (Some(mu), _) => (expected - scaled(mu, expected)?).max(0),
        (None, Some(ma)) => scaled(ma, expected)?,
        (None, None) => expected,
    };
    Ok((expected, desired))
}

/// Syncs budget `key`.
async fn sync(st: State, key: String) -> SyncResult {
    let Some(pdb) = informer::get(&st.pdbs, &key) else {
        return Ok(None);
    };
    let spec = pdb.spec.clone().unwrap_or_default();
    let selector = Selector::from_label_selector(spec.selector.as_ref());
    let all = st.pods.state();
    let pods: Vec<&Pod> = all
        .iter()
        .map(AsRef::as_ref)
        .filter(|p| p.metadata.namespace == pdb.metadata.namespace)
        .filter(|p| selector.matches(p.metadata.labels.as_ref()))
        .collect();
    let old = pdb.status.clone().unwrap_or_default();
    let mut status = old.clone();
    let generation = pdb.metadata.generation;
    status.observed_generation = generation;
    // Evictions in flight: pods the eviction API counted as disrupted, until they are gone
    // or the entry expires.
    let now = Timestamp::now();
    let mut disrupted = BTreeMap::new();
    let mut next_expiry: Option<Duration> = None;
    for (name, t) in old.disrupted_pods.clone().unwrap_or_default() {
        let alive = pods.iter().any(|p| {
            p.metadata.name.as_deref() == Some(name.as_str())
                && p.metadata.deletion_timestamp.is_none()
        });
        let expires = t.0 + SignedDuration::try_from(DELETION_TIMEOUT).unwrap_or_default();
        if alive && expires > now {
            let left = Duration::try_from(expires.duration_since(now)).unwrap_or_default();
            next_expiry = Some(next_expiry.map_or(left, |d: Duration| d.min(left)));
            disrupted.insert(name, t);
        }
    }
    let current = pods
        .iter()
        .filter(|p| healthy(p))
        .filter(|p| !disrupted.contains_key(p.metadata.name.as_deref().unwrap_or_default()))
        .count();
    let current = i32::try_from(current).unwrap_or(i32::MAX);
    status.disrupted_pods = (!disrupted.is_empty()).then_some(disrupted);
    match expectations(&st, &pdb, &pods).await {
        Ok((expected, desired)) => {
            status.expected_pods = expected;
            status.desired_healthy = desired;
            status.current_healthy = current;
            let allowed = if expected > 0 {
                (current - desired).max(0)
            } else {
                0
            };
            status.disruptions_allowed = allowed;
            if allowed > 0 {
                set_condition(&mut status, true, "SufficientPods", "", generation);
            } else {
                set_condition(&mut status, false, "InsufficientPods", "", generation);
            }
        }
        Err(msg) => {
            status.current_healthy = current;
            status.disruptions_allowed = 0;
            set_condition(&mut status, false, "SyncFailed", &msg, generation);
        }
    }
    if status != old {
        let ns = pdb.metadata.namespace.as_deref().unwrap_or_default();
        let name = pdb.metadata.name.as_deref().unwrap_or_default();
        let api: Api<PodDisruptionBudget> = Api::namespaced(st.ctx.client.clone(), ns);
        let mut p = (*pdb).clone();
        p.status = Some(status);
        match api.replace_status(name, &PostParams::default(), &p).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                return Ok(Some(Duration::from_millis(200)));
            }
            Err(e) => return Err(ReconcileError::Kube(e)),
        }
    }
    Ok(Some(next_expiry.map_or(RESYNC, |d| d.min(RESYNC))))
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let pdbs = ctx
        .informers
        .watch::<PodDisruptionBudget>(
            Box::new(
                move |old: Option<&PodDisruptionBudget>, new: Option<&PodDisruptionBudget>| {
                    if let Some(p) = new.or(old) {
                        q.add(informer::key(p));
                    }
                },
            ),
            &shutdown,
        )
        .await;
    let (q, budgets) = (queue.clone(), pdbs.clone());
    let pods = ctx
        .informers
        .watch::<Pod>(
            Box::new(move |old: Option<&Pod>, new: Option<&Pod>| {
                for p in [old, new].into_iter().flatten() {
                    for b in budgets.state() {
                        if b.metadata.namespace != p.metadata.namespace {
                            continue;
                        }
                        let sel = Selector::from_label_selector(
                            b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                        );
                        if sel.matches(p.metadata.labels.as_ref()) {
                            q.add(informer::key(b.as_ref()));
                        }
                    }
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { pdbs.wait_until_ready().await?; pods.wait_until_ready().await } => r?,
    }
    for p in pdbs.state() {
        queue.add(informer::key(p.as_ref()));
    }
    let st = State {
        ctx: ctx.clone(),
        pdbs,
        pods,
    };
    run_workers(&ctx, &queue, 1, &shutdown, move |key| sync(st.clone(), key)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_round_up_against_the_expected_count() {
        assert_eq!(scaled(&IntOrString::String("50%".into()), 3), Ok(2));
        assert_eq!(scaled(&IntOrString::String("10%".into()), 10), Ok(1));
        assert_eq!(scaled(&IntOrString::Int(2), 10), Ok(2));
        assert!(scaled(&IntOrString::String("half".into()), 10).is_err());
    }
}
