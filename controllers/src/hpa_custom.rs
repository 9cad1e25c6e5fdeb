//! `Pods`, `Object` and `External` metrics of the HPA controller (upstream's
//! `GetMetricReplicas`, `GetObjectMetricReplicas`, `GetExternalMetricReplicas` with the
//! custom and external metrics clients): values read through the aggregator from
//! `custom.metrics.k8s.io` (its preferred version, found by discovery; none registered is
//! upstream's `no custom metrics API (custom.metrics.k8s.io) registered`) and
//! `external.metrics.k8s.io/v1beta1`; proposals within the tolerance keep the current count.
//! Failures carry upstream's condition reasons (`FailedGetPodsMetric`,
//! `FailedGetObjectMetric`, `FailedGetExternalMetric`) and messages.

use k8s_openapi::api::autoscaling::v2::{MetricSpec, MetricTarget};
use serde_json::{Value, json};

use super::{Proposal, TOLERANCE, milli_quantity};

/// A failed metric: condition/event reason and message.
pub(super) type Failure = (&'static str, String);

/// `GET path` through the API server: the JSON body, or the error as client-go prints it.
async fn get(client: &kube::Client, path: &str) -> Result<Value, (u16, String)> {
    let req = http::Request::get(path)
        .body(Vec::new())
        .map_err(|e| (0, e.to_string()))?;
    client.request::<Value>(req).await.map_err(|e| match e {
        kube::Error::Api(s) => (s.code, s.message),
        other => (0, other.to_string()),
    })
}

/// Percent-encoding of a query value.
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// A label selector (`metav1.LabelSelector` JSON) as a query string selector.
fn selector_string(sel: &Value) -> String {
    let mut parts: Vec<String> = sel["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
        .collect();
    for e in sel["matchExpressions"].as_array().into_iter().flatten() {
        let key = e["key"].as_str().unwrap_or("");
        let values: Vec<&str> = e["values"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        match e["operator"].as_str().unwrap_or("") {
            "In" => parts.push(format!("{key} in ({})", values.join(","))),
            "NotIn" => parts.push(format!("{key} notin ({})", values.join(","))),
            "Exists" => parts.push(key.to_owned()),
            "DoesNotExist" => parts.push(format!("!{key}")),
            _ => {}
        }
    }
    parts.join(",")
}

/// The custom metrics API's preferred version.
async fn custom_version(client: &kube::Client) -> Result<String, String> {
    match get(client, "/apis/custom.metrics.k8s.io").await {
        Ok(group) => group["preferredVersion"]["version"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| "no custom metrics API (custom.metrics.k8s.io) registered".to_owned()),
        Err((404, _)) => Err("no custom metrics API (custom.metrics.k8s.io) registered".into()),
        Err((_, e)) => Err(e),
    }
}

/// The values of a `MetricValueList`/`ExternalMetricValueList`.
fn values(list: &Value) -> Vec<f64> {
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["value"].as_str().and_then(lean::quantity::to_f64))
        .collect()
}

/// The plural resource of a kind (the lower-cased kind, English plural).
fn plural(kind: &str) -> String {
    let k = kind.to_ascii_lowercase();
    if k.ends_with('s') || k.ends_with('x') || k.ends_with("ch") || k.ends_with("sh") {
        format!("{k}es")
    } else if let Some(stem) = k
        .strip_suffix('y')
        .filter(|s| !s.ends_with(['a', 'e', 'o', 'u']))
    {
        format!("{stem}ies")
    } else {
        format!("{k}s")
    }
}

/// A quantity of a target (`value` or `averageValue`).
fn target_quantity(t: &MetricTarget, average: bool) -> Option<f64> {
    let q = if average { &t.average_value } else { &t.value };
    q.as_ref().and_then(|q| lean::quantity::to_f64(&q.0))
}

/// Replicas for a usage ratio over `base` pods, the tolerance kept.
fn by_ratio(current: i32, ratio: f64, base: i32) -> i32 {
    if (1.0 - ratio).abs() <= TOLERANCE {
        current
    } else {
        (ratio * f64::from(base)).ceil() as i32
    }
}

/// Replicas for a total `usage` against a per-pod `average` target (upstream's
/// `AverageValue` of Object and External metrics).
fn by_average(current: i32, usage: f64, average: f64) -> i32 {
    let ratio = usage / (average * f64::from(current.max(1)));
    if (1.0 - ratio).abs() <= TOLERANCE {
        current
    } else {
        (usage / average).ceil() as i32
    }
}

/// Proposes replicas from one `Pods`, `Object` or `External` metric; `None` for other types.
pub(super) async fn proposal(
    client: &kube::Client,
    ns: &str,
    selector: &str,
    current: i32,
    ready_pods: i32,
    m: &MetricSpec,
) -> Option<Result<Proposal, Failure>> {
    match m.type_.as_str() {
        "Pods" => {
            let p = m.pods.as_ref()?;
            Some(pods(client, ns, selector, current, p).await)
        }
        "Object" => {
            let o = m.object.as_ref()?;
            Some(object(client, ns, current, ready_pods, o).await)
        }
        "External" => {
            let e = m.external.as_ref()?;
            Some(external(client, ns, current, ready_pods, e).await)
        }
        _ => None,
    }
}

async fn pods(
    client: &kube::Client,
    ns: &str,
    selector: &str,
    current: i32,
    p: &k8s_openapi::api::autoscaling::v2::PodsMetricSource,
) -> Result<Proposal, Failure> {
    let name = &p.metric.name;
    let fail = |e: String| {
        (
            "FailedGetPodsMetric",
            format!("unable to get metric {name}: {e}"),
        )
    };
    let version = custom_version(client).await.map_err(|e| {
        fail(format!(
            "unable to fetch metrics from custom metrics API: {e}"
        ))
    })?;
    let mut path = format!(
        "/apis/custom.metrics.k8s.io/{version}/namespaces/{ns}/pods/*/{name}?labelSelector={}",
        encode(selector)
    );
    if let Some(sel) = &p.metric.selector {
        let sel = serde_json::to_value(sel).unwrap_or(Value::Null);
        path.push_str(&format!(
            "&metricLabelSelector={}",
            encode(&selector_string(&sel))
        ));
    }
    let list = get(client, &path).await.map_err(|(_, e)| {
        fail(format!(
            "unable to fetch metrics from custom metrics API: {e}"
        ))
    })?;
    let vals = values(&list);
    if vals.is_empty() {
        return Err(fail(
            "unable to fetch metrics from custom metrics API: no metrics returned from custom metrics API".into(),
        ));
    }
    let target = target_quantity(&p.target, true).unwrap_or(0.0);
    if target <= 0.0 {
        return Err(fail("invalid target averageValue".into()));
    }
    let average = vals.iter().sum::<f64>() / vals.len() as f64;
    let count = i32::try_from(vals.len()).unwrap_or(i32::MAX);
    Ok(Proposal {
        replicas: by_ratio(current, average / target, count),
        status: json!({ "type": "Pods", "pods": {
            "metric": serde_json::to_value(&p.metric).unwrap_or(Value::Null),
            "current": { "averageValue": milli_quantity(average) } } }),
        description: format!("pods metric {name}"),
    })
}

async fn object(
    client: &kube::Client,
    ns: &str,
    current: i32,
    ready_pods: i32,
    o: &k8s_openapi::api::autoscaling::v2::ObjectMetricSource,
) -> Result<Proposal, Failure> {
    let name = &o.metric.name;
    let obj = &o.described_object;
    let fail = |e: String| {
        (
            "FailedGetObjectMetric",
            format!(
                "unable to get metric {name}: {} on {ns} {}/{e}",
                obj.kind, obj.name
            ),
        )
    };
    let version = custom_version(client).await.map_err(|e| {
        fail(format!(
            "unable to fetch metrics from custom metrics API: {e}"
        ))
    })?;
    let group = obj
        .api_version
        .as_deref()
        .and_then(|v| v.split_once('/'))
        .map(|(g, _)| format!("{g}/"))
        .unwrap_or_default();
    let resource = if group.is_empty() {
        plural(&obj.kind)
    } else {
        format!("{}.{}", plural(&obj.kind), group.trim_end_matches('/'))
    };
    let mut path = format!(
        "/apis/custom.metrics.k8s.io/{version}/namespaces/{ns}/{resource}/{}/{name}",
        obj.name
    );
    if let Some(sel) = &o.metric.selector {
        let sel = serde_json::to_value(sel).unwrap_or(Value::Null);
        path.push_str(&format!(
            "?metricLabelSelector={}",
            encode(&selector_string(&sel))
        ));
    }
    let list = get(client, &path).await.map_err(|(_, e)| {
        fail(format!(
            "unable to fetch metrics from custom metrics API: {e}"
        ))
    })?;
    let value = match list["kind"].as_str() {
        Some("MetricValue") => list["value"].as_str().and_then(lean::quantity::to_f64),
        _ => values(&list).first().copied(),
    }
    .ok_or_else(|| {
        fail("unable to fetch metrics from custom metrics API: no metrics returned".into())
    })?;
    proposal_for_value(
        current,
        ready_pods,
        value,
        &o.target,
        "Object",
        json!({ "describedObject": serde_json::to_value(obj).unwrap_or(Value::Null),
                "metric": serde_json::to_value(&o.metric).unwrap_or(Value::Null) }),
        format!("{} metric {name}", obj.kind),
    )
    .ok_or_else(|| fail("invalid target".into()))
}

async fn external(
    client: &kube::Client,
    ns: &str,
    current: i32,
    ready_pods: i32,
    e: &k8s_openapi::api::autoscaling::v2::ExternalMetricSource,
) -> Result<Proposal, Failure> {
    let name = &e.metric.name;
    let sel = e
        .metric
        .selector
        .as_ref()
        .map(|s| serde_json::to_value(s).unwrap_or(Value::Null));
    let shown = sel.as_ref().map_or("nil".to_owned(), selector_string);
    let fail = |err: String| {
        (
            "FailedGetExternalMetric",
            format!("unable to get external metric {ns}/{name}/{shown}: {err}"),
        )
    };
    let mut path = format!("/apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{name}");
    if let Some(sel) = &sel {
        path.push_str(&format!("?labelSelector={}", encode(&selector_string(sel))));
    }
    let list = get(client, &path).await.map_err(|(_, err)| {
        fail(format!(
            "unable to fetch metrics from external metrics API: {err}"
        ))
    })?;
    let vals = values(&list);
    if vals.is_empty() {
        return Err(fail(
            "unable to fetch metrics from external metrics API: no metrics returned from external metrics API".into(),
        ));
    }
    let total: f64 = vals.iter().sum();
    proposal_for_value(
        current,
        ready_pods,
        total,
        &e.target,
        "External",
        json!({ "metric": serde_json::to_value(&e.metric).unwrap_or(Value::Null) }),
        format!("external metric {name}"),
    )
    .ok_or_else(|| fail("invalid target".into()))
}

/// A proposal from one object-level `value` against a `Value` or `AverageValue` target.
fn proposal_for_value(
    current: i32,
    ready_pods: i32,
    value: f64,
    target: &MetricTarget,
    kind: &str,
    mut source: Value,
    description: String,
) -> Option<Proposal> {
    let field = kind.to_ascii_lowercase();
    let (replicas, current_status) = if target.type_ == "AverageValue" {
        let avg = target_quantity(target, true).filter(|t| *t > 0.0)?;
        let per_pod = value / f64::from(current.max(1));
        (
            by_average(current, value, avg),
            json!({ "averageValue": milli_quantity(per_pod) }),
        )
    } else {
        let t = target_quantity(target, false).filter(|t| *t > 0.0)?;
        (
            by_ratio(current, value / t, ready_pods.max(1)),
            json!({ "value": milli_quantity(value) }),
        )
    };
    source["current"] = current_status;
    Some(Proposal {
        replicas,
        status: json!({ "type": kind, field: source }),
        description,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratios_averages_plurals_and_selectors() {
        assert_eq!(by_ratio(3, 1.05, 3), 3);
        assert_eq!(by_ratio(3, 2.0, 3), 6);
        assert_eq!(by_average(2, 1000.0, 100.0), 10);
        assert_eq!(by_average(10, 1000.0, 100.0), 10);
        assert_eq!(plural("Service"), "services");
        assert_eq!(plural("Ingress"), "ingresses");
        assert_eq!(plural("Policy"), "policies");
        assert_eq!(
            selector_string(&json!({ "matchLabels": { "a": "b" },
                "matchExpressions": [{ "key": "c", "operator": "In", "values": ["d", "e"] }] })),
            "a=b,c in (d,e)"
        );
        let target: MetricTarget =
            serde_json::from_value(json!({ "type": "Value", "value": "10" })).unwrap();
        let p = proposal_for_value(
            2,
            2,
            30.0,
            &target,
            "External",
            json!({ "metric": { "name": "q" } }),
            "x".into(),
        )
        .unwrap();
        assert_eq!(p.replicas, 6);
        assert_eq!(p.status["external"]["current"]["value"], "30");
    }
}
