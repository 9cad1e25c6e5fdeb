//! A DaemonSet runs one pod per node, pinned by node affinity on the node's name, follows a
//! node that joins (a standalone `capstan nodes` process) and rolls a new template out with
//! RollingUpdate; `kubectl rollout status` reads its status. Its templates are kept as
//! ControllerRevisions: `kubectl rollout history` and `rollout undo` work. As upstream, no daemon
//! pod lands on the control-plane Node (its `node-role.kubernetes.io/control-plane:NoSchedule`
//! taint is not among the tolerations a DaemonSet adds).

use std::collections::BTreeSet;
use std::process::{Child, Command, Stdio};

use e2e::cli::{json, ok, wait_for};
use e2e::{ServerProcess, capstan_bin};

#[path = "support/history.rs"]
mod history;

/// A standalone `capstan nodes` process; killed on drop.
struct Fleet(Child);

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// (node, image) of every running pod of the DaemonSet.
fn running(s: &ServerProcess) -> Vec<(String, String)> {
    let pods = json(s, &["get", "pods", "-l", "app=agent", "-o", "json"]);
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["status"]["phase"] == "Running")
        .map(|p| {
            (
                p["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                p["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect()
}

/// The worker nodes: every Node but the control-plane ones (`--control-plane-pods`).
fn nodes(s: &ServerProcess) -> BTreeSet<String> {
    ok(
        s,
        &[
            "get",
            "nodes",
            "-l",
            "!node-role.kubernetes.io/control-plane",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
    )
    .split_whitespace()
    .map(str::to_owned)
    .collect()
}

#[test]
fn a_daemonset_runs_one_pod_per_node_follows_new_nodes_and_rolls_updates() {
    let dir = tempfile::tempdir().expect("tempdir");
    let args = ["--control-plane-pods", "--name=cp1"];
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &args).expect("server starts");
    wait_for(&s, 60, "3 worker nodes", || {
        (nodes(&s).len() == 3).then_some(())
    });
    wait_for(&s, 60, "the control-plane node cp1", || {
        s.kubectl(&["get", "node", "cp1"])
            .is_ok_and(|(found, _, _)| found)
            .then_some(())
    });
    // A cordoned node still runs daemon pods (they tolerate unschedulable).
    ok(&s, &["cordon", "capstan-node-2"]);
    let manifest = r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers: [{name: c, image: "agent:v1"}]
"#;
    let (applied, _, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(applied, "{err}");
    wait_for(&s, 120, "one agent pod per node", || {
        let r = running(&s);
        let on: BTreeSet<String> = r.iter().map(|(n, _)| n.clone()).collect();
        (r.len() == 3 && on == nodes(&s)).then_some(())
    });
    ok(
        &s,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    );
    let ds = json(&s, &["get", "ds", "agent", "-o", "json"]);
    assert_eq!(ds["status"]["desiredNumberScheduled"], 3, "{ds}");
    assert_eq!(ds["status"]["numberReady"], 3, "{ds}");
    let pod = json(&s, &["get", "pods", "-l", "app=agent", "-o", "json"]);
    let p0 = &pod["items"][0];
    let term = &p0["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"][0]["matchFields"][0];
    assert_eq!(term["key"], "metadata.name", "{p0}");
    assert_eq!(term["values"][0], p0["spec"]["nodeName"], "{p0}");
    assert!(
        p0["spec"]["tolerations"]
            .to_string()
            .contains("node.kubernetes.io/unreachable"),
        "{p0}"
    );

    // A new node joins: it gets a pod too.
    let log = std::fs::File::create(dir.path().join("extra-nodes.log")).expect("log file");
    let _fleet = Fleet(
        Command::new(capstan_bin())
            .args(["nodes", "--count", "1", "--name-prefix", "extra-"])
            .arg("--kubeconfig")
            .arg(&s.kubeconfig)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("capstan nodes starts"),
    );
    wait_for(&s, 120, "an agent pod on extra-0", || {
        running(&s)
            .iter()
            .any(|(n, _)| n == "extra-0")
            .then_some(())
    });

    // RollingUpdate to v2 replaces every pod.
    ok(&s, &["set", "image", "daemonset/agent", "c=agent:v2"]);
    wait_for(&s, 180, "every node running agent:v2", || {
        let r = running(&s);
        (r.len() == 4 && r.iter().all(|(_, img)| img == "agent:v2")).then_some(())
    });
    ok(
        &s,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    );
    let ds = json(&s, &["get", "ds", "agent", "-o", "json"]);
    assert_eq!(ds["status"]["updatedNumberScheduled"], 4, "{ds}");
    let describe = ok(&s, &["describe", "ds", "agent"]);
    assert!(describe.contains("SuccessfulCreate"), "{describe}");
    // The tainted control-plane node never got one.
    assert!(running(&s).iter().all(|(n, _)| n != "cp1"), "{describe}");
}

#[test]
fn a_daemonset_keeps_controller_revisions_for_rollout_history_and_undo() {
    let (_dir, s) = e2e::cli::cluster();
    let count = wait_for(&s, 60, "3 worker nodes", || {
        let n = nodes(&s).len();
        (n == 3).then_some(n)
    });
    e2e::cli::apply(
        &s,
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: hist
  annotations: {kubernetes.io/change-cause: "image busybox:1"}
spec:
  revisionHistoryLimit: 2
  selector: {matchLabels: {app: hist}}
  template:
    metadata: {labels: {app: hist}}
    spec:
      containers: [{name: c, image: "busybox:1"}]
"#,
    );
    history::check_history(&s, "DaemonSet", "daemonset/hist", "hist", count, |r| {
        r["metadata"]["labels"]["controller-revision-hash"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
}
