//! A member's Prometheus metrics under etcd's names, and etcd's `/health`, served over plain
//! HTTP on `--listen-metrics-urls` (etcd's flag) so the dashboards and alerts written for etcd
//! (`etcd_server_has_leader == 0`, leader changes, WAL fsync latency, …) work unchanged.
//!
//! Process-wide counters (leader changes seen, proposals that failed, WAL fsync durations)
//! are statics fed from where the events happen (the Raft driver and the WAL); the other
//! values are read from the member's status and state machine at scrape time.

use std::sync::LazyLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;

use crate::node::Node;

/// `etcd_disk_wal_fsync_duration_seconds`: latency of the WAL's fsyncs (etcd's buckets:
/// 1 ms doubling to 8 s).
static WAL_FSYNC: LazyLock<Histogram> =
    LazyLock::new(|| Histogram::new(exponential_buckets(0.001, 2.0, 14)));
/// `etcd_server_leader_changes_seen_total`.
static LEADER_CHANGES: LazyLock<Counter> = LazyLock::new(Counter::default);
/// `etcd_server_proposals_failed_total`.
static PROPOSALS_FAILED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Records one WAL fsync that took `d`.
pub fn observe_wal_fsync(d: Duration) {
    WAL_FSYNC.observe(d.as_secs_f64());
}

/// The WAL fsync latency histogram (shared, not copied), for the API server's `/metrics`
/// when the store is embedded.
pub fn wal_fsync_histogram() -> Histogram {
    WAL_FSYNC.clone()
}

/// Records that this member saw a new leader.
pub fn leader_changed() {
    LEADER_CHANGES.inc();
}

/// Records `n` proposals that failed (timed out, lost with a leader, dropped).
pub fn proposals_failed(n: u64) {
    PROPOSALS_FAILED.inc_by(n);
}

/// Label of `etcd_server_id`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerId {
    server_id: String,
}

/// The metrics text (OpenMetrics/Prometheus exposition) of `node` now.
pub fn render(node: &Node) -> String {
    let st = node.status();
    let ids = node.ids();
    let (revision, compacted, keys) = {
        let mvcc = node.mvcc();
        (
            mvcc.current_revision(),
            mvcc.compacted_revision(),
            mvcc.key_count(),
        )
    };
    let mut r = Registry::default();
    let gauge = |v: i64| {
        let g: Gauge = Gauge::default();
        g.set(v);
        g
    };
    let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    r.register(
        "etcd_server_has_leader",
        "Whether or not a leader exists. 1 is existence, 0 is not.",
        gauge(i64::from(st.leader != 0)),
    );
    r.register(
        "etcd_server_is_leader",
        "Whether or not this member is a leader. 1 if is, 0 otherwise.",
        gauge(i64::from(st.leader != 0 && st.leader == ids.member_id)),
    );
    r.register(
        "etcd_server_leader_changes_seen",
        "The number of leader changes seen.",
        LEADER_CHANGES.clone(),
    );
    r.register(
        "etcd_server_proposals_committed_total",
        "The total number of consensus proposals committed.",
        gauge(to_i64(st.commit)),
    );
    r.register(
        "etcd_server_proposals_applied_total",
        "The total number of consensus proposals applied.",
        gauge(to_i64(st.applied)),
    );
    r.register(
        "etcd_server_proposals_failed",
        "The total number of failed proposals seen.",
        PROPOSALS_FAILED.clone(),
    );
    let id: Family<ServerId, Gauge> = Family::default();
    id.get_or_create(&ServerId {
        server_id: format!("{:x}", ids.member_id),
    })
    .set(1);
    r.register(
        "etcd_server_id",
        "Server or member ID in hexadecimal format. 1 for 'server_id' label with current ID.",
        id,
    );
    r.register(
        "etcd_disk_wal_fsync_duration_seconds",
        "The latency distributions of fsync called by WAL.",
        WAL_FSYNC.clone(),
    );
    r.register(
        "etcd_mvcc_db_total_size_in_bytes",
        "Total size of the underlying database physically allocated in bytes.",
        gauge(to_i64(st.disk_bytes)),
    );
    r.register(
        "etcd_debugging_mvcc_keys_total",
        "Total number of keys.",
        gauge(i64::try_from(keys).unwrap_or(i64::MAX)),
    );
    r.register(
        "etcd_debugging_mvcc_current_revision",
        "The current revision of store.",
        gauge(revision),
    );
    r.register(
        "etcd_debugging_mvcc_compact_revision",
        "The revision of the last compaction in store.",
        gauge(compacted),
    );
    let mut out = String::new();
    if prometheus_client::encoding::text::encode(&mut out, &r).is_err() {
        out.clear();
    }
    out
}

/// etcd's `/health` body and status: healthy when the member knows a leader.
pub fn health(node: &Node) -> (u16, String) {
    if node.status().leader != 0 {
        (200, r#"{"health":"true","reason":""}"#.to_owned())
    } else {
        (
            503,
            r#"{"health":"false","reason":"RAFT NO LEADER"}"#.to_owned(),
        )
    }
}

/// Serves `GET /metrics` and `GET /health` for `node` on `listener` (plain HTTP, as etcd's
/// `--listen-metrics-urls`) until the task is aborted.
pub async fn serve(listener: TcpListener, node: Node) {
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    let metrics = {
        let node = node.clone();
        move || {
            let body = render(&node);
            std::future::ready(
                (
                    [(
                        header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    )],
                    body,
                )
                    .into_response(),
            )
        }
    };
    let health = move || {
        let (code, body) = health(&node);
        let code = StatusCode::from_u16(code).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
        std::future::ready(
            (code, [(header::CONTENT_TYPE, "application/json")], body).into_response(),
        )
    };
    let app = axum::Router::new()
        .route("/metrics", axum::routing::get(metrics))
        .route("/health", axum::routing::get(health));
    if let Err(err) = axum::serve(listener, app).await {
        tracing::warn!(%err, "metrics server stopped");
    }
}
