//! The ServiceAccount controller (`serviceaccount`): every active namespace gets a `default`
//! ServiceAccount, recreated when deleted (upstream `pkg/controller/serviceaccount`).

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::reflector::{ObjectRef, Store};
use tokio_util::sync::CancellationToken;

use crate::context::ReconcileError;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture};

/// Names of the ServiceAccounts ensured in every namespace (upstream's default option).
const SERVICE_ACCOUNTS: &[&str] = &["default"];
/// Upstream's `--concurrent-serviceaccount-syncs` default.
const WORKERS: usize = 5;

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// Whether `ns` is being deleted (no new objects go into it then).
pub(crate) fn terminating(ns: &Namespace) -> bool {
    ns.metadata.deletion_timestamp.is_some()
        || ns.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Terminating")
}

/// Whether a create failed only because the object exists or the namespace is going away
/// (upstream ignores both).
pub(crate) fn benign_create_error(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => {
            s.code == 409
                || s.code == 404
                || (s.code == 403 && s.message.contains("being terminated"))
        }
        _ => false,
    }
}

/// Ensures the ServiceAccounts of namespace `name`.
async fn sync(
    ctx: Context,
    namespaces: Store<Namespace>,
    accounts: Store<ServiceAccount>,
    name: String,
) -> SyncResult {
    let Some(ns) = namespaces.get(&ObjectRef::new(&name)) else {
        return Ok(None);
    };
    if terminating(&ns) {
        return Ok(None);
    }
    let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &name);
    for sa in SERVICE_ACCOUNTS {
        if accounts.get(&ObjectRef::new(sa).within(&name)).is_some() {
            continue;
        }
        let obj = ServiceAccount {
            metadata: ObjectMeta {
                name: Some((*sa).to_owned()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        match api.create(&PostParams::default(), &obj).await {
            Ok(_) => tracing::debug!(namespace = %name, serviceaccount = sa, "created"),
            Err(e) if benign_create_error(&e) => {}
            Err(e) => return Err(ReconcileError::Kube(e)),
        }
    }
    Ok(None)
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let namespaces = ctx
        .informers
        .watch::<Namespace>(
            Box::new(move |_old, new: Option<&Namespace>| {
                if let Some(n) = new.and_then(|n| n.metadata.name.clone()) {
                    q.add(n);
                }
            }),
            &shutdown,
        )
        .await;
    let q = queue.clone();
    let accounts = ctx
        .informers
        .watch::<ServiceAccount>(
            Box::new(
                move |old: Option<&ServiceAccount>, new: Option<&ServiceAccount>| {
                    // Only deletions matter: a deleted default account is recreated.
                    if let (Some(sa), None) = (old, new) {
                        let wanted = sa
                            .metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| SERVICE_ACCOUNTS.contains(&n));
                        if let (true, Some(ns)) = (wanted, sa.metadata.namespace.clone()) {
                            q.add(ns);
                        }
                    }
                },
            ),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = async { namespaces.wait_until_ready().await?; accounts.wait_until_ready().await } => r?,
    }
    for ns in namespaces.state() {
        if let Some(n) = ns.metadata.name.clone() {
            queue.add(n);
        }
    }
    let c = ctx.clone();
    run_workers(&ctx, &queue, WORKERS, &shutdown, move |key| {
        sync(c.clone(), namespaces.clone(), accounts.clone(), key)
    })
    .await;
    Ok(())
}
