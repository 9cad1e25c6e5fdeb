//! The scheduler: watches pending pods and nodes through the Kubernetes API (kube-rs
//! watchers and reflectors), filters and scores nodes as kube-scheduler's default plugins do,
//! and binds each pod through the `pods/binding` subresource. It never touches the store.
//!
//! Layout: [`queue`] (active/backoff/unschedulable), [`cache`] (nodes, assigned and assumed
//! pods), [`framework`] (filter and score plugins, the algorithm), [`preemption`], [`bind`]
//! (API writes and events), [`schedule`] (the loop and watch handlers),
//! [`leader_election`] and [`metrics`].

pub mod bind;
pub mod cache;
pub mod framework;
pub mod leader_election;
pub mod metrics;
pub mod preemption;
pub mod queue;
pub mod schedule;
pub mod volumes;

use std::net::SocketAddr;
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::Api;
use tokio_util::sync::CancellationToken;

/// Flags of `capstan scheduler` (named after kube-scheduler's); `Default` gives the values
/// `capstan server` runs it with.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Take part in leader election through a `coordination.k8s.io` Lease before scheduling.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: bool,
    /// Serve `/metrics` and `/healthz` over plain HTTP on this address (off by default).
    #[arg(long)]
    pub metrics_bind_address: Option<SocketAddr>,
    /// Scheduler profiles: the `spec.schedulerName` values this scheduler serves.
    #[arg(
        long = "profiles",
        value_delimiter = ',',
        default_value = "default-scheduler"
    )]
    pub profiles: Vec<String>,
    /// Percentage of nodes to find feasible before scoring (0 = adaptive, as upstream).
    #[arg(long, default_value_t = 0)]
    pub percentage_of_nodes_to_score: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            leader_elect: true,
            metrics_bind_address: None,
            profiles: vec!["default-scheduler".to_owned()],
            percentage_of_nodes_to_score: 0,
        }
    }
}

fn identity() -> String {
    let host = std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "capstan".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{host}_{:08x}{:08x}", std::process::id(), nanos)
}

/// Runs the scheduler with `client` until `shutdown` is cancelled (or leadership is lost,
/// which returns an error as kube-scheduler exits).
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = Arc::new(metrics::Metrics::new());
    let work = shutdown.child_token();
    if let Some(addr) = options.metrics_bind_address {
        let (m, t) = (metrics.clone(), work.clone());
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(addr, m, t).await {
                tracing::error!(error = %e, "scheduler metrics server failed");
            }
        });
    }
    let identity = identity();
    let profile = options
        .profiles
        .first()
        .cloned()
        .unwrap_or_else(|| "default-scheduler".into());
    // As kube-scheduler, the informers start (and fill the cache) before leader election,
    // so a new leader schedules at once; only the scheduling loop waits for the lease.
    let writer = bind::Writer::new(client.clone(), &profile, &identity);
    let pdbs = schedule::reflect(client.clone(), work.clone());
    let owners = schedule::Owners::start(&client, &work);
    let volumes_changed = Arc::new(tokio::sync::Notify::new());
    let volumes = volumes::Volumes {
        claims: schedule::reflect_notify(
            client.clone(),
            work.clone(),
            Some(volumes_changed.clone()),
        ),
        volumes: schedule::reflect_notify(
            client.clone(),
            work.clone(),
            Some(volumes_changed.clone()),
        ),
        classes: schedule::reflect_notify(
            client.clone(),
            work.clone(),
            Some(volumes_changed.clone()),
        ),
    };
    let sched = schedule::Scheduler::new(
        writer,
        options.profiles.clone(),
        options.percentage_of_nodes_to_score,
        metrics,
        pdbs,
        owners,
        volumes,
    );
    {
        let (sched, work) = (sched.clone(), work.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = work.cancelled() => return,
                    () = volumes_changed.notified() => sched.volumes_changed(),
                }
            }
        });
    }
    tokio::spawn(
        sched
            .clone()
            .watch_nodes(Api::<Node>::all(client.clone()), work.clone()),
    );
    tokio::spawn(
        sched
            .clone()
            .watch_pods(Api::all(client.clone()), work.clone()),
    );
    let mut lease_task = None;
    if options.leader_elect {
        let leases: Api<Lease> = Api::namespaced(client.clone(), leader_election::LEASE_NAMESPACE);
        if !leader_election::acquire(&leases, &identity, &shutdown).await {
            work.cancel();
            return Ok(());
        }
        lease_task = Some(tokio::spawn(leader_election::keep(
            leases,
            identity.clone(),
            work.clone(),
        )));
    }
    tracing::info!(profiles = ?options.profiles, "scheduler started");
    let result = match lease_task {
        Some(mut lease) => {
            tokio::select! {
                _ = sched.run_loop(work.clone()) => Ok(()),
                r = &mut lease => match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(e) => Err(anyhow::anyhow!("lease task failed: {e}")),
                },
            }
        }
        None => {
            sched.run_loop(work.clone()).await;
            Ok(())
        }
    };
    work.cancel();
    result
}
