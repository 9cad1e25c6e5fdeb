//! Server-side apply through stock kubectl: `apply --server-side` create and update, a
//! conflict with a second field manager, `--force-conflicts`, managedFields shown by
//! `--show-managed-fields`, and migrating a client-side-applied object.

use e2e::ServerProcess;
use serde_json::Value;

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
        env: [{name: A, value: "1"}, {name: B, value: "2"}]
"#;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn apply(s: &ServerProcess, manifest: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["apply", "-f", "-"];
    args.extend_from_slice(extra);
    s.kubectl_as(&s.kubeconfig, &args, Some(manifest))
        .expect("kubectl runs")
}

fn get(s: &ServerProcess) -> Value {
    let (ok, out, err) = s
        .kubectl(&[
            "get",
            "deployment",
            "x",
            "-o",
            "json",
            "--show-managed-fields",
        ])
        .expect("kubectl runs");
    assert!(ok, "{err}");
    serde_json::from_str(&out).expect("json")
}

fn managers(obj: &Value) -> Vec<(String, String)> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|l| {
            l.iter()
                .map(|e| {
                    (
                        e["manager"].as_str().unwrap_or("").to_owned(),
                        e["operation"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn server_side_apply_conflicts_force_and_managed_fields() {
    let (_dir, s) = server();
    let (ok, out, err) = apply(&s, V1, &["--server-side"]);
    assert!(ok, "{err}\n{}", s.log());
    assert!(out.contains("serverside-applied"), "{out}");
    let obj = get(&s);
    assert_eq!(managers(&obj), vec![("kubectl".into(), "Apply".into())]);

    // Update: image and replicas change, label tier and env B are no longer applied.
    let v2 = V1
        .replace("nginx:1", "nginx:1.27")
        .replace("replicas: 1", "replicas: 2")
        .replace(", tier: web", "")
        .replace(r#", {name: B, value: "2"}"#, "");
    let (ok, _, err) = apply(&s, &v2, &["--server-side"]);
    assert!(ok, "{err}");
    let obj = get(&s);
    assert_eq!(obj["spec"]["replicas"], 2);
    assert_eq!(obj["metadata"]["labels"], serde_json::json!({"app": "x"}));
    let c = &obj["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["image"], "nginx:1.27");
    assert_eq!(c["env"], serde_json::json!([{"name": "A", "value": "1"}]));

    // A second manager changing replicas conflicts, naming the owner.
    let v3 = v2.replace("replicas: 2", "replicas: 4");
    let (ok, _, err) = apply(&s, &v3, &["--server-side", "--field-manager=other"]);
    assert!(!ok);
    assert!(
        err.contains(r#"Apply failed with 1 conflict: conflict with "kubectl": .spec.replicas"#),
        "{err}"
    );
    assert_eq!(get(&s)["spec"]["replicas"], 2);

    // --force-conflicts takes ownership.
    let (ok, _, err) = apply(
        &s,
        &v3,
        &[
            "--server-side",
            "--field-manager=other",
            "--force-conflicts",
        ],
    );
    assert!(ok, "{err}");
    let obj = get(&s);
    assert_eq!(obj["spec"]["replicas"], 4);
    let m = managers(&obj);
    assert!(m.contains(&("kubectl".into(), "Apply".into())), "{m:?}");
    assert!(m.contains(&("other".into(), "Apply".into())), "{m:?}");
    let (ok, out, _) = s
        .kubectl(&[
            "get",
            "deployment",
            "x",
            "-o",
            "yaml",
            "--show-managed-fields",
        ])
        .expect("kubectl runs");
    assert!(
        ok && out.contains("manager: other") && out.contains("fieldsV1:"),
        "{out}"
    );
}

#[test]
fn client_side_apply_migrates_to_server_side() {
    let (_dir, s) = server();
    let (ok, _, err) = apply(&s, V1, &[]);
    assert!(ok, "{err}");
    let obj = get(&s);
    assert!(
        managers(&obj).contains(&("kubectl-client-side-apply".into(), "Update".into())),
        "{:?}",
        managers(&obj)
    );
    let v2 = V1.replace("replicas: 1", "replicas: 3");
    let (ok, _, err) = apply(&s, &v2, &["--server-side"]);
    assert!(ok, "{err}\n{}", s.log());
    let obj = get(&s);
    assert_eq!(obj["spec"]["replicas"], 3);
    let m = managers(&obj);
    assert!(m.contains(&("kubectl".into(), "Apply".into())), "{m:?}");
}

#[test]
fn apply_bodies_with_managed_fields_are_rejected() {
    let (_dir, s) = server();
    let body = V1.replace(
        "  name: x\n",
        "  name: x\n  managedFields: [{manager: m, operation: Apply}]\n",
    );
    let (ok, _, err) = apply(&s, &body, &["--server-side"]);
    assert!(!ok);
    assert!(err.contains("managedFields"), "{err}");
}
