//! Simulated nodes, as KWOK does: registers Nodes, renews their Leases, reports their status
//! and moves the pods bound to them through the kubelet's lifecycle, all through the
//! Kubernetes API. No containers run; `kubectl logs`/`exec` say so (the Nodes carry the
//! `capstan.io/simulated` annotation).
//!
//! Built to run thousands of nodes in one process: one HTTP client shared by all nodes
//! (each node's writes impersonate `system:node:<name>`, see `api`), one watch of all
//! bound pods dispatched locally to a task per pod (`fleet`, `pod`), one cheap timer task
//! per node for its Lease and status (`node`).

mod api;
mod cidr;
mod fleet;
mod kubelet;
mod node;
mod pod;
mod process;
mod program;
pub mod provisioner;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use node::SIMULATED_ANNOTATION;
pub use process::KubeletPki;

/// How the nodes run the pods bound to them.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Runtime {
    /// No process runs: containers go through the kubelet's lifecycle on timers read from
    /// their command lines (the default; safe for thousands of nodes).
    #[default]
    Simulated,
    /// Each container's command runs as a process on this host, in its own mount and PID
    /// namespaces, as an unprivileged user; each node serves the kubelet API (logs, exec,
    /// attach). Images are not pulled: the host's filesystem is the container's root.
    Process,
}

/// Flags of `capstan nodes`; `Default` gives the values `capstan server` runs them with
/// (its `--nodes` flag sets `count`).
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Number of simulated nodes to run.
    #[arg(long, default_value_t = 3)]
    pub count: usize,
    /// Node names are this prefix followed by 0..count-1.
    #[arg(long, default_value = "capstan-node-")]
    pub name_prefix: String,
    /// CPU capacity of each node (a quantity).
    #[arg(long, default_value = "8")]
    pub cpu: String,
    /// Memory capacity of each node (a quantity).
    #[arg(long, default_value = "32Gi")]
    pub memory: String,
    /// Pod capacity of each node.
    #[arg(long, default_value_t = 110)]
    pub pods: u32,
    /// Ephemeral-storage capacity of each node (a quantity).
    #[arg(long, default_value = "100Gi")]
    pub ephemeral_storage: String,
    /// Zones assigned round-robin (`topology.kubernetes.io/zone`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "zone-a,zone-b,zone-c")]
    pub zones: Vec<String>,
    /// Longest a deleted pod's grace period is honoured before it is removed (e.g. `1s`).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub max_grace: Duration,
    /// Range the nodes' pod CIDRs are cut from (as kube-controller-manager's flag).
    #[arg(long, default_value = "10.128.0.0/9")]
    pub cluster_cidr: String,
    /// Prefix length of each node's pod CIDR (as kube-controller-manager's flag).
    #[arg(long, default_value_t = 24)]
    pub node_cidr_mask_size: u8,
    /// Range the nodes' InternalIPs come from.
    #[arg(long, default_value = "172.16.0.0/12")]
    pub node_ip_range: String,
    /// The Lease's `leaseDurationSeconds`; it is renewed every quarter of it (kubelet).
    #[arg(long, default_value_t = 40)]
    pub node_lease_duration_seconds: u32,
    /// How often an unchanged Node status is re-posted (kubelet's
    /// `nodeStatusReportFrequency`, e.g. `5m`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub node_status_report_frequency: Duration,
    /// Send each node's requests as `system:node:<name>` (group `system:nodes`) through
    /// impersonation; `--impersonate=false` sends them as the fleet's own user.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub impersonate: bool,
    /// Record the kubelet's pod events (Pulled, Created, Started, Killing);
    /// `--pod-events=false` saves those writes in benchmarks.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub pod_events: bool,
    /// `simulated` (default) or `process`: run containers' commands as host processes.
    #[arg(long, value_enum, default_value_t = Runtime::Simulated)]
    pub runtime: Runtime,
    /// Process runtime: where pods' volumes, logs and container roots live.
    #[arg(long, default_value = "capstan-nodes")]
    pub runtime_dir: PathBuf,
    /// Process runtime: the directory holding the cluster CA (`ca.crt`, `ca.key`), which
    /// issues each node's kubelet serving certificate and authenticates the API server.
    #[arg(long)]
    pub pki_dir: Option<PathBuf>,
    /// Process runtime: the API server URL pods are given (`KUBERNETES_SERVICE_HOST`,
    /// `KUBERNETES_SERVICE_PORT`).
    #[arg(long)]
    pub api_server_url: Option<String>,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    program::parse_duration(s).ok_or_else(|| format!("invalid duration {s:?} (e.g. 1s, 500ms, 5m)"))
}

impl Default for Options {
    fn default() -> Self {
        Options {
            count: 3,
            name_prefix: "capstan-node-".into(),
            cpu: "8".into(),
            memory: "32Gi".into(),
            pods: 110,
            ephemeral_storage: "100Gi".into(),
            zones: vec!["zone-a".into(), "zone-b".into(), "zone-c".into()],
            max_grace: Duration::from_secs(1),
            cluster_cidr: "10.128.0.0/9".into(),
            node_cidr_mask_size: 24,
            node_ip_range: "172.16.0.0/12".into(),
            node_lease_duration_seconds: 40,
            node_status_report_frequency: Duration::from_secs(300),
            impersonate: true,
            pod_events: true,
            runtime: Runtime::Simulated,
            runtime_dir: PathBuf::from("capstan-nodes"),
            pki_dir: None,
            api_server_url: None,
        }
    }
}

/// Runs `options.count` simulated nodes with `client` until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let api = api::FleetApi::new(client, options.impersonate);
    let options = Arc::new(options);
    let nodes = fleet::plan(&api, &options).await?;
    tracing::info!(
        count = nodes.len(),
        prefix = %options.name_prefix,
        impersonate = options.impersonate,
        runtime = ?options.runtime,
        "starting nodes"
    );
    if options.runtime == Runtime::Process {
        process::start_nodes(&options, &nodes, &shutdown).await?;
    }
    let by_name: Arc<HashMap<String, Arc<node::SimNode>>> =
        Arc::new(nodes.iter().map(|n| (n.name.clone(), n.clone())).collect());
    let node_watch = tokio::spawn(fleet::watch_nodes(
        api.clone(),
        by_name.clone(),
        shutdown.clone(),
    ));
    let pods = tokio::spawn(fleet::watch_pods(
        api.clone(),
        by_name,
        options.clone(),
        shutdown.clone(),
    ));
    let mut heartbeats = tokio::task::JoinSet::new();
    fleet::register_all(&api, &options, &nodes, &shutdown, &mut heartbeats).await;
    shutdown.cancelled().await;
    heartbeats.shutdown().await;
    let _ = pods.await;
    let _ = node_watch.await;
    Ok(())
}
