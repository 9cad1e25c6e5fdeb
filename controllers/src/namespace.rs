//! The namespace controller (upstream's `pkg/controller/namespace`): a namespace with a
//! deletionTimestamp has every namespaced resource in it deleted (deletecollection, or list
//! and delete), its `NamespaceDeletion*`/`NamespaceContentRemaining`/
//! `NamespaceFinalizersRemaining` conditions kept as upstream words them, and once nothing is
//! left the `kubernetes` finalizer is removed through `namespaces/<ns>/finalize`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, NamespaceCondition};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{DeleteParams, DynamicObject, ListParams, PostParams, Preconditions};
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

use crate::context::{Context, ReconcileError};
use crate::garbage_collector::resources::{self, Resource};
use crate::informer;
use crate::queue::{self, Queue, SyncResult};

/// `--concurrent-namespace-syncs`.
const WORKERS: usize = 10;
/// The finalizer this controller owns.
const FINALIZER: &str = "kubernetes";
/// How long a discovery answer is reused.
const DISCOVERY_TTL: Duration = Duration::from_secs(10);

/// Starts the namespace controller.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> crate::LoopFuture {
    Box::pin(run(ctx, shutdown))
}

struct Shared {
    ctx: Context,
    namespaces: Store<Namespace>,
    discovery: Mutex<Option<(Instant, Vec<Resource>)>>,
}

async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let namespaces = ctx
        .informers
        .watch::<Namespace>(
            Box::new(move |_old: Option<&Namespace>, new: Option<&Namespace>| {
                if let Some(n) = new.filter(|n| n.metadata.deletion_timestamp.is_some()) {
                    q.add(informer::key(n));
                }
            }),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = namespaces.wait_until_ready() => r?,
    }
    let shared = Arc::new(Shared {
        ctx: ctx.clone(),
        namespaces,
        discovery: Mutex::new(None),
    });
    queue::run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
        let s = shared.clone();
        async move { sync(&s, &key).await }
    })
    .await;
    Ok(())
}

async fn discover(s: &Shared) -> Result<Vec<Resource>, kube::Error> {
    {
        let g = s
            .discovery
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, r)) = g.as_ref()
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok(r.clone());
        }
    }
    let r = resources::discover(&s.ctx.client).await?;
    *s.discovery
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((Instant::now(), r.clone()));
    Ok(r)
}

fn cond(type_: &str, status: &str, reason: &str, message: String) -> NamespaceCondition {
    NamespaceCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: Some(reason.to_owned()),
        message: Some(message),
        last_transition_time: Some(Time(jiff::Timestamp::now())),
    }
}

/// What one pass over the namespace's content found.
#[derive(Default)]
struct Outcome {
    discovery_failed: Option<String>,
    errors: Vec<String>,
    /// `resource.group` → objects remaining.
    remaining: BTreeMap<String, usize>,
    /// finalizer → objects carrying it.
    finalizers: BTreeMap<String, usize>,
}

/// `syncNamespaceFromKey` / `namespacedResourcesDeleter.Delete`.
async fn sync(s: &Shared, name: &str) -> SyncResult {
    let Some(ns) = informer::get(&s.namespaces, name) else {
        return Ok(None);
    };
    if ns.metadata.deletion_timestamp.is_none() {
        return Ok(None);
    }
    let api: Api<Namespace> = Api::all(s.ctx.client.clone());
    let spec_finalizers = ns
        .spec
        .as_ref()
        .and_then(|sp| sp.finalizers.clone())
        .unwrap_or_default();
    if !spec_finalizers.iter().any(|f| f == FINALIZER) {
        if spec_finalizers.is_empty() {
            // Finalized: delete it (the API server removes it once metadata finalizers go).
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: ns.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => return Err(e.into()),
            }
        }
        return Ok(None);
    }
    let outcome = delete_content(s, name).await;
    // Conditions, as upstream's `namespaceConditionUpdater`.
    let mut conds = Vec::new();
    conds.push(match &outcome.discovery_failed {
        Some(e) => cond(
            "NamespaceDeletionDiscoveryFailure",
            "True",
            "DiscoveryFailed",
            format!("Discovery failed for some groups, 1 failing: {e}"),
        ),
        None => cond(
            "NamespaceDeletionDiscoveryFailure",
            "False",
            "ResourcesDiscovered",
            "All resources successfully discovered".to_owned(),
        ),
    });
    conds.push(cond(
        "NamespaceDeletionGroupVersionParsingFailure",
        "False",
        "ParsedGroupVersions",
        "All legacy kube types successfully parsed".to_owned(),
    ));
    conds.push(if outcome.errors.is_empty() {
        cond(
            "NamespaceDeletionContentFailure",
            "False",
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization".to_owned(),
        )
    } else {
        cond(
            "NamespaceDeletionContentFailure",
            "True",
            "ContentDeletionFailed",
            format!(
                "Failed to delete all resource types, {} remaining: {}",
                outcome.errors.len(),
                outcome.errors.join(", ")
            ),
        )
    });
    conds.push(if outcome.remaining.is_empty() {
        cond(
            "NamespaceContentRemaining",
            "False",
            "ContentRemoved",
            "All content successfully removed".to_owned(),
        )
    } else {
        let list: Vec<String> = outcome
            .remaining
            .iter()
            .map(|(r, n)| format!("{r} has {n} resource instances"))
            .collect();
        cond(
            "NamespaceContentRemaining",
            "True",
            "SomeResourcesRemain",
            format!("Some resources are remaining: {}", list.join(", ")),
        )
    });
    conds.push(if outcome.finalizers.is_empty() {
        cond(
            "NamespaceFinalizersRemaining",
            "False",
            "ContentHasNoFinalizers",
            "All content-preserving finalizers finished".to_owned(),
        )
    } else {
        let list: Vec<String> = outcome
            .finalizers
            .iter()
            .map(|(f, n)| format!("{f} in {n} resource instances"))
            .collect();
        cond(
            "NamespaceFinalizersRemaining",
            "True",
            "SomeFinalizersRemain",
            format!(
                "Some content in the namespace has finalizers remaining: {}",
                list.join(", ")
            ),
        )
    });
    update_conditions(&api, name, conds).await?;
    if outcome.discovery_failed.is_some() || !outcome.errors.is_empty() {
        return Err(ReconcileError::Other(format!(
            "namespace {name}: content deletion failed: {}",
            outcome.errors.join("; ")
        )));
    }
    if !outcome.remaining.is_empty() {
        return Ok(Some(Duration::from_secs(2)));
    }
    // Everything is gone: remove our finalizer.
    let Some(mut latest) = api.get_opt(name).await? else {
        return Ok(None);
    };
    if let Some(spec) = latest.spec.as_mut() {
        spec.finalizers = Some(
            spec.finalizers
                .iter()
                .flatten()
                .filter(|f| *f != FINALIZER)
                .cloned()
                .collect(),
        );
    }
    match api
        .replace_subresource("finalize", name, &PostParams::default(), &latest)
        .await
    {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Merges `conds` into the namespace's status conditions (keeping transition times of
/// unchanged statuses) and writes them if anything changed.
async fn update_conditions(
    api: &Api<Namespace>,
    name: &str,
    conds: Vec<NamespaceCondition>,
) -> Result<(), ReconcileError> {
    let Some(mut latest) = api.get_opt(name).await? else {
        return Ok(());
    };
    let status = latest.status.get_or_insert_with(Default::default);
    let mut list = status.conditions.clone().unwrap_or_default();
    let mut changed = false;
    for mut c in conds {
        match list.iter_mut().find(|x| x.type_ == c.type_) {
            Some(old) => {
                if old.status == c.status && old.reason == c.reason && old.message == c.message {
                    continue;
                }
                if old.status == c.status {
                    c.last_transition_time = old.last_transition_time.clone();
                }
                *old = c;
                changed = true;
            }
            None => {
                list.push(c);
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(());
    }
    status.conditions = Some(list);
    match api
        .replace_status(name, &PostParams::default(), &latest)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes every namespaced resource's objects in `ns` and counts what remains.
async fn delete_content(s: &Shared, ns: &str) -> Outcome {
    let mut out = Outcome::default();
    let all = match discover(s).await {
        Ok(r) => r,
        Err(e) => {
            out.discovery_failed = Some(e.to_string());
            return out;
        }
    };
    for r in all
        .iter()
        .filter(|r| r.namespaced && r.supports(&["delete"]))
    {
        let api: Api<DynamicObject> = Api::namespaced_with(s.ctx.client.clone(), ns, &r.ar);
        let gr = format!("{}.{}", r.ar.plural, r.ar.group);
        let deleted = if r.supports(&["deletecollection"]) {
            api.delete_collection(&DeleteParams::default(), &ListParams::default())
                .await
                .map(|_| ())
        } else if r.supports(&["list"]) {
            match api.list(&ListParams::default()).await {
                Ok(list) => {
                    let mut res = Ok(());
                    for o in list.items {
                        if o.metadata.deletion_timestamp.is_some() {
                            continue;
                        }
                        let n = o.metadata.name.clone().unwrap_or_default();
                        if let Err(e) = api.delete(&n, &DeleteParams::default()).await
                            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
                        {
                            res = Err(e);
                        }
                    }
                    res
                }
                Err(e) => Err(e),
            }
        } else {
            continue;
        };
        if let Err(e) = deleted {
            if !matches!(&e, kube::Error::Api(s) if s.code == 404 || s.code == 405) {
                out.errors.push(format!("{gr}: {e}"));
            }
            continue;
        }
        if !r.supports(&["list"]) {
            continue;
        }
        match api.list(&ListParams::default()).await {
            Ok(list) if !list.items.is_empty() => {
                out.remaining.insert(gr, list.items.len());
                for o in &list.items {
                    for f in o.metadata.finalizers.iter().flatten() {
                        *out.finalizers.entry(f.clone()).or_insert(0) += 1;
                    }
                }
            }
            Ok(_) => {}
            Err(e) => out.errors.push(format!("{gr}: {e}")),
        }
    }
    out
}
