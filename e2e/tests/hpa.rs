//! The HorizontalPodAutoscaler controller against the metrics API (through the aggregator):
//! `kubectl autoscale deployment web --cpu-percent=50 --min=1 --max=10` scales up when the
//! test raises the pods' simulated usage (the `metrics.capstan.io/cpu` annotation) and back
//! down after the down-scale stabilization window, shortened for the test by
//! `--horizontal-pod-autoscaler-downscale-stabilization` (and the sync period by
//! `--horizontal-pod-autoscaler-sync-period`).

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok, wait_for};
use serde_json::Value;

const WEB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 1
  selector:
    matchLabels: { app: web }
  template:
    metadata:
      labels: { app: web }
    spec:
      containers:
      - name: nginx
        image: nginx
        resources:
          requests: { cpu: 200m, memory: 64Mi }
"#;

/// The HPA's condition `kind`: (status, reason, message).
fn condition(hpa: &Value, kind: &str) -> Option<(String, String, String)> {
    let c = hpa["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)?;
    Some((
        c["status"].as_str()?.to_owned(),
        c["reason"].as_str()?.to_owned(),
        c["message"].as_str()?.to_owned(),
    ))
}

/// Annotates every running `web` pod with a CPU usage.
fn set_usage(s: &ServerProcess, cpu: &str) {
    ok(
        s,
        &[
            "annotate",
            "pods",
            "-l",
            "app=web",
            "--overwrite",
            &format!("metrics.capstan.io/cpu={cpu}"),
        ],
    );
}

#[test]
fn kubectl_autoscale_scales_a_deployment_up_on_load_and_down_after_the_window() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &[
            "--horizontal-pod-autoscaler-sync-period=2s",
            "--horizontal-pod-autoscaler-downscale-stabilization=10s",
        ],
    )
    .expect("server starts");
    apply(&s, WEB);
    wait_for(&s, 60, "metrics for web", || {
        let (done, out, _) = s
            .kubectl(&["top", "pods", "-l", "app=web"])
            .expect("kubectl");
        (done && out.lines().count() == 2).then_some(())
    });

    let out = ok(
        &s,
        &[
            "autoscale",
            "deployment",
            "web",
            "--cpu-percent=50",
            "--min=1",
            "--max=10",
        ],
    );
    assert!(
        out.contains("horizontalpodautoscaler.autoscaling/web autoscaled"),
        "{out}"
    );

    // Idle at half the request = 50 %: within the tolerance, one replica, metric valid.
    let hpa = wait_for(&s, 30, "the HPA's first evaluation", || {
        let hpa = json(&s, &["get", "hpa", "web", "-o", "json"]);
        condition(&hpa, "ScalingActive")
            .filter(|c| c.0 == "True")
            .map(|_| hpa)
    });
    assert_eq!(
        condition(&hpa, "ScalingActive").map(|c| c.2),
        Some("the HPA was able to successfully calculate a replica count from cpu resource utilization (percentage of request)".to_owned())
    );
    assert_eq!(
        hpa["status"]["currentMetrics"][0]["resource"]["current"]["averageUtilization"],
        50
    );
    assert_eq!(hpa["status"]["desiredReplicas"], 1);
    let table = ok(&s, &["get", "hpa", "web"]);
    assert!(table.contains("cpu: 50%/50%"), "{table}");

    // Load: 300m of a 200m request = 150 % against 50 %: three times the pods.
    set_usage(&s, "300m");
    let hpa = wait_for(&s, 60, "scale up to 3", || {
        let hpa = json(&s, &["get", "hpa", "web", "-o", "json"]);
        (hpa["status"]["desiredReplicas"].as_i64() >= Some(3)).then_some(hpa)
    });
    assert!(hpa["status"]["lastScaleTime"].is_string(), "{hpa}");
    let d = json(&s, &["get", "deployment", "web", "-o", "json"]);
    assert!(d["spec"]["replicas"].as_i64() >= Some(3), "{d}");
    let events = ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector=involvedObject.name=web,involvedObject.kind=HorizontalPodAutoscaler",
        ],
    );
    assert!(
        events.contains("SuccessfulRescale")
            && events.contains(
                "New size: 3; reason: cpu resource utilization (percentage of request) above target"
            ),
        "{events}"
    );

    // The new pods idle at 50 %, the old one at 150 %: average 83 % → still above target
    // (5 replicas), limited to max 10 only if it kept growing; set all pods high to hit max.
    wait_for(&s, 60, "three running web pods", || {
        let out = ok(
            &s,
            &[
                "get",
                "pods",
                "-l",
                "app=web",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ],
        );
        (out.lines().count() >= 3).then_some(())
    });
    set_usage(&s, "2");
    let hpa = wait_for(&s, 60, "scale up limited to max 10", || {
        let hpa = json(&s, &["get", "hpa", "web", "-o", "json"]);
        (hpa["status"]["desiredReplicas"] == 10).then_some(hpa)
    });
    let limited = condition(&hpa, "ScalingLimited").expect("ScalingLimited");
    assert_eq!(limited.0, "True", "{limited:?}");
    assert!(
        limited.1 == "TooManyReplicas" || limited.1 == "ScaleUpLimit",
        "{limited:?}"
    );

    // Load gone: the recommendation drops at once, the scale only after the window.
    wait_for(&s, 90, "ten running web pods", || {
        let out = ok(
            &s,
            &[
                "get",
                "pods",
                "-l",
                "app=web",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ],
        );
        (out.lines().count() >= 10).then_some(())
    });
    // Idle to nothing: 0 replicas proposed, held at the minimum.
    set_usage(&s, "0");
    let stabilized = wait_for(&s, 30, "down-scale stabilized", || {
        let hpa = json(&s, &["get", "hpa", "web", "-o", "json"]);
        condition(&hpa, "AbleToScale").filter(|c| c.1 == "ScaleDownStabilized")
    });
    assert_eq!(stabilized.0, "True");
    let d = json(&s, &["get", "deployment", "web", "-o", "json"]);
    assert_eq!(d["spec"]["replicas"], 10, "not before the window");
    let hpa = wait_for(&s, 90, "scale down to the minimum", || {
        let hpa = json(&s, &["get", "hpa", "web", "-o", "json"]);
        (hpa["status"]["desiredReplicas"] == 1).then_some(hpa)
    });
    let limited = condition(&hpa, "ScalingLimited").expect("ScalingLimited");
    assert_eq!(
        (limited.0.as_str(), limited.1.as_str()),
        ("True", "TooFewReplicas"),
        "{limited:?}"
    );
    let events = ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector=involvedObject.name=web,involvedObject.kind=HorizontalPodAutoscaler",
        ],
    );
    assert!(
        events.contains("New size: 1; reason: All metrics below target"),
        "{events}"
    );
}

#[test]
fn an_hpa_without_metrics_or_target_reports_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--horizontal-pod-autoscaler-sync-period=2s"],
    )
    .expect("server starts");
    ok(&s, &["create", "deployment", "norequests", "--image=nginx"]);
    ok(
        &s,
        &[
            "autoscale",
            "deployment",
            "norequests",
            "--cpu-percent=50",
            "--max=3",
        ],
    );
    let hpa = wait_for(&s, 60, "ScalingActive False", || {
        let hpa = json(&s, &["get", "hpa", "norequests", "-o", "json"]);
        condition(&hpa, "ScalingActive")
            .filter(|c| c.0 == "False")
            .map(|c| (hpa, c))
    });
    assert_eq!(hpa.1.1, "FailedGetResourceMetric", "{:?}", hpa.1);
    assert!(hpa.1.2.contains("missing request for cpu"), "{:?}", hpa.1);

    apply(
        &s,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: ghost\n  namespace: default\nspec:\n  scaleTargetRef: { apiVersion: apps/v1, kind: Deployment, name: ghost }\n  maxReplicas: 3\n",
    );
    let able = wait_for(&s, 30, "AbleToScale False", || {
        let hpa = json(&s, &["get", "hpa", "ghost", "-o", "json"]);
        condition(&hpa, "AbleToScale").filter(|c| c.0 == "False")
    });
    assert_eq!(able.1, "FailedGetScale");
    assert!(
        able.2
            .starts_with("the HPA controller was unable to get the target's current scale"),
        "{able:?}"
    );
}

const DB: &str = r#"apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
  namespace: default
spec:
  serviceName: db
  replicas: 1
  selector:
    matchLabels: { app: db }
  template:
    metadata:
      labels: { app: db }
    spec:
      containers:
      - name: main
        image: busybox
        resources:
          requests: { cpu: 100m, memory: 32Mi }
"#;

#[test]
fn a_statefulset_scales_and_custom_metrics_without_an_api_report_upstreams_reasons() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--horizontal-pod-autoscaler-sync-period=2s"],
    )
    .expect("server starts");
    apply(&s, DB);
    wait_for(&s, 60, "metrics for db", || {
        let (done, out, _) = s
            .kubectl(&["top", "pods", "-l", "app=db"])
            .expect("kubectl");
        (done && out.lines().count() == 2).then_some(())
    });
    let out = ok(
        &s,
        &[
            "autoscale",
            "statefulset",
            "db",
            "--cpu-percent=50",
            "--max=4",
        ],
    );
    assert!(out.contains("autoscaled"), "{out}");
    // 150m of a 100m request = 150 % against 50 %: three replicas (the scale subresource of
    // the StatefulSet), its pods created in order.
    ok(
        &s,
        &[
            "annotate",
            "pods",
            "-l",
            "app=db",
            "--overwrite",
            "metrics.capstan.io/cpu=150m",
        ],
    );
    let sts = wait_for(&s, 60, "the StatefulSet scaled to 3", || {
        let sts = json(&s, &["get", "statefulset", "db", "-o", "json"]);
        (sts["spec"]["replicas"] == 3).then_some(sts)
    });
    assert_eq!(sts["metadata"]["name"], "db");
    let hpa = json(&s, &["get", "hpa", "db", "-o", "json"]);
    assert_eq!(
        condition(&hpa, "AbleToScale").map(|c| c.1),
        Some("SucceededRescale".to_owned())
    );
    wait_for(&s, 60, "pod db-2", || {
        let (found, _, _) = s.kubectl(&["get", "pod", "db-2"]).expect("kubectl");
        found.then_some(())
    });

    // Pods, Object and External metrics with no custom or external metrics API registered:
    // ScalingActive False with upstream's reasons and messages.
    let hpa = |name: &str, metric: &str| {
        format!(
            "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  scaleTargetRef: {{ apiVersion: apps/v1, kind: StatefulSet, name: db }}\n  maxReplicas: 4\n  metrics:\n{metric}"
        )
    };
    apply(
        &s,
        &hpa(
            "by-pods",
            "  - type: Pods\n    pods:\n      metric: { name: http_requests }\n      target: { type: AverageValue, averageValue: \"10\" }\n",
        ),
    );
    apply(
        &s,
        &hpa(
            "by-object",
            "  - type: Object\n    object:\n      describedObject: { apiVersion: v1, kind: Service, name: db }\n      metric: { name: requests-per-second }\n      target: { type: Value, value: \"100\" }\n",
        ),
    );
    apply(
        &s,
        &hpa(
            "by-external",
            "  - type: External\n    external:\n      metric: { name: queue_messages }\n      target: { type: AverageValue, averageValue: \"30\" }\n",
        ),
    );
    let inactive = |name: &str| {
        wait_for(&s, 30, &format!("{name} ScalingActive False"), || {
            let hpa = json(&s, &["get", "hpa", name, "-o", "json"]);
            condition(&hpa, "ScalingActive").filter(|c| c.0 == "False")
        })
    };
    let pods = inactive("by-pods");
    assert_eq!(
        (pods.1.as_str(), pods.2.as_str()),
        (
            "FailedGetPodsMetric",
            "the HPA was unable to compute the replica count: unable to get metric http_requests: unable to fetch metrics from custom metrics API: no custom metrics API (custom.metrics.k8s.io) registered"
        )
    );
    let object = inactive("by-object");
    assert_eq!(
        (object.1.as_str(), object.2.as_str()),
        (
            "FailedGetObjectMetric",
            "the HPA was unable to compute the replica count: unable to get metric requests-per-second: Service on default db/unable to fetch metrics from custom metrics API: no custom metrics API (custom.metrics.k8s.io) registered"
        )
    );
    let external = inactive("by-external");
    assert_eq!(external.1, "FailedGetExternalMetric", "{external:?}");
    assert!(
        external.2.starts_with(
            "the HPA was unable to compute the replica count: unable to get external metric default/queue_messages/nil: unable to fetch metrics from external metrics API: "
        ),
        "{external:?}"
    );
    let events = ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector=involvedObject.name=by-pods",
        ],
    );
    assert!(events.contains("FailedGetPodsMetric"), "{events}");
}

/// A custom metrics adapter (`custom.metrics.k8s.io/v1beta2`, HTTPS with a self-signed
/// certificate, registered with `insecureSkipTLSVerify`): every pod of the selector reports
/// `http_requests` = 30. Returns its port; it serves until the runtime is dropped.
fn custom_metrics_adapter(rt: &tokio::runtime::Runtime) -> u16 {
    use std::sync::Arc;
    let cert = rcgen::generate_simple_self_signed(vec!["adapter.custom-metrics.svc".to_owned()])
        .expect("cert");
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).expect("key");
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(vec![cert.cert.der().clone()], key)
    .expect("config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = rt
        .block_on(tokio::net::TcpListener::bind(("127.0.0.1", 0)))
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    rt.spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(|req: hyper::Request<hyper::body::Incoming>| async move {
                    let path = req.uri().path().to_owned();
                    let gv = "/apis/custom.metrics.k8s.io/v1beta2";
                    let body = if path == gv {
                        serde_json::json!({ "kind": "APIResourceList", "apiVersion": "v1",
                            "groupVersion": "custom.metrics.k8s.io/v1beta2",
                            "resources": [{ "name": "pods/http_requests", "singularName": "",
                                "namespaced": true, "kind": "MetricValueList", "verbs": ["get"] }] })
                    } else if path.starts_with(&format!("{gv}/namespaces/default/pods/")) && path.ends_with("/http_requests") {
                        serde_json::json!({ "kind": "MetricValueList",
                            "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
                            "items": [{ "describedObject": { "kind": "Pod", "namespace": "default", "name": "db-0", "apiVersion": "/v1" },
                                "metric": { "name": "http_requests", "selector": null },
                                "timestamp": "2026-01-01T00:00:00Z", "value": "30" }] })
                    } else {
                        serde_json::json!({ "kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "NotFound", "code": 404, "message": "not found" })
                    };
                    let code = if body["kind"] == "Status" { 404 } else { 200 };
                    Ok::<_, std::convert::Infallible>(
                        hyper::Response::builder()
                            .status(code)
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(hyper::body::Bytes::from(body.to_string())))
                            .expect("response"),
                    )
                });
                let _ = hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

#[test]
fn a_pods_metric_from_a_registered_custom_metrics_api_scales_the_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--horizontal-pod-autoscaler-sync-period=2s"],
    )
    .expect("server starts");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let port = custom_metrics_adapter(&rt);
    apply(
        &s,
        &format!(
            r#"apiVersion: v1
kind: Namespace
metadata:
  name: custom-metrics
---
apiVersion: v1
kind: Service
metadata:
  name: adapter
  namespace: custom-metrics
spec:
  ports:
  - name: https
    port: 443
    targetPort: {port}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: adapter-1
  namespace: custom-metrics
  labels:
    kubernetes.io/service-name: adapter
addressType: IPv4
ports:
- name: https
  port: {port}
  protocol: TCP
endpoints:
- addresses: ["127.0.0.1"]
  conditions:
    ready: true
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata:
  name: v1beta2.custom.metrics.k8s.io
spec:
  group: custom.metrics.k8s.io
  version: v1beta2
  groupPriorityMinimum: 100
  versionPriority: 200
  insecureSkipTLSVerify: true
  service:
    name: adapter
    namespace: custom-metrics
    port: 443
"#
        ),
    );
    wait_for(&s, 30, "the custom metrics APIService available", || {
        let out = ok(&s, &["get", "apiservice", "v1beta2.custom.metrics.k8s.io"]);
        out.contains("True").then_some(())
    });
    apply(&s, DB);
    apply(
        &s,
        "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata:\n  name: db\n  namespace: default\nspec:\n  scaleTargetRef: { apiVersion: apps/v1, kind: StatefulSet, name: db }\n  maxReplicas: 5\n  metrics:\n  - type: Pods\n    pods:\n      metric: { name: http_requests }\n      target: { type: AverageValue, averageValue: \"10\" }\n",
    );
    // 30 per pod against 10: three times the pods.
    let hpa = wait_for(&s, 60, "scaled on the pods metric", || {
        let hpa = json(&s, &["get", "hpa", "db", "-o", "json"]);
        (hpa["status"]["desiredReplicas"] == 3).then_some(hpa)
    });
    assert_eq!(
        condition(&hpa, "ScalingActive").map(|c| (c.1, c.2)),
        Some((
            "ValidMetricFound".to_owned(),
            "the HPA was able to successfully calculate a replica count from pods metric http_requests".to_owned()
        ))
    );
    assert_eq!(
        hpa["status"]["currentMetrics"][0]["pods"]["current"]["averageValue"],
        "30"
    );
    let sts = json(&s, &["get", "statefulset", "db", "-o", "json"]);
    assert_eq!(sts["spec"]["replicas"], 3);
}
