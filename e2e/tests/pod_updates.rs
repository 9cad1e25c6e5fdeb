//! What an update of a Pod may change, as kube-apiserver v1.33's `ValidatePodUpdate` allows it,
//! driven by stock kubectl and curl: `kubectl replace` renaming a container or dropping the
//! service-account volume is refused with upstream's `spec: Forbidden: pod updates may not
//! change fields other than …` (exit code 1) followed by a diff of the specs; `kubectl set
//! image`, `kubectl label`/`annotate`, an added toleration and a lowered
//! `activeDeadlineSeconds` are accepted; removing a toleration, raising or unsetting
//! `activeDeadlineSeconds` and adding a scheduling gate are refused with upstream's field
//! errors; the raw Status body is 422 `Invalid` with the cause on field `spec`.

use std::path::Path;
use std::process::Command;

use e2e::ServerProcess;
use e2e::cli::{cluster, json, ok, wait_for};
use serde_json::{Value, json};

/// Upstream's message for a change outside the updatable fields, up to its diff.
const FORBIDDEN: &str = "spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Runs stock kubectl and returns (exit code, stdout, stderr).
fn kubectl_code(s: &ServerProcess, cache: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
        .arg(format!("--cache-dir={}", cache.display()))
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl patch pod <name> --type=json -p <patch>`: (success, stderr).
fn json_patch(s: &ServerProcess, name: &str, patch: &Value) -> (bool, String) {
    let (done, _, err) = s
        .kubectl(&[
            "patch",
            "pod",
            name,
            "--type=json",
            "-p",
            &patch.to_string(),
        ])
        .expect("kubectl runs");
    (done, err)
}

/// Writes `pod` to a file and `kubectl replace`s it: (exit code, stderr).
fn replace(s: &ServerProcess, dir: &Path, pod: &Value) -> (i32, String) {
    let file = dir.join("pod.json");
    std::fs::write(&file, pod.to_string()).expect("write manifest");
    let (code, _, err) = kubectl_code(
        s,
        &dir.join("cache"),
        &["replace", "-f", &file.to_string_lossy()],
    );
    (code, err)
}

#[test]
fn kubectl_changes_to_a_pod_are_allowed_or_refused_as_upstream() {
    let (dir, s) = cluster();
    wait_for(&s, 60, "the default ServiceAccount", || {
        s.kubectl(&["get", "serviceaccount", "default"])
            .ok()
            .filter(|(found, _, _)| *found)
    });
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n  tolerations:\n  - key: dedicated\n    operator: Equal\n    value: web\n    effect: NoSchedule\n";
    let (made, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(made, "{err}");
    // Once bound, only the node's status writes change the stored pod.
    wait_for(&s, 60, "the pod to be bound", || {
        let pod = json(&s, &["get", "pod", "web", "-o", "json"]);
        pod["spec"]["nodeName"]
            .as_str()
            .is_some_and(|n| !n.is_empty())
            .then_some(())
    });
    let mut current = json(&s, &["get", "pod", "web", "-o", "json"]);
    if let Some(m) = current["metadata"].as_object_mut() {
        m.remove("resourceVersion");
    }

    // Renaming a container: refused, with the diff after upstream's first line.
    let mut renamed = current.clone();
    renamed["spec"]["containers"][0]["name"] = json!("renamed");
    let (code, err) = replace(&s, dir.path(), &renamed);
    assert_eq!(code, 1, "{err}");
    let first = format!("The Pod \"web\" is invalid: {FORBIDDEN}\n  core.PodSpec{{\n");
    assert!(err.starts_with(&first), "{err}");
    assert!(err.contains("- \tContainers:"), "{err}");
    assert!(err.contains("+ \tContainers:"), "{err}");
    assert!(err.contains(r#""name":"renamed""#), "{err}");

    // Dropping the service-account volume (and its mount): refused.
    let sa_volume = current["spec"]["volumes"]
        .as_array()
        .and_then(|v| v.first())
        .and_then(|v| v["name"].as_str())
        .expect("the ServiceAccount admission's volume")
        .to_owned();
    assert!(sa_volume.starts_with("kube-api-access-"), "{sa_volume}");
    let mut dropped = current.clone();
    if let Some(spec) = dropped["spec"].as_object_mut() {
        spec.remove("volumes");
    }
    if let Some(c) = dropped["spec"]["containers"][0].as_object_mut() {
        c.remove("volumeMounts");
    }
    let (code, err) = replace(&s, dir.path(), &dropped);
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with(&first), "{err}");
    assert!(err.contains("- \tVolumes:"), "{err}");
    assert!(err.contains(&sa_volume), "{err}");

    // metadata.generation: 1 on create, one more per spec change (v1.33, not feature-gated);
    // refused updates, labels and annotations leave it.
    let generation = |s: &ServerProcess| {
        json(s, &["get", "pod", "web", "-o", "json"])["metadata"]["generation"].as_i64()
    };
    assert_eq!(generation(&s), Some(1));

    // A replace with the image changed only: accepted.
    let mut image = current.clone();
    image["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    let (code, err) = replace(&s, dir.path(), &image);
    assert_eq!(code, 0, "{err}");

    // kubectl set image, label and annotate: accepted.
    ok(&s, &["set", "image", "pod/web", "app=nginx:1.29"]);
    let image = ok(
        &s,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.spec.containers[0].image}",
        ],
    );
    assert_eq!(image, "nginx:1.29");
    ok(&s, &["label", "pod", "web", "tier=front"]);
    ok(&s, &["annotate", "pod", "web", "note=hello"]);
    assert_eq!(generation(&s), Some(3));

    // Tolerations: additions only.
    let added = json!([{ "op": "add", "path": "/spec/tolerations/-", "value": {
        "key": "gpu", "operator": "Exists", "effect": "NoSchedule" } }]);
    let (done, err) = json_patch(&s, "web", &added);
    assert!(done, "adding a toleration: {err}");
    let tolerations = json(&s, &["get", "pod", "web", "-o", "json"])["spec"]["tolerations"]
        .as_array()
        .map_or(0, Vec::len);
    let removed = json!([{ "op": "remove", "path": "/spec/tolerations/0" }]);
    let (done, err) = json_patch(&s, "web", &removed);
    assert!(!done);
    assert!(
        err.contains("The Pod \"web\" is invalid: spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds"),
        "{err}"
    );
    let after = json(&s, &["get", "pod", "web", "-o", "json"])["spec"]["tolerations"]
        .as_array()
        .map_or(0, Vec::len);
    assert_eq!(after, tolerations);

    // activeDeadlineSeconds: set when unset, lowered; never raised nor unset.
    let deadline =
        |v: Value| json!([{ "op": "add", "path": "/spec/activeDeadlineSeconds", "value": v }]);
    let (done, err) = json_patch(&s, "web", &deadline(json!(600)));
    assert!(done, "setting activeDeadlineSeconds: {err}");
    let (done, err) = json_patch(&s, "web", &deadline(json!(300)));
    assert!(done, "lowering activeDeadlineSeconds: {err}");
    let (done, err) = json_patch(&s, "web", &deadline(json!(900)));
    assert!(!done);
    assert!(
        err.contains("spec.activeDeadlineSeconds: Invalid value: 900: must be less than or equal to previous value"),
        "{err}"
    );
    let unset = json!([{ "op": "remove", "path": "/spec/activeDeadlineSeconds" }]);
    let (done, err) = json_patch(&s, "web", &unset);
    assert!(!done);
    assert!(
        err.contains("spec.activeDeadlineSeconds: Invalid value: \"null\": must not update from a positive integer to nil value"),
        "{err}"
    );

    // Scheduling gates can only be removed.
    let gate = json!([{ "op": "add", "path": "/spec/schedulingGates", "value": [{ "name": "example.com/late" }] }]);
    let (done, err) = json_patch(&s, "web", &gate);
    assert!(!done);
    assert!(
        err.contains("spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate 'example.com/late'"),
        "{err}"
    );

    // The node's status writes still go through.
    wait_for(&s, 60, "the pod to run", || {
        let pod = json(&s, &["get", "pod", "web", "-o", "json"]);
        (pod["status"]["phase"] == "Running").then_some(())
    });
}

#[test]
fn the_status_of_a_refused_pod_update_is_upstreams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: raw\nspec:\n  containers:\n  - name: app\n    image: nginx:1.27\n";
    let (made, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(made, "{err}");
    let mut pod = json(&s, &["get", "pod", "raw", "-o", "json"]);
    pod["spec"]["containers"][0]["name"] = json!("other");
    let file = dir.path().join("body.json");
    std::fs::write(&file, pod.to_string()).expect("write body");
    let (code, body) = curl_put(&s, &file, "/api/v1/namespaces/default/pods/raw");
    assert_eq!(code, "422", "{body}");
    let status: Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["status"], "Failure");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["code"], 422);
    assert_eq!(status["details"]["name"], "raw");
    assert_eq!(status["details"]["kind"], "Pod");
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with(&format!(
            "Pod \"raw\" is invalid: {FORBIDDEN}\n  core.PodSpec{{\n"
        )),
        "{message}"
    );
    let cause = &status["details"]["causes"][0];
    assert_eq!(cause["field"], "spec");
    assert_eq!(cause["reason"], "FieldValueForbidden");
    let cause_message = cause["message"].as_str().unwrap_or("");
    assert!(
        cause_message.starts_with(FORBIDDEN.trim_start_matches("spec: ")),
        "{cause_message}"
    );
    assert!(cause_message.ends_with("  }\n"), "{cause_message}");
    // The stored pod is unchanged.
    let name = ok(
        &s,
        &[
            "get",
            "pod",
            "raw",
            "-o",
            "jsonpath={.spec.containers[0].name}",
        ],
    );
    assert_eq!(name, "app");

    // The same body through `pods/status`: accepted, and the spec is the stored one (as
    // upstream's status strategy, which takes the spec from the old object).
    let (code, body) = curl_put(&s, &file, "/api/v1/namespaces/default/pods/raw/status");
    assert_eq!(code, "200", "{body}");
    let written: Value = serde_json::from_str(&body).expect("the pod");
    assert_eq!(written["spec"]["containers"][0]["name"], "app", "{body}");
}

/// `curl -X PUT` of the JSON file `body` to `path` as the admin: (status code, body).
fn curl_put(s: &ServerProcess, body: &Path, path: &str) -> (String, String) {
    let pki = s.data_dir.join("pki");
    let out = Command::new("curl")
        .args(["-s", "-X", "PUT", "-H", "Content-Type: application/json"])
        .arg("--cacert")
        .arg(pki.join("ca.crt"))
        .arg("--cert")
        .arg(pki.join("admin.crt"))
        .arg("--key")
        .arg(pki.join("admin.key"))
        .arg("--data-binary")
        .arg(format!("@{}", body.display()))
        .args(["-w", "\n%{http_code}"])
        .arg(format!("{}{path}", s.url))
        .output()
        .expect("curl runs");
    let text = String::from_utf8(out.stdout).expect("utf-8 body");
    let (body, code) = text.rsplit_once('\n').expect("status line");
    (code.to_owned(), body.to_owned())
}

/// Writes `manifest` to a file and `kubectl create -f`s it: (exit code, stderr).
fn create(s: &ServerProcess, dir: &Path, manifest: &Value) -> (i32, String) {
    let file = dir.join("create.json");
    std::fs::write(&file, manifest.to_string()).expect("write manifest");
    let (code, _, err) = kubectl_code(
        s,
        &dir.join("cache"),
        &["create", "-f", &file.to_string_lossy()],
    );
    (code, err)
}

#[test]
fn bad_tolerations_are_refused_with_upstreams_messages() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"},
        "spec": {
            "selector": {"matchLabels": {"app": "x"}},
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "containers": [{"name": "app", "image": "nginx:1.27"}],
                    "tolerations": [{"key": "dedicated", "operator": "In", "value": "gpu"}]
                }
            }
        }
    });
    let (code, err) = create(&s, dir.path(), &deployment);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "The Deployment \"x\" is invalid: spec.template.spec.tolerations[0].operator: Unsupported value: \"In\": supported values: \"Equal\", \"Exists\""
        ),
        "{err}"
    );
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t"},
        "spec": {
            "containers": [{"name": "app", "image": "nginx:1.27"}],
            "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}]
        }
    });
    let (code, err) = create(&s, dir.path(), &pod);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains(
            "The Pod \"t\" is invalid: spec.tolerations[0].effect: Invalid value: \"NoSchedule\": effect must be 'NoExecute' when `tolerationSeconds` is set"
        ),
        "{err}"
    );
    // Neither was stored; a valid toleration is accepted.
    let (code, _, _) = kubectl_code(&s, &dir.path().join("cache"), &["get", "pod", "t"]);
    assert_eq!(code, 1);
    let mut fine = pod;
    fine["spec"]["tolerations"][0]["effect"] = json!("NoExecute");
    let (code, err) = create(&s, dir.path(), &fine);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn pod_status_writes_are_validated_as_upstream() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    // A gated pod is never scheduled: no node writes its status while the test does.
    let manifest = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: st\nspec:\n  restartPolicy: Never\n  schedulingGates:\n  - name: example.com/hold\n  containers:\n  - name: app\n    image: nginx:1.27\n";
    let (made, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(made, "{err}");
    let file = dir.path().join("status.json");
    let path = "/api/v1/namespaces/default/pods/st/status";
    let put_status = |status: Value| {
        let mut pod = json(&s, &["get", "pod", "st", "-o", "json"]);
        pod["status"] = status;
        std::fs::write(&file, pod.to_string()).expect("write body");
        curl_put(&s, &file, path)
    };

    // A bad nominated node name and a changed QoS class: 422 with both causes.
    let (code, body) = put_status(json!({
        "phase": "Pending", "qosClass": "Guaranteed", "nominatedNodeName": "Node_1"
    }));
    assert_eq!(code, "422", "{body}");
    let status: Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(status["reason"], "Invalid");
    assert_eq!(status["details"]["kind"], "Pod");
    let causes = status["details"]["causes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let fields: Vec<&str> = causes.iter().filter_map(|c| c["field"].as_str()).collect();
    assert_eq!(
        fields,
        ["status.nominatedNodeName", "status.qosClass"],
        "{body}"
    );
    assert_eq!(causes[1]["reason"], "FieldValueInvalid");
    assert_eq!(
        causes[1]["message"],
        "Invalid value: \"Guaranteed\": field is immutable"
    );
    let message = status["message"].as_str().unwrap_or("");
    assert!(
        message.starts_with("Pod \"st\" is invalid: [status.nominatedNodeName: Invalid value: \"Node_1\": a lowercase RFC 1123 subdomain"),
        "{message}"
    );

    // A status without qosClass keeps the stored one; podIP is authoritative over podIPs.
    let (code, body) = put_status(json!({
        "phase": "Pending", "podIP": "10.0.0.7", "podIPs": [{"ip": "10.0.0.8"}],
        "containerStatuses": [{"name": "app", "image": "nginx:1.27", "imageID": "", "ready": false,
            "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]
    }));
    assert_eq!(code, "200", "{body}");
    let written: Value = serde_json::from_str(&body).expect("the pod");
    assert_eq!(written["status"]["qosClass"], "BestEffort", "{body}");
    assert_eq!(
        written["status"]["podIPs"],
        json!([{"ip": "10.0.0.7"}]),
        "{body}"
    );

    // The request's labels and annotations stand on a pod status write (upstream's pod
    // status strategy resets only spec, deletionTimestamp and ownerReferences).
    let patch = r#"{"metadata":{"labels":{"via":"status"},"annotations":{"note":"kept"}},"status":{"phase":"Pending"}}"#;
    ok(
        &s,
        &[
            "patch",
            "pod",
            "st",
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ],
    );
    let meta = json(&s, &["get", "pod", "st", "-o", "json"]);
    assert_eq!(meta["metadata"]["labels"]["via"], "status", "{meta}");
    assert_eq!(meta["metadata"]["annotations"]["note"], "kept", "{meta}");
    // So do its finalizers; a pod deleted at once (grace 0) whose last finalizer a status
    // write removes is gone.
    let fin = dir.path().join("fin.yaml");
    std::fs::write(
        &fin,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: fin\nspec:\n  schedulingGates:\n  - name: example.com/hold\n  containers:\n  - name: app\n    image: nginx:1.27\n",
    )
    .expect("write manifest");
    ok(&s, &["create", "-f", &fin.to_string_lossy()]);
    let status_patch = |kind: &str, patch: &str| {
        let kind = format!("--type={kind}");
        ok(
            &s,
            &[
                "patch",
                "pod",
                "fin",
                "--subresource=status",
                &kind,
                "-p",
                patch,
            ],
        )
    };
    status_patch(
        "merge",
        r#"{"metadata":{"finalizers":["example.com/keep"]}}"#,
    );
    let get = |path: &str| {
        ok(
            &s,
            &["get", "pod", "fin", "-o", &format!("jsonpath={path}")],
        )
    };
    assert_eq!(get("{.metadata.finalizers}"), r#"["example.com/keep"]"#);
    ok(
        &s,
        &[
            "delete",
            "pod",
            "fin",
            "--grace-period=0",
            "--force",
            "--wait=false",
        ],
    );
    assert!(
        !get("{.metadata.deletionTimestamp}").is_empty(),
        "the finalizer holds the pod"
    );
    status_patch("json", r#"[{"op":"remove","path":"/metadata/finalizers"}]"#);
    let (code, _, err) = kubectl_code(&s, &dir.path().join("cache"), &["get", "pod", "fin"]);
    assert_eq!(
        code, 1,
        "the pod is gone once its last finalizer is removed: {err}"
    );

    // With restartPolicy Never, a terminated container may not run again.
    let (code, body) = put_status(json!({
        "phase": "Running", "podIP": "10.0.0.7",
        "containerStatuses": [{"name": "app", "image": "nginx:1.27", "imageID": "", "ready": true,
            "restartCount": 1, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
    }));
    assert_eq!(code, "422", "{body}");
    let status: Value = serde_json::from_str(&body).expect("a Status");
    assert_eq!(
        status["message"],
        "Pod \"st\" is invalid: status.containerStatuses[0].state: Forbidden: may not be transitioned to non-terminated state"
    );
    assert_eq!(
        status["details"]["causes"][0]["reason"],
        "FieldValueForbidden"
    );

    // The QoS class is computed on create, as upstream's ComputePodQOS.
    let limited = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: g\nspec:\n  schedulingGates:\n  - name: example.com/hold\n  containers:\n  - name: app\n    image: nginx:1.27\n    resources:\n      limits: {cpu: 100m, memory: 64Mi}\n  - name: side\n    image: busybox\n    resources:\n      requests: {cpu: 50m}\n      limits: {cpu: 50m, memory: 32Mi}\n";
    let (made, _, err) = s
        .kubectl_as(&s.kubeconfig, &["create", "-f", "-"], Some(limited))
        .expect("kubectl runs");
    assert!(made, "{err}");
    let qos = ok(
        &s,
        &["get", "pod", "g", "-o", "jsonpath={.status.qosClass}"],
    );
    assert_eq!(qos, "Guaranteed");
}
