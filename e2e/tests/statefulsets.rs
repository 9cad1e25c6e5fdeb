//! A StatefulSet of 3 comes up in order with stable names, hostnames and PVCs; scaling down
//! removes the highest ordinals; a RollingUpdate with a partition only replaces the pods at or
//! above it; a Parallel set starts every pod at once. Its templates are kept as
//! ControllerRevisions, which its status names: `kubectl rollout history` and `rollout undo`
//! work.
//!
//! Storage as on kind: the set's claims get the default StorageClass `standard`
//! (DefaultStorageClass admission), wait for their pods (WaitForFirstConsumer), and the
//! scheduler's VolumeBinding asks the local-path provisioner for a volume on each pod's node;
//! a pod naming a missing claim stays Pending with kube-scheduler's message until the claim
//! exists; a released claim's volume is deleted.

use std::time::{Duration, Instant};

use e2e::ServerProcess;
use e2e::cli::{apply, json, ok, wait_for};

#[path = "support/history.rs"]
mod history;

/// (name, creationTimestamp, image, running) of the set's live pods, by name.
fn pods(s: &ServerProcess, app: &str) -> Vec<(String, String, String, bool)> {
    let v = json(
        s,
        &["get", "pods", "-l", &format!("app={app}"), "-o", "json"],
    );
    let mut out: Vec<_> = v["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            (
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                p["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                p["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                p["status"]["phase"] == "Running",
            )
        })
        .collect();
    out.sort();
    out
}

fn manifest(name: &str, policy: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: StatefulSet
metadata: {{name: {name}}}
spec:
  serviceName: {name}
  replicas: 3
  podManagementPolicy: {policy}
  selector: {{matchLabels: {{app: {name}}}}}
  persistentVolumeClaimRetentionPolicy: {{whenDeleted: Retain, whenScaled: Delete}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers: [{{name: c, image: "{image}"}}]
  volumeClaimTemplates:
  - metadata: {{name: data}}
    spec:
      accessModes: [ReadWriteOnce]
      resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}

#[test]
fn a_statefulset_comes_up_in_order_with_stable_names_and_claims_and_rolls_by_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &[]).expect("server starts");
    apply(&s, &manifest("db", "OrderedReady", "db:v1"));
    // OrderedReady: never a higher ordinal without every lower one running.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ps = pods(&s, "db");
        for (i, p) in ps.iter().enumerate() {
            assert_eq!(p.0, format!("db-{i}"), "gap in ordinals: {ps:?}");
        }
        if let Some(last) = ps.last() {
            for earlier in &ps[..ps.len() - 1] {
                assert!(
                    earlier.3,
                    "{} exists before {} runs: {ps:?}",
                    last.0, earlier.0
                );
            }
        }
        if ps.len() == 3 && ps.iter().all(|p| p.3) {
            // Creation order follows the ordinals.
            assert!(ps[0].1 <= ps[1].1 && ps[1].1 <= ps[2].1, "{ps:?}");
            break;
        }
        assert!(Instant::now() < deadline, "set not up: {ps:?}\n{}", s.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    ok(
        &s,
        &["rollout", "status", "statefulset/db", "--timeout=60s"],
    );
    let p1 = json(&s, &["get", "pod", "db-1", "-o", "json"]);
    assert_eq!(p1["spec"]["hostname"], "db-1", "{p1}");
    assert_eq!(p1["spec"]["subdomain"], "db", "{p1}");
    assert_eq!(
        p1["metadata"]["labels"]["statefulset.kubernetes.io/pod-name"],
        "db-1"
    );
    assert_eq!(
        p1["metadata"]["labels"]["apps.kubernetes.io/pod-index"],
        "1"
    );
    let claims = ok(
        &s,
        &["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"],
    );
    let mut claims: Vec<&str> = claims.split_whitespace().collect();
    claims.sort_unstable();
    assert_eq!(claims, vec!["data-db-0", "data-db-1", "data-db-2"]);
    let vol = &p1["spec"]["volumes"][0];
    assert_eq!(
        vol["persistentVolumeClaim"]["claimName"], "data-db-1",
        "{p1}"
    );

    // RollingUpdate with partition 2: only db-2 moves to v2.
    ok(
        &s,
        &[
            "patch",
            "statefulset",
            "db",
            "-p",
            r#"{"spec":{"updateStrategy":{"type":"RollingUpdate","rollingUpdate":{"partition":2}}}}"#,
        ],
    );
    ok(&s, &["set", "image", "statefulset/db", "c=db:v2"]);
    wait_for(&s, 120, "db-2 on v2, db-0/1 on v1", || {
        let ps = pods(&s, "db");
        let images: Vec<&str> = ps.iter().map(|p| p.2.as_str()).collect();
        (ps.len() == 3 && ps.iter().all(|p| p.3) && images == ["db:v1", "db:v1", "db:v2"])
            .then_some(())
    });
    let sts = json(&s, &["get", "sts", "db", "-o", "json"]);
    assert_eq!(sts["status"]["updatedReplicas"], 1, "{sts}");
    assert_ne!(
        sts["status"]["currentRevision"], sts["status"]["updateRevision"],
        "{sts}"
    );

    // Scale down to 1: the highest ordinals go, and (whenScaled: Delete) their claims.
    ok(&s, &["scale", "statefulset", "db", "--replicas=1"]);
    wait_for(&s, 120, "only db-0 left, with its claim", || {
        let ps = pods(&s, "db");
        let claims = ok(
            &s,
            &["get", "pvc", "-o", "jsonpath={.items[*].metadata.name}"],
        );
        (ps.len() == 1 && ps[0].0 == "db-0" && claims.trim() == "data-db-0").then_some(())
    });
}

#[test]
fn a_parallel_statefulset_starts_every_pod_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &[]).expect("server starts");
    apply(&s, &manifest("web", "Parallel", "web:v1"));
    wait_for(&s, 120, "3 running pods", || {
        let ps = pods(&s, "web");
        (ps.len() == 3 && ps.iter().all(|p| p.3)).then_some(())
    });
    let sts = json(&s, &["get", "sts", "web", "-o", "json"]);
    assert_eq!(sts["status"]["readyReplicas"], 3, "{sts}");
    let describe = ok(&s, &["describe", "sts", "web"]);
    assert!(
        describe.contains("create Pod web-0 in StatefulSet web successful"),
        "{describe}"
    );
}

#[test]
fn a_statefulset_keeps_controller_revisions_for_rollout_history_and_undo() {
    let (_dir, s) = e2e::cli::cluster();
    apply(
        &s,
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
  annotations: {kubernetes.io/change-cause: "image busybox:1"}
spec:
  serviceName: web
  replicas: 2
  revisionHistoryLimit: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: c, image: "busybox:1"}]
"#,
    );
    // The status names revisions that exist.
    let st = wait_for(&s, 120, "the set's revisions in its status", || {
        let st = json(&s, &["get", "sts", "web", "-o", "json"]);
        (st["status"]["readyReplicas"] == 2).then_some(st)
    });
    let revs = history::revisions(&s, "web");
    let names: Vec<&str> = revs
        .iter()
        .filter_map(|r| r["metadata"]["name"].as_str())
        .collect();
    for field in ["currentRevision", "updateRevision"] {
        let named = st["status"][field].as_str().unwrap_or_default();
        assert!(names.contains(&named), "{field} {named} not in {names:?}");
    }
    history::check_history(&s, "StatefulSet", "statefulset/web", "web", 2, |r| {
        r["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    });
    let st = json(&s, &["get", "sts", "web", "-o", "json"]);
    let last = history::revisions(&s, "web")
        .last()
        .map(|r| r["metadata"]["name"].clone());
    assert_eq!(Some(st["status"]["updateRevision"].clone()), last, "{st}");
    assert_eq!(
        st["status"]["currentRevision"], st["status"]["updateRevision"],
        "{st}"
    );
}

/// Each claim of `app`'s pods (`data-<pod>`) with its phase, volume and the node its volume
/// is pinned to; and each pod's node.
fn claims_and_nodes(s: &ServerProcess, app: &str) -> Vec<(String, String, String, String)> {
    let pods = json(
        s,
        &["get", "pods", "-l", &format!("app={app}"), "-o", "json"],
    );
    let pvcs = json(s, &["get", "pvc", "-o", "json"]);
    let pvs = json(s, &["get", "pv", "-o", "json"]);
    let mut out = Vec::new();
    for p in pods["items"].as_array().into_iter().flatten() {
        let pod = p["metadata"]["name"].as_str().unwrap_or_default();
        let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
        let claim = format!("data-{pod}");
        let Some(c) = pvcs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["metadata"]["name"] == claim.as_str())
        else {
            continue;
        };
        let volume = c["spec"]["volumeName"].as_str().unwrap_or_default();
        let pinned = pvs["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["metadata"]["name"] == volume)
            .and_then(|v| {
                v["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]
                    ["values"][0]
                    .as_str()
            })
            .unwrap_or_default();
        out.push((
            c["status"]["phase"].as_str().unwrap_or_default().to_owned(),
            volume.to_owned(),
            pinned.to_owned(),
            node.to_owned(),
        ));
    }
    out
}

#[test]
fn claims_are_provisioned_on_their_pods_nodes_and_pods_wait_for_missing_claims() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start_cluster(&dir.path().join("data"), &[]).expect("server starts");
    let classes = wait_for(&s, 30, "the default StorageClass", || {
        let out = ok(&s, &["get", "storageclass", "--no-headers"]);
        out.contains("standard").then_some(out)
    });
    assert!(
        classes.contains("standard (default)")
            && classes.contains("capstan.dev/local-path")
            && classes.contains("WaitForFirstConsumer"),
        "{classes}"
    );
    apply(&s, &manifest("vol", "Parallel", "db:v1"));
    let bound = wait_for(&s, 120, "3 pods with bound claims", || {
        let c = claims_and_nodes(&s, "vol");
        (c.len() == 3
            && c.iter()
                .all(|(phase, _, _, node)| phase == "Bound" && !node.is_empty()))
        .then_some(c)
    });
    for (_, volume, pinned, node) in &bound {
        assert!(volume.starts_with("pvc-"), "{bound:?}");
        assert_eq!(
            pinned, node,
            "a volume pinned elsewhere than its pod: {bound:?}"
        );
    }
    let pvc = json(&s, &["get", "pvc", "data-vol-0", "-o", "json"]);
    assert_eq!(pvc["spec"]["storageClassName"], "standard", "{pvc}");
    assert!(
        pvc["metadata"]["annotations"]["volume.kubernetes.io/selected-node"].is_string(),
        "{pvc}"
    );
    let pv = json(&s, &["get", "pv", &bound[0].1, "-o", "json"]);
    assert_eq!(
        pv["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"], "capstan.dev/local-path",
        "{pv}"
    );
    assert_eq!(
        pv["spec"]["persistentVolumeReclaimPolicy"], "Delete",
        "{pv}"
    );

    // A pod naming a claim that does not exist waits, with kube-scheduler's message...
    ok(
        &s,
        &[
            "run",
            "orphan",
            "--image=x",
            r#"--overrides={"spec":{"volumes":[{"name":"v","persistentVolumeClaim":{"claimName":"later"}}],"containers":[{"name":"orphan","image":"x","volumeMounts":[{"name":"v","mountPath":"/d"}]}]}}"#,
        ],
    );
    let message = wait_for(&s, 60, "the orphan's FailedScheduling event", || {
        let out = ok(
            &s,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=orphan,reason=FailedScheduling",
                "-o",
                "jsonpath={.items[0].message}",
            ],
        );
        (!out.is_empty()).then_some(out)
    });
    assert!(
        message.starts_with("0/")
            && message.contains(": persistentvolumeclaim \"later\" not found. preemption: "),
        "{message}"
    );
    // ...and runs once the claim exists, on the node its new volume is pinned to.
    apply(
        &s,
        "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: later}\nspec: {accessModes: [ReadWriteOnce], resources: {requests: {storage: 2Gi}}}\n",
    );
    let (node, volume) = wait_for(&s, 60, "the orphan running with its claim bound", || {
        let p = json(&s, &["get", "pod", "orphan", "-o", "json"]);
        let c = json(&s, &["get", "pvc", "later", "-o", "json"]);
        (p["status"]["phase"] == "Running" && c["status"]["phase"] == "Bound").then(|| {
            (
                p["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                c["spec"]["volumeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
    });
    let pv = json(&s, &["get", "pv", &volume, "-o", "json"]);
    assert_eq!(
        pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
            [0],
        node.as_str(),
        "{pv}"
    );
    assert_eq!(pv["spec"]["capacity"]["storage"], "2Gi", "{pv}");

    // A claim released by its pod's set (`whenScaled: Delete`): its volume (reclaim
    // Delete) goes with it.
    let gone = json(&s, &["get", "pvc", "data-vol-2", "-o", "json"])["spec"]["volumeName"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(gone.starts_with("pvc-"), "{gone}");
    ok(&s, &["scale", "statefulset", "vol", "--replicas=2"]);
    wait_for(&s, 60, "the released volume deleted", || {
        let (found, _, _) = s.kubectl(&["get", "pv", &gone]).expect("kubectl runs");
        (!found).then_some(())
    });
}
