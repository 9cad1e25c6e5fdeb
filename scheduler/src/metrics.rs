//! Prometheus metrics with kube-scheduler's names, and the optional plain-HTTP endpoint
//! serving `/metrics` and `/healthz`.

use std::net::SocketAddr;
use std::sync::Arc;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

type Labels = Vec<(String, String)>;

/// The scheduler's metrics.
pub struct Metrics {
    registry: Registry,
    /// `scheduler_schedule_attempts_total{result, profile}`.
    pub attempts: Family<Labels, Counter>,
    /// `scheduler_scheduling_attempt_duration_seconds{result, profile}`.
    pub attempt_duration: Family<Labels, Histogram>,
    /// `scheduler_pod_scheduling_duration_seconds{attempts}` (first enqueue to bound).
    pub pod_duration: Family<Labels, Histogram>,
    /// `scheduler_pending_pods{queue}`.
    pub pending: Family<Labels, Gauge>,
    /// `scheduler_preemption_attempts_total`.
    pub preemption_attempts: Counter,
    /// `scheduler_preemption_victims`.
    pub preemption_victims: Histogram,
}

fn attempt_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

fn pod_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

impl Metrics {
    /// Registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::default();
        let attempts = Family::<Labels, Counter>::default();
        let attempt_duration = Family::<Labels, Histogram>::new_with_constructor(
            attempt_histogram as fn() -> Histogram,
        );
        let pod_duration =
            Family::<Labels, Histogram>::new_with_constructor(pod_histogram as fn() -> Histogram);
        let pending = Family::<Labels, Gauge>::default();
        let preemption_attempts = Counter::default();
        let preemption_victims = Histogram::new(exponential_buckets(1.0, 2.0, 7));
        registry.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result.",
            attempts.clone(),
        );
        registry.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            attempt_duration.clone(),
        );
        registry.register(
            "scheduler_pod_scheduling_duration_seconds",
            "E2e latency for a pod being scheduled which may include multiple scheduling attempts.",
            pod_duration.clone(),
        );
        registry.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type.",
            pending.clone(),
        );
        registry.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            preemption_attempts.clone(),
        );
        registry.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            preemption_victims.clone(),
        );
        Metrics {
            registry,
            attempts,
            attempt_duration,
            pod_duration,
            pending,
            preemption_attempts,
            preemption_victims,
        }
    }

    /// Counts one attempt with its result and duration.
    pub fn attempt(&self, result: &str, profile: &str, seconds: f64) {
        let labels = vec![
            ("result".to_owned(), result.to_owned()),
            ("profile".to_owned(), profile.to_owned()),
        ];
        self.attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// Sets the pending gauges.
    pub fn set_pending(&self, p: crate::queue::Pending) {
        for (q, v) in [
            ("active", p.active),
            ("backoff", p.backoff),
            ("unschedulable", p.unschedulable),
            ("gated", 0),
        ] {
            self.pending
                .get_or_create(&vec![("queue".to_owned(), q.to_owned())])
                .set(v);
        }
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// Serves `/metrics` and `/healthz` on `addr` until `shutdown`.
pub async fn serve(
    addr: SocketAddr,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    use axum::routing::get;
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || {
                let m = metrics.clone();
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
    tracing::info!(%addr, "scheduler metrics listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_have_upstream_names() {
        let m = Metrics::new();
        m.attempt("scheduled", "default-scheduler", 0.01);
        m.set_pending(crate::queue::Pending::default());
        let text = m.render();
        assert!(text.contains(
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"} 1"
        ), "{text}");
        assert!(
            text.contains("scheduler_pending_pods{queue=\"active\"} 0"),
            "{text}"
        );
    }
}
