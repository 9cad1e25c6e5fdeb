//! Prometheus metrics with upstream's names, as a tier-1 layer. The concurrency limit that
//! feeds the in-flight and in-queue gauges is `flow_control`'s.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::request_info::RequestInfo;

/// Labels of `apiserver_request_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
    code: String,
}

/// Labels of `apiserver_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DurationLabels {
    verb: String,
    group: String,
    version: String,
    resource: String,
    subresource: String,
    scope: String,
    component: String,
}

/// Labels of `apiserver_current_inflight_requests` and `apiserver_current_inqueue_requests`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    /// `mutating` or `readOnly`.
    pub request_kind: String,
}

/// Labels of `apiserver_validating_admission_policy_check_total` (upstream's names).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PolicyCheckLabels {
    /// The ValidatingAdmissionPolicy.
    pub policy: String,
    /// The ValidatingAdmissionPolicyBinding.
    pub policy_binding: String,
    /// `no_error`, `compile_error` or `invalid_error` (a runtime or configuration error).
    pub error_type: String,
    /// `allow`, or the actions taken on a failure (`deny`, `warn`, `audit`).
    pub enforcement_action: String,
}

/// `apiserver_validating_admission_policy_check_total`: counted by the admission plugin
/// (which has no handle on [`Metrics`]), shared by every registry that renders it.
pub static POLICY_CHECKS: std::sync::LazyLock<Family<PolicyCheckLabels, Counter>> =
    std::sync::LazyLock::new(Family::default);

/// Labels of `apiserver_admission_webhook_admission_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookDurationLabels {
    name: String,
    operation: String,
    rejected: String,
    r#type: String,
}

/// Labels of `apiserver_admission_webhook_rejection_count`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookRejectionLabels {
    name: String,
    operation: String,
    r#type: String,
    error_type: String,
    rejection_code: String,
}

fn webhook_histogram() -> Histogram {
    // Upstream's buckets for apiserver_admission_webhook_admission_duration_seconds.
    Histogram::new([0.005, 0.025, 0.1, 0.5, 1.0, 2.5, 10.0, 25.0])
}

type WebhookDurations = Family<WebhookDurationLabels, Histogram, fn() -> Histogram>;

/// `apiserver_admission_webhook_admission_duration_seconds` (kept by the webhook plugins).
static WEBHOOK_DURATIONS: std::sync::LazyLock<WebhookDurations> =
    std::sync::LazyLock::new(|| Family::new_with_constructor(webhook_histogram));

/// `apiserver_admission_webhook_rejection_count`: a counter upstream, kept in a gauge
/// here because this crate's counters are rendered with a `_total` suffix upstream's
/// name does not have.
static WEBHOOK_REJECTIONS: std::sync::LazyLock<Family<WebhookRejectionLabels, Gauge>> =
    std::sync::LazyLock::new(Family::default);

/// Records one admission webhook call: its latency, and when it refused the request, why
/// (`error_type` `calling_webhook_error`, `apiserver_internal_error` or `no_error`, and the
/// code); `kind` is `admit` or `validating`.
pub fn observe_webhook(
    name: &str,
    operation: &str,
    kind: &str,
    seconds: f64,
    rejection: Option<(&str, u16)>,
) {
    WEBHOOK_DURATIONS
        .get_or_create(&WebhookDurationLabels {
            name: name.to_owned(),
            operation: operation.to_owned(),
            rejected: rejection.is_some().to_string(),
            r#type: kind.to_owned(),
        })
        .observe(seconds);
    if let Some((error_type, code)) = rejection {
        WEBHOOK_REJECTIONS
            .get_or_create(&WebhookRejectionLabels {
                name: name.to_owned(),
                operation: operation.to_owned(),
                r#type: kind.to_owned(),
                error_type: error_type.to_owned(),
                rejection_code: code.to_string(),
            })
            .inc();
    }
}

fn duration_histogram() -> Histogram {
    // Upstream's buckets for apiserver_request_duration_seconds.
    Histogram::new([
        0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0,
        10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
    ])
}

/// The API server's metrics.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    durations: Family<DurationLabels, Histogram, fn() -> Histogram>,
    /// Requests being served, by kind (kept by `flow_control`).
    pub(crate) inflight: Family<KindLabel, Gauge>,
    /// Requests waiting for a seat, by kind (kept by `flow_control`).
    pub(crate) inqueue: Family<KindLabel, Gauge>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Every metric registered, all at zero.
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let durations: Family<DurationLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(duration_histogram);
        let inflight = Family::<KindLabel, Gauge>::default();
        let inqueue = Family::<KindLabel, Gauge>::default();
        registry.register(
            "apiserver_request",
            "Counter of apiserver requests broken out for each verb, dry run value, group, version, resource, scope, component, and HTTP response code",
            requests.clone(),
        );
        registry.register(
            "apiserver_request_duration_seconds",
            "Response latency distribution in seconds for each verb, dry run value, group, version, resource, subresource, scope and component",
            durations.clone(),
        );
        registry.register(
            "apiserver_current_inflight_requests",
            "Maximal number of currently used inflight request limit of this apiserver per request kind in last second",
            inflight.clone(),
        );
        registry.register(
            "apiserver_current_inqueue_requests",
            "Maximal number of queued requests in this apiserver per request kind in last second",
            inqueue.clone(),
        );
        registry.register(
            "apiserver_validating_admission_policy_check",
            "Validation admission policy check total, labeled by policy and further identified by binding and enforcement action taken.",
            POLICY_CHECKS.clone(),
        );
        registry.register(
            "apiserver_admission_webhook_admission_duration_seconds",
            "Admission webhook latency histogram in seconds, identified by name and broken out for each operation and API resource and type (validate or admit).",
            WEBHOOK_DURATIONS.clone(),
        );
        registry.register(
            "apiserver_admission_webhook_rejection_count",
            "Admission webhook rejection count, identified by name and broken out for each admission type (validating or admit) and operation. Additional labels specify an error type (calling_webhook_error or apiserver_internal_error if an error occurred; no_error otherwise) and optionally a non-zero rejection code if the webhook rejects the request with an HTTP status code (honored by the apiserver when the code is greater or equal to 400). Codes greater than 600 are truncated to 600, to keep the metrics cardinality bounded.",
            WEBHOOK_REJECTIONS.clone(),
        );
        Metrics {
            registry,
            requests,
            durations,
            inflight,
            inqueue,
        }
    }

    /// Every metric registered, plus the process's memory breakdown read from `ctx` at each
    /// scrape ([`MemoryCollector`]).
    pub fn with_memory(ctx: Arc<crate::handlers::Ctx>) -> Self {
        let mut m = Self::new();
        m.registry.register_collector(Box::new(MemoryCollector {
            ctx: Arc::clone(&ctx),
        }));
        m.registry
            .register_collector(Box::new(StoreRaftCollector { ctx }));
        m
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

/// Upstream's verb label: LIST/GET/WATCH/POST/PUT/PATCH/DELETE/DELETECOLLECTION.
fn verb_label(info: &RequestInfo) -> String {
    match info.verb.as_str() {
        "create" => "POST".into(),
        "update" => "PUT".into(),
        v => v.to_ascii_uppercase(),
    }
}

fn scope(info: &RequestInfo) -> String {
    if !info.name.is_empty() {
        "resource".into()
    } else if !info.namespace.is_empty() {
        "namespace".into()
    } else {
        "cluster".into()
    }
}

/// Middleware: records each request's count and latency.
pub async fn layer(metrics: Arc<Metrics>, req: Request, next: Next) -> Response {
    let info = req
        .extensions()
        .get::<RequestInfo>()
        .cloned()
        .unwrap_or_default();
    let started = Instant::now();
    let resp = next.run(req).await;
    let (group, version, resource, subresource) = if info.is_resource {
        (
            info.group.clone(),
            info.version.clone(),
            info.resource.clone(),
            info.subresource.clone(),
        )
    } else {
        Default::default()
    };
    let component = "apiserver".to_owned();
    metrics
        .requests
        .get_or_create(&RequestLabels {
            verb: verb_label(&info),
            group: group.clone(),
            version: version.clone(),
            resource: resource.clone(),
            subresource: subresource.clone(),
            scope: scope(&info),
            component: component.clone(),
            code: resp.status().as_u16().to_string(),
        })
        .inc();
    metrics
        .durations
        .get_or_create(&DurationLabels {
            verb: verb_label(&info),
            group,
            version,
            resource,
            subresource,
            scope: scope(&info),
            component,
        })
        .observe(started.elapsed().as_secs_f64());
    resp
}

/// The memory breakdown of the process, computed at each scrape so the next regression shows:
///
/// - `process_resident_memory_bytes`: the whole process (as upstream's process collector);
/// - `capstan_store_keys`, `capstan_store_revisions`, `capstan_store_bytes`: the store's
///   state machine (live keys, versions held until compaction, bytes of keys and values);
/// - `capstan_store_raft_log_entries`, `capstan_store_raft_log_bytes`: the Raft log kept in
///   memory between snapshots (its large values are shared with the state machine);
/// - `capstan_watch_cache_objects|events|bytes{resource}`: each resource's watch cache;
/// - `capstan_client_cache_objects|bytes{component,resource}`: what the in-process API
///   clients (controller manager informers, garbage collector graph, …) keep.
struct MemoryCollector {
    ctx: Arc<crate::handlers::Ctx>,
}

impl std::fmt::Debug for MemoryCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryCollector")
    }
}

/// Labels of the per-resource memory gauges.
type MemoryLabels = Vec<(&'static str, String)>;

/// A gauge family built for one scrape.
fn gauges(rows: impl IntoIterator<Item = (MemoryLabels, i64)>) -> Family<MemoryLabels, Gauge> {
    let family = Family::<MemoryLabels, Gauge>::default();
    for (labels, v) in rows {
        family.get_or_create(&labels).set(v);
    }
    family
}

fn to_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// `VmRSS` of this process in bytes (0 where `/proc` is missing).
fn resident_bytes() -> i64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<i64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The watch cache's resource label from its storage prefix (`/registry/<group>/<plural>/`):
/// `plural` for the core group, else upstream's `plural.group` (`deployments.apps`), as the
/// garbage collector's cache is labelled.
fn resource_label(prefix: &str) -> String {
    let path = prefix
        .strip_prefix("/registry/")
        .unwrap_or(prefix)
        .trim_end_matches('/');
    match path.split_once('/') {
        Some(("core", plural)) => plural.to_owned(),
        Some((group, plural)) => format!("{plural}.{group}"),
        None => path.to_owned(),
    }
}

impl prometheus_client::collector::Collector for MemoryCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let store = self.ctx.storage.usage();
        let (log_entries, log_bytes) = store::log::memory_usage();
        let plain: [(&str, &str, i64); 6] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
                resident_bytes(),
            ),
            (
                "capstan_store_keys",
                "Live keys in the store's in-memory state machine.",
                to_i64(store.keys),
            ),
            (
                "capstan_store_revisions",
                "Versions of keys the store holds in memory (history and tombstones until compaction).",
                to_i64(store.revisions),
            ),
            (
                "capstan_store_bytes",
                "Bytes of keys, values and their bookkeeping in the store's in-memory state machine.",
                to_i64(store.bytes),
            ),
            (
                "capstan_store_raft_log_entries",
                "Raft log entries held in memory (since the last snapshot, plus the catch-up tail).",
                log_entries,
            ),
            (
                "capstan_store_raft_log_bytes",
                "Bytes of the Raft log entries held in memory (large values are shared with the state machine, not copied).",
                log_bytes,
            ),
        ];
        for (name, help, v) in plain {
            let g = prometheus_client::metrics::gauge::ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let cache = self.ctx.watch_cache.usage();
        let label = |prefix: &str| vec![("resource", resource_label(prefix))];
        let watch: [(&str, &str, Family<MemoryLabels, Gauge>); 3] = [
            (
                "capstan_watch_cache_objects",
                "Current objects in the watch cache, by resource.",
                gauges(cache.iter().map(|u| (label(&u.prefix), to_i64(u.objects)))),
            ),
            (
                "capstan_watch_cache_events",
                "Events in the watch cache's window, by resource.",
                gauges(cache.iter().map(|u| (label(&u.prefix), to_i64(u.events)))),
            ),
            (
                "capstan_watch_cache_bytes",
                "Bytes the watch cache adds to the store's, by resource: decoded metadata of its objects, the window's event lines and previous versions (the objects' JSON is shared with the store, counted in capstan_store_bytes).",
                gauges(cache.iter().map(|u| (label(&u.prefix), to_i64(u.bytes)))),
            ),
        ];
        for (name, help, g) in watch {
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let clients = lean::caches::caches();
        let client_label = |f: &lean::caches::CacheFigures| {
            vec![
                ("component", f.component.to_owned()),
                ("resource", f.kind.clone()),
            ]
        };
        let client: [(&str, &str, Family<MemoryLabels, Gauge>); 2] = [
            (
                "capstan_client_cache_objects",
                "Objects the in-process API clients (controller manager, garbage collector, scheduler, nodes) keep in their caches.",
                gauges(clients.iter().map(|f| (client_label(f), f.objects))),
            ),
            (
                "capstan_client_cache_bytes",
                "Bytes the in-process API clients keep in their caches (estimated: the objects' JSON size, or the cache's own accounting).",
                gauges(clients.iter().map(|f| (client_label(f), f.bytes))),
            ),
        ];
        for (name, help, g) in client {
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        Ok(())
    }
}

/// The embedded store member's Raft state, read from its status at each scrape, so the
/// dashboard (which may only reach the API server) can show it; nothing is written when the
/// store is remote (`capstan apiserver --etcd-servers`: scrape the store's own metrics):
///
/// - `capstan_store_raft_term`, `capstan_store_raft_applied_index`,
///   `capstan_store_raft_commit_index`: the member's Raft term and indexes;
/// - `capstan_store_is_leader` (0/1), `capstan_store_has_leader` (0/1),
///   `capstan_store_members`: leadership and the cluster's size;
/// - `capstan_store_db_size_bytes`: WAL and snapshots on disk (etcd's
///   `etcd_mvcc_db_total_size_in_bytes` on the store's own port);
/// - `capstan_store_wal_fsync_duration_seconds`: the histogram the WAL keeps for etcd's
///   `etcd_disk_wal_fsync_duration_seconds`, shared.
struct StoreRaftCollector {
    ctx: Arc<crate::handlers::Ctx>,
}

impl std::fmt::Debug for StoreRaftCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StoreRaftCollector")
    }
}

/// The store gauges of [`StoreRaftCollector`]: name, help and value.
fn store_raft_gauges(node: &store::node::Node) -> [(&'static str, &'static str, i64); 7] {
    let st = node.status();
    let id = node.ids().member_id;
    let to_i64 = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    [
        (
            "capstan_store_raft_term",
            "Current Raft term of the embedded store member.",
            to_i64(st.term),
        ),
        (
            "capstan_store_raft_applied_index",
            "Index of the last Raft entry the embedded store member applied to its state machine.",
            to_i64(st.applied),
        ),
        (
            "capstan_store_raft_commit_index",
            "Raft commit index the embedded store member knows of.",
            to_i64(st.commit),
        ),
        (
            "capstan_store_is_leader",
            "Whether the embedded store member is the Raft leader: 1 if it is, 0 otherwise.",
            i64::from(st.leader != 0 && st.leader == id),
        ),
        (
            "capstan_store_has_leader",
            "Whether the embedded store member knows a Raft leader: 1 if it does, 0 otherwise.",
            i64::from(st.leader != 0),
        ),
        (
            "capstan_store_members",
            "Members of the store cluster.",
            to_i64(node.membership().list().len() as u64),
        ),
        (
            "capstan_store_db_size_bytes",
            "Bytes of the embedded store member's WAL and snapshots on disk.",
            to_i64(st.disk_bytes),
        ),
    ]
}

impl prometheus_client::collector::Collector for StoreRaftCollector {
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeMetric;
        let Some(node) = self.ctx.storage.local_node() else {
            return Ok(());
        };
        for (name, help, v) in store_raft_gauges(node) {
            let g = prometheus_client::metrics::gauge::ConstGauge::new(v);
            g.encode(encoder.encode_descriptor(name, help, None, g.metric_type())?)?;
        }
        let fsync = store::metrics::wal_fsync_histogram();
        fsync.encode(encoder.encode_descriptor(
            "capstan_store_wal_fsync_duration_seconds",
            "Latency of the embedded store member's WAL fsyncs (etcd_disk_wal_fsync_duration_seconds).",
            None,
            fsync.metric_type(),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    #[test]
    fn watch_cache_labels_name_group_resources_as_upstream() {
        assert_eq!(resource_label("/registry/core/configmaps/"), "configmaps");
        assert_eq!(
            resource_label("/registry/apps/deployments/"),
            "deployments.apps"
        );
    }

    #[test]
    fn webhook_metrics_have_upstreams_names_and_labels() {
        observe_webhook(
            "m.example.com",
            "CREATE",
            "validating",
            0.01,
            Some(("no_error", 403)),
        );
        let text = Metrics::new().render();
        assert!(
            text.lines().any(|l| l.starts_with(
                "apiserver_admission_webhook_rejection_count{name=\"m.example.com\",operation=\"CREATE\",type=\"validating\",error_type=\"no_error\",rejection_code=\"403\"} 1"
            )),
            "{text}"
        );
        assert!(text.contains(
            "apiserver_admission_webhook_admission_duration_seconds_count{name=\"m.example.com\",operation=\"CREATE\",rejected=\"true\",type=\"validating\"} 1"
        ), "{text}");
    }

    #[test]
    fn exposition_uses_upstream_names() {
        let m = Metrics::new();
        let info = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/default/pods", None);
        m.requests
            .get_or_create(&RequestLabels {
                verb: verb_label(&info),
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
                subresource: String::new(),
                scope: scope(&info),
                component: "apiserver".into(),
                code: "200".into(),
            })
            .inc();
        m.durations
            .get_or_create(&DurationLabels {
                verb: "LIST".into(),
                group: String::new(),
                version: "v1".into(),
                resource: "pods".into(),
                subresource: String::new(),
                scope: "namespace".into(),
                component: "apiserver".into(),
            })
            .observe(0.01);
        let text = m.render();
        assert!(
            text.contains("apiserver_request_total{verb=\"LIST\""),
            "{text}"
        );
        assert!(text.contains("scope=\"namespace\""), "{text}");
        assert!(
            text.contains("# TYPE apiserver_request_duration_seconds histogram"),
            "{text}"
        );
    }
}
