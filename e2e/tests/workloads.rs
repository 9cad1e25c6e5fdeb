//! Workload controllers inside `capstan server`, driven by stock kubectl against the whole
//! chain (controllers → scheduler → simulated nodes): a Deployment of 3 becomes a ReplicaSet
//! named `<deployment>-<pod-template-hash>` and 3 Running pods; `kubectl rollout status`,
//! `set image` (checked against maxSurge/maxUnavailable all along), `rollout history`, `undo`,
//! `pause`/`resume`, `restart`, `scale`; a deleted pod is replaced; ReplicationControllers;
//! leader election and per-controller service accounts.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use e2e::cli::{apply, cluster, json, ok, wait_for};
use e2e::{ServerProcess, http_get};
use serde_json::Value;

fn items(v: &Value) -> Vec<Value> {
    v["items"].as_array().cloned().unwrap_or_default()
}

/// Pods with `selector` that are Running and not being deleted.
fn running_pods(s: &ServerProcess, selector: &str) -> Vec<Value> {
    items(&json(s, &["get", "pods", "-l", selector, "-o", "json"]))
        .into_iter()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .filter(|p| p["status"]["phase"] == "Running")
        .collect()
}

fn rollout_status(s: &ServerProcess, what: &str) {
    let out = ok(s, &["rollout", "status", what, "--timeout=120s"]);
    assert!(
        out.contains("successfully rolled out"),
        "rollout status said: {out}"
    );
}

const WEB: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 3
  selector:
    matchLabels: {app: web}
  strategy:
    rollingUpdate: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: nginx
        image: nginx:1.25
"#;

#[test]
fn deployment_chain_rollouts_history_and_scale() {
    let (_d, s) = cluster();
    apply(&s, WEB);
    rollout_status(&s, "deployment/web");
    // ReplicaSet named after the template hash, owned by the deployment, with upstream's
    // annotations; 3 Running pods owned by it.
    let rss = items(&json(&s, &["get", "rs", "-l", "app=web", "-o", "json"]));
    assert_eq!(rss.len(), 1, "one ReplicaSet: {rss:?}");
    let rs = &rss[0];
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .expect("hash label");
    let rs_name = rs["metadata"]["name"].as_str().expect("name").to_owned();
    assert_eq!(rs_name, format!("web-{hash}"));
    assert!(
        hash.len() >= 8
            && hash
                .chars()
                .all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)),
        "hash {hash}"
    );
    assert_eq!(
        rs["spec"]["selector"]["matchLabels"]["pod-template-hash"],
        hash
    );
    let owner = &rs["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Deployment");
    assert_eq!(owner["controller"], true);
    assert_eq!(owner["blockOwnerDeletion"], true);
    let ann = &rs["metadata"]["annotations"];
    assert_eq!(ann["deployment.kubernetes.io/revision"], "1");
    assert_eq!(ann["deployment.kubernetes.io/desired-replicas"], "3");
    assert_eq!(ann["deployment.kubernetes.io/max-replicas"], "4");
    let pods = running_pods(&s, "app=web");
    assert_eq!(pods.len(), 3);
    // Writers are named as upstream's: the controllers send kube-controller-manager's
    // User-Agent, the nodes the kubelet's (managedFields managers, not `unknown`).
    let managers = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["get"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--show-managed-fields", "-o", "json"]);
        items(&json(&s, &all))
            .iter()
            .flat_map(|o| {
                o["metadata"]["managedFields"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .filter_map(|e| e["manager"].as_str().map(str::to_owned))
            .collect()
    };
    let rs_managers = managers(&["rs", "-l", "app=web"]);
    assert!(
        rs_managers.iter().any(|m| m == "kube-controller-manager"),
        "{rs_managers:?}"
    );
    let pod_managers = managers(&["pods", "-l", "app=web"]);
    for want in ["kube-controller-manager", "kubelet"] {
        assert!(
            pod_managers.iter().any(|m| m == want),
            "{want}: {pod_managers:?}"
        );
    }
    assert!(
        !pod_managers.iter().any(|m| m == "unknown"),
        "{pod_managers:?}"
    );
    for p in &pods {
        assert!(
            p["metadata"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with(&format!("{rs_name}-")))
        );
        assert_eq!(
            p["metadata"]["ownerReferences"][0]["name"],
            rs_name.as_str()
        );
        assert!(
            !p["spec"]["nodeName"]
                .as_str()
                .unwrap_or_default()
                .is_empty()
        );
    }
    // Status and conditions as kubectl reads them.
    let d = json(&s, &["get", "deploy", "web", "-o", "json"]);
    assert_eq!(d["status"]["replicas"], 3);
    assert_eq!(d["status"]["updatedReplicas"], 3);
    assert_eq!(d["status"]["readyReplicas"], 3);
    assert_eq!(d["status"]["availableReplicas"], 3);
    assert_eq!(
        d["status"]["observedGeneration"],
        d["metadata"]["generation"]
    );
    assert_eq!(
        d["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "1"
    );
    let conds: BTreeMap<String, Value> = d["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| (c["type"].as_str().unwrap_or_default().to_owned(), c.clone()))
        .collect();
    assert_eq!(conds["Available"]["reason"], "MinimumReplicasAvailable");
    assert_eq!(
        conds["Available"]["message"],
        "Deployment has minimum availability."
    );
    assert_eq!(conds["Progressing"]["reason"], "NewReplicaSetAvailable");
    assert_eq!(
        conds["Progressing"]["message"],
        format!("ReplicaSet \"{rs_name}\" has successfully progressed.")
    );
    let wide = ok(&s, &["get", "deploy", "web"]);
    assert!(wide.contains("3/3"), "kubectl get deploy: {wide}");
    let described = ok(&s, &["describe", "deploy", "web"]);
    assert!(
        described.contains(&format!("Scaled up replica set {rs_name} from 0 to 3")),
        "describe: {described}"
    );
    assert!(
        described.contains("deployment-controller"),
        "describe: {described}"
    );
    let rs_described = ok(&s, &["describe", "rs", &rs_name]);
    assert!(
        rs_described.contains("SuccessfulCreate"),
        "describe rs: {rs_described}"
    );
    assert!(
        rs_described.contains("Created pod: "),
        "describe rs: {rs_described}"
    );

    // set image: a new ReplicaSet, never more than replicas+maxSurge pods asked for and
    // never fewer than replicas-maxUnavailable available.
    ok(&s, &["set", "image", "deployment/web", "nginx=nginx:1.26"]);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let rss = items(&json(&s, &["get", "rs", "-l", "app=web", "-o", "json"]));
        let spec_sum: i64 = rss
            .iter()
            .map(|r| r["spec"]["replicas"].as_i64().unwrap_or(0))
            .sum();
        let available: i64 = rss
            .iter()
            .map(|r| r["status"]["availableReplicas"].as_i64().unwrap_or(0))
            .sum();
        assert!(
            spec_sum <= 4,
            "maxSurge 1 exceeded: {spec_sum} pods asked for"
        );
        assert!(
            available >= 3 || rss.len() < 2,
            "maxUnavailable 0 violated: {available} available"
        );
        let d = json(&s, &["get", "deploy", "web", "-o", "json"]);
        if d["status"]["updatedReplicas"] == 3
            && d["status"]["replicas"] == 3
            && d["status"]["availableReplicas"] == 3
            && d["status"]["observedGeneration"] == d["metadata"]["generation"]
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rollout of nginx:1.26 did not finish: {d}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    rollout_status(&s, "deployment/web");
    let rss = items(&json(&s, &["get", "rs", "-l", "app=web", "-o", "json"]));
    assert_eq!(rss.len(), 2);
    let old = rss
        .iter()
        .find(|r| r["metadata"]["name"] == rs_name.as_str())
        .expect("old rs");
    assert_eq!(old["spec"]["replicas"], 0);
    let history = ok(&s, &["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "history: {history}"
    );
    for p in running_pods(&s, "app=web") {
        assert_eq!(p["spec"]["containers"][0]["image"], "nginx:1.26");
    }

    // rollout undo goes back to the first template (the old ReplicaSet, now revision 3).
    ok(&s, &["rollout", "undo", "deployment/web"]);
    rollout_status(&s, "deployment/web");
    let rs = json(&s, &["get", "rs", &rs_name, "-o", "json"]);
    assert_eq!(rs["spec"]["replicas"], 3);
    assert_eq!(
        rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"],
        "3"
    );
    let history = ok(&s, &["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("3 ") && !history.contains("\n1 "),
        "history: {history}"
    );
    wait_for(&s, 60, "pods back on nginx:1.25", || {
        let pods = running_pods(&s, "app=web");
        (pods.len() == 3
            && pods
                .iter()
                .all(|p| p["spec"]["containers"][0]["image"] == "nginx:1.25"))
        .then_some(())
    });

    // pause: template changes do not roll out; Progressing says so; resume rolls out.
    ok(&s, &["rollout", "pause", "deployment/web"]);
    ok(&s, &["set", "image", "deployment/web", "nginx=nginx:1.27"]);
    wait_for(&s, 30, "Progressing=Unknown DeploymentPaused", || {
        let d = json(&s, &["get", "deploy", "web", "-o", "json"]);
        d["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["type"] == "Progressing"
                    && c["reason"] == "DeploymentPaused"
                    && c["status"] == "Unknown"
            })
            .then_some(())
    });
    assert_eq!(
        items(&json(&s, &["get", "rs", "-l", "app=web", "-o", "json"])).len(),
        2,
        "no new ReplicaSet while paused"
    );
    ok(&s, &["rollout", "resume", "deployment/web"]);
    rollout_status(&s, "deployment/web");
    assert_eq!(
        items(&json(&s, &["get", "rs", "-l", "app=web", "-o", "json"])).len(),
        3
    );

    // restart: a new ReplicaSet with the restartedAt annotation in its template.
    ok(&s, &["rollout", "restart", "deployment/web"]);
    rollout_status(&s, "deployment/web");
    let rss = items(&json(&s, &["get", "rs", "-l", "app=web", "-o", "json"]));
    assert!(rss.iter().any(|r| {
        r["spec"]["replicas"] == 3
            && !r["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"].is_null()
    }));

    // scale up and down.
    ok(&s, &["scale", "deployment/web", "--replicas=5"]);
    rollout_status(&s, "deployment/web");
    wait_for(&s, 60, "5 running pods", || {
        (running_pods(&s, "app=web").len() == 5).then_some(())
    });
    ok(&s, &["scale", "deployment/web", "--replicas=2"]);
    wait_for(&s, 60, "2 pods left", || {
        let all = items(&json(&s, &["get", "pods", "-l", "app=web", "-o", "json"]));
        (all.len() == 2 && running_pods(&s, "app=web").len() == 2).then_some(())
    });
    let d = json(&s, &["get", "deploy", "web", "-o", "json"]);
    assert_eq!(d["status"]["replicas"], 2);
    let described = ok(&s, &["describe", "deploy", "web"]);
    assert!(
        described.contains("Scaled down replica set"),
        "describe: {described}"
    );
}

#[test]
fn deleted_pods_are_replaced_and_replication_controllers_work() {
    let (_d, s) = cluster();
    ok(
        &s,
        &[
            "create",
            "deployment",
            "app",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    rollout_status(&s, "deployment/app");
    let before: Vec<String> = running_pods(&s, "app=app")
        .iter()
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(before.len(), 2);
    ok(&s, &["delete", "pod", &before[0]]);
    wait_for(&s, 60, "a replacement pod", || {
        let now: Vec<String> = running_pods(&s, "app=app")
            .iter()
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect();
        (now.len() == 2 && !now.contains(&before[0])).then_some(())
    });
    // An orphan pod matching the ReplicaSet's selector is adopted, so one pod goes.
    let rs = items(&json(&s, &["get", "rs", "-l", "app=app", "-o", "json"])).remove(0);
    let hash = rs["metadata"]["labels"]["pod-template-hash"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let orphan = format!(
        r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"stray","labels":{{"app":"app","pod-template-hash":"{hash}"}}}},"spec":{{"containers":[{{"name":"c","image":"nginx"}}]}}}}"#
    );
    let (created, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(&orphan))
        .expect("kubectl runs");
    assert!(created, "{err}");
    wait_for(&s, 60, "adoption and scale back to 2", || {
        let all: Vec<Value> = items(&json(&s, &["get", "pods", "-l", "app=app", "-o", "json"]))
            .into_iter()
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .collect();
        let stray_owned = items(&json(&s, &["get", "pods", "-l", "app=app", "-o", "json"]))
            .iter()
            .filter(|p| p["metadata"]["name"] == "stray")
            .all(|p| {
                !p["metadata"]["ownerReferences"].is_null()
                    || !p["metadata"]["deletionTimestamp"].is_null()
            });
        (all.len() == 2 && stray_owned).then_some(())
    });

    // ReplicationController.
    apply(
        &s,
        r#"
apiVersion: v1
kind: ReplicationController
metadata: {name: rc}
spec:
  replicas: 2
  selector: {app: rc}
  template:
    metadata: {labels: {app: rc}}
    spec: {containers: [{name: c, image: nginx}]}
"#,
    );
    wait_for(&s, 60, "rc pods running and status", || {
        let rc = json(&s, &["get", "rc", "rc", "-o", "json"]);
        (running_pods(&s, "app=rc").len() == 2
            && rc["status"]["readyReplicas"] == 2
            && rc["status"]["availableReplicas"] == 2)
            .then_some(())
    });
    let described = ok(&s, &["describe", "rc", "rc"]);
    assert!(
        described.contains("SuccessfulCreate") && described.contains("replication-controller"),
        "{described}"
    );
    ok(&s, &["scale", "rc", "rc", "--replicas=1"]);
    wait_for(&s, 60, "rc scaled to 1", || {
        let all: Vec<Value> = items(&json(&s, &["get", "pods", "-l", "app=rc", "-o", "json"]));
        (all.len() == 1).then_some(())
    });
    let described = ok(&s, &["describe", "rc", "rc"]);
    assert!(
        described.contains("SuccessfulDelete") && described.contains("Deleted pod: "),
        "{described}"
    );
}

#[test]
fn leader_lease_and_controller_service_accounts() {
    let (_d, s) = cluster();
    let lease = wait_for(&s, 30, "the controller manager's lease", || {
        let (ok, out, _) = s
            .kubectl(&[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "json",
            ])
            .ok()?;
        ok.then(|| serde_json::from_str::<Value>(&out).ok())
            .flatten()
    });
    let holder = lease["spec"]["holderIdentity"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let (host, id) = holder
        .rsplit_once('_')
        .expect("holder is <hostname>_<uuid>");
    assert!(!host.is_empty() && id.len() == 36, "holder {holder}");
    assert_eq!(lease["spec"]["leaseDurationSeconds"], 15);
    // The lease is renewed.
    let first = lease["spec"]["renewTime"].clone();
    wait_for(&s, 30, "a lease renewal", || {
        let l = json(
            &s,
            &[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "json",
            ],
        );
        (l["spec"]["renewTime"] != first && l["spec"]["holderIdentity"] == holder.as_str())
            .then_some(())
    });
    // Each controller runs as its own service account with upstream's role.
    for sa in [
        "replicaset-controller",
        "deployment-controller",
        "generic-garbage-collector",
        "namespace-controller",
    ] {
        wait_for(&s, 30, sa, || {
            s.kubectl(&["get", "sa", "-n", "kube-system", sa])
                .ok()
                .filter(|r| r.0)
                .map(|_| ())
        });
        // `auth can-i` exits 1 for "no"; its answer is on stdout.
        let as_user = format!("system:serviceaccount:kube-system:{sa}");
        let (_, can, _) = s
            .kubectl(&["auth", "can-i", "create", "pods", "--as", &as_user])
            .expect("kubectl runs");
        let expected = if sa == "replicaset-controller" {
            "yes"
        } else {
            "no"
        };
        assert_eq!(can.trim(), expected, "{sa} create pods");
    }
    // Pods are created by the replicaset-controller service account (managedFields manager
    // is the client's; the audit-free check: the creation succeeded under RBAC that only
    // that account has, and events name the component).
    ok(
        &s,
        &[
            "create",
            "deployment",
            "who",
            "--image=nginx",
            "--replicas=1",
        ],
    );
    rollout_status(&s, "deployment/who");
    let events = json(&s, &["get", "events.events.k8s.io", "-o", "json"]);
    let controllers: Vec<String> = items(&events)
        .iter()
        .filter_map(|e| e["reportingController"].as_str().map(str::to_owned))
        .collect();
    assert!(
        controllers.iter().any(|c| c == "deployment-controller"),
        "{controllers:?}"
    );
    assert!(
        controllers.iter().any(|c| c == "replicaset-controller"),
        "{controllers:?}"
    );
}

#[test]
fn recreate_history_limit_min_ready_and_progress_deadline() {
    let (_d, s) = cluster();
    apply(
        &s,
        r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: rec}
spec:
  replicas: 3
  revisionHistoryLimit: 1
  minReadySeconds: 2
  strategy: {type: Recreate}
  selector: {matchLabels: {app: rec}}
  template:
    metadata: {labels: {app: rec}}
    spec: {containers: [{name: c, image: "img:1"}]}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: stuck}
spec:
  replicas: 2
  progressDeadlineSeconds: 3
  selector: {matchLabels: {app: stuck}}
  template:
    metadata: {labels: {app: stuck}}
    spec: {nodeSelector: {nowhere: "true"}, containers: [{name: c, image: "img:1"}]}
"#,
    );
    rollout_status(&s, "deployment/rec");
    // minReadySeconds reaches the ReplicaSet.
    let rs = items(&json(&s, &["get", "rs", "-l", "app=rec", "-o", "json"])).remove(0);
    assert_eq!(rs["spec"]["minReadySeconds"], 2);
    assert_eq!(rs["status"]["availableReplicas"], 3);
    // Recreate: the old ReplicaSet is scaled to 0 before the new one gets pods.
    for image in ["img:2", "img:3", "img:4"] {
        ok(
            &s,
            &["set", "image", "deployment/rec", &format!("c={image}")],
        );
        rollout_status(&s, "deployment/rec");
    }
    let described = ok(&s, &["describe", "deploy", "rec"]);
    let lines: Vec<&str> = described
        .lines()
        .filter(|l| l.contains("ScalingReplicaSet"))
        .collect();
    for pair in lines.windows(2) {
        if pair[1].contains("Scaled up") && !pair[1].contains("from 0 to 3") {
            panic!("Recreate scaled up partially: {lines:?}");
        }
    }
    assert!(
        lines.iter().filter(|l| l.contains("to 0")).count() >= 3,
        "{lines:?}"
    );
    // revisionHistoryLimit 1: the current ReplicaSet and one old one remain.
    wait_for(&s, 30, "history cleanup", || {
        (items(&json(&s, &["get", "rs", "-l", "app=rec", "-o", "json"])).len() == 2).then_some(())
    });
    let history = ok(&s, &["rollout", "history", "deployment/rec"]);
    assert!(
        history.contains("3 ") && history.contains("4 ") && !history.contains("\n1 "),
        "{history}"
    );

    // Pods that cannot be scheduled: ProgressDeadlineExceeded, and rollout status fails.
    let (ok_, out, err) = s
        .kubectl(&["rollout", "status", "deployment/stuck", "--timeout=60s"])
        .expect("kubectl");
    assert!(!ok_, "rollout status should fail: {out}");
    assert!(err.contains("exceeded its progress deadline"), "{err}");
    let d = json(&s, &["get", "deploy", "stuck", "-o", "json"]);
    let c = d["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Progressing")
        .cloned()
        .expect("Progressing");
    assert_eq!(c["status"], "False");
    assert_eq!(c["reason"], "ProgressDeadlineExceeded");
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .ends_with("has timed out progressing."),
        "{c}"
    );
    let a = d["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Available")
        .cloned()
        .expect("Available");
    assert_eq!(a["reason"], "MinimumReplicasUnavailable");
    assert_eq!(d["status"]["unavailableReplicas"], 2);
}

/// A plain HTTP GET on 127.0.0.1:`port`; None until something answers.
/// A standalone `capstan controllers` process, killed on drop.
struct Manager(std::process::Child);

impl Drop for Manager {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn standalone_controller_managers_fail_over_through_the_lease() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s =
        ServerProcess::start_cluster(&dir.path().join("data"), &["--disable-controller-manager"])
            .expect("server starts");
    let kubeconfig = dir.path().join("kcm.kubeconfig");
    let (made, _, err) = s
        .capstan(&[
            "kubeconfig",
            "--data-dir",
            s.data_dir.to_str().expect("utf-8"),
            "--user",
            "system:kube-controller-manager",
            "--server",
            &s.url,
            "--out",
            kubeconfig.to_str().expect("utf-8"),
        ])
        .expect("capstan runs");
    assert!(made, "{err}");
    let start = |metrics: u16, log: &str| {
        let log = std::fs::File::create(dir.path().join(log)).expect("log");
        Manager(
            std::process::Command::new(e2e::capstan_bin())
                .args([
                    "controllers",
                    "--kubeconfig",
                    kubeconfig.to_str().expect("utf-8"),
                ])
                .arg(format!("--metrics-bind-address=127.0.0.1:{metrics}"))
                .stdout(std::process::Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn capstan controllers"),
        )
    };
    let (p1, p2) = (e2e::free_port(), e2e::free_port());
    let mut first = Some(start(p1, "kcm1.log"));
    // Let the first take the lease before the second starts.
    let holder = wait_for(&s, 30, "a lease holder", || {
        let (ok, out, _) = s
            .kubectl(&[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .ok()?;
        (ok && !out.is_empty()).then_some(out)
    });
    let _second = start(p2, "kcm2.log");
    let metrics = wait_for(&s, 30, "metrics of the leader", || {
        http_get(p1, "/metrics").filter(|(_, m)| {
            m.contains("leader_election_master_status{name=\"kube-controller-manager\"} 1")
        })
    });
    assert_eq!(metrics.0, 200, "{metrics:?}");
    let health = wait_for(&s, 30, "healthz", || http_get(p1, "/healthz"));
    assert_eq!(health, (200, "ok".to_owned()));
    ok(
        &s,
        &[
            "create",
            "deployment",
            "one",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    rollout_status(&s, "deployment/one");
    let standby = wait_for(&s, 30, "metrics of the standby", || {
        http_get(p2, "/metrics").map(|(_, m)| m)
    });
    assert!(
        !standby.contains("leader_election_master_status{name=\"kube-controller-manager\"} 1"),
        "the standby does not lead: {standby}"
    );

    // The leader dies: the standby takes the lease once it expires and runs the loops.
    drop(first.take());
    let new_holder = wait_for(&s, 60, "the standby to take the lease", || {
        let (ok, out, _) = s
            .kubectl(&[
                "get",
                "lease",
                "-n",
                "kube-system",
                "kube-controller-manager",
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ])
            .ok()?;
        (ok && !out.is_empty() && out != holder).then_some(out)
    });
    assert_ne!(new_holder, holder);
    let lease = json(
        &s,
        &[
            "get",
            "lease",
            "-n",
            "kube-system",
            "kube-controller-manager",
            "-o",
            "json",
        ],
    );
    assert!(
        lease["spec"]["leaseTransitions"].as_i64().unwrap_or(0) >= 1,
        "{lease}"
    );
    ok(
        &s,
        &[
            "create",
            "deployment",
            "two",
            "--image=nginx",
            "--replicas=2",
        ],
    );
    rollout_status(&s, "deployment/two");
}

#[test]
fn failed_pod_creations_set_replica_failure_until_they_succeed() {
    let (_d, s) = cluster();
    ok(&s, &["create", "namespace", "q"]);
    ok(
        &s,
        &["-n", "q", "create", "quota", "small", "--hard=pods=1"],
    );
    ok(
        &s,
        &[
            "-n",
            "q",
            "create",
            "deployment",
            "web",
            "--image=nginx",
            "--replicas=3",
        ],
    );
    // The quota refuses the second and third pods: FailedCreate events and ReplicaFailure
    // conditions on the ReplicaSet and the Deployment, worded as upstream.
    let rs = wait_for(&s, 60, "ReplicaFailure on the ReplicaSet", || {
        let rss = items(&json(&s, &["-n", "q", "get", "rs", "-o", "json"]));
        rss.into_iter().find(|r| {
            r["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|c| c["type"] == "ReplicaFailure" && c["status"] == "True")
        })
    });
    let c = rs["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "ReplicaFailure")
        .cloned()
        .expect("condition");
    assert_eq!(c["reason"], "FailedCreate");
    assert!(
        c["message"]
            .as_str()
            .unwrap_or_default()
            .contains("exceeded quota: small"),
        "{c}"
    );
    assert_eq!(rs["status"]["replicas"], 1);
    let name = rs["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let described = ok(&s, &["-n", "q", "describe", "rs", &name]);
    assert!(
        described.contains("FailedCreate") && described.contains("Error creating: pods"),
        "{described}"
    );
    wait_for(&s, 60, "ReplicaFailure on the Deployment", || {
        let d = json(&s, &["-n", "q", "get", "deploy", "web", "-o", "json"]);
        d["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "ReplicaFailure" && c["reason"] == "FailedCreate")
            .then_some(())
    });
    // Room again: the pods come and the condition goes.
    ok(&s, &["-n", "q", "delete", "quota", "small"]);
    wait_for(&s, 120, "3 pods and no ReplicaFailure", || {
        let rs = json(&s, &["-n", "q", "get", "rs", &name, "-o", "json"]);
        let failing = rs["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "ReplicaFailure");
        (rs["status"]["replicas"] == 3 && !failing).then_some(())
    });
    let out = ok(
        &s,
        &[
            "-n",
            "q",
            "rollout",
            "status",
            "deployment/web",
            "--timeout=120s",
        ],
    );
    assert!(out.contains("successfully rolled out"));
}
