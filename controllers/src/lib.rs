//! The controller manager: kube-controller-manager's loops, each an ordinary API client over
//! HTTPS (kube-rs watchers and reflectors), level-triggered and idempotent. It never touches
//! the store.

pub mod client;
mod clusterrole_aggregation;
mod context;
mod credentials;
mod cronjob;
mod csr_approving;
mod csr_signing;
mod daemonset;
mod deployment;
mod disruption;
mod endpoints;
mod endpointslice;
mod garbage_collector;
mod history;
mod hpa;
mod informer;
mod job;
mod leader_election;
mod metrics;
mod namespace;
mod node_lifecycle;
mod pod_gc;
mod pv_binder;
mod pv_protection;
mod pvc_protection;
mod queue;
mod replicaset;
mod resourcequota;
mod root_ca_publisher;
mod serviceaccount;
mod servicelb;
mod statefulset;
mod ttl_after_finished;

pub use context::{Context, ReconcileError, reference};
pub use metrics::Metrics;
pub use node_lifecycle::parse_duration;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Flags of `capstan controllers` (named after kube-controller-manager's); `Default` gives the
/// values `capstan server` runs it with.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Controllers to run, upstream's shape: `*` enables the default set, `foo` enables one,
    /// `-foo` disables one.
    #[arg(long, value_delimiter = ',', default_value = "*")]
    pub controllers: Vec<String>,
    /// Take part in leader election through a `coordination.k8s.io` Lease before running.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: bool,
    /// Serve `/metrics` and `/healthz` over plain HTTP on this address.
    #[arg(long)]
    pub metrics_bind_address: Option<SocketAddr>,
    /// Run each controller with its own service account's token (upstream's flag; capstan's
    /// default is true, as kubeadm sets it).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub use_service_account_credentials: bool,
    /// The kubeconfig the root client came from (set by the binary, not a flag): needed to
    /// build the per-controller service-account clients.
    #[arg(skip)]
    pub kubeconfig: Option<PathBuf>,
    /// How long a node may go without renewing its Lease or posting status before it is
    /// marked Unknown (kube-controller-manager's flag and default).
    #[arg(long, default_value = "40s", value_parser = node_lifecycle::parse_duration)]
    pub node_monitor_grace_period: Duration,
    /// How long a node that never posted status may go, from its creation, before its
    /// conditions are set Unknown ("NodeStatusNeverUpdated"; kube-controller-manager's flag
    /// and default).
    #[arg(long, default_value = "1m", value_parser = node_lifecycle::parse_duration)]
    pub node_startup_grace_period: Duration,
    /// Terminated pods kept before the pod garbage collector deletes the oldest (0: never).
    #[arg(long, default_value_t = 12500)]
    pub terminated_pod_gc_threshold: usize,
    /// CA certificate (PEM) the `csrsigning` controller signs approved CSRs with (upstream's
    /// flag; `capstan server` passes the cluster CA). Without it and the key nothing is signed.
    #[arg(long)]
    pub cluster_signing_cert_file: Option<PathBuf>,
    /// The CA's private key (PEM) for `--cluster-signing-cert-file`.
    #[arg(long)]
    pub cluster_signing_key_file: Option<PathBuf>,
    /// Longest lifetime of a signed certificate (upstream's flag and default, one year);
    /// a CSR's `expirationSeconds` may only shorten it.
    #[arg(long, default_value = "8760h", value_parser = node_lifecycle::parse_duration)]
    pub cluster_signing_duration: Duration,
    /// How often each HorizontalPodAutoscaler is evaluated (upstream's flag and default).
    #[arg(long, default_value = "15s", value_parser = node_lifecycle::parse_duration)]
    pub horizontal_pod_autoscaler_sync_period: Duration,
    /// The down-scale stabilization window of HPAs whose behavior sets none (upstream's flag
    /// and default; tests shorten it).
    #[arg(long, default_value = "5m", value_parser = node_lifecycle::parse_duration)]
    pub horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// Addresses the `service-lb` controller gives LoadBalancer Services (an IPv4 CIDR;
    /// loopback by default, so nothing is exposed beyond this host).
    #[arg(long, default_value = "127.0.100.0/24")]
    pub service_lb_range: String,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controllers: vec!["*".to_owned()],
            leader_elect: true,
            metrics_bind_address: None,
            use_service_account_credentials: true,
            kubeconfig: None,
            node_monitor_grace_period: Duration::from_secs(40),
            node_startup_grace_period: Duration::from_secs(60),
            terminated_pod_gc_threshold: 12500,
            cluster_signing_cert_file: None,
            cluster_signing_key_file: None,
            cluster_signing_duration: Duration::from_secs(8760 * 3600),
            horizontal_pod_autoscaler_sync_period: Duration::from_secs(15),
            horizontal_pod_autoscaler_downscale_stabilization: Duration::from_secs(300),
            service_lb_range: "127.0.100.0/24".to_owned(),
        }
    }
}

/// A running controller loop: runs until the token is cancelled.
type LoopFuture = Pin<Box<dyn Future<Output = anyhow::Result<()>> + Send>>;

/// Starts one controller loop.
type Start = fn(Context, CancellationToken) -> LoopFuture;

/// One entry of the controller table.
struct ControllerSpec {
    /// Name as `--controllers` spells it (upstream's).
    name: &'static str,
    /// Whether `*` enables it.
    default_on: bool,
    /// Starts the loop.
    start: Start,
}

/// Every controller, in upstream's naming. Each module adds its own entry.
const CONTROLLERS: &[ControllerSpec] = &[
    ControllerSpec {
        name: "replicaset",
        default_on: true,
        start: replicaset::start_replicaset,
    },
    ControllerSpec {
        name: "replicationcontroller",
        default_on: true,
        start: replicaset::start_replicationcontroller,
    },
    ControllerSpec {
        name: "deployment",
        default_on: true,
        start: deployment::start,
    },
    ControllerSpec {
        name: "garbage-collector",
        default_on: true,
        start: garbage_collector::start,
    },
    ControllerSpec {
        name: "namespace",
        default_on: true,
        start: namespace::start,
    },
    ControllerSpec {
        name: "serviceaccount",
        default_on: true,
        start: serviceaccount::start,
    },
    ControllerSpec {
        name: "root-ca-cert-publisher",
        default_on: true,
        start: root_ca_publisher::start,
    },
    ControllerSpec {
        name: "endpoint",
        default_on: true,
        start: endpoints::start,
    },
    ControllerSpec {
        name: "endpointslice",
        default_on: true,
        start: endpointslice::start,
    },
    ControllerSpec {
        name: "nodelifecycle",
        default_on: true,
        start: node_lifecycle::start,
    },
    ControllerSpec {
        name: "job",
        default_on: true,
        start: job::start,
    },
    ControllerSpec {
        name: "disruption",
        default_on: true,
        start: disruption::start,
    },
    ControllerSpec {
        name: "daemonset",
        default_on: true,
        start: daemonset::start,
    },
    ControllerSpec {
        name: "cronjob",
        default_on: true,
        start: cronjob::start,
    },
    ControllerSpec {
        name: "ttl-after-finished",
        default_on: true,
        start: ttl_after_finished::start,
    },
    ControllerSpec {
        name: "statefulset",
        default_on: true,
        start: statefulset::start,
    },
    ControllerSpec {
        name: "resourcequota",
        default_on: true,
        start: resourcequota::start,
    },
    ControllerSpec {
        name: "podgc",
        default_on: true,
        start: pod_gc::start,
    },
    ControllerSpec {
        name: "csrsigning",
        default_on: true,
        start: csr_signing::start,
    },
    ControllerSpec {
        name: "csrapproving",
        default_on: true,
        start: csr_approving::start,
    },
    ControllerSpec {
        name: "horizontalpodautoscaling",
        default_on: true,
        start: hpa::start,
    },
    ControllerSpec {
        name: "service-lb",
        default_on: true,
        start: servicelb::start,
    },
    ControllerSpec {
        name: "clusterrole-aggregation",
        default_on: true,
        start: clusterrole_aggregation::start,
    },
    ControllerSpec {
        name: "persistentvolumeclaim-protection",
        default_on: true,
        start: pvc_protection::start,
    },
    ControllerSpec {
        name: "persistentvolume-binder",
        default_on: true,
        start: pv_binder::start,
    },
    ControllerSpec {
        name: "persistentvolume-protection",
        default_on: true,
        start: pv_protection::start,
    },
];

/// Whether `name` is enabled by `--controllers` (later entries win, as upstream's
/// `IsControllerEnabled`: an explicit `name` or `-name` beats `*`).
fn enabled(flags: &[String], name: &str, default_on: bool) -> bool {
    let mut star = false;
    for f in flags {
        let f = f.trim();
        if f == name {
            return true;
        }
        if f.strip_prefix('-') == Some(name) {
            return false;
        }
        if f == "*" {
            star = true;
        }
    }
    star && default_on
}

/// Runs the enabled controllers with `client` until `shutdown` is cancelled: serves metrics
/// if asked, waits for the leader lease (unless `--leader-elect=false`), then starts every
/// enabled loop with its own service account's client; loops stop when the lease is lost.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
    if let Some(addr) = options.metrics_bind_address {
        let (m, t) = (metrics.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(e) = metrics::serve(addr, m, t).await {
                tracing::error!(error = %format!("{e:#}"), "metrics endpoint stopped");
            }
        });
    }
    let config = match (&options.kubeconfig, options.use_service_account_credentials) {
        (Some(path), true) => Some(load_config(path).await?),
        (None, true) => {
            tracing::warn!("no kubeconfig path: controllers use the root client's credentials");
            None
        }
        (_, false) => None,
    };
    let creds = Arc::new(credentials::Credentials::new(client.clone(), config));
    let flags = Arc::new(options.controllers.clone());
    let shared_options = Arc::new(options.clone());
    let elector_metrics = metrics.clone();
    let lead = move |token: CancellationToken| {
        let (creds, flags, metrics) = (creds.clone(), flags.clone(), metrics.clone());
        let opts = shared_options.clone();
        async move { run_controllers(creds, &flags, opts, metrics, token).await }
    };
    if options.leader_elect {
        let elector = leader_election::Elector::new(client, elector_metrics);
        tracing::info!(
            identity = elector.identity(),
            "attempting to acquire leader lease kube-system/kube-controller-manager"
        );
        elector.run(shutdown, lead).await;
    } else {
        lead(shutdown).await;
    }
    Ok(())
}

/// Loads a kube-rs configuration from a kubeconfig file (its current context).
async fn load_config(path: &std::path::Path) -> anyhow::Result<kube::Config> {
    use anyhow::Context as _;
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .with_context(|| format!("reading {}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading {}", path.display()))
}

/// Starts every enabled controller and keeps it running (a loop that fails is restarted
/// after a pause) until `token` is cancelled.
async fn run_controllers(
    creds: Arc<credentials::Credentials>,
    flags: &[String],
    options: Arc<Options>,
    metrics: Arc<Metrics>,
    token: CancellationToken,
) {
    let mut tasks = tokio::task::JoinSet::new();
    // One watch per kind for every loop, for this term of leadership.
    let informers = informer::Informers::new(creds.root(), token.clone());
    for spec in CONTROLLERS {
        if !enabled(flags, spec.name, spec.default_on) {
            continue;
        }
        let (creds, metrics, token) = (creds.clone(), metrics.clone(), token.clone());
        let (options, informers) = (options.clone(), informers.clone());
        let name = spec.name;
        let start = spec.start;
        tasks.spawn(async move {
            // Events are reported as the service account, except where upstream's
            // recorder names another component.
            let component = match name {
                "persistentvolume-binder" => "persistentvolume-controller".to_owned(),
                _ => credentials::service_account(name),
            };
            loop {
                let client = tokio::select! {
                    () = token.cancelled() => return,
                    c = creds.client_for(name, &token) => c,
                };
                let outcome = match client {
                    Ok(client) => {
                        let ctx = Context::new(client, name, &component, metrics.clone())
                            .with_root(creds.root(), creds.root_ca_pem())
                            .with_options(options.clone())
                            .with_informers(informers.clone());
                        tracing::info!(controller = name, "starting controller");
                        // The loop's own token: its informer handlers end with it.
                        let run = token.child_token();
                        let outcome = start(ctx, run.clone()).await;
                        run.cancel();
                        outcome
                    }
                    Err(e) => Err(e),
                };
                if token.is_cancelled() {
                    return;
                }
                match outcome {
                    Ok(()) => tracing::warn!(controller = name, "controller returned; restarting"),
                    Err(e) => tracing::error!(controller = name, error = %format!("{e:#}"), "controller failed; restarting"),
                }
                tokio::select! {
                    () = token.cancelled() => return,
                    () = tokio::time::sleep(Duration::from_secs(5)) => {}
                }
            }
        });
    }
    token.cancelled().await;
    while tasks.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::enabled;

    fn flags(s: &[&str]) -> Vec<String> {
        s.iter().map(|f| (*f).to_owned()).collect()
    }

    #[test]
    fn star_enables_defaults_and_explicit_names_win() {
        assert!(enabled(&flags(&["*"]), "deployment", true));
        assert!(!enabled(&flags(&["*"]), "bootstrapsigner", false));
        assert!(enabled(
            &flags(&["*", "bootstrapsigner"]),
            "bootstrapsigner",
            false
        ));
        assert!(!enabled(&flags(&["*", "-deployment"]), "deployment", true));
        assert!(!enabled(&flags(&[]), "deployment", true));
        assert!(enabled(&flags(&["deployment"]), "deployment", true));
    }
}
