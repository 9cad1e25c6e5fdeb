//! The horizontal pod autoscaler controller (`horizontalpodautoscaling`, upstream
//! `pkg/controller/podautoscaler`), autoscaling/v2: every sync period each HPA reads its
//! target's scale subresource (Deployments, ReplicaSets, StatefulSets, ReplicationControllers,
//! custom resources with a scale subresource — the kind's resource found by discovery), the
//! pods its selector picks and their metrics from `metrics.k8s.io` (through the API server's
//! aggregator), and computes the replica count as upstream:
//!
//! - `Resource` metrics (cpu, memory) with `Utilization` (of the pods' requests) or
//!   `AverageValue` targets; the usage ratio within the tolerance (0.1) keeps the current
//!   count; pods without metrics count as 0 % when scaling up and 100 % when scaling down;
//!   the highest proposal of all metrics wins;
//! - without `behavior`: down-scale stabilization over `--horizontal-pod-autoscaler-
//!   downscale-stabilization` (5 min; shortened for tests) and the scale-up limit
//!   max(2 × current, 4); with `behavior`: up and down stabilization windows, Pods/Percent
//!   policies over their periods against the scale events recorded, `selectPolicy`;
//! - `Pods`, `Object` and `External` metrics from the custom and external metrics APIs
//!   (`hpa_custom.rs`);
//! - min/max replicas; conditions `AbleToScale`, `ScalingActive`, `ScalingLimited` and
//!   events (`SuccessfulRescale`, `FailedGetScale`, `FailedGetResourceMetric`,
//!   `FailedComputeMetricsReplicas`, `FailedRescale`) with upstream's reasons and messages.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::autoscaling::v2::{HPAScalingRules, HorizontalPodAutoscaler, MetricSpec};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::reflector::Store;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::context::{ReconcileError, reference};

#[path = "hpa_custom.rs"]
mod custom;
use crate::queue::{Queue, SyncResult, run_workers};
use crate::{Context, LoopFuture, informer};

impl informer::Watched for HorizontalPodAutoscaler {
    type Wire = HorizontalPodAutoscaler;
}

/// Upstream's `--horizontal-pod-autoscaler-tolerance`.
const TOLERANCE: f64 = 0.1;

/// Starts the loop.
pub(crate) fn start(ctx: Context, shutdown: CancellationToken) -> LoopFuture {
    Box::pin(run(ctx, shutdown))
}

/// One recommendation or scale event, remembered per HPA.
#[derive(Clone, Copy)]
struct Stamped {
    at: Instant,
    replicas: i32,
}

/// What the controller remembers between syncs (upstream keeps the same in memory).
#[derive(Default)]
struct History {
    recommendations: HashMap<String, Vec<Stamped>>,
    /// Replica changes: (when, signed change).
    events: HashMap<String, Vec<(Instant, i32)>>,
}

type Shared = Arc<Mutex<History>>;

/// A quantity as upstream prints a metric value (`NewMilliQuantity`: milli-units, `m`
/// dropped when whole).
fn milli_quantity(v: f64) -> String {
    let m = (v * 1000.0).round() as i64;
    if m % 1000 == 0 {
        format!("{}", m / 1000)
    } else {
        format!("{m}m")
    }
}

/// One condition of the HPA's status.
fn condition(kind: &str, status: bool, reason: &str, message: &str) -> Value {
    json!({ "type": kind, "status": if status { "True" } else { "False" },
            "reason": reason, "message": message })
}

/// The per-pod measurements of one resource.
struct Sample {
    /// Usage by pod name (base units).
    usage: HashMap<String, f64>,
}

/// Reads the pod metrics of `selector` in `ns` through the metrics API.
async fn pod_metrics(
    client: &kube::Client,
    ns: &str,
    selector: &str,
    resource: &str,
) -> Result<Sample, String> {
    let metrics = kube::discovery::ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &metrics);
    let list = api
        .list(&ListParams::default().labels(selector))
        .await
        .map_err(|e| match e {
            kube::Error::Api(s) => s.message,
            other => other.to_string(),
        })?;
    let mut usage = HashMap::new();
    for item in &list.items {
        let name = item.metadata.name.clone().unwrap_or_default();
        let mut sum = 0.0;
        for c in item.data["containers"].as_array().into_iter().flatten() {
            sum += c["usage"][resource]
                .as_str()
                .and_then(lean::quantity::to_f64)
                .unwrap_or(0.0);
        }
        usage.insert(name, sum);
    }
    Ok(Sample { usage })
}

/// A pod's total request of `resource` (`Err`: a container without one).
fn pod_request(pod: &Pod, resource: &str) -> Result<f64, String> {
    let mut sum = 0.0;
    for c in pod.spec.iter().flat_map(|s| s.containers.iter()) {
        let req = c
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(resource))
            .and_then(|q| lean::quantity::to_f64(&q.0));
        match req {
            Some(r) => sum += r,
            None => {
                return Err(format!(
                    "missing request for {resource} in container {} of Pod {}",
                    c.name,
                    pod.metadata.name.as_deref().unwrap_or("")
                ));
            }
        }
    }
    Ok(sum)
}

/// The outcome of one metric: replicas proposed and its current status entry.
struct Proposal {
    replicas: i32,
    status: Value,
    description: String,
}

/// Upstream's `GetResourceReplicas`/`GetRawResourceReplicas` for one Resource metric.
fn resource_replicas(
    current: i32,
    pods: &[Pod],
    sample: &Sample,
    resource: &str,
    utilization: Option<i32>,
    average_value: Option<f64>,
) -> Result<Proposal, String> {
    let live: Vec<&Pod> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Failed"))
        .collect();
    if live.is_empty() {
        return Err("no pods returned by selector while calculating replica count".into());
    }
    let measured: Vec<&&Pod> = live
        .iter()
        .filter(|p| {
            sample
                .usage
                .contains_key(p.metadata.name.as_deref().unwrap_or(""))
        })
        .collect();
    let missing = live.len() - measured.len();
    if measured.is_empty() {
        return Err("did not receive metrics for targeted pods (pods might be unready)".to_owned());
    }
    let usage_of = |p: &Pod| sample.usage[p.metadata.name.as_deref().unwrap_or("")];
    let total_usage: f64 = measured.iter().map(|p| usage_of(p)).sum();
    let count = measured.len() as f64;
    let (ratio, status_current, description) = if let Some(target) = utilization {
        let mut total_request = 0.0;
        for p in &measured {
            total_request += pod_request(p, resource)?;
        }
        if total_request <= 0.0 {
            return Err(format!("missing request for {resource}"));
        }
        // Upstream's integer arithmetic on milli-units.
        let (usage_m, request_m) = (
            (total_usage * 1000.0).round() as i64,
            (total_request * 1000.0).round() as i64,
        );
        let util = usage_m * 100 / request_m.max(1);
        let ratio = util as f64 / f64::from(target);
        (
            ratio,
            json!({ "averageUtilization": util, "averageValue": milli_quantity(total_usage / count) }),
            format!("{resource} resource utilization (percentage of request)"),
        )
    } else {
        let target = average_value.unwrap_or(1.0).max(f64::MIN_POSITIVE);
        let usage_m = (total_usage * 1000.0).round();
        let ratio = usage_m / ((target * 1000.0).round().max(1.0) * count);
        (
            ratio,
            json!({ "averageValue": milli_quantity(total_usage / count) }),
            format!("{resource} resource"),
        )
    };
    let status =
        json!({ "type": "Resource", "resource": { "name": resource, "current": status_current } });
    // Pods without metrics: assumed at 0 % when scaling up, at the target when scaling down
    // (upstream's rebalance), then the ratio is recomputed over all pods.
    let replicas = if (ratio - 1.0).abs() <= TOLERANCE {
        current
    } else if missing == 0 {
        (ratio * count).ceil() as i32
    } else {
        // Pods without metrics: assumed at 0 % when scaling up, at the target when scaling
        // down (upstream's rebalance); no change when that flips the direction or lands
        // within the tolerance.
        let n = live.len() as f64;
        let rebalanced = if ratio > 1.0 {
            ratio * count / n
        } else {
            (ratio * count + missing as f64) / n
        };
        if (rebalanced - 1.0).abs() <= TOLERANCE || (rebalanced > 1.0) != (ratio > 1.0) {
            current
        } else {
            (rebalanced * n).ceil() as i32
        }
    };
    Ok(Proposal {
        replicas,
        status,
        description,
    })
}

/// A policy-limited bound on the change from `current` (upstream's
/// `calculateScaleUpLimitWithScalingRules` / `…ScaleDownLimit…`).
fn policy_limit(
    rules: &HPAScalingRules,
    events: &[(Instant, i32)],
    current: i32,
    up: bool,
) -> Option<i32> {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return Some(current);
    }
    let now = Instant::now();
    let mut limits = Vec::new();
    for p in rules.policies.iter().flatten() {
        let period = Duration::from_secs(u64::try_from(p.period_seconds).unwrap_or(0));
        let changed: i32 = events
            .iter()
            .filter(|(at, d)| now.duration_since(*at) <= period && (*d > 0) == up)
            .map(|(_, d)| *d)
            .sum();
        let start = current - changed;
        let limit = match (p.type_.as_str(), up) {
            ("Pods", true) => start + p.value,
            ("Percent", true) => {
                (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32
            }
            ("Pods", false) => start - p.value,
            (_, false) => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)).floor() as i32,
            _ => continue,
        };
        limits.push(limit);
    }
    if limits.is_empty() {
        return None;
    }
    // Max: the policy allowing the largest change.
    let most = if up {
        limits.iter().max()
    } else {
        limits.iter().min()
    };
    let least = if up {
        limits.iter().min()
    } else {
        limits.iter().max()
    };
    Some(*if select == "Min" { least } else { most }?)
}

/// Default behaviour of autoscaling/v2 (what the API's defaulting fills in), with the
/// down-scale window from the flag.
fn rules(hpa: &HorizontalPodAutoscaler, up: bool, default_down: Duration) -> HPAScalingRules {
    let behavior = hpa.spec.as_ref().and_then(|s| s.behavior.as_ref());
    let given = behavior.and_then(|b| {
        if up {
            b.scale_up.clone()
        } else {
            b.scale_down.clone()
        }
    });
    let pol = |t: &str, v: i32| k8s_openapi::api::autoscaling::v2::HPAScalingPolicy {
        type_: t.to_owned(),
        value: v,
        period_seconds: 15,
    };
    let default = if up {
        HPAScalingRules {
            stabilization_window_seconds: Some(0),
            select_policy: Some("Max".into()),
            policies: Some(vec![pol("Percent", 100), pol("Pods", 4)]),
            ..Default::default()
        }
    } else {
        HPAScalingRules {
            stabilization_window_seconds: Some(
                i32::try_from(default_down.as_secs()).unwrap_or(300),
            ),
            select_policy: Some("Max".into()),
            policies: Some(vec![pol("Percent", 100)]),
            ..Default::default()
        }
    };
    match given {
        None => default,
        Some(mut r) => {
            if r.stabilization_window_seconds.is_none() {
                r.stabilization_window_seconds = default.stabilization_window_seconds;
            }
            if r.select_policy.is_none() {
                r.select_policy = default.select_policy;
            }
            if r.policies.is_none() {
                r.policies = default.policies;
            }
            r
        }
    }
}

/// What normalisation decided.
struct Normalized {
    replicas: i32,
    able: Value,
    limited: Value,
}

/// Stabilization windows, policies and min/max (upstream's
/// `normalizeDesiredReplicasWithBehaviors`).
fn normalize(
    hpa: &HorizontalPodAutoscaler,
    key: &str,
    history: &Shared,
    current: i32,
    proposed: i32,
    default_down: Duration,
) -> Normalized {
    let spec = hpa.spec.as_ref();
    let min = spec.and_then(|s| s.min_replicas).unwrap_or(1);
    let max = spec.map_or(min, |s| s.max_replicas);
    let up_rules = rules(hpa, true, default_down);
    let down_rules = rules(hpa, false, default_down);
    let now = Instant::now();
    let mut h = history
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let recs = h.recommendations.entry(key.to_owned()).or_default();
    let up_window = Duration::from_secs(
        u64::try_from(up_rules.stabilization_window_seconds.unwrap_or(0)).unwrap_or(0),
    );
    let down_window = Duration::from_secs(
        u64::try_from(down_rules.stabilization_window_seconds.unwrap_or(300)).unwrap_or(300),
    );
    let (mut up_rec, mut down_rec) = (proposed, proposed);
    for r in recs.iter() {
        if now.duration_since(r.at) <= up_window {
            up_rec = up_rec.min(r.replicas);
        }
        if now.duration_since(r.at) <= down_window {
            down_rec = down_rec.max(r.replicas);
        }
    }
    let keep = up_window.max(down_window);
    recs.retain(|r| now.duration_since(r.at) <= keep);
    recs.push(Stamped {
        at: now,
        replicas: proposed,
    });
    let mut stabilized = current;
    if stabilized < up_rec {
        stabilized = up_rec;
    }
    if stabilized > down_rec {
        stabilized = down_rec;
    }
    let able = if stabilized != proposed {
        condition(
            "AbleToScale",
            true,
            "ScaleDownStabilized",
            "recent recommendations were higher than current one, applying the highest recent recommendation",
        )
    } else {
        condition(
            "AbleToScale",
            true,
            "ReadyForNewScale",
            "recommended size matches current size",
        )
    };
    let events = h.events.entry(key.to_owned()).or_default();
    events.retain(|(at, _)| now.duration_since(*at) <= Duration::from_secs(3600));
    let mut replicas = stabilized;
    let mut limited = condition(
        "ScalingLimited",
        false,
        "DesiredWithinRange",
        "the desired count is within the acceptable range",
    );
    if replicas > current {
        if let Some(limit) = policy_limit(&up_rules, events, current, true)
            && replicas > limit
        {
            replicas = limit;
            limited = condition(
                "ScalingLimited",
                true,
                "ScaleUpLimit",
                "the desired replica count is increasing faster than the maximum scale rate",
            );
        }
    } else if replicas < current
        && let Some(limit) = policy_limit(&down_rules, events, current, false)
        && replicas < limit
    {
        replicas = limit;
        limited = condition(
            "ScalingLimited",
            true,
            "ScaleDownLimit",
            "the desired replica count is decreasing faster than the maximum scale rate",
        );
    }
    if replicas > max {
        replicas = max;
        limited = condition(
            "ScalingLimited",
            true,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        );
    } else if replicas < min {
        replicas = min;
        limited = condition(
            "ScalingLimited",
            true,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        );
    }
    Normalized {
        replicas,
        able,
        limited,
    }
}

/// The API resource of the scale target's kind (by discovery).
async fn target_api(
    client: &kube::Client,
    hpa: &HorizontalPodAutoscaler,
    ns: &str,
) -> Result<(Api<DynamicObject>, String, String), String> {
    let r = &hpa.spec.as_ref().ok_or("no spec")?.scale_target_ref;
    let api_version = r.api_version.clone().unwrap_or_else(|| "v1".into());
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), api_version.clone()),
    };
    let gvk = GroupVersionKind::gvk(&group, &version, &r.kind);
    let (resource, _) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| format!("unable to determine resource for scale target reference: {e}"))?;
    Ok((
        Api::namespaced_with(client.clone(), ns, &resource),
        r.kind.clone(),
        r.name.clone(),
    ))
}

/// Merges `conditions` into the HPA's and writes its status.
async fn write_status(
    ctx: &Context,
    hpa: &HorizontalPodAutoscaler,
    mut status: Value,
    conditions: Vec<Value>,
) -> Result<(), ReconcileError> {
    let now = jiff::Timestamp::now();
    let now = jiff::Timestamp::from_second(now.as_second())
        .map_or_else(|_| now.to_string(), |t| t.to_string());
    let old = hpa
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let merged: Vec<Value> = conditions
        .into_iter()
        .map(|mut c| {
            let kept = old.iter().find(|o| {
                Some(o.type_.as_str()) == c["type"].as_str()
                    && Some(o.status.as_str()) == c["status"].as_str()
            });
            c["lastTransitionTime"] = kept
                .and_then(|o| o.last_transition_time.as_ref())
                .map_or_else(|| json!(now), |t| json!(t.0));
            c
        })
        .collect();
    status["conditions"] = json!(merged);
    status["observedGeneration"] = json!(hpa.metadata.generation);
    if let Some(t) = hpa.status.as_ref().and_then(|s| s.last_scale_time.as_ref())
        && status.get("lastScaleTime").is_none()
    {
        status["lastScaleTime"] = json!(t.0);
    }
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let name = hpa.metadata.name.clone().unwrap_or_default();
    let api: Api<HorizontalPodAutoscaler> = Api::namespaced(ctx.client.clone(), &ns);
    // Upstream's role allows `update` of the status only: the whole object is PUT, with its
    // resourceVersion (a conflict is retried on the next sync).
    let mut updated = hpa.clone();
    updated.status = Some(
        serde_json::from_value(status)
            .map_err(|e| ReconcileError::Kube(kube::Error::SerdeError(e)))?,
    );
    updated.metadata.managed_fields = None;
    api.replace_status(&name, &PostParams::default(), &updated)
        .await
        .map_err(ReconcileError::Kube)?;
    Ok(())
}

/// One HPA.
async fn sync(
    ctx: Context,
    hpas: Store<HorizontalPodAutoscaler>,
    history: Shared,
    key: String,
) -> SyncResult {
    let period = ctx.options.horizontal_pod_autoscaler_sync_period;
    let default_down = ctx
        .options
        .horizontal_pod_autoscaler_downscale_stabilization;
    let Some(hpa) = informer::get(&hpas, &key) else {
        let mut h = history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        h.recommendations.remove(&key);
        h.events.remove(&key);
        return Ok(None);
    };
    if hpa.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    let hpa = hpa.as_ref().clone();
    let reference = reference(&hpa);
    let ns = hpa.metadata.namespace.clone().unwrap_or_default();
    let spec = hpa.spec.clone().unwrap_or_default();
    let target_desc = format!(
        "{}/{}",
        spec.scale_target_ref.kind, spec.scale_target_ref.name
    );

    // The target's scale.
    let scale = match target_api(&ctx.client, &hpa, &ns).await {
        Ok((api, _, name)) => {
            api.get_scale(&name)
                .await
                .map(|s| (api, name, s))
                .map_err(|e| match e {
                    kube::Error::Api(s) => s.message,
                    other => other.to_string(),
                })
        }
        Err(e) => Err(e),
    };
    let (api, target_name, scale) = match scale {
        Ok(s) => s,
        Err(e) => {
            let msg =
                format!("the HPA controller was unable to get the target's current scale: {e}");
            ctx.event(&reference, true, "FailedGetScale", "GetScale", e.clone())
                .await;
            write_status(&ctx, &hpa, json!({ "currentReplicas": hpa.status.as_ref().and_then(|s| s.current_replicas).unwrap_or(0), "desiredReplicas": hpa.status.as_ref().map_or(0, |s| s.desired_replicas) }),
                vec![condition("AbleToScale", false, "FailedGetScale", &msg)]).await?;
            return Ok(Some(period));
        }
    };
    let current = scale.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0);
    let status_replicas = scale.status.as_ref().map_or(0, |s| s.replicas);
    let selector = scale
        .status
        .as_ref()
        .and_then(|s| s.selector.clone())
        .unwrap_or_default();
    let able_get = condition(
        "AbleToScale",
        true,
        "SucceededGetScale",
        "the HPA controller was able to get the target's current scale",
    );
    let min = spec.min_replicas.unwrap_or(1);
    if current == 0 && min != 0 {
        write_status(
            &ctx,
            &hpa,
            json!({ "currentReplicas": status_replicas, "desiredReplicas": 0 }),
            vec![
                able_get,
                condition(
                    "ScalingActive",
                    false,
                    "ScalingDisabled",
                    "scaling is disabled since the replica count of the target is zero",
                ),
            ],
        )
        .await?;
        return Ok(Some(period));
    }

    // Metrics.
    let pods: Vec<Pod> = if selector.is_empty() {
        Vec::new()
    } else {
        let papi: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
        match papi.list(&ListParams::default().labels(&selector)).await {
            Ok(l) => l.items,
            Err(e) => return Err(ReconcileError::Kube(e)),
        }
    };
    let metrics: Vec<MetricSpec> = spec.metrics.clone().unwrap_or_else(|| {
        serde_json::from_value(json!([{ "type": "Resource", "resource": { "name": "cpu",
            "target": { "type": "Utilization", "averageUtilization": 80 } } }]))
        .unwrap_or_default()
    });
    let mut best: Option<Proposal> = None;
    let mut statuses = Vec::new();
    let mut failure: Option<(String, String)> = None;
    let ready_pods = i32::try_from(
        pods.iter()
            .filter(|p| {
                p.status.as_ref().is_some_and(|s| {
                    s.phase.as_deref() == Some("Running")
                        && s.conditions
                            .iter()
                            .flatten()
                            .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count(),
    )
    .unwrap_or(i32::MAX);
    for m in &metrics {
        if let Some(outcome) =
            custom::proposal(&ctx.client, &ns, &selector, current, ready_pods, m).await
        {
            match outcome {
                Ok(p) => {
                    statuses.push(p.status.clone());
                    if best.as_ref().is_none_or(|b| p.replicas > b.replicas) {
                        best = Some(p);
                    }
                }
                Err((reason, msg)) => {
                    let action = reason.trim_start_matches("Failed");
                    ctx.event(&reference, true, reason, action, msg.clone())
                        .await;
                    failure.get_or_insert((
                        reason.into(),
                        format!("the HPA was unable to compute the replica count: {msg}"),
                    ));
                }
            }
            continue;
        }
        let Some(res) = m.resource.as_ref().filter(|_| m.type_ == "Resource") else {
            failure.get_or_insert((
                "InvalidMetricSourceType".into(),
                format!("the HPA was unable to compute the replica count: unsupported metric source type {:?}", m.type_),
            ));
            continue;
        };
        if selector.is_empty() {
            failure.get_or_insert((
                "InvalidSelector".into(),
                "the HPA target's scale is missing a selector".into(),
            ));
            continue;
        }
        let sample = match pod_metrics(&ctx.client, &ns, &selector, &res.name).await {
            Ok(s) => s,
            Err(e) => {
                let msg = format!(
                    "unable to get metrics for resource {}: unable to fetch metrics from resource metrics API: {e}",
                    res.name
                );
                ctx.event(
                    &reference,
                    true,
                    "FailedGetResourceMetric",
                    "GetResourceMetric",
                    msg.clone(),
                )
                .await;
                failure.get_or_insert((
                    "FailedGetResourceMetric".into(),
                    format!("the HPA was unable to compute the replica count: failed to get {} utilization: {msg}", res.name),
                ));
                continue;
            }
        };
        let average_value = res
            .target
            .average_value
            .as_ref()
            .and_then(|q| lean::quantity::to_f64(&q.0));
        let utilization = if res.target.type_ == "Utilization" {
            res.target.average_utilization
        } else {
            None
        };
        match resource_replicas(
            current,
            &pods,
            &sample,
            &res.name,
            utilization,
            average_value,
        ) {
            Ok(p) => {
                statuses.push(p.status.clone());
                if best.as_ref().is_none_or(|b| p.replicas > b.replicas) {
                    best = Some(p);
                }
            }
            Err(e) => {
                let msg = format!("failed to get {} utilization: {e}", res.name);
                ctx.event(
                    &reference,
                    true,
                    "FailedGetResourceMetric",
                    "GetResourceMetric",
                    msg.clone(),
                )
                .await;
                failure.get_or_insert((
                    "FailedGetResourceMetric".into(),
                    format!("the HPA was unable to compute the replica count: {msg}"),
                ));
            }
        }
    }
    let Some(best) = best else {
        let (reason, message) = failure.unwrap_or((
            "FailedGetResourceMetric".into(),
            "the HPA was unable to compute the replica count".into(),
        ));
        ctx.event(
            &reference,
            true,
            "FailedComputeMetricsReplicas",
            "ComputeMetricsReplicas",
            format!(
                "invalid metrics ({} invalid out of {}), first error is: {message}",
                metrics.len(),
                metrics.len()
            ),
        )
        .await;
        write_status(&ctx, &hpa, json!({ "currentReplicas": status_replicas, "desiredReplicas": hpa.status.as_ref().map_or(current, |s| s.desired_replicas), "currentMetrics": statuses }),
            vec![able_get, condition("ScalingActive", false, &reason, &message)]).await?;
        return Ok(Some(period));
    };
    let active = condition(
        "ScalingActive",
        true,
        "ValidMetricFound",
        &format!(
            "the HPA was able to successfully calculate a replica count from {}",
            best.description
        ),
    );
    let norm = normalize(&hpa, &key, &history, current, best.replicas, default_down);
    let mut status = json!({ "currentReplicas": status_replicas, "desiredReplicas": norm.replicas, "currentMetrics": statuses });
    let mut able = norm.able;
    if norm.replicas != current {
        let reason = if norm.replicas > current {
            format!("{} above target", best.description)
        } else {
            "All metrics below target".to_owned()
        };
        let mut rescaled = scale.clone();
        rescaled.spec.get_or_insert_with(Default::default).replicas = Some(norm.replicas);
        match api
            .replace_scale(&target_name, &PostParams::default(), &rescaled)
            .await
        {
            Ok(_) => {
                tracing::info!(hpa = %key, target = %target_desc, from = current, to = norm.replicas, %reason, "rescaled");
                ctx.event(
                    &reference,
                    false,
                    "SuccessfulRescale",
                    "SuccessfulRescale",
                    format!("New size: {}; reason: {reason}", norm.replicas),
                )
                .await;
                history
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .events
                    .entry(key.clone())
                    .or_default()
                    .push((Instant::now(), norm.replicas - current));
                able = condition(
                    "AbleToScale",
                    true,
                    "SucceededRescale",
                    &format!(
                        "the HPA controller was able to update the target scale to {}",
                        norm.replicas
                    ),
                );
                let now = jiff::Timestamp::now();
                status["lastScaleTime"] = json!(
                    jiff::Timestamp::from_second(now.as_second())
                        .map_or_else(|_| now.to_string(), |t| t.to_string())
                );
            }
            Err(e) => {
                let msg = match e {
                    kube::Error::Api(s) => s.message,
                    other => other.to_string(),
                };
                ctx.event(
                    &reference,
                    true,
                    "FailedRescale",
                    "Rescale",
                    format!(
                        "New size: {}; reason: {reason}; error: {msg}",
                        norm.replicas
                    ),
                )
                .await;
                able = condition(
                    "AbleToScale",
                    false,
                    "FailedUpdateScale",
                    &format!("the HPA controller was unable to update the target scale: {msg}"),
                );
                status["desiredReplicas"] = json!(current);
            }
        }
    }
    write_status(&ctx, &hpa, status, vec![able, active, norm.limited]).await?;
    Ok(Some(period))
}

/// Runs until `shutdown`.
async fn run(ctx: Context, shutdown: CancellationToken) -> anyhow::Result<()> {
    let queue = Queue::default();
    let q = queue.clone();
    let hpas = ctx
        .informers
        .watch::<HorizontalPodAutoscaler>(
            // New HPAs and spec changes are evaluated at once; each HPA is otherwise
            // evaluated once per sync period (its own status writes do not requeue it, as
            // upstream's rate limiter of one resync period). The spec is compared: v1.33's
            // HPA strategy sets no `metadata.generation`.
            Box::new(
                move |old: Option<&HorizontalPodAutoscaler>,
                      new: Option<&HorizontalPodAutoscaler>| {
                    if let Some(h) = new
                        && old.is_none_or(|o| o.spec != h.spec)
                    {
                        q.add(informer::key(h));
                    }
                },
            ),
            &shutdown,
        )
        .await;
    tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        r = hpas.wait_until_ready() => r?,
    }
    for h in hpas.state() {
        queue.add(informer::key(h.as_ref()));
    }
    let history: Shared = Arc::default();
    let c = ctx.clone();
    run_workers(&ctx, &queue, 5, &shutdown, move |key| {
        sync(c.clone(), hpas.clone(), Arc::clone(&history), key)
    })
    .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, cpu: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "spec": { "containers": [{ "name": "c", "resources": { "requests": { "cpu": cpu } } }] },
            "status": { "phase": "Running" },
        }))
        .unwrap()
    }

    #[test]
    fn utilization_scales_by_the_usage_ratio_outside_the_tolerance() {
        let pods = vec![pod("a", "200m"), pod("b", "200m")];
        let sample = |u: f64| Sample {
            usage: [("a".to_owned(), u), ("b".to_owned(), u)].into(),
        };
        // 150 % of request against a 50 % target: 3 × 2 pods.
        let p = resource_replicas(2, &pods, &sample(0.3), "cpu", Some(50), None).unwrap();
        assert_eq!(p.replicas, 6);
        assert_eq!(p.status["resource"]["current"]["averageUtilization"], 150);
        // 54 % against 50 %: within the tolerance.
        let p = resource_replicas(2, &pods, &sample(0.108), "cpu", Some(50), None).unwrap();
        assert_eq!(p.replicas, 2);
        // Average value: 300m each against 100m.
        let p = resource_replicas(2, &pods, &sample(0.3), "cpu", None, Some(0.1)).unwrap();
        assert_eq!(p.replicas, 6);
        assert_eq!(p.status["resource"]["current"]["averageValue"], "300m");
    }

    #[test]
    fn quantities_and_policy_limits() {
        assert_eq!(lean::quantity::to_f64("250000000n"), Some(0.25));
        assert_eq!(milli_quantity(0.25), "250m");
        let r = HPAScalingRules {
            select_policy: Some("Max".into()),
            policies: Some(vec![
                k8s_openapi::api::autoscaling::v2::HPAScalingPolicy {
                    type_: "Percent".into(),
                    value: 100,
                    period_seconds: 15,
                },
                k8s_openapi::api::autoscaling::v2::HPAScalingPolicy {
                    type_: "Pods".into(),
                    value: 4,
                    period_seconds: 15,
                },
            ]),
            ..Default::default()
        };
        assert_eq!(policy_limit(&r, &[], 1, true), Some(5));
        assert_eq!(policy_limit(&r, &[], 10, true), Some(20));
    }
}
