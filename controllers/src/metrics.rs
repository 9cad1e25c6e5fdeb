//! `/metrics` (Prometheus text) and `/healthz` on `--metrics-bind-address`, plain HTTP as
//! kube-controller-manager's insecure debugging endpoint.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

/// Labels of per-controller counters.
type Labels = Vec<(String, String)>;

/// The controller manager's metrics.
pub struct Metrics {
    registry: Registry,
    /// `leader_election_master_status{name}`: 1 while this process leads (upstream's gauge).
    leader: Family<Labels, Gauge<i64, AtomicI64>>,
    /// `capstan_controller_reconcile_total{controller,result}`.
    reconciles: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let leader = Family::<Labels, Gauge<i64, AtomicI64>>::default();
        let reconciles = Family::<Labels, Counter>::default();
        registry.register(
            "leader_election_master_status",
            "Whether this process is the leader (1) or not (0)",
            leader.clone(),
        );
        registry.register(
            "capstan_controller_reconcile",
            "Reconciles by controller and result",
            reconciles.clone(),
        );
        Metrics {
            registry,
            leader,
            reconciles,
        }
    }
}

impl Metrics {
    /// Records whether this process leads the lease `name`.
    pub fn set_leader(&self, name: &str, leading: bool) {
        self.leader
            .get_or_create(&vec![("name".to_owned(), name.to_owned())])
            .set(i64::from(leading));
    }

    /// Counts one reconcile of `controller` with `result` (`success` or `error`).
    pub fn reconciled(&self, controller: &str, ok: bool) {
        let result = if ok { "success" } else { "error" };
        self.reconciles
            .get_or_create(&vec![
                ("controller".to_owned(), controller.to_owned()),
                ("result".to_owned(), result.to_owned()),
            ])
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Serves `/metrics` and `/healthz` on `addr` until `shutdown`.
pub(crate) async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use axum::routing::get;
    let m = metrics.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = m.clone();
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        m.render(),
                    )
                }
            }),
        )
        .route("/healthz", get(|| async { "ok" }));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving controller manager /metrics and /healthz");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}
