//! The resource metrics API through the aggregator: `capstan server` runs its metrics server
//! (an extension API server of its own, registered by APIService `v1beta1.metrics.k8s.io`
//! through a Service and an EndpointSlice), and stock `kubectl top` reads it. Usage is
//! simulated: half of each container's request, or the pod's `metrics.capstan.io/cpu` and
//! `metrics.capstan.io/memory` annotations.

use e2e::cli::{apply, cluster, json, ok, wait_for};
use serde_json::Value;

const WORKLOADS: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  namespace: default
spec:
  replicas: 2
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
---
apiVersion: v1
kind: Pod
metadata:
  name: hot
  namespace: default
  labels: { app: hot }
  annotations:
    metrics.capstan.io/cpu: 750m
    metrics.capstan.io/memory: 300Mi
spec:
  containers:
  - name: main
    image: busybox
    resources:
      requests: { cpu: 500m, memory: 100Mi }
  - name: sidecar
    image: busybox
    resources:
      requests: { cpu: 250m, memory: 100Mi }
"#;

/// The columns of a `kubectl top` table row.
fn rows(out: &str) -> Vec<Vec<String>> {
    out.lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn kubectl_top_reads_the_metrics_api_through_the_aggregator() {
    let (_dir, s) = cluster();
    // The metrics server registered itself and the aggregator found it.
    wait_for(&s, 60, "v1beta1.metrics.k8s.io available", || {
        // Not found until the metrics server has registered it.
        let (found, out, _) = s
            .kubectl(&["get", "apiservice", "v1beta1.metrics.k8s.io"])
            .expect("kubectl");
        found.then_some(())?;
        out.contains("kube-system/metrics-server").then_some(())?;
        out.contains("True").then_some(out)
    });
    let svc = json(
        &s,
        &["get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "json"],
    );
    assert_eq!(svc["spec"]["insecureSkipTLSVerify"], true);
    let cond = &svc["status"]["conditions"][0];
    assert_eq!(
        (cond["reason"].as_str(), cond["message"].as_str()),
        (Some("Passed"), Some("all checks passed"))
    );

    apply(&s, WORKLOADS);
    wait_for(&s, 60, "three running pods", || {
        let out = ok(
            &s,
            &[
                "get",
                "pods",
                "--field-selector=status.phase=Running",
                "-o",
                "name",
            ],
        );
        (out.lines().count() == 3).then_some(())
    });

    // Nodes: upstream's columns, one row per node.
    let nodes = wait_for(&s, 30, "kubectl top nodes", || {
        let (done, out, _) = s.kubectl(&["top", "nodes"]).expect("kubectl");
        done.then_some(out)
    });
    let table = rows(&nodes);
    assert_eq!(
        table[0],
        ["NAME", "CPU(cores)", "CPU(%)", "MEMORY(bytes)", "MEMORY(%)"],
        "{nodes}"
    );
    let node_count = ok(&s, &["get", "nodes", "-o", "name"]).lines().count();
    assert_eq!(table.len() - 1, node_count, "{nodes}");
    // Overhead 50m plus the pods on the node, on the simulated nodes (the control-plane
    // Node, on by default, carries the control plane's mirror pods).
    let workers = ok(
        &s,
        &[
            "get",
            "nodes",
            "-l",
            "!node-role.kubernetes.io/control-plane",
            "-o",
            "name",
        ],
    );
    let workers: Vec<&str> = workers
        .lines()
        .filter_map(|l| l.strip_prefix("node/"))
        .collect();
    let total_mcpu: u64 = table[1..]
        .iter()
        .filter(|r| workers.contains(&r[0].as_str()))
        .map(|r| {
            r[1].trim_end_matches('m')
                .parse::<u64>()
                .expect("millicores")
        })
        .sum();
    assert_eq!(
        total_mcpu,
        50 * workers.len() as u64 + 100 + 100 + 750,
        "{nodes}"
    );

    // Pods in every namespace.
    let pods = ok(&s, &["top", "pods", "-A"]);
    let table = rows(&pods);
    assert_eq!(
        table[0],
        ["NAMESPACE", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{pods}"
    );
    let hot = table.iter().find(|r| r[1] == "hot").expect("hot listed");
    assert_eq!(
        (hot[2].as_str(), hot[3].as_str()),
        ("750m", "300Mi"),
        "{pods}"
    );
    let web: Vec<_> = table.iter().filter(|r| r[1].starts_with("web-")).collect();
    assert_eq!(web.len(), 2, "{pods}");
    for w in web {
        assert_eq!((w[2].as_str(), w[3].as_str()), ("100m", "32Mi"), "{pods}");
    }

    // Containers: the override shared by the requests (2:1 for CPU, 1:1 for memory).
    let containers = ok(&s, &["top", "pod", "hot", "--containers"]);
    let table = rows(&containers);
    assert_eq!(
        table[0],
        ["POD", "NAME", "CPU(cores)", "MEMORY(bytes)"],
        "{containers}"
    );
    assert!(
        table.contains(&vec![
            "hot".into(),
            "main".into(),
            "500m".into(),
            "150Mi".into()
        ]),
        "{containers}"
    );
    assert!(
        table.contains(&vec![
            "hot".into(),
            "sidecar".into(),
            "250m".into(),
            "150Mi".into()
        ]),
        "{containers}"
    );

    // Label selector and sorting.
    let web = ok(&s, &["top", "pods", "-l", "app=web"]);
    assert_eq!(rows(&web).len(), 3, "{web}");
    assert!(!web.contains("hot"), "{web}");
    let sorted = ok(&s, &["top", "pods", "--sort-by=cpu"]);
    assert_eq!(rows(&sorted)[1][0], "hot", "{sorted}");
    let sorted = ok(&s, &["top", "pods", "--sort-by=memory"]);
    assert_eq!(rows(&sorted)[1][0], "hot", "{sorted}");

    // The API itself: objects, a field selector, NotFound.
    let one: Value = serde_json::from_str(&ok(
        &s,
        &[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods/hot",
        ],
    ))
    .expect("json");
    assert_eq!(one["kind"], "PodMetrics");
    assert_eq!(one["containers"][0]["usage"]["cpu"], "500000000n");
    assert_eq!(one["metadata"]["labels"]["app"], "hot");
    let picked: Value = serde_json::from_str(&ok(
        &s,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods?fieldSelector=metadata.name%3Dhot"],
    ))
    .expect("json");
    assert_eq!(
        picked["items"].as_array().map(Vec::len),
        Some(1),
        "{picked}"
    );
    let (found, _, err) = s
        .kubectl(&[
            "get",
            "--raw",
            "/apis/metrics.k8s.io/v1beta1/nodes/no-such-node",
        ])
        .expect("kubectl");
    assert!(!found && err.contains("NotFound"), "{err}");
    let node_list: Value = serde_json::from_str(&ok(
        &s,
        &["get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes"],
    ))
    .expect("json");
    assert_eq!(node_list["kind"], "NodeMetricsList");

    // Raising the usage by annotation shows at once.
    ok(
        &s,
        &[
            "annotate",
            "pod",
            "hot",
            "--overwrite",
            "metrics.capstan.io/cpu=1500m",
        ],
    );
    let pods = ok(&s, &["top", "pod", "hot"]);
    assert!(rows(&pods)[1].contains(&"1500m".to_owned()), "{pods}");
}

/// GET `path` on the metrics server itself (its address from the EndpointSlice), as the
/// aggregator does: the front-proxy client certificate and `X-Remote-User: user` (group
/// `system:authenticated`); status code and body.
fn direct(s: &e2e::ServerProcess, user: &str, path: &str) -> (String, String) {
    let slices = json(
        s,
        &[
            "get",
            "endpointslices",
            "-n",
            "kube-system",
            "-l",
            "kubernetes.io/service-name=metrics-server",
            "-o",
            "json",
        ],
    );
    let slice = &slices["items"][0];
    let addr = slice["endpoints"][0]["addresses"][0]
        .as_str()
        .expect("address");
    let port = slice["ports"][0]["port"].as_u64().expect("port");
    let pki = s.data_dir.join("pki");
    let out = std::process::Command::new("curl")
        .args(["-s", "-k", "-w", "\n%{http_code}", "--cert"])
        .arg(pki.join("front-proxy-client.crt"))
        .arg("--key")
        .arg(pki.join("front-proxy-client.key"))
        .args([
            "-H",
            &format!("X-Remote-User: {user}"),
            "-H",
            "X-Remote-Group: system:authenticated",
        ])
        .arg(format!("https://{addr}:{port}{path}"))
        .output()
        .expect("curl");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or((&text, ""));
    (code.to_owned(), body.to_owned())
}

#[test]
fn the_metrics_server_asks_the_api_server_who_may_read_metrics() {
    let (_dir, s) = cluster();
    wait_for(&s, 60, "v1beta1.metrics.k8s.io available", || {
        let (found, out, _) = s
            .kubectl(&["get", "apiservice", "v1beta1.metrics.k8s.io"])
            .expect("kubectl");
        (found && out.contains("True")).then_some(out)
    });
    let nodes = "/apis/metrics.k8s.io/v1beta1/nodes";
    // A user without RBAC for nodes.metrics.k8s.io: 403 through kubectl …
    let (listed, _, err) = s
        .kubectl(&["top", "nodes", "--as", "carol"])
        .expect("kubectl");
    assert!(
        !listed
            && err.contains(
                "nodes.metrics.k8s.io is forbidden: User \"carol\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
            ),
        "{err}"
    );
    // … and from the metrics server itself, whatever the proxy lets through: it asked the
    // API server (SubjectAccessReview) rather than trusting the front proxy.
    let (code, body) = direct(&s, "carol", nodes);
    assert_eq!(code, "403", "{body}");
    let status: Value = serde_json::from_str(&body).expect("Status");
    assert_eq!(status["reason"], "Forbidden");
    assert_eq!(
        status["message"],
        "nodes.metrics.k8s.io is forbidden: User \"carol\" cannot list resource \"nodes\" in API group \"metrics.k8s.io\" at the cluster scope"
    );
    // Discovery is a non-resource request every authenticated user may make.
    let (code, body) = direct(&s, "carol", "/apis/metrics.k8s.io/v1beta1");
    assert_eq!(code, "200", "{body}");

    // Granted by RBAC (node metrics, and the nodes `kubectl top` lists too): both answer (the
    // denial is cached at most 10 s, as upstream).
    ok(
        &s,
        &[
            "create",
            "clusterrole",
            "node-metrics-reader",
            "--verb=get,list",
            "--resource=nodes.metrics.k8s.io,nodes",
        ],
    );
    ok(
        &s,
        &[
            "create",
            "clusterrolebinding",
            "carol-node-metrics",
            "--clusterrole=node-metrics-reader",
            "--user=carol",
        ],
    );
    let (_, body) = wait_for(&s, 30, "the metrics server allows carol", || {
        let (code, body) = direct(&s, "carol", nodes);
        (code == "200").then_some((code, body))
    });
    assert!(body.contains("NodeMetricsList"), "{body}");
    let top = wait_for(&s, 30, "kubectl top nodes as carol", || {
        let (listed, out, _) = s
            .kubectl(&["top", "nodes", "--as", "carol"])
            .expect("kubectl");
        listed.then_some(out)
    });
    assert!(top.starts_with("NAME"), "{top}");
    // Pods are still not carol's to read.
    let (code, _) = direct(&s, "carol", "/apis/metrics.k8s.io/v1beta1/pods");
    assert_eq!(code, "403");
}
