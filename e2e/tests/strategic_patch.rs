//! Strategic merge patch through stock kubectl: client-side `apply` of an updated manifest,
//! `patch` (default type), `set image`, `rollout restart`, `edit` (with a sed script as
//! `KUBE_EDITOR`), `label --overwrite`, `annotate`, and the Status of bad patches.

use e2e::ServerProcess;
use serde_json::{Value, json};

const V1: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: x
  labels: {app: x, tier: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
      - name: c
        image: nginx:1
        ports: [{containerPort: 80}, {containerPort: 81}]
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
      - name: old
        image: busybox
"#;

const V2: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: x
  labels: {app: x}
spec:
  replicas: 2
  selector: {matchLabels: {app: x}}
  template:
    metadata: {labels: {app: x}}
    spec:
      containers:
      - name: c
        image: nginx:1.27
        ports: [{containerPort: 80}]
        env: [{name: A, value: "1"}, {name: C, value: "3"}]
      - name: side
        image: sidecar:1
"#;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn ok(s: &ServerProcess, args: &[&str]) -> String {
    let (ok, out, err) = s.kubectl(args).expect("kubectl runs");
    assert!(
        ok,
        "kubectl {args:?} failed: {err}\nserver log: {}",
        s.log()
    );
    out
}

fn apply(s: &ServerProcess, manifest: &str) -> String {
    let (ok, out, err) = s
        .kubectl_as(&s.kubeconfig, &["apply", "-f", "-"], Some(manifest))
        .expect("kubectl runs");
    assert!(ok, "kubectl apply failed: {err}\nserver log: {}", s.log());
    out
}

fn deployment(s: &ServerProcess) -> Value {
    serde_json::from_str(&ok(s, &["get", "deploy", "x", "-o", "json"])).expect("json")
}

fn containers(d: &Value) -> Vec<(String, String)> {
    d["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap_or("").to_owned(),
                c["image"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

#[test]
fn client_side_apply_updates_with_strategic_merge_patch() {
    let (_dir, s) = server();
    assert!(apply(&s, V1).contains("deployment.apps/x created"));
    assert!(apply(&s, V2).contains("deployment.apps/x configured"));
    let d = deployment(&s);
    assert_eq!(d["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(d["spec"]["replicas"], json!(2));
    assert_eq!(
        containers(&d),
        vec![
            ("c".into(), "nginx:1.27".into()),
            ("side".into(), "sidecar:1".into())
        ]
    );
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        c["env"],
        json!([{"name": "A", "value": "1"}, {"name": "C", "value": "3"}])
    );
    assert_eq!(
        c["ports"],
        json!([{"containerPort": 80, "protocol": "TCP"}])
    );
    // Defaults of the surviving container are kept (merged, not replaced).
    assert_eq!(c["imagePullPolicy"], json!("IfNotPresent"));
    let last = d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
        .as_str()
        .expect("last-applied annotation");
    assert!(last.contains("nginx:1.27"), "{last}");
    // Applying the same manifest again changes nothing.
    assert!(apply(&s, V2).contains("deployment.apps/x unchanged"));
}

#[test]
fn patch_set_image_restart_edit_label_and_annotate() {
    let (_dir, s) = server();
    apply(&s, V2);
    ok(
        &s,
        &[
            "patch",
            "deploy",
            "x",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"name":"c","image":"nginx:2"}]}}}}"#,
        ],
    );
    assert_eq!(
        containers(&deployment(&s)),
        vec![
            ("c".into(), "nginx:2".into()),
            ("side".into(), "sidecar:1".into())
        ]
    );

    ok(&s, &["set", "image", "deploy/x", "c=nginx:3"]);
    assert_eq!(containers(&deployment(&s))[0].1, "nginx:3");

    ok(&s, &["rollout", "restart", "deploy/x"]);
    let d = deployment(&s);
    assert!(
        d["spec"]["template"]["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]
            .is_string(),
        "{d}"
    );
    assert_eq!(containers(&d).len(), 2);

    let (edited, out, err) = s
        .kubectl_env(
            &[("KUBE_EDITOR", "sed -i s/replicas:\\ 2/replicas:\\ 5/")],
            &["edit", "deploy", "x"],
        )
        .expect("kubectl runs");
    assert!(edited, "kubectl edit failed: {out} {err}");
    assert!(out.contains("deployment.apps/x edited"), "{out}");
    assert_eq!(deployment(&s)["spec"]["replicas"], json!(5));

    ok(&s, &["label", "deploy", "x", "app=y", "--overwrite"]);
    ok(&s, &["annotate", "deploy", "x", "note=hi"]);
    let d = deployment(&s);
    assert_eq!(d["metadata"]["labels"]["app"], json!("y"));
    assert_eq!(d["metadata"]["annotations"]["note"], json!("hi"));
}

#[test]
fn bad_strategic_patches_get_a_status() {
    let (_dir, s) = server();
    apply(&s, V2);
    let (done, _, err) = s
        .kubectl(&["patch", "deploy", "x", "-p", "[1]"])
        .expect("kubectl runs");
    assert!(!done);
    assert!(
        err.contains(
            "Error from server (BadRequest): json: cannot unmarshal array into Go value of type map[string]interface {}"
        ),
        "{err}"
    );
    let (done, _, err) = s
        .kubectl(&[
            "patch",
            "deploy",
            "x",
            "-p",
            r#"{"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}}"#,
        ])
        .expect("kubectl runs");
    assert!(!done);
    assert!(
        err.contains("does not contain declared merge key: name"),
        "{err}"
    );
    let (done, _, err) = s
        .kubectl(&[
            "patch",
            "deploy",
            "x",
            "-p",
            r#"{"spec":{"strategy":{"$retainKeys":["type"],"rollingUpdate":{}}}}"#,
        ])
        .expect("kubectl runs");
    assert!(!done);
    assert!(
        err.contains("Error from server (BadRequest): invalid patch format of retainKeys"),
        "{err}"
    );
    // The object is untouched.
    assert_eq!(containers(&deployment(&s))[0].1, "nginx:1.27");
}
