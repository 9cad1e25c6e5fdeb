//! Every version kube-apiserver v1.33 serves by default is served, as one stored object:
//! `autoscaling/v1` and `autoscaling/v2` HorizontalPodAutoscalers (the one kind with two GA
//! versions) read, write and watch the same objects, converted as upstream converts them
//! (v2-only fields in `autoscaling.alpha.kubernetes.io/*` annotations on the v1 side); both
//! versions are in discovery and OpenAPI; kubectl 1.27's `autoscale` (autoscaling/v1) works;
//! HPAs get upstream's defaults (`minReplicas: 1`, v2's behavior rules).

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::sync::mpsc;
use std::time::Duration;

use e2e::ServerProcess;
use e2e::cli::{json, ok};
use serde_json::{Value, json};

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn create(s: &ServerProcess, yaml: &str) {
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(yaml))
        .expect("kubectl runs");
    assert!(created, "kubectl create failed: {err}\n{yaml}");
}

fn annotation(hpa: &Value, key: &str) -> Value {
    let text = hpa["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_else(|| panic!("no {key} annotation: {hpa}"));
    serde_json::from_str(text).expect("annotation is JSON")
}

/// The resource at autoscaling/v1. (kubectl resolves a short name with a version, e.g.
/// `hpa.v1.autoscaling`, to the group's preferred version: its shortcut expander drops the
/// version, client-side, against any server.)
const V1: &str = "horizontalpodautoscalers.v1.autoscaling";
/// The resource at autoscaling/v2.
const V2: &str = "horizontalpodautoscalers.v2.autoscaling";

const V1_HPA: &str = "apiVersion: autoscaling/v1
kind: HorizontalPodAutoscaler
metadata: {name: from-v1}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 5
  targetCPUUtilizationPercentage: 50
";

const V2_HPA: &str = "apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: from-v2}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  maxReplicas: 6
  metrics:
  - type: Resource
    resource: {name: memory, target: {type: AverageValue, averageValue: 100Mi}}
  - type: Pods
    pods: {metric: {name: qps}, target: {type: AverageValue, averageValue: '10'}}
  behavior:
    scaleDown: {stabilizationWindowSeconds: 60}
";

#[test]
fn hpa_v1_and_v2_are_one_object_with_upstreams_defaults() {
    let (_dir, s) = server();

    // Written through v1, read through both.
    create(&s, V1_HPA);
    let v2 = json(&s, &["get", V2, "from-v1", "-o", "json"]);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["minReplicas"], 1, "minReplicas defaulted: {v2}");
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 50}}}])
    );
    assert!(v2["metadata"].get("annotations").is_none(), "{v2}");
    let v1 = json(&s, &["get", V1, "from-v1", "-o", "json"]);
    assert_eq!(v1["apiVersion"], "autoscaling/v1");
    assert_eq!(v1["spec"]["minReplicas"], 1);
    assert_eq!(v1["spec"]["maxReplicas"], 5);
    assert_eq!(v1["spec"]["targetCPUUtilizationPercentage"], 50);
    assert_eq!(v1["metadata"]["uid"], v2["metadata"]["uid"]);
    assert_eq!(
        v1["metadata"]["resourceVersion"],
        v2["metadata"]["resourceVersion"]
    );

    // The answer to a v1 write is the stored object read back at v1: a v1 HPA without a CPU
    // target comes back with the 80 % it implies, and v1's status.
    let (created, out, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-", "-o", "json"],
            Some(
                &V1_HPA
                    .replace("from-v1", "implied")
                    .replace("  targetCPUUtilizationPercentage: 50\n", ""),
            ),
        )
        .expect("kubectl runs");
    assert!(created, "{err}");
    let answer: Value = serde_json::from_str(&out).expect("JSON");
    assert_eq!(answer["apiVersion"], "autoscaling/v1");
    assert_eq!(
        answer["spec"]["targetCPUUtilizationPercentage"], 80,
        "{answer}"
    );
    assert_eq!(
        answer["status"],
        json!({"currentReplicas": 0, "desiredReplicas": 0})
    );
    ok(&s, &["delete", V1, "implied"]);

    // Written through v2 without minReplicas: defaulted, behavior filled in; read through v1
    // with the v2-only fields in upstream's annotations.
    create(&s, V2_HPA);
    let v2 = json(&s, &["get", V2, "from-v2", "-o", "json"]);
    assert_eq!(v2["spec"]["minReplicas"], 1, "{v2}");
    assert_eq!(
        v2["spec"]["behavior"],
        json!({
            "scaleDown": {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]},
            "scaleUp": {"stabilizationWindowSeconds": 0, "selectPolicy": "Max", "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15}]},
        }),
        "v2 behavior defaults"
    );
    let v1 = json(&s, &["get", V1, "from-v2", "-o", "json"]);
    assert!(
        v1["spec"].get("targetCPUUtilizationPercentage").is_none(),
        "{v1}"
    );
    assert_eq!(
        annotation(&v1, "autoscaling.alpha.kubernetes.io/metrics"),
        json!([
            {"type": "Resource", "resource": {"name": "memory", "targetAverageValue": "100Mi"}},
            {"type": "Pods", "pods": {"metricName": "qps", "targetAverageValue": "10"}},
        ])
    );
    let behavior = annotation(&v1, "autoscaling.alpha.kubernetes.io/behavior");
    assert_eq!(behavior["ScaleDown"]["StabilizationWindowSeconds"], 60);
    assert_eq!(behavior["ScaleUp"]["SelectPolicy"], "Max");

    // A v1 client's edit keeps what only v2 can say.
    ok(
        &s,
        &[
            "patch",
            V1,
            "from-v2",
            "--type=merge",
            "-p",
            r#"{"spec":{"maxReplicas":7}}"#,
        ],
    );
    let v2_after = json(&s, &["get", V2, "from-v2", "-o", "json"]);
    assert_eq!(v2_after["spec"]["maxReplicas"], 7);
    assert_eq!(v2_after["spec"]["metrics"], v2["spec"]["metrics"]);
    assert_eq!(v2_after["spec"]["behavior"], v2["spec"]["behavior"]);
    assert!(
        v2_after["metadata"].get("annotations").is_none(),
        "{v2_after}"
    );
    // And a v1 replace of what it read (annotations included) as well.
    let mut edited = json(&s, &["get", V1, "from-v2", "-o", "json"]);
    edited["spec"]["minReplicas"] = json!(2);
    let (replaced, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["replace", "-f", "-"],
            Some(&edited.to_string()),
        )
        .expect("kubectl runs");
    assert!(replaced, "{err}");
    let v2_after = json(&s, &["get", V2, "from-v2", "-o", "json"]);
    assert_eq!(v2_after["spec"]["minReplicas"], 2);
    assert_eq!(v2_after["spec"]["metrics"], v2["spec"]["metrics"]);
    assert_eq!(v2_after["spec"]["behavior"], v2["spec"]["behavior"]);

    // Tables and lists at both versions.
    let table = ok(&s, &["get", V1]);
    assert!(
        table.contains("from-v1") && table.contains("from-v2"),
        "{table}"
    );
    assert!(table.contains("Deployment/web"), "{table}");
    let short = ok(&s, &["get", "hpa.v1.autoscaling"]);
    assert!(short.contains("from-v1"), "{short}");
    let list = json(&s, &["get", V1, "-o", "json"]);
    let versions: Vec<&str> = list["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["apiVersion"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(versions, ["autoscaling/v1", "autoscaling/v1"], "{list}");

    // Deleted through one version, gone from the other.
    ok(&s, &["delete", V1, "from-v2"]);
    let (found, _, _) = s.kubectl(&["get", V2, "from-v2"]).expect("kubectl runs");
    assert!(!found);
}

#[test]
fn watches_on_either_version_see_writes_through_the_other() {
    let (_dir, s) = server();
    let spawn = |resource: &str| {
        let mut child = s
            .kubectl_spawn(&[
                "get",
                resource,
                "--watch-only",
                "-o",
                "jsonpath={.apiVersion} {.metadata.name}{\"\\n\"}",
            ])
            .expect("spawn watch");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (child, rx)
    };
    let (mut v1_watch, v1_lines) = spawn(V1);
    let (mut v2_watch, v2_lines) = spawn(V2);
    // Creates through v2 until the v1 watch (once established) prints one.
    let mut seen = None;
    for i in 0..30 {
        create(&s, &V2_HPA.replace("from-v2", &format!("v2-{i}")));
        if let Ok(line) = v1_lines.recv_timeout(Duration::from_secs(2)) {
            seen = Some(line);
            break;
        }
    }
    let line = seen.expect("the v1 watch printed an HPA created through v2");
    assert!(line.starts_with("autoscaling/v1 v2-"), "{line}");

    create(&s, V1_HPA);
    let mut v2_seen = Vec::new();
    while let Ok(line) = v2_lines.recv_timeout(Duration::from_secs(10)) {
        let done = line == "autoscaling/v2 from-v1";
        v2_seen.push(line);
        if done {
            break;
        }
    }
    assert_eq!(
        v2_seen.last().map(String::as_str),
        Some("autoscaling/v2 from-v1"),
        "{v2_seen:?}"
    );
    let _ = v1_watch.kill();
    let _ = v2_watch.kill();
    let _ = v1_watch.wait();
    let _ = v2_watch.wait();
}

/// `curl` with the admin's client certificate; returns the body.
fn curl(s: &ServerProcess, path: &str, accept: &str) -> String {
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "--fail", "--cacert"])
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .args(["-H", &format!("Accept: {accept}")])
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl");
    assert!(out.status.success(), "curl {path}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn discovery_and_openapi_list_both_autoscaling_versions() {
    let (_dir, s) = server();
    let versions = ok(&s, &["api-versions"]);
    assert!(
        versions.lines().any(|l| l == "autoscaling/v1"),
        "{versions}"
    );
    assert!(
        versions.lines().any(|l| l == "autoscaling/v2"),
        "{versions}"
    );

    // Legacy discovery.
    let group = json(&s, &["get", "--raw", "/apis/autoscaling"]);
    assert_eq!(
        group["versions"],
        json!([{"groupVersion": "autoscaling/v2", "version": "v2"},
               {"groupVersion": "autoscaling/v1", "version": "v1"}])
    );
    assert_eq!(group["preferredVersion"]["version"], "v2");
    let v1 = json(&s, &["get", "--raw", "/apis/autoscaling/v1"]);
    let names: Vec<&str> = v1["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        names,
        [
            "horizontalpodautoscalers",
            "horizontalpodautoscalers/status"
        ]
    );
    assert_eq!(v1["resources"][0]["kind"], "HorizontalPodAutoscaler");

    // Aggregated discovery (what kubectl asks for first).
    let aggregated: Value = serde_json::from_str(&curl(
        &s,
        "/apis",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
    ))
    .expect("JSON");
    let autoscaling = aggregated["items"]
        .as_array()
        .expect("items")
        .iter()
        .find(|g| g["metadata"]["name"] == "autoscaling")
        .expect("autoscaling group");
    let listed: Vec<&str> = autoscaling["versions"]
        .as_array()
        .expect("versions")
        .iter()
        .map(|v| v["version"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(listed, ["v2", "v1"]);
    assert_eq!(
        autoscaling["versions"][1]["resources"][0]["responseKind"]["version"],
        "v1"
    );

    // OpenAPI v3 and v2.
    let index = json(&s, &["get", "--raw", "/openapi/v3"]);
    assert!(
        index["paths"].get("apis/autoscaling/v1").is_some(),
        "{index}"
    );
    assert!(
        index["paths"].get("apis/autoscaling/v2").is_some(),
        "{index}"
    );
    let v3 = json(&s, &["get", "--raw", "/openapi/v3/apis/autoscaling/v1"]);
    assert!(
        v3["components"]["schemas"]
            .get("io.k8s.api.autoscaling.v1.HorizontalPodAutoscaler")
            .is_some()
    );
    assert!(
        v3["paths"]
            .get("/apis/autoscaling/v1/namespaces/{namespace}/horizontalpodautoscalers")
            .is_some()
    );
    let v2 = json(&s, &["get", "--raw", "/openapi/v2"]);
    for path in [
        "/apis/autoscaling/v1/namespaces/{namespace}/horizontalpodautoscalers/{name}",
        "/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers/{name}",
    ] {
        assert!(v2["paths"].get(path).is_some(), "{path}");
    }
    let explained = ok(
        &s,
        &[
            "explain",
            "hpa.spec.targetCPUUtilizationPercentage",
            "--api-version=autoscaling/v1",
        ],
    );
    assert!(
        explained.contains("targetCPUUtilizationPercentage"),
        "{explained}"
    );
}

/// The kubectl 1.27 binary installed beside the dispatcher on PATH.
fn kubectl_127() -> std::path::PathBuf {
    let out = Command::new("sh")
        .args(["-c", "readlink -f \"$(command -v kubectl)\""])
        .output()
        .expect("locate kubectl");
    let dispatcher = std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    dispatcher.with_file_name("kubectl.1.27")
}

fn run_127(s: &ServerProcess, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(kubectl_127())
        .arg("--kubeconfig")
        .arg(&s.kubeconfig)
        .arg(format!(
            "--cache-dir={}",
            s.data_dir.join("cache-127").display()
        ))
        .args(args)
        .output()
        .expect("kubectl.1.27");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn kubectl_127_autoscale_writes_autoscaling_v1() {
    let (_dir, s) = server();
    ok(&s, &["create", "deployment", "web", "--image=nginx"]);
    let (done, out, err) = run_127(&s, &["autoscale", "deployment", "web", "--max=4", "-v=6"]);
    assert!(done, "{err}");
    assert!(
        out.contains("horizontalpodautoscaler.autoscaling/web autoscaled"),
        "{out}"
    );
    assert!(
        err.contains("POST https://")
            && err.contains("/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers"),
        "kubectl 1.27 used autoscaling/v1: {err}"
    );
    // Read back through v2: minReplicas defaulted, the CPU target v1 implies.
    let v2 = json(&s, &["get", "hpa", "web", "-o", "json"]);
    assert_eq!(v2["apiVersion"], "autoscaling/v2");
    assert_eq!(v2["spec"]["minReplicas"], 1);
    assert_eq!(v2["spec"]["maxReplicas"], 4);
    assert_eq!(
        v2["spec"]["scaleTargetRef"],
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"})
    );
    assert_eq!(
        v2["spec"]["metrics"],
        json!([{"type": "Resource", "resource": {"name": "cpu",
            "target": {"type": "Utilization", "averageUtilization": 80}}}])
    );
    // kubectl 1.27 reads it back (its `get` uses the preferred version, its table the v1
    // columns), and a second autoscale with a CPU target is refused as upstream refuses it.
    let (listed, out, err) = run_127(&s, &["get", V1, "web"]);
    assert!(listed, "{err}");
    assert!(out.contains("Deployment/web"), "{out}");
    let (again, _, err) = run_127(
        &s,
        &[
            "autoscale",
            "deployment",
            "web",
            "--max=4",
            "--cpu-percent=60",
        ],
    );
    assert!(!again && err.contains("already exists"), "{err}");

    // A CPU target through v1 reads back as the v2 metric.
    ok(&s, &["create", "deployment", "api", "--image=nginx"]);
    let (done, _, err) = run_127(
        &s,
        &[
            "autoscale",
            "deployment",
            "api",
            "--min=2",
            "--max=6",
            "--cpu-percent=60",
        ],
    );
    assert!(done, "{err}");
    let v2 = json(&s, &["get", "hpa", "api", "-o", "json"]);
    assert_eq!(v2["spec"]["minReplicas"], 2);
    assert_eq!(
        v2["spec"]["metrics"][0]["resource"]["target"]["averageUtilization"],
        60
    );

    // Today's kubectl (autoscaling/v2) gets the same defaults.
    ok(&s, &["create", "deployment", "new", "--image=nginx"]);
    ok(&s, &["autoscale", "deployment", "new", "--max=3"]);
    let v2 = json(&s, &["get", "hpa", "new", "-o", "json"]);
    assert_eq!(v2["spec"]["minReplicas"], 1, "{v2}");
}
