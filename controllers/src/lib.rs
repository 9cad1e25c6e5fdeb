//! The controller manager: kube-controller-manager's loops, each an ordinary API client over
//! HTTPS (kube-rs watchers and reflectors), level-triggered and idempotent. It never touches
//! the store.

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
}

impl Default for Options {
    fn default() -> Self {
        Options {
            controllers: vec!["*".to_owned()],
            leader_elect: true,
        }
    }
}

/// Runs the enabled controllers with `client` until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let _ = (client, options);
    shutdown.cancelled().await;
    Ok(())
}
