//! The ClusterRole aggregation controller (`clusterrole-aggregation`): a ClusterRole with an
//! `aggregationRule` gets the union of the rules of every ClusterRole its
//! `clusterRoleSelectors` select (in name order, duplicates dropped), kept up to date as
//! roles come, change and go. Upstream `pkg/controller/clusterroleaggregation`.

use std::sync::{Arc, OnceLock};

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Api, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::replicaset::pods::Selector;
use crate::{Context, LoopFuture};

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// The rules `role` aggregates from `roles` (None: it is not an aggregated role).
fn aggregated_rules(role: &ClusterRole, roles: &[Arc<ClusterRole>]) -> Option<Vec<PolicyRule>> {
    let selectors: Vec<Selector> = role
        .aggregation_rule
        .as_ref()?
        .cluster_role_selectors
        .iter()
        .flatten()
        .map(|s| Selector::from_label_selector(Some(s)))
        .collect();
    let mut sources: Vec<&ClusterRole> = roles
        .iter()
        .map(AsRef::as_ref)
        .filter(|r| r.metadata.name != role.metadata.name)
        .filter(|r| {
            selectors
                .iter()
                .any(|s| s.matches(r.metadata.labels.as_ref()))
        })
        .collect();
    sources.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for r in sources {
        for rule in r.rules.iter().flatten() {
            if !rules.contains(rule) {
                rules.push(rule.clone());
            }
        }
    }
    Some(rules)
}

/// Syncs aggregated ClusterRole `name`.
async fn sync(ctx: Context, roles: Store<ClusterRole>, name: String) -> SyncResult {
    let Some(role) = roles.get(&ObjectRef::new(&name)) else {
        return Ok(None);
    };
    let Some(rules) = aggregated_rules(&role, &roles.state()) else {
        return Ok(None);
    };
    if role.rules.clone().unwrap_or_default() == rules {
        return Ok(None);
    }
    let mut updated = (*role).clone();
    updated.rules = Some(rules);
    let api: Api<ClusterRole> = Api::all(ctx.client.clone());
    match api.replace(&name, &PostParams::default(), &updated).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
            Ok(Some(std::time::Duration::from_millis(200)))
        }
        Err(e) => Err(ReconcileError::Kube(e)),
    }
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    // The handler reads the store it feeds; it is handed over once the informer exists
    // (events before that only concern the initial list, which is queued in full below).
    let cell: Arc<OnceLock<Store<ClusterRole>>> = Arc::default();
    let (q, reader) = (queue.clone(), cell.clone());
    let roles = ctx
        .informers
        .watch::<ClusterRole>(
            Box::new(
                move |old: Option<&ClusterRole>, new: Option<&ClusterRole>| {
                    // Any change may alter an aggregation: look at every aggregated role.
                    for r in [old, new].into_iter().flatten() {
                        if r.aggregation_rule.is_some()
                            && let Some(n) = r.metadata.name.clone()
                        {
                            q.add(n);
                        }
                    }
                    for r in reader.get().map(Store::state).unwrap_or_default() {
                        if r.aggregation_rule.is_some()
                            && let Some(n) = r.metadata.name.clone()
                        {
                            q.add(n);
                        }
                    }
                },
            ),
            &shutdown,
        )
        .await;
    let _ = cell.set(roles.clone());
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = roles.wait_until_ready() => r?,
    }
    for r in roles.state() {
        if r.aggregation_rule.is_some()
            && let Some(n) = r.metadata.name.clone()
        {
            queue.add(n);
        }
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, 5, &shutdown, move |key| {
        sync(c.clone(), roles.clone(), key)
    })
    .await;
    Ok(())
}
