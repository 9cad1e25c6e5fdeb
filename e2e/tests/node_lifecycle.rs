//! A simulated node that stops heartbeating (its standalone `capstan nodes` process killed)
//! becomes Unknown/NotReady with upstream's condition reason and message, gets the
//! `node.kubernetes.io/unreachable` NoSchedule and NoExecute taints, its pods turn Ready=False
//! and, after their `tolerationSeconds`, are evicted (DisruptionTarget, deleted) and recreated
//! on a healthy node by their ReplicaSet. A Node created with kubectl, that never posts
//! status, gets Unknown conditions ("NodeStatusNeverUpdated") after the startup grace period
//! and the unreachable taints.

use std::process::{Child, Command, Stdio};

use e2e::cli::{json, ok, wait_for};
use e2e::{ServerProcess, capstan_bin};

/// A standalone `capstan nodes` process; killed on drop.
struct Fleet(Child);

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn a_node_that_stops_heartbeating_is_tainted_and_its_pods_are_evicted_and_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--nodes=2", "--node-monitor-grace-period=20s"],
    )
    .expect("server starts");
    let log = std::fs::File::create(dir.path().join("extra-nodes.log")).expect("log file");
    let mut fleet = Fleet(
        Command::new(capstan_bin())
            .args(["nodes", "--count", "1", "--name-prefix", "extra-"])
            .arg("--kubeconfig")
            .arg(&s.kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capstan nodes starts"),
    );
    wait_for(&s, 60, "node extra-0 Ready", || {
        let out = ok(
            &s,
            &[
                "get",
                "nodes",
                // The simulated nodes, not the server's control-plane Node.
                "-l",
                "!node-role.kubernetes.io/control-plane",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type==\"Ready\")].status} {end}",
            ],
        );
        let ready = out
            .split_whitespace()
            .filter(|w| w.ends_with("=True"))
            .count();
        (out.contains("extra-0=True") && ready == 3).then_some(())
    });

    // Only extra-0 takes pods while the Deployment comes up.
    for n in ["capstan-node-0", "capstan-node-1"] {
        ok(&s, &["cordon", n]);
    }
    let manifest = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      - {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
      containers: [{name: c, image: nginx}]
"#;
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(created, "{err}");
    let first = wait_for(&s, 90, "the pod Running on extra-0", || {
        let pods = json(&s, &["get", "pods", "-l", "app=web", "-o", "json"]);
        pods["items"].as_array()?.iter().find_map(|p| {
            (p["spec"]["nodeName"] == "extra-0" && p["status"]["phase"] == "Running")
                .then(|| p["metadata"]["name"].as_str().map(str::to_owned))
                .flatten()
        })
    });
    for n in ["capstan-node-0", "capstan-node-1"] {
        ok(&s, &["uncordon", n]);
    }

    // The node stops heartbeating.
    let _ = fleet.0.kill();
    let _ = fleet.0.wait();

    let node = wait_for(&s, 120, "extra-0 Ready=Unknown", || {
        let n = json(&s, &["get", "node", "extra-0", "-o", "json"]);
        let ready = n["status"]["conditions"]
            .as_array()?
            .iter()
            .find(|c| c["type"] == "Ready")?
            .clone();
        (ready["status"] == "Unknown").then_some(n)
    });
    for c in node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
            .contains(&c["type"].as_str().unwrap_or_default())
        {
            assert_eq!(c["status"], "Unknown", "{c}");
            assert_eq!(c["reason"], "NodeStatusUnknown", "{c}");
            assert_eq!(c["message"], "Kubelet stopped posting node status.", "{c}");
        }
    }
    wait_for(&s, 60, "unreachable taints on extra-0", || {
        let n = json(&s, &["get", "node", "extra-0", "-o", "json"]);
        let taints: Vec<(String, String)> = n["spec"]["taints"]
            .as_array()?
            .iter()
            .map(|t| {
                (
                    t["key"].as_str().unwrap_or_default().to_owned(),
                    t["effect"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let want = |e: &str| taints.contains(&("node.kubernetes.io/unreachable".into(), e.into()));
        (want("NoSchedule") && want("NoExecute")).then_some(())
    });
    let get = ok(&s, &["get", "node", "extra-0"]);
    assert!(get.contains("NotReady"), "{get}");

    // Evicted after tolerationSeconds, replaced on a healthy node.
    wait_for(&s, 90, "the pod evicted and replaced elsewhere", || {
        let pods = json(&s, &["get", "pods", "-l", "app=web", "-o", "json"]);
        let items = pods["items"].as_array()?;
        let old_gone = items.iter().all(|p| {
            p["metadata"]["name"] != first.as_str() || !p["metadata"]["deletionTimestamp"].is_null()
        });
        let replaced = items.iter().any(|p| {
            p["metadata"]["name"] != first.as_str()
                && p["spec"]["nodeName"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("capstan-node-"))
                && p["status"]["phase"] == "Running"
        });
        (old_gone && replaced).then_some(())
    });
    let events = ok(
        &s,
        &[
            "get",
            "events",
            "--field-selector",
            "reason=TaintManagerEviction",
            "-o",
            "name",
        ],
    );
    assert!(!events.trim().is_empty(), "no TaintManagerEviction event");
}

#[test]
fn pod_disruption_budgets_report_health_through_the_deployment_scale() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &[]).expect("server starts");
    let manifest = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: min2}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: half}
spec:
  maxUnavailable: 50%
  selector: {matchLabels: {app: web}}
"#;
    let (applied, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(applied, "{err}");
    let status = |name: &str| {
        let p = json(&s, &["get", "pdb", name, "-o", "json"]);
        p["status"].clone()
    };
    let min2 = wait_for(&s, 120, "pdb min2 with 3 healthy pods", || {
        let st = status("min2");
        (st["currentHealthy"] == 3).then_some(st)
    });
    assert_eq!(min2["desiredHealthy"], 2, "{min2}");
    assert_eq!(min2["expectedPods"], 3, "{min2}");
    assert_eq!(min2["disruptionsAllowed"], 1, "{min2}");
    assert_eq!(min2["observedGeneration"], 1, "{min2}");
    let cond = &min2["conditions"][0];
    assert_eq!(cond["type"], "DisruptionAllowed", "{min2}");
    assert_eq!(cond["status"], "True", "{min2}");
    assert_eq!(cond["reason"], "SufficientPods", "{min2}");
    // 50% of the Deployment's 3 replicas, rounded up, may be unavailable: desired 1.
    let half = wait_for(&s, 60, "pdb half computed", || {
        let st = status("half");
        (st["currentHealthy"] == 3).then_some(st)
    });
    assert_eq!(half["expectedPods"], 3, "{half}");
    assert_eq!(half["desiredHealthy"], 1, "{half}");
    assert_eq!(half["disruptionsAllowed"], 2, "{half}");
    // Scaling the Deployment down to 2 leaves min2 with no room.
    ok(&s, &["scale", "deployment", "web", "--replicas=2"]);
    let min2 = wait_for(&s, 60, "pdb min2 at 2 healthy", || {
        let st = status("min2");
        (st["currentHealthy"] == 2 && st["expectedPods"] == 2).then_some(st)
    });
    assert_eq!(min2["disruptionsAllowed"], 0, "{min2}");
    assert_eq!(
        min2["conditions"][0]["reason"], "InsufficientPods",
        "{min2}"
    );
    let get = ok(&s, &["get", "pdb", "min2"]);
    assert!(get.contains("ALLOWED DISRUPTIONS"), "{get}");
}

#[test]
fn the_pod_garbage_collector_removes_pods_bound_to_nodes_that_do_not_exist() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &["--nodes=1"])
        .expect("server starts");
    let pod = "apiVersion: v1\nkind: Pod\nmetadata: {name: orphan}\nspec:\n  nodeName: ghost-node\n  containers: [{name: c, image: nginx}]\n";
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(pod))
        .expect("kubectl runs");
    assert!(created, "{err}");
    // Upstream's quarantine is 40 s and the check period 20 s.
    wait_for(&s, 150, "the orphaned pod deleted", || {
        let (found, _, _) = s.kubectl(&["get", "pod", "orphan"]).expect("kubectl runs");
        (!found).then_some(())
    });
}

#[test]
fn kubectl_drain_evicts_within_the_disruption_budget_and_pods_move() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &[]).expect("server starts");
    let manifest = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: nginx}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
"#;
    let (applied, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(applied, "{err}");
    wait_for(&s, 120, "pdb allowing 1 disruption", || {
        let p = json(&s, &["get", "pdb", "web", "-o", "json"]);
        (p["status"]["disruptionsAllowed"] == 1 && p["status"]["currentHealthy"] == 3).then_some(())
    });
    let on_node = |s: &ServerProcess, node: &str| {
        let pods = json(s, &["get", "pods", "-l", "app=web", "-o", "json"]);
        pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| {
                p["spec"]["nodeName"] == node && p["metadata"]["deletionTimestamp"].is_null()
            })
            .count()
    };
    let pods = json(&s, &["get", "pods", "-l", "app=web", "-o", "json"]);
    let node = pods["items"][0]["spec"]["nodeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let out = ok(
        &s,
        &[
            "drain",
            &node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--timeout=120s",
        ],
    );
    assert!(out.contains("drained"), "{out}");
    wait_for(&s, 120, "3 running pods, none on the drained node", || {
        let pods = json(&s, &["get", "pods", "-l", "app=web", "-o", "json"]);
        let running = pods["items"]
            .as_array()?
            .iter()
            .filter(|p| {
                p["status"]["phase"] == "Running" && p["metadata"]["deletionTimestamp"].is_null()
            })
            .count();
        (running == 3 && on_node(&s, &node) == 0).then_some(())
    });
}

#[test]
fn a_node_that_never_posts_status_gets_unknown_conditions_and_unreachable_taints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = e2e::ServerProcess::start_cluster(
        &dir.path().join("data"),
        &["--node-startup-grace-period=30s"],
    )
    .expect("server starts");
    let (created, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["create", "-f", "-"],
            Some("apiVersion: v1\nkind: Node\nmetadata:\n  name: silent\n"),
        )
        .expect("kubectl runs");
    assert!(created, "{err}");
    // Within its startup grace period (upstream's 1 minute, 30 s here): no conditions, and the
    // `not-ready` taint admission gave it goes (no Ready condition maps to no taint).
    let n = json(&s, &["get", "node", "silent", "-o", "json"]);
    assert!(n["status"]["conditions"].is_null(), "{n}");
    assert!(!n["spec"].to_string().contains("unreachable"), "{n}");
    wait_for(&s, 30, "the not-ready taint to go", || {
        let n = json(&s, &["get", "node", "silent", "-o", "json"]);
        (n["spec"]["taints"].is_null() && n["status"]["conditions"].is_null()).then_some(())
    });

    let n = wait_for(&s, 150, "node silent to get conditions", || {
        let n = json(&s, &["get", "node", "silent", "-o", "json"]);
        let taints = n["spec"]["taints"].as_array().map_or(0, Vec::len);
        (n["status"]["conditions"].as_array().map_or(0, Vec::len) == 4 && taints == 2).then_some(n)
    });
    let conditions = n["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut types: Vec<&str> = conditions
        .iter()
        .filter_map(|c| c["type"].as_str())
        .collect();
    types.sort_unstable();
    assert_eq!(
        types,
        ["DiskPressure", "MemoryPressure", "PIDPressure", "Ready"],
        "{n}"
    );
    for c in &conditions {
        assert_eq!(c["status"], "Unknown", "{c}");
        assert_eq!(c["reason"], "NodeStatusNeverUpdated", "{c}");
        assert_eq!(c["message"], "Kubelet never posted node status.", "{c}");
        assert_eq!(
            c["lastHeartbeatTime"], n["metadata"]["creationTimestamp"],
            "{c}"
        );
    }
    let taints: Vec<(String, String)> = n["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (t["key"].to_string(), t["effect"].to_string()))
        .collect();
    assert_eq!(
        taints,
        [
            (
                "\"node.kubernetes.io/unreachable\"".to_owned(),
                "\"NoSchedule\"".to_owned()
            ),
            (
                "\"node.kubernetes.io/unreachable\"".to_owned(),
                "\"NoExecute\"".to_owned()
            ),
        ],
        "{n}"
    );
    let describe = ok(&s, &["describe", "node", "silent"]);
    assert!(describe.contains("Conditions:"), "{describe}");
    assert!(describe.contains("NodeStatusNeverUpdated"), "{describe}");
    assert!(
        describe.contains("node.kubernetes.io/unreachable:NoSchedule"),
        "{describe}"
    );
}
