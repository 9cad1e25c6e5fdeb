//! Apply workflows through stock kubectl: `apply --prune -l` (kubectl lists and deletes
//! client-side), `kubectl diff` (client- and server-side: exit 1, nothing changes), bad
//! patches (upstream's Status codes, nothing stored), and the managedFields entries of
//! subresource writes (`kubectl scale`, `patch --subresource=status`).

use std::process::Command;

use e2e::ServerProcess;
use serde_json::Value;

fn server() -> (tempfile::TempDir, ServerProcess) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = ServerProcess::start(&dir.path().join("data")).expect("server starts");
    (dir, s)
}

fn configmap(name: &str, app: &str, value: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels: {{app: \"{app}\"}}\ndata:\n  k: \"{value}\"\n"
    )
}

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: d
  labels: {app: d}
spec:
  replicas: 1
  selector: {matchLabels: {app: d}}
  template:
    metadata: {labels: {app: d}}
    spec:
      containers:
      - name: c
        image: nginx:1
"#;

fn ok(s: &ServerProcess, args: &[&str], stdin: Option<&str>) -> String {
    let (done, out, err) = s.kubectl_as(&s.kubeconfig, args, stdin).expect("kubectl");
    assert!(done, "kubectl {args:?}: {err}\n{}", s.log());
    out
}

fn get_json(s: &ServerProcess, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json", "--show-managed-fields"]);
    serde_json::from_str(&ok(s, &all, None)).expect("json")
}

/// Runs kubectl and returns its exit code, stdout and stderr.
fn kubectl_code(s: &ServerProcess, args: &[&str]) -> (i32, String, String) {
    let out = Command::new("kubectl")
        .arg(format!("--kubeconfig={}", s.kubeconfig.display()))
        .arg(format!("--cache-dir={}", s.cache_dir.display()))
        .args(args)
        .output()
        .expect("kubectl runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn config_maps(s: &ServerProcess) -> Vec<String> {
    let list = get_json(s, &["configmaps", "-l", "app=x"]);
    let mut names: Vec<String> = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_owned))
        .collect();
    names.sort();
    names
}

#[test]
fn apply_prune_removes_objects_that_left_the_manifest() {
    let (dir, s) = server();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests).expect("mkdir");
    for name in ["a", "b", "c"] {
        std::fs::write(
            manifests.join(format!("{name}.yaml")),
            configmap(name, "x", "1"),
        )
        .expect("write");
    }
    // An object with another label is never pruned.
    ok(
        &s,
        &["apply", "-f", "-"],
        Some(&configmap("other", "y", "1")),
    );
    let dir_arg = manifests.display().to_string();
    ok(&s, &["apply", "-l", "app=x", "-f", &dir_arg], None);
    assert_eq!(config_maps(&s), ["a", "b", "c"]);

    std::fs::remove_file(manifests.join("b.yaml")).expect("rm");
    let out = ok(
        &s,
        &["apply", "--prune", "-l", "app=x", "-f", &dir_arg],
        None,
    );
    assert!(out.contains("configmap/b pruned"), "{out}");
    assert_eq!(config_maps(&s), ["a", "c"]);
    get_json(&s, &["configmap", "other"]);
}

#[test]
fn diff_shows_changes_exits_1_and_changes_nothing() {
    let (dir, s) = server();
    ok(&s, &["apply", "-f", "-"], Some(DEPLOYMENT));
    let before = get_json(&s, &["deployment", "d"]);
    let file = dir.path().join("d.yaml");
    std::fs::write(&file, DEPLOYMENT.replace("nginx:1", "nginx:1.27")).expect("write");
    let file = file.display().to_string();

    for extra in [&[][..], &["--server-side"][..]] {
        let mut args = vec!["diff", "-f", &file];
        args.extend_from_slice(extra);
        let (code, out, err) = kubectl_code(&s, &args);
        assert_eq!(code, 1, "diff {extra:?}: {out}\n{err}\n{}", s.log());
        assert!(out.contains("-      - image: nginx:1\n"), "{out}");
        assert!(out.contains("+      - image: nginx:1.27\n"), "{out}");
        let after = get_json(&s, &["deployment", "d"]);
        assert_eq!(
            after["metadata"]["resourceVersion"], before["metadata"]["resourceVersion"],
            "diff {extra:?} changed the object"
        );
        assert_eq!(after["spec"], before["spec"]);
    }
    // No difference: exit 0 and no output.
    std::fs::write(&file, DEPLOYMENT).expect("write");
    let (code, out, err) = kubectl_code(&s, &["diff", "-f", &file]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.is_empty(), "{out}");
}

#[test]
fn bad_patches_get_upstream_statuses_and_store_nothing() {
    let (_dir, s) = server();
    ok(&s, &["apply", "-f", "-"], Some(DEPLOYMENT));
    let before = get_json(&s, &["deployment", "d"]);
    let rv = before["metadata"]["resourceVersion"].clone();

    let cases: [(&[&str], &str); 5] = [
        // Not JSON at all.
        (
            &["patch", "deploy", "d", "--type=merge", "-p", "{"],
            "Error from server (BadRequest)",
        ),
        // The name on the URL wins: a patch that renames the object is a 400.
        (
            &[
                "patch",
                "deploy",
                "d",
                "--type=merge",
                "-p",
                r#"{"metadata":{"name":"e"}}"#,
            ],
            "Error from server (BadRequest): the name of the object (e) does not match the name on the URL (d)",
        ),
        (
            &[
                "patch",
                "deploy",
                "d",
                "--type=json",
                "-p",
                r#"[{"op":"replace","path":"/metadata/name","value":"e"}]"#,
            ],
            "Error from server (BadRequest): the name of the object (e) does not match the name on the URL (d)",
        ),
        // A failed JSON patch `test` operation.
        (
            &[
                "patch",
                "deploy",
                "d",
                "--type=json",
                "-p",
                r#"[{"op":"test","path":"/spec/replicas","value":5},{"op":"replace","path":"/spec/replicas","value":5}]"#,
            ],
            "The request is invalid: : testing value /spec/replicas failed: test failed",
        ),
        // A JSON patch that is not a list of operations.
        (
            &["patch", "deploy", "d", "--type=json", "-p", r#"{"op":"x"}"#],
            "Error from server (BadRequest): json: cannot unmarshal object into Go value of type jsonpatch.Patch",
        ),
    ];
    for (args, want) in cases {
        let (done, out, err) = s.kubectl_as(&s.kubeconfig, args, None).expect("kubectl");
        assert!(!done, "{args:?} succeeded: {out}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // A merge patch that changes the kind: upstream decodes the patched object by its own
    // kind and answers 422 on `patch`.
    let (done, _, err) = s
        .kubectl(&[
            "patch",
            "deploy",
            "d",
            "--type=merge",
            "-p",
            r#"{"kind":"Pod"}"#,
        ])
        .expect("kubectl");
    assert!(!done);
    assert!(
        err.starts_with("The request is invalid: patch: Invalid value: \"{")
            && err.contains(r#"no kind "Pod" is registered for version "apps/v1""#),
        "{err}"
    );
    // A strategic merge patch decodes into the typed object: the kind is ignored, and a
    // patch that changes nothing is not stored.
    let (done, out, err) = s
        .kubectl(&["patch", "deploy", "d", "-p", r#"{"kind":"Pod"}"#])
        .expect("kubectl");
    assert!(done, "{err}");
    assert!(
        out.contains("deployment.apps/d patched (no change)"),
        "{out}"
    );

    let after = get_json(&s, &["deployment", "d"]);
    assert_eq!(
        after["metadata"]["resourceVersion"], rv,
        "something was stored"
    );
    assert_eq!(after["spec"]["replicas"], 1);
    assert_eq!(config_maps(&s), Vec::<String>::new());
}

#[test]
fn scale_and_status_writes_record_their_subresource() {
    let (_dir, s) = server();
    ok(&s, &["apply", "--server-side", "-f", "-"], Some(DEPLOYMENT));
    ok(&s, &["scale", "deployment", "d", "--replicas=3"], None);
    ok(
        &s,
        &[
            "patch",
            "deployment",
            "d",
            "--subresource=status",
            "--type=merge",
            "--field-manager=ctrl",
            "-p",
            r#"{"status":{"observedGeneration":7}}"#,
        ],
        None,
    );
    let d = get_json(&s, &["deployment", "d"]);
    assert_eq!(d["spec"]["replicas"], 3);
    assert_eq!(d["status"]["observedGeneration"], 7);
    let entries = d["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields");
    let find = |sub: &str| {
        entries
            .iter()
            .find(|e| e["subresource"] == sub)
            .unwrap_or_else(|| panic!("no {sub} entry in {entries:#?}"))
    };
    let scale = find("scale");
    assert_eq!(scale["manager"], "kubectl");
    assert_eq!(scale["operation"], "Update");
    assert_eq!(scale["apiVersion"], "apps/v1");
    assert_eq!(
        scale["fieldsV1"],
        serde_json::json!({"f:spec": {"f:replicas": {}}})
    );
    let status = find("status");
    assert_eq!(status["manager"], "ctrl");
    assert_eq!(
        status["fieldsV1"],
        serde_json::json!({"f:status": {"f:observedGeneration": {}}})
    );
    // The applier no longer owns spec.replicas.
    let applied = entries
        .iter()
        .find(|e| e["operation"] == "Apply")
        .expect("Apply entry");
    assert!(
        applied["fieldsV1"]["f:spec"].get("f:replicas").is_none(),
        "{applied:#}"
    );
    // Applying another replica count now conflicts with the scale entry, as upstream words it.
    let (done, _, err) = s
        .kubectl_as(
            &s.kubeconfig,
            &["apply", "--server-side", "--field-manager=other", "-f", "-"],
            Some(&DEPLOYMENT.replace("replicas: 1", "replicas: 2")),
        )
        .expect("kubectl");
    assert!(!done);
    assert!(
        err.contains(
            r#"Apply failed with 1 conflict: conflict with "kubectl" with subresource "scale" using apps/v1: .spec.replicas"#
        ),
        "{err}"
    );
}

#[test]
fn server_side_apply_through_the_status_subresource() {
    let (_dir, s) = server();
    ok(&s, &["apply", "--server-side", "-f", "-"], Some(DEPLOYMENT));
    let status = format!("{DEPLOYMENT}status:\n  observedGeneration: 5\n");
    let status = status.replace("replicas: 1", "replicas: 9");
    ok(
        &s,
        &[
            "apply",
            "--server-side",
            "--subresource=status",
            "--field-manager=ctrl",
            "-f",
            "-",
        ],
        Some(&status),
    );
    let d = get_json(&s, &["deployment", "d"]);
    // Only status is written through the subresource.
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(d["status"]["observedGeneration"], 5);
    let entries = d["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields");
    let ctrl = entries
        .iter()
        .find(|e| e["manager"] == "ctrl")
        .unwrap_or_else(|| panic!("{entries:#?}"));
    assert_eq!(ctrl["operation"], "Apply");
    assert_eq!(ctrl["subresource"], "status");
    assert_eq!(
        ctrl["fieldsV1"],
        serde_json::json!({"f:status": {"f:observedGeneration": {}}})
    );
    // The object's own applier keeps its entry.
    assert!(
        entries
            .iter()
            .any(|e| e["manager"] == "kubectl" && e["operation"] == "Apply"),
        "{entries:#?}"
    );
}
