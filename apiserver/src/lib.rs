//! Capstan's Kubernetes API server: the Kubernetes REST API over the store.
//!
//! Request flow: TLS (`server`) → request info → authentication → authorization
//! (`pipeline`, tower layers) → the generic resource handlers (`handlers`: decode, server-owned
//! metadata, validation) → `storage` → the store. Discovery documents come from the
//! `registry`, which lists every built-in resource served.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]

pub mod admission;
pub mod aggregator;
pub mod apply;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod codec;
pub mod crd;
pub mod dashboard;
pub mod defaults;
pub mod discovery;
pub mod encryption;
pub mod error;
pub mod flow_control;
pub mod fuzz;
pub mod handlers;
pub mod metrics;
pub mod openapi;
pub mod patch;
pub mod pipeline;
pub mod quantity;
pub mod registry;
pub mod request_info;
pub mod selector;
pub mod server;
pub mod service_endpoint;
pub mod storage;
pub mod tables;
pub mod validation;
pub mod watch_cache;

use std::sync::Arc;
use std::time::Duration;

pub use server::ApiServerConfig;

/// How long start-up keeps retrying the bootstrap of default objects.
const BOOTSTRAP_PATIENCE: Duration = Duration::from_secs(120);

/// Serves the API over `node` (the embedded store member, or a remote cluster's mirror)
/// until `shutdown` completes.
///
/// Before serving, the namespaces every cluster starts with are created (waiting for the
/// store to elect itself leader if it has just started).
pub async fn run(
    cfg: ApiServerConfig,
    node: impl Into<store::backend::Backend>,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<(), server::Error> {
    let encryption = match &cfg.encryption_provider_config {
        Some(path) => Some(Arc::new(
            encryption::Encryption::load(path).map_err(server::Error::Encryption)?,
        )),
        None => None,
    };
    let storage = storage::Storage::with_encryption(node, encryption);
    let ctx = Arc::new(handlers::Ctx {
        registry: registry::Registry::builtin(),
        storage: storage.clone(),
        address: format!("{}:{}", cfg.bind_address, cfg.secure_port),
        service_range: handlers::ServiceRange::default(),
        watch_cache: watch_cache::WatchCache::new(storage.clone()),
        admission: admission::Chain::new(&cfg.admission, storage.clone())
            .map_err(server::Error::Admission)?,
    });
    // A member of a store cluster may wait for its peers to elect a leader, and several API
    // servers of one cluster bootstrap at once (conflicts are retried): keep trying for a
    // while, then serve anyway (requests then get the store's errors, as upstream does).
    let deadline = std::time::Instant::now() + BOOTSTRAP_PATIENCE;
    for attempt in 0.. {
        match handlers::bootstrap(&ctx).await {
            Ok(()) => break,
            Err(err) if std::time::Instant::now() < deadline => {
                tracing::warn!(%err, attempt, "bootstrapping default objects; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(err) => {
                tracing::error!(%err, "bootstrapping default objects failed; serving anyway");
                break;
            }
        }
    }
    let compactor = tokio::spawn(compact_periodically(
        ctx.storage.clone(),
        cfg.compaction_interval,
    ));
    let maintainer = tokio::spawn(maintain_system_objects(Arc::clone(&ctx)));
    let crds = tokio::spawn(crd::controller::run(Arc::clone(&ctx)));
    let repair = tokio::spawn(handlers::service_repair::run(
        Arc::clone(&ctx),
        cfg.service_repair_interval,
    ));
    let result = server::serve(&cfg, ctx, shutdown).await;
    compactor.abort();
    maintainer.abort();
    crds.abort();
    repair.abort();
    result
}

/// How often the objects the control plane itself needs are checked and recreated.
const SYSTEM_OBJECTS_INTERVAL: Duration = Duration::from_secs(10);

/// Keeps the objects the control plane needs in place while it runs, as kube-apiserver's
/// own controllers do (`SystemNamespaces`: kube-system, kube-public, kube-node-lease every
/// minute; the `kubernetes` Service controller: the `default` namespace, the Service, its
/// Endpoints and EndpointSlice every 10 s). Capstan also re-runs the bootstrap RBAC policy
/// and system PriorityClasses, which upstream only reconciles at start-up: an admin's
/// `kubectl delete clusterrolebinding --all` would otherwise leave the controller manager,
/// the scheduler and the nodes forbidden until the next restart.
async fn maintain_system_objects(ctx: Arc<handlers::Ctx>) {
    let mut tick = tokio::time::interval(SYSTEM_OBJECTS_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        if let Err(err) = handlers::bootstrap(&ctx).await {
            tracing::warn!(%err, "reconciling the control plane's own objects");
        }
    }
}

/// Compacts the store every `interval` to the revision seen one interval earlier, so at
/// least one interval of history stays available to watchers (kube-apiserver's compactor,
/// `--etcd-compaction-interval`, default 5 minutes).
async fn compact_periodically(storage: storage::Storage, interval: Duration) {
    if interval.is_zero() {
        return;
    }
    let mut tick = tokio::time::interval(interval);
    tick.tick().await;
    let mut previous = storage.current_revision();
    loop {
        tick.tick().await;
        let current = storage.current_revision();
        if previous > 1 {
            match storage.compact(previous).await {
                Ok(()) => tracing::info!(revision = previous, "compacted store history"),
                Err(err) => tracing::warn!(%err, revision = previous, "compaction failed"),
            }
        }
        previous = current;
    }
}
