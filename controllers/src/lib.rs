//! The controller manager: kube-controller-manager's loops, each an ordinary API client over
//! HTTPS (kube-rs watchers and reflectors), level-triggered and idempotent. It never touches
//! the store.

mod context;

pub use context::Context;

use std::future::Future;
use std::pin::Pin;

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
const CONTROLLERS: &[ControllerSpec] = &[];

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

/// Runs the enabled controllers with `client` until `shutdown` is cancelled.
pub async fn run(
    client: kube::Client,
    options: Options,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for spec in CONTROLLERS {
        if !enabled(&options.controllers, spec.name, spec.default_on) {
            continue;
        }
        let ctx = Context {
            client: client.clone(),
            name: spec.name,
        };
        let name = spec.name;
        let fut = (spec.start)(ctx, shutdown.clone());
        tasks.spawn(async move {
            if let Err(e) = fut.await {
                tracing::error!(controller = name, error = %format!("{e:#}"), "controller stopped");
            }
        });
    }
    shutdown.cancelled().await;
    while tasks.join_next().await.is_some() {}
    Ok(())
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
